/* status.c: status texts, the per-thread last-error text (and the helpers that prefix, keep and
 * restore it, and list ranks in it), and the version string. */
#include <stdio.h>

#include "common.h"

static _Thread_local char tls_error[TUTTI__ERRLEN];

TUTTI_API const char *tutti_version(void)
{
#define STR_(x) #x
#define STR(x) STR_(x)
    return STR(TUTTI_VERSION_MAJOR) "." STR(TUTTI_VERSION_MINOR) "." STR(TUTTI_VERSION_PATCH);
#undef STR
#undef STR_
}

TUTTI_API const char *tutti_strerror(tutti_status_t status)
{
    switch (status) {
#define TUTTI_STATUS_CASE_(name, value, text)                                                  \
    case TUTTI_##name:                                                                         \
        return text;
        TUTTI_STATUS_MAP(TUTTI_STATUS_CASE_)
#undef TUTTI_STATUS_CASE_
    }
    return "unknown status code";
}

char *tutti__tls_error(void) { return tls_error; }

TUTTI_API const char *tutti_last_error(void) { return tls_error; }

static tutti_status_t vfmt(char *buf, tutti_status_t status, const char *fmt, va_list ap)
{
    vsnprintf(buf, TUTTI__ERRLEN, fmt, ap);
    return status;
}

tutti_status_t tutti__fmt_error(char *buf, tutti_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfmt(buf, status, fmt, ap);
    va_end(ap);
    return status;
}

tutti_status_t tutti__set_error(tutti_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfmt(tls_error, status, fmt, ap);
    va_end(ap);
    TUTTI__LOG(TUTTI__LOG_DEBUG, "error %d: %s", (int)status, tls_error);
    return status;
}

tutti_status_t tutti__prefix_error(tutti_status_t status, const char *fmt, ...)
{
    char why[TUTTI__ERRLEN];
    snprintf(why, sizeof why, "%s", tls_error);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tls_error, TUTTI__ERRLEN, fmt, ap);
    va_end(ap);
    if (n >= 0 && n < TUTTI__ERRLEN)
        snprintf(tls_error + n, TUTTI__ERRLEN - (size_t)n, ": %s", why);
    return status;
}

void tutti__append_error(const char *fmt, ...)
{
    size_t used = strlen(tls_error);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error + used, TUTTI__ERRLEN - used, fmt, ap);
    va_end(ap);
}

void tutti__save_error(tutti__saved_error_t *saved)
{
    memcpy(saved->text, tls_error, TUTTI__ERRLEN);
}

tutti_status_t tutti__restore_error(const tutti__saved_error_t *saved, tutti_status_t status)
{
    memcpy(tls_error, saved->text, TUTTI__ERRLEN);
    return status;
}

char *tutti__format_ranks(char *buf, size_t cap, const int *ranks, int n, int total)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? ", " : "", ranks[i]);
    if (total > n && len < cap)
        snprintf(buf + len, cap - len, ", ... (%d in all)", total);
    return buf;
}
