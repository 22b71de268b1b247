/* check_patterns.c: unit tests of the algorithms' pure peer arithmetic (src/algos/patterns/):
 * chunk splits, ring and pairwise schedules, binomial trees and the dissemination barrier,
 * each checked by simulating the whole schedule for many rank counts, without a network. */
#include <check.h>
#include "check_main.h"
#include <stdint.h>
#include <stdlib.h>

#include "../src/algos/patterns/chunk.h"
#include "../src/algos/patterns/ring.h"
#include "../src/algos/patterns/tree.h"

#define MAXN 70

/* ---- chunk.h ---- */

START_TEST(test_mod)
{
    ck_assert_int_eq(tutti__mod(-1, 5), 4);
    ck_assert_int_eq(tutti__mod(-10, 5), 0);
    ck_assert_int_eq(tutti__mod(12, 5), 2);
    ck_assert_int_eq(tutti__mod(0, 1), 0);
    ck_assert_uint_eq(tutti__div_up(0, 4), 0);
    ck_assert_uint_eq(tutti__div_up(9, 4), 3);
    ck_assert_uint_eq(tutti__div_up(8, 4), 2);
}
END_TEST

START_TEST(test_split)
{
    const size_t counts[] = {0, 1, 2, 7, 64, 1031, 65537};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (int n = 1; n <= MAXN; n++) {
            size_t count = counts[ci], next = 0;
            for (int i = 0; i < n; i++) {
                size_t len = tutti__split_len(count, n, i);
                ck_assert_uint_eq(tutti__split_off(count, n, i), next);
                /* nearly equal, longer ones first */
                ck_assert_uint_eq(len, count / (size_t)n + ((size_t)i < count % (size_t)n));
                next += len;
            }
            ck_assert_uint_eq(next, count);
        }
}
END_TEST

START_TEST(test_split_huge)
{
    /* multi-GiB counts: no overflow in the offset arithmetic */
    size_t count = ((size_t)5 << 32) + 3;
    int n = 7;
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_uint_eq(tutti__split_off(count, n, i), sum);
        sum += tutti__split_len(count, n, i);
    }
    ck_assert_uint_eq(sum, count);
}
END_TEST

START_TEST(test_piece)
{
    ck_assert_uint_eq(tutti__piece(10, 0, 4), 4);
    ck_assert_uint_eq(tutti__piece(10, 8, 4), 2);
    ck_assert_uint_eq(tutti__piece(10, 10, 4), 0);
    ck_assert_uint_eq(tutti__piece(10, 12, 4), 0);
    ck_assert_uint_eq(tutti__piece(0, 0, 4), 0);
    /* pieces of every round add up to the block */
    for (size_t total = 0; total < 40; total++) {
        size_t sum = 0;
        for (size_t off = 0; off < 48; off += 6)
            sum += tutti__piece(total, off, 6);
        ck_assert_uint_eq(sum, total);
    }
}
END_TEST

/* ---- ring.h ---- */

START_TEST(test_ring_neighbours)
{
    for (int n = 1; n <= MAXN; n++)
        for (int r = 0; r < n; r++) {
            ck_assert_int_eq(tutti__ring_right(r, n), (r + 1) % n);
            ck_assert_int_eq(tutti__ring_left(tutti__ring_right(r, n), n), r);
        }
}
END_TEST

/* Simulate a ring reduce-scatter with contribution bitmasks: have[r][b] is the set of ranks
 * whose input is summed into rank r's copy of block b. A rank that receives block b adds its
 * own contribution; after n-1 steps rank r must hold block r complete. Then simulate the
 * allgather: every rank must end with every block, each received exactly once. */
START_TEST(test_ring_schedules)
{
    static uint64_t have[64][64];
    for (int n = 1; n <= 64; n++) {
        uint64_t all = n == 64 ? ~0ull : (1ull << n) - 1;
        for (int r = 0; r < n; r++)
            for (int b = 0; b < n; b++)
                have[r][b] = 1ull << r;
        for (int k = 0; k < n - 1; k++) {
            uint64_t sent[64];
            for (int r = 0; r < n; r++)
                sent[r] = have[r][tutti__ring_rs_block(r, n, k)];
            for (int r = 0; r < n; r++) {
                int left = tutti__ring_left(r, n), b = tutti__ring_rs_block(left, n, k);
                /* a partial result must never count a rank twice */
                ck_assert_uint_eq(have[r][b] & sent[left] & ~(1ull << r), 0);
                ck_assert_uint_eq(have[r][b], 1ull << r); /* each block received once */
                have[r][b] |= sent[left];
                if (k + 1 < n - 1) /* what arrives is forwarded next */
                    ck_assert_int_eq(tutti__ring_rs_block(r, n, k + 1), b);
            }
        }
        for (int r = 0; r < n; r++)
            ck_assert_uint_eq(have[r][r], all);

        /* allgather: holds[r] is the set of blocks rank r has */
        uint64_t holds[64];
        for (int r = 0; r < n; r++)
            holds[r] = 1ull << r;
        for (int k = 0; k < n - 1; k++) {
            uint64_t next[64];
            for (int r = 0; r < n; r++) {
                int left = tutti__ring_left(r, n);
                int sb = tutti__ring_ag_block(left, n, k);
                ck_assert(holds[left] & (1ull << sb));     /* sender has it */
                ck_assert(!(holds[r] & (1ull << sb)));      /* receiver did not */
                ck_assert(holds[r] & (1ull << tutti__ring_ag_block(r, n, k)));
                next[r] = holds[r] | (1ull << sb);
            }
            for (int r = 0; r < n; r++)
                holds[r] = next[r];
        }
        for (int r = 0; r < n; r++)
            ck_assert_uint_eq(holds[r], all);
    }
}
END_TEST

START_TEST(test_pairwise)
{
    for (int n = 1; n <= MAXN; n++)
        for (int r = 0; r < n; r++) {
            char seen_to[MAXN] = {0}, seen_from[MAXN] = {0};
            for (int k = 1; k < n; k++) {
                int to = tutti__pairwise_to(r, n, k), from = tutti__pairwise_from(r, n, k);
                /* the partner I send to receives from me at the same step */
                ck_assert_int_eq(tutti__pairwise_from(to, n, k), r);
                ck_assert_int_eq(tutti__pairwise_to(from, n, k), r);
                ck_assert_int_ne(to, r);
                ck_assert(!seen_to[to] && !seen_from[from]);
                seen_to[to] = seen_from[from] = 1;
            }
        }
}
END_TEST

/* ---- tree.h ---- */

START_TEST(test_tree_shape)
{
    for (int n = 1; n <= MAXN; n++)
        for (int root = 0; root < n; root++) {
            int nparent_of[MAXN] = {0};
            ck_assert_int_eq(tutti__tree_parent(root, root, n), -1);
            for (int r = 0; r < n; r++) {
                int kids[TUTTI__TREE_MAX_CHILDREN];
                int nk = tutti__tree_children(r, root, n, kids);
                ck_assert_int_le(nk, TUTTI__TREE_MAX_CHILDREN);
                for (int i = 0; i < nk; i++) {
                    ck_assert_int_eq(tutti__tree_parent(kids[i], root, n), r);
                    nparent_of[kids[i]]++;
                }
                /* the walk to the root takes at most ceil(log2 n) hops */
                int hops = 0;
                for (int p = r; p != root; p = tutti__tree_parent(p, root, n)) {
                    ck_assert_int_ge(p, 0);
                    hops++;
                    ck_assert_int_le(hops, tutti__diss_rounds(n));
                }
            }
            for (int r = 0; r < n; r++) /* every non-root is exactly one rank's child */
                ck_assert_int_eq(nparent_of[r], r == root ? 0 : 1);
        }
}
END_TEST

/* subtree size of r in the tree rooted at root */
static int subtree(int r, int root, int n)
{
    int kids[TUTTI__TREE_MAX_CHILDREN], nk = tutti__tree_children(r, root, n, kids), s = 1;
    for (int i = 0; i < nk; i++)
        s += subtree(kids[i], root, n);
    return s;
}

START_TEST(test_tree_order)
{
    /* child i heads 2^i ranks, the last child possibly fewer (reduce order; a broadcast walks
     * them backwards) */
    for (int n = 1; n <= MAXN; n++)
        for (int root = 0; root < n; root += 3) {
            ck_assert_int_eq(subtree(root, root, n), n);
            for (int r = 0; r < n; r++) {
                int kids[TUTTI__TREE_MAX_CHILDREN];
                int nk = tutti__tree_children(r, root, n, kids);
                for (int i = 0; i < nk; i++) {
                    if (i + 1 < nk)
                        ck_assert_int_eq(subtree(kids[i], root, n), 1 << i);
                    else
                        ck_assert_int_le(subtree(kids[i], root, n), 1 << i);
                }
            }
        }
}
END_TEST

START_TEST(test_tree_known)
{
    int kids[TUTTI__TREE_MAX_CHILDREN];
    /* n = 8, root 0: 0 -> {1, 2, 4}, 4 -> {5, 6}, 6 -> {7} */
    ck_assert_int_eq(tutti__tree_children(0, 0, 8, kids), 3);
    ck_assert_int_eq(kids[0], 1);
    ck_assert_int_eq(kids[1], 2);
    ck_assert_int_eq(kids[2], 4);
    ck_assert_int_eq(tutti__tree_children(4, 0, 8, kids), 2);
    ck_assert_int_eq(kids[0], 5);
    ck_assert_int_eq(kids[1], 6);
    ck_assert_int_eq(tutti__tree_parent(7, 0, 8), 6);
    /* rooted at 5 of 6: vrank v = r - 5 mod 6; rank 0 is v 1, child of the root */
    ck_assert_int_eq(tutti__tree_parent(0, 5, 6), 5);
    ck_assert_int_eq(tutti__tree_parent(4, 5, 6), 3); /* v 5 -> v 4 = rank 3 */
    ck_assert_int_eq(tutti__tree_children(5, 5, 6, kids), 3);
    ck_assert_int_eq(kids[2], 3);
}
END_TEST

START_TEST(test_dissemination)
{
    ck_assert_int_eq(tutti__diss_rounds(1), 0);
    ck_assert_int_eq(tutti__diss_rounds(2), 1);
    ck_assert_int_eq(tutti__diss_rounds(3), 2);
    ck_assert_int_eq(tutti__diss_rounds(4), 2);
    ck_assert_int_eq(tutti__diss_rounds(5), 3);
    ck_assert_int_eq(tutti__diss_rounds(64), 6);
    ck_assert_int_eq(tutti__diss_rounds(65), 7);
    /* knows[r]: ranks whose arrival r has (transitively) heard of; all by the end */
    for (int n = 1; n <= 64; n++) {
        uint64_t knows[64], all = n == 64 ? ~0ull : (1ull << n) - 1;
        for (int r = 0; r < n; r++)
            knows[r] = 1ull << r;
        for (int k = 0; k < tutti__diss_rounds(n); k++) {
            uint64_t next[64];
            for (int r = 0; r < n; r++) {
                int from = tutti__diss_from(r, n, k);
                ck_assert_int_eq(tutti__diss_to(from, n, k), r);
                next[r] = knows[r] | knows[from];
            }
            for (int r = 0; r < n; r++)
                knows[r] = next[r];
        }
        for (int r = 0; r < n; r++)
            ck_assert_uint_eq(knows[r], all);
    }
}
END_TEST

static Suite *patterns_suite(void)
{
    Suite *s = suite_create("patterns");
    TCase *tc = tcase_create("chunk");
    tcase_add_test(tc, test_mod);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_split_huge);
    tcase_add_test(tc, test_piece);
    suite_add_tcase(s, tc);
    tc = tcase_create("ring");
    tcase_add_test(tc, test_ring_neighbours);
    tcase_add_test(tc, test_ring_schedules);
    tcase_add_test(tc, test_pairwise);
    suite_add_tcase(s, tc);
    tc = tcase_create("tree");
    tcase_add_test(tc, test_tree_shape);
    tcase_add_test(tc, test_tree_order);
    tcase_add_test(tc, test_tree_known);
    tcase_add_test(tc, test_dissemination);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(patterns_suite)
