/* ifaces.c: which network interface this rank uses to reach the others: TUTTI_SOCKET_IFNAME
 * (NCCL_SOCKET_IFNAME's syntax) when set, and the interface names behind addresses for the
 * info log. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

#include "discover.h"

bool tutti__ifname_match(const char *spec, const char *name)
{
    bool exclude = false, exact = false;
    if (*spec == '^')
        exclude = true, spec++;
    if (*spec == '=')
        exact = true, spec++;
    bool hit = false;
    for (const char *p = spec; *p != '\0' && !hit;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0)
            hit = exact ? strlen(name) == len && strncmp(name, p, len) == 0
                        : strncmp(name, p, len) == 0;
        p += len + (end != NULL);
    }
    return hit != exclude;
}

/* list_ipv4 writes "eth0 10.1.2.3, lo 127.0.0.1" (the interfaces that are up, with an IPv4
 * address) for messages. */
static void list_ipv4(const struct ifaddrs *all, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const struct ifaddrs *i = all; i != NULL && n < cap; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr, a,
                  sizeof a);
        n += (size_t)snprintf(buf + n, cap - n, "%s%s %s", n ? ", " : "", i->ifa_name, a);
    }
    if (n == 0)
        snprintf(buf, cap, "none");
}

tutti_status_t tutti__iface_pick(const char *spec, char ip[64], char name[TUTTI__IFNAME_LEN])
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return tutti__set_error(TUTTI_ERR_SYSTEM, "TUTTI_SOCKET_IFNAME=%s: cannot list the network "
                                "interfaces: %s", spec, strerror(errno));
    /* Loopback only when nothing else matches: "^docker" means a real interface, and only a
     * list that names lo alone (or excludes everything else) leads there. */
    for (int pass = 0; pass < 2; pass++)
        for (const struct ifaddrs *i = all; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
                !(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_LOOPBACK) != (pass == 0) ||
                !tutti__ifname_match(spec, i->ifa_name))
                continue;
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr,
                      ip, 64);
            snprintf(name, TUTTI__IFNAME_LEN, "%s", i->ifa_name);
            freeifaddrs(all);
            return TUTTI_OK;
        }
    char have[512];
    list_ipv4(all, have, sizeof have);
    freeifaddrs(all);
    return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                            "TUTTI_SOCKET_IFNAME=%s matches no interface that is up with an IPv4 "
                            "address on this host (there are: %s); name one of them (a prefix "
                            "such as eth, \"=eth0\" for that name only, \"^lo,docker\" to exclude) "
                            "or unset it",
                            spec, have);
}

void tutti__iface_of(const char *ip, char name[TUTTI__IFNAME_LEN])
{
    struct in_addr want;
    struct ifaddrs *all = NULL;
    snprintf(name, TUTTI__IFNAME_LEN, "?");
    if (inet_pton(AF_INET, ip, &want) != 1 || getifaddrs(&all) != 0)
        return;
    for (const struct ifaddrs *i = all; i != NULL; i = i->ifa_next)
        if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
            ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
                want.s_addr) {
            snprintf(name, TUTTI__IFNAME_LEN, "%s", i->ifa_name);
            break;
        }
    freeifaddrs(all);
}
