/* select.c: the algorithm tables, oneCCL-style overrides ("tree:0-16384;ring:16385-max") and the
 * default choice per call by message size, rank count and topology. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../pg/comm.h"

static const tutti__algo_t *const allreduce_algos[] = {&tutti__allreduce_direct, &tutti__allreduce_ring,
                                                       &tutti__allreduce_tree, NULL};
static const tutti__algo_t *const allgather_algos[] = {&tutti__allgather_direct, &tutti__allgather_ring,
                                                       NULL};
static const tutti__algo_t *const alltoall_algos[] = {&tutti__alltoall_direct,
                                                      &tutti__alltoall_pairwise, NULL};
static const tutti__algo_t *const reduce_scatter_algos[] = {&tutti__reduce_scatter_direct,
                                                            &tutti__reduce_scatter_ring, NULL};
static const tutti__algo_t *const bcast_algos[] = {&tutti__bcast_direct, &tutti__bcast_tree, NULL};
static const tutti__algo_t *const reduce_algos[] = {&tutti__reduce_direct, &tutti__reduce_tree, NULL};
static const tutti__algo_t *const barrier_algos[] = {&tutti__barrier_direct,
                                                     &tutti__barrier_dissemination, NULL};

static const struct {
    const char *name; /* for messages */
    const char *env;  /* oneCCL's variable */
    const tutti__algo_t *const *algos;
} colls[TUTTI_COLL_COUNT] = {
    [TUTTI_COLL_ALLREDUCE] = {"allreduce", "CCL_ALLREDUCE", allreduce_algos},
    [TUTTI_COLL_ALLGATHER] = {"allgather", "CCL_ALLGATHER", allgather_algos},
    [TUTTI_COLL_ALLTOALL] = {"alltoall", "CCL_ALLTOALL", alltoall_algos},
    [TUTTI_COLL_REDUCE_SCATTER] = {"reduce_scatter", "CCL_REDUCE_SCATTER", reduce_scatter_algos},
    [TUTTI_COLL_BCAST] = {"bcast", "CCL_BCAST", bcast_algos},
    [TUTTI_COLL_REDUCE] = {"reduce", "CCL_REDUCE", reduce_algos},
    [TUTTI_COLL_BARRIER] = {"barrier", "CCL_BARRIER", barrier_algos},
};

const tutti__algo_t *const *tutti__algos_for(tutti_coll_t coll)
{
    return (unsigned)coll < TUTTI_COLL_COUNT ? colls[coll].algos : NULL;
}

static const tutti__algo_t *find(tutti_coll_t coll, const char *name, size_t len)
{
    for (const tutti__algo_t *const *a = colls[coll].algos; *a != NULL; a++)
        if (strlen((*a)->name) == len && strncmp((*a)->name, name, len) == 0)
            return *a;
    return NULL;
}

/* valid_list writes the names that comm can run for coll: "ring, tree" */
static void valid_list(const tutti_comm_t *comm, tutti_coll_t coll, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const tutti__algo_t *const *a = colls[coll].algos; *a != NULL; a++)
        if (!(*a)->needs_window || comm->wins != NULL)
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
        const tutti__algo_t *a = find(coll, p, (size_t)(name_end - p));
        if (a == NULL)
            return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                     "%s: unknown %s algorithm \"%.*s\"; valid here: %s", origin,
                                     colls[coll].name, (int)(name_end - p), p, valid);
        if (a->needs_window && comm->wins == NULL)
            return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                     "%s: %s algorithm \"%s\" needs every rank on one node over "
                                     "shared memory, which this communicator is not (%d node(s), "
                                     "transport %s); valid here: %s",
                                     origin, colls[coll].name, a->name, comm->nnodes,
                                     comm->ofi ? "ofi" : "shm", valid);
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

tutti_status_t tutti__select_init(tutti_comm_t *comm)
{
    for (int coll = 0; coll < TUTTI_COLL_COUNT; coll++) {
        const char *spec = tutti__env_get(colls[coll].env);
        if (spec == NULL)
            continue;
        char origin[64];
        snprintf(origin, sizeof origin, "%s", colls[coll].env);
        tutti_status_t st = parse(comm, (tutti_coll_t)coll, spec, origin, &comm->algo[coll]);
        if (st < 0) {
            snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", comm->last_error);
            return st;
        }
    }
    return TUTTI_OK;
}

TUTTI_API tutti_status_t tutti_comm_set_algorithm(tutti_comm_t *comm, tutti_coll_t coll,
                                                  const char *spec)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_set_algorithm: not a live communicator");
    if ((unsigned)coll >= TUTTI_COLL_COUNT)
        return tutti__comm_error(comm, TUTTI_ERR_INVALID_ARG,
                                 "tutti_comm_set_algorithm: unknown collective %d", (int)coll);
    if (spec == NULL || *spec == '\0' || strcmp(spec, "auto") == 0) {
        comm->algo[coll].n = 0;
        return TUTTI_OK;
    }
    tutti__algo_override_t ov;
    TUTTI__CHECK(parse(comm, coll, spec, "tutti_comm_set_algorithm", &ov));
    comm->algo[coll] = ov;
    return TUTTI_OK;
}

/* Defaults. One node over shm: the direct algorithms touch each byte the fewest times and need
 * no hand-offs between neighbours. Across nodes: a tree for latency-bound sizes, a ring once
 * bandwidth dominates. */
const tutti__algo_t *tutti__select(tutti_comm_t *comm, tutti_coll_t coll, size_t bytes)
{
    const tutti__algo_override_t *ov = &comm->algo[coll];
    for (int i = 0; i < ov->n; i++)
        if (bytes >= ov->r[i].lo && bytes <= ov->r[i].hi)
            return ov->r[i].algo;
    bool win = comm->wins != NULL;
    switch (coll) {
    case TUTTI_COLL_ALLREDUCE:
        return win ? &tutti__allreduce_direct
                   : bytes <= 65536 ? &tutti__allreduce_tree : &tutti__allreduce_ring;
    case TUTTI_COLL_ALLGATHER: return win ? &tutti__allgather_direct : &tutti__allgather_ring;
    case TUTTI_COLL_ALLTOALL: return win ? &tutti__alltoall_direct : &tutti__alltoall_pairwise;
    case TUTTI_COLL_REDUCE_SCATTER:
        return win ? &tutti__reduce_scatter_direct : &tutti__reduce_scatter_ring;
    case TUTTI_COLL_BCAST: return win ? &tutti__bcast_direct : &tutti__bcast_tree;
    case TUTTI_COLL_REDUCE: return win ? &tutti__reduce_direct : &tutti__reduce_tree;
    case TUTTI_COLL_BARRIER: return win ? &tutti__barrier_direct : &tutti__barrier_dissemination;
    default: return NULL;
    }
}

TUTTI_API const char *tutti_comm_algorithm(const tutti_comm_t *comm, tutti_coll_t coll, size_t bytes)
{
    if (!tutti__comm_valid(comm) || (unsigned)coll >= TUTTI_COLL_COUNT)
        return NULL;
    return tutti__select((tutti_comm_t *)comm, coll, bytes)->name;
}

size_t tutti__coll_bytes(const tutti__coll_t *c)
{
    if (c->counts == NULL)
        return c->count * c->esize;
    /* alltoallv's counts differ from rank to rank, and every rank must pick the same
     * algorithm: its choice ignores the size (it is made as for 0 bytes). */
    if (c->kind == TUTTI_COLL_ALLTOALL)
        return 0;
    size_t mx = 0;
    for (int r = 0; r < c->size; r++)
        if (c->counts[r] > mx)
            mx = c->counts[r];
    return mx * c->esize;
}
