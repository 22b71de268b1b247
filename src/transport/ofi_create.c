/* ofi_create.c: making the libfabric transport: choosing a provider (a network one across
 * nodes, loopback preferred on one node), opening the endpoint, and exchanging and checking
 * every rank's endpoint name through the bootstrap. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../bootstrap/wire.h"
#include "ofi_impl.h"

/* ---- creation ----------------------------------------------------------------------------- */

enum { ADDR_OTHER, ADDR_V4_LOOPBACK, ADDR_V4_LINKLOCAL, ADDR_V4, ADDR_V6_LOCAL, ADDR_V6 };

/* addr_class sorts an info's source address: loopback and link-local addresses only reach
 * this host or this link. ADDR_OTHER: not an IP socket address (efa, psm, shm, ...). */
static int addr_class(const struct fi_info *fi)
{
    if (fi->src_addr == NULL || fi->src_addrlen < sizeof(sa_family_t))
        return ADDR_OTHER;
    if (fi->addr_format != FI_SOCKADDR && fi->addr_format != FI_SOCKADDR_IN &&
        fi->addr_format != FI_SOCKADDR_IN6)
        return ADDR_OTHER;
    sa_family_t fam;
    memcpy(&fam, (const char *)fi->src_addr + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam == AF_INET && fi->src_addrlen >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;
        memcpy(&in, fi->src_addr, sizeof in);
        uint32_t a = ntohl(in.sin_addr.s_addr);
        if ((a >> 24) == 127)
            return ADDR_V4_LOOPBACK;
        if ((a >> 16) == 0xa9fe) /* 169.254/16 */
            return ADDR_V4_LINKLOCAL;
        return ADDR_V4;
    }
    if (fam == AF_INET6 && fi->src_addrlen >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, fi->src_addr, sizeof in6);
        if (IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr))
            return ADDR_V6_LOCAL;
        return ADDR_V6;
    }
    return ADDR_OTHER;
}

/* core_is tells whether the provider's core (the part before any ';') is name. */
static bool core_is(const struct fi_info *fi, const char *name)
{
    const char *p = fi->fabric_attr && fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "";
    size_t n = strlen(name);
    return strncmp(p, name, n) == 0 && (p[n] == '\0' || p[n] == ';');
}

static const char *prov_of(const struct fi_info *fi)
{
    return fi->fabric_attr && fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "?";
}

/* addr_text writes fi's source IP address (without port) for messages; "-" if it has none. */
static void addr_text(const struct fi_info *fi, char *buf, size_t cap)
{
    int c = addr_class(fi);
    if (c == ADDR_OTHER)
        return;
    sa_family_t fam;
    memcpy(&fam, (const char *)fi->src_addr + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, fi->src_addr, sizeof in);
        inet_ntop(AF_INET, &in.sin_addr, buf, (socklen_t)cap);
    } else {
        struct sockaddr_in6 in6;
        memcpy(&in6, fi->src_addr, sizeof in6);
        inet_ntop(AF_INET6, &in6.sin6_addr, buf, (socklen_t)cap);
    }
}

/* ipv4_is tells whether fi's source address is the IPv4 address ip (dotted). */
static bool ipv4_is(const struct fi_info *fi, const char *ip)
{
    struct in_addr want;
    if (ip == NULL || inet_pton(AF_INET, ip, &want) != 1 || addr_class(fi) == ADDR_OTHER)
        return false;
    sa_family_t fam;
    memcpy(&fam, (const char *)fi->src_addr + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam != AF_INET || fi->src_addrlen < sizeof(struct sockaddr_in))
        return false;
    struct sockaddr_in in;
    memcpy(&in, fi->src_addr, sizeof in);
    return in.sin_addr.s_addr == want.s_addr;
}

/*
 * choose picks one of libfabric's infos. One node: the IPv4 loopback interface (the tcp provider
 * lists one info per interface, and only loopback is sure to work inside one host). Several
 * nodes: libfabric lists the best provider first; within that provider, the interface whose
 * address is ifaddr (the one this rank reached the others' rendezvous through, or the one
 * TUTTI_SOCKET_IFNAME names), else an IPv4 interface that leaves the host, then any address
 * that does (IPv6, or a non-IP fabric such as efa). Without the first rule a host with two
 * interfaces, only one of which reaches the other hosts, could pick the wrong one and wait
 * for peers that never answer. The shared-memory providers cannot span nodes, so they are
 * skipped unless FI_PROVIDER asked.
 */
static struct fi_info *choose(struct fi_info *list, bool single_node, bool prov_forced,
                              const char *ifaddr)
{
    struct fi_info *first = NULL;
    for (struct fi_info *fi = list; fi; fi = fi->next) {
        if (!single_node && !prov_forced && (core_is(fi, "shm") || core_is(fi, "sm2")))
            continue;
        if (first == NULL)
            first = fi;
        if (single_node && addr_class(fi) == ADDR_V4_LOOPBACK)
            return fi;
    }
    if (single_node || first == NULL)
        return first;
    const char *prov = prov_of(first);
    struct fi_info *fallback = NULL;
    for (struct fi_info *fi = first; fi && ifaddr; fi = fi->next)
        if (strcmp(prov_of(fi), prov) == 0 && ipv4_is(fi, ifaddr))
            return fi;
    for (struct fi_info *fi = first; fi; fi = fi->next) {
        if (strcmp(prov_of(fi), prov) != 0)
            continue;
        int c = addr_class(fi);
        if (c == ADDR_V4)
            return fi;
        if (fallback == NULL && (c == ADDR_OTHER || c == ADDR_V6))
            fallback = fi;
    }
    return fallback ? fallback : first;
}

/* The record each rank publishes: its endpoint name and what the others must agree on. */
struct rec {
    uint32_t magic;
    uint32_t namelen;
    uint64_t chunk;
    uint32_t tagbits;
    uint32_t pad;
    char prov[64];
    unsigned char name[REC_SIZE - 88];
};
_Static_assert(sizeof(struct rec) == REC_SIZE, "record size");

#define FI_CHECK(call, what)                                                                   \
    do {                                                                                       \
        int r_ = (int)(call);                                                                  \
        if (r_ != 0) {                                                                         \
            st = tutti__set_error(TUTTI_ERR_TRANSPORT,                                         \
                                  "ofi: %s failed with provider %s (fabric %s): %s; check "    \
                                  "`fi_info -l`, or choose another provider with "             \
                                  "FI_PROVIDER=tcp",                                           \
                                  what, t->prov, t->info->fabric_attr->name, fi_strerror(-r_)); \
            goto publish_fail;                                                                 \
        }                                                                                      \
    } while (0)

tutti_status_t tutti__ofi_create(int rank, int size, int nchan, tutti__bootstrap_t *bs,
                                 const int *peers, int npeers, bool single_node,
                                 const char *ifaddr, tutti__transport_t **out)
{
    tutti_status_t st = TUTTI_OK;
    struct fi_info *hints = NULL, *list = NULL;
    struct rec *all = NULL;
    *out = NULL;

    if (size > (1 << RANK_BITS))
        return tutti__set_error(TUTTI_ERR_NOT_SUPPORTED,
                                "ofi: %d ranks, but the libfabric transport tells at most %d ranks "
                                "apart (%d bits of the message tag); split the job into "
                                "communicators of at most %d ranks",
                                size, 1 << RANK_BITS, RANK_BITS, 1 << RANK_BITS);
    if (nchan < 2 || nchan > (1 << CHAN_BITS) || nchan > TUTTI__CHAN_MAX)
        return tutti__set_error(TUTTI_ERR_INTERNAL,
                                "ofi: %d channels asked for; the transport takes 2 to %d",
                                nchan, TUTTI__CHAN_MAX < (1 << CHAN_BITS)
                                                 ? TUTTI__CHAN_MAX : 1 << CHAN_BITS);
    struct ofi *t = calloc(1, sizeof *t);
    if (t == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: out of memory creating the transport");
    pthread_mutex_init(&t->lock, NULL);
    t->base.ops = &tutti__ofi_ops;
    t->rank = rank;
    t->size = size;
    t->nchan = nchan;
    t->addrs = malloc((size_t)t->size * sizeof *t->addrs);
    t->ctr = calloc((size_t)t->size * (size_t)t->nchan * 2, sizeof *t->ctr);
    t->broken_stream = calloc((size_t)t->size * (size_t)t->nchan * 2, 1);
    all = calloc((size_t)t->size, sizeof *all);
    if (t->addrs == NULL || t->ctr == NULL || t->broken_stream == NULL || all == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: out of memory for %d ranks", t->size);
        goto fail;
    }
    for (int r = 0; r < t->size; r++)
        t->addrs[r] = FI_ADDR_NOTAVAIL;

    /* What we ask of a provider: reliable datagrams with tagged messages; contexts that live in
     * our requests; no local memory registration (we pass no descriptors); we serialize calls. */
    hints = fi_allocinfo();
    if (hints == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: fi_allocinfo failed");
        goto fail;
    }
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    const char *forced = tutti__env_get("FI_PROVIDER");
    int ret = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    if (ret != 0 || list == NULL) {
        st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                              "ofi: fi_getinfo found no provider with tagged reliable-datagram "
                              "endpoints (FI_PROVIDER=%s): %s; check `fi_info -l` and `fi_info -c "
                              "FI_TAGGED -t FI_EP_RDM`, or set FI_PROVIDER=tcp",
                              forced ? forced : "unset", fi_strerror(-ret));
        goto fail;
    }
    struct fi_info *fi = choose(list, single_node, forced != NULL, ifaddr);
    if (fi == NULL) {
        st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                              "ofi: libfabric offers only shared-memory providers, which cannot "
                              "reach other nodes; set FI_PROVIDER (e.g. tcp, verbs, efa) to a "
                              "network provider, see `fi_info -l`");
        goto fail;
    }
    if (!single_node && (core_is(fi, "shm") || core_is(fi, "sm2"))) {
        /* Asked for by FI_PROVIDER, it would wait for peers on other nodes until the timeout. */
        st = tutti__set_error(TUTTI_ERR_INVALID_ARG,
                              "ofi: FI_PROVIDER=%s is a shared-memory provider, but the ranks "
                              "span several nodes (hosts, network namespaces or /dev/shm "
                              "mounts): it cannot reach them; set FI_PROVIDER to a network "
                              "provider (tcp, verbs, efa; see `fi_info -l`) or leave it unset",
                              forced ? forced : prov_of(fi));
        goto fail;
    }
    t->info = fi_dupinfo(fi);
    if (t->info == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: fi_dupinfo failed");
        goto fail;
    }
    snprintf(t->prov, sizeof t->prov, "%s", prov_of(t->info));
    /* A provider that can carry remote CQ data says how many bytes (the whole fingerprint
     * then travels with each message, ofi_impl.h). */
    t->cq_data = t->info->domain_attr->cq_data_size >= sizeof(uint32_t);

    uint64_t fmt = t->info->ep_attr->mem_tag_format;
    unsigned tagbits = fmt ? 64u - (unsigned)__builtin_clzll(fmt) : 64u;
    long piece = (long)TUTTI__OFI_MAX_CHUNK;
    if ((st = tutti__env_bytes("TUTTI_OFI_CHUNK", 4096, (long)TUTTI__OFI_MAX_CHUNK, &piece)) < 0)
        goto fail;
    size_t chunk = (size_t)piece;
    if (t->info->ep_attr->max_msg_size > 0 && t->info->ep_attr->max_msg_size < chunk)
        chunk = t->info->ep_attr->max_msg_size;
    /* Receives get half the receive queue: providers such as shm hold unexpected messages in
     * the same pool, and a pool full of posted receives stalls the message that would match
     * one of them behind an unexpected one. */
    t->cap[TUTTI__REQ_SEND] = t->info->tx_attr ? t->info->tx_attr->size : 0;
    t->cap[TUTTI__REQ_RECV] = t->info->rx_attr ? (t->info->rx_attr->size + 1) / 2 : 0;
    char where[INET6_ADDRSTRLEN] = "-";
    addr_text(t->info, where, sizeof where);
    /* For the IP providers the domain is the interface (tcp: "eth0"). */
    TUTTI__LOG(TUTTI__LOG_INFO,
               "ofi: provider %s (FI_PROVIDER %s), interface/domain %s, address %s, fabric %s, "
               "%u tag bits, pieces of at most %zu bytes, %s of each fingerprint compared",
               t->prov, forced ? forced : "unset",
               t->info->domain_attr->name ? t->info->domain_attr->name : "?", where,
               t->info->fabric_attr->name ? t->info->fabric_attr->name : "?", tagbits, chunk,
               t->cq_data ? "32 bits (CQ data)" : "10 bits");

    FI_CHECK(fi_fabric(t->info->fabric_attr, &t->fabric, NULL), "fi_fabric");
    FI_CHECK(fi_domain(t->fabric, t->info, &t->domain, NULL), "fi_domain");
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    FI_CHECK(fi_cq_open(t->domain, &cq_attr, &t->cq, NULL), "fi_cq_open");
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)t->size};
    FI_CHECK(fi_av_open(t->domain, &av_attr, &t->av, NULL), "fi_av_open");
    FI_CHECK(fi_endpoint(t->domain, t->info, &t->ep, NULL), "fi_endpoint");
    FI_CHECK(fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind (cq)");
    FI_CHECK(fi_ep_bind(t->ep, &t->av->fid, 0), "fi_ep_bind (av)");
    FI_CHECK(fi_enable(t->ep), "fi_enable");

    struct rec mine;
    memset(&mine, 0, sizeof mine);
    mine.magic = REC_MAGIC;
    mine.chunk = chunk;
    mine.tagbits = tagbits;
    snprintf(mine.prov, sizeof mine.prov, "%s", t->prov);
    size_t namelen = sizeof mine.name;
    FI_CHECK(fi_getname(&t->ep->fid, mine.name, &namelen), "fi_getname");
    mine.namelen = (uint32_t)namelen;
    TUTTI__CHECK_GOTO(tutti__bs_allgather(bs, &mine, sizeof mine, all), st, fail);

    /* Every rank must speak the same provider and split messages alike. */
    for (int r = 0; r < t->size; r++) {
        if (all[r].magic == REC_FAILED) {
            tutti__wire_printable((char *)all[r].name, (const uint8_t *)all[r].name,
                                  strnlen((const char *)all[r].name, sizeof all[r].name - 1));
            st = tutti__set_error(TUTTI_ERR_TRANSPORT, "ofi: rank %d could not open its endpoint: "
                                  "%s", r, (const char *)all[r].name);
            goto fail;
        }
        if (all[r].magic != REC_MAGIC || all[r].namelen > sizeof all[r].name) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "ofi: rank %d published a malformed endpoint record; are all "
                                  "ranks running the same tutti?",
                                  r);
            goto fail;
        }
        all[r].prov[sizeof all[r].prov - 1] = '\0';
        if (strcmp(all[r].prov, t->prov) != 0) {
            st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                                  "ofi: rank %d chose provider %s but rank %d chose %s; set "
                                  "FI_PROVIDER to one provider for every rank",
                                  t->rank, t->prov, r, all[r].prov);
            goto fail;
        }
        if (all[r].chunk < chunk)
            chunk = all[r].chunk;
        if (all[r].tagbits < tagbits)
            tagbits = all[r].tagbits;
    }
    if (tagbits < HI_BITS + MIN_CTR_BITS) {
        st = tutti__set_error(TUTTI_ERR_NOT_SUPPORTED,
                              "ofi: provider %s matches only %u tag bits; tutti needs %d; choose "
                              "another provider with FI_PROVIDER",
                              t->prov, tagbits, HI_BITS + MIN_CTR_BITS);
        goto fail;
    }
    t->cbits = tagbits - HI_BITS > 32 ? 32 : tagbits - HI_BITS;
    t->cmask = t->cbits == 32 ? UINT32_MAX : (1u << t->cbits) - 1u;
    t->chunk = chunk ? chunk : 1;

    for (int i = 0; i < npeers; i++) {
        int p = peers[i];
        if (p < 0 || p >= t->size) {
            st = tutti__set_error(TUTTI_ERR_INTERNAL, "ofi: peer %d out of range (%d ranks)", p,
                                  t->size);
            goto fail;
        }
        if (t->addrs[p] != FI_ADDR_NOTAVAIL)
            continue;
        ret = fi_av_insert(t->av, all[p].name, 1, &t->addrs[p], 0, NULL);
        if (ret != 1) {
            st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                                  "ofi: fi_av_insert of rank %d's address failed with provider "
                                  "%s: %s; check that every rank can reach the others on fabric "
                                  "%s, or set FI_PROVIDER",
                                  p, t->prov, ret < 0 ? fi_strerror(-ret) : "not inserted",
                                  t->info->fabric_attr->name);
            t->addrs[p] = FI_ADDR_NOTAVAIL;
            goto fail;
        }
    }

    free(all);
    fi_freeinfo(list);
    fi_freeinfo(hints);
    *out = &t->base;
    return TUTTI_OK;

publish_fail: {
    /* Descriptors are the usual cause (the tcp provider opens several per endpoint, and may
     * report EMFILE as another error): a rank that cannot open a few more says so. */
    int probe[4], k = 0, at_limit = 0;
    for (; k < 4 && !at_limit; k++)
        if ((probe[k] = fcntl(0, F_DUPFD_CLOEXEC, 0)) < 0)
            at_limit = errno == EMFILE || errno == ENFILE, k--;
    while (k > 0)
        close(probe[--k]);
    char hint[160] = "";
    if (at_limit) {
        struct rlimit rl = {0};
        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(hint, sizeof hint, "; this rank is at its limit of open files (RLIMIT_NOFILE, "
                 "ulimit -n) of %llu: raise it", (unsigned long long)rl.rlim_cur);
    }
    char why[TUTTI__ERRLEN];
    snprintf(why, sizeof why, "%s%s", tutti__tls_error(), hint);
    memset(&mine, 0, sizeof mine);
    mine.magic = REC_FAILED;
    snprintf((char *)mine.name, sizeof mine.name, "%s", why);
    (void)tutti__bs_allgather(bs, &mine, sizeof mine, all); /* the peers fail on it now */
    st = tutti__set_error(st, "%s", why);
}
fail:
    TUTTI__LOG(TUTTI__LOG_DEBUG, "ofi: create failed: %s", tutti__tls_error());
    free(all);
    if (list)
        fi_freeinfo(list);
    if (hints)
        fi_freeinfo(hints);
    tutti__ofi_close(t);
    return st;
}
