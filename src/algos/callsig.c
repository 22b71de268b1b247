/* callsig.c: the fingerprint of a collective call (sequence number, collective, count, dtype,
 * op, root, algorithm, slices), how it is published in a shm window and compared there, and
 * the texts that name both sides of a mismatch.
 *
 * Every rank computes its call's fingerprint once, when the call is numbered. Message paths
 * carry its low 32 bits as the tag of every message (the transports compare tags and lengths,
 * and fail a receive that meets a message of another call: TUTTI_ERR_MISMATCH). Window paths
 * publish, at the call's first window operation, a value (the fingerprint mixed with the
 * call's number on the window) in the rank's flag line, next to the barrier epoch, and the
 * call's descriptor on the line after it, both in a slot chosen by the parity of that number.
 * A peer can be at most one window call ahead (every window call waits on every rank), so the
 * slot of the call being checked is never overwritten while it is checked. The first barrier
 * of a call compares every peer's value, from a line the barrier has just read, before any
 * rank reads another's region; flagged lines carry the value as their tag, so a different
 * call's lines are never taken, and a wait whose lines do not come compares on its slow path.
 */
#include <stdio.h>
#include <string.h>

#include "algos.h"

/* sig_info bits */
#define SIG_KIND(i) ((i) & 0xfu)
#define SIG_VAR(i) (((i) >> 4) & 0x3u)   /* 0 plain, 1 v (allgatherv, alltoallv), 2 coalesced */
#define SIG_DTYPE(i) (((i) >> 6) & 0x1fu)
#define SIG_OP(i) (((i) >> 11) & 0xfu)
#define SIG_ALGO(i) (((i) >> 15) & 0x3fu)
#define SIG_NSPLIT(i) (((i) >> 21) & 0x1fu)

static inline uint64_t mix64(uint64_t x)
{
    /* splitmix64's finalizer: every input bit changes about half of the output bits */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* One finalizer over the three words, each first multiplied by its own odd constant: cheap
 * (the 8 B allreduce computes it on every call) and every input bit still reaches the whole
 * result. */
static uint64_t hash_desc(uint64_t seq, uint64_t count, uint64_t info)
{
    return mix64(seq * 0x9e3779b97f4a7c15ull ^ count * 0xc2b2ae3d27d4eb4full ^
                 info * 0x165667b19e3779f9ull);
}

static int algo_index(const tutti__coll_t *c)
{
    const tutti__algo_t *const *a = tutti__algos_for(c->kind);
    for (int i = 0; a != NULL && a[i] != NULL; i++)
        if (a[i] == c->algo)
            return i + 1;
    return 0;
}

/* layout_hash folds n counts (and displacements, where given) into one word. */
static uint64_t layout_hash(const size_t *counts, const size_t *displs, int n)
{
    uint64_t h = 0x6c61796f7574ull;
    for (int i = 0; i < n; i++)
        h = mix64(h ^ counts[i]) + (displs != NULL ? displs[i] : 0);
    return h;
}

uint32_t tutti__sig_layout(const size_t *counts, int n)
{
    return (uint32_t)mix64(layout_hash(counts, NULL, n) ^ (uint64_t)(unsigned)n);
}

void tutti__sig_make(tutti__coll_t *c, int nsplit)
{
    uint32_t var = 0;
    uint64_t count = c->count;
    if (c->counts != NULL && c->scounts != NULL) {
        var = 1;
        count = 0; /* alltoallv: each pair's lengths are checked by its messages */
    } else if (c->counts != NULL) {
        var = 1;   /* allgatherv: every rank passes the same layout */
        count = layout_hash(c->counts, c->displs, c->size);
    } else if (c->kind == TUTTI_COLL_ALLREDUCE && c->recvbuf == c->sendbuf && c->name != NULL &&
               strcmp(c->name, "allreduce_coalesced") == 0) {
        var = 2; /* (coalesced calls are in place: most allreduces skip the compare) */
    }
    c->sig_count = count;
    c->sig_info = (uint32_t)c->kind | var << 4 | ((uint32_t)c->dtype & 0x1fu) << 6 |
                  ((uint32_t)c->op & 0xfu) << 11 | ((uint32_t)algo_index(c) & 0x3fu) << 15 |
                  ((uint32_t)nsplit & 0x1fu) << 21;
    c->fp = hash_desc(c->seq, count, tutti__sig_desc(c).info);
}

tutti__calldesc_t tutti__sig_desc(const tutti__coll_t *c)
{
    uint32_t upper = SIG_VAR(c->sig_info) == 2 ? c->layout : (uint32_t)c->root;
    return (tutti__calldesc_t){c->seq, c->sig_count, c->sig_info | (uint64_t)upper << 32,
                               c->wcall};
}

static const char *const var_names[4][TUTTI_COLL_COUNT] = {
    [1] = {[TUTTI_COLL_ALLGATHER] = "allgatherv", [TUTTI_COLL_ALLTOALL] = "alltoallv"},
    [2] = {[TUTTI_COLL_ALLREDUCE] = "allreduce_coalesced"},
};

int tutti__sig_describe(char *buf, size_t cap, const tutti__calldesc_t *d)
{
    uint32_t i = (uint32_t)d->info;
    int root = (int)(int32_t)(d->info >> 32);
    tutti_coll_t kind = (tutti_coll_t)SIG_KIND(i);
    const char *name = (unsigned)kind < TUTTI_COLL_COUNT ? var_names[SIG_VAR(i)][kind] : NULL;
    if (name == NULL)
        name = tutti__coll_name(kind);
    const tutti__algo_t *const *algos = tutti__algos_for(kind);
    const char *algo = "?";
    for (unsigned k = 1; algos != NULL && algos[k - 1] != NULL; k++)
        if (k == SIG_ALGO(i))
            algo = algos[k - 1]->name;
    const char *dt = tutti_dtype_name((tutti_dtype_t)SIG_DTYPE(i));
    int n;
    if (kind == TUTTI_COLL_BARRIER)
        n = snprintf(buf, cap, "%s #%llu", name, (unsigned long long)d->seq);
    else if (SIG_VAR(i) == 1 && kind == TUTTI_COLL_ALLGATHER)
        n = snprintf(buf, cap, "%s #%llu of %s (layout %08llx)", name,
                     (unsigned long long)d->seq, dt, (unsigned long long)(d->count & 0xffffffffu));
    else if (SIG_VAR(i) == 1)
        n = snprintf(buf, cap, "%s #%llu of %s", name, (unsigned long long)d->seq, dt);
    else if (SIG_VAR(i) == 2)
        n = snprintf(buf, cap, "%s #%llu of %llu %s (buffers' counts hashed to %08x: the ranks "
                     "must split the total alike)", name, (unsigned long long)d->seq,
                     (unsigned long long)d->count, dt, (unsigned)root);
    else
        n = snprintf(buf, cap, "%s #%llu of %llu %s", name, (unsigned long long)d->seq,
                     (unsigned long long)d->count, dt);
    if (n < 0 || (size_t)n >= cap)
        return n;
    if (kind == TUTTI_COLL_ALLREDUCE || kind == TUTTI_COLL_REDUCE ||
        kind == TUTTI_COLL_REDUCE_SCATTER)
        n += snprintf(buf + n, cap - (size_t)n, " %s", tutti_op_name((tutti_op_t)SIG_OP(i)));
    if ((size_t)n < cap && (kind == TUTTI_COLL_BCAST || kind == TUTTI_COLL_REDUCE))
        n += snprintf(buf + n, cap - (size_t)n, " root %d", root);
    if ((size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " (%s%s)", algo,
                      SIG_NSPLIT(i) > 1 ? ", sliced" : "");
    return n;
}

tutti_status_t tutti__sig_mismatch(tutti__coll_t *c, int peer, const tutti__calldesc_t *d,
                                   const char *how)
{
    char mine[160], theirs[400]; /* theirs may quote a transport's whole error */
    tutti__calldesc_t md = tutti__sig_desc(c);
    tutti__sig_describe(mine, sizeof mine, &md);
    if (d != NULL)
        tutti__sig_describe(theirs, sizeof theirs, d);
    else
        snprintf(theirs, sizeof theirs, "a different call (%s)", how);
    /* Numbers that differ mean one rank posted a call the other did not: most often an empty
     * one (0 elements), which returns at once without its peers. */
    if (d != NULL && d->seq != md.seq && how[0] == '\0')
        how = "(the numbers differ: the rank ahead posted a call the other did not, or an empty "
              "one, 0 elements, which ran without its peers)";
    /* Alike but for the algorithm: the program's calls agree, its overrides do not. */
    const uint64_t algo_bits = (uint64_t)0x3fu << 15;
    if (d != NULL && how[0] == '\0' && d->seq == md.seq && d->count == md.count &&
        (d->info & ~algo_bits) == (md.info & ~algo_bits) && d->info != md.info)
        how = "(only the algorithms differ: every rank must make the same "
              "tutti_comm_set_algorithm calls, and have the same CCL_<COLL> variables)";
    const int me = c->net->rank;
    const bool first = me < peer;
    tutti__top(c)->blame = peer;
    snprintf(c->err, TUTTI__ERRLEN,
             "mismatched collectives: rank %d posted %s, rank %d posted %s%s%s: every rank must "
             "post the same collectives, with the same count, dtype, op and root, in the same "
             "order; the communicator is now failed: destroy it and create a new one",
             first ? me : peer, first ? mine : theirs, first ? peer : me, first ? theirs : mine,
             d != NULL && how[0] ? " " : "", d != NULL ? how : "");
    return TUTTI_ERR_MISMATCH;
}

tutti_status_t tutti__count_mismatch(tutti__coll_t *c, int peer, uint64_t theirs)
{
    char mine[160];
    tutti__calldesc_t md = tutti__sig_desc(c);
    tutti__sig_describe(mine, sizeof mine, &md);
    const int me = c->net->rank, g = c->group ? c->group[peer] : peer;
    tutti__top(c)->blame = g;
    snprintf(c->err, TUTTI__ERRLEN,
             "mismatched %s: rank %d sends %llu elements to rank %d, which expects %zu from it "
             "(rank %d's recvcounts[%d]): each rank's sendcounts[j] must equal rank j's "
             "recvcounts for it; the communicator is now failed: destroy it and create a new one",
             mine, g, (unsigned long long)theirs, me, tutti__rcount(c, peer), me, g);
    return TUTTI_ERR_MISMATCH;
}

/* ---- windows ---- */

static uint64_t value_of(uint64_t fp, uint64_t wcall)
{
    /* fp is already mixed: a multiple of wcall by an odd constant keeps values of different
     * window calls apart. Never 0: 0 is "none yet" and the tag of withdrawn lines. */
    return (fp ^ (wcall * 0x9e3779b97f4a7c15ull)) | 1u;
}

uint64_t tutti__win_value(const tutti__coll_t *c) { return value_of(c->fp, c->wcall); }

void tutti__win_begin(tutti__coll_t *c, tutti__window_t *w)
{
    if (c->wcall != 0)
        return;
    c->wcall = ++w->ncalls;
    /* Only the value now (the 8 B allreduce pays one store); the descriptor, which only texts
     * need, is written by describe once this rank finds any peer's value different. A peer
     * that looks at it before checks it against the value (read_desc) and waits. Release: a
     * peer that reads this value reads the call's number on the window with it; what the call
     * writes for its peers is published later, by a barrier's or a flagged line's release. */
    __atomic_store_n(&w->calls[w->me][c->wcall & 1u], tutti__win_value(c), __ATOMIC_RELEASE);
}

/* describe writes c's descriptor into its slot of w, once per call. */
static void describe(tutti__coll_t *c, tutti__window_t *w)
{
    if (c->described)
        return;
    c->described = true;
    volatile uint64_t *d = w->descs[w->me] + 4u * (unsigned)(c->wcall & 1u);
    tutti__calldesc_t md = tutti__sig_desc(c);
    __atomic_store_n(&d[0], md.seq, __ATOMIC_RELAXED);
    __atomic_store_n(&d[1], md.count, __ATOMIC_RELAXED);
    __atomic_store_n(&d[2], md.info, __ATOMIC_RELAXED);
    __atomic_store_n(&d[3], md.wcall, __ATOMIC_RELEASE);
}

/* read_desc reads rank r's descriptor in slot p, and true when it is the one behind value v
 * (not half rewritten by a rank that moved on meanwhile). */
static bool read_desc(const tutti__window_t *w, int r, unsigned p, uint64_t v, tutti__calldesc_t *d)
{
    const volatile uint64_t *s = w->descs[r] + 4u * p;
    /* Acquire loads, so that the check of the value below comes after them (a fence would do,
     * but ThreadSanitizer builds refuse atomic_thread_fence). */
    d->seq = __atomic_load_n(&s[0], __ATOMIC_ACQUIRE);
    d->count = __atomic_load_n(&s[1], __ATOMIC_ACQUIRE);
    d->info = __atomic_load_n(&s[2], __ATOMIC_ACQUIRE);
    d->wcall = __atomic_load_n(&s[3], __ATOMIC_ACQUIRE);
    return __atomic_load_n(&w->calls[r][p], __ATOMIC_RELAXED) == v &&
           value_of(hash_desc(d->seq, d->count, d->info), d->wcall) == v;
}

/* await_notice gives rank g's failure notice a moment (1 s) to come: a failing rank writes its
 * window word first and sends the notice right after (under load it may lose its core between
 * the two), unless it has ended meanwhile. */
static void await_notice(tutti__liveness_t *live, int g)
{
    int dead = -1;
    for (double t0 = tutti__now(); !tutti__live_told(live, g) && !tutti__live_dead(live, g) &&
                                   tutti__now() - t0 < 1.0;) {
        (void)tutti__live_check_now(live, &dead);
        if (!tutti__live_told(live, g))
            tutti__sleep_us(2000);
    }
}

/* Failure word: status (negated, low 7 bits), FAIL_RELAYED when that rank only passed on a
 * peer's failure, and the call's sequence number above. */
#define FAIL_RELAYED 0x80u
static tutti_status_t peer_failed(tutti__coll_t *c, tutti__window_t *w, int r, uint64_t f)
{
    tutti__top(c)->relayed = true;
    /* Name the rank that found the failure, where one did, not one that passed it on. */
    for (int q = 0; (f & FAIL_RELAYED) && q < w->nranks; q++) {
        uint64_t g = __atomic_load_n(&w->calls[q][2], __ATOMIC_ACQUIRE);
        if (q != w->me && g != 0 && !(g & FAIL_RELAYED) && (g >> 8) <= (f >> 8)) {
            r = q;
            f = g;
        }
    }
    tutti_status_t st = (tutti_status_t)-(int)(f & 0x7fu);
    const int g = c->group ? c->group[r] : r;
    unsigned long long seq = (unsigned long long)(f >> 8);
    /* A peer that failed because a rank died: name the dead rank, the cause, as it did; not
     * when the dead rank is one that said first that its own call failed (it then exited, as a
     * program may on any error): its failure is the cause. */
    int dead = -1;
    if (st != TUTTI_ERR_MISMATCH && tutti__live_check(c->net->live, &dead) < 0 && dead != g &&
        !tutti__live_told(c->net->live, dead)) {
        snprintf(c->err, TUTTI__ERRLEN,
                 "rank %d: %s #%llu: rank %d (pid %d) died or lost its connection; the "
                 "communicator is now failed: destroy it and create a new one",
                 c->net->rank, c->name, (unsigned long long)c->seq, dead,
                 tutti__live_pid(c->net->live, dead));
        return TUTTI_ERR_PEER_FAILED;
    }
    if (st == TUTTI_ERR_MISMATCH) {
        tutti__calldesc_t d;
        const unsigned p = (unsigned)(c->wcall & 1u);
        uint64_t v = __atomic_load_n(&w->calls[r][p], __ATOMIC_ACQUIRE);
        if (v != tutti__win_value(c) && read_desc(w, r, p, v, &d) && d.wcall == c->wcall)
            return tutti__sig_mismatch(c, g, &d, "");
        /* The finder's call was this one: the odd call is another rank's, which its notice
         * names. */
        tutti__liveness_t *lv = c->net->live;
        if (lv != NULL)
            await_notice(lv, g);
        const int b = lv != NULL ? tutti__live_blame(lv, g) : -1;
        /* A third rank: where its call is in the window, this rank names both calls itself, as
         * the finder did. That rank describes its call as soon as it sees a value differ
         * (tutti__win_check): give it a moment to. */
        for (int q = 0; b >= 0 && b != g && b != c->net->rank && q < w->nranks; q++) {
            if ((c->group ? c->group[q] : q) != b)
                continue;
            for (double t0 = tutti__now();; tutti__sleep_us(1000)) {
                v = __atomic_load_n(&w->calls[q][p], __ATOMIC_ACQUIRE);
                if (v == tutti__win_value(c))
                    break;
                if (read_desc(w, q, p, v, &d)) {
                    if (d.wcall == c->wcall)
                        return tutti__sig_mismatch(c, b, &d, "");
                    break;
                }
                if (tutti__now() - t0 >= 0.5)
                    break;
            }
        }
        char with[48] = "";
        if (b >= 0 && b != g)
            snprintf(with, sizeof with, " with rank %d", b);
        tutti__top(c)->blame = b;
        char mine[200];
        tutti__calldesc_t md = tutti__sig_desc(c);
        tutti__sig_describe(mine, sizeof mine, &md);
        snprintf(c->err, TUTTI__ERRLEN,
                 "rank %d found mismatched collectives%s at its call #%llu (its error names "
                 "both calls) while rank %d posted %s; the communicator is now failed: destroy "
                 "it and create a new one",
                 g, with, seq, c->net->rank, mine);
        return TUTTI_ERR_MISMATCH;
    }
    /* Its notice names the rank it found dead or silent. */
    tutti__liveness_t *live = c->net->live;
    if (live != NULL && st == TUTTI_ERR_PEER_FAILED && !(f & FAIL_RELAYED))
        await_notice(live, g);
    int b = tutti__live_blame(live, g);
    char about[96];
    tutti__blame_note(about, sizeof about, b, g, c->net->rank);
    tutti__top(c)->blame = b;
    snprintf(c->err, TUTTI__ERRLEN,
             "rank %d's communicator failed (%s%s) in its call #%llu while this rank waited for "
             "it in %s #%llu; the communicator is now failed: destroy it and create a new one",
             g, tutti_strerror(st), about, seq, c->name, (unsigned long long)c->seq);
    return TUTTI_ERR_PEER_FAILED;
}

void tutti__blame_note(char *buf, size_t cap, int blame, int failer, int me)
{
    if (blame >= 0 && blame != failer && blame == me)
        snprintf(buf, cap, "; it named this rank, which did not answer in time");
    else if (blame >= 0 && blame != failer)
        snprintf(buf, cap, "; it named rank %d", blame);
    else if (cap > 0)
        buf[0] = '\0';
}

tutti_status_t tutti__win_peer_failed(tutti__coll_t *c, tutti__window_t *w, int r, bool arrived)
{
    uint64_t f = __atomic_load_n(&w->calls[r][2], __ATOMIC_ACQUIRE);
    /* A peer that failed in a later call than this one had finished this one: only a failure
     * in this call or before it, or one that keeps it from coming, fails this call. */
    if (__builtin_expect(f != 0, 0) && (!arrived || (f >> 8) <= c->seq))
        return peer_failed(c, w, r, f);
    return TUTTI_OK;
}

void tutti__win_describe(tutti__coll_t *c)
{
    tutti__window_t *w = tutti__coll_window(c);
    if (w != NULL && c->wcall != 0)
        describe(c, w);
}

tutti_status_t tutti__win_check(tutti__coll_t *c, tutti__window_t *w, int r, bool arrived)
{
    const unsigned p = (unsigned)(c->wcall & 1u);
    const uint64_t mine = tutti__win_value(c);
    uint64_t v = __atomic_load_n(&w->calls[r][p], __ATOMIC_ACQUIRE);
    if (__builtin_expect(v == mine, 1))
        return TUTTI_OK;
    describe(c, w); /* the peer may be about to name this call */
    /* A peer whose communicator failed at or before this call (it timed out waiting for this
     * rank, which came late) left its last call's value: that failure, not a mismatch. */
    uint64_t f = __atomic_load_n(&w->calls[r][2], __ATOMIC_ACQUIRE);
    const int g = c->group ? c->group[r] : r;
    tutti__calldesc_t d;
    if (f != 0 && (f >> 8) <= c->seq) {
        tutti_status_t st = peer_failed(c, w, r, f);
        /* Its abandoned call, described when it failed, differs from this one: the program's
         * ranks also posted different calls, which its timeout alone would hide. */
        size_t n = strlen(c->err);
        if (st != TUTTI_ERR_MISMATCH && read_desc(w, r, p, v, &d) && d.wcall == c->wcall) {
            char mine[160], theirs[160];
            tutti__calldesc_t md = tutti__sig_desc(c);
            tutti__sig_describe(mine, sizeof mine, &md);
            tutti__sig_describe(theirs, sizeof theirs, &d);
            snprintf(c->err + n, TUTTI__ERRLEN - n,
                     "; and the calls differ: rank %d's there was %s, this rank's is %s", g,
                     theirs, mine);
        }
        return st;
    }
    bool known = read_desc(w, r, p, v, &d);
    if (arrived) {
        /* r differs; it finds so too and describes its call: give it a moment to. */
        for (double t0 = tutti__now(); !known && tutti__now() - t0 < 0.5;) {
            tutti__sleep_us(1000);
            known = read_desc(w, r, p, v, &d);
        }
        return tutti__sig_mismatch(c, g, known ? &d : NULL,
                                   known ? "" : "its window call differs");
    }
    /* Not arrived: r may simply not have begun this call yet (its slot then holds the call
     * two before). A call r did begin at this place on the window is a mismatch. */
    if (known && d.wcall >= c->wcall)
        return tutti__sig_mismatch(c, g, &d, "");
    return TUTTI_OK;
}

/* whole_window is c's window when it serves the whole communicator and r is another rank of it
 * (what a message wait may look into for r's calls), else NULL. */
static tutti__window_t *whole_window(tutti__coll_t *c, int r)
{
    tutti__window_t *w = tutti__coll_window(c);
    return w == NULL || c->group != NULL || w->nranks != c->size || r == c->rank ? NULL : w;
}

tutti_status_t tutti__win_check_msg(tutti__coll_t *c, int r)
{
    tutti__window_t *w = whole_window(c, r);
    if (w == NULL)
        return TUTTI_OK;
    const tutti__calldesc_t md = tutti__sig_desc(c);
    for (unsigned p = 0; p < 2; p++) {
        tutti__calldesc_t d;
        uint64_t v = __atomic_load_n(&w->calls[r][p], __ATOMIC_ACQUIRE);
        if (v != 0 && read_desc(w, r, p, v, &d) && d.seq == md.seq &&
            (d.count != md.count || d.info != md.info))
            return tutti__sig_mismatch(c, r, &d, "");
    }
    return TUTTI_OK;
}

bool tutti__win_peer_ahead(tutti__coll_t *c, int r, tutti__calldesc_t *d)
{
    tutti__window_t *w = whole_window(c, r);
    if (w == NULL)
        return false;
    const uint64_t seq = tutti__sig_desc(c).seq;
    for (unsigned p = 0; p < 2; p++) {
        uint64_t v = __atomic_load_n(&w->calls[r][p], __ATOMIC_ACQUIRE);
        if (v != 0 && read_desc(w, r, p, v, d) && d->seq > seq)
            return true;
    }
    return false;
}

static void fail_window(tutti__window_t *w, uint64_t word)
{
    if (w == NULL)
        return;
    __atomic_store_n(&w->calls[w->me][2], word, __ATOMIC_RELEASE);
    if (w->small_size == 0)
        return;
    for (size_t half = 0; half < 2; half++) {
        char *base = w->regions[w->me] + w->region_size + half * TUTTI__WIN_SMALL_HALF;
        for (size_t o = 0; o < TUTTI__WIN_SMALL_LL; o += 64)
            __atomic_store_n((uint64_t *)(void *)(base + o + TUTTI__LL_DATA), 0, __ATOMIC_RELAXED);
    }
}

void tutti__win_fail(tutti__net_t *net, tutti_status_t st, uint64_t seq, bool relayed)
{
    uint64_t word = (seq << 8) | (relayed ? FAIL_RELAYED : 0) | ((uint64_t)(-(int)st) & 0x7fu);
    for (int s = 0; s < net->nchan - 1; s++) {
        if (net->links.node_wins != NULL)
            fail_window(net->links.node_wins[s], word);
        if (net->links.wins != NULL && net->links.wins != net->links.node_wins)
            fail_window(net->links.wins[s], word);
    }
}
