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
 * A collapse costs more than a copy of the range (0.5-0.8 ms a huge page, here), so it pays
 * only on a buffer sent again: a range is collapsed the second time it is offered. The memory
 * may since have been unmapped and mapped anew at the same address (above glibc's mmap
 * threshold every free unmaps, and the next allocation of that size often lands where the last
 * one was): 4 KiB pages again, which a table of addresses cannot tell from the collapsed ones.
 * Where the kernel has PAGEMAP_SCAN (Linux 6.7), every later offer asks it whether a huge page
 * wholly inside the buffer is not huge (microseconds for 256 MiB; an end page only half inside
 * may cross into a gap or a mapping that cannot be collapsed, and is not asked about); one that
 * is has been mapped anew (or split by the kernel) and is collapsed again, except where
 * collapses do not last: one undone within LASTS offers doubles the offers let pass before the
 * next, up to REVISIT, so that a program that maps its buffer anew for every call pays a
 * collapse a few times, not every call. Without PAGEMAP_SCAN (or for a buffer with no huge page
 * wholly inside, or when a scan fails) a range is collapsed again every REVISIT-th offer (on
 * pages that are already huge the call only looks, ~0.1 ms for 64 MiB). The table of ranges is
 * the process's, shared by its communicators. Best effort: a range the kernel will not collapse
 * (PR_SET_THP_DISABLE, MADV_NOHUGEPAGE, no huge page free, most file mappings) is read as it
 * is, and backs off like one mapped anew; where the administrator set THP to `never`, nothing
 * is collapsed. Shared memory (shmem, as torch's share_memory_) may be collapsed too: its page
 * cache, for every process that maps it, bytes unchanged. The pages collapsed are populated,
 * those never touched zero-filled: the callers offer only what their peers are about to read.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* PAGEMAP_SCAN (Linux 6.7, linux/fs.h), spelled out: the headers of older systems lack it. */
typedef struct scan_region {
    uint64_t start, end, categories;
} scan_region_t;
typedef struct scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
} scan_arg_t;
#define SCAN_IOCTL _IOWR('f', 16, scan_arg_t)
#define SCAN_IS_HUGE ((uint64_t)1 << 6)

enum {
    SLOTS = 32,    /* ranges remembered: a training step's buffers, with room */
    REVISIT = 256, /* most offers let pass between collapses of a range */
    LASTS = 8,     /* offers a collapse must last for the next undoing to be collapsed at once */
};

typedef struct seen {
    uintptr_t lo, hi;       /* the huge pages offered (tutti__cma_offer's span); hi == 0: free */
    uint64_t offers;        /* (64 bits: none of these wraps in a process's life) */
    uint64_t collapsed_at;  /* the offer that last collapsed it; 0: none yet */
    uint64_t next;          /* the first offer that may collapse it (again) */
    uint32_t wait;          /* offers let pass after an undone collapse before the next */
    uint64_t used;          /* the table's clock at the last offer: least recent is replaced */
} seen_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static seen_t table[SLOTS];
static uint64_t clock_now;
static int kernel_has = -1; /* -1: not asked yet; 0: no MADV_COLLAPSE here, or THP `never` */
static bool kernel_scans;   /* PAGEMAP_SCAN answered on this process's pagemap */
static uintptr_t huge = (uintptr_t)2 << 20; /* the huge page's size (read at the first ask) */
static uint64_t collapses;
static int map_fd = -1;     /* /proc/self/pagemap; map_id is its inode */
static struct stat map_id;
static bool map_stale;      /* forked since map_fd was opened: it reads the parent's tables */

/* offer finds [lo, hi) in the table (or takes the least recent slot for it) and counts this
 * offer. */
static seen_t *offer(uintptr_t lo, uintptr_t hi)
{
    seen_t *oldest = &table[0];
    clock_now++;
    for (int i = 0; i < SLOTS; i++) {
        if (table[i].lo == lo && table[i].hi == hi) {
            table[i].used = clock_now;
            table[i].offers++;
            return &table[i];
        }
        if (table[i].used < oldest->used)
            oldest = &table[i];
    }
    *oldest = (seen_t){.lo = lo, .hi = hi, .offers = 1, .next = 2, .used = clock_now};
    return oldest;
}

/* forked: the child's only thread may find the lock held by a thread that its parent had, and
 * the pagemap descriptor it inherited reads the parent's page tables. */
static void forked_child(void)
{
    pthread_mutex_init(&lock, NULL);
    map_stale = true;
}

/* pagemap returns a descriptor of this process's own pagemap (under the lock): the one kept,
 * unless this is a child forked since or the program closed it and the number now names
 * another file; -1 where it cannot be opened. */
static int pagemap(void)
{
    struct stat now;
    if (map_fd >= 0) {
        bool same = fstat(map_fd, &now) == 0 && now.st_dev == map_id.st_dev &&
                    now.st_ino == map_id.st_ino;
        if (same && !map_stale)
            return map_fd;
        if (same)
            close(map_fd); /* the parent's pagemap, inherited: this process's own copy of it */
        map_fd = -1;       /* else the number is another file's now: not ours to close */
    }
    map_stale = false;
    map_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (map_fd >= 0 && fstat(map_fd, &map_id) != 0) {
        close(map_fd);
        map_fd = -1;
    }
    return map_fd;
}

/* not_huge asks PAGEMAP_SCAN whether a page of [lo, hi) is not backed by a huge page (pages
 * never touched included; unmapped gaps, with nothing to collapse, are skipped): 1 yes, 0 no,
 * -1 the kernel cannot say. */
static int not_huge(uintptr_t lo, uintptr_t hi)
{
    int fd = pagemap();
    if (fd < 0)
        return -1;
    scan_region_t r;
    scan_arg_t a = {.size = sizeof a, .start = lo, .end = hi, .vec = (uintptr_t)&r,
                    .vec_len = 1, .max_pages = 1, .category_inverted = SCAN_IS_HUGE,
                    .category_mask = SCAN_IS_HUGE, .return_mask = SCAN_IS_HUGE};
    int k = ioctl(fd, SCAN_IOCTL, &a);
    return k < 0 ? -1 : k > 0;
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

/* ask_kernel sets kernel_has, kernel_scans and huge (under the lock, once). */
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
    /* The scan of one page of this very table: ENOTTY or EINVAL where there is no such call. */
    uintptr_t here = (uintptr_t)table & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
    kernel_scans = kernel_has && not_huge(here, here + (uintptr_t)sysconf(_SC_PAGESIZE)) >= 0;
    if (!kernel_scans && map_fd >= 0) {
        close(map_fd);
        map_fd = -1;
    }
    if (kernel_scans)
        pthread_atfork(NULL, NULL, forked_child);
}

/* collapse_now says whether offer e->offers of range e collapses it (under the lock), and
 * keeps the account of collapses that did not last. [ilo, ihi) are the huge pages wholly inside
 * the buffer, which are scanned: an end page only half inside may cross into a gap or a mapping
 * that cannot be collapsed, and would look undone for ever. */
static bool collapse_now(seen_t *e, uintptr_t ilo, uintptr_t ihi)
{
    uint64_t k = e->offers;
    bool blind = k == 2 || (k > 2 && (k - 2) % REVISIT == 0); /* the second, then every 256th */
    if (!kernel_scans || ihi <= ilo)
        return blind;
    if (k < e->next)
        return false;
    int undone = not_huge(ilo, ihi);
    if (undone == 0) /* huge already, by an earlier collapse or by the system */
        return false;
    if (undone < 0) /* the scan failed this once (no descriptor left?): as if blind */
        return blind;
    if (e->collapsed_at != 0) {
        /* mapped anew, split, or never collapsed: how long did the last collapse last? */
        uint64_t lasted = k - e->collapsed_at - 1;
        if (lasted >= LASTS)
            e->wait = 0; /* it lasted: a new mapping is collapsed at once */
        else
            e->wait = e->wait == 0 ? 1 : e->wait * 2 > REVISIT ? REVISIT : e->wait * 2;
        e->collapsed_at = 0;
        if (e->wait > 0) {
            e->next = k + e->wait;
            return false;
        }
    }
    e->collapsed_at = k;
    return true;
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
    uintptr_t ilo = (b + huge - 1) & ~(huge - 1), ihi = e & ~(huge - 1); /* wholly inside */
    bool go = kernel_has && hi > lo && collapse_now(offer(lo, hi), ilo, ihi);
    pthread_mutex_unlock(&lock);
    /* Outside the lock: a collapse takes milliseconds, and two threads collapsing one range
     * only make the kernel look twice. Each end page half inside on its own: one that crosses
     * into a mapping that cannot be collapsed fails alone (a range that starts in such a
     * mapping fails whole, EINVAL). */
    if (go) {
        /* lo <= ilo always; an end page is one apart from the interior (the high one only if
         * it is not the low one, for a buffer inside a single page) */
        bool inner = ihi > ilo && madvise((void *)ilo, ihi - ilo, MADV_COLLAPSE) == 0;
        bool edge = false;
        if (lo < ilo)
            edge |= madvise((void *)lo, huge, MADV_COLLAPSE) == 0;
        if (hi > ihi && hi - huge >= ilo)
            edge |= madvise((void *)(hi - huge), huge, MADV_COLLAPSE) == 0;
        if (ihi > ilo ? inner : edge) /* counted by the interior, where there is one */
            __atomic_fetch_add(&collapses, 1, __ATOMIC_RELAXED);
    }
    errno = saved;
}

uint64_t tutti__cma_collapses(void)
{
    return __atomic_load_n(&collapses, __ATOMIC_RELAXED);
}
