/* shm_segment.c: making the shm transport: the leader of a node creates the shared segment (a
 * memfd, which has no name anywhere: shm_pass.c hands it to the others), the others check and
 * map it, and each lays out its rings and windows. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../bootstrap/wire.h"
#include "shm_impl.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool tutti__shm_layout(layout_t *L, uint32_t nlocal, uint32_t nchan, uint32_t nwin,
                       uint64_t region_size, uint64_t slot_size, uint32_t nslots_coll,
                       uint32_t nslots_p2p)
{
    memset(L, 0, sizeof *L);
    /* The sizes may come from a header another rank wrote: bounded first, so that no sum or
     * rounding below can wrap around and make a small segment look like a large one. */
    if (region_size > SHM_WINDOW_MAX || slot_size > SHM_SLOT_MAX || nslots_coll > SHM_SLOTS_MAX ||
        nslots_p2p > SHM_SLOTS_MAX || nlocal == 0 || nchan == 0)
        return false;
    L->nlocal = nlocal;
    L->nchan = nchan;
    L->nwin = nwin;
    L->region_size = region_size;
    L->region_stride = align_up(region_size, PAGE);
    L->slot_size = slot_size;
    L->slot_stride = align_up(SLOT_DATA + slot_size, LINE);
    L->nslots_coll = nslots_coll;
    L->nslots_p2p = nslots_p2p;
    L->stride_p2p = align_up(RING_HDR + (uint64_t)nslots_p2p * L->slot_stride, PAGE);
    L->stride_coll = align_up(RING_HDR + (uint64_t)nslots_coll * L->slot_stride, PAGE);
    uint64_t nregions = (uint64_t)nwin * nlocal, npairs = (uint64_t)nlocal * (nlocal - 1), part;
    L->flags_off = HDR_SPACE;
    L->bells_off = L->flags_off + nregions * FLAG_STRIDE;
    uint64_t off = align_up(L->bells_off + (uint64_t)nlocal * LINE, PAGE);
    L->regions_off = off;
    if (__builtin_mul_overflow(nregions, L->region_stride, &part) ||
        __builtin_add_overflow(off, part, &off))
        return false;
    L->rings_off = off;
    if (__builtin_mul_overflow(npairs, L->stride_p2p, &L->block_p2p) ||
        __builtin_mul_overflow(npairs, L->stride_coll, &L->block_coll) ||
        __builtin_add_overflow(off, L->block_p2p, &off) ||
        __builtin_mul_overflow((uint64_t)(nchan - 1), L->block_coll, &part) ||
        __builtin_add_overflow(off, part, &off))
        return false;
    L->size = off;
    return off <= (uint64_t)SIZE_MAX / 2 && off <= (uint64_t)INT64_MAX;
}

static ring_t *ring_at(char *base, const layout_t *L, int c, uint32_t from, uint32_t to)
{
    uint64_t idx = (uint64_t)from * (L->nlocal - 1) + (to < from ? to : to - 1);
    uint64_t off = c == TUTTI__CHAN_P2P
                       ? L->rings_off + idx * L->stride_p2p
                       : L->rings_off + L->block_p2p + (uint64_t)(c - 1) * L->block_coll +
                             idx * L->stride_coll;
    return (ring_t *)(base + off);
}

/* ---- creating and mapping the segment ---------------------------------------------------- */

static tutti_status_t sys_error(const char *what, const char *name)
{
    int e = errno;
    return tutti__set_error(TUTTI_ERR_SYSTEM,
                            "shm: %s %s failed: %s%s", what, name, strerror(e),
                            e == ENOSPC || e == ENOMEM
                                ? " (out of memory? lower TUTTI_SHM_WINDOW, "
                                  "TUTTI_SHM_SLOTS or TUTTI_SHM_SLOT)"
                            : e == EMFILE || e == ENFILE ? " (too many open files)"
                                                         : "");
}

/* read_knobs sizes the segment from the environment (only the leader reads it; the others take
 * the header). nwin is 0 (no windows) or nchan - 1. */
static tutti_status_t read_knobs(uint32_t nlocal, uint32_t nchan, uint32_t nwin, layout_t *L)
{
    long window = 0, slot = 0, slots = 0;
    TUTTI__CHECK(tutti__env_bytes("TUTTI_SHM_WINDOW", 64, SHM_WINDOW_MAX, &window));
    TUTTI__CHECK(tutti__env_bytes("TUTTI_SHM_SLOT", 64, SHM_SLOT_MAX, &slot));
    TUTTI__CHECK(tutti__env_long("TUTTI_SHM_SLOTS", 2, SHM_SLOTS_MAX, &slots));
    uint32_t p2p = (uint32_t)slots < P2P_SLOTS ? (uint32_t)slots : P2P_SLOTS;
    /* One slice keeps the whole window; several share it, but each keeps enough room that a
     * direct algorithm does not degenerate into tiny rounds. */
    uint32_t nslices = nchan - 1;
    uint64_t region = align_up((uint64_t)window, LINE);
    if (nslices > 1) {
        region = (uint64_t)window / nslices / PAGE * PAGE;
        if (region < MIN_SLICE_REGION)
            region = MIN_SLICE_REGION;
    }
    if (!tutti__shm_layout(L, nlocal, nchan, nwin, region, (uint64_t)slot, (uint32_t)slots, p2p))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "shm: a segment for %u local ranks and %u channels with "
                                "TUTTI_SHM_WINDOW=%ld, TUTTI_SHM_SLOT=%ld, TUTTI_SHM_SLOTS=%ld is "
                                "too large; lower them",
                                nlocal, nchan, window, slot, slots);
    return TUTTI_OK;
}

static void write_header(char *base, const layout_t *L)
{
    seg_hdr_t *h = (seg_hdr_t *)base;
    h->magic = SEG_MAGIC;
    h->version = SEG_VERSION;
    h->nlocal = L->nlocal;
    h->nchan = L->nchan;
    h->nwin = L->nwin;
    h->region_size = L->region_size;
    h->slot_size = L->slot_size;
    h->nslots_p2p = L->nslots_p2p;
    h->nslots_coll = L->nslots_coll;
    h->size = L->size;
}

/* The seals that make the segment's size final: nobody holding the memfd can shrink it under a
 * mapping (a touch past the end would be SIGBUS) or grow it. */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* create_segment: the leader's side. On success *fd is the sealed memfd and *base its mapping;
 * on failure nothing is left open or mapped. Nothing is ever linked in /dev/shm. */
static tutti_status_t create_segment(const layout_t *L, int *fdp, char **base)
{
    tutti_status_t st;
    *fdp = -1;
    int fd = memfd_create("tutti-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return sys_error("memfd_create of", "the shared segment");
    /* A memfd takes its pages from memory as they are first touched; one larger than the
     * machine's memory could only end in the OOM killer: refuse it up front with advice. */
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0 && L->size > (uint64_t)pages * (uint64_t)psize / 2) {
        st = tutti__set_error(TUTTI_ERR_SYSTEM,
                              "shm: the shared segment for %u local ranks and %u channels (1 + "
                              "%u collective slices) needs %llu MiB, over half of this machine's "
                              "%llu MiB of memory; use fewer slices (workers), or lower "
                              "TUTTI_SHM_WINDOW, TUTTI_SHM_SLOTS or TUTTI_SHM_SLOT",
                              L->nlocal, L->nchan, L->nchan - 1,
                              (unsigned long long)(L->size >> 20),
                              (unsigned long long)((uint64_t)pages * (uint64_t)psize >> 20));
        goto fail;
    }
    if (ftruncate(fd, (off_t)L->size) != 0) {
        st = sys_error("ftruncate of", "the shared segment");
        goto fail;
    }
    if (fcntl(fd, F_ADD_SEALS, SEALS) != 0) {
        st = sys_error("sealing", "the shared segment");
        goto fail;
    }
    /* No MAP_POPULATE: the segment can be large and mostly unused (a ring algorithm uses two
     * of the n*(n-1) rings of one channel); pages are placed where they are first touched. */
    *base = mmap(NULL, L->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*base == MAP_FAILED) {
        *base = NULL;
        st = sys_error("mmap of", "the shared segment");
        goto fail;
    }
    write_header(*base, L);
    *fdp = fd;
    return TUTTI_OK;
fail:
    close(fd);
    return st;
}

tutti_status_t tutti__shm_hdr_check(const void *base, uint64_t file_size, uint32_t nlocal,
                                    uint32_t nchan, uint32_t nwin, int leader, layout_t *L)
{
    /* Every local rank can write the header: check one copy of it, and use only that. */
    seg_hdr_t hdr;
    memcpy(&hdr, base, sizeof hdr);
    __asm__ volatile("" ::: "memory");
    const seg_hdr_t *h = &hdr;
    tutti_status_t st = TUTTI_OK;
    if (h->magic != SEG_MAGIC || h->version != SEG_VERSION || h->nlocal != nlocal ||
        h->size != file_size) {
        st = tutti__set_error(TUTTI_ERR_INTERNAL,
                              "shm: the segment rank %d handed over does not hold a tutti header "
                              "for %u ranks (magic %llx, version %u, %u ranks): mixed tutti "
                              "versions on one node?",
                              leader, nlocal, (unsigned long long)h->magic, h->version,
                              h->nlocal);
    } else if (h->nchan != nchan || h->nwin != nwin) {
        st = tutti__set_error(TUTTI_ERR_INTERNAL,
                              "shm: rank %d made the shared segment for %u channels and %u "
                              "windows but this rank expects %u and %u: the ranks of this node "
                              "disagree on the number of collective slices (worker settings)",
                              leader, h->nchan, h->nwin, nchan, nwin);
    } else if (h->slot_size == 0 || h->region_size == 0 || h->nslots_coll == 0 ||
               h->nslots_p2p == 0 ||
               !tutti__shm_layout(L, nlocal, nchan, nwin, h->region_size, h->slot_size,
                                  h->nslots_coll, h->nslots_p2p) ||
               L->size != h->size) {
        st = tutti__set_error(TUTTI_ERR_INTERNAL,
                              "shm: the segment rank %d handed over has an inconsistent header "
                              "(%llu bytes, slots of %llu bytes): mixed tutti versions on one "
                              "node, or the segment was overwritten",
                              leader, (unsigned long long)h->size,
                              (unsigned long long)h->slot_size);
    }
    return st;
}

/* map_segment: a non-leader's side, on the memfd it was handed (closed here either way). The
 * descriptor must be this user's and sealed against resizing; the layout comes from the
 * header, which must be for as many ranks, channels and windows as this rank expects. */
static tutti_status_t map_segment(int fd, uint32_t nlocal, uint32_t nchan, uint32_t nwin,
                                  int leader, layout_t *L, char **base)
{
    tutti_status_t st;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = sys_error("fstat of", "the shared segment");
        close(fd);
        return st;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        close(fd);
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "shm: the segment rank %d handed over is not a sealed memfd of "
                                "this user (uid %u, mode %o, seals %#x): refusing to map it",
                                leader, (unsigned)sb.st_uid, (unsigned)sb.st_mode,
                                (unsigned)seals);
    }
    if ((uint64_t)sb.st_size < HDR_SPACE) {
        close(fd);
        return tutti__set_error(TUTTI_ERR_INTERNAL,
                                "shm: the segment rank %d handed over has only %lld bytes",
                                leader, (long long)sb.st_size);
    }
    *base = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*base == MAP_FAILED) {
        *base = NULL;
        st = sys_error("mmap of", "the shared segment");
        close(fd);
        return st;
    }
    close(fd);
    st = tutti__shm_hdr_check(*base, (uint64_t)sb.st_size, nlocal, nchan, nwin, leader, L);
    if (st == TUTTI_OK)
        return TUTTI_OK;
    munmap(*base, (size_t)sb.st_size);
    *base = NULL;
    return st;
}

/* setup fills t's lanes and the windows once the segment is mapped. */
static tutti_status_t setup(shm_tp_t *t, const layout_t *L)
{
    char *base = t->base_addr;
    int n = t->nlocal, me = t->my_local;
    t->slot_size = L->slot_size;
    t->slot_stride = L->slot_stride;
    void *mem = NULL;
    if (posix_memalign(&mem, LINE, (size_t)t->nchan * sizeof(lane_t)) != 0)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory for %d channels",
                                t->nchan);
    memset(mem, 0, (size_t)t->nchan * sizeof(lane_t));
    t->lanes = mem;
    for (int c = 0; c < t->nchan; c++)
        pthread_mutex_init(&t->lanes[c].lock, NULL);
    for (int c = 0; c < t->nchan; c++) {
        lane_t *ln = &t->lanes[c];
        ln->active = calloc((size_t)n, sizeof *ln->active);
        ln->peer = calloc((size_t)n, sizeof *ln->peer);
        if (ln->active == NULL || ln->peer == NULL)
            return tutti__set_error(TUTTI_ERR_NO_MEMORY,
                                    "shm: out of memory for %d peers and %d channels", n,
                                    t->nchan);
        for (int j = 0; j < n; j++) {
            chan_t *ch = &ln->peer[j];
            ch->rank = t->ranks[j];
            ch->active_at = -1;
            if (j == me)
                continue;
            ch->tx = ring_at(base, L, c, (uint32_t)me, (uint32_t)j);
            ch->rx = ring_at(base, L, c, (uint32_t)j, (uint32_t)me);
            ch->tx_slots = (char *)ch->tx + RING_HDR;
            ch->rx_slots = (char *)ch->rx + RING_HDR;
            ch->nslots = c == TUTTI__CHAN_P2P ? L->nslots_p2p : L->nslots_coll;
        }
    }
    t->bells = (volatile uint32_t *)(void *)(base + L->bells_off);
    if (L->nwin == 0)
        return TUTTI_OK;
    t->wins = calloc(L->nwin, sizeof *t->wins);
    if (t->wins == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory for the windows");
    t->nwin = (int)L->nwin;
    size_t bytes = sizeof(tutti__window_t) + (size_t)n * (sizeof(char *) + 4 * sizeof(void *));
    for (uint32_t s = 0; s < L->nwin; s++) {
        tutti__window_t *w = calloc(1, bytes);
        if (w == NULL)
            return tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory for the windows");
        t->wins[s] = w;
        w->nranks = n;
        w->region_size = L->region_size;
        w->regions = (char **)(w + 1);
        w->flags = (volatile uint64_t **)(w->regions + n);
        w->notes = (volatile uint32_t **)(w->flags + n);
        w->calls = (volatile uint64_t **)(w->notes + n);
        w->descs = (volatile uint64_t **)(w->calls + n);
        for (int r = 0; r < n; r++) {
            uint64_t i = (uint64_t)s * (uint64_t)n + (uint64_t)r;
            char *line = base + L->flags_off + i * FLAG_STRIDE;
            w->regions[r] = base + L->regions_off + i * L->region_stride;
            w->flags[r] = (volatile uint64_t *)line;
            w->notes[r] = (volatile uint32_t *)(line + FLAG_NOTES);
            w->calls[r] = (volatile uint64_t *)(line + FLAG_CALLS);
            w->descs[r] = (volatile uint64_t *)(line + LINE);
        }
        w->me = t->my_local;
        w->cma = t->cma;
        w->pids = t->pids;
        w->cma_off = t->cma || t->cma_off[0] == '\0' ? NULL : t->cma_off; /* "": not probed */
        w->cma_refused = t->cma_refused;
        w->cma_thp = t->cma && t->cma_thp;
    }
    return TUTTI_OK;
}

static volatile char *flag_line(char *base, const layout_t *L, int local)
{
    return base + L->flags_off + (uint64_t)local * FLAG_STRIDE; /* window 0's flag of local rank */
}

/* probe_publish writes, before the mapping barrier, what the others need to probe this rank:
 * its pid and the address of a value only it knows. */
static void probe_publish(shm_tp_t *t, const layout_t *L)
{
    volatile char *line = flag_line(t->base_addr, L, t->my_local);
    uint64_t addr = (uint64_t)(uintptr_t)&t->probe;
    t->probe = SEG_MAGIC ^ ((uint64_t)getpid() << 16) ^ addr;
    __atomic_store_n((int32_t *)(line + FLAG_PID), (int32_t)getpid(), __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(line + FLAG_PROBE), addr, __ATOMIC_RELAXED);
}

/*
 * probe_cma (after the mapping barrier, when every rank has published): this rank reads every
 * other's value with process_vm_readv and publishes whether all worked; after one more node
 * barrier, single copy is on only if it worked for every rank, so that every rank makes the
 * same choice of algorithm. TUTTI_CMA=off publishes a failure without trying.
 */
static tutti_status_t probe_cma(shm_tp_t *t, const layout_t *L, tutti__bootstrap_t *bs,
                                const int *local_ranks, bool off)
{
    int n = t->nlocal;
    t->pids = calloc((size_t)n, sizeof *t->pids);
    if (t->pids == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory");
    int32_t ok = off ? PROBE_OFF : PROBE_OK;
    for (int r = 0; r < n; r++) {
        volatile char *line = flag_line(t->base_addr, L, r);
        t->pids[r] = __atomic_load_n((int32_t *)(line + FLAG_PID), __ATOMIC_RELAXED);
        uint64_t addr = __atomic_load_n((uint64_t *)(line + FLAG_PROBE), __ATOMIC_RELAXED);
        if (r != t->my_local && ok == PROBE_OK) {
            int err = tutti__cma_probe(t->pids[r], addr,
                                       SEG_MAGIC ^ ((uint64_t)t->pids[r] << 16) ^ addr);
            if (err != 0)
                ok = (int32_t)(PROBE_FAILED | ((uint32_t)err & 0xfffu) << 8 | (uint32_t)r << 20);
        }
    }
    __atomic_store_n((int32_t *)(flag_line(t->base_addr, L, t->my_local) + FLAG_PROBED), ok,
                     __ATOMIC_RELAXED);
    char name[64];
    snprintf(name, sizeof name, "shm-cma/%d", local_ranks[0]);
    TUTTI__CHECK(tutti__bs_group_barrier(bs, name, local_ranks, n));
    t->cma = true;
    t->cma_off[0] = '\0';
    t->cma_refused = false;
    for (int r = 0; r < n && t->cma; r++) {
        /* Written by another process: read as a number, never trusted as an index. */
        uint32_t v = (uint32_t)__atomic_load_n(
            (int32_t *)(flag_line(t->base_addr, L, r) + FLAG_PROBED), __ATOMIC_RELAXED);
        if (v == PROBE_OK)
            continue;
        t->cma = false;
        unsigned from = v >> 20, err = (v >> 8) & 0xfffu;
        if ((v & 0xffu) == PROBE_FAILED && from < (unsigned)n && err != 0) {
            char why[384];
            tutti__cma_explain((int)err, why, sizeof why);
            t->cma_refused = true;
            snprintf(t->cma_off, sizeof t->cma_off,
                     "rank %d (pid %d) could not read rank %d's memory (pid %d): %s",
                     local_ranks[r], (int)t->pids[r], local_ranks[from], (int)t->pids[from], why);
        } else
            snprintf(t->cma_off, sizeof t->cma_off, "TUTTI_CMA=off on rank %d", local_ranks[r]);
    }
    TUTTI__LOG(TUTTI__LOG_DEBUG, "shm: rank %d: single copy (process_vm_readv) %s%s",
               local_ranks[t->my_local],
               t->cma ? "works between every pair of local ranks" : "off: ", t->cma_off);
    return TUTTI_OK;
}

tutti_status_t tutti__shm_create(int nchan_, tutti__bootstrap_t *bs, const int *local_ranks,
                                 int nlocal, int my_local, tutti__transport_t **out,
                                 tutti__window_t **wins)
{
    if (out == NULL || local_ranks == NULL || nlocal < 1 || nlocal > MAX_LOCAL || my_local < 0 ||
        my_local >= nlocal || (nlocal > 1 && bs == NULL) || nchan_ < 2 ||
        nchan_ > TUTTI__CHAN_MAX)
        return tutti__set_error(TUTTI_ERR_INTERNAL,
                                "shm: tutti__shm_create called with bad arguments (%d local "
                                "ranks, index %d, at most %d; %d channels, 2 to %d)",
                                nlocal, my_local, MAX_LOCAL, nchan_,
                                TUTTI__CHAN_MAX);
    for (int i = 1; i < nlocal; i++)
        if (local_ranks[i] <= local_ranks[i - 1])
            return tutti__set_error(TUTTI_ERR_INTERNAL,
                                    "shm: local ranks are not increasing (%d after %d)",
                                    local_ranks[i], local_ranks[i - 1]);
    uint32_t nchan = (uint32_t)nchan_, nwin = wins != NULL ? nchan - 1 : 0;
    *out = NULL;
    for (uint32_t s = 0; s < nwin; s++)
        wins[s] = NULL;

    tutti_status_t st = TUTTI_OK;
    shm_tp_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory");
    t->base.ops = &tutti__shm_ops;
    t->nchan = (int)nchan;
    t->nlocal = nlocal;
    t->my_local = my_local;
    t->ranks = malloc((size_t)nlocal * sizeof *t->ranks);
    if (t->ranks == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory");
        goto fail;
    }
    memcpy(t->ranks, local_ranks, (size_t)nlocal * sizeof *t->ranks);

    layout_t L;
    int leader = local_ranks[0];
    if (nlocal == 1) {
        /* Alone on the node: no peer to share with, so private memory holds the windows. */
        TUTTI__CHECK_GOTO(read_knobs(1, nchan, nwin, &L), st, fail);
        void *m = mmap(NULL, L.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            st = sys_error("mmap of", "the single rank's window");
            goto fail;
        }
        t->base_addr = m;
        t->map_size = L.size;
        write_header(t->base_addr, &L);
    } else {
        char key[64], barrier_name[64];
        snprintf(key, sizeof key, "shm/%d", leader);
        snprintf(barrier_name, sizeof barrier_name, "shm-mapped/%d", leader);
        seg_pub_t pub;
        memset(&pub, 0, sizeof pub);
        if (my_local == 0) {
            int memfd = -1, lfd = -1;
            st = read_knobs((uint32_t)nlocal, nchan, nwin, &L);
            if (st == TUTTI_OK)
                st = create_segment(&L, &memfd, &t->base_addr);
            if (st == TUTTI_OK) {
                t->map_size = L.size;
                st = tutti__shm_pass_listen(&pub, &lfd);
            }
            pub.status = st;
            if (st != TUTTI_OK) {
                /* Tell the others why, so they fail now rather than at the deadline. */
                snprintf(pub.msg, sizeof pub.msg, "%s", tutti__tls_error());
                tutti__saved_error_t saved;
                tutti__save_error(&saved);
                tutti__bs_put(bs, key, &pub, sizeof pub);
                tutti__restore_error(&saved, st);
                if (memfd >= 0)
                    close(memfd);
                goto fail;
            }
            st = tutti__bs_put(bs, key, &pub, sizeof pub);
            if (st == TUTTI_OK)
                st = tutti__shm_pass_serve(lfd, memfd, &pub, local_ranks, nlocal, bs);
            /* Every local rank holds the segment now (or never will): the leader's descriptors
             * go, and the memory lives exactly as long as someone maps it. */
            close(lfd);
            close(memfd);
            memset(&pub, 0, sizeof pub);
            if (st != TUTTI_OK)
                goto fail;
        } else {
            st = tutti__bs_get(bs, key, &pub, sizeof pub, leader);
            if (st != TUTTI_OK) {
                tutti__prefix_error(st, "shm: waiting for the shared segment from rank %d "
                                        "(this node's lowest rank)",
                                    leader);
                goto fail;
            }
            pub.sock[SEG_SOCK_LEN - 1] = '\0';
            tutti__wire_printable(pub.msg, (const uint8_t *)pub.msg,
                                  strnlen(pub.msg, sizeof pub.msg - 1));
            if (pub.status != TUTTI_OK) {
                st = tutti__set_error(pub.status < 0 && pub.status >= TUTTI_ERR_INTERNAL
                                          ? (tutti_status_t)pub.status
                                          : TUTTI_ERR_INTERNAL,
                                      "shm: rank %d (this node's lowest rank) could not create "
                                      "the shared segment: %s",
                                      leader, pub.msg);
                goto fail;
            }
            if (strncmp(pub.sock, "tutti-", 6) != 0 || pub.pid <= 0) {
                st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                      "shm: rank %d published a garbled record under %s", leader,
                                      key);
                goto fail;
            }
            int memfd = -1;
            st = tutti__shm_pass_fetch(&pub, my_local, leader, bs->deadline, &memfd);
            memset(&pub, 0, sizeof pub);
            if (st == TUTTI_OK)
                st = map_segment(memfd, (uint32_t)nlocal, nchan, nwin, leader, &L,
                                 &t->base_addr);
            if (st != TUTTI_OK)
                goto fail;
            t->map_size = L.size;
        }
        /* First touch of my own regions, before anyone else can touch them, places their pages
         * on my NUMA node; rings are touched first by their producer when first used. */
        for (uint32_t s = 0; s < L.nwin; s++)
            memset(t->base_addr + L.regions_off +
                       ((uint64_t)s * (uint64_t)nlocal + (uint64_t)my_local) * L.region_stride,
                   0, L.region_stride);
        if (L.nwin > 0)
            probe_publish(t, &L);
        /* No rank touches another's region before its owner has: the barrier keeps that. */
        st = tutti__bs_group_barrier(bs, barrier_name, local_ranks, nlocal);
        if (st != TUTTI_OK) {
            tutti__prefix_error(st, "shm: waiting for the %d ranks of this node to map the shared "
                                    "segment",
                                nlocal);
            goto fail;
        }
        if (L.nwin > 0) {
            const char *cma = tutti__env_get("TUTTI_CMA"), *thp = tutti__env_get("TUTTI_CMA_THP");
            bool cma_ok = strcmp(cma, "auto") == 0 || strcmp(cma, "off") == 0;
            if (!cma_ok || (strcmp(thp, "auto") != 0 && strcmp(thp, "off") != 0)) {
                /* Still meet the others (a failure is published), then refuse. */
                tutti__saved_error_t saved;
                st = !cma_ok ? tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                                "TUTTI_CMA=\"%s\": valid are auto (single copy "
                                                "where the system allows it) and off",
                                                cma)
                             : tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                                "TUTTI_CMA_THP=\"%s\": valid are auto (huge pages "
                                                "for send buffers read by single copy, once "
                                                "reused) and off",
                                                thp);
                tutti__save_error(&saved);
                probe_cma(t, &L, bs, local_ranks, true);
                tutti__restore_error(&saved, st);
                goto fail;
            }
            t->cma_thp = strcmp(thp, "auto") == 0;
            TUTTI__CHECK_GOTO(probe_cma(t, &L, bs, local_ranks, strcmp(cma, "off") == 0), st,
                              fail);
        }
    }
    TUTTI__CHECK_GOTO(setup(t, &L), st, fail);
    TUTTI__LOG(TUTTI__LOG_DEBUG,
               "shm: rank %d mapped %llu MiB for %d local ranks (%u channels, %u windows of %llu "
               "B/rank, %u x %llu B slots)",
               local_ranks[my_local], (unsigned long long)(L.size >> 20), nlocal, L.nchan, L.nwin,
               (unsigned long long)L.region_size, L.nslots_coll, (unsigned long long)L.slot_size);
    *out = &t->base;
    for (uint32_t s = 0; s < nwin; s++)
        wins[s] = t->wins[s];
    return TUTTI_OK;
fail:
    tutti__shm_ops.destroy(&t->base);
    return st;
}
