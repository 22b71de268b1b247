/* oob.c: put, get, allgather and group barrier over an out-of-band key-value store, with
 * timeouts that name the ranks that never arrived. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oob.h"
#include "wire.h"

/* A failing oob is asked again at most this often, so that its error shows at once rather than
 * at the deadline; and a store that ignores timeout_s cannot make us overshoot by more. */
#define SLICE_S 0.5
/* Missing ranks named in a message before "..." */
#define LIST_MAX 16

static const char *where(const tutti__bootstrap_t *bs)
{
    return bs->where ? bs->where : "the out-of-band store";
}

/* detail copies the oob's own error text (our TCP store writes one; a caller's store may not). */
static const char *detail(char *buf, size_t cap)
{
    const char *t = tutti__tls_error();
    if (t[0] == '\0')
        snprintf(buf, cap, "it gave no reason");
    else
        snprintf(buf, cap, "%s", t);
    return buf;
}

/* clear_error empties the thread's error text so that the oob's own text can be told apart;
 * restore_error puts the old text back when the oob wrote none. */
static char clear_error(void)
{
    char c0 = tutti__tls_error()[0];
    tutti__tls_error()[0] = '\0';
    return c0;
}

static void restore_error(char c0)
{
    if (tutti__tls_error()[0] == '\0')
        tutti__tls_error()[0] = c0;
}

tutti_status_t tutti__bs_put(tutti__bootstrap_t *bs, const char *key, const void *val, size_t len)
{
    char c0 = clear_error();
    int rc = bs->oob.put(bs->oob.ctx, key, val, len);
    if (rc == 0) {
        restore_error(c0);
        return TUTTI_OK;
    }
    char why[TUTTI__ERRLEN / 2];
    detail(why, sizeof why);
    return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                            "bootstrap: rank %d could not store \"%s\" (%zu bytes) in %s (error "
                            "%d): %s", bs->rank, key, len, where(bs), rc, why);
}

/*
 * get_once asks for key, waiting up to timeout_s: 0 found (exactly len bytes in val), 1 not
 * there yet, or an error status with its message set.
 */
static int get_once(tutti__bootstrap_t *bs, const char *key, void *val, size_t len,
                    double timeout_s)
{
    size_t got = 0;
    char c0 = clear_error();
    int rc = bs->oob.get(bs->oob.ctx, key, val, len, &got, timeout_s);
    if (rc >= 0)
        restore_error(c0);
    if (rc == 1)
        return 1;
    if (rc != 0) {
        char why[TUTTI__ERRLEN / 2];
        detail(why, sizeof why);
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: rank %d could not read \"%s\" from %s (error %d): %s",
                                bs->rank, key, where(bs), rc, why);
    }
    if (got != len)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: rank %d read \"%s\" from %s as %zu bytes, expected "
                                "%zu: the ranks run different builds of tutti, or two jobs share "
                                "the store", bs->rank, key, where(bs), got, len);
    return 0;
}

tutti_status_t tutti__bs_cancelled(tutti__bootstrap_t *bs)
{
    return bs->cancelled != NULL ? bs->cancelled(bs->cancel_ctx) : TUTTI_OK;
}

#define FAIL_TEXT_MAX 512

void tutti__bs_report(tutti__bootstrap_t *bs, tutti_status_t st)
{
    if (!bs->fail_keys || st >= 0 || bs->size < 2)
        return;
    uint8_t val[4 + FAIL_TEXT_MAX];
    tutti__wire_put32(val, (uint32_t)-st);
    size_t n = strnlen(tutti__tls_error(), FAIL_TEXT_MAX);
    memcpy(val + 4, tutti__tls_error(), n);
    char key[32];
    snprintf(key, sizeof key, "fail/%d", bs->rank);
    tutti__saved_error_t saved;
    tutti__save_error(&saved);
    bs->oob.put(bs->oob.ctx, key, val, 4 + n); /* best effort: the caller fails either way */
    tutti__restore_error(&saved, st);
}

/* peer_failed asks, without waiting, whether rank r reported its creation's failure: TUTTI_OK
 * if not (or the store cannot say: the wait goes on), else the status to stop with. What r
 * wrote came from another process: its status is mapped, its text made printable. */
static tutti_status_t peer_failed(tutti__bootstrap_t *bs, int r)
{
    if (!bs->fail_keys || r < 0)
        return TUTTI_OK;
    char key[32];
    uint8_t val[4 + FAIL_TEXT_MAX];
    char text[FAIL_TEXT_MAX + 1];
    size_t got = 0;
    snprintf(key, sizeof key, "fail/%d", r);
    tutti__saved_error_t saved;
    tutti__save_error(&saved);
    /* 1 ms, not 0: a store that took 0 for "no timeout", as c10d's wait does, would hang here,
     * where a key that is almost never there is asked for. */
    int rc = bs->oob.get(bs->oob.ctx, key, val, sizeof val, &got, 0.001);
    tutti__restore_error(&saved, TUTTI_OK);
    if (rc != 0 || got < 4)
        return TUTTI_OK;
    if (got > sizeof val)
        got = sizeof val;
    uint32_t neg = tutti__wire_get32(val);
    tutti__wire_printable(text, val + 4, got - 4);
    return tutti__set_error(tutti__wire_relayed_status(neg),
                            "bootstrap: rank %d stopped waiting: rank %d could not create its "
                            "communicator: %s", bs->rank, r, text[0] ? text : "it gave no reason");
}

/* wait_key waits for key (rank from's, or -1) until bs->deadline: 0 found, 1 deadline passed,
 * or an error status. */
static int wait_key(tutti__bootstrap_t *bs, const char *key, void *val, size_t len, int from)
{
    for (;;) {
        double left = bs->deadline - tutti__now();
        double slice = left < SLICE_S ? left : SLICE_S;
        int rc = get_once(bs, key, val, len, slice > 0 ? slice : 0);
        if (rc != 1)
            return rc;
        /* Asked only for a key that is not there: a creation whose keys are all in finishes on
         * every rank, whatever happened meanwhile. */
        tutti_status_t why = tutti__bs_cancelled(bs);
        if (why < 0)
            return why;
        if ((why = peer_failed(bs, from)) < 0)
            return why;
        if (left <= SLICE_S)
            return 1;
    }
}

tutti_status_t tutti__bs_get(tutti__bootstrap_t *bs, const char *key, void *val, size_t len,
                             int from)
{
    double start = tutti__now();
    int rc = wait_key(bs, key, val, len, from);
    if (rc == 1)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: rank %d waited %.3g s at %s for \"%s\"; it never "
                                "arrived: check that all ranks were started with the same "
                                "WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or raise TUTTI_TIMEOUT",
                                bs->rank, tutti__now() - start, where(bs), key);
    return rc;
}

/* missing_error probes ranks[from..n) (skipping this rank) without waiting and writes the
 * message that names the ones still absent. key_of formats rank r's key. */
static tutti_status_t missing_error(tutti__bootstrap_t *bs, double start, const int *ranks,
                                    int from, int n, int total, void (*key_of)(char *, size_t,
                                                                               const void *, int),
                                    const void *kctx, void *scratch, size_t len)
{
    int listed[LIST_MAX] = {0}, nmiss = 0;
    for (int i = from; i < n; i++) {
        int r = ranks ? ranks[i] : i;
        if (r == bs->rank)
            continue;
        char key[300];
        key_of(key, sizeof key, kctx, r);
        int rc = get_once(bs, key, scratch, len, 0);
        if (rc < 0)
            return rc;
        if (rc == 0)
            continue;
        if (nmiss < LIST_MAX)
            listed[nmiss] = r;
        nmiss++;
    }
    char list[256];
    tutti__format_ranks(list, sizeof list, listed, nmiss < LIST_MAX ? nmiss : LIST_MAX, nmiss);
    return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                            "bootstrap: rank %d waited %.3g s at %s for rank(s) %s (of %d); they "
                            "never arrived: check that all ranks were started with the same "
                            "WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or raise TUTTI_TIMEOUT",
                            bs->rank, tutti__now() - start, where(bs), nmiss ? list : "?",
                            total);
}

static void ag_key(char *buf, size_t cap, const void *ctx, int r)
{
    snprintf(buf, cap, "ag/%u/%d", *(const unsigned *)ctx, r);
}

tutti_status_t tutti__bs_allgather(tutti__bootstrap_t *bs, const void *mine, size_t len, void *all)
{
    unsigned round = bs->round++;
    double start = tutti__now();
    char key[64];
    ag_key(key, sizeof key, &round, bs->rank);
    TUTTI__CHECK(tutti__bs_put(bs, key, mine, len));
    char *out = all;
    memcpy(out + (size_t)bs->rank * len, mine, len);
    for (int r = 0; r < bs->size; r++) {
        if (r == bs->rank)
            continue;
        ag_key(key, sizeof key, &round, r);
        int rc = wait_key(bs, key, out + (size_t)r * len, len, r);
        if (rc == 1)
            /* Ranks before r have arrived; probe the rest into r's slot (it is scratch now). */
            return missing_error(bs, start, NULL, r, bs->size, bs->size, ag_key, &round,
                                 out + (size_t)r * len, len);
        if (rc < 0)
            return rc;
    }
    return TUTTI_OK;
}

typedef struct gb_ctx {
    const char *name;
} gb_ctx_t;

static void gb_key(char *buf, size_t cap, const void *ctx, int r)
{
    snprintf(buf, cap, "gb/%s/%d", ((const gb_ctx_t *)ctx)->name, r);
}

tutti_status_t tutti__bs_group_barrier(tutti__bootstrap_t *bs, const char *name, const int *ranks,
                                       int n)
{
    bool member = false;
    for (int i = 0; i < n; i++)
        member |= ranks[i] == bs->rank;
    if (!member)
        return tutti__set_error(TUTTI_ERR_INTERNAL, "bootstrap: rank %d entered group barrier "
                                "\"%s\" of %d ranks that does not list it", bs->rank, name, n);
    if (strlen(name) > 200)
        return tutti__set_error(TUTTI_ERR_INTERNAL, "bootstrap: group barrier name \"%.40s...\" "
                                "is too long", name);
    double start = tutti__now();
    gb_ctx_t ctx = {name};
    char key[300];
    uint8_t one = 1, got;
    gb_key(key, sizeof key, &ctx, bs->rank);
    TUTTI__CHECK(tutti__bs_put(bs, key, &one, 1));
    for (int i = 0; i < n; i++) {
        if (ranks[i] == bs->rank)
            continue;
        gb_key(key, sizeof key, &ctx, ranks[i]);
        int rc = wait_key(bs, key, &got, 1, ranks[i]);
        if (rc == 1)
            return missing_error(bs, start, ranks, i, n, n, gb_key, &ctx, &got, 1);
        if (rc < 0)
            return rc;
    }
    return TUTTI_OK;
}
