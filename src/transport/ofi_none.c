/* ofi_none.c: the ofi transport's constructor when tutti is built without libfabric
 * (-Dofi=disabled, or libfabric-dev missing): a job that needs it fails with a clear error. */
#include "transport.h"

tutti_status_t tutti__ofi_create(int rank, int size, int nchan, tutti__bootstrap_t *bs,
                                 const int *peers, int npeers, bool single_node,
                                 const char *ifaddr, tutti__transport_t **out)
{
    (void)rank, (void)size, (void)nchan, (void)bs, (void)peers, (void)npeers, (void)single_node;
    (void)ifaddr;
    *out = NULL;
    return tutti__set_error(TUTTI_ERR_NOT_SUPPORTED,
                            "this tutti was built without libfabric, so it cannot reach ranks on "
                            "other nodes or run TUTTI_TRANSPORT=ofi; install libfabric-dev and "
                            "rebuild (meson setup -Dofi=enabled)");
}
