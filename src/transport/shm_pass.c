/* shm_pass.c: how the node's leader hands the shared segment to the other local ranks: the
 * segment is a memfd, which has no name in /dev/shm (nothing to leak, however a rank dies, and
 * nothing another user could swap in), passed over a unix socket in the abstract namespace to
 * ranks that show the token published through the bootstrap and run as the same user. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../bootstrap/sock.h"
#include "../common/sha256.h"
#include "shm_impl.h"

/* A request: the asking rank's local index and the token. */
typedef struct ask {
    uint32_t local;
    uint8_t token[SEG_TOKEN_LEN];
} ask_t;

static socklen_t sock_addr(const char *name, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strnlen(name, SEG_SOCK_LEN);
    memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = '\0': the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static bool same_user(int fd, pid_t *pid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof cr)
        return false;
    if (pid != NULL)
        *pid = cr.pid;
    return cr.uid == geteuid();
}

tutti_status_t tutti__shm_pass_listen(seg_pub_t *pub, int *lfd)
{
    *lfd = -1;
    for (int tries = 0; tries < 5; tries++) {
        uint8_t rnd[16];
        if (!tutti__random(rnd, sizeof rnd) || !tutti__random(pub->token, sizeof pub->token))
            return tutti__set_error(TUTTI_ERR_SYSTEM, "shm: getrandom: %s", strerror(errno));
        char hex[33];
        tutti__hex(rnd, sizeof rnd, hex);
        snprintf(pub->sock, sizeof pub->sock, "tutti-%s", hex);
        struct sockaddr_un sa;
        socklen_t len = sock_addr(pub->sock, &sa);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return tutti__set_error(TUTTI_ERR_SYSTEM, "shm: socket(AF_UNIX): %s%s",
                                    strerror(errno),
                                    errno == EMFILE ? " (too many open files)" : "");
        if (bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, 4096) == 0) {
            *lfd = fd;
            pub->pid = (int32_t)getpid();
            return TUTTI_OK;
        }
        int e = errno;
        close(fd);
        if (e != EADDRINUSE)
            return tutti__set_error(TUTTI_ERR_SYSTEM, "shm: cannot listen on a unix socket to "
                                    "hand out the shared segment: %s", strerror(e));
    }
    return tutti__set_error(TUTTI_ERR_SYSTEM, "shm: five random unix socket names were taken");
}

/* A connection still to be heard: its fd and the part of its request read so far. */
typedef struct pending {
    int fd;
    size_t got;
    ask_t ask;
} pending_t;

/* hand_out sends memfd to the rank that asked on p, if it may have it; true when it did. */
static bool hand_out(pending_t *p, int memfd, const seg_pub_t *pub, int nlocal,
                     unsigned char *served)
{
    uint32_t who = p->ask.local;
    const char *why = !tutti__ct_equal(p->ask.token, pub->token, sizeof pub->token)
                          ? "a wrong token"
                      : who == 0 || who >= (uint32_t)nlocal ? "an index out of range"
                      : served[who]                         ? "an index served already"
                                                            : NULL;
    if (why != NULL) {
        TUTTI__LOG(TUTTI__LOG_WARN, "shm: refused the shared segment to a process that showed "
                   "%s (local index %u)", why, who);
        return false;
    }
    char ok = 'S';
    struct iovec iov = {&ok, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &memfd, sizeof memfd);
    /* One byte and one descriptor fit any socket buffer: a non-blocking send does not fail
     * for room. */
    if (sendmsg(p->fd, &mh, MSG_NOSIGNAL) != 1)
        return false;
    served[who] = 1;
    return true;
}

tutti_status_t tutti__shm_pass_serve(int lfd, int memfd, const seg_pub_t *pub,
                                     const int *local_ranks, int nlocal, tutti__bootstrap_t *bs)
{
    double deadline = bs->deadline;
    int want = nlocal - 1, have = 0, cap = nlocal + 16, npend = 0;
    double start = tutti__now();
    unsigned char *served = calloc((size_t)nlocal, 1);
    pending_t *pend = calloc((size_t)cap, sizeof *pend);
    struct pollfd *pfd = calloc((size_t)cap + 1, sizeof *pfd);
    tutti_status_t st = TUTTI_OK;
    if (served == NULL || pend == NULL || pfd == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "shm: out of memory");
        goto out;
    }
    while (have < want) {
        int ms = tutti__sock_ms_until(deadline, 200);
        if ((st = tutti__bs_cancelled(bs)) < 0)
            goto out; /* the text is the cancel's */
        if (ms == 0) {
            int missing[16], nmiss = 0;
            for (int i = 1; i < nlocal; i++)
                if (!served[i] && nmiss++ < 16)
                    missing[nmiss - 1] = local_ranks[i];
            char list[256];
            tutti__format_ranks(list, sizeof list, missing, nmiss < 16 ? nmiss : 16, nmiss);
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "shm: rank %d waited %.3g s for rank(s) %s of this node to "
                                  "take the shared segment; they never did: a rank died or is "
                                  "stuck",
                                  local_ranks[0], tutti__now() - start, list);
            goto out;
        }
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < npend; i++)
            pfd[i + 1] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        if (poll(pfd, (nfds_t)npend + 1, ms) <= 0)
            continue;
        for (int i = 0; i < npend; i++) {
            if (!pfd[i + 1].revents)
                continue;
            pending_t *p = &pend[i];
            ssize_t n = recv(p->fd, (char *)&p->ask + p->got, sizeof p->ask - p->got, 0);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                continue;
            if (n > 0 && (p->got += (size_t)n) < sizeof p->ask)
                continue;
            if (n > 0 && hand_out(p, memfd, pub, nlocal, served))
                have++;
            close(p->fd);
            p->fd = -1;
        }
        int k = 0;
        for (int i = 0; i < npend; i++)
            if (pend[i].fd >= 0)
                pend[k++] = pend[i];
        npend = k;
        for (;;) {
            int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                           errno == ENOMEM)) {
                /* The asker stays in the backlog, the socket stays readable, and poll would
                 * return at once until the deadline: a busy wait that ends in "a rank died". */
                struct rlimit rl = {0};
                getrlimit(RLIMIT_NOFILE, &rl);
                st = tutti__set_error(TUTTI_ERR_SYSTEM,
                                      "shm: rank %d cannot take the connection of a rank of its "
                                      "node that asks for the shared segment: %s (its limit of "
                                      "open files, ulimit -n, is %llu): raise it",
                                      local_ranks[0], strerror(errno),
                                      (unsigned long long)rl.rlim_cur);
                goto out;
            }
            if (fd < 0)
                break;
            pid_t pid = 0;
            if (!same_user(fd, &pid)) {
                TUTTI__LOG(TUTTI__LOG_WARN, "shm: refused the shared segment to pid %d, a process "
                           "of another user", (int)pid);
                close(fd);
                continue;
            }
            if (npend == cap) { /* the oldest makes room: a rank asks at once */
                close(pend[0].fd);
                memmove(pend, pend + 1, (size_t)(cap - 1) * sizeof *pend);
                npend--;
            }
            pend[npend++] = (pending_t){.fd = fd};
        }
    }
out:
    for (int i = 0; i < npend; i++)
        close(pend[i].fd);
    free(served);
    free(pend);
    free(pfd);
    return st;
}

tutti_status_t tutti__shm_pass_fetch(const seg_pub_t *pub, int my_local, int leader,
                                     double deadline, int *memfd)
{
    *memfd = -1;
    struct sockaddr_un sa;
    socklen_t len = sock_addr(pub->sock, &sa);
    int err = 0;
    int fd = tutti__sock_connect((struct sockaddr *)&sa, len, deadline, &err);
    if (fd < 0)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "shm: cannot reach rank %d (this node's lowest rank) for the "
                                "shared segment: %s: it died, or runs in another network "
                                "namespace, or the address came from an earlier "
                                "communicator's keys left in the same store (a store reused "
                                "for a second communicator: give each keys of its own, e.g. "
                                "a prefix)",
                                leader, strerror(err));
    pid_t pid = 0;
    tutti_status_t st = TUTTI_OK;
    if (!same_user(fd, &pid) || pid != (pid_t)pub->pid) {
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                              "shm: the socket rank %d published is held by pid %d, not by rank "
                              "%d's pid %d of this user: refusing its segment",
                              leader, (int)pid, leader, (int)pub->pid);
        goto out;
    }
    ask_t ask = {.local = (uint32_t)my_local};
    memcpy(ask.token, pub->token, sizeof ask.token);
    if ((err = tutti__sock_send(fd, &ask, sizeof ask, deadline)) != 0 ||
        tutti__sock_wait(fd, POLLIN, deadline) <= 0) {
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                              "shm: rank %d did not hand over the shared segment: %s", leader,
                              err ? strerror(err) : "timed out");
        goto out;
    }
    char ok = 0;
    struct iovec iov = {&ok, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    struct cmsghdr *cm = n == 1 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
        cm->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(memfd, CMSG_DATA(cm), sizeof *memfd);
    if (ok != 'S' || *memfd < 0 || (mh.msg_flags & MSG_CTRUNC)) {
        if (*memfd >= 0)
            close(*memfd);
        *memfd = -1;
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                              "shm: rank %d refused or garbled the shared segment (%s)", leader,
                              n < 0 ? strerror(errno) : n == 0 ? "it hung up" : "no descriptor");
    }
out:
    close(fd);
    return st;
}
