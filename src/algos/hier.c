/* hier.c: what the hierarchical algorithms share: the parts of a call that run among a node's
 * ranks (over its window) or among some ranks of several nodes (by a flat algorithm), and the
 * check that the node windows can serve a call. */
#include "algos.h"

/* begin gives c its deadline now, so that all its parts share one. */
static void begin(tutti__coll_t *c)
{
    if (c->deadline == 0.0)
        c->deadline = tutti__now() + tutti__coll_timeout(c);
}

void tutti__hier_node(tutti__coll_t *c, tutti__coll_t *loc)
{
    const tutti__topo_t *t = &c->net->topo;
    begin(c);
    *loc = *c;
    loc->top = tutti__top(c);
    loc->rank = t->local_rank;
    loc->size = t->local_size;
    loc->group = t->members + t->node_off[t->node];
    loc->node_window = true;
    loc->avg_n = tutti__avg_div(c);
}

void tutti__hier_group(tutti__coll_t *c, const int *group, int n, int me, tutti__coll_t *sub)
{
    begin(c);
    *sub = *c;
    sub->top = tutti__top(c);
    sub->rank = me;
    sub->size = n;
    sub->group = group;
    sub->node_window = false;
    sub->avg_n = tutti__avg_div(c);
}

tutti_status_t tutti__hier_window(tutti__coll_t *c, tutti__coll_t *loc, size_t min,
                                  const char *alt, tutti__window_t **w, size_t *seg)
{
    const tutti__topo_t *t = &c->net->topo;
    *w = NULL;
    *seg = t->node_seg / c->esize;
    if (t->local_size > 1) {
        *w = tutti__coll_window(loc);
        if (*w == NULL || (*w)->nranks != t->local_size)
            return tutti__decline(c, TUTTI_ERR_INTERNAL,
                                  "%s (hier): no shm window over the %d ranks of this node on rank "
                                  "%d",
                                  c->name, t->local_size, c->net->rank);
    }
    /* Every rank finds the same: node_seg was agreed at creation and min depends only on the
     * call and the nodes. */
    if (*seg < min || *seg == 0)
        return tutti__decline(c, TUTTI_ERR_NOT_SUPPORTED,
                              "%s (hier): the shm windows (%zu bytes per rank on the smallest "
                              "node) cannot hold %zu elements of %s per rank; raise "
                              "TUTTI_SHM_WINDOW or use the %s algorithm",
                              c->name, t->node_seg, min ? min : 1, tutti_dtype_name(c->dtype), alt);
    return TUTTI_OK;
}
