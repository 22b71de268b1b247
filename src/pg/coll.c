/* coll.c: the public collectives: argument checks (bad input changes nothing and posts nothing),
 * in-place resolution, algorithm selection, and running the call into a work handle. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

/* ---- checks ---- */

#define BAD(comm, ...) tutti__comm_error((comm), TUTTI_ERR_INVALID_ARG, __VA_ARGS__)

static tutti_status_t check_comm(tutti_comm_t *comm, const char *fn)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "%s: communicator %p is not live (NULL, destroyed, or never "
                                "created)%s",
                                fn, (void *)comm, tutti__comm_why_not(comm));
    tutti_status_t failed = __atomic_load_n(&comm->failed, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
        return tutti__comm_error(comm, TUTTI_ERR_ABORTED,
                                 "%s: the communicator was aborted%s (%s); destroy it", fn,
                                 failed == TUTTI_ERR_ABORTED ? "" : " after it failed",
                                 comm->failed_msg);
    if (failed != TUTTI_OK)
        return tutti__comm_error(comm, TUTTI_ERR_COMM_FAILED,
                                 "%s: the communicator failed earlier and can run nothing more; "
                                 "destroy it and create a new one. The first failure was: %s",
                                 fn, comm->failed_msg);
    return TUTTI_OK;
}

static tutti_status_t check_dtype(tutti_comm_t *comm, const char *fn, tutti_dtype_t dt)
{
    if (!tutti__dtype_valid(dt))
        return BAD(comm, "%s: unknown dtype %d; use a tutti_dtype_t value (TUTTI_FLOAT32, ...)", fn,
                   (int)dt);
    return TUTTI_OK;
}

static tutti_status_t check_op(tutti_comm_t *comm, const char *fn, tutti_op_t op, tutti_dtype_t dt)
{
    if (!tutti__op_valid(op))
        return BAD(comm, "%s: unknown op %d; use a tutti_op_t value (TUTTI_SUM, ...)", fn, (int)op);
    if (!tutti__op_supported(op, dt))
        return BAD(comm, "%s: op %s does not apply to %s (avg is for floating types; band, bor, "
                         "bxor for integer types)",
                   fn, tutti_op_name(op), tutti_dtype_name(dt));
    return TUTTI_OK;
}

/* check_bytes sets *bytes = count * esize * mult, rejecting overflow. */
static tutti_status_t check_bytes(tutti_comm_t *comm, const char *fn, size_t count, size_t esize,
                                  size_t mult, size_t *bytes)
{
    /* No object can exceed PTRDIFF_MAX bytes, so a larger span is a wrong count, not a buffer. */
    if (count != 0 && (esize > PTRDIFF_MAX / count || count * esize > PTRDIFF_MAX / mult))
        return BAD(comm, "%s: count %zu of %zu-byte elements (x%zu) exceeds the address space", fn,
                   count, esize, mult);
    *bytes = count * esize * mult;
    return TUTTI_OK;
}

/* check_buf checks a buffer the call reads or writes bytes of. TUTTI_IN_PLACE is not memory:
 * callers put recvbuf (or its block) in place of a sendbuf that is TUTTI_IN_PLACE first, so
 * here it is a receive buffer, or a sendbuf that stands for one that was. */
static tutti_status_t check_buf(tutti_comm_t *comm, const char *fn, const char *what,
                                const void *buf, size_t bytes)
{
    if (buf == TUTTI_IN_PLACE)
        return BAD(comm, "%s: %s is TUTTI_IN_PLACE, which only a sendbuf may be (the input then "
                         "lies in recvbuf, which must be memory)",
                   fn, strcmp(what, "sendbuf") == 0 ? "recvbuf" : what);
    if (buf == NULL && bytes > 0)
        return BAD(comm, "%s: %s is NULL but %zu bytes are to be %s", fn, what, bytes,
                   strcmp(what, "recvbuf") == 0   ? "written"
                   : strcmp(what, "sendbuf") == 0 ? "read"
                                                  : "moved through it");
    return TUTTI_OK;
}

static tutti_status_t check_rank(tutti_comm_t *comm, const char *fn, const char *what, int r)
{
    if (r < 0 || r >= comm->size)
        return BAD(comm, "%s: %s %d is out of range: the communicator has ranks 0..%d", fn, what, r,
                   comm->size - 1);
    return TUTTI_OK;
}

/* Partly overlapping buffers would be read after being overwritten: only exact in-place forms
 * are allowed. */
static tutti_status_t check_overlap(tutti_comm_t *comm, const char *fn, const void *s, size_t sb,
                                    const void *r, size_t rb)
{
    const char *a = s, *b = r;
    if (sb == 0 || rb == 0 || a == b)
        return TUTTI_OK;
    if (a < b + rb && b < a + sb)
        return BAD(comm, "%s: sendbuf and recvbuf overlap without being the same buffer; use "
                         "TUTTI_IN_PLACE or separate buffers",
                   fn);
    return TUTTI_OK;
}

/* check_gather_overlap is check_overlap for allgather(v), whose in-place form is the own block
 * at its place (own), not sendbuf == recvbuf: there, on any rank whose block goes elsewhere,
 * sendbuf is where another rank's block lands, written while the peers may still read it (a
 * single-copy allgather read rank 0's block in place of this rank's). */
static tutti_status_t check_gather_overlap(tutti_comm_t *comm, const char *fn, const void *s,
                                           size_t sb, const void *r, size_t rb, const void *own)
{
    const char *a = s, *b = r;
    if (sb == 0 || rb == 0 || a == own)
        return TUTTI_OK;
    if (a == b)
        return BAD(comm, "%s: sendbuf is recvbuf, whose start receives another rank's block "
                         "(rank %d's own goes %zu bytes in); in place means this rank's block "
                         "already at its place: pass TUTTI_IN_PLACE, or sendbuf = recvbuf + "
                         "its offset, or separate buffers",
                   fn, comm->rank, (size_t)((const char *)own - b));
    return check_overlap(comm, fn, s, sb, r, rb);
}

/* check_v validates counts/displs for the communicator's ranks and returns the bytes the layout
 * spans. */
static tutti_status_t check_v(tutti_comm_t *comm, const char *fn, const char *what,
                              const size_t *counts, const size_t *displs, size_t esize, size_t *span)
{
    char why[256];
    if (tutti__layout_span(what, counts, displs, comm->size, esize, span, why, sizeof why) < 0)
        return BAD(comm, "%s: %s", fn, why);
    return TUTTI_OK;
}

/* check_disjoint refuses a receive layout whose blocks overlap (after check_v). */
static tutti_status_t check_disjoint(tutti_comm_t *comm, const char *fn, const size_t *counts,
                                     const size_t *displs)
{
    char why[256];
    tutti_status_t st = tutti__layout_disjoint("recvcounts/displacements", counts, displs,
                                               comm->size, why, sizeof why);
    if (st == TUTTI_ERR_NO_MEMORY)
        return tutti__comm_error(comm, st, "%s: %s", fn, why);
    return st < 0 ? BAD(comm, "%s: %s", fn, why) : TUTTI_OK;
}

/* ---- running ---- */

static void init_coll(tutti__coll_t *c, tutti_comm_t *comm, tutti_coll_t kind, const char *name)
{
    memset(c, 0, sizeof *c);
    c->net = &comm->net;
    c->rank = comm->rank;
    c->size = comm->size;
    c->kind = kind;
    c->name = name;
    c->root = -1;
}

static tutti_status_t run_then(tutti_comm_t *comm, tutti__coll_t *c, tutti_work_t **work,
                               bool trivial, void *owned, void (*post_fn)(tutti_work_t *));

/* run hands the call to the executor. A blocking call waits for it here; otherwise the caller
 * gets the handle. owned (may be NULL) is freed with the work. */
static tutti_status_t run(tutti_comm_t *comm, tutti__coll_t *c, tutti_work_t **work, bool trivial,
                          void *owned)
{
    return run_then(comm, c, work, trivial, owned, NULL);
}

/* run_then is run with post_fn called, on success, before the work counts as complete. */
static tutti_status_t run_then(tutti_comm_t *comm, tutti__coll_t *c, tutti_work_t **work,
                               bool trivial, void *owned, void (*post_fn)(tutti_work_t *))
{
    c->esize = tutti_dtype_size(c->dtype);
    size_t bytes = tutti__coll_bytes(c);
    tutti_status_t st;
    /* Refused whether or not the communicator is idle just now: that differs from rank to rank,
     * and a call run on one rank and refused on another leaves their calls out of step. */
    if (work == NULL && tutti__work_in_callback(comm, false)) {
        free(owned);
        return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                 "tutti_%s: a blocking call in a completion callback of its own "
                                 "communicator is a wait, which may be for the very thread it "
                                 "runs on; post it with a work handle, and wait for it outside "
                                 "the callback",
                                 c->name);
    }
    /* A blocking call on an idle communicator needs no handle: no allocation, no hand-off. */
    if (work == NULL && post_fn == NULL &&
        tutti__exec_run_blocking(comm, c, bytes, trivial || comm->size == 1, &st)) {
        free(owned);
        return st;
    }
    tutti_work_t *w = malloc(sizeof *w);
    if (w == NULL) {
        free(owned);
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY, "%s: out of memory for the work handle",
                                 c->name);
    }
    w->coll = *c;
    w->p2p = false;
    w->refs = 1; /* the caller's */
    w->cb_state = 0;
    w->cb_taken = 0;
    w->cb = NULL;
    w->source = -1;
    w->owned = owned;
    w->post_fn = post_fn;
    tutti__exec_submit(comm, w, bytes, trivial || comm->size == 1, work == NULL);
    if (work != NULL) {
        *work = w;
        return TUTTI_OK;
    }
    st = tutti_work_wait(w, -1.0);
    if (st < 0)
        tutti__comm_error(comm, st, "%s", w->error);
    tutti__work_release(w);
    return st;
}

#define BEGIN(fn)                                                                              \
    if (work != NULL)                                                                          \
        *work = NULL;                                                                          \
    TUTTI__CHECK(check_comm(comm, fn))

TUTTI_API tutti_status_t tutti_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                         tutti_dtype_t dtype, tutti_op_t op, tutti_comm_t *comm,
                                         tutti_work_t **work)
{
    static const char fn[] = "tutti_allreduce";
    size_t bytes = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_op(comm, fn, op, dtype));
    TUTTI__CHECK(check_bytes(comm, fn, count, tutti_dtype_size(dtype), 1, &bytes));
    if (sendbuf == TUTTI_IN_PLACE)
        sendbuf = recvbuf;
    TUTTI__CHECK(check_buf(comm, fn, "sendbuf", sendbuf, bytes));
    TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, bytes));
    TUTTI__CHECK(check_overlap(comm, fn, sendbuf, bytes, recvbuf, bytes));
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_ALLREDUCE, "allreduce");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.count = count, c.dtype = dtype, c.op = op;
    return run(comm, &c, work, bytes == 0, NULL);
}

/* A coalesced allreduce runs as one allreduce over a packed copy of all buffers; the layout
 * and the packed data live in one block owned by the work. */
typedef struct coalesced {
    int n;
    size_t esize;
    size_t *counts;
    void **recvbufs;
    char *data;
} coalesced_t;

static void unpack(tutti_work_t *w)
{
    coalesced_t *k = w->owned;
    const char *p = k->data;
    for (int i = 0; i < k->n; i++) {
        size_t b = k->counts[i] * k->esize;
        if (b > 0)
            memcpy(k->recvbufs[i], p, b);
        p += b;
    }
}

typedef struct span {
    uintptr_t lo, hi; /* [lo, hi) */
    int i;
    bool in_place;
} span_t;

static int span_cmp(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : x->i - y->i;
}

/* check_coalesced_disjoint refuses receive buffers that overlap one another where either
 * takes its input from a send buffer of its own: each is written whole from the packed result,
 * and the later one's elements would overwrite the earlier one's with the sum of other inputs.
 * In place, an element two entries share has one input and gets one result, as Gloo's
 * flattened coalesced allreduce has it (torch passes views of one storage). Sorted by address,
 * n log n: a DDP bucket may hold thousands. */
static tutti_status_t check_coalesced_disjoint(tutti_comm_t *comm, const char *fn,
                                               const void *const *sendbufs,
                                               void *const *recvbufs, const size_t *counts,
                                               int nbufs, size_t es)
{
    if (nbufs < 2)
        return TUTTI_OK;
    span_t *sp = malloc((size_t)nbufs * sizeof *sp);
    if (sp == NULL)
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY, "%s: out of memory for %d buffers",
                                 fn, nbufs);
    int n = 0;
    for (int i = 0; i < nbufs; i++)
        if (counts[i] > 0)
            sp[n++] = (span_t){(uintptr_t)recvbufs[i], (uintptr_t)recvbufs[i] + counts[i] * es, i,
                               sendbufs == NULL || sendbufs[i] == TUTTI_IN_PLACE ||
                                   sendbufs[i] == recvbufs[i]};
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    tutti_status_t st = TUTTI_OK;
    /* A span overlaps an earlier one (in address order) exactly when it starts before the
     * furthest end among them: far, of all of them; far_own, of those with inputs of their own. */
    for (int j = 1, far = 0, far_own = sp[0].in_place ? -1 : 0; j < n && st == TUTTI_OK; j++) {
        int k = -1; /* the earlier span it must not overlap */
        if (far_own >= 0 && sp[j].lo < sp[far_own].hi)
            k = far_own;
        else if (!sp[j].in_place && sp[j].lo < sp[far].hi)
            k = far;
        if (k >= 0) {
            const int a = sp[k].i < sp[j].i ? sp[k].i : sp[j].i;
            const int b = sp[k].i < sp[j].i ? sp[j].i : sp[k].i;
            st = BAD(comm, "%s: recvbufs[%d] and recvbufs[%d] overlap (%zu and %zu elements) "
                           "and one takes its input from a send buffer of its own: each result "
                           "would overwrite part of the other; give each buffer memory of its "
                           "own",
                     fn, a, b, counts[a], counts[b]);
        }
        if (sp[j].hi > sp[far].hi)
            far = j;
        if (!sp[j].in_place && (far_own < 0 || sp[j].hi > sp[far_own].hi))
            far_own = j;
    }
    free(sp);
    return st;
}

TUTTI_API tutti_status_t tutti_allreduce_coalesced(const void *const *sendbufs,
                                                   void *const *recvbufs, const size_t *counts,
                                                   int nbufs, tutti_dtype_t dtype, tutti_op_t op,
                                                   tutti_comm_t *comm, tutti_work_t **work)
{
    static const char fn[] = "tutti_allreduce_coalesced";
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_op(comm, fn, op, dtype));
    if (nbufs < 0 || (nbufs > 0 && (counts == NULL || recvbufs == NULL)))
        return BAD(comm, "%s: nbufs %d with counts %p and recvbufs %p: need nbufs >= 0 and both "
                         "arrays when nbufs > 0",
                   fn, nbufs, (const void *)counts, (const void *)recvbufs);
    size_t es = tutti_dtype_size(dtype), total = 0, bytes = 0;
    for (int i = 0; i < nbufs; i++) {
        TUTTI__CHECK(check_bytes(comm, fn, counts[i], es, 1, &bytes));
        if (total > PTRDIFF_MAX - bytes)
            return BAD(comm, "%s: the buffers add up to more than the address space", fn);
        total += bytes;
        const void *sb = sendbufs && sendbufs[i] != TUTTI_IN_PLACE ? sendbufs[i] : recvbufs[i];
        if ((sb == NULL || recvbufs[i] == NULL) && bytes > 0)
            return BAD(comm, "%s: buffer %d is NULL but holds %zu bytes", fn, i, bytes);
        if (recvbufs[i] == TUTTI_IN_PLACE)
            return BAD(comm, "%s: recvbufs[%d] is TUTTI_IN_PLACE, which only a sendbufs entry may "
                             "be (the input then lies in recvbufs[%d])",
                       fn, i, i);
    }
    TUTTI__CHECK(check_coalesced_disjoint(comm, fn, sendbufs, recvbufs, counts, nbufs, es));
    size_t head = sizeof(coalesced_t) + (size_t)nbufs * (sizeof(size_t) + sizeof(void *));
    head = (head + 63) & ~(size_t)63;
    coalesced_t *k = malloc(head + total);
    if (k == NULL)
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", fn,
                                 total);
    k->n = nbufs;
    k->esize = es;
    k->counts = (size_t *)(k + 1);
    k->recvbufs = (void **)(k->counts + nbufs);
    k->data = (char *)k + head;
    char *p = k->data;
    for (int i = 0; i < nbufs; i++) { /* the inputs are read now, at the post */
        k->counts[i] = counts[i];
        k->recvbufs[i] = recvbufs[i];
        const void *sb = sendbufs && sendbufs[i] != TUTTI_IN_PLACE ? sendbufs[i] : recvbufs[i];
        if (counts[i] > 0)
            memcpy(p, sb, counts[i] * es);
        p += counts[i] * es;
    }
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_ALLREDUCE, "allreduce_coalesced");
    c.sendbuf = k->data, c.recvbuf = k->data, c.count = total / es, c.dtype = dtype, c.op = op;
    c.layout = tutti__sig_layout(counts, nbufs); /* the counts, not only their total, must agree */
    return run_then(comm, &c, work, total == 0, k, unpack);
}

TUTTI_API tutti_status_t tutti_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                         tutti_dtype_t dtype, tutti_comm_t *comm,
                                         tutti_work_t **work)
{
    static const char fn[] = "tutti_allgather";
    size_t bytes = 0, total = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_bytes(comm, fn, sendcount, tutti_dtype_size(dtype), 1, &bytes));
    TUTTI__CHECK(check_bytes(comm, fn, sendcount, tutti_dtype_size(dtype), (size_t)comm->size, &total));
    TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, total));
    if (sendbuf == TUTTI_IN_PLACE)
        sendbuf = (const char *)recvbuf + (size_t)comm->rank * bytes;
    TUTTI__CHECK(check_buf(comm, fn, "sendbuf", sendbuf, bytes));
    TUTTI__CHECK(check_gather_overlap(comm, fn, sendbuf, bytes, recvbuf, total,
                                      (const char *)recvbuf + (size_t)comm->rank * bytes));
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_ALLGATHER, "allgather");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.count = sendcount, c.dtype = dtype;
    return run(comm, &c, work, bytes == 0, NULL);
}

/* copy_layout copies counts and displacements (packed when displs is NULL) into out[0..2n):
 * the operation may run after the caller has reused its arrays. */
static void copy_layout(const size_t *counts, const size_t *displs, int n, size_t *out)
{
    for (int r = 0; r < n; r++) {
        out[r] = counts[r];
        out[n + r] = displs ? displs[r] : (r ? out[n + r - 1] + counts[r - 1] : 0);
    }
}

TUTTI_API tutti_status_t tutti_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                          const size_t *recvcounts, const size_t *displs,
                                          tutti_dtype_t dtype, tutti_comm_t *comm,
                                          tutti_work_t **work)
{
    static const char fn[] = "tutti_allgatherv";
    size_t span = 0, bytes = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    size_t es = tutti_dtype_size(dtype);
    TUTTI__CHECK(check_v(comm, fn, "recvcounts", recvcounts, displs, es, &span));
    TUTTI__CHECK(check_disjoint(comm, fn, recvcounts, displs));
    TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, span));
    if (sendbuf != TUTTI_IN_PLACE && sendcount != recvcounts[comm->rank])
        return BAD(comm, "%s: sendcount %zu differs from recvcounts[%d] = %zu", fn, sendcount,
                   comm->rank, recvcounts[comm->rank]);
    TUTTI__CHECK(check_bytes(comm, fn, recvcounts[comm->rank], es, 1, &bytes));
    size_t *owned = malloc(2 * (size_t)comm->size * sizeof *owned);
    if (owned == NULL)
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY, "%s: out of memory", fn);
    copy_layout(recvcounts, displs, comm->size, owned);
    const size_t *d = owned + comm->size;
    const char *own = (const char *)recvbuf + d[comm->rank] * es;
    if (sendbuf == TUTTI_IN_PLACE)
        sendbuf = own;
    tutti_status_t st = check_buf(comm, fn, "sendbuf", sendbuf, bytes);
    if (st == TUTTI_OK)
        st = check_gather_overlap(comm, fn, sendbuf, bytes, recvbuf, span, own);
    if (st < 0) {
        free(owned);
        return st;
    }
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_ALLGATHER, "allgatherv");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.count = bytes / (es ? es : 1), c.dtype = dtype;
    c.counts = owned, c.displs = d;
    return run(comm, &c, work, false, owned);
}

TUTTI_API tutti_status_t tutti_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                        tutti_dtype_t dtype, tutti_comm_t *comm,
                                        tutti_work_t **work)
{
    static const char fn[] = "tutti_alltoall";
    size_t total = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_bytes(comm, fn, count, tutti_dtype_size(dtype), (size_t)comm->size, &total));
    if (sendbuf == TUTTI_IN_PLACE)
        sendbuf = recvbuf;
    TUTTI__CHECK(check_buf(comm, fn, "sendbuf", sendbuf, total));
    TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, total));
    TUTTI__CHECK(check_overlap(comm, fn, sendbuf, total, recvbuf, total));
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_ALLTOALL, "alltoall");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.count = count, c.dtype = dtype;
    return run(comm, &c, work, total == 0, NULL);
}

TUTTI_API tutti_status_t tutti_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                         const size_t *sdispls, void *recvbuf,
                                         const size_t *recvcounts, const size_t *rdispls,
                                         tutti_dtype_t dtype, tutti_comm_t *comm,
                                         tutti_work_t **work)
{
    static const char fn[] = "tutti_alltoallv";
    size_t rspan = 0, sspan = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    size_t es = tutti_dtype_size(dtype);
    bool in_place = sendbuf == TUTTI_IN_PLACE || sendbuf == recvbuf;
    if (in_place) { /* MPI: in place, the send layout is the receive layout */
        sendcounts = recvcounts;
        sdispls = rdispls;
        sendbuf = recvbuf;
    }
    TUTTI__CHECK(check_v(comm, fn, "recvcounts", recvcounts, rdispls, es, &rspan));
    TUTTI__CHECK(check_disjoint(comm, fn, recvcounts, rdispls));
    TUTTI__CHECK(check_v(comm, fn, "sendcounts", sendcounts, sdispls, es, &sspan));
    char why[256];
    if (tutti__layout_own(sendcounts, recvcounts, comm->rank, why, sizeof why) < 0)
        return BAD(comm, "%s: %s", fn, why);
    TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, rspan));
    TUTTI__CHECK(check_buf(comm, fn, "sendbuf", sendbuf, sspan));
    TUTTI__CHECK(check_overlap(comm, fn, sendbuf, sspan, recvbuf, rspan));
    int n = comm->size;
    size_t *owned = malloc(4 * (size_t)n * sizeof *owned);
    if (owned == NULL)
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY, "%s: out of memory", fn);
    copy_layout(recvcounts, rdispls, n, owned);
    copy_layout(sendcounts, sdispls, n, owned + 2 * n);
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_ALLTOALL, "alltoallv");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.dtype = dtype;
    c.counts = owned, c.displs = owned + n, c.scounts = owned + 2 * n, c.sdispls = owned + 3 * n;
    c.count = recvcounts[comm->rank];
    return run(comm, &c, work, false, owned);
}

/* NCCL's in-place reduce-scatter: recvbuf is this rank's own block of sendbuf. On rank 0 that
 * is tutti's (MPI's) in-place form, sendbuf == recvbuf, and runs as such; on the others the
 * result goes to a scratch block owned by the work and is copied into place once every rank is
 * done reading, so every rank takes the same call (a refusal on some ranks only would leave
 * the rest waiting for the timeout). */
typedef struct own_block {
    void *dst;
    size_t bytes;
    char data[];
} own_block_t;

static void own_block_copy(tutti_work_t *w)
{
    own_block_t *k = w->owned;
    memcpy(k->dst, k->data, k->bytes);
}

static tutti_status_t reduce_scatter_own_block(tutti_comm_t *comm, tutti__coll_t *c, size_t bytes,
                                               tutti_work_t **work)
{
    own_block_t *k = malloc(sizeof *k + bytes);
    if (k == NULL)
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY,
                                 "tutti_reduce_scatter: out of memory for %zu bytes", bytes);
    k->dst = c->recvbuf;
    k->bytes = bytes;
    c->recvbuf = k->data;
    return run_then(comm, c, work, false, k, own_block_copy);
}

TUTTI_API tutti_status_t tutti_reduce_scatter(const void *sendbuf, void *recvbuf,
                                              size_t recvcount, tutti_dtype_t dtype,
                                              tutti_op_t op, tutti_comm_t *comm,
                                              tutti_work_t **work)
{
    static const char fn[] = "tutti_reduce_scatter";
    size_t bytes = 0, total = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_op(comm, fn, op, dtype));
    size_t es = tutti_dtype_size(dtype);
    TUTTI__CHECK(check_bytes(comm, fn, recvcount, es, 1, &bytes));
    TUTTI__CHECK(check_bytes(comm, fn, recvcount, es, (size_t)comm->size, &total));
    bool in_place = sendbuf == TUTTI_IN_PLACE || sendbuf == recvbuf;
    if (in_place)
        sendbuf = recvbuf;
    TUTTI__CHECK(check_buf(comm, fn, "sendbuf", sendbuf, total));
    TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, in_place ? total : bytes));
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_REDUCE_SCATTER, "reduce_scatter");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.count = recvcount, c.dtype = dtype, c.op = op;
    if (!in_place && bytes > 0 && recvbuf == (const char *)sendbuf + (size_t)comm->rank * bytes)
        return reduce_scatter_own_block(comm, &c, bytes, work);
    TUTTI__CHECK(check_overlap(comm, fn, sendbuf, total, recvbuf, bytes));
    return run(comm, &c, work, bytes == 0, NULL);
}

TUTTI_API tutti_status_t tutti_broadcast(void *buf, size_t count, tutti_dtype_t dtype, int root,
                                         tutti_comm_t *comm, tutti_work_t **work)
{
    static const char fn[] = "tutti_broadcast";
    size_t bytes = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_rank(comm, fn, "root", root));
    TUTTI__CHECK(check_bytes(comm, fn, count, tutti_dtype_size(dtype), 1, &bytes));
    TUTTI__CHECK(check_buf(comm, fn, "buf", buf, bytes));
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_BCAST, "bcast");
    c.sendbuf = buf, c.recvbuf = buf, c.count = count, c.dtype = dtype, c.root = root;
    return run(comm, &c, work, bytes == 0, NULL);
}

TUTTI_API tutti_status_t tutti_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                      tutti_dtype_t dtype, tutti_op_t op, int root,
                                      tutti_comm_t *comm, tutti_work_t **work)
{
    static const char fn[] = "tutti_reduce";
    size_t bytes = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    TUTTI__CHECK(check_op(comm, fn, op, dtype));
    TUTTI__CHECK(check_rank(comm, fn, "root", root));
    TUTTI__CHECK(check_bytes(comm, fn, count, tutti_dtype_size(dtype), 1, &bytes));
    bool is_root = comm->rank == root;
    if (sendbuf == TUTTI_IN_PLACE) {
        if (!is_root)
            return BAD(comm, "%s: TUTTI_IN_PLACE is only meaningful at the root (rank %d)", fn, root);
        sendbuf = recvbuf;
    }
    TUTTI__CHECK(check_buf(comm, fn, "sendbuf", sendbuf, bytes));
    if (is_root) {
        TUTTI__CHECK(check_buf(comm, fn, "recvbuf", recvbuf, bytes));
        TUTTI__CHECK(check_overlap(comm, fn, sendbuf, bytes, recvbuf, bytes));
    } else {
        recvbuf = NULL; /* ignored away from the root, whatever the caller passed */
    }
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_REDUCE, "reduce");
    c.sendbuf = sendbuf, c.recvbuf = recvbuf, c.count = count, c.dtype = dtype, c.op = op;
    c.root = root;
    return run(comm, &c, work, bytes == 0, NULL);
}

TUTTI_API tutti_status_t tutti_barrier(tutti_comm_t *comm, tutti_work_t **work)
{
    BEGIN("tutti_barrier");
    tutti__coll_t c;
    init_coll(&c, comm, TUTTI_COLL_BARRIER, "barrier");
    c.dtype = TUTTI_UINT8;
    return run(comm, &c, work, false, NULL);
}

static tutti_status_t p2p(const char *fn, bool is_send, void *buf, size_t count, tutti_dtype_t dtype,
                          int peer, int tag, tutti_comm_t *comm, tutti_work_t **work)
{
    size_t bytes = 0;
    BEGIN(fn);
    TUTTI__CHECK(check_dtype(comm, fn, dtype));
    if (!is_send && peer == TUTTI_ANY_SOURCE) {
        if (comm->size == 1)
            return BAD(comm, "%s: TUTTI_ANY_SOURCE on a communicator of one rank: no other rank "
                             "can send to it", fn);
    } else {
        if (is_send && peer == TUTTI_ANY_SOURCE)
            return BAD(comm, "%s: TUTTI_ANY_SOURCE is for receives; a send names its peer", fn);
        TUTTI__CHECK(check_rank(comm, fn, "peer", peer));
        if (peer == comm->rank)
            return BAD(comm, "%s: peer %d is this rank; %s oneself is not supported (copy the "
                             "buffer)",
                       fn, peer, is_send ? "sending to" : "receiving from");
    }
    if (tag < 0)
        return BAD(comm, "%s: tag %d is negative; tags are 0..%d", fn, tag, INT_MAX);
    TUTTI__CHECK(check_bytes(comm, fn, count, tutti_dtype_size(dtype), 1, &bytes));
    TUTTI__CHECK(check_buf(comm, fn, "buf", buf, bytes));
    return tutti__p2p_submit(comm, is_send ? TUTTI__P2P_SEND : TUTTI__P2P_RECV, buf, bytes, peer,
                             tag, work);
}

TUTTI_API tutti_status_t tutti_send(const void *buf, size_t count, tutti_dtype_t dtype, int peer,
                                    int tag, tutti_comm_t *comm, tutti_work_t **work)
{
    return p2p("tutti_send", true, (void *)buf, count, dtype, peer, tag, comm, work);
}

TUTTI_API tutti_status_t tutti_recv(void *buf, size_t count, tutti_dtype_t dtype, int peer, int tag,
                                    tutti_comm_t *comm, tutti_work_t **work)
{
    return p2p("tutti_recv", false, buf, count, dtype, peer, tag, comm, work);
}
