/* sock.h: the TCP socket helpers the rendezvous store and the liveness mesh share, every one
 * bounded by an absolute deadline (tutti__now() clock), so that no socket wait can hang. */
#ifndef TUTTI_BOOTSTRAP_SOCK_H
#define TUTTI_BOOTSTRAP_SOCK_H

#include <sys/socket.h>
#include <sys/uio.h>

#include "../common/common.h"

/* tutti__sock_ms_until is the time left until deadline in whole milliseconds, rounded up and
 * at most cap_ms; 0 once the deadline has passed. */
int tutti__sock_ms_until(double deadline, int cap_ms);

/* tutti__sock_wait waits until fd has one of events (poll's POLLIN, POLLOUT) or deadline
 * passes: 1 ready, 0 deadline passed, -1 poll failed (errno says why). */
int tutti__sock_wait(int fd, short events, double deadline);

/* tutti__sock_connect makes one attempt to connect a new non-blocking, close-on-exec stream
 * socket to sa, waiting until deadline for the handshake: it returns the connected fd, or -1
 * with *err the reason (an errno value; ETIMEDOUT when the deadline passed). */
int tutti__sock_connect(const struct sockaddr *sa, socklen_t salen, double deadline, int *err);

/* tutti__sock_connect_from is tutti__sock_connect from local address src (port 0: any), or
 * from wherever the route leads when src is NULL. */
int tutti__sock_connect_from(const struct sockaddr *sa, socklen_t salen,
                             const struct sockaddr *src, socklen_t srclen, double deadline,
                             int *err);

/* tutti__sock_sendv sends all niov buffers of iov on the non-blocking socket fd before deadline
 * (it advances iov as it goes): 0, or an errno value (ETIMEDOUT when the deadline passed). */
int tutti__sock_sendv(int fd, struct iovec *iov, int niov, double deadline);

/* tutti__sock_send is tutti__sock_sendv for one buffer. */
int tutti__sock_send(int fd, const void *buf, size_t len, double deadline);

/* tutti__sock_recv reads exactly len bytes from the non-blocking socket fd into buf (NULL:
 * reads and drops them) before deadline: 0, or an errno value (ECONNRESET when the peer closed
 * the stream first, ETIMEDOUT when the deadline passed). */
int tutti__sock_recv(int fd, void *buf, size_t len, double deadline);

/* tutti__sock_nodelay turns off Nagle's algorithm on fd: requests and replies go out at once. */
void tutti__sock_nodelay(int fd);

#endif /* TUTTI_BOOTSTRAP_SOCK_H */
