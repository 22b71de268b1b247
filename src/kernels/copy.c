/* copy.c: the copy for large destinations that nobody reads soon (an alltoall's output):
 * non-temporal stores, which skip the read-for-ownership of each destination line and leave
 * the caches to the data still in use.
 *
 * Why: memcpy writes through the cache, so each destination line is first read from memory
 * and later evicted: three memory transfers per line. Streaming stores make it two. On the
 * development machine (2-core Zen 4 guest) a 128 MiB copy took 6.4 ms by memcpy and 4.8 ms
 * streamed, 11.5 and 8.2 ms with both cores copying (docs/performance.md). Below a few MiB
 * the destination may still be in the cache when it is read, and memcpy wins: callers decide
 * by the size of the whole output (tutti__copy_out). */
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void tutti__copy_stream(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
    /* Streaming stores need 16-byte aligned addresses: memcpy up to the first 64-byte line. */
    size_t head = (size_t)(-(uintptr_t)d & 63u);
    if (head > bytes)
        head = bytes;
    memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    size_t lines = bytes / 64;
    for (size_t i = 0; i < lines; i++, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
    memcpy(d, s, bytes - lines * 64);
    /* Streaming stores are weakly ordered: a flag written after this must not pass them. */
    _mm_sfence();
}
#else
void tutti__copy_stream(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
#endif
