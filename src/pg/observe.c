/* observe.c: what TUTTI_TRACE and TUTTI_REPORT see: turning them on for a communicator (on
 * every rank when any rank asks), aligning the ranks' clocks at creation, one trace event and
 * one arrival record per collective, and writing the trace file at destroy (the straggler
 * report is report.c's).
 *
 * Clock alignment: rank 0 and each other rank in turn exchange OBS_PINGS pairs of messages;
 * the pair with the shortest round trip gives rank r's offset (its time when rank 0's clock
 * read the midpoint of the round trip), within half that round trip, which is the error the
 * trace states. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/sha256.h"
#include "comm.h"
#include "observe.h"

#define OBS_PINGS 16
#define OBS_TAG (INT_MAX - 7) /* no user message can exist before the communicator does */

static int traced_comms; /* traced communicators this process has taken part in */

/* align measures this rank's clock offset to rank 0's (local - rank 0's) and its error. */
static tutti_status_t align(tutti_comm_t *comm, tutti__obs_t *o)
{
    double res[2] = {0, 0};
    /* Time zero: rank 0's clock before its first ping, which no other rank's traced event can
     * precede (each comes after that rank's pings). Perfetto drops negative times: taken after
     * the pings, as it was, the origin's own broadcast on rank 1 showed at -98 us and was lost. */
    const double origin = tutti__now();
    if (comm->rank == 0) {
        for (int r = 1; r < comm->size; r++) {
            double best = INFINITY, off = 0;
            for (int k = 0; k < OBS_PINGS; k++) {
                double t0 = tutti__now(), tr = 0;
                TUTTI__CHECK(tutti_send(&t0, 1, TUTTI_FLOAT64, r, OBS_TAG, comm, NULL));
                TUTTI__CHECK(tutti_recv(&tr, 1, TUTTI_FLOAT64, r, OBS_TAG, comm, NULL));
                double t3 = tutti__now();
                if (t3 - t0 < best) {
                    best = t3 - t0;
                    off = tr - (t0 + t3) / 2;
                }
            }
            double out[2] = {off, best / 2};
            TUTTI__CHECK(tutti_send(out, 2, TUTTI_FLOAT64, r, OBS_TAG, comm, NULL));
            if (best / 2 > o->align_err)
                o->align_err = best / 2;
        }
        o->offset = 0;
    } else {
        for (int k = 0; k < OBS_PINGS; k++) {
            double x = 0;
            TUTTI__CHECK(tutti_recv(&x, 1, TUTTI_FLOAT64, 0, OBS_TAG, comm, NULL));
            x = tutti__now();
            TUTTI__CHECK(tutti_send(&x, 1, TUTTI_FLOAT64, 0, OBS_TAG, comm, NULL));
        }
        TUTTI__CHECK(tutti_recv(res, 2, TUTTI_FLOAT64, 0, OBS_TAG, comm, NULL));
        if (!isfinite(res[0]) || !(res[1] >= 0 && res[1] < 1e3))
            return tutti__set_error(TUTTI_ERR_INTERNAL,
                                    "TUTTI_TRACE/TUTTI_REPORT: rank 0 sent a clock offset of %g "
                                    "s (error %g s): do all ranks run the same tutti?",
                                    res[0], res[1]);
        o->offset = res[0];
        o->align_err = res[1];
    }
    /* Rank 0's origin is time zero in every rank's file; how many traced communicators rank 0's
     * process had before, and a random number, name this one's files (trace_file). */
    struct {
        double origin;
        uint32_t k, id;
    } m = {0, 0, 0};
    uint32_t k = (uint32_t)__atomic_fetch_add(&traced_comms, 1, __ATOMIC_RELAXED);
    if (comm->rank == 0) {
        m.origin = origin;
        m.k = k;
        if (!tutti__random(&m.id, sizeof m.id))
            m.id = (uint32_t)getpid() ^ (uint32_t)(m.origin * 1e9);
    }
    TUTTI__CHECK(tutti_broadcast(&m, sizeof m, TUTTI_UINT8, 0, comm, NULL));
    o->origin = m.origin;
    o->index = (int)m.k;
    o->id = m.id;
    return TUTTI_OK;
}

/* trace_path gives a rank without a TUTTI_TRACE of its own the path of the lowest rank that
 * has one (src), so that every rank of a traced communicator writes its file. */
static tutti_status_t trace_path(tutti_comm_t *comm, tutti__obs_t *o, int src)
{
    char buf[1024] = "";
    if (comm->rank == src)
        snprintf(buf, sizeof buf, "%s", o->path);
    TUTTI__CHECK(tutti_broadcast(buf, sizeof buf, TUTTI_UINT8, src, comm, NULL));
    buf[sizeof buf - 1] = '\0';
    if (o->path == NULL && (o->path = strdup(buf)) == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for TUTTI_TRACE");
    return TUTTI_OK;
}

tutti_status_t tutti__obs_open(tutti_comm_t *comm, tutti__bootstrap_t *bs)
{
    const char *path = tutti__env_get("TUTTI_TRACE");
    long report = 0, events = 0, calls = 0;
    tutti_status_t bad = tutti__env_long("TUTTI_REPORT", 0, 1, &report);
    if (bad == TUTTI_OK)
        bad = tutti__env_long("TUTTI_TRACE_EVENTS", 1000, 100000000, &events);
    if (bad == TUTTI_OK)
        bad = tutti__env_long("TUTTI_REPORT_CALLS", 16, 10000000, &calls);
    char why[TUTTI__ERRLEN] = "";
    if (bad < 0)
        snprintf(why, sizeof why, "%s", tutti__tls_error());
    if (path != NULL && path[0] == '\0')
        path = NULL;
    /* The file is written at destroy, after the run it records: a directory it cannot be
     * written to is refused now, not found out then. (A directory part with % expands per
     * rank: left to the write.) */
    if (bad == TUTTI_OK && path != NULL) {
        const char *slash = strrchr(path, '/');
        char dir[1024];
        snprintf(dir, sizeof dir, "%.*s", slash == NULL ? 1 : slash == path ? 1 : (int)(slash - path),
                 slash == NULL ? "." : path);
        if (strchr(dir, '%') == NULL && access(dir, W_OK | X_OK) != 0) {
            bad = TUTTI_ERR_INVALID_ARG;
            snprintf(why, sizeof why,
                     "TUTTI_TRACE=\"%s\": its directory %s cannot be written to (%s); create it, "
                     "or point TUTTI_TRACE elsewhere",
                     path, dir, strerror(errno));
        }
    }
    /* One byte per rank: on everywhere when any rank asks, so that the collective steps below
     * (and the report at destroy) run on every rank or on none; a rank whose settings are
     * wrong says so here, and every rank fails at once instead of waiting for it. */
    unsigned char want = (unsigned char)((path != NULL) | (report ? 2 : 0) | (bad < 0 ? 0x80 : 0));
    unsigned char *all = malloc((size_t)comm->size);
    if (all == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    tutti_status_t st = tutti__bs_allgather(bs, &want, 1, all);
    unsigned char any = 0;
    int src = -1, wrong = -1;
    for (int r = 0; st == TUTTI_OK && r < comm->size; r++) {
        any |= all[r];
        if (src < 0 && (all[r] & 1))
            src = r;
        if (wrong < 0 && (all[r] & 0x80))
            wrong = r;
    }
    free(all);
    if (st < 0)
        return st;
    if (bad < 0)
        return tutti__set_error(bad, "%s", why);
    if (wrong >= 0)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "rank %d refused its TUTTI_TRACE, TUTTI_REPORT, "
                                "TUTTI_TRACE_EVENTS or TUTTI_REPORT_CALLS (its error says which): "
                                "fix it there",
                                wrong);
    if (any == 0)
        return TUTTI_OK;

    tutti__obs_t *o = calloc(1, sizeof *o);
    if (o == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    comm->obs = o;
    o->report = (any & 2) != 0;
    o->ncalls = (size_t)calls;
    o->calls = calloc(o->ncalls, sizeof *o->calls);
    if (src >= 0) {
        o->trace = tutti__trace_new(comm->nslices, (size_t)events);
        o->path = path != NULL ? strdup(path) : NULL;
    }
    if (o->calls == NULL || (src >= 0 && (o->trace == NULL || (path != NULL && o->path == NULL))))
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for TUTTI_TRACE/TUTTI_REPORT");
    TUTTI__CHECK(align(comm, o));
    return src >= 0 ? trace_path(comm, o, src) : TUTTI_OK;
}

void tutti__obs_free(tutti_comm_t *comm)
{
    tutti__obs_t *o = comm->obs;
    if (o == NULL)
        return;
    tutti__trace_free(o->trace);
    free(o->calls);
    free(o->path);
    free(o);
    comm->obs = NULL;
}

/* How a collective moved its data, in words for the trace. */
static const char *via(const tutti_comm_t *comm, const tutti__coll_t *c)
{
    unsigned needs = c->algo != NULL ? c->algo->needs : 0;
    if (comm->size == 1)
        return "none (one rank)";
    if (needs & TUTTI__NEEDS_CMA)
        return "shm window + process_vm_readv";
    if (needs & TUTTI__NEEDS_NODES)
        return comm->net.links.ofi != NULL ? "shm window in a node, ofi between nodes"
                                            : "shm window in a node, shm between";
    if (needs & TUTTI__NEEDS_WINDOW)
        return "shm window";
    if (comm->net.links.ofi != NULL && comm->net.links.shm != NULL)
        return "messages (shm in a node, ofi between nodes)";
    return comm->net.links.ofi != NULL ? "messages (ofi)" : "messages (shm)";
}

void tutti__obs_coll(tutti_comm_t *comm, const tutti__coll_t *c, double t0, tutti_status_t st)
{
    tutti__obs_t *o = comm->obs;
    if (o->trace != NULL) {
        double t1 = tutti__now();
        bool red = c->kind == TUTTI_COLL_ALLREDUCE || c->kind == TUTTI_COLL_REDUCE ||
                   c->kind == TUTTI_COLL_REDUCE_SCATTER;
        tutti__tev_t ev = {.t0 = t0, .t1 = t1, .posted = c->posted > 0 ? c->posted : t0,
                           .seq = c->seq, .bytes = c->call_bytes, .name = c->name,
                           .algo = c->algo != NULL ? c->algo->name : "local",
                           .detail = tutti_dtype_name(c->dtype),
                           .op = red ? tutti_op_name(c->op) : NULL, .via = via(comm, c),
                           .peer = -1, .status = st, .type = TUTTI__TEV_COLL};
        tutti__trace_add(o->trace, c->slice, &ev);
    }
    if (c->slice == 0) {
        /* One record per call, by sequence number; a later call in the same place replaces it
         * (the report uses the calls every rank still holds). */
        tutti__obs_call_t *r = &o->calls[c->seq % o->ncalls];
        r->seq1 = c->seq + 1;
        r->posted = c->posted > 0 ? c->posted : t0;
        r->name = c->name;
        r->bytes = c->call_bytes;
    }
}

/* trace_file writes this rank's trace: %r in the path is the rank, %p the process id; every
 * communicator but the first of its rank 0's process adds ".comm<k>-<id>". A path too long to
 * expand is refused, not cut (the file would land elsewhere). */
static void trace_file(tutti_comm_t *comm)
{
    tutti__obs_t *o = comm->obs;
    char path[4096];
    size_t n = 0;
    for (const char *p = o->path; *p && n + 32 < sizeof path; p++) {
        if (p[0] == '%' && p[1] == 'r')
            n += (size_t)snprintf(path + n, sizeof path - n, "%d", comm->rank), p++;
        else if (p[0] == '%' && p[1] == 'p')
            n += (size_t)snprintf(path + n, sizeof path - n, "%d", (int)getpid()), p++;
        else
            path[n++] = *p;
    }
    path[n] = '\0';
    if (strlen(o->path) > sizeof path - 64) {
        TUTTI__LOG(TUTTI__LOG_WARN, "TUTTI_TRACE: rank %d writes no trace: the path is longer "
                   "than %zu bytes", comm->rank, sizeof path - 64);
        return;
    }
    /* The first traced communicator of its rank 0's process (the job's world, where every
     * process creates that first) keeps the name; every other gets one no other has. */
    if (o->index > 0)
        snprintf(path + n, sizeof path - n, ".comm%d-%08x", o->index, (unsigned)o->id);
    /* A regular file (or none) is written under a fresh name (O_EXCL: never a file or link
     * that was there) and renamed into place: a symlink or a file another user left at the
     * path in a shared directory such as /tmp is replaced, or the rename is refused (sticky
     * /tmp), never written through. A link or a special file of this user's or root's
     * (/dev/stdout, a FIFO) is written as it is. */
    struct stat sb;
    const bool direct = lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) &&
                        (sb.st_uid == geteuid() || sb.st_uid == 0);
    char tmp[sizeof path + 8];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = direct ? -1 : mkostemp(tmp, O_CLOEXEC);
    if (fd >= 0)
        (void)fchmod(fd, 0644); /* as fopen would under the usual umask, not mkostemp's 0600 */
    FILE *f = direct ? fopen(path, "we") : fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL && fd >= 0)
        close(fd);
    char meta[256];
    snprintf(meta, sizeof meta,
             "\"tutti_size\":%d,\"clock_offset_us\":%.3f,\"clock_error_us\":%.3f,"
             "\"clock\":\"CLOCK_MONOTONIC of rank 0, 0 at its communicator's creation\"",
             comm->size, o->offset * 1e6, o->align_err * 1e6);
    bool ok = f != NULL && tutti__trace_write(o->trace, f, comm->rank, o->offset, o->origin, meta);
    int err = errno;
    if (f != NULL && fclose(f) != 0 && ok)
        ok = false, err = errno;
    bool refused = false; /* the rename, of a file another user has there */
    if (ok && !direct && rename(tmp, path) != 0) {
        ok = false, err = errno;
        refused = err == EPERM || err == EACCES;
    }
    if (!ok && fd >= 0)
        unlink(tmp);
    if (!ok)
        TUTTI__LOG(TUTTI__LOG_WARN, "TUTTI_TRACE: rank %d could not write %s: %s%s", comm->rank,
                   path, strerror(err),
                   refused ? " (a file another user left there, in a shared directory such as "
                             "/tmp, is not replaced: choose another path)"
                           : "");
    else
        TUTTI__LOG(TUTTI__LOG_INFO, "TUTTI_TRACE: rank %d wrote %s", comm->rank, path);
}

void tutti__obs_report_final(tutti_comm_t *comm)
{
    tutti__obs_t *o = comm->obs;
    if (o == NULL || !o->report || __atomic_load_n(&comm->failed, __ATOMIC_ACQUIRE) != TUTTI_OK)
        return;
    char *text = malloc(TUTTI__REPORT_MAX);
    if (text != NULL && tutti__report(comm, text, TUTTI__REPORT_MAX) == TUTTI_OK &&
        comm->rank == 0)
        fputs(text, stderr);
    free(text);
}

void tutti__obs_write(tutti_comm_t *comm)
{
    if (comm->obs != NULL && comm->obs->trace != NULL && comm->obs->path != NULL)
        trace_file(comm);
}
