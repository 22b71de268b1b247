/* check_sha256.c: SHA-256 and HMAC-SHA-256 (src/common/sha256.c) against the published test
 * vectors (FIPS 180-4's examples, RFC 4231's HMAC cases), split at every point, and the
 * helpers that go with them. */
#include <check.h>
#include "check_main.h"
#include <stdlib.h>
#include <string.h>

#include "../src/common/sha256.h"

static void hexof(const uint8_t *d, char out[65]) { tutti__hex(d, 32, out); }

static void check_hash(const void *msg, size_t len, const char *want)
{
    uint8_t d[32];
    char got[65];
    tutti__sha256(msg, len, d);
    hexof(d, got);
    ck_assert_str_eq(got, want);
    /* The streaming interface gives the same digest however the message is cut. */
    for (size_t cut = 0; cut <= len && len < 200; cut++) {
        tutti__sha256_t s;
        tutti__sha256_init(&s);
        tutti__sha256_update(&s, msg, cut);
        tutti__sha256_update(&s, (const char *)msg + cut, len - cut);
        tutti__sha256_final(&s, d);
        hexof(d, got);
        ck_assert_msg(strcmp(got, want) == 0, "cut at %zu of %zu: %s", cut, len, got);
    }
}

START_TEST(test_sha256_vectors)
{
    check_hash("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_hash("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_hash(m448, strlen(m448),
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu";
    check_hash(m896, strlen(m896),
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* One million 'a', fed in uneven pieces. */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    check_hash(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    tutti__sha256_t s;
    tutti__sha256_init(&s);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 1000 + 1)
        tutti__sha256_update(&s, a + off, off + step > 1000000 ? 1000000 - off : step);
    uint8_t d[32];
    char got[65];
    tutti__sha256_final(&s, d);
    hexof(d, got);
    ck_assert_str_eq(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}
END_TEST

static void check_hmac(const void *key, size_t klen, const void *msg, size_t mlen,
                       const char *want)
{
    uint8_t d[32];
    char got[65];
    tutti__hmac(key, klen, msg, mlen, d);
    hexof(d, got);
    ck_assert_str_eq(got, want);
    tutti__hmac_t m;
    tutti__hmac_init(&m, key, klen);
    for (size_t i = 0; i < mlen; i++)
        tutti__hmac_update(&m, (const char *)msg + i, 1);
    tutti__hmac_final(&m, d);
    hexof(d, got);
    ck_assert_str_eq(got, want);
}

/* RFC 4231, test cases 1, 2, 3, 4, 6 and 7 (5 truncates the output, which tutti never does). */
START_TEST(test_hmac_rfc4231)
{
    uint8_t k[131], m[50];
    memset(k, 0x0b, 20);
    check_hmac(k, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(k, 0xaa, 20);
    memset(m, 0xdd, 50);
    check_hmac(k, 20, m, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++)
        k[i] = (uint8_t)(i + 1);
    memset(m, 0xcd, 50);
    check_hmac(k, 25, m, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(k, 0xaa, 131);
    const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(k, 131, t6, strlen(t6),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *t7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the HMAC "
                     "algorithm.";
    check_hmac(k, 131, t7, strlen(t7),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}
END_TEST

START_TEST(test_helpers)
{
    uint8_t a[32], b[32];
    ck_assert(tutti__random(a, sizeof a));
    ck_assert(tutti__random(b, sizeof b));
    ck_assert_msg(memcmp(a, b, 32) != 0, "two draws of 256 random bits are equal");
    ck_assert(tutti__ct_equal(a, a, 32));
    for (int i = 0; i < 32; i++) {
        memcpy(b, a, 32);
        b[i] ^= 0x10;
        ck_assert_msg(!tutti__ct_equal(a, b, 32), "byte %d differs but compares equal", i);
    }
    char h[9];
    tutti__hex("\x01\xab\xff\x00", 4, h);
    ck_assert_str_eq(h, "01abff00");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sha256");
    TCase *tc = tcase_create("vectors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sha256_vectors);
    tcase_add_test(tc, test_hmac_rfc4231);
    tcase_add_test(tc, test_helpers);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(suite)
