/* check_copy.c: the streaming copy (kernels/copy.c) against memcpy, byte for byte, at every
 * alignment of source and destination and lengths around the 64-byte lines, and that it writes
 * nothing outside the destination. */
#include <check.h>

#include "check_main.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/kernels.h"

enum { GUARD = 128 };

START_TEST(test_exact)
{
    const size_t lens[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 4095, 4096, 65537};
    const size_t maxlen = 65537 + 64;
    unsigned char *src = malloc(maxlen + 2 * GUARD), *dst = malloc(maxlen + 2 * GUARD);
    ck_assert(src != NULL && dst != NULL);
    for (size_t i = 0; i < maxlen + 2 * GUARD; i++)
        src[i] = (unsigned char)(i * 131u + 7u);
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (size_t so = 0; so < 64; so += 7)
            for (size_t d0 = 0; d0 < 64; d0 += 5) {
                memset(dst, 0xA5, GUARD + d0 + lens[l] + GUARD);
                tutti__copy_stream(dst + GUARD + d0, src + GUARD + so, lens[l]);
                ck_assert_msg(memcmp(dst + GUARD + d0, src + GUARD + so, lens[l]) == 0,
                              "len %zu, source offset %zu, destination offset %zu", lens[l], so,
                              d0);
                size_t bad = SIZE_MAX;
                for (size_t i = 0; i < GUARD + d0 && bad == SIZE_MAX; i++)
                    bad = dst[i] == 0xA5 ? bad : i;
                for (size_t i = GUARD + d0 + lens[l]; i < GUARD + d0 + lens[l] + GUARD; i++)
                    bad = dst[i] == 0xA5 || bad != SIZE_MAX ? bad : i;
                ck_assert_msg(bad == SIZE_MAX, "byte %zu outside the destination written "
                              "(len %zu, offsets %zu, %zu)", bad, lens[l], so, d0);
            }
    free(src);
    free(dst);
}
END_TEST

START_TEST(test_copy_out)
{
    /* Both sides of the threshold give memcpy's bytes. */
    const size_t sizes[] = {4096, TUTTI__STREAM_MIN + 3};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        unsigned char *s = malloc(n), *d = calloc(n, 1);
        ck_assert(s != NULL && d != NULL);
        for (size_t i = 0; i < n; i++)
            s[i] = (unsigned char)(i ^ (i >> 9));
        tutti__copy_out(d + 1, s + 3, n - 3, n);
        ck_assert(memcmp(d + 1, s + 3, n - 3) == 0);
        ck_assert(d[0] == 0 && d[n - 2] == 0 && d[n - 1] == 0);
        free(s);
        free(d);
    }
}
END_TEST

static Suite *copy_suite(void)
{
    Suite *s = suite_create("copy");
    TCase *tc = tcase_create("copy");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_exact);
    tcase_add_test(tc, test_copy_out);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(copy_suite)
