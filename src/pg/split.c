/* split.c: sub-communicators: split by color and key (MPI_Comm_split), and a group of a subset
 * of ranks (torch's new_group). Each child is a full communicator with its own transports,
 * ordering and workers; it bootstraps through a TCP store served by its rank 0 on an ephemeral
 * port (none for a child of one rank), whose address travels over the parent together with the
 * salt its secret is derived from. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../bootstrap/wire.h"
#include "../common/fnv.h"
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

/* A member whose part of a split fails tells the other members over the parent's liveness
 * mesh (the child's store may be what it could not reach): the split's number, its status
 * (negated), its error's text. The others' waits ask for it (cancelled) and fail at once with
 * that text instead of at their timeout. */
#define SPLIT_MAIL_HDR 12

typedef struct split_watch {
    tutti_comm_t *parent;
    tutti__store_t *store; /* the child's, once joined; NULL before */
    const int *members;    /* the parent ranks of the child, this one included */
    int nmembers;
    uint64_t split;        /* parent->splits of this call */
    bool told;             /* this rank's failure came from another's: do not pass it on */
    uint8_t *mail;         /* a member's mail, as read (the parent's mail cap + 1), made once */
} split_watch_t;

static tutti_status_t split_cancelled(void *ctx)
{
    split_watch_t *w = ctx;
    tutti_status_t st = w->store != NULL ? tutti__store_doomed(w->store) : TUTTI_OK;
    if (st < 0) {
        w->told = true;
        return st;
    }
    tutti__liveness_t *live = w->parent->net.live;
    if (live == NULL)
        return TUTTI_OK;
    int dead = -1;
    (void)tutti__live_check_now(live, &dead); /* reads the links: mail comes with it */
    size_t cap = tutti__live_mail_cap(live);
    if (w->mail == NULL) /* asked every 50-200 ms while the creation waits: made once */
        w->mail = malloc(cap + 1);
    uint8_t *m = w->mail;
    for (int i = 0; m != NULL && i < w->nmembers; i++) {
        int r = w->members[i];
        size_t len = 0;
        if (r == w->parent->rank ||
            tutti__live_mail_read(live, r, TUTTI__MAIL_SPLIT_FAILED, m, cap, &len) == 0 ||
            len < SPLIT_MAIL_HDR || len > cap)
            continue;
        uint64_t split = ((uint64_t)tutti__wire_get32(m) << 32) | tutti__wire_get32(m + 4);
        if (split != w->split)
            continue; /* an earlier split's */
        char *text = (char *)m + SPLIT_MAIL_HDR; /* made printable in place */
        tutti__wire_printable(text, m + SPLIT_MAIL_HDR, len - SPLIT_MAIL_HDR);
        st = tutti__wire_relayed_status(tutti__wire_get32(m + 8));
        tutti__set_error(st, "rank %d of the parent could not take its part (its error: %s)", r,
                         text);
        break;
    }
    if (st == TUTTI_OK)
        for (int i = 0; i < w->nmembers; i++)
            if (w->members[i] != w->parent->rank && tutti__live_dead(live, w->members[i])) {
                st = tutti__set_error(TUTTI_ERR_PEER_FAILED,
                                      "rank %d of the parent (pid %d) died during the split",
                                      w->members[i], tutti__live_pid(live, w->members[i]));
                break;
            }
    if (st < 0)
        w->told = true;
    return st;
}

/* split_tell sends the other members this rank's failure st (its text the thread's error). */
static void split_tell(const split_watch_t *w, tutti_status_t st)
{
    tutti__liveness_t *live = w->parent->net.live;
    if (live == NULL || w->told)
        return;
    size_t cap = tutti__live_mail_cap(live), tlen = strlen(tutti__tls_error());
    if (tlen > cap - SPLIT_MAIL_HDR)
        tlen = cap - SPLIT_MAIL_HDR;
    uint8_t *m = malloc(SPLIT_MAIL_HDR + tlen);
    if (m == NULL)
        return;
    tutti__wire_put32(m, (uint32_t)(w->split >> 32));
    tutti__wire_put32(m + 4, (uint32_t)w->split);
    tutti__wire_put32(m + 8, (uint32_t)-st);
    memcpy(m + SPLIT_MAIL_HDR, tutti__tls_error(), tlen);
    tutti__saved_error_t saved;
    tutti__save_error(&saved);
    for (int i = 0; i < w->nmembers; i++)
        if (w->members[i] != w->parent->rank)
            (void)tutti__live_mail_send(live, w->members[i], TUTTI__MAIL_SPLIT_FAILED, m,
                                        SPLIT_MAIL_HDR + tlen, tutti__now() + 1.0);
    tutti__restore_error(&saved, TUTTI_OK);
    free(m);
}

/* name_child_ranks appends to this thread's error which parent rank each of the child's ranks
 * is: what the child's creation says names the child's ranks ("rank 0 of this node"), which
 * are not the numbers the user knows. members: the child's parent ranks, increasing. */
static void name_child_ranks(const member_t *all, const int *members, int csize)
{
    tutti__append_error(" (where this text numbers the new communicator's ranks: its ranks 0, "
                        "1, ... are this communicator's ranks");
    for (int c = 0; c < csize && c < 16; c++) {
        /* the member with c members before it in (key, parent rank) order */
        int pick = -1;
        for (int i = 0; i < csize && pick < 0; i++) {
            int before = 0, r = members[i];
            for (int j = 0; j < csize; j++) {
                int q = members[j];
                before += all[q].key < all[r].key || (all[q].key == all[r].key && q < r);
            }
            if (before == c)
                pick = r;
        }
        tutti__append_error("%s%d", c ? ", " : " ", pick);
    }
    tutti__append_error("%s)", csize > 16 ? ", ..." : "");
}

/* gather_all runs an allgather of len bytes per rank on the parent, blocking. */
static tutti_status_t gather_all(tutti_comm_t *parent, const void *mine, void *all, size_t len)
{
    tutti_status_t st = tutti_allgather(mine, all, len, TUTTI_UINT8, parent, NULL);
    if (st == TUTTI_ERR_MISMATCH) { /* the allgather is this call's own, not the user's */
        char was[TUTTI__ERRLEN];
        snprintf(was, sizeof was, "%s", tutti__tls_error());
        return tutti__comm_error(parent, st,
                                 "%s (this rank's allgather of %zu uint8 was part of "
                                 "tutti_comm_split or tutti_comm_create_group: every rank of the "
                                 "parent calls them, in the same order as its other operations)",
                                 was, len);
    }
    return st;
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
    bool served = false; /* this rank serves the child's store */
    tutti__solo_t *solo = NULL;
    tutti__auth_t auth;
    int *members = malloc((size_t)n * sizeof *members);
    split_watch_t watch = {0};
    tutti_status_t st = TUTTI_OK;
    if (all == NULL || rvs == NULL || members == NULL) {
        st = tutti__comm_error(parent, TUTTI_ERR_NO_MEMORY, "tutti_comm_split: out of memory");
        goto done;
    }
    uint64_t split = ++parent->splits;
    TUTTI__CHECK_GOTO(gather_all(parent, &me, all, sizeof me), st, done);

    /* The child's ranks: same color, ordered by key, then by parent rank. */
    int crank = 0, csize = 0, leader = -1;
    for (int r = 0; r < n && color != TUTTI_UNDEFINED; r++) {
        if (all[r].color != color)
            continue;
        members[csize++] = r;
        if (all[r].key < key || (all[r].key == key && r < parent->rank))
            crank++;
        bool first = leader < 0 || all[r].key < all[leader].key;
        if (first)
            leader = r;
    }
    watch = (split_watch_t){.parent = parent, .members = members, .nmembers = csize,
                            .split = split};
    /* The child's rank 0 serves its store on a port the kernel picks, on the address its peers
     * reach it at; all ranks then learn the leaders' addresses and salts in one more parent
     * allgather, which every rank joins whatever happened (port 0: the leader failed), or the
     * others would wait in it for the parent's timeout. A child of one rank needs no store. */
    double deadline = tutti__now() + tutti__net_timeout(&parent->net);
    tutti_status_t lead = TUTTI_OK;
    if (color != TUTTI_UNDEFINED && crank == 0 && csize > 1) {
        if (!tutti__random(rv.salt, sizeof rv.salt))
            lead = tutti__set_error(TUTTI_ERR_SYSTEM, "getrandom: %s", strerror(errno));
        else {
            tutti__comm_child_auth(parent, "tutti split v1", rv.salt, &auth);
            lead = tutti__store_open(0, csize, parent->ip, 0, &auth, deadline, &store);
            memset(&auth, 0, sizeof auth);
        }
        if (lead == TUTTI_OK) {
            served = true;
            snprintf(rv.ip, sizeof rv.ip, "%s", parent->ip);
            rv.port = tutti__store_port(store);
        }
    }
    char lead_error[TUTTI__ERRLEN];
    snprintf(lead_error, sizeof lead_error, "%s", tutti__tls_error());
    st = gather_all(parent, &rv, rvs, sizeof rv);
    memset(&rv, 0, sizeof rv);
    if (st < 0 || color == TUTTI_UNDEFINED)
        goto done;
    if (lead < 0) {
        st = tutti__set_error(lead, "%s", lead_error);
        goto fail;
    }
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
        bs.cancelled = split_cancelled;
        bs.cancel_ctx = &watch;
        if (crank != 0) {
            /* Another process wrote the record: its address must end inside its field. */
            if (memchr(rvs[leader].ip, '\0', sizeof rvs[leader].ip) == NULL ||
                rvs[leader].port < 0 || rvs[leader].port > 65535) {
                st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                      "rank %d of the parent, the new communicator's rank 0, "
                                      "sent a malformed store address: are all ranks running "
                                      "the same tutti?",
                                      leader);
                goto fail;
            }
            if (rvs[leader].port == 0) { /* its error comes by mail; wait a moment for it */
                for (double t0 = tutti__now(); tutti__now() - t0 < 1.0;) {
                    if ((st = split_cancelled(&watch)) < 0)
                        goto fail;
                    tutti__sleep_us(10000);
                }
                st = tutti__set_error(TUTTI_ERR_PEER_FAILED,
                                      "rank %d of the parent, the new communicator's rank 0, "
                                      "could not open its store (its own error says why)",
                                      leader);
                watch.told = true;
                goto fail;
            }
            tutti__comm_child_auth(parent, "tutti split v1", rvs[leader].salt, &auth);
            st = tutti__store_open(crank, csize, rvs[leader].ip, rvs[leader].port, &auth,
                                   deadline, &store);
            memset(&auth, 0, sizeof auth);
            if (st < 0)
                goto fail;
        }
        watch.store = store;
        bs.oob = tutti__store_oob(store);
        snprintf(where, sizeof where, "the sub-communicator's store at %s:%d (color %d)",
                 rvs[leader].ip, rvs[leader].port, color);
    }
    st = tutti__comm_create(crank, csize, &bs, store, &parent->cfg, parent, out);
fail:
    if (st < 0 && *out == NULL) {
        if (csize > 1)
            split_tell(&watch, st);
        tutti__prefix_error(st, "tutti_comm_split (color %d)", color);
        if (csize > 1)
            name_child_ranks(all, members, csize);
        tutti__comm_error(parent, st, "%s", tutti__tls_error());
    }
done:
    /* A member's failure tells the child's store why too (its waiting members fail at once
     * with this text); its rank 0 serves the store: its own end tells them. */
    if (st < 0 && store != NULL && !served)
        tutti__store_close_failed(store, st);
    else
        tutti__store_close(store); /* keeps a failure's text */
    tutti__solo_free(solo);
    if (rvs != NULL)
        memset(rvs, 0, (size_t)n * sizeof *rvs);
    free(all);
    free(rvs);
    free(members);
    free(watch.mail);
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
    if (out == NULL)
        return tutti__comm_error(parent, TUTTI_ERR_INVALID_ARG,
                                 "tutti_comm_create_group: newcomm is NULL; pass where the new "
                                 "communicator goes");
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
    uint64_t h = TUTTI__FNV64_INIT, *hs = malloc((size_t)parent->size * sizeof *hs);
    if (hs == NULL)
        return tutti__comm_error(parent, TUTTI_ERR_NO_MEMORY,
                                 "tutti_comm_create_group: out of memory");
    for (int i = -1; i < n; i++) {
        uint32_t v = (uint32_t)(i < 0 ? n : ranks[i]);
        uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
        h = tutti__fnv64(h, le, sizeof le);
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
