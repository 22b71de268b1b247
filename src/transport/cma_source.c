/* cma_source.c: a buffer that local peers read by single copy, backed with transparent huge
 * pages once it is seen to be reused, so that the kernel pins it for them 2 MiB at a time.
 *
 * process_vm_readv pins the source page by page; from 4 KiB pages a 16 MiB read ran at 4-10
 * GB/s here where memcpy of the same buffers gave 8-16, and from a source backed by huge pages
 * at memcpy's speed (2026-11-30, the development machine, THP in `madvise` mode, so user
 * buffers are 4 KiB pages unless someone asks). MADV_COLLAPSE (Linux 6.1) backs a range that is
 * already populated with huge pages, synchronously and without changing a byte. Only the huge
 * pages (2 MiB on x86-64: hpage_pmd_size) at least half inside the buffer are collapsed: the
 * memory beside it within such a page gets the same backing, its bytes unchanged, and at most
 * half a huge page on each side of the buffer becomes resident if it was not (a collapse that
 * would cross into another mapping fails, and the page is read as it is).
 *
 * A collapse costs about a copy of the range, so it pays only on a buffer sent again: a range
 * is collapsed the second time it is offered, and again every REVISIT-th time after (the memory
 * may have been unmapped and mapped anew at the same address, 4 KiB pages again; on pages that
 * are already huge the call only looks, ~0.1 ms for 64 MiB). The table of ranges is the
 * process's, shared by its communicators. Best effort: a range the kernel will not collapse
 * (PR_SET_THP_DISABLE, MADV_NOHUGEPAGE, no huge page free, most file mappings) is read as it
 * is; where the administrator set THP to `never`, nothing is collapsed. Shared memory (shmem,
 * as torch's share_memory_) may be collapsed too: its page cache, for every process that maps
 * it, bytes unchanged. The pages collapsed are populated, those never touched zero-filled: the
 * callers offer only what their peers are about to read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

enum {
    SLOTS = 32,    /* ranges remembered: a training step's buffers, with room */
    REVISIT = 256, /* offers between collapses of a range already collapsed */
};

typedef struct seen {
    uintptr_t lo, hi; /* the huge pages offered (tutti__cma_offer's span); hi == 0: free slot */
    uint32_t offers;
    uint64_t used;    /* the table's clock at the last offer: least recent is replaced */
} seen_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static seen_t table[SLOTS];
static uint64_t clock_now;
static int kernel_has = -1; /* -1: not asked yet; 0: no MADV_COLLAPSE here, or THP `never` */
static uintptr_t huge = (uintptr_t)2 << 20; /* the huge page's size (read at the first ask) */
static uint64_t collapses;

/* offer_count returns how many times [lo, hi) has been offered, this time included. */
static uint32_t offer_count(uintptr_t lo, uintptr_t hi)
{
    seen_t *oldest = &table[0];
    clock_now++;
    for (int i = 0; i < SLOTS; i++) {
        if (table[i].lo == lo && table[i].hi == hi) {
            table[i].used = clock_now;
            return ++table[i].offers;
        }
        if (table[i].used < oldest->used)
            oldest = &table[i];
    }
    *oldest = (seen_t){lo, hi, 1, clock_now};
    return 1;
}

/* thp_never tells whether the administrator turned transparent huge pages off ("[never]" in
 * sysfs), which MADV_COLLAPSE alone would not heed. */
static bool thp_never(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    char line[128] = "";
    if (f == NULL)
        return false;
    bool never = fgets(line, sizeof line, f) != NULL && strstr(line, "[never]") != NULL;
    fclose(f);
    return never;
}

/* ask_kernel sets kernel_has and huge (under the lock, once). */
static void ask_kernel(void)
{
    /* An empty range: EINVAL only where the advice is unknown. */
    kernel_has = madvise((void *)(uintptr_t)sysconf(_SC_PAGESIZE), 0, MADV_COLLAPSE) == 0 &&
                 !thp_never();
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "re");
    unsigned long long size = 0;
    if (f != NULL) {
        if (fscanf(f, "%llu", &size) == 1 && size >= 4096 && (size & (size - 1)) == 0 &&
            size <= ((unsigned long long)1 << 30))
            huge = (uintptr_t)size;
        fclose(f);
    }
}

void tutti__cma_offer(const tutti__window_t *w, const void *buf, size_t len)
{
    if (w == NULL || !w->cma_thp || buf == NULL || len == 0)
        return;
    int saved = errno; /* nothing here is the caller's business */
    pthread_mutex_lock(&lock);
    if (kernel_has < 0)
        ask_kernel();
    /* The huge pages at least half inside the buffer: its middle ones, and an end one half
     * filled by it (a 1 MiB alltoall block's 2 MiB buffer lies across two, wholly in neither). */
    uintptr_t b = (uintptr_t)buf, e = b + len;
    uintptr_t first = b & ~(huge - 1), last = (e - 1) & ~(huge - 1);
    uintptr_t lo = first, hi = last + huge;
    if (((first + huge < e ? first + huge : e) - b) * 2 < huge)
        lo += huge;
    if (last != first && (e - last) * 2 < huge)
        hi -= huge;
    uint32_t k = kernel_has && hi > lo ? offer_count(lo, hi) : 0;
    pthread_mutex_unlock(&lock);
    /* Outside the lock: a collapse takes milliseconds, and two threads collapsing one range
     * only make the kernel look twice. */
    if ((k == 2 || (k > 2 && (k - 2) % REVISIT == 0)) &&
        madvise((void *)lo, hi - lo, MADV_COLLAPSE) == 0)
        __atomic_fetch_add(&collapses, 1, __ATOMIC_RELAXED);
    errno = saved;
}

uint64_t tutti__cma_collapses(void)
{
    return __atomic_load_n(&collapses, __ATOMIC_RELAXED);
}
