/* chunk.h: pure arithmetic for cutting buffers into chunks, segments and pieces, shared by the
 * algorithms so that every rank cuts the same bytes the same way. */
#ifndef TUTTI_PATTERNS_CHUNK_H
#define TUTTI_PATTERNS_CHUNK_H

#include <stddef.h>

/* tutti__mod is a mod n in [0, n), also for negative a (n > 0). */
static inline int tutti__mod(long a, int n)
{
    long r = a % n;
    return (int)(r < 0 ? r + n : r);
}

static inline size_t tutti__min_size(size_t a, size_t b) { return a < b ? a : b; }

/* tutti__split_len is the length of part i when count elements are split into n nearly equal
 * parts: the first count % n parts are one element longer. */
static inline size_t tutti__split_len(size_t count, int n, int i)
{
    return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/* tutti__split_off is where part i of that split starts. */
static inline size_t tutti__split_off(size_t count, int n, int i)
{
    size_t q = count / (size_t)n, r = count % (size_t)n;
    return (size_t)i * q + tutti__min_size((size_t)i, r);
}

/* tutti__piece is how many of total elements remain at off, at most max (0 once exhausted):
 * the piece of a block that one round of a segmented algorithm moves. */
static inline size_t tutti__piece(size_t total, size_t off, size_t max)
{
    return off >= total ? 0 : tutti__min_size(total - off, max);
}

/* tutti__div_up is a / b rounded up (b > 0). */
static inline size_t tutti__div_up(size_t a, size_t b) { return a / b + (a % b != 0); }

#endif /* TUTTI_PATTERNS_CHUNK_H */
