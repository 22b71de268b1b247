/* log.c: leveled logging to stderr, set by CCL_LOG_LEVEL (error, warn, info, debug, trace). */
#include <stdio.h>
#include <unistd.h>

#include "common.h"

int tutti__log_level = TUTTI__LOG_WARN;

void tutti__log(int level, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "tutti %d %s: ", (int)getpid(),
                     names[level < 0 ? 0 : level > 4 ? 4 : level]);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
