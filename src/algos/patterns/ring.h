/* ring.h: pure peer arithmetic of the ring and pairwise-exchange algorithms (who talks to whom
 * and which block moves at step k), testable without a network. */
#ifndef TUTTI_PATTERNS_RING_H
#define TUTTI_PATTERNS_RING_H

#include "chunk.h"

/* Ranks form the ring 0 -> 1 -> ... -> n-1 -> 0: a rank sends right, receives from the left. */
static inline int tutti__ring_right(int rank, int n) { return tutti__mod((long)rank + 1, n); }
static inline int tutti__ring_left(int rank, int n) { return tutti__mod((long)rank - 1, n); }

/*
 * tutti__ring_rs_block is the block that rank sends at step k (0 <= k < n-1) of a ring
 * reduce-scatter; at the same step it receives tutti__ring_rs_block(left, n, k), reduces it
 * into its own copy, and sends that partial result at step k+1. After the last step the block
 * a rank received last, and so holds fully reduced, is block `rank`.
 */
static inline int tutti__ring_rs_block(int rank, int n, int k)
{
    return tutti__mod((long)rank - k - 1, n);
}

/*
 * tutti__ring_ag_block is the block that rank sends at step k (0 <= k < n-1) of a ring
 * allgather that starts with each rank holding block `rank`; it receives
 * tutti__ring_ag_block(left, n, k) at the same step and forwards it at step k+1.
 */
static inline int tutti__ring_ag_block(int rank, int n, int k) { return tutti__mod((long)rank - k, n); }

/* Pairwise exchange, step k (1 <= k < n): send to rank + k, receive from rank - k. Over all
 * steps every rank meets every other once in each direction. */
static inline int tutti__pairwise_to(int rank, int n, int k) { return tutti__mod((long)rank + k, n); }
static inline int tutti__pairwise_from(int rank, int n, int k) { return tutti__mod((long)rank - k, n); }

#endif /* TUTTI_PATTERNS_RING_H */
