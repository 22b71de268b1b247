/* shm_impl.h: the shm transport's private types: the shared segment's layout and header, and
 * the per-channel rings and lanes, shared by its data path (shm.c) and its creation
 * (shm_segment.c). */
#ifndef TUTTI_TRANSPORT_SHM_IMPL_H
#define TUTTI_TRANSPORT_SHM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "transport.h"

/*
 * Segment layout (every offset computed by layout_init from the header's parameters, so all
 * ranks agree even if their environments differ):
 *
 *   0            seg_hdr_t (parameters, checked by every rank that maps the segment)
 *   flags_off    nwin * nlocal barrier flags, FLAG_STRIDE bytes each (window s, rank r at
 *                s * nlocal + r): the epoch at byte 0 and the call words at FLAG_CALLS in
 *                the first line, the two call descriptors in the second, 3 words of notes at
 *                FLAG_NOTES in a third line of their own
 *   bells_off    nlocal doorbell lines, one per local rank (BELL_*): the threads of that rank
 *                asleep until a peer moves one of its rings, and the word they sleep on
 *   regions_off  nwin * nlocal window regions, region_stride apart, same order (page aligned:
 *                first touch by the owner places each on the owner's NUMA node)
 *   rings_off    channel 0 (send/recv): one ring per ordered pair (i -> j, i != j), then each
 *                collective channel 1 .. nchan-1 likewise, every ring page aligned
 *
 * nwin is nchan - 1 when the windows are wanted (every rank on this node), else 0. A ring is a
 * line with the producer's counter (head: chunks published), a line with the consumer's counter
 * (tail: chunks consumed), then nslots slots of slot_stride bytes: a 16-byte chunk header and up
 * to slot_size bytes of data. Counters only grow (64 bits never wrap in practice), so a full ring
 * is head - tail == nslots and there is no ABA. The header shares the data's first cache line,
 * so a small message costs the consumer two line transfers: the head counter and the slot.
 */

#define SEG_MAGIC 0x74757474736d3031ull /* "tuttsm01" */
#define SEG_VERSION 4u
#define LINE 64u
#define PAGE 4096u
/* The largest TUTTI_SHM_WINDOW, TUTTI_SHM_SLOT and TUTTI_SHM_SLOTS (a header beyond them is
 * refused: its sums could wrap around). */
#define SHM_WINDOW_MAX (1L << 36)
#define SHM_SLOT_MAX (1L << 26)
#define SHM_SLOTS_MAX 1024
#define HDR_SPACE 256u
#define RING_HDR 128u /* head line + tail line */
#define P2P_SLOTS 2u  /* user send/recv: double buffering is enough and saves memory */
#define MIN_SLICE_REGION (64u * 1024u) /* smallest region of a window when there are slices */
#define MAX_LOCAL 4096
#define SEG_SOCK_LEN 40  /* "tutti-" + 32 hex + NUL: the abstract socket's name */
#define SEG_TOKEN_LEN 16
/* A flag takes three lines: the epoch and the call words, which peers poll; the call
 * descriptors (read only on slow paths); the notes (colocate.c), whose sleeper count every wait
 * end updates with a read-modify-write. Sharing the polled line, that update pulled the line
 * away from a peer polling the epoch: one more line transfer per barrier. */
#define FLAG_CALLS 40u /* byte offset of the 3 call words (tutti__window_t.calls) */
#define FLAG_NOTES (2u * LINE) /* byte offset of a window's notes in its flag (tutti__window_t) */
#define FLAG_STRIDE (3u * LINE)
/* Window 0's flag lines also carry, for the single-copy probe at creation: the owner's pid, the
 * address of a value in its memory that the others try to read, and what its own tries gave. */
#define FLAG_PID 20u
#define FLAG_PROBE 24u
#define FLAG_PROBED 32u
/* A rank's probe result in its FLAG_PROBED word: PROBE_OK, PROBE_OFF (TUTTI_CMA=off), or
 * PROBE_FAILED | errno << 8 | (the local index it failed to read) << 20. */
enum { PROBE_OK = 1, PROBE_OFF = 2, PROBE_FAILED = 3 };

/* A rank's doorbell line: [BELL_SLEEPERS] counts its threads asleep on [BELL_WORD] (they add
 * and remove themselves), which a peer that moved one of the rank's rings bumps and wakes. */
enum { BELL_SLEEPERS = 0, BELL_WORD = 1 };

_Static_assert(TUTTI__CHAN_MAX <= 32, "the busy mask has one bit per channel");

typedef struct seg_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nlocal;
    uint32_t nchan;
    uint32_t nwin;
    uint64_t region_size;
    uint64_t slot_size;
    uint32_t nslots_p2p, nslots_coll;
    uint64_t size;
} seg_hdr_t;

typedef struct ring {
    _Alignas(64) _Atomic uint64_t head; /* written by the producer only */
    char pad0[LINE - sizeof(uint64_t)];
    _Alignas(64) _Atomic uint64_t tail; /* written by the consumer only */
    char pad1[LINE - sizeof(uint64_t)];
} ring_t;

typedef struct slot_hdr {
    uint64_t total; /* the whole message's length */
    uint32_t tag;
    uint32_t chunk; /* this chunk's length */
} slot_hdr_t;

#define SLOT_DATA sizeof(slot_hdr_t)

_Static_assert(sizeof(ring_t) == RING_HDR, "ring header is two cache lines");
_Static_assert(sizeof(seg_hdr_t) <= HDR_SPACE, "segment header fits its space");

typedef struct layout {
    uint32_t nlocal, nchan, nwin;
    uint64_t region_size, region_stride;
    uint64_t slot_size, slot_stride;
    uint32_t nslots_p2p, nslots_coll;
    uint64_t stride_p2p, stride_coll; /* ring strides */
    uint64_t flags_off, bells_off, regions_off, rings_off;
    uint64_t block_p2p, block_coll;   /* bytes of one channel's rings */
    uint64_t size;
} layout_t;

/* tutti__shm_layout computes every offset of a segment of these sizes; false if they overflow. */
bool tutti__shm_layout(layout_t *L, uint32_t nlocal, uint32_t nchan, uint32_t nwin,
                       uint64_t region_size, uint64_t slot_size, uint32_t nslots_coll,
                       uint32_t nslots_p2p);

/* tutti__shm_hdr_check checks the header at base of a segment of file_size bytes that local
 * rank leader made (any local rank can write it: it reads one copy) against what this rank
 * expects, and fills L from it: TUTTI_OK, or an error naming what is wrong. */
tutti_status_t tutti__shm_hdr_check(const void *base, uint64_t file_size, uint32_t nlocal,
                                    uint32_t nchan, uint32_t nwin, int leader, layout_t *L);

/* What the node's leader publishes through the bootstrap: where to ask for the segment (a unix
 * socket of its own, its pid, and the token to show), or why there is none, so that the other
 * local ranks fail at once instead of waiting for the deadline. */
typedef struct seg_pub {
    int32_t status;
    int32_t pid;
    char sock[SEG_SOCK_LEN];
    uint8_t token[SEG_TOKEN_LEN];
    char msg[212];
} seg_pub_t;

/* One channel with one peer, both directions; every field is process-local and guarded by the
 * channel's lane lock. */
typedef struct chan {
    ring_t *tx, *rx;          /* me -> peer, peer -> me */
    char *tx_slots, *rx_slots;
    uint32_t nslots;
    uint32_t tx_idx, rx_idx;  /* slot index of tx_head / rx_tail, kept to avoid a division */
    uint64_t tx_head, tx_tail; /* chunks I published; consumer's count as last seen */
    uint64_t rx_tail, rx_head; /* chunks I consumed; producer's count as last seen */
    uint64_t discard;          /* bytes of a rejected message still to drop */
    bool discarding;
    bool tx_broken;            /* a send was withdrawn half written: no more sends here */
    int pending;               /* queued requests, plus one while discarding */
    int active_at;             /* index in the lane's active list, -1 when idle */
    int rank;                  /* the peer's global rank, for messages */
    tutti__req_t *sq, *sq_last, *rq, *rq_last;
} chan_t;

/*
 * A lane is one channel with every peer. Each lane has its own lock and its own list of peers
 * with pending work, so that threads serving different slices copy at the same time instead of
 * queueing behind one lock; lanes and their chan_t arrays are allocated apart, so no cache line
 * is shared between lanes.
 */
typedef struct lane {
    _Alignas(64) pthread_mutex_t lock;
    int nactive;  /* peers with pending work on this channel */
    int *active;  /* their local indexes */
    chan_t *peer; /* [nlocal]; the entry of this rank itself is unused */
} lane_t;

typedef struct shm_tp {
    tutti__transport_t base; /* first: the vtable's functions cast back */
    /* Bit c is set while lane c has pending work (changed under lane c's lock): progress reads
     * it without any lock to visit only busy lanes, and to return at once when all are idle. */
    _Atomic uint32_t busy;
    int nchan;
    lane_t *lanes;
    int nlocal, my_local;
    int *ranks; /* global rank of each local index, increasing */
    char *base_addr;
    size_t map_size;
    uint64_t slot_size, slot_stride;
    int nwin;
    tutti__window_t **wins; /* [nwin] */
    volatile uint32_t *bells; /* the doorbell lines, LINE bytes apart (BELL_*) */
    uint64_t probe;         /* the value other local ranks read to probe single copy */
    int32_t *pids;          /* [nlocal]: each local rank's process (the windows point here) */
    bool cma;               /* the probe worked for every pair of local ranks */
    char cma_off[512];      /* when !cma: why (the windows point here) */
    bool cma_refused;       /* ... the system's refusal, not TUTTI_CMA=off */
    bool cma_thp;           /* TUTTI_CMA_THP is auto (the windows copy it) */
    int err_claimed;        /* base.err is written once, by the thread that claims it (shm.c) */
    int err_ready;          /* ... and read once this is set */
} shm_tp_t;

/* ---- handing the segment out (shm_pass.c) ---- */

/* tutti__shm_pass_listen opens the leader's unix socket under a random abstract name and fills
 * pub's sock, token and pid; *lfd is the listening socket. */
tutti_status_t tutti__shm_pass_listen(seg_pub_t *pub, int *lfd);

/* tutti__shm_pass_serve hands memfd to every other local rank that asks on lfd with pub's token
 * and runs as this user, until all nlocal - 1 have it, bs's deadline passes (an error naming
 * the ranks still missing) or bs is cancelled. Anyone else gets nothing. */
tutti_status_t tutti__shm_pass_serve(int lfd, int memfd, const seg_pub_t *pub,
                                     const int *local_ranks, int nlocal, tutti__bootstrap_t *bs);

/* tutti__shm_pass_fetch asks the leader (rank leader, pub as it published it) for the segment
 * as local rank my_local; *memfd receives it. The leader must be pub->pid of this user. */
tutti_status_t tutti__shm_pass_fetch(const seg_pub_t *pub, int my_local, int leader,
                                     double deadline, int *memfd);

/* The shm transport's operations (shm.c). */
extern const tutti__transport_ops_t tutti__shm_ops;

#endif /* TUTTI_TRANSPORT_SHM_IMPL_H */
