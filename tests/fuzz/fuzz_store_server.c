/* fuzz_store_server.c: fuzzes the rendezvous store's protocol as its server runs it
 * (src/bootstrap/store_proto.c), without sockets: up to four clients' bytes arrive in chunks of
 * any size, in any interleaving; a client may first pass a real handshake, so that requests
 * behind it are reached too. Invariants: nothing a client that has not passed its hello sends
 * makes the server allocate a body, a client is admitted only with a valid proof (or, in a
 * host-file job, from another host), a rank is held by one client at most, and every reply is a
 * well-formed message. */
#include <string.h>

#include "../../src/bootstrap/store_impl.h"
#include "../../src/common/sha256.h"
#include "fuzz.h"

#define NCONN 4
#define SIZE 4

static tutti__auth_t secret_auth, host_auth;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("CCL_LOG_LEVEL", "error", 1); /* refusals are the point here, not news */
    tutti__log_init();
    uint8_t key[TUTTI__AUTH_KEY];
    memset(key, 0xa5, sizeof key);
    tutti__auth_from_key(key, &secret_auth);
    host_auth = secret_auth;
    host_auth.mode = TUTTI__AUTH_HOST;
    return 0;
}

/* drain takes c's reply as a client would and checks it. */
static void drain(tutti__sconn_t *c)
{
    if (c->olen == 0)
        return;
    FUZZ_ASSERT(c->olen >= TUTTI__WIRE_HDR && c->ooff < c->olen);
    uint32_t w[4];
    tutti__wire_get_hdr(c->out, w);
    FUZZ_ASSERT(w[0] == TUTTI__WIRE_MAGIC);
    FUZZ_ASSERT(w[1] >= TUTTI__REP_OK && w[1] <= TUTTI__REP_CHALLENGE);
    FUZZ_ASSERT(TUTTI__WIRE_HDR + (size_t)w[3] == c->olen);
    tutti__store_conn_sent(c, c->olen);
    FUZZ_ASSERT(c->out == NULL && c->olen == 0);
}

/* feed gives c the bytes p[0..n) as the socket would, in the places conn_want names. */
static void feed(tutti__store_core_t *k, tutti__sconn_t *c, const uint8_t *p, size_t n)
{
    while (n > 0) {
        drain(c);
        uint8_t *dst;
        size_t want;
        tutti__store_conn_want(c, &dst, &want);
        if (want == 0)
            return; /* dropped: the rest is never read */
        size_t take = want < n ? want : n;
        memcpy(dst, p, take);
        int rank_before = c->rank;
        tutti__store_conn_got(k, c, take);
        p += take;
        n -= take;
        /* no allocation for a client that has not passed its hello */
        if (c->rank < 0)
            FUZZ_ASSERT(c->body == NULL || c->body == c->hello);
        if (rank_before < 0 && c->rank >= 0)
            FUZZ_ASSERT(k->joined[c->rank]);
    }
    drain(c);
}

/* hello_of writes into m a hello that passes: rank r's proof over c's challenge (with
 * TUTTI__WIRE_RIVAL in flags: a second rank 0's, r its pid). */
static size_t hello_of(const tutti__auth_t *a, const tutti__sconn_t *c, int r, uint32_t flags,
                       uint8_t *m)
{
    uint8_t *b = m + TUTTI__WIRE_HDR;
    memset(m, 0, TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY);
    tutti__wire_put_hdr(m, TUTTI__REQ_HELLO, (uint32_t)r, SIZE);
    flags |= TUTTI__WIRE_PROOF;
    tutti__wire_put32(b + TUTTI__WIRE_HELLO_FLAGS, flags);
    memcpy(b + TUTTI__WIRE_HELLO_JOB, a->job, TUTTI__AUTH_JOB);
    memset(b + TUTTI__WIRE_HELLO_NONCE, 0x3c, TUTTI__AUTH_NONCE);
    tutti__auth_client_mac(a->key, c->ns, b + TUTTI__WIRE_HELLO_NONCE, (uint32_t)r, SIZE, a->job,
                           flags, b + TUTTI__WIRE_HELLO_MAC);
    return TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t opt = data[0], authed = data[1];
    const tutti__auth_t *a = opt & 1 ? &host_auth : &secret_auth;
    tutti__store_core_t k;
    if (!tutti__store_core_init(&k, SIZE, 1, a))
        return 0;
    tutti__sconn_t c[NCONN];
    for (int i = 0; i < NCONN; i++) {
        FUZZ_ASSERT(tutti__store_conn_open(&k, &c[i], i, (opt >> (1 + i)) & 1, 0.0));
        drain(&c[i]);
        if (authed >> i & 1) {
            /* opt bit 5: connection 0 is a second rank 0 telling the store of itself */
            bool rival = i == 0 && (opt >> 5 & 1);
            uint8_t m[TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY];
            size_t n = hello_of(a, &c[i], (authed >> 4 ^ i) & 3, rival ? TUTTI__WIRE_RIVAL : 0,
                                m);
            feed(&k, &c[i], m, n);
            /* a proven rival dooms the rendezvous and is never admitted */
            if (rival)
                FUZZ_ASSERT(k.doomed && c[i].rank < 0 && c[i].drop);
        }
    }
    /* the rest: chunks of [connection, length, bytes] */
    const uint8_t *p = data + 2;
    size_t left = size - 2;
    while (left >= 2) {
        int i = p[0] % NCONN;
        size_t n = p[1] < left - 2 ? p[1] : left - 2;
        feed(&k, &c[i], p + 2, n);
        p += 2 + n;
        left -= 2 + n;
        if (c[i].drop) { /* the server closes it; a new client comes in its place */
            tutti__store_conn_close(&k, &c[i]);
            FUZZ_ASSERT(tutti__store_conn_open(&k, &c[i], i, (opt >> (1 + i)) & 1, 0.0));
            drain(&c[i]);
        }
    }
    /* one client per rank at most, and every admitted client accounted for */
    int held[SIZE] = {0};
    for (int i = 0; i < NCONN; i++)
        if (c[i].rank >= 0) {
            FUZZ_ASSERT(c[i].rank < SIZE);
            held[c[i].rank]++;
            FUZZ_ASSERT(k.joined[c[i].rank]);
        }
    for (int r = 0; r < SIZE; r++)
        FUZZ_ASSERT(held[r] <= 1);
    /* a client that entered without a proof did so only as a remote client of a host-file job
     * (connection 0 after a rival: the new client that took its place) */
    for (int i = 0; i < NCONN; i++)
        if (c[i].rank >= 0 && (!(authed >> i & 1) || (i == 0 && (opt >> 5 & 1))))
            FUZZ_ASSERT(a->mode == TUTTI__AUTH_HOST && !c[i].peer_local);
    for (int i = 0; i < NCONN; i++)
        tutti__store_conn_close(&k, &c[i]);
    FUZZ_ASSERT(k.ndone <= SIZE);
    tutti__store_core_free(&k);
    return 0;
}
