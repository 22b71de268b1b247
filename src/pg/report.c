/* report.c: the straggler report (TUTTI_REPORT=1 at destroy, or tutti_comm_report): per
 * collective and size class, how long each rank waited for the last rank to post the same
 * call, and which rank posted last, how often and by how much.
 *
 * Each rank keeps when it posted each of its last TUTTI_REPORT_CALLS collectives (observe.c:
 * a clock read per call, no message). The report passes a barrier (earlier work has ended),
 * agrees on the calls every rank still holds and that every rank can take part (two small
 * allreduces), gathers the post times (one allgather, times on rank 0's clock by the offsets
 * measured at creation) and rank 0 computes the rest. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "observe.h"

enum { NCLASS = 5 };
static const char *const class_name[NCLASS] = {"<= 4 KiB", "<= 64 KiB", "<= 1 MiB", "<= 16 MiB",
                                               "> 16 MiB"};

static int size_class(uint64_t bytes)
{
    return bytes <= 4096           ? 0
           : bytes <= 65536        ? 1
           : bytes <= (1u << 20)   ? 2
           : bytes <= (16u << 20)  ? 3
                                   : 4;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* pct is the p-th percentile (nearest rank) of the n sorted values. */
static double pct(const float *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)ceil(p / 100.0 * (double)n);
    return v[i > 0 ? i - 1 : 0];
}

typedef struct out {
    char *p;
    size_t cap, n;
    bool cut;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    if (o->cut)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= o->cap - o->n) {
        o->cut = true;
        o->p[o->n] = '\0';
        return;
    }
    o->n += (size_t)k;
}

/* in_group tells whether call c belongs to the group of collective name and size class cls. */
static bool in_group(const tutti__obs_call_t *c, const char *name, int cls)
{
    return strcmp(c->name, name) == 0 && size_class(c->bytes) == cls;
}

/* describe writes the report of the m calls from seq lo, whose post times t[r * m + i] (rank
 * 0's clock; NaN where a rank had none) every rank gave; mine[i] is rank 0's record of call i. */
static void describe(out_t *o, int n, uint64_t lo, size_t m, const double *t,
                     const tutti__obs_call_t *const *mine, double err)
{
    float *wait = malloc((size_t)n * m * sizeof *wait), *tmp = malloc(m * sizeof *tmp);
    float *lag = malloc(m * sizeof *lag);
    int *last = malloc(m * sizeof *last);
    size_t *cnt = malloc((size_t)n * sizeof *cnt);
    bool *done = malloc(m * sizeof *done);
    if (wait == NULL || tmp == NULL || last == NULL || lag == NULL || cnt == NULL || done == NULL) {
        put(o, "tutti report: out of memory for %zu calls x %d ranks\n", m, n);
        goto out;
    }
    size_t used = 0;
    for (size_t i = 0; i < m; i++) {
        double hi = -INFINITY, second = -INFINITY;
        int who = -1;
        for (int r = 0; r < n && who != -2; r++) {
            double a = t[(size_t)r * m + i];
            if (isnan(a))
                who = -2; /* a rank did not record it (replaced in its ring, or never run) */
            else if (a > hi)
                second = hi, hi = a, who = r;
            else if (a > second)
                second = a;
        }
        last[i] = who;
        done[i] = who < 0;
        if (who < 0)
            continue;
        used++;
        lag[i] = n > 1 ? (float)((hi - second) * 1e6) : 0.0f;
        for (int r = 0; r < n; r++)
            wait[(size_t)r * m + i] = (float)((hi - t[(size_t)r * m + i]) * 1e6);
    }
    put(o, "tutti report: %d ranks, calls #%llu-#%llu (%zu that every rank recorded); each rank's "
           "clock aligned to rank 0's within %.1f us\n",
        n, (unsigned long long)lo, (unsigned long long)(lo + m - 1), used, err * 1e6);
    put(o, "  wait: how long each rank's call waited for the last rank to post it, median/p99 us\n"
           "  last: which ranks posted last, how many times, and how far each trailed the rank "
           "before it, median/p99 us\n");
    /* Group by collective (in order of first appearance) and size class. */
    for (size_t first = 0; first < m; first++) {
        if (done[first])
            continue;
        const char *name = mine[first]->name;
        for (int cls = 0; cls < NCLASS; cls++) {
            size_t k = 0;
            memset(cnt, 0, (size_t)n * sizeof *cnt);
            for (size_t i = first; i < m; i++)
                if (!done[i] && in_group(mine[i], name, cls))
                    k++, cnt[last[i]]++;
            if (k == 0)
                continue;
            put(o, "%s %s: %zu calls\n  last:", name, class_name[cls], k);
            for (int shown = 0; shown < 8; shown++) { /* most often last first */
                int br = -1;
                for (int r = 0; r < n; r++)
                    if (cnt[r] > 0 && (br < 0 || cnt[r] > cnt[br]))
                        br = r;
                if (br < 0)
                    break;
                size_t j = 0;
                for (size_t i = first; i < m; i++)
                    if (!done[i] && last[i] == br && in_group(mine[i], name, cls))
                        tmp[j++] = lag[i];
                qsort(tmp, j, sizeof *tmp, cmp_float);
                put(o, "%s rank %d %zu times (%.1f/%.1f)", shown ? "," : "", br, cnt[br],
                    pct(tmp, j, 50), pct(tmp, j, 99));
                cnt[br] = 0;
            }
            put(o, "\n  wait:");
            for (int r = 0; r < n; r++) {
                size_t j = 0;
                for (size_t i = first; i < m; i++)
                    if (!done[i] && in_group(mine[i], name, cls))
                        tmp[j++] = wait[(size_t)r * m + i];
                qsort(tmp, j, sizeof *tmp, cmp_float);
                put(o, "%s rank %d %.1f/%.1f", r ? "," : "", r, pct(tmp, j, 50), pct(tmp, j, 99));
            }
            put(o, "\n");
        }
        for (size_t i = first; i < m; i++)
            if (!done[i] && strcmp(mine[i]->name, name) == 0)
                done[i] = true;
    }
    if (o->cut) { /* the note goes where the text stopped, or over its end */
        size_t at = o->cap > 40 && o->n > o->cap - 40 ? o->cap - 40 : o->n;
        snprintf(o->p + at, o->cap - at, "\n(report cut: too long)\n");
    }
out:
    free(wait);
    free(tmp);
    free(lag);
    free(last);
    free(cnt);
    free(done);
}

/* The most (calls x ranks) post times one report gathers: 16 M, 128 MiB on every rank. */
#define REPORT_CELLS ((size_t)16 << 20)

tutti_status_t tutti__report(tutti_comm_t *comm, char *text, size_t cap)
{
    tutti__obs_t *o = comm->obs;
    const int n = comm->size;
    text[0] = '\0';
    /* Every collective posted before this one has ended once a barrier has (the queue runs
     * them in order): only then is the ring a record of them, and it is copied, since the
     * report's own collectives take places in it. */
    TUTTI__CHECK(tutti_barrier(comm, NULL));
    tutti__obs_call_t *ring = malloc(o->ncalls * sizeof *ring);
    if (ring != NULL)
        memcpy(ring, o->calls, o->ncalls * sizeof *ring);
    /* The calls every rank still holds: [the latest first one, the earliest last one], and the
     * smallest ring (TUTTI_REPORT_CALLS may differ between ranks). */
    int64_t mine[3] = {-INT64_MAX, -1, ring != NULL ? (int64_t)o->ncalls : -1}, agreed[3];
    for (size_t i = 0; ring != NULL && i < o->ncalls; i++) {
        int64_t s1 = (int64_t)ring[i].seq1;
        if (s1 == 0)
            continue;
        if (mine[0] == -INT64_MAX || -(s1 - 1) > mine[0])
            mine[0] = -(s1 - 1);
        if (s1 - 1 > mine[1])
            mine[1] = s1 - 1;
    }
    tutti_status_t st = tutti_allreduce(mine, agreed, 3, TUTTI_INT64, TUTTI_MIN, comm, NULL);
    if (st == TUTTI_OK && agreed[2] < 0)
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "tutti_comm_report: a rank is out of memory");
    int64_t lo = -agreed[0], hi = agreed[1];
    size_t m = st == TUTTI_OK && hi >= lo && lo >= 0 ? (size_t)(hi - lo + 1) : 0;
    /* The latest calls, as many as the smallest ring and REPORT_CELLS allow. */
    size_t most = (size_t)agreed[2] < REPORT_CELLS / (size_t)n ? (size_t)agreed[2]
                                                                : REPORT_CELLS / (size_t)n;
    if (m > most) {
        lo += (int64_t)(m - most);
        m = most;
    }
    double *t = NULL, *all = NULL;
    const tutti__obs_call_t **calls = NULL;
    if (m > 0) {
        t = malloc(m * sizeof *t);
        all = malloc((size_t)n * m * sizeof *all);
        calls = malloc(m * sizeof *calls);
        /* Every rank must be able to take part in the allgather before any does. */
        int64_t ok = t != NULL && all != NULL && calls != NULL ? 0 : -1, all_ok = -1;
        st = tutti_allreduce(&ok, &all_ok, 1, TUTTI_INT64, TUTTI_MIN, comm, NULL);
        if (st == TUTTI_OK && all_ok < 0)
            st = tutti__set_error(TUTTI_ERR_NO_MEMORY,
                                  "tutti_comm_report: a rank is out of memory for %zu calls x %d "
                                  "ranks",
                                  m, n);
    }
    if (st == TUTTI_OK && m == 0 && comm->rank == 0)
        snprintf(text, cap, "tutti report: %d ranks, no collective that every rank recorded\n", n);
    if (st == TUTTI_OK && m > 0) {
        for (size_t i = 0; i < m; i++) {
            const tutti__obs_call_t *c = &ring[((uint64_t)lo + i) % o->ncalls];
            t[i] = c->seq1 == (uint64_t)lo + i + 1 ? c->posted - o->offset : NAN;
            calls[i] = c;
        }
        st = tutti_allgather(t, all, m, TUTTI_FLOAT64, comm, NULL);
        if (st == TUTTI_OK && comm->rank == 0) {
            out_t out = {.p = text, .cap = cap};
            describe(&out, n, (uint64_t)lo, m, all, calls, o->align_err);
        }
    }
    free(t);
    free(all);
    free(calls);
    free(ring);
    return st;
}

TUTTI_API tutti_status_t tutti_comm_report(tutti_comm_t *comm, char *text, size_t cap)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_report: %p is not a live communicator%s", (void *)comm,
                                tutti__comm_why_not(comm));
    if (text == NULL || cap < 2)
        return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                "tutti_comm_report: text %p of %zu bytes: give a buffer (4 KiB "
                                "or more: one line per collective and size class)",
                                (void *)text, cap);
    text[0] = '\0';
    if (comm->obs == NULL)
        return tutti__comm_error(comm, TUTTI_ERR_NOT_SUPPORTED,
                                "tutti_comm_report: nothing was recorded on this communicator: "
                                "set TUTTI_REPORT=1 (or TUTTI_TRACE) on any rank before creating "
                                "it");
    return tutti__report(comm, text, cap);
}
