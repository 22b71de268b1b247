/* algo_override.c: the algorithm overrides of a communicator, oneCCL-style
 * ("tree:0-16384;ring:16385-max") from CCL_<COLL> at creation or tutti_comm_set_algorithm
 * later, and tutti_comm_algorithm, which tells what a call would run. */
#include <stdio.h>

#include "comm.h"

/* oneCCL's variable for each collective. */
static const char *const env_of[TUTTI_COLL_COUNT] = {
    [TUTTI_COLL_ALLREDUCE] = "CCL_ALLREDUCE",
    [TUTTI_COLL_ALLGATHER] = "CCL_ALLGATHER",
    [TUTTI_COLL_ALLTOALL] = "CCL_ALLTOALL",
    [TUTTI_COLL_REDUCE_SCATTER] = "CCL_REDUCE_SCATTER",
    [TUTTI_COLL_BCAST] = "CCL_BCAST",
    [TUTTI_COLL_REDUCE] = "CCL_REDUCE",
    [TUTTI_COLL_BARRIER] = "CCL_BARRIER",
};

/* valid_list writes the names that comm can run for coll: "ring, tree" */
static void valid_list(const tutti_comm_t *comm, tutti_coll_t coll, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const tutti__algo_t *const *a = tutti__algos_for(coll); *a != NULL; a++)
        if (tutti__algo_offered(*a, comm->net.caps))
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? ", " : "", (*a)->name);
}

static bool parse_bound(const char *s, const char *end, size_t *out)
{
    if (end - s == 3 && strncmp(s, "max", 3) == 0) {
        *out = SIZE_MAX;
        return true;
    }
    char tmp[32];
    if (end - s <= 0 || end - s >= (long)sizeof tmp)
        return false;
    memcpy(tmp, s, (size_t)(end - s));
    tmp[end - s] = '\0';
    return tutti__parse_size(tmp, out);
}

/* parse fills ov from spec; origin names where spec came from, for messages. */
static tutti_status_t parse(tutti_comm_t *comm, tutti_coll_t coll, const char *spec,
                            const char *origin, tutti__algo_override_t *ov)
{
    char valid[256];
    valid_list(comm, coll, valid, sizeof valid);
    ov->n = 0;
    const char *p = spec;
    while (*p != '\0') {
        const char *semi = strchr(p, ';');
        const char *end = semi ? semi : p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(end - p));
        const char *name_end = colon ? colon : end;
        const tutti__algo_t *a = tutti__algo_find(coll, p, (size_t)(name_end - p));
        if (a == NULL)
            return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                     "%s: unknown %s algorithm \"%.*s\"; valid here: %s", origin,
                                     tutti__coll_name(coll), (int)(name_end - p), p, valid);
        const unsigned miss = a->needs & ~comm->net.caps; /* what it lacks here */
        const tutti__window_t *w = comm->net.links.wins != NULL ? comm->net.links.wins[0] : NULL;
        if (miss == TUTTI__NEEDS_CMA && w != NULL && w->cma_off != NULL)
            return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                     "%s: %s algorithm \"%s\" reads the other ranks' memory "
                                     "with process_vm_readv (single copy), which is off on this "
                                     "node: %s; valid here: %s",
                                     origin, tutti__coll_name(coll), a->name, w->cma_off, valid);
        if (miss != 0)
            return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                     "%s: %s algorithm \"%s\" needs %s, which this communicator "
                                     "is not (%d node(s) of %d to %d ranks, transport %s); valid "
                                     "here: %s",
                                     origin, tutti__coll_name(coll), a->name,
                                     miss & TUTTI__NEEDS_WINDOW
                                         ? "every rank on one node over shared memory"
                                     : miss & TUTTI__NEEDS_UNIFORM
                                         ? "ranks on several nodes, as many on each, more than "
                                           "one per node, with shared memory inside each"
                                     : miss & TUTTI__NEEDS_CMA
                                         ? "every rank on one node over shared memory, with single "
                                           "copy (process_vm_readv) between them"
                                         : "ranks on several nodes, more than one on some node, "
                                           "with shared memory inside each",
                                     comm->nodes.nnodes, comm->net.topo.ppn_min,
                                     comm->net.topo.ppn_max,
                                     comm->net.links.ofi && comm->net.links.shm ? "shm+ofi"
                                     : comm->net.links.ofi                      ? "ofi"
                                     : comm->net.links.shm                      ? "shm"
                                                                                : "none",
                                     valid);
        size_t lo = 0, hi = SIZE_MAX;
        if (colon != NULL) {
            const char *dash = memchr(colon + 1, '-', (size_t)(end - colon - 1));
            if (dash == NULL || !parse_bound(colon + 1, dash, &lo) || !parse_bound(dash + 1, end, &hi) ||
                lo > hi)
                return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                         "%s: bad byte range in \"%.*s\"; write name:lo-hi with hi "
                                         "a number or max, e.g. \"tree:0-16384;ring:16385-max\"",
                                         origin, (int)(end - p), p);
        }
        /* A size two entries claim would take the first one only: the second is a mistake. */
        for (int i = 0; i < ov->n; i++)
            if (lo <= ov->r[i].hi && ov->r[i].lo <= hi)
                return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                         "%s: \"%.*s\" overlaps an earlier entry's sizes (%s from "
                                         "%zu to %zu bytes); give each size to one entry, e.g. "
                                         "\"tree:0-16384;ring:16385-max\"",
                                         origin, (int)(end - p), p, ov->r[i].algo->name,
                                         ov->r[i].lo, ov->r[i].hi);
        if (ov->n == TUTTI__MAX_RANGES)
            return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG, "%s: more than %d ranges", origin,
                                     TUTTI__MAX_RANGES);
        ov->r[ov->n++] = (tutti__algo_range_t){lo, hi, a};
        p = semi ? semi + 1 : end;
    }
    if (ov->n == 0)
        return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG, "%s: empty algorithm list; valid: %s",
                                 origin, valid);
    return TUTTI_OK;
}

const char *tutti__override_env(tutti_coll_t coll)
{
    return (unsigned)coll < TUTTI_COLL_COUNT ? env_of[coll] : NULL;
}

tutti_status_t tutti__override_init(tutti_comm_t *comm)
{
    for (int coll = 0; coll < TUTTI_COLL_COUNT; coll++) {
        const char *spec = tutti__env_get(env_of[coll]);
        if (spec != NULL)
            TUTTI__CHECK(parse(comm, (tutti_coll_t)coll, spec, env_of[coll], &comm->algo[coll]));
    }
    return TUTTI_OK;
}

TUTTI_API tutti_status_t tutti_comm_set_algorithm(tutti_comm_t *comm, tutti_coll_t coll,
                                                  const char *spec)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_set_algorithm: not a live communicator%s",
                                tutti__comm_why_not(comm));
    if ((unsigned)coll >= TUTTI_COLL_COUNT)
        return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                 "tutti_comm_set_algorithm: unknown collective %d", (int)coll);
    tutti__algo_override_t ov = {.n = 0};
    if (spec != NULL && *spec != '\0' && strcmp(spec, "auto") != 0)
        TUTTI__CHECK(parse(comm, coll, spec, "tutti_comm_set_algorithm", &ov));
    tutti__exec_set_override(comm, coll, &ov);
    return TUTTI_OK;
}

TUTTI_API const char *tutti_comm_algorithm(const tutti_comm_t *comm, tutti_coll_t coll, size_t bytes)
{
    if (!tutti__comm_valid(comm) || (unsigned)coll >= TUTTI_COLL_COUNT)
        return NULL;
    tutti__algo_override_t ov = tutti__exec_get_override(comm, coll);
    return tutti__select(&ov, comm->net.caps, comm->size, coll, bytes, false)->name;
}
