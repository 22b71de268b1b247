/* check_bootstrap.c: unit tests of the TCP store, the bootstrap collectives and the liveness
 * mesh, with ranks as forked processes on loopback. */
#include <check.h>
#include "check_main.h"
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/bootstrap/bootstrap.h"
#include "../src/bootstrap/wire.h"

#define MAXR 8
#define CHILD_ALARM_S 20 /* no rank process outlives this, whatever goes wrong */
#define REAP_S 15.0

/* What rank processes tell the test, in memory shared across fork(). */
typedef struct shared {
    volatile int ready[MAXR];
    volatile double kill_time; /* tutti__now() when the victim was killed (0: not yet) */
    volatile int go;           /* start flag of processes that must race */
    struct {
        volatile int failed;
        int status;
        double elapsed;
        int dead;
        char msg[TUTTI__ERRLEN + 64];
    } res[MAXR];
} shared_t;

static shared_t *sh;
static int port;
static tutti__auth_t auth; /* the job's authentication in this test (setup: a SECRET one) */

/* use_auth sets the test's authentication: a SECRET job with a fixed key, or a HOST one (rank 0
 * leaves its secret in a file for the ranks of this host). */
static void use_auth(tutti__auth_mode_t mode)
{
    if (mode == TUTTI__AUTH_SECRET) {
        uint8_t key[TUTTI__AUTH_KEY];
        memset(key, 0x5a, sizeof key);
        tutti__auth_from_key(key, &auth);
    } else {
        unsetenv("TUTTI_JOB_TOKEN");
        unsetenv("OMPI_MCA_orte_precondition_transports");
        ck_assert_int_eq(tutti__auth_from_env(NULL, &auth), TUTTI_OK);
        ck_assert_int_eq(auth.mode, TUTTI__AUTH_HOST);
    }
}

/* free_port finds a port nobody listens on (bind 0, read it back, release it). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void setup(void)
{
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    port = free_port();
    use_auth(TUTTI__AUTH_SECRET);
}

static void teardown(void) { munmap(sh, sizeof *sh); }

/* ---- rank processes ------------------------------------------------------------------------- */

static void child_fail(int rank, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void child_fail(int rank, int line, const char *fmt, ...)
{
    int n = snprintf(sh->res[rank].msg, sizeof sh->res[rank].msg, "line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sh->res[rank].msg + n, sizeof sh->res[rank].msg - (size_t)n, fmt, ap);
    va_end(ap);
    sh->res[rank].failed = 1;
    _exit(1);
}

/* REQUIRE in a rank process: on failure the message goes to the parent and the rank exits. */
#define REQUIRE(cond, ...)                                                                     \
    do {                                                                                       \
        if (!(cond))                                                                           \
            child_fail(rank, __LINE__, __VA_ARGS__);                                           \
    } while (0)
#define REQUIRE_OK(call)                                                                       \
    do {                                                                                       \
        tutti_status_t st_ = (call);                                                           \
        REQUIRE(st_ == TUTTI_OK, "%s -> %d: %s", #call, (int)st_, tutti_last_error());        \
    } while (0)

typedef void (*rank_fn)(int rank, int size);

static pid_t spawn(rank_fn fn, int rank, int size)
{
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        alarm(CHILD_ALARM_S);
        fn(rank, size);
        _exit(0);
    }
    return p;
}

/* reap waits for the n processes until REAP_S, kills stragglers, and fails the test for any
 * that failed or did not exit cleanly. */
static void reap(const pid_t *pids, const int *ranks, int n)
{
    int status[MAXR];
    bool done[MAXR] = {0};
    int left = n;
    double end = tutti__now() + REAP_S;
    while (left > 0 && tutti__now() < end) {
        for (int i = 0; i < n; i++)
            if (!done[i] && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
                done[i] = true;
                left--;
            }
        if (left > 0)
            tutti__sleep_us(2000);
    }
    for (int i = 0; i < n; i++)
        if (!done[i]) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status[i], 0);
        }
    /* Report every rank's failure: the first to fail is the cause, the others its echo. */
    char all[4096] = "";
    bool ok = true;
    for (int i = 0; i < n; i++) {
        int r = ranks[i];
        size_t off = strlen(all);
        if (!done[i])
            snprintf(all + off, sizeof all - off, "\n  rank %d hung and was killed", r);
        else if (sh->res[r].failed)
            snprintf(all + off, sizeof all - off, "\n  rank %d: %s", r, sh->res[r].msg);
        else if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
            snprintf(all + off, sizeof all - off, "\n  rank %d ended with wait status 0x%x", r,
                     status[i]);
        else
            continue;
        ok = false;
    }
    ck_assert_msg(ok, "%s", all);
}

static void run_ranks(rank_fn fn, int size)
{
    pid_t pids[MAXR];
    int ranks[MAXR];
    for (int r = 0; r < size; r++) {
        ranks[r] = r;
        pids[r] = spawn(fn, r, size);
    }
    reap(pids, ranks, size);
}

static tutti__bootstrap_t open_bs(int rank, int size, double timeout, tutti__store_t **s)
{
    double deadline = tutti__now() + timeout;
    /* Odd ranks name the host, so resolution is tested too. */
    tutti_status_t st = tutti__store_open(rank, size, rank % 2 ? "localhost" : "127.0.0.1",
                                          port, &auth, deadline, s);
    REQUIRE(st == TUTTI_OK, "store_open: %d: %s", (int)st, tutti_last_error());
    return (tutti__bootstrap_t){.rank = rank, .size = size, .deadline = deadline,
                                .oob = tutti__store_oob(*s), .where = "the test's TCP store"};
}

/* ---- the whole path, N ranks ---------------------------------------------------------------- */

#define BIG 10240

static void rank_full(int rank, int size)
{
    tutti__store_t *s;
    tutti__bootstrap_t bs = open_bs(rank, size, 10.0, &s);
    REQUIRE(strcmp(tutti__store_local_ip(s), "127.0.0.1") == 0, "local ip %s",
            tutti__store_local_ip(s));

    int all[MAXR];
    REQUIRE_OK(tutti__bs_allgather(&bs, &rank, sizeof rank, all));
    for (int r = 0; r < size; r++)
        REQUIRE(all[r] == r, "allgather: slot %d holds %d", r, all[r]);

    static unsigned char mine[BIG], big[MAXR * BIG];
    for (int i = 0; i < BIG; i++)
        mine[i] = (unsigned char)(rank * 31 + i * 7);
    REQUIRE_OK(tutti__bs_allgather(&bs, mine, BIG, big));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < BIG; i++)
            REQUIRE(big[(size_t)r * BIG + (size_t)i] == (unsigned char)(r * 31 + i * 7),
                    "big allgather: rank %d byte %d", r, i);
    REQUIRE(bs.round == 2, "round %u", bs.round);

    int ranks[MAXR], even[MAXR], ne = 0;
    for (int r = 0; r < size; r++) {
        ranks[r] = r;
        if (r % 2 == 0)
            even[ne++] = r;
    }
    REQUIRE_OK(tutti__bs_group_barrier(&bs, "all", ranks, size));
    if (rank % 2 == 0)
        REQUIRE_OK(tutti__bs_group_barrier(&bs, "even", even, ne));

    tutti__liveness_t *l;
    REQUIRE_OK(tutti__live_create(&bs, "127.0.0.1", 0, &l));
    tutti__store_close(s);
    int dead = -1;
    REQUIRE_OK(tutti__live_check(l, &dead));
    REQUIRE(tutti__live_pid(l, rank) == (int)getpid(), "own pid %d", tutti__live_pid(l, rank));
    /* (A peer may be "left" already: it can reach its goodbye before this rank gets here.) */
    for (int r = 0; r < size; r++)
        REQUIRE(tutti__live_pid(l, r) > 0, "rank %d pid %d", r, tutti__live_pid(l, r));
    REQUIRE_OK(tutti__live_goodbye(l, true, tutti__now() + 10.0));
    REQUIRE_OK(tutti__live_check(l, &dead));
    tutti__live_destroy(l);
}

static const int full_sizes[] = {1, 2, 4};

START_TEST(test_full)
{
    run_ranks(rank_full, full_sizes[_i]);
}
END_TEST

/* The same with a HOST job: the ranks find rank 0's secret in its file. */
START_TEST(test_full_host)
{
    use_auth(TUTTI__AUTH_HOST);
    run_ranks(rank_full, full_sizes[_i]);
}
END_TEST

/* ---- the store's own semantics, one rank in this process ------------------------------------ */

START_TEST(test_store_semantics)
{
    tutti__store_t *s;
    ck_assert_int_eq(tutti__store_open(0, 1, "127.0.0.1", port, &auth, tutti__now() + 10.0, &s),
                     TUTTI_OK);
    tutti_oob_t o = tutti__store_oob(s);
    char buf[64];
    size_t len = 0;

    double t0 = tutti__now();
    ck_assert_int_eq(o.get(o.ctx, "missing", buf, sizeof buf, &len, 0), 1);
    ck_assert_int_eq(o.get(o.ctx, "missing", buf, sizeof buf, &len, 0.1), 1);
    double dt = tutti__now() - t0;
    ck_assert_msg(dt >= 0.1 && dt < 3, "get of a missing key with timeout 0.1 took %g s", dt);

    ck_assert_int_eq(o.put(o.ctx, "k", "hello world", 11), 0);
    ck_assert_int_eq(o.get(o.ctx, "k", buf, 5, &len, 0), 0);
    ck_assert_uint_eq(len, 11); /* full length, only cap bytes copied */
    ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
    ck_assert_int_eq(o.put(o.ctx, "k", "bye", 3), 0); /* overwrite */
    ck_assert_int_eq(o.get(o.ctx, "k", buf, sizeof buf, &len, 0), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(o.put(o.ctx, "empty", "", 0), 0);
    ck_assert_int_eq(o.get(o.ctx, "empty", buf, sizeof buf, &len, 0), 0);
    ck_assert_uint_eq(len, 0);

    /* Limits: rejected with a message, and the connection still works afterwards. */
    size_t huge = (1u << 20) + 1;
    char *v = calloc(1, huge);
    ck_assert_int_lt(o.put(o.ctx, "huge", v, huge), 0);
    ck_assert_msg(strstr(tutti_last_error(), "up to") != NULL, "%s", tutti_last_error());
    ck_assert_int_eq(o.put(o.ctx, "max", v, huge - 1), 0);
    ck_assert_int_eq(o.get(o.ctx, "max", v, huge, &len, 0), 0);
    ck_assert_uint_eq(len, huge - 1);
    free(v);
    char longkey[300];
    memset(longkey, 'x', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    ck_assert_int_lt(o.put(o.ctx, longkey, "1", 1), 0);
    ck_assert_int_eq(o.get(o.ctx, "k", buf, sizeof buf, &len, 0), 0);

    /* bs_get: exact length, and a deadline that names the key. */
    tutti__bootstrap_t bs = {.rank = 0, .size = 1, .deadline = tutti__now() + 0.3, .oob = o,
                             .where = "the test's store"};
    char three[3];
    ck_assert_int_eq(tutti__bs_get(&bs, "k", three, 3, -1), TUTTI_OK);
    ck_assert_int_eq(memcmp(three, "bye", 3), 0);
    ck_assert_int_eq(tutti__bs_get(&bs, "k", buf, 4, -1), TUTTI_ERR_BOOTSTRAP);
    ck_assert_msg(strstr(tutti_last_error(), "expected 4") != NULL, "%s", tutti_last_error());
    bs.deadline = tutti__now() + 0.3; /* from here: the gets above may take a while (TSan) */
    t0 = tutti__now();
    ck_assert_int_eq(tutti__bs_get(&bs, "nope", buf, 1, -1), TUTTI_ERR_BOOTSTRAP);
    dt = tutti__now() - t0;
    ck_assert_msg(dt > 0.25 && dt < 3, "bs_get waited %g s for a 0.3 s deadline", dt);
    ck_assert_msg(strstr(tutti_last_error(), "\"nope\"") != NULL, "%s", tutti_last_error());
    tutti__store_close(s);
}
END_TEST

/* A failing caller's store is reported at once, not at the deadline. */
static int bad_put(void *ctx, const char *key, const void *value, size_t len)
{
    (void)ctx, (void)key, (void)value, (void)len;
    return 0;
}
static int bad_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len, double t)
{
    (void)ctx, (void)key, (void)buf, (void)cap, (void)len, (void)t;
    return -3;
}

START_TEST(test_failing_oob)
{
    tutti__bootstrap_t bs = {.rank = 1, .size = 2, .deadline = tutti__now() + 30.0,
                             .oob = {NULL, bad_put, bad_get}, .where = "the caller's store"};
    int x = 1, all[2];
    double t0 = tutti__now();
    ck_assert_int_eq(tutti__bs_allgather(&bs, &x, sizeof x, all), TUTTI_ERR_BOOTSTRAP);
    ck_assert_msg(tutti__now() - t0 < 10, "a failing store took %g s (the deadline: 30 s)",
                  tutti__now() - t0);
    ck_assert_msg(strstr(tutti_last_error(), "the caller's store") != NULL, "%s",
                  tutti_last_error());
}
END_TEST

/* ---- failures ------------------------------------------------------------------------------- */

/* occupy listens on the test's port, on addr (host order), as another program would. */
static int occupy(uint32_t addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(addr)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    return fd;
}

START_TEST(test_port_in_use)
{
    int fd = occupy(INADDR_ANY);
    tutti__store_t *s = NULL;
    ck_assert_int_eq(tutti__store_open(0, 2, "127.0.0.1", port, &auth, tutti__now() + 2.0, &s),
                     TUTTI_ERR_BOOTSTRAP);
    ck_assert_ptr_null(s);
    char want[64];
    snprintf(want, sizeof want, "port %d", port);
    ck_assert_msg(strstr(tutti_last_error(), want) && strstr(tutti_last_error(), "in use") &&
                      strstr(tutti_last_error(), "MASTER_PORT"),
                  "%s", tutti_last_error());
    close(fd);
}
END_TEST

/* Another program listens on MASTER_PORT and never speaks (a stopped rank 0 of an old job, a
 * service that waits for its client to talk first): a rank fails at its deadline saying so,
 * rather than that rank 0 "exited or failed". */
START_TEST(test_silent_listener)
{
    int fd = occupy(INADDR_LOOPBACK);
    tutti__store_t *s = NULL;
    double t0 = tutti__now();
    ck_assert_int_eq(tutti__store_open(1, 2, "127.0.0.1", port, &auth, t0 + 2.0, &s),
                     TUTTI_ERR_BOOTSTRAP);
    double dt = tutti__now() - t0;
    ck_assert_ptr_null(s);
    ck_assert_msg(dt > 1.9 && dt < 6, "gave up after %g s for a 2 s deadline", dt);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    ck_assert_msg(strstr(tutti_last_error(), want) && strstr(tutti_last_error(), "no tutti "
                  "challenge") && strstr(tutti_last_error(), "MASTER_PORT"),
                  "%s", tutti_last_error());
    close(fd);
}
END_TEST

/* Two jobs' rank 0s start on one port at the same moment (two srun steps without MASTER_PORT):
 * the loser must fail without touching the winner's secret file, so that the winner's rank 1
 * still proves the secret. (Both may bind, since SO_REUSEADDR lets sockets share a port until
 * one listens; the loser wrote its file over the winner's before its listen failed, then
 * removed it: the winner's ranks found no secret, and the winner waited out its timeout.) */
static void rank0_racer(int idx, int size)
{
    (void)size;
    int rank = idx;
    while (!sh->go)
        ;
    tutti__store_t *s = NULL;
    tutti_status_t st = tutti__store_open(0, 2, "127.0.0.1", port, &auth, tutti__now() + 10.0, &s);
    if (st != TUTTI_OK) {
        REQUIRE(strstr(tutti_last_error(), "in use") != NULL, "the loser: %s", tutti_last_error());
        sh->ready[idx] = 2;
        return;
    }
    sh->ready[idx] = 1;
    for (double t0 = tutti__now(); !sh->ready[2] && tutti__now() - t0 < 10.0;)
        tutti__sleep_us(1000);
    tutti__store_close_now(s);
}

static void rank1_joiner(int idx, int size)
{
    (void)size;
    int rank = idx;
    tutti__store_t *s = NULL;
    REQUIRE_OK(tutti__store_open(1, 2, "localhost", port, &auth, tutti__now() + 5.0, &s));
    sh->ready[2] = 1;
    tutti__store_close(s);
}

START_TEST(test_two_rank0s)
{
    use_auth(TUTTI__AUTH_HOST);
    for (int trial = 0, taken = 0; trial < 12; trial++) {
        memset((void *)sh, 0, sizeof *sh);
        port = free_port();
        pid_t pids[3] = {spawn(rank0_racer, 0, 2), spawn(rank0_racer, 1, 2), 0};
        sh->go = 1;
        for (double t0 = tutti__now(); (!sh->ready[0] || !sh->ready[1]) && tutti__now() - t0 < 10.0;)
            tutti__sleep_us(1000);
        if (sh->ready[0] == 2 && sh->ready[1] == 2 && taken++ < 3) {
            /* Both found the port in use: a third process took it after free_port let it go
             * (an outgoing connection's local port, another test's listener): try another. */
            int ranks[2] = {0, 1};
            reap(pids, ranks, 2);
            trial--;
            continue;
        }
        ck_assert_msg(sh->ready[0] + sh->ready[1] == 3, "trial %d: rank 0s ended %d and %d", trial,
                      sh->ready[0], sh->ready[1]);
        pids[2] = spawn(rank1_joiner, 2, 2);
        int ranks[3] = {0, 1, 2};
        reap(pids, ranks, 3);
    }
}
END_TEST

START_TEST(test_no_server)
{
    tutti__store_t *s = NULL;
    double t0 = tutti__now();
    ck_assert_int_eq(tutti__store_open(3, 4, "127.0.0.1", port, &auth, tutti__now() + 0.3, &s),
                     TUTTI_ERR_BOOTSTRAP);
    double dt = tutti__now() - t0;
    ck_assert_msg(dt > 0.25 && dt < 3, "gave up after %g s for a 0.3 s deadline", dt);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    ck_assert_msg(strstr(tutti_last_error(), "rank 3") && strstr(tutti_last_error(), want) &&
                      strstr(tutti_last_error(), "refused"),
                  "%s", tutti_last_error());
    ck_assert_int_eq(tutti__store_open(0, 1, "no-such-host.invalid", port, &auth, tutti__now() + 1.0, &s),
                     TUTTI_ERR_BOOTSTRAP);
    ck_assert_msg(strstr(tutti_last_error(), "MASTER_ADDR"), "%s", tutti_last_error());
}
END_TEST

START_TEST(test_world_size_mismatch)
{
    tutti__store_t *s0, *s1, *bad = NULL;
    ck_assert_int_eq(tutti__store_open(0, 2, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s0),
                     TUTTI_OK);
    ck_assert_int_eq(tutti__store_open(1, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &bad),
                     TUTTI_ERR_BOOTSTRAP);
    ck_assert_msg(strstr(tutti_last_error(), "2 ranks") && strstr(tutti_last_error(), "3"),
                  "%s", tutti_last_error());
    ck_assert_int_eq(tutti__store_open(1, 2, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s1),
                     TUTTI_OK);
    ck_assert_int_eq(tutti__store_open(1, 2, "127.0.0.1", port, &auth, tutti__now() + 5.0, &bad),
                     TUTTI_ERR_BOOTSTRAP);
    ck_assert_msg(strstr(tutti_last_error(), "same rank"), "%s", tutti_last_error());
    tutti__store_close(s1);
    double t0 = tutti__now();
    tutti__store_close(s0); /* both ranks closed: returns at once, not at the deadline */
    ck_assert_msg(tutti__now() - t0 < 1.0, "close took %g s", tutti__now() - t0);
}
END_TEST

/* wait_doomed asks s whether the rendezvous can no longer end until it says so, at most 5 s. */
static tutti_status_t wait_doomed(tutti__store_t *s)
{
    tutti_status_t st = TUTTI_OK;
    for (double t0 = tutti__now(); st == TUTTI_OK && tutti__now() - t0 < 5;) {
        st = tutti__store_doomed(s);
        if (st == TUTTI_OK)
            usleep(1000);
    }
    return st;
}

/* Two processes of one job given the same rank (RANK=1 twice, no RANK=2): the second is
 * refused, and, since it proved the job's secret, the rendezvous fails at once on every rank
 * instead of waiting for the missing rank until the timeout. */
START_TEST(test_duplicate_rank)
{
    tutti__store_t *s0, *s1, *bad = NULL;
    ck_assert_int_eq(tutti__store_open(0, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s0),
                     TUTTI_OK);
    ck_assert_int_eq(tutti__store_open(1, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s1),
                     TUTTI_OK);
    ck_assert_int_eq(tutti__store_open(1, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &bad),
                     TUTTI_ERR_BOOTSTRAP);
    ck_assert_msg(strstr(tutti_last_error(), "same rank"), "%s", tutti_last_error());
    tutti_status_t st[2] = {wait_doomed(s0), wait_doomed(s1)};
    ck_assert_msg(st[0] == TUTTI_ERR_BOOTSTRAP && st[1] == TUTTI_ERR_BOOTSTRAP &&
                      strstr(tutti_last_error(), "given rank 1"),
                  "%d %d: %s", st[0], st[1], tutti_last_error());
    tutti__store_close(s1);
    tutti__store_close(s0);
}
END_TEST

/* A rank whose creation failed reports it: rank 0's waits then fail with its status (the
 * rendezvous' own, BOOTSTRAP or TIMEOUT; PEER_FAILED for any other) and its text, of which only
 * the printable part, at most TUTTI__WIRE_ERRTEXT_MAX bytes, is kept: it came from another
 * process. The first report wins. */
START_TEST(test_failure_report)
{
    static const tutti_status_t sent[] = {TUTTI_ERR_TIMEOUT, TUTTI_ERR_BOOTSTRAP,
                                          TUTTI_ERR_NO_MEMORY, (tutti_status_t)-100};
    static const tutti_status_t got[] = {TUTTI_ERR_TIMEOUT, TUTTI_ERR_BOOTSTRAP,
                                         TUTTI_ERR_PEER_FAILED, TUTTI_ERR_PEER_FAILED};
    for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++) {
        tutti__store_t *s0, *s1, *s2;
        ck_assert_int_eq(tutti__store_open(0, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s0),
                         TUTTI_OK);
        ck_assert_int_eq(tutti__store_open(1, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s1),
                         TUTTI_OK);
        ck_assert_int_eq(tutti__store_open(2, 3, "127.0.0.1", port, &auth, tutti__now() + 5.0, &s2),
                         TUTTI_OK);
        ck_assert_int_eq(tutti__store_doomed(s0), TUTTI_OK);
        /* rank 1's error: control bytes, then more than the wire carries */
        char *e = tutti__tls_error();
        snprintf(e, TUTTI__ERRLEN, "rank 1 waited\n\x1b[31mfor rank 7\x7f");
        size_t n = strlen(e);
        memset(e + n, 'x', TUTTI__ERRLEN - n - 1);
        e[TUTTI__ERRLEN - 1] = '\0';
        tutti__store_close_failed(s1, sent[i]);
        ck_assert_msg(strncmp(tutti_last_error(), "rank 1 waited", 13) == 0,
                      "close_failed changed the caller's error: %s", tutti_last_error());
        tutti_status_t st = wait_doomed(s0);
        const char *m = tutti_last_error();
        ck_assert_msg(st == got[i], "status %d reported: rank 0 got %d: %s", sent[i], st, m);
        ck_assert_msg(strstr(m, "rank 1's creation failed: rank 1 waited??[31mfor rank 7?") != NULL,
                      "status %d: %s", sent[i], m);
        ck_assert_msg(strlen(m) < 100 + TUTTI__WIRE_ERRTEXT_MAX, "%zu bytes: %s", strlen(m), m);
        /* a second failure does not replace the first */
        snprintf(tutti__tls_error(), TUTTI__ERRLEN, "rank 2 has another story");
        tutti__store_close_failed(s2, TUTTI_ERR_BOOTSTRAP);
        usleep(50000);
        ck_assert_int_eq(tutti__store_doomed(s0), got[i]);
        ck_assert_msg(strstr(tutti_last_error(), "rank 1's creation failed") != NULL, "%s",
                      tutti_last_error());
        tutti__store_close(s0);
    }
}
END_TEST

/* The launcher's variables: the first set wins (torchrun's inside mpirun, mpirun's inside an
 * sbatch script's Slurm ones), but MPICH's and Open MPI's must agree when both are set (a nested
 * mpirun's leaked in: each rank silently became a job of its own); a set with one half missing
 * is refused. */
START_TEST(test_launcher_vars)
{
    static const char *const all[] = {"RANK", "WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                      "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"};
    static const struct {
        const char *set[8]; /* NAME, VALUE pairs */
        int rank, size;     /* -1: refused */
        const char *mention;
    } cases[] = {
        {{"PMI_RANK", "0", "PMI_SIZE", "1", "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"},
         -1, -1, "disagree"},
        {{"PMI_RANK", "0", "PMI_SIZE", "2", "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"},
         -1, -1, "OMPI_COMM_WORLD_RANK/SIZE say rank 1 of 2"},
        {{"PMI_RANK", "1", "PMI_SIZE", "2", "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"},
         1, 2, NULL},
        {{"RANK", "1", "WORLD_SIZE", "2", "PMI_RANK", "0", "PMI_SIZE", "1"}, 1, 2, NULL},
        {{"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", "SLURM_PROCID", "0",
          "SLURM_STEP_NUM_TASKS", "8"}, 3, 4, NULL},
        {{"SLURM_PROCID", "2", "SLURM_STEP_NUM_TASKS", "3", "SLURM_NTASKS", "4"}, 2, 3, NULL},
        /* a batch script's own environment, and an salloc shell's: not srun's tasks */
        {{"SLURM_PROCID", "0", "SLURM_NTASKS", "3"}, 0, 1, NULL},
        {{"SLURM_NTASKS", "2"}, 0, 1, NULL},
        /* a task number no batch shell has, without a step: set by hand or by some wrapper */
        {{"SLURM_PROCID", "1", "SLURM_NTASKS", "2"}, -1, -1, "SLURM_PROCID=\"1\""},
        {{"SLURM_PROCID", "3", "SLURM_STEP_NUM_TASKS", "3"}, -1, -1, "SLURM_STEP_NUM_TASKS"},
        {{"RANK", "1"}, -1, -1, "WORLD_SIZE"},
        {{"PMI_SIZE", "2"}, -1, -1, "PMI_RANK"},
        /* blanks around a number are allowed on both sides (strtol's leading ones only were) */
        {{"RANK", " 1 ", "WORLD_SIZE", "2 "}, 1, 2, NULL},
        {{"RANK", "0", "WORLD_SIZE", "2000000"}, -1, -1, "size <= 1048576"},
        {{"RANK", "0", "WORLD_SIZE", "99999999999999999999"}, -1, -1, "WORLD_SIZE"},
        /* both empty, as a template that expanded to nothing: alone, every process would be a
         * job of its own (it ran so, silently); beside another launcher, unset */
        {{"RANK", "", "WORLD_SIZE", ""}, -1, -1, "set but empty"},
        {{"RANK", "", "WORLD_SIZE", "", "PMI_RANK", "1", "PMI_SIZE", "2"}, 1, 2, NULL},
        /* the other MPI launcher's pair half set or not numbers: a leftover (it was ignored) */
        {{"PMI_RANK", "0", "PMI_SIZE", "1", "OMPI_COMM_WORLD_RANK", "1"}, -1, -1,
         "OMPI_COMM_WORLD_RANK=\"1\""},
        {{"PMI_RANK", "0", "PMI_SIZE", "2", "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE",
          "abc"}, -1, -1, "leftover"},
        /* a task number that is not one, or not 0, without a step (both ran as one rank) */
        {{"SLURM_PROCID", "abc", "SLURM_NTASKS", "2"}, -1, -1, "SLURM_PROCID=\"abc\""},
        {{"SLURM_PROCID", "-1"}, -1, -1, "SLURM_PROCID=\"-1\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            unsetenv(all[k]);
        for (int k = 0; k < 8 && cases[i].set[k] != NULL; k += 2)
            setenv(cases[i].set[k], cases[i].set[k + 1], 1);
        int rank = -1, size = -1;
        const char *how = NULL;
        tutti_status_t st = tutti__launcher_rank(&rank, &size, &how);
        if (cases[i].rank < 0) {
            ck_assert_msg(st == TUTTI_ERR_INVALID_ARG, "case %zu: %d, rank %d of %d (%s)", i, st,
                          rank, size, how);
            ck_assert_msg(strstr(tutti_last_error(), cases[i].mention) != NULL, "case %zu: %s", i,
                          tutti_last_error());
        } else
            ck_assert_msg(st == TUTTI_OK && rank == cases[i].rank && size == cases[i].size,
                          "case %zu: %d, rank %d of %d: %s", i, st, rank, size, tutti_last_error());
    }
    /* srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE itself, with PMI_JOBID "<job>.<step>": a Slurm
     * step (its port and first node), not PMI's 29500 on 127.0.0.1; an mpiexec inside a step,
     * whose PMI numbers are its own, stays PMI */
    static const char *const pmi2[] = {"PMI_RANK", "1", "PMI_SIZE", "3", "PMI_JOBID", "77.4",
                                       "SLURM_JOB_ID", "77", "SLURM_STEP_ID", "4", "SLURM_PROCID",
                                       "1", "SLURM_STEP_NUM_TASKS", "3"};
    for (int variant = 0; variant < 3; variant++) {
        for (size_t k = 0; k < sizeof pmi2 / sizeof pmi2[0]; k += 2)
            setenv(pmi2[k], pmi2[k + 1], 1);
        if (variant == 1)
            unsetenv("PMI_JOBID");
        if (variant == 2)
            setenv("SLURM_PROCID", "0", 1); /* an mpiexec's rank 1 in task 0 */
        int rank = -1, size = -1;
        const char *how = NULL;
        ck_assert_int_eq(tutti__launcher_rank(&rank, &size, &how), TUTTI_OK);
        ck_assert_msg(rank == 1 && size == 3 && tutti__launcher_is_slurm(how) == (variant == 0),
                      "variant %d: rank %d of %d by %s", variant, rank, size, how);
        for (size_t k = 0; k < sizeof pmi2 / sizeof pmi2[0]; k += 2)
            unsetenv(pmi2[k]);
    }
}
END_TEST

/* Where a Slurm step meets when the user set no MASTER_ADDR/MASTER_PORT: a port of the job's
 * and step's own, on the step's first node when it spans several. */
START_TEST(test_slurm_store)
{
    static const struct {
        const char *list, *first; /* NULL: refused */
    } lists[] = {
        {"vm", "vm"},
        {"node[07-09,12],gpu1", "node07"},
        {"node[12,07-09]", "node12"},
        {"rack[1-2]-n[3-4],x", "rack1-n3"},
        {"a,b[1-3]", "a"},
        {"n[5]", "n5"},
        {"n[]", NULL},
        {"n[a-b]", NULL},
        {"n[1-2", NULL},
        {"n]1[", NULL},
        {"", NULL},
        {",x", NULL},
        {"a b", NULL},
        {"n[[1]]", NULL},
        {"n[-1]", NULL},
        {"n[,2]x", NULL},
        {"a\tb", NULL},
        {"[1-2]", NULL},   /* no host name before the range: it met at "1", 0.0.0.1 */
        {"n[3-1]", NULL},  /* a range that ends before it starts */
        {"n[1-a]", NULL},
        {"n[1-]", NULL},
        {"n[09-10]", "n09"},
        {"n[1,3-4]", "n1"},
        {"n[1--2]", NULL},
        {"n[3--1]", NULL},
        {"n[1-99999999999999999999]", NULL},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        char out[64] = "?";
        bool ok = tutti__hostlist_first(lists[i].list, out, sizeof out);
        ck_assert_msg(lists[i].first ? ok && strcmp(out, lists[i].first) == 0 : !ok,
                      "\"%s\" gave %s \"%s\"", lists[i].list, ok ? "" : "(refused)", out);
    }
    char small[4];
    ck_assert(!tutti__hostlist_first("node[07-09]", small, sizeof small));

    char addr[64];
    long port = 0;
    setenv("SLURM_JOB_ID", "123456", 1);
    setenv("SLURM_STEP_ID", "3", 1);
    setenv("SLURM_STEP_NUM_NODES", "1", 1);
    setenv("SLURM_STEP_NODELIST", "vm", 1);
    ck_assert_int_eq(tutti__slurm_store(addr, sizeof addr, &port), TUTTI_OK);
    ck_assert_int_eq(port, 20000 + 456 * 10 + 3);
    ck_assert_str_eq(addr, ""); /* one node: loopback */
    setenv("SLURM_STEP_NUM_NODES", "4", 1);
    setenv("SLURM_STEP_NODELIST", "cn[0101-0104]", 1);
    ck_assert_int_eq(tutti__slurm_store(addr, sizeof addr, &port), TUTTI_OK);
    ck_assert_str_eq(addr, "cn0101");
    ck_assert_int_eq(tutti__slurm_store(NULL, 0, &port), TUTTI_OK); /* MASTER_ADDR was set */
    setenv("SLURM_STEP_NODELIST", "cn[0101-", 1);
    ck_assert_int_eq(tutti__slurm_store(addr, sizeof addr, &port), TUTTI_ERR_INVALID_ARG);
    ck_assert_msg(strstr(tutti_last_error(), "MASTER_ADDR") != NULL, "%s", tutti_last_error());
    /* a node count that is none: refused, where it was read as one node (meeting on loopback) */
    setenv("SLURM_STEP_NODELIST", "cn[0101-0104]", 1);
    static const char *const bad_nodes[] = {"abc", "0", "-2", "2x", ""};
    for (size_t i = 0; i < sizeof bad_nodes / sizeof bad_nodes[0]; i++) {
        setenv("SLURM_STEP_NUM_NODES", bad_nodes[i], 1);
        ck_assert_msg(tutti__slurm_store(addr, sizeof addr, &port) == TUTTI_ERR_INVALID_ARG &&
                          strstr(tutti_last_error(), "SLURM_STEP_NUM_NODES") != NULL,
                      "SLURM_STEP_NUM_NODES=\"%s\": %s", bad_nodes[i], tutti_last_error());
    }
    setenv("SLURM_STEP_NUM_NODES", "4", 1);
    setenv("SLURM_STEP_ID", "-1", 1); /* a hostile value still gives a port in range */
    setenv("SLURM_JOB_ID", "x", 1);
    ck_assert_int_eq(tutti__slurm_store(NULL, 0, &port), TUTTI_OK);
    ck_assert_int_eq(port, 20000);
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    unsetenv("SLURM_STEP_NUM_NODES");
    unsetenv("SLURM_STEP_NODELIST");
}
END_TEST

/* launcher_rank_log runs tutti__launcher_rank and returns what it logged (stderr). */
static void launcher_rank_log(int *rank, int *size, char *log, size_t cap)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *f = tmpfile();
    ck_assert(saved >= 0 && f != NULL);
    dup2(fileno(f), 2);
    const char *how = NULL;
    tutti_status_t st = tutti__launcher_rank(rank, size, &how);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_int_eq(st, TUTTI_OK);
    rewind(f);
    size_t n = fread(log, 1, cap - 1, f);
    log[n] = '\0';
    fclose(f);
}

/* RANK/WORLD_SIZE left in the shell around an mpirun or an srun: they win, with a warning
 * naming the launcher's own numbers; torchrun inside either (its variables mark it) is not
 * warned. */
START_TEST(test_launcher_leftover)
{
    static const struct {
        const char *set[4]; /* the launcher's own pair, NAME, VALUE */
        const char *says;   /* in the warning */
    } launchers[] = {
        {{"PMI_RANK", "1", "PMI_SIZE", "2"}, "PMI_RANK/PMI_SIZE say rank 1 of 2"},
        /* srun passes the shell's environment on: every task was rank 0 of 1, without a word */
        {{"SLURM_PROCID", "1", "SLURM_STEP_NUM_TASKS", "2"},
         "SLURM_PROCID/SLURM_STEP_NUM_TASKS say rank 1 of 2"},
    };
    char log[1024];
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        int rank = -1, size = -1;
        setenv("RANK", "0", 1);
        setenv("WORLD_SIZE", "2", 1);
        for (int k = 0; k < 4; k += 2)
            setenv(launchers[i].set[k], launchers[i].set[k + 1], 1);
        launcher_rank_log(&rank, &size, log, sizeof log);
        ck_assert(rank == 0 && size == 2);
        ck_assert_msg(strstr(log, launchers[i].says) != NULL && strstr(log, "unset them") != NULL,
                      "%s", log);
        setenv("TORCHELASTIC_RUN_ID", "none", 1); /* torchrun inside: its own numbers */
        launcher_rank_log(&rank, &size, log, sizeof log);
        ck_assert_msg(log[0] == '\0', "torchrun inside %s warned: %s", launchers[i].set[0], log);
        unsetenv("TORCHELASTIC_RUN_ID");
        setenv(launchers[i].set[0], "0", 1); /* agreeing: nothing to say */
        launcher_rank_log(&rank, &size, log, sizeof log);
        ck_assert_msg(log[0] == '\0', "%s", log);
        for (int k = 0; k < 4; k += 2)
            unsetenv(launchers[i].set[k]);
    }
    /* mpirun inside an srun step (or daemons srun started): the MPI pair agrees with RANK and
     * the step's own numbers differ, as they should: nothing to say */
    static const char *const nested[] = {"RANK", "1", "WORLD_SIZE", "2", "PMI_RANK", "1",
                                         "PMI_SIZE", "2", "SLURM_PROCID", "0",
                                         "SLURM_STEP_NUM_TASKS", "1"};
    for (size_t k = 0; k < sizeof nested / sizeof nested[0]; k += 2)
        setenv(nested[k], nested[k + 1], 1);
    int rank = -1, size = -1;
    launcher_rank_log(&rank, &size, log, sizeof log);
    ck_assert(rank == 1 && size == 2);
    ck_assert_msg(log[0] == '\0', "mpirun inside srun warned: %s", log);
    for (size_t k = 0; k < sizeof nested / sizeof nested[0]; k += 2)
        unsetenv(nested[k]);
}
END_TEST

/* A store port of the job's own under mpirun with MASTER_PORT unset: from Open MPI's job id
 * (the same number tutti_torch computes: test_launchers test_setup_env_job_port), from Hydra's
 * only with a Hydra proxy above (this test runs under none; tests/multinode.sh and
 * test_launchers run real ones). */
START_TEST(test_launcher_port)
{
    long port = 0;
    const char *what = NULL;
    static const char ompi[] = "OMPI_COMM_WORLD_RANK/SIZE", hydra[] = "PMI_RANK/PMI_SIZE";
    ck_assert(!tutti__launcher_port(ompi, &port, &what)); /* no job id */
    setenv("OMPI_MCA_ess_base_jobid", "2110783489", 1);
    ck_assert(tutti__launcher_port(ompi, &port, &what));
    ck_assert_int_eq(port, 31122);
    ck_assert_msg(strstr(what, "OMPI_MCA_ess_base_jobid") != NULL, "%s", what);
    setenv("OMPI_MCA_ess_base_jobid", "2110783490", 1);
    ck_assert(tutti__launcher_port(ompi, &port, &what));
    ck_assert_int_ne(port, 31122);
    setenv("OMPI_MCA_ess_base_jobid", "", 1);
    setenv("PMIX_NAMESPACE", "prterun-vm-77@1", 1);
    ck_assert(tutti__launcher_port(ompi, &port, &what));
    ck_assert(port >= TUTTI__JOB_PORT_BASE && port < TUTTI__JOB_PORT_BASE + TUTTI__JOB_PORTS);
    ck_assert_msg(strstr(what, "PMIX_NAMESPACE") != NULL, "%s", what);
    unsetenv("OMPI_MCA_ess_base_jobid");
    unsetenv("PMIX_NAMESPACE");
    setenv("PMI_SIZE", "2", 1);
    ck_assert(!tutti__launcher_port(hydra, &port, &what)); /* no hydra_pmi_proxy above us */
    setenv("MPI_LOCALNRANKS", "2", 1);
    ck_assert(!tutti__launcher_port(hydra, &port, &what)); /* ... even with every rank here */
    unsetenv("MPI_LOCALNRANKS");
    unsetenv("PMI_SIZE");
    ck_assert(!tutti__launcher_port("RANK/WORLD_SIZE", &port, &what));
}
END_TEST

/* (b) rank 2 of 3 never starts: the others fail at their deadline, naming it. */
static void rank_missing(int rank, int size)
{
    tutti__store_t *s;
    tutti__bootstrap_t bs = open_bs(rank, size, 10.0, &s);
    bs.deadline = tutti__now() + 1.0; /* from here: opening may take a while (TSan) */
    double t0 = tutti__now();
    int all[MAXR];
    tutti_status_t st = tutti__bs_allgather(&bs, &rank, sizeof rank, all);
    double dt = tutti__now() - t0;
    REQUIRE(st == TUTTI_ERR_BOOTSTRAP, "allgather -> %d", (int)st);
    REQUIRE(strstr(tutti_last_error(), "rank(s) 2 (of 3)") != NULL, "message: %s",
            tutti_last_error());
    REQUIRE(strstr(tutti_last_error(), "the test's TCP store") != NULL, "message: %s",
            tutti_last_error());
    REQUIRE(dt > 0.9 && dt < 4.0, "allgather took %g s for a 1 s deadline", dt);
    /* rank 2 never closes: rank 0 serves until rank 1 is through, not to the 10 s deadline */
    sh->ready[rank] = 1;
    for (double t1 = tutti__now(); rank == 0 && !sh->ready[1] && tutti__now() - t1 < 10;)
        tutti__sleep_us(1000);
    tutti__store_close_now(s);
}

START_TEST(test_missing_rank)
{
    pid_t pids[2] = {spawn(rank_missing, 0, 3), spawn(rank_missing, 1, 3)};
    int ranks[2] = {0, 1};
    reap(pids, ranks, 2);
}
END_TEST

static void rank_missing_barrier(int rank, int size)
{
    tutti__store_t *s;
    tutti__bootstrap_t bs = open_bs(rank, size, 1.0, &s);
    int group[3] = {0, 1, 3};
    if (rank == 2 || rank == 3) /* 2 is not in the group; 3 never comes to the barrier */
        goto out;
    tutti_status_t st = tutti__bs_group_barrier(&bs, "g", group, 3);
    REQUIRE(st == TUTTI_ERR_BOOTSTRAP, "group barrier -> %d", (int)st);
    REQUIRE(strstr(tutti_last_error(), "rank(s) 3 (of 3)") != NULL, "message: %s",
            tutti_last_error());
out:
    tutti__store_close(s);
}

START_TEST(test_missing_barrier)
{
    run_ranks(rank_missing_barrier, 4);
}
END_TEST

/* Build a mesh of size ranks; the store is closed once the mesh is up, as comm.c does. */
static tutti__liveness_t *mesh(int rank, int size)
{
    tutti__store_t *s;
    tutti__bootstrap_t bs = open_bs(rank, size, 10.0, &s);
    tutti__liveness_t *l;
    REQUIRE_OK(tutti__live_create(&bs, "127.0.0.1", 0, &l));
    tutti__store_close(s);
    return l;
}

/* survivor waits for the parent's kill, then checks that the victim shows as dead within 5 s
 * (at once, in fact: its end closes the connection; the slack is for a busy machine's TSan). */
static void survivor(int rank, tutti__liveness_t *l, int victim)
{
    sh->ready[rank] = 1;
    while (sh->kill_time == 0.0)
        tutti__sleep_us(1000);
    int dead = -1;
    tutti_status_t st;
    while ((st = tutti__live_check(l, &dead)) == TUTTI_OK && tutti__now() < sh->kill_time + 5.0)
        tutti__sleep_us(1000);
    double dt = tutti__now() - sh->kill_time;
    REQUIRE(st == TUTTI_ERR_PEER_FAILED, "rank %d not seen dead %g s after SIGKILL", victim, dt);
    REQUIRE(dead == victim, "dead = %d, expected %d", dead, victim);
    REQUIRE(strstr(tutti_last_error(), "without a goodbye"), "message: %s", tutti_last_error());
    dead = -1;
    REQUIRE(tutti__live_check(l, &dead) == TUTTI_ERR_PEER_FAILED && dead == victim,
            "the dead rank is reported again");
    REQUIRE(!tutti__live_left(l, victim), "a killed rank is not \"left\"");
    sh->res[rank].elapsed = dt;
}

/* (c) rank 2 of 3 is killed: ranks 0 and 1 see it within a second; then they part cleanly. */
static void rank_killed(int rank, int size)
{
    tutti__liveness_t *l = mesh(rank, size);
    if (rank == 2) {
        sh->ready[rank] = 1;
        pause(); /* until SIGKILL */
    }
    survivor(rank, l, 2);
    REQUIRE_OK(tutti__live_goodbye(l, true, tutti__now() + 5.0));
    tutti__live_destroy(l);
}

static void kill_when_ready(pid_t victim, int nready)
{
    double end = tutti__now() + 10.0;
    for (;;) {
        int n = 0;
        for (int r = 0; r < MAXR; r++)
            n += sh->ready[r];
        if (n == nready || tutti__now() > end)
            break;
        tutti__sleep_us(1000);
    }
    kill(victim, SIGKILL);
    sh->kill_time = tutti__now();
}

START_TEST(test_killed_rank)
{
    pid_t pids[3];
    for (int r = 0; r < 3; r++)
        pids[r] = spawn(rank_killed, r, 3);
    kill_when_ready(pids[2], 3);
    int st;
    waitpid(pids[2], &st, 0);
    int ranks[2] = {0, 1};
    reap(pids, ranks, 2);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "victim status 0x%x", st);
}
END_TEST

/* A rank that forks a child, then dies: the child's inherited copies of the connections must
 * not keep it looking alive. */
static void rank_fork_then_die(int rank, int size)
{
    tutti__liveness_t *l = mesh(rank, size);
    if (rank == 1) {
        pid_t kid = fork();
        if (kid == 0) {
            tutti__sleep_us(3000000); /* outlives its parent, holding whatever it inherited */
            _exit(0);
        }
        REQUIRE(kid > 0, "fork: %s", strerror(errno));
        sh->ready[rank] = 1;
        pause();
    }
    survivor(rank, l, 1);
    tutti__live_destroy(l);
}

START_TEST(test_fork_then_die)
{
    pid_t pids[2] = {spawn(rank_fork_then_die, 0, 2), spawn(rank_fork_then_die, 1, 2)};
    kill_when_ready(pids[1], 2);
    int st, ranks[1] = {0};
    waitpid(pids[1], &st, 0);
    reap(pids, ranks, 1);
}
END_TEST

/* (d) rank 1 says goodbye and exits: rank 0 sees it "left", never dead. */
static void rank_goodbye(int rank, int size)
{
    tutti__liveness_t *l = mesh(rank, size);
    int dead = -1;
    if (rank == 1) {
        REQUIRE_OK(tutti__live_goodbye(l, false, 0));
        tutti__live_destroy(l);
        return;
    }
    double end = tutti__now() + 5.0;
    while (!tutti__live_left(l, 1) && tutti__now() < end) {
        REQUIRE_OK(tutti__live_check(l, &dead));
        tutti__sleep_us(1000);
    }
    REQUIRE(tutti__live_left(l, 1), "rank 1 never showed as left");
    tutti__sleep_us(100000); /* its connection has closed by now: still not dead */
    for (int i = 0; i < 5; i++)
        REQUIRE_OK(tutti__live_check(l, &dead));
    double t0 = tutti__now();
    REQUIRE_OK(tutti__live_goodbye(l, true, tutti__now() + 5.0));
    REQUIRE(tutti__now() - t0 < 3, "goodbye after the peer left took %g s (its deadline: 5 s)",
            tutti__now() - t0);
    tutti__live_destroy(l);
}

START_TEST(test_goodbye_left)
{
    run_ranks(rank_goodbye, 2);
}
END_TEST

/* A peer that stays alive without a goodbye: waiting for it times out, naming it. */
static void rank_goodbye_late(int rank, int size)
{
    tutti__liveness_t *l = mesh(rank, size);
    if (rank == 1) {
        while (!sh->ready[0])
            tutti__sleep_us(1000);
        REQUIRE_OK(tutti__live_goodbye(l, true, tutti__now() + 5.0));
        tutti__live_destroy(l);
        return;
    }
    double t0 = tutti__now();
    tutti_status_t st = tutti__live_goodbye(l, true, tutti__now() + 0.3);
    double dt = tutti__now() - t0;
    sh->ready[0] = 1;
    REQUIRE(st == TUTTI_ERR_TIMEOUT, "goodbye -> %d", (int)st);
    REQUIRE(dt > 0.25 && dt < 3, "waited %g s for a 0.3 s deadline", dt);
    REQUIRE(strstr(tutti_last_error(), "rank(s) 1 (of 2)"), "message: %s", tutti_last_error());
    /* rank 1 now says goodbye too: a second wait succeeds. */
    REQUIRE_OK(tutti__live_goodbye(l, true, tutti__now() + 5.0));
    tutti__live_destroy(l);
}

START_TEST(test_goodbye_timeout)
{
    run_ranks(rank_goodbye_late, 2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc = tcase_create("full");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 40);
    tcase_add_loop_test(tc, test_full, 0, (int)(sizeof full_sizes / sizeof full_sizes[0]));
    tcase_add_loop_test(tc, test_full_host, 0, (int)(sizeof full_sizes / sizeof full_sizes[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_store_semantics);
    tcase_add_test(tc, test_failing_oob);
    tcase_add_test(tc, test_port_in_use);
    tcase_add_test(tc, test_silent_listener);
    tcase_add_test(tc, test_two_rank0s);
    tcase_add_test(tc, test_no_server);
    tcase_add_test(tc, test_world_size_mismatch);
    tcase_add_test(tc, test_duplicate_rank);
    tcase_add_test(tc, test_failure_report);
    tcase_add_test(tc, test_launcher_vars);
    tcase_add_test(tc, test_slurm_store);
    tcase_add_test(tc, test_launcher_port);
    tcase_add_test(tc, test_launcher_leftover);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 40);
    tcase_add_test(tc, test_missing_rank);
    tcase_add_test(tc, test_missing_barrier);
    tcase_add_test(tc, test_killed_rank);
    tcase_add_test(tc, test_fork_then_die);
    tcase_add_test(tc, test_goodbye_left);
    tcase_add_test(tc, test_goodbye_timeout);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(suite)
