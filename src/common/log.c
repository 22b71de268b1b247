/* log.c: leveled logging to stderr, set by CCL_LOG_LEVEL (none, error, warn, info, debug, trace). */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "common.h"

int tutti__log_level = TUTTI__LOG_WARN;

/* The level names, in level order: CCL_LOG_LEVEL takes them, log lines show them in capitals. */
static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
#define NLEVELS ((int)(sizeof names / sizeof names[0]))

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_level(void)
{
    const char *v = tutti__env_get("CCL_LOG_LEVEL");
    /* none: not even errors, for a program that reports what the calls return itself (every
     * error is also in the call's status and text) */
    if (v != NULL && strcmp(v, "none") == 0)
        __atomic_store_n(&tutti__log_level, -1, __ATOMIC_RELAXED);
    for (int i = 0; v != NULL && i < NLEVELS; i++)
        if (strcmp(v, names[i]) == 0)
            __atomic_store_n(&tutti__log_level, i, __ATOMIC_RELAXED);
}

void tutti__log_init(void) { pthread_once(&once, read_level); }

void tutti__log(int level, const char *fmt, ...)
{
    const char *name = names[level < 0 ? 0 : level >= NLEVELS ? NLEVELS - 1 : level];
    char tag[8];
    size_t i = 0;
    for (; name[i] != '\0' && i < sizeof tag - 1; i++)
        tag[i] = (char)toupper((unsigned char)name[i]);
    tag[i] = '\0';
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "tutti %d %s: ", (int)getpid(), tag);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
