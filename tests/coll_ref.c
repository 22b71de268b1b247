/* coll_ref.c: the shared reference code of the collectives tests (see coll_ref.h). */
#include "coll_ref.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const cr_mode_name[M_COUNT] = {
    "out-of-place", "TUTTI_IN_PLACE", "sendbuf==recvbuf", "pointers+1 element", "odd byte offsets",
};

const tutti_dtype_t cr_all_dtypes[CR_NDT] = {TUTTI_INT8,    TUTTI_UINT8,    TUTTI_INT32,
                                             TUTTI_INT64,   TUTTI_FLOAT16,  TUTTI_BFLOAT16,
                                             TUTTI_FLOAT32, TUTTI_FLOAT64};
const tutti_dtype_t cr_move_dtypes[CR_NMDT] = {TUTTI_INT8, TUTTI_FLOAT16, TUTTI_FLOAT32,
                                               TUTTI_FLOAT64};

bool cr_is_float(tutti_dtype_t dt) { return dt >= TUTTI_FLOAT16 && dt <= TUTTI_FLOAT64; }

bool cr_op_ok(tutti_op_t op, tutti_dtype_t dt)
{
    if (op == TUTTI_AVG)
        return cr_is_float(dt);
    if (op == TUTTI_BAND || op == TUTTI_BOR || op == TUTTI_BXOR)
        return !cr_is_float(dt);
    return true;
}

/* ---- per-rank context: reports, descriptions, calls ------------------------------------------ */

#define MAX_PRINTS 30

void cr_report(ctx_t *c, const char *fmt, ...)
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

void cr_describe(ctx_t *c, const char *coll, tutti_dtype_t dt, int op, size_t count, int mode,
                 const char *extra)
{
    snprintf(c->desc, sizeof c->desc,
             "%s algo=%s dtype=%s op=%s transport=%s nranks=%d count=%zu mode=%s%s%s", coll,
             c->algo ? c->algo : "-", tutti_dtype_name(dt),
             op >= 0 ? tutti_op_name((tutti_op_t)op) : "-", c->tp, c->size, count,
             mode >= 0 ? cr_mode_name[mode] : "-", extra ? " " : "", extra ? extra : "");
    const char *log = getenv("TH_CASE_LOG");
    if (log != NULL && *log != '\0' && c->rank == 0 && !c->dry) {
        FILE *f = fopen(log, "a");
        if (f == NULL) {
            th_fail("TH_CASE_LOG=%s: cannot open it for appending", log);
            return;
        }
        fprintf(f, "ncase=%lu call=%lu %s\n", c->ncase, c->nrun, c->desc);
        fclose(f);
    }
}

tutti_work_t **cr_wk(ctx_t *c)
{
    c->w = NULL;
    c->seq0 = tutti_comm_seq(c->comm);
    c->wmode = (int)(c->nrun++ % 3);
    c->ncalls++;
    return c->wmode ? &c->w : NULL;
}

int cr_fin(ctx_t *c, tutti_status_t st, bool is_coll)
{
    if (st != TUTTI_OK) {
        cr_report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
        c->fatal = true;
        if (c->w)
            tutti_work_free(c->w);
        return 1;
    }
    if (c->wmode) {
        if (c->w == NULL) {
            cr_report(c, "returned TUTTI_OK but stored no work handle");
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
                    cr_report(c, "tutti_work_test: not done but status %d (%s)", st, tutti_strerror(st));
                    break;
                }
                if (done)
                    break;
                if (th_now() - t0 > 60) {
                    cr_report(c, "tutti_work_test: not done after 60 s");
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
            cr_report(c, "tutti_work_wait said OK but tutti_work_status says %d",
                      tutti_work_status(c->w));
        if (st != TUTTI_OK)
            cr_report(c, "work handle finished with %d (%s): %s", st, tutti_strerror(st),
                      tutti_work_error(c->w));
        else if (tutti_work_error(c->w) == NULL || tutti_work_error(c->w)[0] != '\0')
            cr_report(c, "work handle succeeded but tutti_work_error is \"%s\"",
                      tutti_work_error(c->w) ? tutti_work_error(c->w) : "(NULL)");
        tutti_work_free(c->w);
        c->w = NULL;
        if (st != TUTTI_OK) {
            c->fatal = true;
            return 1;
        }
    }
    if (is_coll && tutti_comm_seq(c->comm) != c->seq0 + 1) {
        cr_report(c, "tutti_comm_seq went from %llu to %llu (expected +1)",
                  (unsigned long long)c->seq0, (unsigned long long)tutti_comm_seq(c->comm));
    }
    return 0;
}

/* ---- buffers with guard zones ----------------------------------------------------------------- */

#define GUARD 64
#define GUARD_BYTE 0xc3

void tb_make(tbuf_t *b, size_t bytes, size_t off)
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
    memset(b->p, CR_FILL_BYTE, bytes);
    memset(b->p + bytes, GUARD_BYTE, GUARD + 16 - off);
}

void tb_free(tbuf_t *b)
{
    free(b->base);
    b->base = b->p = NULL;
}

int tb_guards(ctx_t *c, const tbuf_t *b, const char *which)
{
    for (size_t i = 0; i < GUARD + b->off; i++)
        if (b->base[i] != GUARD_BYTE) {
            cr_report(c, "%s: byte %zd before the buffer was overwritten (0x%02x)", which,
                      (ssize_t)i - (ssize_t)(GUARD + b->off), b->base[i]);
            return 1;
        }
    for (size_t i = 0; i < GUARD + 16 - b->off; i++)
        if (b->p[b->bytes + i] != GUARD_BYTE) {
            cr_report(c, "%s: byte %zu after the end of the buffer (%zu bytes) was overwritten (0x%02x)",
                      which, i, b->bytes, b->p[b->bytes + i]);
            return 1;
        }
    return 0;
}

void cr_offsets(int mode, size_t es, size_t *soff, size_t *roff)
{
    *soff = *roff = 0;
    if (mode == M_OFF_ELEM)
        *soff = *roff = es;
    else if (mode == M_OFF_BYTE) {
        *soff = 1;
        *roff = 3;
    }
}

bool cr_mode_skip(int mode, size_t es, size_t n)
{
    return mode == M_OFF_BYTE && (es == 1 || n <= 1);
}

int cr_cmp(ctx_t *c, const char *what, const void *exp, const void *got, size_t n, size_t es)
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
        cr_report(c, "%s: index %zu: expected bits %s got %s (%zu of %zu elements differ)", what,
                  first, th_hex(he, e + first * es, es), th_hex(hg, g + first * es, es), bad, n);
        return 1;
    }
    return 0;
}

void cr_check_out(ctx_t *c, const tbuf_t *R, const void *exp, size_t nr, const void *sb,
                  const tbuf_t *S, const void *orig, size_t ns, size_t es)
{
    cr_cmp(c, "recvbuf", exp, R->p, nr, es);
    tb_guards(c, R, "recvbuf");
    if (sb != S->p)
        return;
    if (orig != NULL)
        cr_cmp(c, "sendbuf changed", orig, S->p, ns, es);
    tb_guards(c, S, "sendbuf");
}

/* Byte k of the block is byte k % 8 of th_hash64(a, b, k / 8). */
void cr_fill_bytes(void *p, size_t nbytes, uint64_t a, uint64_t b)
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
        if (!cr_is_float(dt))
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
        return cr_is_float(dt) ? (int64_t)(h % 241u) - 120 : (int64_t)h;
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

void cr_gen_red(void *p, tutti_dtype_t dt, tutti_op_t op, int r, size_t start, size_t n,
                unsigned long salt)
{
    size_t es = tutti_dtype_size(dt);
    for (size_t i = 0; i < n; i++)
        store((char *)p + i * es, dt, in_val(dt, op, r, start + i, salt));
}

/* Every input is an integer held exactly and every float partial result stays exact, so integer
 * arithmetic (wrapping like the dtype) gives every result but avg. */
void cr_ref_red(void *p, tutti_dtype_t dt, tutti_op_t op, int nranks, size_t start, size_t n,
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

/* ---- v-collectives: uneven counts and layouts ------------------------------------------------- */

size_t cr_vcount(int base, size_t mult, int i, int j)
{
    return (size_t)(((unsigned)i * 3u + (j < 0 ? 0u : (unsigned)j * 5u) + (unsigned)base) % 5u) * mult;
}

size_t cr_layout(int P, const size_t *counts, bool packed, size_t *displs)
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
