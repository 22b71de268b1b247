/* fnv.h: FNV-1a, the library's one non-cryptographic hash (the store's table buckets, the
 * agreement of settings and rank lists between ranks, ports derived from a launcher's job name,
 * the scheduler group of a process): small, and the same on every rank of a build. Header-only,
 * as parse_size.h. Not for anything an adversary chooses to collide: that is sha256.h's. */
#ifndef TUTTI_FNV_H
#define TUTTI_FNV_H

#include <stddef.h>
#include <stdint.h>

#define TUTTI__FNV64_INIT 0xcbf29ce484222325ull
#define TUTTI__FNV32_INIT 2166136261u

/* tutti__fnv64 mixes n bytes at p into h (start from TUTTI__FNV64_INIT). */
static inline uint64_t tutti__fnv64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* tutti__fnv64_str mixes the bytes of the string s (not its NUL) into h. */
static inline uint64_t tutti__fnv64_str(uint64_t h, const char *s)
{
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* tutti__fnv32_str: the same, 32 bits (start from TUTTI__FNV32_INIT). */
static inline uint32_t tutti__fnv32_str(uint32_t h, const char *s)
{
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

#endif /* TUTTI_FNV_H */
