/* check_collectives.c: every collective x algorithm x dtype x op x buffer layout on the shm and
 * ofi transports at 1, 2, 3, 4 and 8 ranks, compared bit for bit with a reference computed in
 * the test (nccl-tests' trick: inputs whose reduction is exact in any order). */
#include <check.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

/* ---- the matrix ---------------------------------------------------------------------------- */

enum { M_OOP = 0, M_INPLACE, M_SAME, M_OFF_ELEM, M_OFF_BYTE, M_COUNT };
static const char *const mode_name[M_COUNT] = {
    "out-of-place", "TUTTI_IN_PLACE", "sendbuf==recvbuf", "pointers+1 element", "odd byte offsets",
};

static const tutti_dtype_t all_dtypes[] = {TUTTI_INT8,    TUTTI_UINT8,    TUTTI_INT32,
                                           TUTTI_INT64,   TUTTI_FLOAT16,  TUTTI_BFLOAT16,
                                           TUTTI_FLOAT32, TUTTI_FLOAT64};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))
/* For the collectives that only move bytes, one dtype of each element size is enough. */
static const tutti_dtype_t move_dtypes[] = {TUTTI_INT8, TUTTI_FLOAT16, TUTTI_FLOAT32,
                                            TUTTI_FLOAT64};
#define NMDT ((int)(sizeof move_dtypes / sizeof move_dtypes[0]))

static const char *const algo_names[TUTTI_COLL_COUNT][4] = {
    [TUTTI_COLL_ALLREDUCE] = {"ring", "tree", "direct", NULL},
    [TUTTI_COLL_ALLGATHER] = {"ring", "direct", NULL},
    [TUTTI_COLL_ALLTOALL] = {"pairwise", "direct", NULL},
    [TUTTI_COLL_REDUCE_SCATTER] = {"ring", "direct", NULL},
    [TUTTI_COLL_BCAST] = {"tree", "direct", NULL},
    [TUTTI_COLL_REDUCE] = {"tree", "direct", NULL},
    [TUTTI_COLL_BARRIER] = {"dissemination", "direct", NULL},
};
static const char *const coll_name[TUTTI_COLL_COUNT] = {
    "allreduce", "allgather", "alltoall", "reduce_scatter", "bcast", "reduce", "barrier",
};

static const size_t red_sizes[] = {0, 1, 7, 1031, 65537};
static const size_t blk_sizes[] = {0, 1, 7, 1031, 8209}; /* per rank or per peer */
#define NSIZES 5

static bool is_float(tutti_dtype_t dt) { return dt >= TUTTI_FLOAT16 && dt <= TUTTI_FLOAT64; }

static bool op_ok(tutti_op_t op, tutti_dtype_t dt)
{
    if (op == TUTTI_AVG)
        return is_float(dt);
    if (op == TUTTI_BAND || op == TUTTI_BOR || op == TUTTI_BXOR)
        return !is_float(dt);
    return true;
}

/* ---- per-rank context ------------------------------------------------------------------------ */

typedef struct ctx {
    tutti_comm_t *comm;
    int rank, size;
    const char *tp;
    bool ofi;
    char desc[256];     /* the case being run, for messages */
    const char *algo;
    unsigned long ncase; /* cases so far: the same on every rank, so it seeds data and choices */
    unsigned long nrun;
    int errors;         /* mismatches and failures */
    int printed;
    bool fatal;         /* a collective failed: the communicator is no longer usable */
    tutti_work_t *w;
    int wmode;          /* 0 blocking, 1 handle + wait, 2 handle + test loop */
    uint64_t seq0;
    long barrier_rounds;
} ctx_t;

#define MAX_PRINTS 30

static void report(ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(ctx_t *c, const char *fmt, ...)
{
    c->errors++;
    if (c->printed++ >= MAX_PRINTS) {
        if (c->printed == MAX_PRINTS + 1)
            th_fail("more errors follow; not printing them");
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    th_fail("%s: %s", c->desc, msg);
}

static void describe(ctx_t *c, const char *coll, tutti_dtype_t dt, int op, size_t count, int mode,
                     const char *extra)
{
    snprintf(c->desc, sizeof c->desc,
             "%s algo=%s dtype=%s op=%s transport=%s nranks=%d count=%zu mode=%s%s%s", coll,
             c->algo ? c->algo : "-", tutti_dtype_name(dt),
             op >= 0 ? tutti_op_name((tutti_op_t)op) : "-", c->tp, c->size, count,
             mode >= 0 ? mode_name[mode] : "-", extra ? " " : "", extra ? extra : "");
}

/* wk prepares one call: blocking or with a work handle, chosen in turn. */
static tutti_work_t **wk(ctx_t *c)
{
    c->w = NULL;
    c->seq0 = tutti_comm_seq(c->comm);
    c->wmode = (int)(c->nrun++ % 3);
    return c->wmode ? &c->w : NULL;
}

/* fin completes a call started with wk: status, work handle, sequence number. */
static int fin(ctx_t *c, tutti_status_t st, bool is_coll)
{
    if (st != TUTTI_OK) {
        report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
        c->fatal = true;
        if (c->w)
            tutti_work_free(c->w);
        return 1;
    }
    if (c->wmode) {
        if (c->w == NULL) {
            report(c, "returned TUTTI_OK but stored no work handle");
            c->fatal = true;
            return 1;
        }
        if (c->wmode == 1) {
            st = tutti_work_wait(c->w, -1.0);
        } else {
            int done = 0;
            double t0 = th_now();
            for (unsigned long k = 0; !done; k++) {
                st = tutti_work_test(c->w, &done);
                if (!done && st != TUTTI_IN_PROGRESS) {
                    report(c, "tutti_work_test: not done but status %d (%s)", st, tutti_strerror(st));
                    break;
                }
                if (done)
                    break;
                if (th_now() - t0 > 60) {
                    report(c, "tutti_work_test: not done after 60 s");
                    break;
                }
                if (k > 1000)
                    usleep(50);
                else
                    sched_yield();
            }
            if (done)
                st = tutti_work_status(c->w);
            else
                st = tutti_work_wait(c->w, -1.0);
        }
        if (st == TUTTI_OK && tutti_work_status(c->w) != TUTTI_OK)
            report(c, "tutti_work_wait said OK but tutti_work_status says %d",
                   tutti_work_status(c->w));
        if (st != TUTTI_OK)
            report(c, "work handle finished with %d (%s): %s", st, tutti_strerror(st),
                   tutti_work_error(c->w));
        else if (tutti_work_error(c->w) == NULL || tutti_work_error(c->w)[0] != '\0')
            report(c, "work handle succeeded but tutti_work_error is \"%s\"",
                   tutti_work_error(c->w) ? tutti_work_error(c->w) : "(NULL)");
        tutti_work_free(c->w);
        c->w = NULL;
        if (st != TUTTI_OK) {
            c->fatal = true;
            return 1;
        }
    }
    if (is_coll && tutti_comm_seq(c->comm) != c->seq0 + 1) {
        report(c, "tutti_comm_seq went from %llu to %llu (expected +1)",
               (unsigned long long)c->seq0, (unsigned long long)tutti_comm_seq(c->comm));
    }
    return 0;
}

/* ---- buffers with guard zones ----------------------------------------------------------------- */

#define GUARD 64
#define GUARD_BYTE 0xc3
#define FILL_BYTE 0xee

typedef struct tbuf {
    unsigned char *base;
    unsigned char *p; /* base + GUARD + off */
    size_t bytes, off;
} tbuf_t;

static void tb_make(tbuf_t *b, size_t bytes, size_t off)
{
    b->bytes = bytes;
    b->off = off;
    b->base = malloc(bytes + 2 * GUARD + 16);
    if (b->base == NULL) {
        th_fail("out of memory (%zu bytes)", bytes);
        _exit(3);
    }
    memset(b->base, GUARD_BYTE, GUARD + off);
    b->p = b->base + GUARD + off;
    memset(b->p, FILL_BYTE, bytes);
    memset(b->p + bytes, GUARD_BYTE, GUARD + 16 - off);
}

static void tb_free(tbuf_t *b)
{
    free(b->base);
    b->base = b->p = NULL;
}

static int tb_guards(ctx_t *c, const tbuf_t *b, const char *which)
{
    for (size_t i = 0; i < GUARD + b->off; i++)
        if (b->base[i] != GUARD_BYTE) {
            report(c, "%s: byte %zd before the buffer was overwritten (0x%02x)", which,
                   (ssize_t)i - (ssize_t)(GUARD + b->off), b->base[i]);
            return 1;
        }
    for (size_t i = 0; i < GUARD + 16 - b->off; i++)
        if (b->p[b->bytes + i] != GUARD_BYTE) {
            report(c, "%s: byte %zu after the end of the buffer (%zu bytes) was overwritten (0x%02x)",
                   which, i, b->bytes, b->p[b->bytes + i]);
            return 1;
        }
    return 0;
}

static void offsets(int mode, size_t es, size_t *soff, size_t *roff)
{
    *soff = *roff = 0;
    if (mode == M_OFF_ELEM)
        *soff = *roff = es;
    else if (mode == M_OFF_BYTE) {
        *soff = 1;
        *roff = 3;
    }
}

/* A mode that does not apply: odd byte offsets only matter for elements wider than a byte
 * and for more than one element. */
static bool mode_skip(int mode, size_t es, size_t n)
{
    return mode == M_OFF_BYTE && (es == 1 || n <= 1);
}

/* cmp compares n elements of es bytes; reports the first few mismatches with their bits. */
static int cmp(ctx_t *c, const char *what, const void *exp, const void *got, size_t n, size_t es)
{
    const unsigned char *e = exp, *g = got;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(e + i * es, g + i * es, es) != 0) {
            if (bad++ == 0)
                first = i;
        }
    if (bad) {
        char he[40], hg[40];
        report(c, "%s: index %zu: expected bits %s got %s (%zu of %zu elements differ)", what,
               first, th_hex(he, e + first * es, es), th_hex(hg, g + first * es, es), bad, n);
        return 1;
    }
    return 0;
}

/* fill_bytes gives a block its own bytes, keyed by (a, b): byte k of the block. */
static void fill_bytes(void *p, size_t nbytes, uint64_t a, uint64_t b)
{
    unsigned char *q = p;
    size_t k = 0;
    for (; k + 8 <= nbytes; k += 8) {
        uint64_t h = th_hash64(a, b, k / 8);
        memcpy(q + k, &h, 8);
    }
    if (k < nbytes) {
        uint64_t h = th_hash64(a, b, k / 8);
        memcpy(q + k, &h, nbytes - k);
    }
}

/* ---- exact inputs and their reference ------------------------------------------------------ */

static int64_t in_val(tutti_dtype_t dt, tutti_op_t op, int r, size_t i, unsigned long salt)
{
    uint64_t k = (uint64_t)i + salt;
    uint64_t h = th_hash64((uint64_t)r, k, (uint64_t)op);
    switch (op) {
    case TUTTI_SUM:
    case TUTTI_AVG: {
        /* integers wrap the same in any order, so any bits will do; floats get integers small
         * enough that every partial sum of up to 8 ranks is exact (bf16: 8 bits, fp16: 11),
         * and wide enough that x / n and x * (1 / n) differ for some */
        if (!is_float(dt))
            return (int64_t)h;
        int64_t R = dt == TUTTI_BFLOAT16 ? 31 : 250;
        return (int64_t)(h % (uint64_t)(2 * R + 1)) - R;
    }
    case TUTTI_PROD: {
        static const int t[8] = {1, -1, 2, 1, 1, -1, 1, 1};
        return t[((uint64_t)r * 5u + k * 3u) % 8u];
    }
    case TUTTI_MIN:
    case TUTTI_MAX:
        return is_float(dt) ? (int64_t)(h % 241u) - 120 : (int64_t)h;
    case TUTTI_BAND: /* bits common to all ranks, so that the result is not all zeros */
        return (int64_t)(h | th_hash64(k, salt, 7));
    case TUTTI_BOR:
        return (int64_t)(h & th_hash64(k, salt, 7));
    default:
        return (int64_t)h;
    }
}

/* narrow: the value an integer dtype holds after storing v (wrapping), as int64. */
static int64_t narrow(tutti_dtype_t dt, int64_t v)
{
    switch (dt) {
    case TUTTI_INT8: return (int8_t)(uint8_t)v;
    case TUTTI_UINT8: return (uint8_t)v;
    case TUTTI_INT32: return (int32_t)(uint32_t)v;
    default: return v;
    }
}

static void store(void *p, tutti_dtype_t dt, int64_t v)
{
    switch (dt) {
    case TUTTI_INT8:
    case TUTTI_UINT8: {
        uint8_t x = (uint8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case TUTTI_INT32: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case TUTTI_INT64: memcpy(p, &v, 8); break;
    case TUTTI_FLOAT16: {
        uint16_t x = th_to_f16((double)v);
        memcpy(p, &x, 2);
        break;
    }
    case TUTTI_BFLOAT16: {
        uint16_t x = th_to_bf16((double)v);
        memcpy(p, &x, 2);
        break;
    }
    case TUTTI_FLOAT32: {
        float x = (float)v;
        memcpy(p, &x, 4);
        break;
    }
    case TUTTI_FLOAT64: {
        double x = (double)v;
        memcpy(p, &x, 8);
        break;
    }
    default: break;
    }
}

/* gen_red writes rank r's input, elements start .. start+n-1 of the logical vector. */
static void gen_red(void *p, tutti_dtype_t dt, tutti_op_t op, int r, size_t start, size_t n,
                    unsigned long salt)
{
    size_t es = tutti_dtype_size(dt);
    for (size_t i = 0; i < n; i++)
        store((char *)p + i * es, dt, in_val(dt, op, r, start + i, salt));
}

/* ref_red writes the expected reduction over nranks of elements start .. start+n-1. Every input
 * is an integer held exactly and every float partial result stays exact, so integer arithmetic
 * (wrapping like the dtype) gives every result but avg, which is the exact sum divided once in
 * the dtype's accumulation precision (fp32 for bf16 / fp16) and rounded to nearest even. */
static void ref_red(void *p, tutti_dtype_t dt, tutti_op_t op, int nranks, size_t start, size_t n,
                    unsigned long salt)
{
    size_t es = tutti_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        int64_t acc = 0;
        for (int r = 0; r < nranks; r++) {
            int64_t v = narrow(dt, in_val(dt, op, r, start + i, salt));
            if (r == 0) {
                acc = v;
                continue;
            }
            switch (op) {
            case TUTTI_SUM:
            case TUTTI_AVG: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break;
            case TUTTI_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
            case TUTTI_MIN: acc = v < acc ? v : acc; break;
            case TUTTI_MAX: acc = v > acc ? v : acc; break;
            case TUTTI_BAND: acc &= v; break;
            case TUTTI_BOR: acc |= v; break;
            case TUTTI_BXOR: acc ^= v; break;
            default: break;
            }
        }
        char *q = (char *)p + i * es;
        if (op == TUTTI_AVG) {
            if (dt == TUTTI_FLOAT64) {
                double x = (double)acc / (double)nranks;
                memcpy(q, &x, 8);
            } else {
                float x = (float)acc / (float)nranks;
                if (dt == TUTTI_FLOAT32) {
                    memcpy(q, &x, 4);
                } else {
                    uint16_t h = dt == TUTTI_FLOAT16 ? th_to_f16(x) : th_to_bf16(x);
                    memcpy(q, &h, 2);
                }
            }
        } else {
            store(q, dt, acc);
        }
    }
}

/* ---- algorithm selection ---------------------------------------------------------------------- */

static bool names_all(const char *text, tutti_coll_t coll, bool skip_direct)
{
    for (int k = 0; algo_names[coll][k]; k++) {
        if (skip_direct && strcmp(algo_names[coll][k], "direct") == 0)
            continue;
        if (text == NULL || strstr(text, algo_names[coll][k]) == NULL)
            return false;
    }
    return true;
}

/* use_algo sets coll's algorithm: 1 if it is in use now, 0 if it does not apply here (direct
 * on ofi, which must be refused), -1 on a failure. */
static int use_algo(ctx_t *c, tutti_coll_t coll, const char *name)
{
    const char *prev = tutti_comm_algorithm(c->comm, coll, 64);
    char prevbuf[64];
    snprintf(prevbuf, sizeof prevbuf, "%s", prev ? prev : "(NULL)");
    c->algo = name;
    describe(c, coll_name[coll], TUTTI_INT8, -1, 0, -1, "tutti_comm_set_algorithm");
    tutti_status_t st = tutti_comm_set_algorithm(c->comm, coll, name);
    bool direct = strcmp(name, "direct") == 0;
    if (direct && c->ofi) {
        if (st == TUTTI_OK && c->size == 1)
            goto set; /* one rank needs no transport, so a window may well exist */
        if (st != TUTTI_ERR_INVALID_ARG) {
            report(c, "\"direct\" on transport ofi: expected TUTTI_ERR_INVALID_ARG, got %d (%s)", st,
                   tutti_strerror(st));
            return -1;
        }
        const char *now = tutti_comm_algorithm(c->comm, coll, 64);
        if (now == NULL || strcmp(now, prevbuf) != 0)
            report(c, "after the refused \"direct\" the algorithm changed from %s to %s", prevbuf,
                   now ? now : "(NULL)");
        if (tutti_comm_last_error(c->comm)[0] == '\0')
            report(c, "refused \"direct\" but tutti_comm_last_error is empty");
        return 0;
    }
    if (st != TUTTI_OK) {
        report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
        return -1;
    }
set:;
    static const size_t probe[] = {0, 8, 100, 65536, 1u << 30};
    for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
        const char *a = tutti_comm_algorithm(c->comm, coll, probe[k]);
        if (a == NULL || strcmp(a, name) != 0) {
            report(c, "tutti_comm_algorithm(%zu bytes) = %s after setting %s", probe[k],
                   a ? a : "(NULL)", name);
            return -1;
        }
    }
    return 1;
}

static void check_unknown_algo(ctx_t *c)
{
    for (int coll = 0; coll < TUTTI_COLL_COUNT; coll++) {
        c->algo = "bogus";
        describe(c, coll_name[coll], TUTTI_INT8, -1, 0, -1, "set_algorithm(\"bogus\")");
        const char *before = tutti_comm_algorithm(c->comm, (tutti_coll_t)coll, 64);
        char prev[64];
        snprintf(prev, sizeof prev, "%s", before ? before : "(NULL)");
        tutti_status_t st = tutti_comm_set_algorithm(c->comm, (tutti_coll_t)coll, "bogus");
        if (st != TUTTI_ERR_INVALID_ARG) {
            report(c, "expected TUTTI_ERR_INVALID_ARG, got %d (%s)", st, tutti_strerror(st));
            continue;
        }
        const char *msg = tutti_comm_last_error(c->comm);
        if (!names_all(msg, (tutti_coll_t)coll, true))
            report(c, "the error text does not list the valid names: \"%s\"", msg);
        const char *after = tutti_comm_algorithm(c->comm, (tutti_coll_t)coll, 64);
        if (after == NULL || strcmp(after, prev) != 0)
            report(c, "the failed call changed the algorithm from %s to %s", prev,
                   after ? after : "(NULL)");
        st = tutti_comm_set_algorithm(c->comm, (tutti_coll_t)coll, "ring:0-100;bogus:101-max");
        if (st != TUTTI_ERR_INVALID_ARG)
            report(c, "\"ring:0-100;bogus:101-max\": expected TUTTI_ERR_INVALID_ARG, got %d", st);
    }
    c->algo = NULL;
}

/* ---- budget ------------------------------------------------------------------------------------ */

/* want keeps the run within minutes on two cores: every small case everywhere; large ones with
 * fewer ops and layouts, and at 8 ranks (which oversubscribe the cores) fewer dtypes. */
static bool want(ctx_t *c, size_t n, int mode, tutti_dtype_t dt, int op)
{
    int rot = 1 + (int)(((unsigned)dt + (unsigned)(op < 0 ? 0 : op) + c->ncase / 7) % (M_COUNT - 1));
    if (n > 1031) {
        if (op >= 0 && op != TUTTI_SUM && op != TUTTI_AVG && op != TUTTI_MAX && op != TUTTI_BXOR)
            return false;
        if (c->size >= 8 && op >= 0 && dt != TUTTI_FLOAT32 && dt != TUTTI_BFLOAT16 &&
            dt != TUTTI_INT8)
            return false;
        return mode == M_OOP || mode == rot;
    }
    return true;
}

/* ---- reductions ---------------------------------------------------------------------------- */

static void case_allreduce(ctx_t *c, tutti_dtype_t dt, tutti_op_t op, size_t n, int mode)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff;
    unsigned long salt = c->ncase * 131u;
    offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes, soff);
    tb_make(&R, bytes, roff);
    char *exp = malloc(bytes + 1), *orig = malloc(bytes + 1);
    gen_red(S.p, dt, op, c->rank, 0, n, salt);
    memcpy(orig, S.p, bytes);
    ref_red(exp, dt, op, c->size, 0, n, salt);
    const void *sb = S.p;
    if (mode == M_INPLACE || mode == M_SAME) {
        memcpy(R.p, S.p, bytes);
        sb = mode == M_INPLACE ? TUTTI_IN_PLACE : R.p;
    }
    describe(c, "allreduce", dt, op, n, mode, NULL);
    tutti_status_t st = tutti_allreduce(sb, R.p, n, dt, op, c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "recvbuf", exp, R.p, n, es);
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cmp(c, "sendbuf changed", orig, S.p, n, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static void case_reduce_scatter(ctx_t *c, tutti_dtype_t dt, tutti_op_t op, size_t rc, int mode)
{
    size_t es = tutti_dtype_size(dt), tot = rc * (size_t)c->size, soff, roff;
    unsigned long salt = c->ncase * 131u;
    offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, tot * es, soff);
    tb_make(&R, (mode == M_INPLACE ? tot : rc) * es, roff);
    char *exp = malloc(rc * es + 1), *orig = malloc(tot * es + 1);
    gen_red(S.p, dt, op, c->rank, 0, tot, salt);
    memcpy(orig, S.p, tot * es);
    ref_red(exp, dt, op, c->size, (size_t)c->rank * rc, rc, salt);
    const void *sb = S.p;
    if (mode == M_INPLACE) {
        memcpy(R.p, S.p, tot * es);
        sb = TUTTI_IN_PLACE;
    }
    describe(c, "reduce_scatter", dt, op, rc, mode, NULL);
    tutti_status_t st = tutti_reduce_scatter(sb, R.p, rc, dt, op, c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "recvbuf", exp, R.p, rc, es);
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cmp(c, "sendbuf changed", orig, S.p, tot, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static void case_reduce(ctx_t *c, tutti_dtype_t dt, tutti_op_t op, size_t n, int mode, int root)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff;
    unsigned long salt = c->ncase * 131u;
    bool at_root = c->rank == root;
    offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes, soff);
    tb_make(&R, bytes, roff);
    char *exp = malloc(bytes + 1), *orig = malloc(bytes + 1);
    gen_red(S.p, dt, op, c->rank, 0, n, salt);
    memcpy(orig, S.p, bytes);
    ref_red(exp, dt, op, c->size, 0, n, salt);
    const void *sb = S.p;
    void *rb = R.p;
    bool null_recv = false;
    if (mode == M_INPLACE && at_root) {
        memcpy(R.p, S.p, bytes);
        sb = TUTTI_IN_PLACE;
    } else if (mode == M_INPLACE) {
        rb = NULL; /* in place only means something at the root */
        null_recv = true;
    } else if (mode == M_SAME) {
        memcpy(R.p, S.p, bytes);
        sb = R.p;
    } else if (!at_root && c->ncase % 2) {
        rb = NULL;
        null_recv = true;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "root=%d%s", root, null_recv ? " recvbuf=NULL" : "");
    describe(c, "reduce", dt, op, n, mode, extra);
    tutti_status_t st = tutti_reduce(sb, rb, n, dt, op, root, c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        if (at_root)
            cmp(c, "recvbuf at root", exp, R.p, n, es);
        else if (rb != NULL && mode != M_SAME) {
            /* recvbuf is ignored away from the root: it must stay as it was */
            memset(exp, FILL_BYTE, bytes);
            cmp(c, "recvbuf away from the root was written", exp, R.p, n, es);
        }
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cmp(c, "sendbuf changed", orig, S.p, n, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static void run_reductions(ctx_t *c, tutti_coll_t coll)
{
    for (int a = 0; algo_names[coll][a] && !c->fatal; a++) {
        int u = use_algo(c, coll, algo_names[coll][a]);
        if (u < 0)
            c->fatal = true;
        if (u <= 0)
            continue;
        for (int d = 0; d < NDT && !c->fatal; d++) {
            tutti_dtype_t dt = all_dtypes[d];
            size_t es = tutti_dtype_size(dt);
            for (int op = 0; op < TUTTI_OP_COUNT && !c->fatal; op++) {
                if (!op_ok((tutti_op_t)op, dt))
                    continue;
                for (int s = 0; s < NSIZES && !c->fatal; s++) {
                    size_t n = coll == TUTTI_COLL_REDUCE_SCATTER ? blk_sizes[s] : red_sizes[s];
                    for (int m = 0; m < M_COUNT && !c->fatal; m++) {
                        if (mode_skip(m, es, n))
                            continue;
                        if (coll == TUTTI_COLL_REDUCE_SCATTER && m == M_SAME)
                            continue; /* in place for reduce_scatter is TUTTI_IN_PLACE only */
                        c->ncase++;
                        if (!want(c, n, m, dt, op))
                            continue;
                        if (coll == TUTTI_COLL_ALLREDUCE)
                            case_allreduce(c, dt, (tutti_op_t)op, n, m);
                        else if (coll == TUTTI_COLL_REDUCE_SCATTER)
                            case_reduce_scatter(c, dt, (tutti_op_t)op, n, m);
                        else
                            case_reduce(c, dt, (tutti_op_t)op, n, m, (int)(c->ncase % (unsigned)c->size));
                    }
                }
            }
        }
    }
    c->algo = NULL;
}

/* ---- collectives that move bytes ---------------------------------------------------------------- */

static void case_bcast(ctx_t *c, tutti_dtype_t dt, size_t n, int mode, int root)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff;
    offsets(mode, es, &soff, &roff);
    tbuf_t B;
    tb_make(&B, bytes, c->rank % 2 ? roff : soff);
    char *exp = malloc(bytes + 1);
    fill_bytes(exp, bytes, (uint64_t)root, c->ncase);
    if (c->rank == root)
        memcpy(B.p, exp, bytes);
    char extra[32];
    snprintf(extra, sizeof extra, "root=%d", root);
    describe(c, "bcast", dt, -1, n, mode, extra);
    tutti_status_t st = tutti_broadcast(B.p, n, dt, root, c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "buf", exp, B.p, n, es);
        tb_guards(c, &B, "buf");
    }
    tb_free(&B);
    free(exp);
}

static void case_allgather(ctx_t *c, tutti_dtype_t dt, size_t n, int mode)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff, P = (size_t)c->size;
    offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes, soff);
    tb_make(&R, bytes * P, roff);
    char *exp = malloc(bytes * P + 1);
    for (int r = 0; r < c->size; r++)
        fill_bytes(exp + (size_t)r * bytes, bytes, (uint64_t)r, c->ncase);
    memcpy(S.p, exp + (size_t)c->rank * bytes, bytes);
    const void *sb = S.p;
    if (mode == M_INPLACE) {
        memcpy(R.p + (size_t)c->rank * bytes, S.p, bytes);
        sb = TUTTI_IN_PLACE;
    }
    describe(c, "allgather", dt, -1, n, mode, NULL);
    tutti_status_t st = tutti_allgather(sb, R.p, n, dt, c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "recvbuf", exp, R.p, n * P, es);
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cmp(c, "sendbuf changed", exp + (size_t)c->rank * bytes, S.p, n, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
}

static void case_alltoall(ctx_t *c, tutti_dtype_t dt, size_t n, int mode)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff, P = (size_t)c->size;
    offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes * P, soff);
    tb_make(&R, bytes * P, roff);
    char *exp = malloc(bytes * P + 1), *orig = malloc(bytes * P + 1);
    for (int j = 0; j < c->size; j++) {
        fill_bytes(S.p + (size_t)j * bytes, bytes, (uint64_t)c->rank * TH_MAX_RANKS + (uint64_t)j,
                   c->ncase);
        fill_bytes(exp + (size_t)j * bytes, bytes, (uint64_t)j * TH_MAX_RANKS + (uint64_t)c->rank,
                   c->ncase);
    }
    memcpy(orig, S.p, bytes * P);
    const void *sb = S.p;
    if (mode == M_SAME) {
        memcpy(R.p, S.p, bytes * P);
        sb = R.p;
    }
    describe(c, "alltoall", dt, -1, n, mode, NULL);
    tutti_status_t st = tutti_alltoall(sb, R.p, n, dt, c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "recvbuf", exp, R.p, n * P, es);
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cmp(c, "sendbuf changed", orig, S.p, n * P, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

/* Uneven counts with zeros; the layout, when not packed, puts blocks in reverse rank order
 * with 3-element gaps that must stay untouched. */
static size_t vcount(int base, size_t mult, int i, int j) /* j < 0: one index */
{
    return (size_t)(((unsigned)i * 3u + (j < 0 ? 0u : (unsigned)j * 5u) + (unsigned)base) % 5u) * mult;
}

static size_t layout(int P, const size_t *counts, bool packed, size_t *displs)
{
    size_t off = packed ? 0 : 3;
    if (packed) {
        for (int r = 0; r < P; r++) {
            displs[r] = off;
            off += counts[r];
        }
        return off;
    }
    for (int r = P - 1; r >= 0; r--) {
        displs[r] = off;
        off += counts[r] + 3;
    }
    return off;
}

static void case_allgatherv(ctx_t *c, tutti_dtype_t dt, int base, size_t mult, bool packed, int mode)
{
    int P = c->size;
    size_t es = tutti_dtype_size(dt), counts[TH_MAX_RANKS], displs[TH_MAX_RANKS];
    for (int r = 0; r < P; r++)
        counts[r] = vcount(base, mult, r, -1);
    size_t tot = layout(P, counts, packed, displs);
    size_t mine = counts[c->rank];
    tbuf_t S, R;
    tb_make(&S, mine * es, 0);
    tb_make(&R, tot * es, 0);
    char *exp = malloc(tot * es + 1);
    memset(exp, FILL_BYTE, tot * es);
    for (int r = 0; r < P; r++)
        fill_bytes(exp + displs[r] * es, counts[r] * es, (uint64_t)r, c->ncase);
    memcpy(S.p, exp + displs[c->rank] * es, mine * es);
    const void *sb = S.p;
    if (mode == M_INPLACE) {
        memcpy(R.p + displs[c->rank] * es, S.p, mine * es);
        sb = TUTTI_IN_PLACE;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "base=%d mult=%zu displs=%s", base, mult,
             packed ? "NULL" : "reversed+gaps");
    describe(c, "allgatherv", dt, -1, tot, mode, extra);
    tutti_status_t st = tutti_allgatherv(sb, mine, R.p, counts, packed ? NULL : displs, dt, c->comm,
                                         wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "recvbuf", exp, R.p, tot, es);
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p)
            tb_guards(c, &S, "sendbuf");
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
}

static void case_alltoallv(ctx_t *c, tutti_dtype_t dt, int base, size_t mult, bool packed, int mode)
{
    int P = c->size, me = c->rank;
    size_t es = tutti_dtype_size(dt);
    size_t sc[TH_MAX_RANKS], rc[TH_MAX_RANKS], sd[TH_MAX_RANKS], rd[TH_MAX_RANKS];
    bool same = mode == M_SAME;
    /* in place needs what goes to j and what comes from j to have one size */
    for (int j = 0; j < P; j++) {
        sc[j] = same ? vcount(base, mult, me + j, -1) : vcount(base, mult, me, j);
        rc[j] = same ? vcount(base, mult, j + me, -1) : vcount(base, mult, j, me);
    }
    size_t stot = layout(P, sc, packed, sd), rtot = layout(P, rc, packed, rd);
    tbuf_t S, R;
    tb_make(&S, stot * es, 0);
    tb_make(&R, rtot * es, 0);
    char *exp = malloc(rtot * es + 1), *orig = malloc(stot * es + 1);
    memset(exp, FILL_BYTE, rtot * es);
    for (int j = 0; j < P; j++) {
        fill_bytes(S.p + sd[j] * es, sc[j] * es, (uint64_t)me * TH_MAX_RANKS + (uint64_t)j, c->ncase);
        fill_bytes(exp + rd[j] * es, rc[j] * es, (uint64_t)j * TH_MAX_RANKS + (uint64_t)me, c->ncase);
    }
    memcpy(orig, S.p, stot * es);
    const void *sb = S.p;
    if (same) {
        memcpy(R.p, S.p, stot * es); /* same counts and layout on both sides */
        sb = R.p;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "base=%d mult=%zu displs=%s", base, mult,
             packed ? "NULL" : "reversed+gaps");
    describe(c, "alltoallv", dt, -1, rtot, mode, extra);
    tutti_status_t st = tutti_alltoallv(sb, sc, packed ? NULL : sd, R.p, rc, packed ? NULL : rd, dt,
                                        c->comm, wk(c));
    if (fin(c, st, true) == 0) {
        cmp(c, "recvbuf", exp, R.p, rtot, es);
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cmp(c, "sendbuf changed", orig, S.p, stot, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static void run_moves(ctx_t *c, tutti_coll_t coll)
{
    static const int bmodes[] = {M_OOP, M_INPLACE, M_OFF_ELEM, M_OFF_BYTE}; /* allgather */
    static const int amodes[] = {M_OOP, M_SAME, M_OFF_ELEM, M_OFF_BYTE};    /* alltoall */
    static const int cmodes[] = {M_OOP, M_OFF_ELEM, M_OFF_BYTE};            /* bcast */
    for (int a = 0; algo_names[coll][a] && !c->fatal; a++) {
        int u = use_algo(c, coll, algo_names[coll][a]);
        if (u < 0)
            c->fatal = true;
        if (u <= 0)
            continue;
        for (int d = 0; d < NMDT && !c->fatal; d++) {
            tutti_dtype_t dt = move_dtypes[d];
            size_t es = tutti_dtype_size(dt);
            for (int s = 0; s < NSIZES && !c->fatal; s++) {
                size_t n = coll == TUTTI_COLL_BCAST ? red_sizes[s] : blk_sizes[s];
                const int *modes = coll == TUTTI_COLL_ALLGATHER ? bmodes
                                   : coll == TUTTI_COLL_ALLTOALL ? amodes : cmodes;
                int nm = coll == TUTTI_COLL_BCAST ? 3 : 4;
                for (int k = 0; k < nm && !c->fatal; k++) {
                    int m = modes[k];
                    if (mode_skip(m, es, n))
                        continue;
                    c->ncase++;
                    if (!want(c, n, m, dt, -1))
                        continue;
                    if (coll == TUTTI_COLL_ALLGATHER)
                        case_allgather(c, dt, n, m);
                    else if (coll == TUTTI_COLL_ALLTOALL)
                        case_alltoall(c, dt, n, m);
                    else if (n <= 7) /* every root for small messages, one in turn for the rest */
                        for (int root = 0; root < c->size && !c->fatal; root++)
                            case_bcast(c, dt, n, m, root);
                    else
                        case_bcast(c, dt, n, m, (int)(c->ncase % (unsigned)c->size));
                }
            }
        }
        /* the v-variants go through the same algorithm setting */
        static const size_t mults[] = {1, 613};
        for (int base = 0; base < 5 && !c->fatal; base++)
            for (int mi = 0; mi < 2 && !c->fatal; mi++)
                for (int packed = 0; packed < 2 && !c->fatal; packed++)
                    for (int k = 0; k < 2 && !c->fatal; k++) {
                        tutti_dtype_t dt = (base + k) % 2 ? TUTTI_FLOAT64 : TUTTI_INT8;
                        c->ncase++;
                        if (c->size >= 8 && mults[mi] > 1 && base % 2)
                            continue;
                        if (coll == TUTTI_COLL_ALLGATHER)
                            case_allgatherv(c, dt, base, mults[mi], packed, k ? M_INPLACE : M_OOP);
                        else if (coll == TUTTI_COLL_ALLTOALL)
                            case_alltoallv(c, dt, base, mults[mi], packed, k ? M_SAME : M_OOP);
                    }
    }
    c->algo = NULL;
}

/* ---- barrier, send/recv ------------------------------------------------------------------------ */

/* A barrier is right if no rank leaves round k before every rank has counted itself in it. */
static void run_barrier(ctx_t *c)
{
    th_shared_t *sh = th_shared();
    for (int a = 0; algo_names[TUTTI_COLL_BARRIER][a] && !c->fatal; a++) {
        int u = use_algo(c, TUTTI_COLL_BARRIER, algo_names[TUTTI_COLL_BARRIER][a]);
        if (u < 0)
            c->fatal = true;
        if (u <= 0)
            continue;
        for (int k = 0; k < 4 && !c->fatal; k++) {
            __atomic_fetch_add(&sh->counter, 1, __ATOMIC_SEQ_CST);
            c->barrier_rounds++;
            describe(c, "barrier", TUTTI_INT8, -1, 0, -1, NULL);
            if (fin(c, tutti_barrier(c->comm, wk(c)), true))
                break;
            long seen = __atomic_load_n(&sh->counter, __ATOMIC_SEQ_CST);
            if (seen != c->barrier_rounds * c->size)
                report(c, "round %ld: left the barrier having seen %ld arrivals, expected %ld",
                       c->barrier_rounds, seen, c->barrier_rounds * c->size);
            if (fin(c, tutti_barrier(c->comm, wk(c)), true)) /* nobody counts the next round early */
                break;
        }
    }
    c->algo = NULL;
}

/* A ring of messages: to rank+1, from rank-1, several per pair with different tags and sizes,
 * posted even ranks send-first and odd ranks receive-first so that even an implementation
 * that runs them one at a time cannot deadlock. */
static void run_p2p(ctx_t *c)
{
    if (c->size < 2)
        return;
    static const struct {
        size_t count;
        tutti_dtype_t dt;
        int tag;
    } msgs[] = {
        {0, TUTTI_INT8, 0}, {1, TUTTI_FLOAT32, 7}, {1 << 20, TUTTI_INT8, 1023}, {1, TUTTI_INT64, 1},
        {1031, TUTTI_BFLOAT16, 512},
    };
    enum { NM = sizeof msgs / sizeof msgs[0] };
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    tbuf_t S[NM], R[NM];
    tutti_work_t *ws[NM], *wr[NM];
    c->algo = NULL;
    describe(c, "send/recv ring", TUTTI_INT8, -1, 0, -1, NULL);
    for (int m = 0; m < NM; m++) {
        size_t bytes = msgs[m].count * tutti_dtype_size(msgs[m].dt);
        tb_make(&S[m], bytes, m % 2);
        tb_make(&R[m], bytes, (m + 1) % 2);
        fill_bytes(S[m].p, bytes, (uint64_t)c->rank, 1000u + (unsigned)m);
        ws[m] = wr[m] = NULL;
    }
    for (int m = 0; m < NM && !c->fatal; m++) {
        for (int half = 0; half < 2; half++) {
            bool send = (half == 0) == (c->rank % 2 == 0);
            tutti_status_t st;
            if (send)
                st = tutti_send(S[m].p, msgs[m].count, msgs[m].dt, next, msgs[m].tag, c->comm, &ws[m]);
            else
                st = tutti_recv(R[m].p, msgs[m].count, msgs[m].dt, prev, msgs[m].tag, c->comm, &wr[m]);
            if (st != TUTTI_OK) {
                report(c, "message %d (%zu x %s, tag %d): %s returned %d (%s): %s", m, msgs[m].count,
                       tutti_dtype_name(msgs[m].dt), msgs[m].tag, send ? "tutti_send" : "tutti_recv",
                       st, tutti_strerror(st), tutti_comm_last_error(c->comm));
                c->fatal = true;
                break;
            }
        }
    }
    for (int m = 0; m < NM; m++) {
        tutti_work_t *h[2] = {ws[m], wr[m]};
        for (int k = 0; k < 2; k++) {
            if (h[k] == NULL)
                continue;
            tutti_status_t st = tutti_work_wait(h[k], -1.0);
            if (st != TUTTI_OK) {
                report(c, "message %d: %s finished with %d (%s): %s", m, k ? "recv" : "send", st,
                       tutti_strerror(st), tutti_work_error(h[k]));
                c->fatal = true;
            }
            tutti_work_free(h[k]);
        }
    }
    if (!c->fatal) {
        for (int m = 0; m < NM; m++) {
            size_t bytes = R[m].bytes;
            char *exp = malloc(bytes + 1);
            fill_bytes(exp, bytes, (uint64_t)prev, 1000u + (unsigned)m);
            char what[96];
            snprintf(what, sizeof what, "message %d (%zu bytes, tag %d) from rank %d", m, bytes,
                     msgs[m].tag, prev);
            cmp(c, what, exp, R[m].p, bytes, 1);
            tb_guards(c, &R[m], what);
            free(exp);
        }
    }
    for (int m = 0; m < NM; m++) {
        tb_free(&S[m]);
        tb_free(&R[m]);
    }

    /* blocking calls between ranks 0 and 1 */
    if (!c->fatal && c->rank < 2) {
        size_t n = 1 << 20;
        tbuf_t B;
        tb_make(&B, n, 0);
        char *exp = malloc(n);
        fill_bytes(exp, n, 77, 77);
        tutti_status_t st;
        if (c->rank == 0) {
            memcpy(B.p, exp, n);
            st = tutti_send(B.p, n, TUTTI_UINT8, 1, 3, c->comm, NULL);
        } else {
            st = tutti_recv(B.p, n, TUTTI_UINT8, 0, 3, c->comm, NULL);
        }
        describe(c, "blocking send/recv", TUTTI_UINT8, -1, n, -1, NULL);
        if (st != TUTTI_OK) {
            report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
            c->fatal = true;
        } else {
            cmp(c, "buf", exp, B.p, n, 1);
        }
        tb_free(&B);
        free(exp);
    }
}

/* ---- several operations in flight ------------------------------------------------------------ */

/* Post several collectives before waiting for any (the queue must run them in posting order on
 * every rank), put a blocking one behind them, wait in reverse order, and free one handle without
 * waiting (which must complete it first). */
static void run_pipelined(ctx_t *c)
{
    static const struct {
        tutti_dtype_t dt;
        tutti_op_t op;
        size_t n;
    } k_[] = {
        {TUTTI_FLOAT32, TUTTI_SUM, 1031}, {TUTTI_INT32, TUTTI_BXOR, 7},  {TUTTI_BFLOAT16, TUTTI_AVG, 4099},
        {TUTTI_INT8, TUTTI_PROD, 65537},  {TUTTI_FLOAT64, TUTTI_MAX, 1}, {TUTTI_FLOAT16, TUTTI_SUM, 300},
    };
    enum { K = sizeof k_ / sizeof k_[0] };
    char *S[K], *R[K], *E[K];
    tutti_work_t *w[K];
    unsigned long salt = ++c->ncase * 977u;
    c->algo = "(as set last)";
    uint64_t seq0 = tutti_comm_seq(c->comm);
    for (int k = 0; k < K; k++) {
        size_t bytes = k_[k].n * tutti_dtype_size(k_[k].dt);
        S[k] = malloc(bytes);
        R[k] = malloc(bytes);
        E[k] = malloc(bytes);
        memset(R[k], FILL_BYTE, bytes);
        gen_red(S[k], k_[k].dt, k_[k].op, c->rank, 0, k_[k].n, salt + (unsigned)k);
        ref_red(E[k], k_[k].dt, k_[k].op, c->size, 0, k_[k].n, salt + (unsigned)k);
        w[k] = NULL;
    }
    for (int k = 0; k < K && !c->fatal; k++) {
        describe(c, "allreduce (in flight)", k_[k].dt, k_[k].op, k_[k].n, M_OOP, NULL);
        tutti_status_t st = tutti_allreduce(S[k], R[k], k_[k].n, k_[k].dt, k_[k].op, c->comm, &w[k]);
        if (st != TUTTI_OK || w[k] == NULL) {
            report(c, "post %d returned %d (%s), handle %p: %s", k, st, tutti_strerror(st),
                   (void *)w[k], tutti_comm_last_error(c->comm));
            c->fatal = true;
        }
    }
    /* a blocking broadcast behind them */
    size_t bn = 5000;
    char *B = malloc(bn), *BE = malloc(bn);
    fill_bytes(BE, bn, 4242, salt);
    if (c->rank == c->size - 1)
        memcpy(B, BE, bn);
    else
        memset(B, FILL_BYTE, bn);
    describe(c, "bcast (behind allreduces in flight)", TUTTI_UINT8, -1, bn, M_OOP, NULL);
    if (!c->fatal) {
        tutti_status_t st = tutti_broadcast(B, bn, TUTTI_UINT8, c->size - 1, c->comm, NULL);
        if (st != TUTTI_OK) {
            report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
            c->fatal = true;
        } else {
            cmp(c, "buf", BE, B, bn, 1);
        }
    }
    if (!c->fatal && tutti_comm_seq(c->comm) != seq0 + K + 1)
        report(c, "tutti_comm_seq went from %llu to %llu over %d posts",
               (unsigned long long)seq0, (unsigned long long)tutti_comm_seq(c->comm), K + 1);
    for (int k = K - 1; k >= 0; k--) {
        if (w[k] == NULL)
            continue;
        describe(c, "allreduce (in flight)", k_[k].dt, k_[k].op, k_[k].n, M_OOP, NULL);
        tutti_status_t st = TUTTI_OK;
        if (k == 0) {
            tutti_work_free(w[k]); /* completes it first */
        } else {
            st = tutti_work_wait(w[k], -1.0);
            if (st != TUTTI_OK)
                report(c, "handle %d finished with %d (%s): %s", k, st, tutti_strerror(st),
                       tutti_work_error(w[k]));
            else if (tutti_work_status(w[k]) != TUTTI_OK)
                report(c, "handle %d: wait said OK, tutti_work_status %d", k, tutti_work_status(w[k]));
            tutti_work_free(w[k]);
        }
        if (st == TUTTI_OK)
            cmp(c, "recvbuf", E[k], R[k], k_[k].n, tutti_dtype_size(k_[k].dt));
    }
    for (int k = 0; k < K; k++) {
        free(S[k]);
        free(R[k]);
        free(E[k]);
    }
    free(B);
    free(BE);
    c->algo = NULL;
}

/* ---- several MiB ------------------------------------------------------------------------------- */

static void run_large(ctx_t *c)
{
    static const char *const ar[] = {"ring", "tree", "direct"};
    for (int a = 0; a < 3 && !c->fatal; a++) {
        if (use_algo(c, TUTTI_COLL_ALLREDUCE, ar[a]) <= 0)
            continue;
        c->ncase++;
        case_allreduce(c, TUTTI_INT8, TUTTI_SUM, (3u << 20) + 5u, M_OOP);
        c->ncase++;
        if (!c->fatal)
            case_allreduce(c, TUTTI_FLOAT32, TUTTI_SUM, 6u << 18, M_INPLACE);
        c->ncase++;
        if (!c->fatal)
            case_allreduce(c, TUTTI_BFLOAT16, TUTTI_AVG, (1u << 20) + 3u, M_OFF_BYTE);
    }
    static const char *const ag[] = {"ring", "direct"};
    for (int a = 0; a < 2 && !c->fatal; a++) {
        if (use_algo(c, TUTTI_COLL_ALLGATHER, ag[a]) <= 0)
            continue;
        c->ncase++;
        case_allgather(c, TUTTI_INT8, 1u << 20, M_OOP);
    }
    c->algo = NULL;
}

/* ---- the rank bodies ------------------------------------------------------------------------- */

static int check_getters(ctx_t *c)
{
    int bad = 0;
    describe(c, "getters", TUTTI_INT8, -1, 0, -1, NULL);
    if (tutti_comm_rank(c->comm) != c->rank)
        report(c, "tutti_comm_rank = %d", tutti_comm_rank(c->comm)), bad = 1;
    if (tutti_comm_size(c->comm) != c->size)
        report(c, "tutti_comm_size = %d", tutti_comm_size(c->comm)), bad = 1;
    if (tutti_comm_local_rank(c->comm) != c->rank)
        report(c, "tutti_comm_local_rank = %d (one node)", tutti_comm_local_rank(c->comm)), bad = 1;
    if (tutti_comm_local_size(c->comm) != c->size)
        report(c, "tutti_comm_local_size = %d (one node)", tutti_comm_local_size(c->comm)), bad = 1;
    if (tutti_comm_node_count(c->comm) != 1)
        report(c, "tutti_comm_node_count = %d (one node)", tutti_comm_node_count(c->comm)), bad = 1;
    if (tutti_comm_seq(c->comm) != 0)
        report(c, "tutti_comm_seq = %llu on a new communicator",
               (unsigned long long)tutti_comm_seq(c->comm)), bad = 1;
    for (int p = 0; p < c->size; p++) {
        const char *t = tutti_comm_transport(c->comm, p);
        const char *want_t = p == c->rank ? "self" : c->tp;
        if (t == NULL || strcmp(t, want_t) != 0)
            report(c, "tutti_comm_transport(peer %d) = %s, expected %s", p, t ? t : "(NULL)",
                   want_t), bad = 1;
    }
    if (tutti_comm_transport(c->comm, -1) != NULL || tutti_comm_transport(c->comm, c->size) != NULL)
        report(c, "tutti_comm_transport of an out-of-range peer is not NULL"), bad = 1;
    if (tutti_comm_last_error(c->comm) == NULL || tutti_comm_last_error(c->comm)[0] != '\0')
        report(c, "tutti_comm_last_error on a new communicator is \"%s\"",
               tutti_comm_last_error(c->comm) ? tutti_comm_last_error(c->comm) : "(NULL)"), bad = 1;
    return bad;
}

typedef struct mcfg {
    const char *tp;
    int nranks;
    bool large;
    double timeout; /* tcase timeout; the harness gets a little less */
} mcfg_t;

static const mcfg_t matrix[] = {
    {"shm", 1, false, 60},  {"shm", 2, true, 90},  {"shm", 3, true, 90},  {"shm", 4, false, 90},
    {"shm", 8, false, 120}, {"ofi", 1, false, 60}, {"ofi", 2, true, 90},  {"ofi", 3, true, 120},
    {"ofi", 4, false, 120}, {"ofi", 8, false, 150},
};
#define NMATRIX ((int)(sizeof matrix / sizeof matrix[0]))

static int matrix_rank(int rank, int size, void *arg)
{
    const mcfg_t *cfg = arg;
    ctx_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = size;
    c.tp = cfg->tp;
    c.ofi = strcmp(cfg->tp, "ofi") == 0;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &c.comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    double t_init = th_now() - t0;
    check_getters(&c);
    check_unknown_algo(&c);
    double t1 = th_now();
    run_reductions(&c, TUTTI_COLL_ALLREDUCE);
    double t_ar = th_now() - t1;
    run_reductions(&c, TUTTI_COLL_REDUCE_SCATTER);
    run_reductions(&c, TUTTI_COLL_REDUCE);
    run_moves(&c, TUTTI_COLL_ALLGATHER);
    run_moves(&c, TUTTI_COLL_ALLTOALL);
    run_moves(&c, TUTTI_COLL_BCAST);
    if (!c.fatal)
        run_barrier(&c);
    if (!c.fatal)
        run_p2p(&c);
    if (!c.fatal)
        run_pipelined(&c);
    if (!c.fatal && cfg->large)
        run_large(&c);
    double t2 = th_now();
    st = tutti_comm_destroy(c.comm);
    if (st != TUTTI_OK && !c.fatal)
        report(&c, "tutti_comm_destroy returned %d (%s): %s", st, tutti_strerror(st),
               tutti_last_error());
    if (tutti_comm_rank(c.comm) != -1 || tutti_comm_size(c.comm) != -1)
        report(&c, "getters on a destroyed communicator do not return -1");
    if (rank == 0)
        fprintf(stderr, "[%s x %d] %lu cases, %lu calls: init %.2f s, allreduce %.2f s, all %.2f s, "
                        "destroy %.2f s\n",
                cfg->tp, size, c.ncase, c.nrun, t_init, t_ar, t2 - t0, th_now() - t2);
    return c.errors ? 1 : 0;
}

START_TEST(test_matrix)
{
    const mcfg_t *cfg = &matrix[_i];
    int rc = th_run(cfg->nranks, cfg->tp, cfg->timeout - 5, matrix_rank, (void *)cfg);
    ck_assert_msg(rc == 0, "collectives on %s with %d ranks failed (details on stderr)", cfg->tp,
                  cfg->nranks);
}
END_TEST

/* ---- environment overrides ---------------------------------------------------------------------- */

static int override_rank(int rank, int size, void *arg)
{
    (void)arg;
    ctx_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = size;
    c.tp = "shm";
    tutti_status_t st = tutti_comm_init_env(NULL, &c.comm);
    if (st != TUTTI_OK)
        return th_fail("CCL_ALLREDUCE=\"%s\": tutti_comm_init_env: %d (%s): %s",
                       getenv("CCL_ALLREDUCE"), st, tutti_strerror(st), tutti_last_error());
    static const struct {
        size_t bytes;
        const char *algo;
    } want_a[] = {{0, "tree"}, {100, "tree"}, {16384, "tree"}, {16385, "ring"}, {100000, "ring"}};
    describe(&c, "allreduce", TUTTI_FLOAT32, TUTTI_SUM, 0, M_OOP,
             "CCL_ALLREDUCE=\"tree:0-16384;ring:16385-max\"");
    for (size_t k = 0; k < sizeof want_a / sizeof want_a[0]; k++) {
        const char *a = tutti_comm_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, want_a[k].bytes);
        if (a == NULL || strcmp(a, want_a[k].algo) != 0)
            report(&c, "tutti_comm_algorithm(%zu bytes) = %s, expected %s", want_a[k].bytes,
                   a ? a : "(NULL)", want_a[k].algo);
    }
    c.algo = "env";
    c.ncase++;
    case_allreduce(&c, TUTTI_FLOAT32, TUTTI_SUM, 25, M_OOP);
    c.ncase++;
    if (!c.fatal)
        case_allreduce(&c, TUTTI_FLOAT32, TUTTI_SUM, 25000, M_OOP);
    /* a spec with ranges through the API */
    describe(&c, "allreduce", TUTTI_FLOAT32, TUTTI_SUM, 0, -1, "set \"ring:0-1023;tree:1024-max\"");
    st = tutti_comm_set_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, "ring:0-1023;tree:1024-max");
    if (st != TUTTI_OK) {
        report(&c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c.comm));
    } else {
        const char *a1 = tutti_comm_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, 1023);
        const char *a2 = tutti_comm_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, 1024);
        if (a1 == NULL || strcmp(a1, "ring") || a2 == NULL || strcmp(a2, "tree"))
            report(&c, "tutti_comm_algorithm: 1023 bytes -> %s, 1024 -> %s", a1 ? a1 : "(NULL)",
                   a2 ? a2 : "(NULL)");
    }
    if (!c.fatal)
        case_allreduce(&c, TUTTI_INT32, TUTTI_SUM, 1000, M_OOP);
    st = tutti_comm_destroy(c.comm);
    if (st != TUTTI_OK)
        report(&c, "tutti_comm_destroy: %d (%s)", st, tutti_strerror(st));
    return c.errors ? 1 : 0;
}

static int bogus_override_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("CCL_ALLREDUCE=bogus: tutti_comm_init_env succeeded; expected "
                       "TUTTI_ERR_INVALID_ARG");
    }
    int bad = 0;
    const char *msg = tutti_last_error();
    if (st != TUTTI_ERR_INVALID_ARG)
        bad = th_fail("CCL_ALLREDUCE=bogus: expected TUTTI_ERR_INVALID_ARG, got %d (%s): %s", st,
                      tutti_strerror(st), msg);
    if (!names_all(msg, TUTTI_COLL_ALLREDUCE, false) || strstr(msg, "bogus") == NULL)
        bad = th_fail("CCL_ALLREDUCE=bogus: the error should name the value and list ring, tree, "
                      "direct: \"%s\"", msg);
    if (th_now() - t0 > 4.0)
        bad = th_fail("CCL_ALLREDUCE=bogus: failing took %.1f s", th_now() - t0);
    return bad;
}

START_TEST(test_env_override)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    o.env[0] = "CCL_ALLREDUCE=tree:0-16384;ring:16385-max";
    ck_assert_msg(th_run_opts(2, &o, override_rank, NULL) == 0, "CCL_ALLREDUCE override failed");
}
END_TEST

START_TEST(test_env_bogus)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 20;
    o.rank_timeout_s = 5;
    o.env[0] = "CCL_ALLREDUCE=bogus";
    ck_assert_msg(th_run_opts(2, &o, bogus_override_rank, NULL) == 0,
                  "CCL_ALLREDUCE=bogus was not refused properly");
}
END_TEST

static Suite *collectives_suite(void)
{
    Suite *s = suite_create("collectives");
    static char names[NMATRIX][32]; /* Check keeps the pointer, not a copy */
    for (int i = 0; i < NMATRIX; i++) {
        snprintf(names[i], sizeof names[i], "%s_%d", matrix[i].tp, matrix[i].nranks);
        TCase *tc = tcase_create(names[i]);
        tcase_set_timeout(tc, matrix[i].timeout);
        tcase_add_loop_test(tc, test_matrix, i, i + 1);
        suite_add_tcase(s, tc);
    }
    TCase *tc = tcase_create("env_override");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_env_override);
    tcase_add_test(tc, test_env_bogus);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(collectives_suite());
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
