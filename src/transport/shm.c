/* shm.c: the shared-memory transport's data path for ranks on one node: a lock-free
 * single-producer single-consumer ring per ordered pair of local ranks and channel, moved
 * forward by whichever thread calls progress; the segment that holds the rings and the windows
 * is made in shm_segment.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "shm_impl.h"

/* The channel this thread posted on last: progress serves it first, so each slice's thread
 * mostly copies its own slice's data. Only a hint; any thread may progress any lane. */
static _Thread_local int last_chan;

/* ---- the data path ---------------------------------------------------------------------- */

static void complete(shm_tp_t *t, tutti__req_t *r, tutti_status_t st)
{
    const int chan = r->chan;
    r->status = st;
    /* Release: the data and status are visible to whoever sees done (maybe another thread). */
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    tutti__tp_finished(&t->base, chan);
}

/* activate and deactivate keep a lane's active list and the busy bit; under the lane's lock. */
static void activate(shm_tp_t *t, int c, chan_t *ch, int local)
{
    lane_t *ln = &t->lanes[c];
    ln->active[ln->nactive] = local;
    ch->active_at = ln->nactive;
    if (ln->nactive++ == 0)
        atomic_fetch_or_explicit(&t->busy, 1u << c, memory_order_relaxed);
}

static void deactivate(shm_tp_t *t, int c, int at)
{
    lane_t *ln = &t->lanes[c];
    int n = --ln->nactive;
    ln->peer[ln->active[at]].active_at = -1;
    if (at != n) {
        ln->active[at] = ln->active[n];
        ln->peer[ln->active[at]].active_at = at;
    }
    if (n == 0)
        atomic_fetch_and_explicit(&t->busy, ~(1u << c), memory_order_relaxed);
}

/* push copies r's next chunks into free slots; true when the whole message is published. A
 * zero-length message still takes one (empty) chunk so that matching stays in order. */
static bool push(shm_tp_t *t, chan_t *ch, tutti__req_t *r)
{
    do {
        if (ch->tx_head - ch->tx_tail == ch->nslots) {
            ch->tx_tail = atomic_load_explicit(&ch->tx->tail, memory_order_acquire);
            if (ch->tx_head - ch->tx_tail == ch->nslots)
                return false;
        }
        char *slot = ch->tx_slots + (uint64_t)ch->tx_idx * t->slot_stride;
        size_t n = r->len - r->off;
        if (n > t->slot_size)
            n = t->slot_size;
        slot_hdr_t *h = (slot_hdr_t *)slot;
        h->total = r->len;
        h->tag = r->tag;
        h->chunk = (uint32_t)n;
        if (n)
            memcpy(slot + SLOT_DATA, r->buf + r->off, n);
        tutti__note_moved();
        r->off += n;
        ch->tx_head++;
        if (++ch->tx_idx == ch->nslots)
            ch->tx_idx = 0;
        /* Publish each chunk at once: the receiver drains while we fill the next slot. */
        atomic_store_explicit(&ch->tx->head, ch->tx_head, memory_order_release);
    } while (r->off < r->len);
    return true;
}

/* next_chunk returns the oldest unconsumed slot of ch, or NULL if the ring is empty. */
static char *next_chunk(shm_tp_t *t, chan_t *ch)
{
    if (ch->rx_head == ch->rx_tail) {
        ch->rx_head = atomic_load_explicit(&ch->rx->head, memory_order_acquire);
        if (ch->rx_head == ch->rx_tail)
            return NULL;
    }
    return ch->rx_slots + (uint64_t)ch->rx_idx * t->slot_stride;
}

static void consume(chan_t *ch)
{
    ch->rx_tail++;
    if (++ch->rx_idx == ch->nslots)
        ch->rx_idx = 0;
    atomic_store_explicit(&ch->rx->tail, ch->rx_tail, memory_order_release);
}

/* drain drops the chunks of a rejected message; true when none is left. */
static bool drain(shm_tp_t *t, chan_t *ch)
{
    char *slot;
    while (ch->discard > 0 && (slot = next_chunk(t, ch)) != NULL) {
        uint64_t n = ((slot_hdr_t *)slot)->chunk;
        ch->discard -= (n > 0 && n <= ch->discard) ? n : ch->discard;
        consume(ch);
    }
    if (ch->discard > 0)
        return false;
    ch->discarding = false;
    ch->pending--;
    return true;
}

/*
 * set_err records the transport's error text, once: the first error wins and later ones keep
 * it. Two slices' threads can fail on their own lanes at once (a mismatched call fails every
 * ring), and the text is read by other threads after their request failed; written once and
 * published with a release, it is never read half written. A thread that loses the claim waits
 * (briefly: the winner is formatting) until the text is there, so that what it reads next is
 * complete.
 */
__attribute__((format(printf, 3, 4))) static tutti_status_t set_err(shm_tp_t *t, tutti_status_t st,
                                                                    const char *fmt, ...)
{
    if (__atomic_exchange_n(&t->err_claimed, 1, __ATOMIC_ACQ_REL) == 0) {
        char buf[TUTTI__ERRLEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        tutti__tp_errf(&t->base, st, "%s", buf);
        __atomic_store_n(&t->err_ready, 1, __ATOMIC_RELEASE);
    } else {
        while (!__atomic_load_n(&t->err_ready, __ATOMIC_ACQUIRE))
            tutti__cpu_relax();
    }
    return st;
}

/* pull copies available chunks into r; true when r is complete (received or failed). */
static bool pull(shm_tp_t *t, chan_t *ch, tutti__req_t *r, tutti_status_t *st)
{
    char *slot;
    while ((slot = next_chunk(t, ch)) != NULL) {
        const slot_hdr_t *h = (const slot_hdr_t *)slot;
        uint64_t total = h->total;
        uint32_t tag = h->tag;
        size_t n = h->chunk;
        if (r->off == 0 && (total != r->len || tag != r->tag)) {
            /* The rest of that message is dropped so that the next receive meets the next
             * send, and the sender completes normally. */
            if (total != r->len)
                set_err(t, TUTTI_ERR_MISMATCH,
                        "shm: the message from rank %d (channel %d) has %llu bytes where the "
                        "receive expects %zu, fingerprint %08x where it expects %08x",
                        ch->rank, r->chan, (unsigned long long)total, r->len, tag, r->tag);
            else /* a slice of equal length from calls that differ elsewhere */
                set_err(t, TUTTI_ERR_MISMATCH,
                        "shm: the message from rank %d (channel %d) has fingerprint %08x where "
                        "the receive expects %08x (both %zu bytes)",
                        ch->rank, r->chan, tag, r->tag, r->len);
            consume(ch);
            ch->discard = (n < total) ? total - n : 0;
            if (ch->discard > 0) {
                ch->discarding = true;
                ch->pending++;
            }
            *st = TUTTI_ERR_MISMATCH;
            return true;
        }
        if (n > t->slot_size || n > r->len - r->off || (n == 0 && r->len != 0)) {
            set_err(t, TUTTI_ERR_INTERNAL,
                             "shm: corrupt chunk from rank %d (%zu bytes at offset %zu of %zu, "
                             "slot %llu): the shared segment was overwritten",
                             ch->rank, n, r->off, r->len, (unsigned long long)t->slot_size);
            consume(ch);
            *st = TUTTI_ERR_INTERNAL;
            return true;
        }
        if (n)
            memcpy(r->buf + r->off, slot + SLOT_DATA, n);
        tutti__note_moved();
        r->off += n;
        consume(ch);
        if (r->off == r->len) {
            *st = TUTTI_OK;
            return true;
        }
    }
    return false;
}

/* progress_chan moves ch's queued requests forward; true when it published or consumed a chunk
 * (the peer may sleep waiting for either). */
static bool progress_chan(shm_tp_t *t, chan_t *ch)
{
    uint64_t head = ch->tx_head, tail = ch->rx_tail;
    while (ch->sq != NULL && push(t, ch, ch->sq)) {
        tutti__req_t *r = ch->sq;
        ch->sq = r->next; /* unlink first: r may be reused once done is set */
        ch->pending--;
        complete(t, r, TUTTI_OK);
    }
    for (;;) {
        if (ch->discarding && !drain(t, ch))
            break;
        tutti_status_t st;
        if (ch->rq == NULL || !pull(t, ch, ch->rq, &st))
            break;
        tutti__req_t *r = ch->rq;
        ch->rq = r->next;
        ch->pending--;
        complete(t, r, st);
    }
    return ch->tx_head != head || ch->rx_tail != tail;
}

/* ring wakes local rank l's threads asleep on its doorbell, if any, after this rank moved one of
 * its rings. The look at the sleepers is a read-modify-write, as a sleeper's count of itself
 * is: in the two's order on the count, either this one comes later and sees the sleeper, or
 * the sleeper's comes later and then sees the ring's counter this rank stored before (a fence
 * would do, but ThreadSanitizer does not model fences). It costs about what the fence would:
 * a locked instruction, on a line that only l's sleepers and the rings of l's peers touch. */
static void ring(shm_tp_t *t, int l)
{
    volatile uint32_t *b = t->bells + (size_t)l * (LINE / sizeof(uint32_t));
    if (__atomic_fetch_add(&b[BELL_SLEEPERS], 0, __ATOMIC_SEQ_CST) == 0)
        return;
    __atomic_add_fetch(&b[BELL_WORD], 1, __ATOMIC_SEQ_CST);
    tutti__futex_wake(&b[BELL_WORD]);
}

/*
 * shm_progress visits the busy lanes, starting with the one this thread posted on last. A lane
 * another thread holds is skipped, never waited for: that thread is progressing it, and it
 * completes every request of the lane it can, whoever posted it. A waiter whose request it
 * missed (the data came just after it passed) gets the lock on its own next call, so no
 * completion is lost as long as waiters keep calling progress until done.
 */
static tutti_status_t shm_progress(tutti__transport_t *tp)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    uint32_t busy = atomic_load_explicit(&t->busy, memory_order_relaxed);
    if (busy == 0)
        return TUTTI_OK;
    int c = last_chan < t->nchan ? last_chan : 0;
    for (int k = 0; k < t->nchan; k++, c = c + 1 == t->nchan ? 0 : c + 1) {
        if (!(busy & (1u << c)))
            continue;
        lane_t *ln = &t->lanes[c];
        if (pthread_mutex_trylock(&ln->lock) != 0)
            continue;
        /* Backwards, so that deactivate's swap only moves an entry already visited. */
        for (int i = ln->nactive - 1; i >= 0; i--) {
            int l = ln->active[i];
            chan_t *ch = &ln->peer[l];
            bool moved = progress_chan(t, ch);
            if (ch->pending == 0)
                deactivate(t, c, i);
            if (moved && c == TUTTI__CHAN_P2P) /* only point-to-point naps on these bells */
                ring(t, l);
        }
        pthread_mutex_unlock(&ln->lock);
    }
    return TUTTI_OK;
}

void tutti__shm_ring_self(tutti__transport_t *tp)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    ring(t, t->my_local);
}

uint32_t tutti__shm_nap_begin(tutti__transport_t *tp)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    volatile uint32_t *b = t->bells + (size_t)t->my_local * (LINE / sizeof(uint32_t));
    __atomic_add_fetch(&b[BELL_SLEEPERS], 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&b[BELL_WORD], __ATOMIC_SEQ_CST);
}

bool tutti__shm_nap_end(tutti__transport_t *tp, uint32_t bell, double timeout_s)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    volatile uint32_t *b = t->bells + (size_t)t->my_local * (LINE / sizeof(uint32_t));
    if (timeout_s > 0)
        tutti__futex_wait(&b[BELL_WORD], bell, timeout_s);
    __atomic_sub_fetch(&b[BELL_SLEEPERS], 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&b[BELL_WORD], __ATOMIC_ACQUIRE) != bell;
}

/* local_index maps a global rank to its local index (ranks[] increases), -1 if not local. */
static int local_index(const shm_tp_t *t, int rank)
{
    int lo = 0, hi = t->nlocal - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->ranks[mid] == rank)
            return mid;
        if (t->ranks[mid] < rank)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static tutti_status_t shm_post(tutti__transport_t *tp, tutti__req_t *r)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    int l = local_index(t, r->peer);
    if (l < 0 || l == t->my_local || r->chan < 0 || r->chan >= t->nchan ||
        (r->kind != TUTTI__REQ_SEND && r->kind != TUTTI__REQ_RECV) ||
        (r->buf == NULL && r->len > 0)) {
        set_err(t, TUTTI_ERR_INTERNAL,
                         "shm: cannot post a %s of %zu bytes to rank %d on channel %d (of %d): %s",
                         r->kind == TUTTI__REQ_SEND ? "send" : "receive", r->len, r->peer,
                         r->chan, t->nchan,
                         l < 0 ? "that rank is not on this node"
                         : l == t->my_local ? "it is this rank itself"
                         : r->buf == NULL   ? "the buffer is NULL"
                                            : "bad channel or kind");
        tutti__set_error(TUTTI_ERR_INTERNAL, "%s", TUTTI__TP_ERR(tp));
        return TUTTI_ERR_INTERNAL;
    }
    r->next = NULL;
    r->off = 0;
    r->status = TUTTI_OK;
    r->done = 0;
    lane_t *ln = &t->lanes[r->chan];
    chan_t *ch = &ln->peer[l];
    last_chan = r->chan;
    pthread_mutex_lock(&ln->lock);
    if (r->kind == TUTTI__REQ_SEND && ch->tx_broken) {
        pthread_mutex_unlock(&ln->lock);
        return set_err(t, TUTTI_ERR_TRANSPORT,
                                "shm: cannot send to rank %d on channel %d: an earlier send there "
                                "was cancelled half written, so the receiver would take what "
                                "follows for the rest of it; destroy the communicator",
                                r->peer, r->chan);
    }
    if (r->kind == TUTTI__REQ_SEND) {
        if (ch->sq == NULL)
            ch->sq = r;
        else
            ch->sq_last->next = r;
        ch->sq_last = r;
    } else {
        if (ch->rq == NULL)
            ch->rq = r;
        else
            ch->rq_last->next = r;
        ch->rq_last = r;
    }
    if (ch->pending++ == 0)
        activate(t, r->chan, ch, l);
    pthread_mutex_unlock(&ln->lock);
    return TUTTI_OK;
}

/* unlink removes r from the queue that starts at *head (ending at *last); false if absent. */
static bool unlink_req(tutti__req_t **head, tutti__req_t **last, tutti__req_t *r)
{
    tutti__req_t *prev = NULL;
    for (tutti__req_t *q = *head; q != NULL; prev = q, q = q->next) {
        if (q != r)
            continue;
        if (prev != NULL)
            prev->next = q->next;
        else
            *head = q->next;
        if (*last == q)
            *last = prev;
        return true;
    }
    return false;
}

/*
 * cancel_locked withdraws r from ch (lane c's lock held). A request nothing of which has moved
 * is only unlinked: the next request of its queue meets the message it would have met. A
 * receive part of whose message has arrived leaves the rest to the discard path, so the
 * stream stays in step. A send part of whose message is in the ring cannot be taken back (the
 * receiver already counts on the rest): the channel's sending side is broken from then on,
 * and the sends queued behind it fail too.
 */
static tutti_status_t cancel_locked(shm_tp_t *t, int c, chan_t *ch, tutti__req_t *r)
{
    if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE))
        return TUTTI_OK; /* completed first (under this lock), its status stands */
    bool send = r->kind == TUTTI__REQ_SEND;
    if (!(send ? unlink_req(&ch->sq, &ch->sq_last, r) : unlink_req(&ch->rq, &ch->rq_last, r)))
        return set_err(t, TUTTI_ERR_INTERNAL,
                                "shm: cancel of a %s with rank %d on channel %d that is neither "
                                "queued nor done",
                                send ? "send" : "receive", ch->rank, c);
    ch->pending--;
    tutti_status_t rc = TUTTI_OK;
    if (!send && r->off > 0) {
        /* Only the oldest receive is ever part-filled, and never while discarding. */
        ch->discard = r->len - r->off;
        ch->discarding = true;
        ch->pending++;
    } else if (send && r->off > 0) {
        ch->tx_broken = true;
        rc = set_err(t, TUTTI_ERR_TRANSPORT,
                              "shm: a send of %zu bytes to rank %d on channel %d was cancelled "
                              "after %zu bytes had gone out; that stream is broken",
                              r->len, ch->rank, c, r->off);
        while (ch->sq != NULL) {
            tutti__req_t *q = ch->sq;
            ch->sq = q->next;
            ch->pending--;
            complete(t, q, TUTTI_ERR_TRANSPORT);
        }
        ch->sq_last = NULL;
    }
    if (ch->pending == 0 && ch->active_at >= 0)
        deactivate(t, c, ch->active_at);
    complete(t, r, TUTTI_ERR_ABORTED);
    return rc;
}

static tutti_status_t shm_cancel(tutti__transport_t *tp, tutti__req_t *r)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    int l = local_index(t, r->peer);
    if (l < 0 || l == t->my_local || r->chan < 0 || r->chan >= t->nchan)
        return set_err(t, TUTTI_ERR_INTERNAL,
                                "shm: cancel of a request to rank %d on channel %d, which this "
                                "transport never took",
                                r->peer, r->chan);
    lane_t *ln = &t->lanes[r->chan];
    pthread_mutex_lock(&ln->lock);
    tutti_status_t rc = cancel_locked(t, r->chan, &ln->peer[l], r);
    pthread_mutex_unlock(&ln->lock);
    return rc;
}

static tutti_status_t shm_cancel_chan(tutti__transport_t *tp, int c)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    if (c < 0 || c >= t->nchan)
        return TUTTI_OK;
    lane_t *ln = &t->lanes[c];
    tutti_status_t rc = TUTTI_OK;
    pthread_mutex_lock(&ln->lock);
    for (int j = 0; j < t->nlocal; j++) {
        chan_t *ch = &ln->peer[j];
        /* Receives first, newest last: each is unlinked from the head of its queue. */
        while (ch->rq != NULL) {
            tutti_status_t st = cancel_locked(t, c, ch, ch->rq);
            rc = rc < 0 ? rc : st;
        }
        while (ch->sq != NULL) {
            tutti_status_t st = cancel_locked(t, c, ch, ch->sq);
            rc = rc < 0 ? rc : st;
        }
    }
    pthread_mutex_unlock(&ln->lock);
    return rc;
}

static void shm_destroy(tutti__transport_t *tp)
{
    shm_tp_t *t = (shm_tp_t *)tp;
    if (t == NULL)
        return;
    if (t->base_addr != NULL)
        munmap(t->base_addr, t->map_size);
    for (int c = 0; t->lanes != NULL && c < t->nchan; c++) {
        pthread_mutex_destroy(&t->lanes[c].lock);
        free(t->lanes[c].active);
        free(t->lanes[c].peer);
    }
    free(t->lanes);
    for (int s = 0; t->wins != NULL && s < t->nwin; s++)
        free(t->wins[s]);
    free(t->wins);
    free(t->pids);
    free(t->ranks);
    free(t);
}

const tutti__transport_ops_t tutti__shm_ops = {
    .name = "shm",
    .post = shm_post,
    .progress = shm_progress,
    .cancel = shm_cancel,
    .cancel_chan = shm_cancel_chan,
    .destroy = shm_destroy,
};
