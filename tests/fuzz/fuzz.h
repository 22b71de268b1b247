/* fuzz.h: what every fuzzing harness in tests/fuzz/ defines: libFuzzer's entry points, which
 * libFuzzer drives (the fuzz build, scripts/test.sh) and replay.c drives over the corpus (the
 * ordinary builds' unit suite). A harness aborts when an invariant breaks. */
#ifndef TUTTI_TEST_FUZZ_H
#define TUTTI_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* FUZZ_ASSERT aborts with the broken invariant: libFuzzer saves the input as a crash. */
#define FUZZ_ASSERT(cond)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);       \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#endif /* TUTTI_TEST_FUZZ_H */
