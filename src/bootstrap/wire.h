/* wire.h: the rendezvous store's wire format, which its server (store_server.c, store_proto.c)
 * and its client (store_client.c) speak over TCP. */
#ifndef TUTTI_BOOTSTRAP_WIRE_H
#define TUTTI_BOOTSTRAP_WIRE_H

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#include "auth.h"

/*
 * Every message is a header of four big-endian u32 {magic, type, a, b} followed by a body.
 *
 * The handshake comes first, and the server reveals nothing before it:
 *   server: CHALLENGE (a = flags: TUTTI__WIRE_STRICT when every rank must prove the secret,
 *           TUTTI__WIRE_HOSTFILE when ranks of its host prove rank 0's file's; b = 32) + a nonce.
 *   client: HELLO (a = rank, b = size) + TUTTI__WIRE_HELLO_BODY bytes: flags (u32; PROOF when
 *           the MAC is real), the job id, the client's nonce, the MAC (auth.h).
 *   server: OK (b = 32) + the server's MAC over the same (zeros to a client without proof), or
 *           ERROR (b = length; text) and it hangs up. The size, the ranks present and every key
 *           stay hidden from a client that has not passed.
 * Then requests: SET (a = key length, b = value length; key then value), GET (a = key length;
 * key), CLOSE (no reply), FAIL (no reply; a = the rank's status, negated; b = length; the
 * text of the error that ended its creation: the server records it as the reason the rendezvous
 * cannot end, for the ranks still waiting); replies: OK, VALUE (b = length; value), NOTFOUND,
 * ERROR (b = length; text). One request is in flight per client, so the server reads a client only once its
 * previous reply has gone out. Neither side trusts a length it reads: keys are
 * 1..TUTTI__WIRE_KEY_MAX bytes, values at most TUTTI__WIRE_VAL_MAX, and the server reads the body
 * of a request only from a client that has passed the handshake.
 */
#define TUTTI__WIRE_MAGIC 0x54545332u /* "TTS2" */
#define TUTTI__WIRE_HDR 16
#define TUTTI__WIRE_KEY_MAX 256
#define TUTTI__WIRE_VAL_MAX (1u << 20)
#define TUTTI__WIRE_ERRTEXT_MAX 512

/* The key under which the store tells waiting ranks that the rendezvous cannot end, and why
 * (store_proto.c's doom; tutti__store_doomed asks for it): the status they are to return (u32,
 * negated) then the text. No rank's key looks like it: those travel as 32 hex digits. */
#define TUTTI__STORE_DOOMED_KEY "!doomed"

enum { TUTTI__REQ_HELLO = 1, TUTTI__REQ_SET, TUTTI__REQ_GET, TUTTI__REQ_CLOSE, TUTTI__REQ_FAIL };
enum {
    TUTTI__REP_OK = 100,
    TUTTI__REP_VALUE,
    TUTTI__REP_NOTFOUND,
    TUTTI__REP_ERROR,
    TUTTI__REP_CHALLENGE,
};

/* CHALLENGE flags */
#define TUTTI__WIRE_STRICT 1u
#define TUTTI__WIRE_HOSTFILE 2u
/* HELLO flags */
#define TUTTI__WIRE_PROOF 1u
/* ASK_JOB: the client only asks whether the store serves its job (it found no secret file for
 * the store: another job's, or its own job's previous store saying goodbye). The server admits
 * no one: it refuses another job's client as any, and answers its own job's ERROR with the text
 * TUTTI__WIRE_SAME_JOB, quietly. */
#define TUTTI__WIRE_ASK_JOB 2u
#define TUTTI__WIRE_SAME_JOB "same job"
/* RIVAL (with PROOF only; a = the client's pid, b = its world size): the client is a second
 * process given rank 0 that found the port held by this store and could read its secret file: a
 * job it cannot be told apart from (two jobs started from one terminal or script on one
 * MASTER_PORT, or one job that gave rank 0 twice). The server dooms the rendezvous, saying so,
 * admits no one, and answers ERROR with the text TUTTI__WIRE_TOLD (another text where the
 * rendezvous was failing already). */
#define TUTTI__WIRE_RIVAL 4u
#define TUTTI__WIRE_TOLD "told"

/* The HELLO body: flags, job id, client nonce, MAC. */
#define TUTTI__WIRE_HELLO_FLAGS 0
#define TUTTI__WIRE_HELLO_JOB 4
#define TUTTI__WIRE_HELLO_NONCE (TUTTI__WIRE_HELLO_JOB + TUTTI__AUTH_JOB)
#define TUTTI__WIRE_HELLO_MAC (TUTTI__WIRE_HELLO_NONCE + TUTTI__AUTH_NONCE)
#define TUTTI__WIRE_HELLO_BODY (TUTTI__WIRE_HELLO_MAC + 32)

/* tutti__wire_relayed_status is the status with which a rank fails on hearing that another's
 * creation failed with the status whose negation is neg (a number another process sent): the
 * same for the rendezvous' own failures, BOOTSTRAP and TIMEOUT (its failed as this one's would
 * have), else PEER_FAILED. */
static inline tutti_status_t tutti__wire_relayed_status(uint32_t neg)
{
    return neg == (uint32_t)-TUTTI_ERR_BOOTSTRAP ? TUTTI_ERR_BOOTSTRAP
           : neg == (uint32_t)-TUTTI_ERR_TIMEOUT ? TUTTI_ERR_TIMEOUT
                                                 : TUTTI_ERR_PEER_FAILED;
}

/* tutti__wire_printable copies n bytes that another process sent into dst (n + 1 bytes; dst
 * may be src itself), each byte outside printable ASCII made '?', and ends it with '\0': its
 * text goes into an error message, where a control byte could rewrite what the terminal shows. */
static inline void tutti__wire_printable(char *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? (char)src[i] : '?';
    dst[n] = '\0';
}

/* tutti__wire_put_hdr writes a header into p (TUTTI__WIRE_HDR bytes). */
static inline void tutti__wire_put_hdr(uint8_t *p, uint32_t type, uint32_t a, uint32_t b)
{
    uint32_t w[4] = {htonl(TUTTI__WIRE_MAGIC), htonl(type), htonl(a), htonl(b)};
    memcpy(p, w, TUTTI__WIRE_HDR);
}

/* tutti__wire_get_hdr reads the header at p into w[] = {magic, type, a, b}, in host order; the
 * caller checks the magic. */
static inline void tutti__wire_get_hdr(const uint8_t *p, uint32_t w[4])
{
    memcpy(w, p, TUTTI__WIRE_HDR);
    for (int i = 0; i < 4; i++)
        w[i] = ntohl(w[i]);
}

static inline void tutti__wire_put32(uint8_t *p, uint32_t x)
{
    uint32_t be = htonl(x);
    memcpy(p, &be, 4);
}

static inline uint32_t tutti__wire_get32(const uint8_t *p)
{
    uint32_t be;
    memcpy(&be, p, 4);
    return ntohl(be);
}

#endif /* TUTTI_BOOTSTRAP_WIRE_H */
