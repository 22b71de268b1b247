/* check_hier.c: the parts of multi-node support that need no network: the nodes as the
 * hierarchical algorithms see them (topo.c), what a network offers them and what select.c then
 * picks, and TUTTI_SOCKET_IFNAME's syntax and interface choice (ifaces.c). The algorithms
 * themselves run across namespace hosts (tests/multinode.sh, multinode_check.c). */
#include <check.h>
#include <stdlib.h>

#include "../src/algos/algos.h"

/* topo_of builds the tables for rank of a job whose ranks sit on nodes node_of[0..size). */
static void topo_of(tutti__topo_t *t, int rank, int size, const int *node_of, int nnodes)
{
    tutti__nodes_t n = {.nnodes = nnodes, .node_of = (int *)node_of};
    ck_assert_int_eq(tutti__topo_init(t, rank, size, &n), TUTTI_OK);
}

START_TEST(test_block)
{
    const int node_of[] = {0, 0, 1, 1, 2, 2};
    tutti__topo_t t;
    topo_of(&t, 3, 6, node_of, 3);
    ck_assert_int_eq(t.nnodes, 3);
    ck_assert_int_eq(t.node, 1);
    ck_assert_int_eq(t.local_rank, 1);
    ck_assert_int_eq(t.local_size, 2);
    ck_assert_int_eq(t.ppn_min, 2);
    ck_assert_int_eq(t.ppn_max, 2);
    const int rails[] = {0, 2, 4, 1, 3, 5}; /* rail 0: local rank 0 of each node; rail 1 */
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(t.rails[i], rails[i]);
    for (int r = 0; r < 6; r++) {
        ck_assert_int_eq(t.lidx[r], r % 2);
        ck_assert_int_eq(t.members[r], r);
    }
    tutti__topo_free(&t);
}
END_TEST

START_TEST(test_cyclic)
{
    /* rank r on node r mod 3: a node's ranks are not consecutive */
    const int node_of[] = {0, 1, 2, 0, 1, 2};
    tutti__topo_t t;
    topo_of(&t, 4, 6, node_of, 3);
    ck_assert_int_eq(t.node, 1);
    ck_assert_int_eq(t.local_rank, 1);
    const int members[] = {0, 3, 1, 4, 2, 5}, off[] = {0, 2, 4, 6};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(t.members[i], members[i]);
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(t.node_off[k], off[k]);
    const int rails[] = {0, 1, 2, 3, 4, 5};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(t.rails[i], rails[i]);
    ck_assert_int_eq(t.lidx[3], 1);
    ck_assert_int_eq(t.lidx[2], 0);
    tutti__topo_free(&t);
}
END_TEST

START_TEST(test_uneven)
{
    /* 3 ranks on node 0, 1 on node 1: one rail only */
    const int node_of[] = {0, 0, 1, 0};
    tutti__topo_t t;
    topo_of(&t, 3, 4, node_of, 2);
    ck_assert_int_eq(t.ppn_min, 1);
    ck_assert_int_eq(t.ppn_max, 3);
    ck_assert_int_eq(t.local_rank, 2);
    ck_assert_int_eq(t.local_size, 3);
    ck_assert_int_eq(t.rails[0], 0);
    ck_assert_int_eq(t.rails[1], 2);
    tutti__topo_free(&t);
}
END_TEST

START_TEST(test_caps_and_choice)
{
    const int two_by_two[] = {0, 0, 1, 1}, uneven[] = {0, 0, 1}, one_each[] = {0, 1};
    tutti__window_t w = {0}, *wins[1] = {&w};
    tutti__links_t none = {0}, node = {.node_wins = wins}, all = {.node_wins = wins, .wins = wins};
    tutti__algo_override_t ov = {0};
    tutti__topo_t t;

    topo_of(&t, 0, 4, two_by_two, 2);
    t.node_seg = 1 << 20;
    unsigned caps = tutti__topo_caps(&t, &node);
    ck_assert_uint_eq(caps, TUTTI__NEEDS_NODES | TUTTI__NEEDS_UNIFORM);
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLREDUCE, 8, false)->name, "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLREDUCE, 1 << 26, false)->name,
                     "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLGATHER, 8, false)->name, "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLTOALL, 8, false)->name, "hier");
    /* large blocks: the network is busy anyway; aggregation's copies cost more (select.c) */
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLTOALL, (256 << 10) - 4, false)->name,
                     "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLTOALL, 256 << 10, false)->name,
                     "pairwise");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_REDUCE_SCATTER, 8, false)->name,
                     "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_BCAST, 8, false)->name, "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_REDUCE, 8, false)->name, "tree");
    ck_assert(!tutti__algo_offered(&tutti__allreduce_direct, caps));
    /* a node without a window somewhere (node_seg 0): no hierarchy */
    t.node_seg = 0;
    caps = tutti__topo_caps(&t, &none);
    ck_assert(!(caps & TUTTI__NEEDS_NODES));
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLREDUCE, 8, false)->name, "tree");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLREDUCE, 1 << 20, false)->name,
                     "rhd");
    tutti__topo_free(&t);

    /* nodes of unequal size: hier allreduce and bcast, the rail algorithms not */
    topo_of(&t, 0, 3, uneven, 2);
    t.node_seg = 1 << 20;
    caps = tutti__topo_caps(&t, &node);
    ck_assert_uint_eq(caps, TUTTI__NEEDS_NODES);
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLREDUCE, 8, false)->name, "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_BCAST, 8, false)->name, "hier");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLGATHER, 8, false)->name, "ring");
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLTOALL, 8, false)->name, "pairwise");
    ck_assert(!tutti__algo_offered(&tutti__alltoall_hier, caps));
    ck_assert(tutti__algo_offered(&tutti__allreduce_hier, caps));
    tutti__topo_free(&t);

    /* one rank per node: the flat algorithms already cross once per byte */
    topo_of(&t, 0, 2, one_each, 2);
    t.node_seg = 0;
    caps = tutti__topo_caps(&t, &none);
    ck_assert(!(caps & TUTTI__NEEDS_NODES));
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLGATHER, 8, false)->name, "ring");
    tutti__topo_free(&t);

    /* one node: the direct algorithms */
    const int one_node[] = {0, 0};
    topo_of(&t, 0, 2, one_node, 1);
    caps = tutti__topo_caps(&t, &all);
    ck_assert(caps & TUTTI__NEEDS_WINDOW);
    ck_assert(!(caps & TUTTI__NEEDS_NODES));
    ck_assert_str_eq(tutti__select(&ov, caps, 4, TUTTI_COLL_ALLREDUCE, 8, false)->name, "direct");
    tutti__topo_free(&t);

    /* alltoallv on one node: single copy, which chooses block by block, where it is allowed;
     * the direct algorithm where not; a plain alltoall by its block size */
    const unsigned room = TUTTI__NEEDS_WINDOW | TUTTI__NEEDS_ROOM;
    const unsigned cma = room | TUTTI__NEEDS_CMA;
    ck_assert_str_eq(tutti__select(&ov, cma, 2, TUTTI_COLL_ALLTOALL, 0, true)->name, "cma");
    ck_assert_str_eq(tutti__select(&ov, room, 2, TUTTI_COLL_ALLTOALL, 0, true)->name, "direct");
    ck_assert_str_eq(tutti__select(&ov, cma, 2, TUTTI_COLL_ALLTOALL, 8, false)->name, "direct");
    ck_assert_uint_eq(tutti__cma_alltoall_min(2), 64 << 10);
    ck_assert_str_eq(tutti__select(&ov, cma, 2, TUTTI_COLL_ALLTOALL, 64 << 10, false)->name,
                     "cma");
    /* an override for the sizes alltoallv is chosen at (0) still wins */
    tutti__algo_override_t direct = {.n = 1};
    direct.r[0] = (tutti__algo_range_t){0, SIZE_MAX, &tutti__alltoall_direct};
    ck_assert_str_eq(tutti__select(&direct, cma, 2, TUTTI_COLL_ALLTOALL, 0, true)->name,
                     "direct");
}
END_TEST

START_TEST(test_flat_choice)
{
    /* small: the tree; two ranks: the ring (the same steps, and it overlaps its reductions) */
    ck_assert_str_eq(tutti__allreduce_flat(1024, 8)->name, "tree");
    ck_assert_str_eq(tutti__allreduce_flat(2, 1 << 26)->name, "ring");
    /* a power of two: fewer steps at the same bandwidth */
    ck_assert_str_eq(tutti__allreduce_flat(4, 1 << 20)->name, "rhd");
    ck_assert_str_eq(tutti__allreduce_flat(1024, 25 << 20)->name, "rhd");
    /* a few ranks, not a power of two: folding's two whole-buffer steps cost more */
    ck_assert_str_eq(tutti__allreduce_flat(3, 1 << 20)->name, "ring");
    ck_assert_str_eq(tutti__allreduce_flat(6, 64 << 20)->name, "ring");
    /* a chunk of 1 MiB or more per ring step: the ring (pipelined) beats rhd's store-and-
     * forward halving steps, measured across namespace hosts (select.c) */
    ck_assert_str_eq(tutti__allreduce_flat(4, 4 << 20)->name, "ring");
    ck_assert_str_eq(tutti__allreduce_flat(8, 64 << 20)->name, "ring");
    ck_assert_str_eq(tutti__allreduce_flat(4, (4 << 20) - 4)->name, "rhd");
    ck_assert_str_eq(tutti__allreduce_flat(1024, (size_t)1 << 30)->name, "ring");
    /* many ranks: the ring's 2(n-1) latencies cost more */
    ck_assert_str_eq(tutti__allreduce_flat(1000, 25 << 20)->name, "rhd");
    /* the default across nodes of one rank each follows it */
    tutti__algo_override_t ov = {0};
    ck_assert_str_eq(tutti__select(&ov, 0, 1000, TUTTI_COLL_ALLREDUCE, 25 << 20, false)->name,
                     "rhd");
    ck_assert_str_eq(tutti__select(&ov, 0, 3, TUTTI_COLL_ALLREDUCE, 1 << 20, false)->name, "ring");
}
END_TEST

START_TEST(test_ifname_syntax)
{
    /* prefixes */
    ck_assert(tutti__ifname_match("eth", "eth0"));
    ck_assert(tutti__ifname_match("eth", "eth12"));
    ck_assert(!tutti__ifname_match("eth", "ib0"));
    ck_assert(tutti__ifname_match("ib,eth", "eth1"));
    ck_assert(tutti__ifname_match("ib,eth", "ib0"));
    ck_assert(!tutti__ifname_match("ib,eth", "lo"));
    /* exact names */
    ck_assert(tutti__ifname_match("=eth0", "eth0"));
    ck_assert(!tutti__ifname_match("=eth0", "eth01"));
    ck_assert(!tutti__ifname_match("=eth", "eth0"));
    ck_assert(tutti__ifname_match("=eth0,ib0", "ib0"));
    /* exclusion */
    ck_assert(!tutti__ifname_match("^lo,docker", "lo"));
    ck_assert(!tutti__ifname_match("^lo,docker", "docker0"));
    ck_assert(tutti__ifname_match("^lo,docker", "eth0"));
    ck_assert(!tutti__ifname_match("^=eth0", "eth0"));
    ck_assert(tutti__ifname_match("^=eth0", "eth01"));
    /* empty entries match nothing */
    ck_assert(!tutti__ifname_match("", "eth0"));
    ck_assert(!tutti__ifname_match(",", "eth0"));
    ck_assert(tutti__ifname_match("^", "eth0"));
}
END_TEST

START_TEST(test_iface_pick)
{
    char ip[64], name[TUTTI__IFNAME_LEN];
    /* every Linux host has lo; named, it is chosen */
    ck_assert_int_eq(tutti__iface_pick("=lo", ip, name), TUTTI_OK);
    ck_assert_str_eq(name, "lo");
    ck_assert_str_eq(ip, "127.0.0.1");
    /* none matches: an error that lists what there is */
    ck_assert_int_eq(tutti__iface_pick("nosuchif", ip, name), TUTTI_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(tutti__tls_error(), "TUTTI_SOCKET_IFNAME=nosuchif matches no"));
    ck_assert_ptr_nonnull(strstr(tutti__tls_error(), "lo 127.0.0.1"));
    /* an exclusion that leaves a real interface prefers it to loopback */
    if (tutti__iface_pick("^nosuchif", ip, name) == TUTTI_OK && strcmp(name, "lo") != 0)
        ck_assert_str_ne(ip, "127.0.0.1");
    char back[TUTTI__IFNAME_LEN];
    tutti__iface_of("127.0.0.1", back);
    ck_assert_str_eq(back, "lo");
    tutti__iface_of("192.0.2.77", back); /* TEST-NET-1: on no interface */
    ck_assert_str_eq(back, "?");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hier");
    TCase *tc = tcase_create("topo");
    tcase_add_test(tc, test_block);
    tcase_add_test(tc, test_cyclic);
    tcase_add_test(tc, test_uneven);
    tcase_add_test(tc, test_caps_and_choice);
    tcase_add_test(tc, test_flat_choice);
    suite_add_tcase(s, tc);
    tc = tcase_create("ifaces");
    tcase_add_test(tc, test_ifname_syntax);
    tcase_add_test(tc, test_iface_pick);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
