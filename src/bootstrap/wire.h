/* wire.h: the rendezvous store's wire format, which its server (store_server.c) and its client
 * (store_client.c) speak over TCP. */
#ifndef TUTTI_BOOTSTRAP_WIRE_H
#define TUTTI_BOOTSTRAP_WIRE_H

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

/*
 * Every message is a header of four big-endian u32 {magic, type, a, b} followed by a body.
 * Requests: HELLO (a = rank, b = size), SET (a = key length, b = value length; key then
 * value), GET (a = key length; key), CLOSE (no reply). Replies: OK, VALUE (b = length; value),
 * NOTFOUND, ERROR (b = length; text). One request is in flight per client, so the server reads
 * a client only once its previous reply has gone out. Neither side trusts a length it reads:
 * keys are 1..TUTTI__WIRE_KEY_MAX bytes, values at most TUTTI__WIRE_VAL_MAX.
 */
#define TUTTI__WIRE_MAGIC 0x54545331u /* "TTS1" */
#define TUTTI__WIRE_HDR 16
#define TUTTI__WIRE_KEY_MAX 256
#define TUTTI__WIRE_VAL_MAX (1u << 20)
#define TUTTI__WIRE_ERRTEXT_MAX 512

enum { TUTTI__REQ_HELLO = 1, TUTTI__REQ_SET, TUTTI__REQ_GET, TUTTI__REQ_CLOSE };
enum { TUTTI__REP_OK = 100, TUTTI__REP_VALUE, TUTTI__REP_NOTFOUND, TUTTI__REP_ERROR };

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

#endif /* TUTTI_BOOTSTRAP_WIRE_H */
