/* shrink.c: tutti_comm_shrink, a new communicator of the ranks that are still alive, agreed on
 * over the liveness mesh (the failed communicator's collectives cannot carry it, and rank 0's
 * store may have died with rank 0).
 *
 * The agreement. The coordinator is the lowest rank a survivor does not know dead, left or
 * excluded. Every other survivor mails it a VIEW (this call's number and the ranks it
 * excludes); the coordinator waits until each rank it does not know dead has sent one or died,
 * then opens the new communicator's store and mails each member a DECIDE: the members in
 * order, the store's address and the salt of its secret. A member takes a DECIDE only when it
 * names it and no rank it knows dead; all then create the communicator through that store,
 * and any death among the members cancels the creation (tutti__bootstrap_t.cancelled) on every
 * rank that sees it. Then the coordinator decides again (it waits for no VIEW twice: a member
 * stays in the call), or, when the coordinator itself died, every member mails its VIEW to
 * the next lowest rank, which takes over.
 *
 * It terminates: a death is permanent and is seen by every survivor (its liveness connections
 * close), each failed attempt follows a death, and there are finitely many ranks; a rank that
 * stops without dying (SIGSTOP) holds it until the timeout, unless the others exclude it; when
 * it resumes, the coordinator's note that it gave up on the call, or the decision of the
 * others' later call, tells it that it is out (left_out), so it never goes on alone. The
 * failure detector is the kernel closing a dead process's sockets: a host that vanishes
 * (power, cable) is not found dead before TCP's retransmissions give up (docs/shrink.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/sha256.h"
#include "comm.h"

enum { MAIL_VIEW = TUTTI__MAIL_SHRINK_VIEW, MAIL_DECIDE = TUTTI__MAIL_SHRINK_DECIDE };
#define VIEW_MAGIC 0x56524853u   /* "SHRV" */
#define DECIDE_MAGIC 0x44524853u /* "SHRD" */
#define POLL_MS 20
#define AUTH_LABEL "tutti shrink v1" /* the new store's secret (tutti__comm_child_auth) */
/* A DECIDE on the wire, every integer little-endian: magic, call number, attempt (8 bytes, for
 * a reader of a capture), the store's address (64, NUL-terminated), port, n, the salt, then n
 * 4-byte ranks. */
enum {
    D_MAGIC = 0, D_CALL = 4, D_ATTEMPT = 8, D_IP = 16, D_IP_LEN = 64, D_PORT = D_IP + D_IP_LEN,
    D_N = D_PORT + 4, D_SALT = D_N + 4, DECIDE_FIXED = D_SALT + TUTTI__AUTH_KEY
};

typedef struct shrink {
    tutti_comm_t *comm;
    tutti__liveness_t *live;
    int rank, size;
    uint32_t call;             /* this shrink's number on comm (a retried one must not meet the
                                  mail of the one before) */
    unsigned char *excluded;   /* per rank: this rank's list, or a VIEW's, excludes it */
    uint64_t *seen;            /* per rank: the DECIDE mails from it already acted on */
    uint64_t *out_seen;        /* ... and already looked at for one that leaves this rank out */
    bool *viewed;              /* per rank: VIEW mailed to it already */
    bool *took_part;           /* per rank: a member of a creation this rank took part in */
    unsigned char *mail;       /* a mail buffer of tutti__live_mail_cap bytes */
    double deadline;
    /* The attempt being created, for cancel(). */
    const int *members;
    int nmembers, coord;
    uint64_t attempt_gen;
    bool final;                /* this call ends with the error set (left out; others went on) */
} shrink_t;

static void put32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool gone(const shrink_t *s, int r)
{
    return tutti__live_dead(s->live, r) || tutti__live_left(s->live, r);
}

/* coordinator is the lowest rank that is neither gone nor excluded (this rank at worst). */
static int coordinator(const shrink_t *s)
{
    for (int r = 0; r < s->size; r++)
        if (r == s->rank || (!gone(s, r) && !s->excluded[r]))
            return r;
    return s->rank;
}

/* cancel ends a creation whose members include a rank that has died since, or whose
 * coordinator has decided again: that creation cannot finish. A member that destroyed the old
 * communicator meanwhile is no reason: it does so once its own creation is through, while
 * this rank may still be finishing its part. */
static tutti_status_t cancel(void *ctx)
{
    shrink_t *s = ctx;
    int dead = -1;
    (void)tutti__live_check_now(s->live, &dead);
    for (int i = 0; i < s->nmembers; i++) {
        int r = s->members[i];
        if (r != s->rank && tutti__live_dead(s->live, r)) {
            return tutti__set_error(TUTTI_ERR_PEER_FAILED,
                                    "rank %d (pid %d) died while the survivors built the shrunk "
                                    "communicator",
                                    r, tutti__live_pid(s->live, r));
        }
    }
    size_t len;
    if (s->coord != s->rank && s->coord >= 0 &&
        tutti__live_mail_read(s->live, s->coord, MAIL_DECIDE, NULL, 0, &len) > s->attempt_gen) {
        return tutti__set_error(TUTTI_ERR_PEER_FAILED, "rank %d, which coordinates the shrink, "
                                "started another attempt", s->coord);
    }
    return TUTTI_OK;
}

/* create makes the new communicator of members (ascending) through the store at ip:port, this
 * rank being its rank crank; store is open already on the coordinator (rank 0), else NULL. */
static tutti_status_t create(shrink_t *s, const int *members, int n, int crank,
                             tutti__store_t *store, const char *ip, int port,
                             const uint8_t salt[TUTTI__AUTH_KEY], tutti_comm_t **out)
{
    tutti_comm_t *c = s->comm;
    char where[160];
    tutti__bootstrap_t bs = {.rank = crank, .size = n, .deadline = s->deadline, .where = where,
                             .cancelled = cancel, .cancel_ctx = s};
    tutti__solo_t *solo = NULL;
    tutti_status_t st;
    if (n == 1) {
        if ((solo = tutti__solo_new()) == NULL)
            return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        bs.oob = tutti__solo_oob(solo);
        snprintf(where, sizeof where, "a one-rank shrunk communicator's own store");
    } else {
        if (store == NULL) {
            tutti__auth_t auth;
            tutti__comm_child_auth(c, AUTH_LABEL, salt, &auth);
            /* The coordinator listens before it mails the address: a refusal means it died,
             * so the connection is not retried for long. */
            double d = tutti__now() + 2.0;
            st = tutti__store_open(crank, n, ip, port, &auth, d < s->deadline ? d : s->deadline,
                                   &store);
            memset(&auth, 0, sizeof auth);
            if (st < 0)
                return st;
        }
        bs.oob = tutti__store_oob(store);
        snprintf(where, sizeof where, "the shrunk communicator's store at %s:%d", ip, port);
    }
    s->members = members;
    s->nmembers = n;
    for (int i = 0; i < n; i++)
        s->took_part[members[i]] = true;
    /* The old communicator's configuration, with the timeout it has now (set_timeout). */
    tutti__config_t cfg = c->cfg;
    cfg.timeout = tutti__net_timeout(&c->net);
    cfg.timeout_given = cfg.timeout_given || __atomic_load_n(&c->net.timeout_given,
                                                             __ATOMIC_RELAXED);
    st = tutti__comm_create(crank, n, &bs, store, &cfg, c, out);
    s->members = NULL;
    s->nmembers = 0;
    if (st < 0 && n > 1) { /* its ranks are the new ones: say which old rank each is */
        char map[200];
        size_t k = 0;
        int i = 0;
        for (; i < n && k + 24 < sizeof map; i++)
            k += (size_t)snprintf(map + k, sizeof map - k, "%s%d=%d", i ? ", " : "", i,
                                  members[i]);
        tutti__append_error(" (ranks of the shrunk communicator, new=old: %s%s)", map,
                            i < n ? ", ..." : "");
    }
    if (st < 0)
        tutti__store_close_now(store); /* a rank that died never closes it */
    else
        tutti__store_close(store);
    tutti__solo_free(solo);
    return st;
}

/* ---- the coordinator ------------------------------------------------------------------------ */

/* read_view takes r's VIEW of this call, if one has come: its exclusions join ours. */
static bool read_view(shrink_t *s, int r)
{
    size_t len, need = 8 + ((size_t)s->size + 7) / 8;
    if (tutti__live_mail_read(s->live, r, MAIL_VIEW, s->mail, tutti__live_mail_cap(s->live),
                              &len) == 0 ||
        len != need || get32(s->mail) != VIEW_MAGIC || get32(s->mail + 4) != s->call)
        return false;
    for (int q = 0; q < s->size; q++)
        if (s->mail[8 + q / 8] >> (q % 8) & 1)
            s->excluded[q] = 1;
    return true;
}

static bool left_out(shrink_t *s);

/* tell_given_up mails, as the coordinator gives up on this call, each rank it still waited for
 * (neither gone nor excluded, no view among members[0..n-1]) a DECIDE of this call with itself
 * its only member and attempt 0: a stopped rank that resumes, or one that called late, reads
 * it and ends its call, instead of finding the others gone and going on alone. Best effort,
 * briefly. */
static void tell_given_up(shrink_t *s, const int *members, int n)
{
    unsigned char msg[DECIDE_FIXED + 4];
    memset(msg, 0, sizeof msg);
    put32(msg + D_MAGIC, DECIDE_MAGIC);
    put32(msg + D_CALL, s->call);
    put32(msg + D_N, 1);
    put32(msg + DECIDE_FIXED, (uint32_t)s->rank);
    double brief = tutti__now() + 0.5;
    for (int r = 0, i = 0; r < s->size; r++) {
        while (i < n && members[i] < r)
            i++;
        if (r == s->rank || (i < n && members[i] == r) || gone(s, r) || s->excluded[r])
            continue;
        (void)tutti__live_mail_send(s->live, r, MAIL_DECIDE, msg, sizeof msg, brief);
    }
}

/* gather waits until every rank that is neither gone nor excluded has mailed its VIEW (or is
 * gone); members[] gets this rank and them, ascending. It ends the call (s->final) when a VIEW
 * or a decision leaves this rank out; when a rank that mailed it its view has left since (it
 * gave up on the call: TUTTI_ERR_TIMEOUT, the ranks still awaited told); or when a rank that
 * was a member of a creation this rank took part in, and is not excluded (an excluded one
 * leaves once it is told so), has destroyed the old communicator since: the others went on
 * without this rank (a creation can end on some members and fail on others when a member
 * dies at its very end), and a communicator made of what is left here would run apart from
 * theirs. */
static tutti_status_t gather(shrink_t *s, int *members, int *n)
{
    double start = tutti__now();
    for (;;) {
        int missing = -1, nmissing = 0;
        *n = 0;
        if (left_out(s))
            return TUTTI_ERR_PEER_FAILED;
        for (int r = 0; r < s->size; r++) {
            if (r == s->rank) {
                members[(*n)++] = r;
                continue;
            }
            bool viewed = read_view(s, r);
            if (s->excluded[s->rank]) {
                s->final = true;
                return tutti__set_error(TUTTI_ERR_PEER_FAILED,
                                        "tutti_comm_shrink: rank %d excludes this rank (%d): it "
                                        "is left out of the shrunk communicator", r, s->rank);
            }
            /* Only a creation this rank took part in can have let r go on without it. */
            if (s->took_part[r] && !s->excluded[r] && tutti__live_left(s->live, r)) {
                s->final = true;
                return tutti__set_error(TUTTI_ERR_PEER_FAILED,
                                        "tutti_comm_shrink: rank %d took part in this shrink and "
                                        "has gone on (it destroyed the old communicator) without "
                                        "this rank (%d), whose part failed: this rank is out",
                                        r, s->rank);
            }
            /* A rank that mailed this one its view took it for the coordinator: one that left
             * since gave up on this call (its timeout ran out first, as when this rank was
             * stopped), so the call fails here too, and the ranks still awaited are told; going
             * on without it would leave this rank, when it is the last, a job of its own. */
            if (viewed && !s->excluded[r] && tutti__live_left(s->live, r)) {
                s->final = true;
                tell_given_up(s, members, *n);
                return tutti__set_error(TUTTI_ERR_TIMEOUT,
                                        "tutti_comm_shrink: rank %d mailed this rank (%d), which "
                                        "coordinates, its view and then gave up on this call "
                                        "(its timeout ran out first) and left: the call fails "
                                        "here too",
                                        r, s->rank);
            }
            if (gone(s, r) || s->excluded[r])
                continue;
            if (viewed && !s->excluded[r]) {
                members[(*n)++] = r;
                continue;
            }
            if (!s->excluded[r] && nmissing++ == 0)
                missing = r;
        }
        if (nmissing == 0) {
            /* A VIEW read late in the pass may exclude a rank counted before it. */
            int k = 0;
            for (int i = 0; i < *n; i++)
                if (members[i] == s->rank || !s->excluded[members[i]])
                    members[k++] = members[i];
            *n = k;
            return TUTTI_OK;
        }
        if (tutti__now() >= s->deadline) {
            tell_given_up(s, members, *n);
            return tutti__set_error(TUTTI_ERR_TIMEOUT,
                                    "tutti_comm_shrink: rank %d waited %.3g s for %d rank(s) "
                                    "(rank %d first) that neither died nor sent it their view: "
                                    "they did not call tutti_comm_shrink, or took another rank "
                                    "for the coordinator (every rank must pass the same exclude "
                                    "list); exclude a rank that is stopped or stuck, or raise "
                                    "TUTTI_TIMEOUT",
                                    s->rank, tutti__now() - start, nmissing, missing);
        }
        tutti__live_wait(s->live, POLL_MS);
    }
}

static tutti_status_t coordinate(shrink_t *s, uint64_t attempt, tutti_comm_t **out)
{
    tutti_comm_t *c = s->comm;
    int *members = malloc((size_t)s->size * sizeof *members), n = 0;
    unsigned char *msg = malloc(DECIDE_FIXED + 4 * (size_t)s->size);
    tutti__store_t *store = NULL;
    tutti_status_t st;
    if (members == NULL || msg == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    TUTTI__CHECK_GOTO(gather(s, members, &n), st, out);
    uint8_t salt[TUTTI__AUTH_KEY] = {0};
    char ip[D_IP_LEN] = "";
    int port = 0;
    if (n > 1) {
        if (!tutti__random(salt, sizeof salt)) {
            st = tutti__set_error(TUTTI_ERR_SYSTEM, "getrandom: %s", strerror(errno));
            goto out;
        }
        tutti__auth_t auth;
        tutti__comm_child_auth(c, AUTH_LABEL, salt, &auth);
        st = tutti__store_open(0, n, c->ip, 0, &auth, s->deadline, &store);
        memset(&auth, 0, sizeof auth);
        if (st < 0)
            goto out;
        snprintf(ip, sizeof ip, "%s", c->ip);
        port = tutti__store_port(store);
    }
    put32(msg + D_MAGIC, DECIDE_MAGIC);
    put32(msg + D_CALL, s->call);
    put32(msg + D_ATTEMPT, (uint32_t)attempt);
    put32(msg + D_ATTEMPT + 4, (uint32_t)(attempt >> 32));
    memcpy(msg + D_IP, ip, D_IP_LEN);
    put32(msg + D_PORT, (uint32_t)port);
    put32(msg + D_N, (uint32_t)n);
    memcpy(msg + D_SALT, salt, TUTTI__AUTH_KEY);
    size_t len = DECIDE_FIXED;
    for (int i = 0; i < n; i++)
        put32(msg + len, (uint32_t)members[i]), len += 4;
    memset(salt, 0, sizeof salt);
    for (int i = 1; i < n; i++) {
        st = tutti__live_mail_send(s->live, members[i], MAIL_DECIDE, msg, len, s->deadline);
        if (st < 0) /* it died: decide again without it */
            goto out;
    }
    /* A rank left out that calls (another's list excludes it), now or later, learns so from
     * its mail and ends; the store's address and salt are not for it. Best effort, briefly: a
     * stopped rank does not read. */
    memset(msg + D_IP, 0, DECIDE_FIXED - D_IP);
    put32(msg + D_N, (uint32_t)n);
    double brief = tutti__now() + 1.0;
    for (int r = 0, i = 0; r < s->size; r++) {
        if (i < n && members[i] == r) {
            i++;
            continue;
        }
        if (!gone(s, r))
            (void)tutti__live_mail_send(s->live, r, MAIL_DECIDE, msg, len,
                                        brief < s->deadline ? brief : s->deadline);
    }
    memset(msg, 0, len);
    TUTTI__LOG(TUTTI__LOG_INFO, "rank %d: tutti_comm_shrink: %d of %d ranks go on (attempt %llu)",
               s->rank, n, s->size, (unsigned long long)attempt);
    st = create(s, members, n, 0, store, ip, port, NULL, out);
    store = NULL; /* create closed it */
out:
    tutti__store_close_now(store);
    free(members);
    free(msg);
    return st;
}

/* ---- a member -------------------------------------------------------------------------------- */

static tutti_status_t send_view(shrink_t *s, int to, const unsigned char *mine, double deadline)
{
    size_t len = 8 + ((size_t)s->size + 7) / 8;
    unsigned char *v = s->mail;
    put32(v, VIEW_MAGIC);
    put32(v + 4, s->call);
    memcpy(v + 8, mine, len - 8);
    return tutti__live_mail_send(s->live, to, MAIL_VIEW, v, len,
                                 deadline < s->deadline ? deadline : s->deadline);
}

/* parse_decide checks the DECIDE that rank q mailed (s->mail, len bytes): *members gets its
 * members (a malloc'd array, *n of them, ascending from q) and *crank this rank's place among
 * them, or -1. An error when it is garbled or of another call (TUTTI_ERR_INVALID_ARG; with
 * later, one of a later call is taken), or names this rank and a rank known dead
 * (TUTTI_ERR_PEER_FAILED: wait for the next one). */
static tutti_status_t parse_decide(shrink_t *s, int q, size_t len, bool later, int **members,
                                   int *n, int *crank)
{
    const unsigned char *m = s->mail;
    *members = NULL;
    *crank = -1;
    if (len < DECIDE_FIXED || get32(m + D_MAGIC) != DECIDE_MAGIC)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "rank %d mailed a malformed shrink "
                                "decision (%zu bytes)", q, len);
    if (get32(m + D_CALL) != s->call && !(later && get32(m + D_CALL) > s->call))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "rank %d mailed the decision of another "
                                "shrink call (%u, this is %u)", q, get32(m + D_CALL), s->call);
    uint32_t port = get32(m + D_PORT), cnt = get32(m + D_N);
    if (memchr(m + D_IP, '\0', D_IP_LEN) == NULL || port > 65535 || cnt < 1 ||
        cnt > (uint32_t)s->size || len != DECIDE_FIXED + 4 * (size_t)cnt)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "rank %d mailed a malformed shrink "
                                "decision (%u members, port %u, %zu bytes)", q, cnt, port, len);
    int *got = malloc((size_t)cnt * sizeof *got);
    if (got == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    tutti_status_t st = TUTTI_OK;
    for (uint32_t i = 0; i < cnt && st == TUTTI_OK; i++) {
        uint32_t r = get32(m + DECIDE_FIXED + 4 * i);
        if (r >= (uint32_t)s->size || (i > 0 && (int)r <= got[i - 1]) ||
            (i == 0 && r != (uint32_t)q))
            st = tutti__set_error(TUTTI_ERR_INVALID_ARG, "rank %d mailed a shrink decision whose "
                                  "members are not ascending ranks from it", q);
        got[i] = (int)r;
        if ((int)r == s->rank)
            *crank = (int)i;
    }
    if (st == TUTTI_OK && *crank >= 0 && cnt < 2) /* a communicator of one is never mailed */
        st = tutti__set_error(TUTTI_ERR_INVALID_ARG, "rank %d mailed a malformed shrink "
                              "decision (one member)", q);
    for (uint32_t i = 0; i < cnt && st == TUTTI_OK && *crank >= 0; i++) /* one to act on */
        if (got[i] != s->rank && tutti__live_dead(s->live, got[i]))
            st = tutti__set_error(TUTTI_ERR_PEER_FAILED, "rank %d's shrink decision names rank "
                                  "%d, which died", q, got[i]);
    if (st < 0) {
        free(got);
        return st;
    }
    *members = got;
    *n = (int)cnt;
    return TUTTI_OK;
}

/* left_out reads the DECIDE mail that came since the last look from every other rank (one
 * that left or died since too: its mail came before its goodbye or its death): one that leaves
 * this rank out ends the call (s->final, the error set); true then. The others stay in the
 * mailboxes. A decision of a later call counts too: this rank was stopped through a shrink the
 * others gave up on, and they have since shrunk again without it (it would otherwise find them
 * all gone and make a communicator of its own: the job in two). So does a coordinator's note
 * that it gave up on this call waiting for this rank (attempt 0, itself the only member). */
static bool left_out(shrink_t *s)
{
    for (int q = 0; q < s->size; q++) {
        size_t len;
        if (q == s->rank) /* a dead sender's mail too: it came before its death */
            continue;
        uint64_t gen = tutti__live_mail_read(s->live, q, MAIL_DECIDE, s->mail,
                                             tutti__live_mail_cap(s->live), &len);
        if (gen <= s->out_seen[q])
            continue;
        s->out_seen[q] = gen;
        int n, crank, *members;
        if (parse_decide(s, q, len, true, &members, &n, &crank) < 0)
            continue;
        free(members);
        uint32_t call = get32(s->mail + D_CALL);
        bool gave_up = get32(s->mail + D_ATTEMPT) == 0 && get32(s->mail + D_ATTEMPT + 4) == 0;
        if (crank < 0 && gave_up) {
            s->final = true;
            tutti__set_error(TUTTI_ERR_PEER_FAILED,
                             "tutti_comm_shrink: rank %d, coordinating shrink call %u, gave up "
                             "waiting for this rank (%d), whose view did not come in time (it "
                             "was stopped, or called late, or the ranks' shrink calls are out "
                             "of step): this call ends here, as it did there",
                             q, call, s->rank);
            return true;
        }
        if (crank < 0) {
            s->final = true;
            tutti__set_error(TUTTI_ERR_PEER_FAILED,
                             "tutti_comm_shrink: rank %d left this rank (%d) out of the shrunk "
                             "communicator%s: it was excluded, or taken for dead",
                             q, s->rank, call != s->call ? " in a later shrink call" : "");
            return true;
        }
    }
    return false;
}

/* await_decide acts on a DECIDE from coordinator c that came since the last look and names
 * this rank: it creates the communicator it names (*acted). One that is garbled or names a
 * rank known dead is passed over: the coordinator decides again once it sees that death. */
static tutti_status_t await_decide(shrink_t *s, int c, tutti_comm_t **out, bool *acted)
{
    size_t len;
    *acted = false;
    uint64_t gen = tutti__live_mail_read(s->live, c, MAIL_DECIDE, s->mail,
                                         tutti__live_mail_cap(s->live), &len);
    if (gen <= s->seen[c])
        return TUTTI_OK;
    s->seen[c] = gen;
    int n = 0, crank, *members;
    tutti_status_t st = parse_decide(s, c, len, false, &members, &n, &crank);
    if (st < 0 || crank < 0) { /* left out: left_out() ends the call on its next look */
        free(members);
        return TUTTI_OK;
    }
    const unsigned char *m = s->mail;
    char ip[D_IP_LEN];
    memcpy(ip, m + D_IP, sizeof ip);
    s->coord = c;
    s->attempt_gen = gen;
    *acted = true;
    st = create(s, members, n, crank, NULL, ip, (int)get32(m + D_PORT), m + D_SALT, out);
    free(members);
    return st;
}

static int count_dead(const shrink_t *s)
{
    int n = 0;
    for (int r = 0; r < s->size; r++)
        n += r != s->rank && tutti__live_dead(s->live, r);
    return n;
}

/* worth_retrying tells whether a failed attempt failed for a death (seen within half a second:
 * a dead process's sockets close together, but are read in turn) or because the coordinator
 * moved on; any other failure (a rank's limits, a refused store) would only fail again. */
static bool worth_retrying(shrink_t *s, int dead_before, int c)
{
    double until = tutti__now() + 0.5;
    for (;;) {
        size_t len;
        int dead = -1;
        (void)tutti__live_check_now(s->live, &dead);
        if (count_dead(s) > dead_before || coordinator(s) != c ||
            (c != s->rank &&
             tutti__live_mail_read(s->live, c, MAIL_DECIDE, NULL, 0, &len) > s->attempt_gen))
            return true;
        if (tutti__now() >= until)
            return false;
        tutti__live_wait(s->live, POLL_MS);
    }
}

/* ---- the call -------------------------------------------------------------------------------- */

static tutti_status_t check_exclude(const tutti_comm_t *c, const int *exclude, int nexclude,
                                    unsigned char *mine)
{
    if (nexclude < 0 || (nexclude > 0 && exclude == NULL))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_shrink: %d excluded ranks at "
                                "%p: give a list, or NULL and 0", nexclude, (const void *)exclude);
    for (int i = 0; i < nexclude; i++) {
        int r = exclude[i];
        if (r < 0 || r >= c->size)
            return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_shrink: excluded rank %d "
                                    "is not a rank of the communicator (size %d)", r, c->size);
        if (r == c->rank)
            return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_shrink: rank %d excludes "
                                    "itself: an excluded rank must not call it", r);
        if (mine[r / 8] >> (r % 8) & 1)
            return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_shrink: rank %d is "
                                    "excluded twice", r);
        mine[r / 8] |= (unsigned char)(1u << (r % 8));
    }
    return TUTTI_OK;
}

TUTTI_API tutti_status_t tutti_comm_shrink(tutti_comm_t *comm, const int *exclude, int nexclude,
                                           tutti_comm_t **newcomm)
{
    if (newcomm == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_shrink: newcomm is NULL");
    *newcomm = NULL;
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_shrink: %p is not a live communicator%s", (void *)comm,
                                tutti__comm_why_not(comm));
    int size = comm->size;
    unsigned char *mine = calloc(((size_t)size + 7) / 8, 1);
    shrink_t s = {.comm = comm, .live = comm->net.live, .rank = comm->rank, .size = size,
                  .deadline = tutti__now() + tutti__net_timeout(&comm->net)};
    s.excluded = calloc((size_t)size, 1);
    s.seen = calloc((size_t)size, sizeof *s.seen);
    s.out_seen = calloc((size_t)size, sizeof *s.out_seen);
    s.viewed = calloc((size_t)size, sizeof *s.viewed);
    s.took_part = calloc((size_t)size, sizeof *s.took_part);
    tutti_status_t st = TUTTI_OK;
    if (mine == NULL || s.excluded == NULL || s.seen == NULL || s.out_seen == NULL ||
        s.viewed == NULL || s.took_part == NULL ||
        (size > 1 && (s.mail = malloc(tutti__live_mail_cap(s.live))) == NULL)) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    TUTTI__CHECK_GOTO(check_exclude(comm, exclude, nexclude, mine), st, out);
    /* Numbered once the call is accepted: a refused one must not put this rank ahead. */
    s.call = __atomic_add_fetch(&comm->shrinks, 1, __ATOMIC_RELAXED);
    for (int r = 0; r < size; r++)
        s.excluded[r] = mine[r / 8] >> (r % 8) & 1;
    /* Operations still running on comm stop now, and the peers that wait in them are told. */
    {
        bool was_ok = comm->failed == TUTTI_OK;
        char msg[160];
        snprintf(msg, sizeof msg, "rank %d: tutti_comm_shrink was called: this communicator "
                 "ends here", comm->rank);
        tutti__comm_end(comm, TUTTI_ERR_ABORTED, msg); /* sends and receives open end too */
        if (was_ok)
            tutti__live_notify_failed(s.live, TUTTI_ERR_ABORTED, comm->seq, false, -1);
    }
    /* Ranks this one excludes learn it too, should they call: best effort, briefly. */
    for (int r = 0; r < size; r++)
        if (s.excluded[r] && !gone(&s, r))
            (void)send_view(&s, r, mine, tutti__now() + 1.0);
    char last[TUTTI__ERRLEN] = "";
    for (uint64_t attempt = 1;;) {
        if (tutti__now() >= s.deadline) {
            int c = coordinator(&s);
            st = tutti__set_error(TUTTI_ERR_TIMEOUT, "tutti_comm_shrink: rank %d gave up after "
                                  "%.3g s (TUTTI_TIMEOUT)%s%s", comm->rank,
                                  tutti__net_timeout(&comm->net), last[0] ? "; the last attempt: "
                                  : "", last);
            if (c != s.rank)
                tutti__append_error("; it waited for the decision of rank %d, which coordinates: "
                                    "that rank's error names the ranks it waited for", c);
            break;
        }
        tutti__live_wait(s.live, 0);
        if (left_out(&s)) {
            st = TUTTI_ERR_PEER_FAILED;
            break;
        }
        int c = coordinator(&s), dead_before = count_dead(&s);
        bool acted = false;
        if (c == s.rank) {
            s.coord = c;
            st = coordinate(&s, attempt, newcomm);
            acted = true;
        } else {
            if (!s.viewed[c]) {
                s.viewed[c] = send_view(&s, c, mine, s.deadline) == TUTTI_OK;
                continue; /* failed: c died, and the next pass finds another */
            }
            st = await_decide(&s, c, newcomm, &acted);
        }
        if (!acted) {
            tutti__live_wait(s.live, POLL_MS);
            continue;
        }
        attempt++;
        if (st == TUTTI_OK || s.final || st == TUTTI_ERR_TIMEOUT)
            break;
        snprintf(last, sizeof last, "%s", tutti__tls_error());
        if (tutti__now() >= s.deadline) { /* a creation that waited out the call's time */
            st = tutti__set_error(TUTTI_ERR_TIMEOUT, "tutti_comm_shrink: rank %d gave up after "
                                  "%.3g s (TUTTI_TIMEOUT): %s", comm->rank,
                                  tutti__net_timeout(&comm->net), last);
            break;
        }
        if (!worth_retrying(&s, dead_before, c)) {
            tutti__set_error(st, "tutti_comm_shrink: rank %d: %s", comm->rank, last);
            break;
        }
        TUTTI__LOG(TUTTI__LOG_INFO, "rank %d: tutti_comm_shrink: attempt %llu failed (%s); "
                   "a rank died meanwhile: trying again", comm->rank,
                   (unsigned long long)attempt - 1, last);
    }
out:
    if (st < 0 && *newcomm == NULL)
        tutti__comm_error(comm, st, "%s", tutti__tls_error());
    free(mine);
    free(s.excluded);
    free(s.seen);
    free(s.out_seen);
    free(s.viewed);
    free(s.took_part);
    free(s.mail);
    return st;
}
