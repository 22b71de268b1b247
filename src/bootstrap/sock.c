/* sock.c: deadline-bounded connect, send, receive and wait on non-blocking TCP sockets. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include "sock.h"

int tutti__sock_ms_until(double deadline, int cap_ms)
{
    double left = deadline - tutti__now();
    if (left <= 0)
        return 0;
    return left * 1000.0 > cap_ms ? cap_ms : (int)(left * 1000.0) + 1;
}

int tutti__sock_wait(int fd, short events, double deadline)
{
    for (;;) {
        /* At most a second per poll: a deadline far away is still re-read now and then. */
        int ms = tutti__sock_ms_until(deadline, 1000);
        if (ms == 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

int tutti__sock_connect(const struct sockaddr *sa, socklen_t salen, double deadline, int *err)
{
    return tutti__sock_connect_from(sa, salen, NULL, 0, deadline, err);
}

int tutti__sock_connect_from(const struct sockaddr *sa, socklen_t salen,
                             const struct sockaddr *src, socklen_t srclen, double deadline,
                             int *err)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    int e = 0;
    if (src != NULL && bind(fd, src, srclen) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    if (connect(fd, sa, salen) < 0) {
        e = errno;
        if (e == EINPROGRESS || e == EINTR) { /* either way the handshake goes on */
            int w = tutti__sock_wait(fd, POLLOUT, deadline);
            socklen_t el = sizeof e;
            if (w > 0)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
            else
                e = w < 0 ? errno : ETIMEDOUT;
        }
    }
    if (e == 0)
        return fd;
    close(fd);
    *err = e;
    return -1;
}

int tutti__sock_sendv(int fd, struct iovec *iov, int niov, double deadline)
{
    while (niov > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return errno;
            int w = tutti__sock_wait(fd, POLLOUT, deadline);
            if (w <= 0)
                return w < 0 ? errno : ETIMEDOUT;
            continue;
        }
        while (niov > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

int tutti__sock_send(int fd, const void *buf, size_t len, double deadline)
{
    struct iovec iov = {(void *)buf, len};
    return tutti__sock_sendv(fd, &iov, 1, deadline);
}

int tutti__sock_recv(int fd, void *buf, size_t len, double deadline)
{
    char sink[4096];
    while (len > 0) {
        void *p = buf ? buf : sink;
        size_t want = buf ? len : (len < sizeof sink ? len : sizeof sink);
        ssize_t n = recv(fd, p, want, 0);
        if (n == 0)
            return ECONNRESET;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return errno;
            int w = tutti__sock_wait(fd, POLLIN, deadline);
            if (w <= 0)
                return w < 0 ? errno : ETIMEDOUT;
            continue;
        }
        len -= (size_t)n;
        if (buf)
            buf = (char *)buf + n;
    }
    return 0;
}

void tutti__sock_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
