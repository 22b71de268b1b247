/* fuzz_store_client.c: fuzzes the rendezvous store's client (src/bootstrap/store_client.c) with
 * what a broken or hostile server could send: a thread plays the server over a socket pair,
 * either sending the input from the first byte (the handshake's parser), or passing a real
 * handshake first and then sending the input as the replies to a put and two gets. The client
 * must fail cleanly or succeed, never read or write out of bounds, and never accept a server
 * that did not prove the secret. */
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/bootstrap/store.h"
#include "../../src/bootstrap/wire.h"
#include "fuzz.h"

static tutti__auth_t auth;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("CCL_LOG_LEVEL", "error", 1); /* refusals are the point here, not news */
    tutti__log_init();
    uint8_t key[TUTTI__AUTH_KEY];
    memset(key, 0x5a, sizeof key);
    tutti__auth_from_key(key, &auth);
    return 0;
}

typedef struct server {
    int fd;
    bool handshake; /* pass a real handshake before sending the input */
    const uint8_t *data;
    size_t size;
} server_t;

static int read_n(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

static void *serve(void *arg)
{
    server_t *s = arg;
    if (s->handshake) {
        uint8_t m[TUTTI__WIRE_HDR + 32], ns[32], hello[TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY];
        memset(ns, 0x11, sizeof ns);
        tutti__wire_put_hdr(m, TUTTI__REP_CHALLENGE, TUTTI__WIRE_STRICT, 32);
        memcpy(m + TUTTI__WIRE_HDR, ns, 32);
        if (write(s->fd, m, sizeof m) != (ssize_t)sizeof m || read_n(s->fd, hello, sizeof hello))
            goto out;
        uint32_t w[4];
        tutti__wire_get_hdr(hello, w);
        tutti__wire_put_hdr(m, TUTTI__REP_OK, 0, 32);
        tutti__auth_server_mac(auth.key, ns, hello + TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_NONCE,
                               w[2], w[3], auth.job, m + TUTTI__WIRE_HDR);
        if (write(s->fd, m, sizeof m) != (ssize_t)sizeof m)
            goto out;
    }
    for (size_t off = 0; off < s->size;) {
        ssize_t k = write(s->fd, s->data + off, s->size - off);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
out:
    shutdown(s->fd, SHUT_WR);
    char sink[4096];
    while (read(s->fd, sink, sizeof sink) > 0) /* what the client sends, until it closes */
        ;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 200000)
        return 0;
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return 0;
    server_t sv = {sp[1], data[0] & 1, data + 1, size - 1};
    pthread_t t;
    if (pthread_create(&t, NULL, serve, &sv) != 0) {
        close(sp[0]);
        close(sp[1]);
        return 0;
    }
    tutti__store_t *s = NULL;
    tutti_status_t st = tutti__store_open_fd(sp[0], 1, 2, "fuzz", 1, &auth, tutti__now() + 1, &s);
    /* a client that did not get the real handshake must have refused the server */
    if (!sv.handshake)
        FUZZ_ASSERT(st != TUTTI_OK);
    if (st == TUTTI_OK) {
        tutti_oob_t o = tutti__store_oob(s);
        char buf[8];
        size_t len = 0;
        if (o.put(o.ctx, "a", "xyz", 3) == 0) {
            int rc = o.get(o.ctx, "b", buf, sizeof buf, &len, 0);
            FUZZ_ASSERT(rc == 0 || rc == 1 || rc < 0);
            if (rc >= 0)
                o.get(o.ctx, "c", NULL, 0, &len, 0);
        }
        tutti__store_close(s); /* closes sp[0] */
    }
    pthread_join(t, NULL);
    close(sp[1]);
    return 0;
}
