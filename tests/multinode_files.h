/* multinode_files.h: how a multinode test program (multinode_faults.c, multinode_shrink.c) and
 * tests/multinode.sh talk: small files in a directory the script gives (pid.R, ready.R, ...),
 * each written whole, and times on the wall clock, which the script's `date` reads too. */
#ifndef TUTTI_TEST_MULTINODE_FILES_H
#define TUTTI_TEST_MULTINODE_FILES_H

#include <stdio.h>
#include <time.h>

static inline double mn_now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* mn_touch writes text to DIR/WHAT.RANK through a temporary name: the script never reads half
 * a file. */
static inline void mn_touch(const char *dir, const char *what, int rank, const char *text)
{
    char p[4096], tmp[4200];
    snprintf(p, sizeof p, "%s/%s.%d", dir, what, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    fprintf(f, "%s\n", text);
    fclose(f);
    rename(tmp, p);
}

#endif /* TUTTI_TEST_MULTINODE_FILES_H */
