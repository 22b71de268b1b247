/* replay.c: runs a fuzzing harness over every file of the directories (or files) it is given,
 * without libFuzzer: the corpus in the repository becomes a regression test of the ordinary
 * builds (and of their sanitizers). */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* A copy of exactly n bytes, so that ASan sees a read past the input. */
    uint8_t *copy = malloc(n ? n : 1);
    if (copy == NULL)
        return 1;
    memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
    return 0;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad |= run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            bad |= run_file(path);
            files++;
        }
        if (d != NULL)
            closedir(d);
    }
    printf("replay: %d inputs\n", files);
    if (files == 0) {
        fprintf(stderr, "replay: no inputs: the corpus is missing\n");
        return 1;
    }
    return bad;
}
