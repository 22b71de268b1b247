/* sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), the one hash and MAC tutti uses
 * to prove a job's secret at the rendezvous without sending it; plus random bytes and a
 * comparison that takes the same time wherever the inputs differ. */
#ifndef TUTTI_COMMON_SHA256_H
#define TUTTI_COMMON_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TUTTI__SHA256_LEN 32
#define TUTTI__SHA256_BLOCK 64

typedef struct tutti__sha256 {
    uint32_t h[8];
    uint64_t bytes;                     /* message length so far */
    uint8_t buf[TUTTI__SHA256_BLOCK];   /* a partial block */
    size_t nbuf;
} tutti__sha256_t;

/* tutti__sha256_init, _update, _final: the streaming interface; final writes 32 bytes. */
void tutti__sha256_init(tutti__sha256_t *s);
void tutti__sha256_update(tutti__sha256_t *s, const void *data, size_t len);
void tutti__sha256_final(tutti__sha256_t *s, uint8_t out[TUTTI__SHA256_LEN]);

/* tutti__sha256 hashes one buffer. */
void tutti__sha256(const void *data, size_t len, uint8_t out[TUTTI__SHA256_LEN]);

/* HMAC-SHA-256 with a key of any length (a longer one than a block is hashed first). */
typedef struct tutti__hmac {
    tutti__sha256_t inner, outer;
} tutti__hmac_t;

void tutti__hmac_init(tutti__hmac_t *m, const void *key, size_t keylen);
void tutti__hmac_update(tutti__hmac_t *m, const void *data, size_t len);
void tutti__hmac_final(tutti__hmac_t *m, uint8_t out[TUTTI__SHA256_LEN]);

/* tutti__hmac is HMAC-SHA-256 of one buffer. */
void tutti__hmac(const void *key, size_t keylen, const void *data, size_t len,
                 uint8_t out[TUTTI__SHA256_LEN]);

/* tutti__ct_equal compares n bytes in a time that does not depend on where they differ, so
 * that a forger learns nothing from how fast a wrong MAC is refused. */
bool tutti__ct_equal(const void *a, const void *b, size_t n);

/* tutti__random fills buf with n bytes from the kernel's random generator (getrandom); false
 * when it fails (errno says why), which callers turn into an error. */
bool tutti__random(void *buf, size_t n);

/* tutti__hex writes n bytes as 2n lowercase hex digits and a NUL into out. */
void tutti__hex(const void *bytes, size_t n, char *out);

#endif /* TUTTI_COMMON_SHA256_H */
