/* parse_size.h: tutti__parse_size, the one parser of byte counts ("4096", "64K", "16M", "1G"),
 * header-only so that the library (CCL_<COLL> ranges) and the benchmarks (-b, -e) share it
 * without the library exporting anything but tutti_*. */
#ifndef TUTTI_PARSE_SIZE_H
#define TUTTI_PARSE_SIZE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* tutti__parse_size parses a decimal count with an optional binary unit (k, m, g in either case:
 * 2^10, 2^20, 2^30) and an optional trailing B, into *out. It returns false, leaving *out as it
 * was, for anything else: no leading digit (so no sign or space), other trailing characters, or
 * a value out of range. */
static inline bool tutti__parse_size(const char *s, size_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return false;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (shift && x > (SIZE_MAX >> shift)))
        return false;
    *out = (size_t)(x << shift);
    return true;
}

#endif /* TUTTI_PARSE_SIZE_H */
