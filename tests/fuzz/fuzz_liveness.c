/* fuzz_liveness.c: fuzzes the reader of a liveness link (src/bootstrap/liveness.c: take(), what
 * a peer writes: goodbyes, heartbeats, failure notices and mail records), which shrink's
 * agreement now depends on. Whatever bytes come, cut into whatever pieces, nothing is read or
 * written out of bounds, no mail box holds more than the cap, and a malformed record stops the
 * stream (the link is then closed). And where the input describes records instead of raw
 * bytes (first byte odd), they are encoded as the sender does and fed in pieces: every mail
 * kind's last record comes back whole, with its count, and a failure notice and a goodbye (with its count of calls) are seen.
 *
 * The input: byte 0 picks the mode; then raw bytes, or records of [op, len, len bytes]; the
 * pieces' sizes come from the bytes themselves. */
#include "../../src/bootstrap/liveness.c"
#include "fuzz.h"

#define CAP_RANKS 4 /* the link's mail cap: 1024 + 4 x ranks */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("CCL_LOG_LEVEL", "error", 1);
    tutti__log_init();
    return 0;
}

static void check_peer(const tutti__liveness_t *l, const peer_t *p)
{
    FUZZ_ASSERT(p->rec_left <= FAIL_REC);
    FUZZ_ASSERT(p->fix_left <= ANS_REC && BYE_REC <= ANS_REC && ASK_REC <= ANS_REC);
    FUZZ_ASSERT(p->mhgot <= MAIL_HDR);
    FUZZ_ASSERT(p->mgot <= p->mneed && p->mneed <= l->mail_cap);
    for (int k = 0; k < TUTTI__LIVE_MAIL_KINDS; k++)
        FUZZ_ASSERT(p->box_len[k] <= l->mail_cap && (p->box_gen[k] == 0) == (p->box[k] == NULL));
}

/* feed gives p the n bytes of b in pieces of 1 + (a schedule byte % 64); false once the stream
 * is malformed. */
static bool feed(tutti__liveness_t *l, peer_t *p, const uint8_t *b, size_t n, uint8_t salt)
{
    size_t i = 0;
    unsigned k = salt;
    while (i < n) {
        size_t piece = 1 + (size_t)((b[i] ^ k) % 64);
        k = k * 33 + 7;
        if (piece > n - i)
            piece = n - i;
        if (!take(l, p, b + i, piece))
            return false;
        check_peer(l, p);
        i += piece;
    }
    return true;
}

static void free_peer(peer_t *p)
{
    free(p->mbuf);
    for (int k = 0; k < TUTTI__LIVE_MAIL_KINDS; k++)
        free(p->box[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    tutti__liveness_t l = {.rank = 0, .size = CAP_RANKS, .mail_cap = 1024 + 4 * CAP_RANKS};
    peer_t p = {.fd = -1};
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    if ((data[0] & 1) == 0) { /* raw bytes */
        (void)feed(&l, &p, in, n, data[0]);
        free_peer(&p);
        return 0;
    }
    /* Records, encoded as the sender does: op % 5 picks a heartbeat, a goodbye, a failure
     * notice, or a mail of kind len % 4 (op 3) whose payload is the next len bytes (up to the
     * cap, repeated from the input). */
    uint8_t *wire = malloc(n * (size_t)(2 + FAIL_REC + MAIL_HDR) + (size_t)l.mail_cap * 64 + 64);
    uint8_t *last[TUTTI__LIVE_MAIL_KINDS] = {NULL};
    size_t last_len[TUTTI__LIVE_MAIL_KINDS] = {0}, w = 0, nmail = 0;
    uint64_t count[TUTTI__LIVE_MAIL_KINDS] = {0};
    bool notice = false, bye = false;
    uint64_t bye_calls = 0; /* the first goodbye's: a second changes nothing */
    for (size_t i = 0; i + 1 < n && nmail < 64; i += 2) {
        uint8_t op = in[i] % 5, arg = in[i + 1];
        if (op == 0) {
            wire[w++] = BEAT;
        } else if (op == 1) {
            uint64_t calls = (uint64_t)arg * 0x0101010101010101ull ^ i;
            wire[w++] = BYE;
            put64(wire + w, calls);
            w += BYE_REC;
            if (!bye)
                bye_calls = calls;
            bye = true;
        } else if (op == 2) {
            wire[w++] = FAIL;
            for (int j = 0; j < FAIL_REC; j++)
                wire[w++] = (uint8_t)(arg + j);
            notice = true;
        } else {
            int kind = arg % TUTTI__LIVE_MAIL_KINDS;
            size_t len = ((size_t)arg * 37 + i) % (l.mail_cap + 1);
            wire[w++] = MAIL;
            wire[w++] = (uint8_t)kind;
            for (int j = 0; j < 4; j++)
                wire[w++] = (uint8_t)(len >> (8 * j));
            uint8_t *payload = wire + w;
            for (size_t j = 0; j < len; j++)
                wire[w++] = in[(i + j) % n];
            last[kind] = payload;
            last_len[kind] = len;
            count[kind]++;
            nmail++;
        }
    }
    FUZZ_ASSERT(feed(&l, &p, wire, w, data[0]));
    for (int k = 0; k < TUTTI__LIVE_MAIL_KINDS; k++) {
        FUZZ_ASSERT(p.box_gen[k] == count[k]);
        if (count[k] > 0)
            FUZZ_ASSERT(p.box_len[k] == last_len[k] &&
                        (last_len[k] == 0 || memcmp(p.box[k], last[k], last_len[k]) == 0));
    }
    FUZZ_ASSERT(!p.in_mail && p.rec_left == 0);
    FUZZ_ASSERT(!notice || p.fail_status != 0);
    FUZZ_ASSERT(p.fix_left == 0 && (p.state == PEER_LEFT) == bye);
    FUZZ_ASSERT(!bye || p.bye_calls == bye_calls);
    free(wire);
    free_peer(&p);
    return 0;
}
