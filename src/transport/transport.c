/* transport.c: which transport serves each peer: shm to the ranks of this node (with the node's
 * windows), ofi to the others (or to every peer when asked). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport.h"

/* The text is short and written only on failures: a spin lock costs nothing on the fast path. */
static void err_lock(tutti__transport_t *tp)
{
    while (__atomic_exchange_n(&tp->errlock, 1, __ATOMIC_ACQUIRE) != 0)
        tutti__cpu_relax();
}

static void err_unlock(tutti__transport_t *tp)
{
    __atomic_store_n(&tp->errlock, 0, __ATOMIC_RELEASE);
}

tutti_status_t tutti__tp_errf(tutti__transport_t *tp, tutti_status_t st, const char *fmt, ...)
{
    char buf[TUTTI__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    err_lock(tp);
    memcpy(tp->err, buf, sizeof buf);
    err_unlock(tp);
    return st;
}

const char *tutti__tp_err(tutti__transport_t *tp, char *buf)
{
    err_lock(tp);
    memcpy(buf, tp->err, TUTTI__ERRLEN);
    err_unlock(tp);
    return buf;
}

tutti_status_t tutti__links_open(tutti__links_t *l, int rank, int size, int nchan,
                                 const char *mode, const tutti__nodes_t *nodes,
                                 const char *ifaddr, tutti__bootstrap_t *bs)
{
    bool use_ofi = strcmp(mode, "ofi") == 0;
    if (strcmp(mode, "shm") == 0 && nodes->nnodes > 1)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "TUTTI_TRANSPORT=shm but the ranks span %d nodes: shared memory only "
                                "reaches ranks of one node; use auto or ofi",
                                nodes->nnodes);
    l->peer_tp = calloc((size_t)size, sizeof *l->peer_tp);
    if (l->peer_tp == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    /* Each decision below depends only on allgathered facts, so every rank makes the same
     * collective calls in the same order. Wherever shm serves a node it brings the node's
     * windows: the direct algorithms use them when the node is the whole job, the hierarchical
     * ones for their node-local steps when it is not. */
    if (!use_ofi && (nodes->local_size > 1 || nodes->nnodes == 1)) {
        l->node_wins = calloc((size_t)nchan - 1, sizeof *l->node_wins);
        if (l->node_wins == NULL)
            return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        TUTTI__CHECK(tutti__shm_create(nchan, bs, nodes->local_ranks, nodes->local_size,
                                       nodes->local_rank, &l->shm, l->node_wins));
        for (int i = 0; i < nodes->local_size; i++)
            if (nodes->local_ranks[i] != rank)
                l->peer_tp[nodes->local_ranks[i]] = l->shm;
        if (l->node_wins[0] == NULL) { /* no shared window after all */
            free(l->node_wins);
            l->node_wins = NULL;
        }
    }
    if ((use_ofi && size > 1) || nodes->nnodes > 1) {
        int *peers = malloc((size_t)size * sizeof(int)), n = 0;
        if (peers == NULL)
            return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        for (int r = 0; r < size; r++)
            if (r != rank && l->peer_tp[r] == NULL)
                peers[n++] = r;
        tutti_status_t st = tutti__ofi_create(rank, size, nchan, bs, peers, n,
                                              nodes->nnodes == 1, ifaddr, &l->ofi);
        if (st == TUTTI_OK)
            for (int i = 0; i < n; i++)
                l->peer_tp[peers[i]] = l->ofi;
        free(peers);
        TUTTI__CHECK(st);
    }
    /* A window serves the whole group only when every rank is here, and on shm. */
    if (nodes->nnodes == 1 && !use_ofi)
        l->wins = l->node_wins;
    return TUTTI_OK;
}

void tutti__links_close(tutti__links_t *l)
{
    if (l->shm != NULL)
        l->shm->ops->destroy(l->shm);
    if (l->ofi != NULL)
        l->ofi->ops->destroy(l->ofi);
    free(l->peer_tp);
    free(l->node_wins); /* the windows themselves belonged to shm */
    *l = (tutti__links_t){0};
}
