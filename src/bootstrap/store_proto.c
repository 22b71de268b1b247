/* store_proto.c: the rendezvous store's protocol, without sockets: the key-value table, the
 * handshake that admits a rank (wire.h, auth.h), and one connection's requests and replies. */
#include <stdio.h>
#include <stdlib.h>

#include "../common/fnv.h"
#include "../common/sha256.h"
#include "store_impl.h"

typedef struct entry {
    struct entry *next;
    char *key; /* NUL-terminated */
    void *val;
    uint32_t vlen;
} entry_t;

struct tutti__kv {
    entry_t **tab;
    size_t nbuckets, nentries;
};

static uint64_t hash(const char *k) { return tutti__fnv64_str(TUTTI__FNV64_INIT, k); }

static entry_t *lookup(tutti__kv_t *kv, const char *key)
{
    for (entry_t *e = kv->tab[hash(key) % kv->nbuckets]; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Keys grow with ranks * rounds; doubling keeps lookups O(1) as a job of thousands of ranks
 * piles them up. */
static void maybe_grow(tutti__kv_t *kv)
{
    if (kv->nentries < kv->nbuckets * 2)
        return;
    size_t nb = kv->nbuckets * 4;
    entry_t **t = calloc(nb, sizeof *t);
    if (t == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < kv->nbuckets; i++)
        for (entry_t *e = kv->tab[i], *n; e; e = n) {
            n = e->next;
            size_t j = hash(e->key) % nb;
            e->next = t[j];
            t[j] = e;
        }
    free(kv->tab);
    kv->tab = t;
    kv->nbuckets = nb;
}

/* set takes ownership of key and val; false when out of memory. */
static bool set(tutti__kv_t *kv, char *key, void *val, uint32_t vlen)
{
    entry_t *e = lookup(kv, key);
    if (e != NULL) {
        free(key);
        free(e->val);
        e->val = val;
        e->vlen = vlen;
        return true;
    }
    if ((e = malloc(sizeof *e)) == NULL)
        return false;
    size_t i = hash(key) % kv->nbuckets;
    *e = (entry_t){.next = kv->tab[i], .key = key, .val = val, .vlen = vlen};
    kv->tab[i] = e;
    kv->nentries++;
    maybe_grow(kv);
    return true;
}

bool tutti__store_core_init(tutti__store_core_t *k, int size, int port, const tutti__auth_t *auth)
{
    memset(k, 0, sizeof *k);
    k->size = size;
    k->port = port;
    k->auth = *auth;
    k->kv = calloc(1, sizeof *k->kv);
    k->done = calloc((size_t)size, 1);
    k->joined = calloc((size_t)size, 1);
    if (k->kv != NULL) {
        k->kv->nbuckets = 64;
        k->kv->tab = calloc(k->kv->nbuckets, sizeof *k->kv->tab);
    }
    if (k->kv == NULL || k->kv->tab == NULL || k->done == NULL || k->joined == NULL) {
        tutti__store_core_free(k);
        return false;
    }
    return true;
}

void tutti__store_core_free(tutti__store_core_t *k)
{
    if (k->kv != NULL && k->kv->tab != NULL)
        for (size_t i = 0; i < k->kv->nbuckets; i++)
            for (entry_t *e = k->kv->tab[i], *n; e; e = n) {
                n = e->next;
                free(e->key);
                free(e->val);
                free(e);
            }
    if (k->kv != NULL)
        free(k->kv->tab);
    free(k->kv);
    free(k->done);
    free(k->joined);
    memset(k->auth.key, 0, sizeof k->auth.key);
    k->kv = NULL;
    k->done = k->joined = NULL;
}

/* reply queues one reply on c (sent as the socket allows); on no memory the client is dropped. */
static void reply(tutti__sconn_t *c, uint32_t type, uint32_t a, const void *body, uint32_t blen)
{
    free(c->out);
    c->out = malloc(TUTTI__WIRE_HDR + (size_t)blen);
    c->olen = c->ooff = 0;
    if (c->out == NULL) {
        c->drop = true;
        return;
    }
    tutti__wire_put_hdr(c->out, type, a, blen);
    if (blen)
        memcpy(c->out + TUTTI__WIRE_HDR, body, blen);
    c->olen = TUTTI__WIRE_HDR + (size_t)blen;
}

/* refuse answers ERROR with text and drops the client. Refusals are logged, but a flood of
 * strangers writes only the first few and then every hundredth. */
static void refuse(tutti__store_core_t *k, tutti__sconn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(tutti__store_core_t *k, tutti__sconn_t *c, const char *fmt, ...)
{
    char text[TUTTI__WIRE_ERRTEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    reply(c, TUTTI__REP_ERROR, 0, text, (uint32_t)strlen(text));
    c->drop = true;
    k->refused++;
    if (k->refused <= 4 || k->refused % 100 == 0)
        TUTTI__LOG(TUTTI__LOG_WARN, "rendezvous store on port %d refused a client (%u so far): %s",
                   k->port, k->refused, text);
}

bool tutti__store_conn_open(tutti__store_core_t *k, tutti__sconn_t *c, int fd, bool peer_local,
                            double now)
{
    (void)k;
    *c = (tutti__sconn_t){.fd = fd, .rank = -1, .peer_local = peer_local, .since = now};
    if (!tutti__random(c->ns, sizeof c->ns))
        return false;
    uint32_t flags = k->auth.mode == TUTTI__AUTH_SECRET ? TUTTI__WIRE_STRICT : TUTTI__WIRE_HOSTFILE;
    reply(c, TUTTI__REP_CHALLENGE, flags, c->ns, sizeof c->ns);
    return c->out != NULL;
}

void tutti__store_conn_want(const tutti__sconn_t *c, uint8_t **p, size_t *n)
{
    if (c->olen != 0 || c->drop) {
        *p = NULL;
        *n = 0;
    } else if (c->hgot < TUTTI__WIRE_HDR) {
        *p = (uint8_t *)c->hdr + c->hgot;
        *n = TUTTI__WIRE_HDR - c->hgot;
    } else {
        *p = c->body + c->bgot;
        *n = c->bneed - c->bgot;
    }
}

void tutti__store_conn_sent(tutti__sconn_t *c, size_t n)
{
    c->ooff += n;
    if (c->ooff >= c->olen) {
        free(c->out);
        c->out = NULL;
        c->olen = c->ooff = 0;
    }
}

static void mark_done(tutti__store_core_t *k, int rank)
{
    if (rank >= 0 && !k->done[rank]) {
        k->done[rank] = 1;
        k->ndone++;
    }
}

/* doom records, once, why the rendezvous can no longer end (a rank of the job that hung up
 * before its close, that reported its creation failed, or that can never join), under a key no
 * rank writes (ranks' keys travel as 32 hex digits): every waiting rank asks for it between its
 * polls and fails at once with status st, naming the cause, instead of waiting for its timeout
 * and saying the rank never arrived. */
static void doom(tutti__store_core_t *k, tutti_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void doom(tutti__store_core_t *k, tutti_status_t st, const char *fmt, ...)
{
    if (k->doomed)
        return;
    k->doomed = true;
    k->doomed_at = tutti__now();
    char text[TUTTI__WIRE_ERRTEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t len = strlen(text);
    char *key = strdup(TUTTI__STORE_DOOMED_KEY);
    uint8_t *val = malloc(4 + len);
    if (val != NULL) {
        tutti__wire_put32(val, (uint32_t)-st);
        memcpy(val + 4, text, len);
    }
    if (key == NULL || val == NULL || !set(k->kv, key, val, (uint32_t)(4 + len))) {
        free(key);
        free(val);
    }
}

/* failed records rank's report that its creation failed (REQ_FAIL): its status, when it is one
 * of the rendezvous' own (the others' rendezvous failed for the same reason), else "a peer
 * failed", and its text, cut to what is printable: it comes from another process. */
static void failed(tutti__store_core_t *k, tutti__sconn_t *c, const uint8_t *body)
{
    char text[TUTTI__WIRE_ERRTEXT_MAX];
    size_t n = c->b < sizeof text - 1 ? c->b : sizeof text - 1;
    tutti__wire_printable(text, body, n);
    tutti_status_t st = tutti__wire_relayed_status(c->a);
    doom(k, st, "rank %d's creation failed: %s", c->rank, n ? text : "(it gave no reason)");
    mark_done(k, c->rank);
}

void tutti__store_conn_close(tutti__store_core_t *k, tutti__sconn_t *c)
{
    if (c->rank >= 0) {
        if (!k->done[c->rank])
            doom(k, TUTTI_ERR_PEER_FAILED, "rank %d connected to the rendezvous store and then hung up before it was done "
                    "with it (its creation failed, and its own error says why; or it was killed "
                    "or crashed)",
                 c->rank);
        mark_done(k, c->rank);
        k->joined[c->rank] = 0;
    }
    if (c->body != c->hello)
        free(c->body);
    free(c->out);
    c->body = NULL;
    c->out = NULL;
    c->olen = c->ooff = 0;
    c->rank = -1;
}

/* hello admits a rank, in this order: the same job, the secret proven (or, in a HOST job, a
 * client from another host, which cannot hold it), and only then the size and rank, so that a
 * stranger learns nothing about the job from a refusal. */
static void hello(tutti__store_core_t *k, tutti__sconn_t *c)
{
    const uint8_t *b = c->hello;
    uint32_t flags = tutti__wire_get32(b + TUTTI__WIRE_HELLO_FLAGS);
    const uint8_t *job = b + TUTTI__WIRE_HELLO_JOB, *nc = b + TUTTI__WIRE_HELLO_NONCE;
    int r = (int)c->a, n = (int)c->b;
    if (c->rank >= 0) {
        refuse(k, c, "rank %d said hello twice", c->rank);
        return;
    }
    if (!tutti__ct_equal(job, k->auth.job, TUTTI__AUTH_JOB)) {
        refuse(k, c, "the rendezvous store on port %d serves another job (its launcher's job id "
                     "differs): set MASTER_PORT to this job's port",
               k->port);
        return;
    }
    if (flags & TUTTI__WIRE_ASK_JOB) {
        reply(c, TUTTI__REP_ERROR, 0, TUTTI__WIRE_SAME_JOB, sizeof TUTTI__WIRE_SAME_JOB - 1);
        c->drop = true;
        return;
    }
    bool proof = (flags & TUTTI__WIRE_PROOF) != 0;
    if (proof) {
        uint8_t want[32];
        tutti__auth_client_mac(k->auth.key, c->ns, nc, c->a, c->b, job, flags, want);
        if (!tutti__ct_equal(want, b + TUTTI__WIRE_HELLO_MAC, sizeof want)) {
            __atomic_add_fetch(&k->unauthed, 1, __ATOMIC_RELAXED);
            refuse(k, c, "authentication failed: the client does not hold this job's secret "
                         "(%s): another job on this port, or a TUTTI_JOB_TOKEN that differs "
                         "between ranks",
                   k->auth.source);
            return;
        }
    } else if (k->auth.mode == TUTTI__AUTH_SECRET || c->peer_local) {
        __atomic_add_fetch(&k->unauthed, 1, __ATOMIC_RELAXED);
        refuse(k, c, "authentication required: this job's ranks prove its secret (%s), and the "
                     "client offered no proof",
               k->auth.source);
        return;
    }
    if (flags & TUTTI__WIRE_RIVAL) {
        if (!proof) {
            refuse(k, c, "a client said it was given rank 0 too, without proving the job's "
                         "secret");
            return;
        }
        /* The rival's ranks and this job's may already have taken each other's places: fail
         * every rank of both, loudly, rather than let a mixed group compute. (A rendezvous
         * failing already for another reason keeps that reason, and the rival is not told it
         * made this one fail.) */
        bool already = k->doomed;
        doom(k, TUTTI_ERR_BOOTSTRAP,
             "a second process given rank 0 (pid %u, world size %u) found this job's rendezvous "
             "store on port %d and its secret file: two jobs started from one terminal or script "
             "share this MASTER_PORT (or one job gave rank 0 twice), which tutti cannot tell "
             "apart without a launcher's job id, and a rank of either may have joined the "
             "other's; every rank fails rather than mix them: give each job its own MASTER_PORT, "
             "or TUTTI_JOB_TOKEN",
             c->a, c->b, k->port);
        if (already)
            reply(c, TUTTI__REP_ERROR, 0, "failing already", sizeof "failing already" - 1);
        else
            reply(c, TUTTI__REP_ERROR, 0, TUTTI__WIRE_TOLD, sizeof TUTTI__WIRE_TOLD - 1);
        c->drop = true;
        return;
    }
    if (n != k->size) {
        refuse(k, c, "the rendezvous store on port %d serves a job of %d ranks, but rank %d was "
                     "started with a world size of %d: WORLD_SIZE differs between ranks",
               k->port, k->size, r, n);
        doom(k, TUTTI_ERR_BOOTSTRAP,
             "rank %d of this job was started with a world size of %d, rank 0 with %d: "
             "WORLD_SIZE differs between ranks",
             r, n, k->size);
    }
    else if (r < 0 || r >= k->size)
        refuse(k, c, "rank %d is out of range for a job of %d ranks", r, k->size);
    else if (k->done[r] || k->joined[r]) {
        refuse(k, c, "rank %d already connected to the rendezvous store on port %d: two "
                     "processes were given the same rank, or two jobs started from one "
                     "terminal or script share this MASTER_PORT (give each its own port, or "
                     "TUTTI_JOB_TOKEN)",
               r, k->port);
        /* It proved the job's secret: the job's own launch gave one rank twice, so another
         * is missing, and the others would wait for it until their timeout. (Once every rank
         * has its communicator, a late duplicate can harm none: only the waits still going
         * fail.) */
        if (proof)
            doom(k, TUTTI_ERR_BOOTSTRAP, "two processes of this job were given rank %d: every "
                 "rank's RANK (or the launcher's rank variable) must be unique; or two jobs "
                 "started from one terminal or script share this MASTER_PORT, which tutti "
                 "cannot tell apart without launcher ids: give each its own port, or "
                 "TUTTI_JOB_TOKEN", r);
    }
    else {
        c->rank = r;
        k->joined[r] = 1;
        k->nadmitted++;
        uint8_t mac[32] = {0};
        if (proof)
            tutti__auth_server_mac(k->auth.key, c->ns, nc, c->a, c->b, job, mac);
        else if (!k->warned_remote) {
            k->warned_remote = true;
            TUTTI__LOG(TUTTI__LOG_WARN,
                       "rendezvous store on port %d: rank %d joined from another host without "
                       "proving a secret (the job brought none): any host that reaches this "
                       "port could have; set TUTTI_JOB_TOKEN for every rank (docs/security.md)",
                       k->port, r);
        }
        reply(c, TUTTI__REP_OK, 0, mac, sizeof mac);
    }
}

/* handle acts on one complete request of c (its body in c->body). */
static void handle(tutti__store_core_t *k, tutti__sconn_t *c)
{
    uint8_t *body = c->body;
    c->body = NULL;
    switch (c->type) {
    case TUTTI__REQ_HELLO:
        hello(k, c);
        return; /* the body was c->hello */
    case TUTTI__REQ_SET: {
        char *key = malloc(c->a + 1);
        void *val = malloc(c->b ? c->b : 1);
        if (key == NULL || val == NULL) {
            free(key);
            free(val);
            refuse(k, c, "rank 0 ran out of memory storing a value of %u bytes", c->b);
            break;
        }
        memcpy(key, body, c->a);
        key[c->a] = '\0';
        if (key[0] == '!') { /* the store's own keys (TUTTI__STORE_DOOMED_KEY): no rank's */
            free(key);
            free(val);
            refuse(k, c, "rank %d tried to set one of the store's own keys (they begin with '!'):"
                   " is it running the same tutti?", c->rank);
            break;
        }
        memcpy(val, body + c->a, c->b);
        if (!set(k->kv, key, val, c->b)) {
            free(key);
            free(val);
            refuse(k, c, "rank 0 ran out of memory storing a value of %u bytes", c->b);
        } else
            reply(c, TUTTI__REP_OK, 0, NULL, 0);
        break;
    }
    case TUTTI__REQ_GET: {
        char key[TUTTI__WIRE_KEY_MAX + 1];
        memcpy(key, body, c->a);
        key[c->a] = '\0';
        entry_t *e = lookup(k->kv, key);
        if (e)
            reply(c, TUTTI__REP_VALUE, 0, e->val, e->vlen);
        else
            reply(c, TUTTI__REP_NOTFOUND, 0, NULL, 0);
        break;
    }
    case TUTTI__REQ_CLOSE:
        mark_done(k, c->rank);
        break;
    case TUTTI__REQ_FAIL:
        failed(k, c, body);
        break;
    }
    free(body);
}

/* on_header checks a complete header and prepares to read the body; on a refusal the client is
 * to be dropped once the error reply has gone. Before the hello has passed only a hello is
 * read, into its fixed place: nothing a stranger says makes the server allocate. */
static void on_header(tutti__store_core_t *k, tutti__sconn_t *c)
{
    uint32_t w[4];
    tutti__wire_get_hdr(c->hdr, w);
    c->type = w[1];
    c->a = w[2];
    c->b = w[3];
    c->bgot = 0;
    c->bneed = 0;
    if (w[0] != TUTTI__WIRE_MAGIC) {
        refuse(k, c, "a client spoke another protocol (not a tutti rank, or another version)");
        return;
    }
    if (c->rank < 0 && c->type != TUTTI__REQ_HELLO) {
        refuse(k, c, "a client sent request %u before its hello passed (not a tutti rank?)",
               c->type);
        return;
    }
    switch (c->type) {
    case TUTTI__REQ_HELLO:
        c->bneed = TUTTI__WIRE_HELLO_BODY;
        c->body = c->hello;
        return;
    case TUTTI__REQ_CLOSE:
        return;
    case TUTTI__REQ_FAIL:
        if (c->b > TUTTI__WIRE_ERRTEXT_MAX) {
            refuse(k, c, "a failure report of %u bytes is over the limit of %d", c->b,
                   TUTTI__WIRE_ERRTEXT_MAX);
            return;
        }
        c->bneed = c->b;
        if (c->bneed > 0 && (c->body = malloc(c->bneed)) == NULL)
            refuse(k, c, "rank 0 ran out of memory reading a request of %zu bytes", c->bneed);
        return;
    case TUTTI__REQ_SET:
    case TUTTI__REQ_GET:
        if (c->a == 0 || c->a > TUTTI__WIRE_KEY_MAX) {
            refuse(k, c, "a key of %u bytes is outside 1..%d", c->a, TUTTI__WIRE_KEY_MAX);
            return;
        }
        if (c->type == TUTTI__REQ_SET && c->b > TUTTI__WIRE_VAL_MAX) {
            refuse(k, c, "a value of %u bytes is over the store's limit of %u", c->b,
                   TUTTI__WIRE_VAL_MAX);
            return;
        }
        c->bneed = c->a + (c->type == TUTTI__REQ_SET ? (size_t)c->b : 0);
        if ((c->body = malloc(c->bneed)) == NULL)
            refuse(k, c, "rank 0 ran out of memory reading a request of %zu bytes", c->bneed);
        return;
    default:
        refuse(k, c, "unknown request %u", c->type);
    }
}

void tutti__store_conn_got(tutti__store_core_t *k, tutti__sconn_t *c, size_t n)
{
    if (c->hgot < TUTTI__WIRE_HDR) {
        c->hgot += n;
        if (c->hgot < TUTTI__WIRE_HDR)
            return;
        on_header(k, c);
        if (c->drop)
            return; /* the error reply goes out, then the client is dropped */
    } else
        c->bgot += n;
    if (c->bgot == c->bneed) {
        c->hgot = 0;
        handle(k, c);
    }
}
