/* topo.c: the nodes as the hierarchical algorithms see them (each node's ranks, every rank's
 * local index, the rails), built from node discovery, and what the network offers them. */
#include <stdlib.h>

#include "algos.h"

tutti_status_t tutti__topo_init(tutti__topo_t *t, int rank, int size, const tutti__nodes_t *nodes)
{
    memset(t, 0, sizeof *t);
    const int nn = nodes->nnodes;
    t->nnodes = nn;
    t->node_of = malloc((size_t)size * sizeof(int));
    t->lidx = malloc((size_t)size * sizeof(int));
    t->node_off = calloc((size_t)nn + 1, sizeof(int));
    t->members = malloc((size_t)size * sizeof(int));
    if (t->node_of == NULL || t->lidx == NULL || t->node_off == NULL || t->members == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for the nodes of %d ranks",
                                size);
    /* Counting sort by node keeps each node's ranks increasing. */
    for (int r = 0; r < size; r++) {
        int k = nodes->node_of[r];
        if (k < 0 || k >= nn)
            return tutti__set_error(TUTTI_ERR_INTERNAL, "rank %d is on node %d of %d", r, k, nn);
        t->node_of[r] = k;
        t->node_off[k + 1]++;
    }
    for (int k = 0; k < nn; k++)
        t->node_off[k + 1] += t->node_off[k];
    int *fill = calloc((size_t)nn, sizeof(int));
    if (fill == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for the nodes of %d ranks",
                                size);
    for (int r = 0; r < size; r++) {
        int k = t->node_of[r];
        t->lidx[r] = fill[k];
        t->members[t->node_off[k] + fill[k]++] = r;
    }
    free(fill);
    t->ppn_min = size;
    for (int k = 0; k < nn; k++) {
        int n = t->node_off[k + 1] - t->node_off[k];
        t->ppn_min = n < t->ppn_min ? n : t->ppn_min;
        t->ppn_max = n > t->ppn_max ? n : t->ppn_max;
    }
    t->node = t->node_of[rank];
    t->local_rank = t->lidx[rank];
    t->local_size = t->node_off[t->node + 1] - t->node_off[t->node];
    t->rails = malloc((size_t)t->ppn_min * (size_t)nn * sizeof(int));
    if (t->rails == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for the nodes of %d ranks",
                                size);
    for (int j = 0; j < t->ppn_min; j++)
        for (int k = 0; k < nn; k++)
            t->rails[j * nn + k] = t->members[t->node_off[k] + j];
    return TUTTI_OK;
}

void tutti__topo_free(tutti__topo_t *t)
{
    free(t->node_of);
    free(t->lidx);
    free(t->node_off);
    free(t->members);
    free(t->rails);
    memset(t, 0, sizeof *t);
}

unsigned tutti__topo_caps(const tutti__topo_t *t, const tutti__links_t *l)
{
    unsigned caps = 0;
    if (l->wins != NULL)
        caps |= TUTTI__NEEDS_WINDOW;
    if (l->wins != NULL && l->wins[0]->cma)
        caps |= TUTTI__NEEDS_CMA;
    if (l->wins != NULL && tutti__alltoall_direct_room(l->wins[0]->region_size,
                                                       l->wins[0]->nranks))
        caps |= TUTTI__NEEDS_ROOM;
    /* Hierarchy pays only where some node has several ranks (with one rank per node the flat
     * algorithms already send each byte across once), and needs every such node's window. */
    if (t->nnodes > 1 && t->ppn_max > 1 && t->node_seg > 0)
        caps |= TUTTI__NEEDS_NODES;
    if (t->ppn_min == t->ppn_max)
        caps |= TUTTI__NEEDS_UNIFORM;
    return caps;
}
