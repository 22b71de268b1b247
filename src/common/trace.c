/* trace.c: the event recorder behind TUTTI_TRACE (trace.h) and its trace-event JSON writer. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "trace.h"

__thread int tutti__trace_tid;

tutti__trace_t *tutti__trace_new(int nbufs, size_t max_events)
{
    tutti__trace_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->bufs = calloc((size_t)(nbufs > 0 ? nbufs : 1), sizeof *t->bufs);
    if (t->bufs == NULL) {
        free(t);
        return NULL;
    }
    t->nbufs = nbufs > 0 ? nbufs : 1;
    t->max_events = max_events;
    return t;
}

void tutti__trace_free(tutti__trace_t *t)
{
    if (t == NULL)
        return;
    for (int b = 0; b < t->nbufs; b++)
        free(t->bufs[b].ev);
    free(t->bufs);
    free(t);
}

void tutti__trace_add(tutti__trace_t *t, int b, const tutti__tev_t *ev)
{
    if (b < 0 || b >= t->nbufs)
        b = 0;
    tutti__trace_buf_t *buf = &t->bufs[b];
    if (buf->n == buf->cap) {
        /* Grown by doubling, so that a short run costs little memory; never past max_events. */
        size_t cap = buf->cap ? 2 * buf->cap : 1024;
        if (cap > t->max_events)
            cap = t->max_events;
        tutti__tev_t *ev2 = cap > buf->cap ? realloc(buf->ev, cap * sizeof *ev2) : NULL;
        if (ev2 == NULL) {
            __atomic_add_fetch(&t->dropped, 1, __ATOMIC_RELAXED);
            return;
        }
        buf->ev = ev2;
        buf->cap = cap;
    }
    buf->ev[buf->n] = *ev;
    buf->ev[buf->n].tid = (uint16_t)tutti__trace_tid;
    buf->n++;
}

void tutti__trace_phase(tutti__trace_t *t, int b, uint64_t seq, const char *name, int peer,
                        size_t bytes, double t0)
{
    tutti__tev_t ev = {.t0 = t0, .t1 = tutti__now(), .seq = seq, .bytes = bytes, .name = name,
                       .peer = peer, .type = TUTTI__TEV_PHASE};
    tutti__trace_add(t, b, &ev);
}

/* The names written are tutti's own static strings; this keeps the JSON valid whatever they
 * hold. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s != NULL && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* A thread's id in the file: viewers take ids as the system's, unique across processes (Perfetto
 * moved rank 1's caller and worker 0 onto rank 0's threads of the same small ids, and marked an
 * id equal to its process's as the main thread), so each rank gets a range of its own, apart
 * from every pid (the rank). */
static long long file_tid(int rank, int id) { return (long long)(rank + 1) * 100000 + id; }

static void put_event(FILE *f, const tutti__tev_t *e, int rank, double base, bool *first)
{
    fputs(*first ? "\n" : ",\n", f);
    *first = false;
    fputs("{\"name\":", f);
    put_str(f, e->name);
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%lld,\"ts\":%.3f,\"dur\":%.3f,"
               "\"args\":{\"seq\":%llu",
            e->type == TUTTI__TEV_COLL ? "collective" : "phase", rank, file_tid(rank, e->tid),
            (e->t0 - base) * 1e6, (e->t1 - e->t0) * 1e6, (unsigned long long)e->seq);
    if (e->bytes > 0 || e->type == TUTTI__TEV_COLL)
        fprintf(f, ",\"bytes\":%llu", (unsigned long long)e->bytes);
    if (e->peer >= 0)
        fprintf(f, ",\"peer\":%d", (int)e->peer);
    if (e->type == TUTTI__TEV_COLL) {
        fputs(",\"dtype\":", f);
        put_str(f, e->detail);
        if (e->op != NULL) {
            fputs(",\"op\":", f);
            put_str(f, e->op);
        }
        fputs(",\"algorithm\":", f);
        put_str(f, e->algo);
        fputs(",\"transport\":", f);
        put_str(f, e->via);
        fprintf(f, ",\"posted_us\":%.3f,\"queued_us\":%.3f,\"status\":%d", (e->posted - base) * 1e6,
                (e->t0 - e->posted) * 1e6, (int)e->status);
    }
    fputs("}}", f);
}

bool tutti__trace_write(const tutti__trace_t *t, FILE *f, int rank, double offset_s,
                        double origin_s, const char *meta)
{
    const double base = offset_s + origin_s; /* local time of the reference clock's origin */
    bool first = true, tids[65] = {false};
    fputs("{\"traceEvents\":[", f);
    fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}"
               ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":"
               "{\"sort_index\":%d}}",
            rank, rank, rank, rank);
    first = false;
    for (int b = 0; b < t->nbufs; b++)
        for (size_t i = 0; i < t->bufs[b].n; i++) {
            const tutti__tev_t *e = &t->bufs[b].ev[i];
            put_event(f, e, rank, base, &first);
            if (e->tid < 65)
                tids[e->tid] = true;
        }
    for (int id = 0; id < 65; id++)
        if (tids[id]) {
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%lld,\"args\":"
                       "{\"name\":\"",
                    rank, file_tid(rank, id));
            if (id == 0)
                fputs("caller", f);
            else
                fprintf(f, "worker %d", id - 1);
            fputs("\"}}", f);
        }
    fprintf(f, "\n],\"displayTimeUnit\":\"ns\",\"metadata\":{\"tutti_rank\":%d,"
               "\"dropped_events\":%llu%s%s}}\n",
            rank, (unsigned long long)__atomic_load_n(&t->dropped, __ATOMIC_RELAXED),
            meta != NULL && meta[0] ? "," : "", meta != NULL ? meta : "");
    return !ferror(f);
}
