/* split.c: sub-communicators: split by color and key (MPI_Comm_split), and a group of a subset
 * of ranks (torch's new_group). Each child is a full communicator with its own transports,
 * ordering and workers; it bootstraps through a TCP store served by its rank 0 on an ephemeral
 * port (none for a child of one rank), whose address travels over the parent together with the
 * salt its secret is derived from. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/sha256.h"
#include "comm.h"

typedef struct member {
    int32_t color, key;
} member_t;

typedef struct rendezvous {
    char ip[64];
    int32_t port;
    uint8_t salt[TUTTI__AUTH_KEY];
} rendezvous_t;

void tutti__comm_child_auth(const tutti_comm_t *parent, const char *label,
                            const uint8_t salt[TUTTI__AUTH_KEY], tutti__auth_t *a)
{
    uint8_t key[TUTTI__AUTH_KEY];
    if (parent->has_secret)
        tutti__auth_derive(parent->secret, label, salt, TUTTI__AUTH_KEY, key);
    else
        memcpy(key, salt, sizeof key);
    tutti__auth_from_key(key, a);
    memset(key, 0, sizeof key);
}

/* gather_all runs an allgather of len bytes per rank on the parent, blocking. */
static tutti_status_t gather_all(tutti_comm_t *parent, const void *mine, void *all, size_t len)
{
    return tutti_allgather(mine, all, len, TUTTI_UINT8, parent, NULL);
}

TUTTI_API tutti_status_t tutti_comm_split(tutti_comm_t *parent, int color, int key,
                                          tutti_comm_t **out)
{
    if (out == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_split: out is NULL");
    *out = NULL;
    if (!tutti__comm_valid(parent))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_split: the parent %p is not a live communicator%s",
                                (void *)parent, tutti__comm_why_not(parent));
    if (color < 0 && color != TUTTI_UNDEFINED)
        return tutti__comm_error(parent, TUTTI_ERR_INVALID_ARG,
                                 "tutti_comm_split: color %d: use a color >= 0, or TUTTI_UNDEFINED "
                                 "to join no new communicator",
                                 color);
    int n = parent->size;
    member_t me = {color, key}, *all = malloc((size_t)n * sizeof *all);
    rendezvous_t rv, *rvs = malloc((size_t)n * sizeof *rvs);
    memset(&rv, 0, sizeof rv);
    tutti__store_t *store = NULL;
    tutti__solo_t *solo = NULL;
    tutti__auth_t auth;
    tutti_status_t st = TUTTI_OK;
    if (all == NULL || rvs == NULL) {
        st = tutti__comm_error(parent, TUTTI_ERR_NO_MEMORY, "tutti_comm_split: out of memory");
        goto done;
    }
    TUTTI__CHECK_GOTO(gather_all(parent, &me, all, sizeof me), st, done);

    /* The child's ranks: same color, ordered by key, then by parent rank. */
    int crank = 0, csize = 0, leader = -1;
    for (int r = 0; r < n && color != TUTTI_UNDEFINED; r++) {
        if (all[r].color != color)
            continue;
        csize++;
        if (all[r].key < key || (all[r].key == key && r < parent->rank))
            crank++;
        bool first = leader < 0 || all[r].key < all[leader].key;
        if (first)
            leader = r;
    }
    /* The child's rank 0 serves its store on a port the kernel picks, on the address its peers
     * reach it at; all ranks then learn the leaders' addresses and salts in one more parent
     * allgather. A child of one rank needs no store. */
    double deadline = tutti__now() + tutti__net_timeout(&parent->net);
    if (color != TUTTI_UNDEFINED && crank == 0 && csize > 1) {
        if (!tutti__random(rv.salt, sizeof rv.salt)) {
            st = tutti__set_error(TUTTI_ERR_SYSTEM, "getrandom: %s", strerror(errno));
            goto fail;
        }
        tutti__comm_child_auth(parent, "tutti split v1", rv.salt, &auth);
        st = tutti__store_open(0, csize, parent->ip, 0, &auth, deadline, &store);
        memset(&auth, 0, sizeof auth);
        if (st < 0)
            goto fail;
        snprintf(rv.ip, sizeof rv.ip, "%s", parent->ip);
        rv.port = tutti__store_port(store);
    }
    st = gather_all(parent, &rv, rvs, sizeof rv);
    memset(&rv, 0, sizeof rv);
    if (st < 0 || color == TUTTI_UNDEFINED)
        goto done;
    char where[128];
    tutti__bootstrap_t bs = {.rank = crank, .size = csize, .deadline = deadline, .where = where};
    if (csize == 1) {
        if ((solo = tutti__solo_new()) == NULL) {
            st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
            goto fail;
        }
        bs.oob = tutti__solo_oob(solo);
        snprintf(where, sizeof where, "a one-rank sub-communicator's own store (color %d)", color);
    } else {
        if (crank != 0) {
            tutti__comm_child_auth(parent, "tutti split v1", rvs[leader].salt, &auth);
            st = tutti__store_open(crank, csize, rvs[leader].ip, rvs[leader].port, &auth,
                                   deadline, &store);
            memset(&auth, 0, sizeof auth);
            if (st < 0)
                goto fail;
        }
        bs.oob = tutti__store_oob(store);
        bs.cancelled = tutti__store_doomed;
        bs.cancel_ctx = store;
        snprintf(where, sizeof where, "the sub-communicator's store at %s:%d (color %d)",
                 rvs[leader].ip, rvs[leader].port, color);
    }
    st = tutti__comm_create(crank, csize, &bs, store, &parent->cfg, parent, out);
fail:
    if (st < 0 && *out == NULL) {
        tutti__prefix_error(st, "tutti_comm_split (color %d)", color);
        tutti__comm_error(parent, st, "%s", tutti__tls_error());
    }
done:
    tutti__store_close(store); /* keeps a failure's text */
    tutti__solo_free(solo);
    if (rvs != NULL)
        memset(rvs, 0, (size_t)n * sizeof *rvs);
    free(all);
    free(rvs);
    return st;
}

TUTTI_API tutti_status_t tutti_comm_create_group(tutti_comm_t *parent, const int *ranks, int n,
                                                 tutti_comm_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (!tutti__comm_valid(parent))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_create_group: the parent %p is not a live communicator%s",
                                (void *)parent, tutti__comm_why_not(parent));
    if (n < 1 || n > parent->size || ranks == NULL)
        return tutti__comm_error(parent, TUTTI_ERR_INVALID_ARG,
                                 "tutti_comm_create_group: %d rank(s) listed (ranks %p); list 1..%d "
                                 "ranks of the parent",
                                 n, (const void *)ranks, parent->size);
    int key = -1;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= parent->size)
            return tutti__comm_error(parent, TUTTI_ERR_INVALID_ARG,
                                     "tutti_comm_create_group: ranks[%d] = %d is not a rank of the "
                                     "parent (0..%d)",
                                     i, ranks[i], parent->size - 1);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return tutti__comm_error(parent, TUTTI_ERR_INVALID_ARG,
                                         "tutti_comm_create_group: rank %d is listed twice",
                                         ranks[i]);
        if (ranks[i] == parent->rank)
            key = i;
    }
    /* Every rank must pass the same list; split alone would build whatever the ranks' own
     * entries add up to (ranks listing {0,1} and {0,2} would all land in one group of 3), so
     * the lists' hashes are compared first, and a difference fails every rank alike. */
    uint64_t h = 1469598103934665603ull, *hs = malloc((size_t)parent->size * sizeof *hs);
    if (hs == NULL)
        return tutti__comm_error(parent, TUTTI_ERR_NO_MEMORY,
                                 "tutti_comm_create_group: out of memory");
    for (int i = -1; i < n; i++) {
        uint32_t v = (uint32_t)(i < 0 ? n : ranks[i]);
        for (int b = 0; b < 4; b++)
            h = (h ^ ((v >> (8 * b)) & 0xffu)) * 1099511628211ull;
    }
    tutti_status_t st = gather_all(parent, &h, hs, sizeof h);
    int other = -1;
    for (int r = 0; st == TUTTI_OK && r < parent->size && other < 0; r++)
        if (hs[r] != hs[0])
            other = r;
    free(hs);
    if (st < 0)
        return st;
    if (other >= 0)
        return tutti__comm_error(parent, TUTTI_ERR_MISMATCH,
                                 "tutti_comm_create_group: rank %d passed another list of ranks "
                                 "than rank 0; every rank of the parent must pass the same list",
                                 other);
    return tutti_comm_split(parent, key >= 0 ? 0 : TUTTI_UNDEFINED, key, out);
}
