/* check_rendezvous.c: the rendezvous store attacked, as a stranger, another job and a flood of
 * clients would (issue 15, point 1): what a stranger sends is refused and tells it nothing, a
 * second job on the port fails at once and the first is untouched, the store listens on
 * MASTER_ADDR's address only, bounds its unauthenticated clients, survives the file-descriptor
 * limit without spinning, refuses a server that cannot prove the secret, and a one-rank job
 * serves no store. Each probe was an attack that worked before (docs/security.md's table). */
#include <arpa/inet.h>
#include <check.h>
#include "check_main.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/bootstrap/store.h"
#include "../src/bootstrap/store_impl.h"
#include "../src/bootstrap/wire.h"
#include "harness.h"

#define TOKEN_A "token-of-job-A-0123456789abcdef"
#define TOKEN_B "token-of-job-B-fedcba9876543210"

/* ---- a stranger's raw client ------------------------------------------------------------- */

/* raw_connect connects to the store on port, retrying a refusal for up to 10 s: rank 0, which
 * serves it, may still be starting on a busy machine. */
static int raw_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (double t0 = th_now();;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        struct timeval tv = {5, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        int err = errno;
        close(fd);
        if (err != ECONNREFUSED || th_now() - t0 > 10)
            return -1;
        usleep(20000);
    }
}

static int read_n(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* raw_reply reads one reply: its type (-1: the store hung up or said nothing), text the body. */
static int raw_reply(int fd, uint32_t w[4], char *text, size_t cap)
{
    uint8_t hdr[TUTTI__WIRE_HDR];
    text[0] = '\0';
    if (read_n(fd, hdr, sizeof hdr) != 0)
        return -1;
    tutti__wire_get_hdr(hdr, w);
    size_t n = w[3] < cap - 1 ? w[3] : cap - 1;
    if (w[3] > (1u << 20) || read_n(fd, text, n) != 0)
        return -1;
    text[n] = '\0';
    return (int)w[1];
}

static int raw_hello(int fd, uint32_t magic, uint32_t rank, uint32_t size, uint32_t flags,
                     const uint8_t *job, const uint8_t *mac)
{
    uint8_t m[TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY] = {0};
    tutti__wire_put_hdr(m, TUTTI__REQ_HELLO, rank, size);
    uint32_t be = htonl(magic);
    memcpy(m, &be, 4);
    tutti__wire_put32(m + TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_FLAGS, flags);
    if (job)
        memcpy(m + TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_JOB, job, TUTTI__AUTH_JOB);
    if (mac)
        memcpy(m + TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_MAC, mac, 32);
    return send(fd, m, sizeof m, MSG_NOSIGNAL) == (ssize_t)sizeof m ? 0 : -1;
}

/* closed tells whether the store hung up on fd (within 5 s): an end of stream, or a reset. */
static int closed(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* ---- a stranger at the store of a running job --------------------------------------------- */

/* stranger runs in rank 1's process before it joins: every attempt is refused with a reason
 * that gives nothing away (the job's size never shows), and the connection is closed. */
static int stranger(int port, bool secret_job)
{
    int bad = 0;
    uint32_t w[4];
    char text[600];
    tutti__auth_t me;
    unsetenv("TUTTI_JOB_TOKEN"); /* what a stranger knows: the public job id, not the token */
    tutti__auth_from_env(NULL, &me);
    uint8_t junk[32];
    memset(junk, 0x77, sizeof junk);
    static const struct {
        const char *what;
        int kind; /* 0 no proof, 1 forged proof, 2 wrong size, 3 GET first, 4 old protocol,
                     5 SET of 1 MiB first */
        const char *want;
    } tries[] = {
        {"hello without proof", 0, "authentication required"},
        {"hello with a forged MAC", 1, "authentication failed"},
        {"hello with another world size", 2, "authentication required"},
        {"GET before hello", 3, "before its hello"},
        {"the previous protocol's hello", 4, "another protocol"},
        {"SET of 1 MiB before hello", 5, "before its hello"},
    };
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        int fd = raw_connect(port);
        if (fd < 0)
            return th_fail("stranger: cannot connect to the store on port %d", port);
        int t = raw_reply(fd, w, text, sizeof text);
        if (t != TUTTI__REP_CHALLENGE || w[3] != 32) {
            bad = th_fail("stranger: the store opened with reply %d, not a 32-byte challenge", t);
            close(fd);
            continue;
        }
        uint32_t want_flag = secret_job ? TUTTI__WIRE_STRICT : TUTTI__WIRE_HOSTFILE;
        if (w[2] != want_flag)
            bad = th_fail("stranger: challenge flags %u, expected %u", w[2], want_flag);
        uint8_t hdr[TUTTI__WIRE_HDR + 8];
        switch (tries[i].kind) {
        case 0: raw_hello(fd, TUTTI__WIRE_MAGIC, 1, 2, 0, me.job, NULL); break;
        case 1: raw_hello(fd, TUTTI__WIRE_MAGIC, 1, 2, TUTTI__WIRE_PROOF, me.job, junk); break;
        case 2: raw_hello(fd, TUTTI__WIRE_MAGIC, 1, 3, 0, me.job, NULL); break;
        case 3:
            tutti__wire_put_hdr(hdr, TUTTI__REQ_GET, 6, 0);
            memcpy(hdr + TUTTI__WIRE_HDR, "ag/0/0", 6);
            send(fd, hdr, TUTTI__WIRE_HDR + 6, MSG_NOSIGNAL);
            break;
        case 4: raw_hello(fd, 0x54545331u, 1, 2, 0, NULL, NULL); break;
        case 5: /* the header alone: the refusal must come before any body is read */
            tutti__wire_put_hdr(hdr, TUTTI__REQ_SET, 8, 1u << 20);
            send(fd, hdr, TUTTI__WIRE_HDR, MSG_NOSIGNAL);
            break;
        }
        t = raw_reply(fd, w, text, sizeof text);
        if (t != TUTTI__REP_ERROR || strstr(text, tries[i].want) == NULL)
            bad = th_fail("stranger, %s: reply %d \"%s\", expected an error saying \"%s\"",
                          tries[i].what, t, text, tries[i].want);
        if (strstr(text, "2 ranks") != NULL || strstr(text, "serves a job of") != NULL)
            bad = th_fail("stranger, %s: the refusal gives the job's size away: \"%s\"",
                          tries[i].what, text);
        if (!closed(fd))
            bad = th_fail("stranger, %s: the store kept the connection open", tries[i].what);
        close(fd);
    }
    return bad;
}

static int allgather_ok(tutti_comm_t *comm, int rank, int size)
{
    int32_t mine = 1000 + rank, all[TH_MAX_RANKS];
    tutti_status_t st = tutti_allgather(&mine, all, 1, TUTTI_INT32, comm, NULL);
    if (st != TUTTI_OK)
        return th_fail("allgather: %d (%s)", st, tutti_comm_last_error(comm));
    for (int r = 0; r < size; r++)
        if (all[r] != 1000 + r)
            return th_fail("allgather: slot %d holds %d", r, all[r]);
    return 0;
}

static int join_and_check(int rank, int size)
{
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    int bad = allgather_ok(comm, rank, size);
    if (tutti_comm_destroy(comm) != TUTTI_OK && !bad)
        bad = th_fail("destroy: %s", tutti_last_error());
    return bad;
}

static int stranger_rank(int rank, int size, void *arg)
{
    int bad = 0;
    if (rank == 1) {
        usleep(200000); /* rank 0 serves by now */
        bad = stranger(atoi(getenv("MASTER_PORT")), arg != NULL);
        if (arg != NULL)
            setenv("TUTTI_JOB_TOKEN", TOKEN_A, 1);
    }
    return join_and_check(rank, size) || bad;
}

/* MASTER_ADDR=0.0.0.0, which torch's stores take for this host: tutti takes it for 127.0.0.1
 * (its store listened on every address and named its secret file for 0.0.0.0, which no rank's
 * connection comes from: every rank was refused, "finds no secret of its job"). */
static int any_addr_rank(int rank, int size, void *arg)
{
    (void)arg;
    return join_and_check(rank, size);
}

START_TEST(test_any_addr)
{
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 30;
    o.rank_timeout_s = 10;
    o.env[0] = "MASTER_ADDR=0.0.0.0";
    o.env[1] = "TUTTI_JOB_TOKEN"; /* unset: the host's secret file is what is tested */
    ck_assert_msg(th_run_opts(2, &o, any_addr_rank, NULL) == 0, "MASTER_ADDR=0.0.0.0 failed");
}
END_TEST

/* A secret directory rank 0 cannot use (here open to others; in /tmp another user may have
 * made it): rank 0 fails before its store serves, and rank 1 fails within seconds in rank 0's
 * words, not at its 60 s timeout ("could not reach the rendezvous store"). */
/* arg != NULL: the ranks run as uid 65533, and the directory is uid 65534's, mode 0700: rank 0
 * cannot even open it (it said "Permission denied; remove it", which it cannot). */
#define BAD_DIR_UID 65533
#define BAD_DIR_OTHER 65534

static int bad_dir_rank(int rank, int size, void *arg)
{
    (void)size;
    if (arg != NULL && (setresgid(BAD_DIR_UID, BAD_DIR_UID, BAD_DIR_UID) != 0 ||
                        setresuid(BAD_DIR_UID, BAD_DIR_UID, BAD_DIR_UID) != 0))
        return th_fail("rank %d: cannot become uid %d: %s", rank, BAD_DIR_UID, strerror(errno));
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    const char *msg = tutti_last_error();
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("rank %d: created a communicator with an unusable secret directory", rank);
    }
    fprintf(stderr, "[bad dir] rank %d after %.1f s: %s\n", rank, dt, msg);
    if (strstr(msg, "closed to others") == NULL)
        return th_fail("rank %d: the error does not say why the directory is refused: %s", rank,
                       msg);
    if (arg != NULL && strstr(msg, "belongs to uid 65534") == NULL)
        return th_fail("rank %d: the error does not name the directory's owner: %s", rank, msg);
    if (rank != 0 && (dt > 15 || strstr(msg, "cannot have started it") == NULL))
        return th_fail("rank %d failed after %.1f s (timeout 60 s), or without saying that rank "
                       "0 cannot have started its store: %s", rank, dt, msg);
    return 0;
}

/* Case 0: this user's directory, open to others (0755). Case 1 (root only): another user's,
 * closed (0700), which the ranks' user cannot open at all. */
START_TEST(test_bad_secret_dir)
{
    const bool foreign = _i == 1;
    if (foreign && geteuid() != 0) {
        fprintf(stderr, "# bad secret dir: another user's directory needs root to set up\n");
        return;
    }
    char dir[128], env[160], sub[160];
    snprintf(dir, sizeof dir, "/tmp/tutti-test-baddir-%d", (int)getpid());
    snprintf(sub, sizeof sub, "%s/tutti", dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    if (foreign) {
        /* XDG_RUNTIME_DIR is taken only when it is the ranks' user's */
        ck_assert_int_eq(chown(dir, BAD_DIR_UID, BAD_DIR_UID), 0);
        ck_assert_int_eq(chown(sub, BAD_DIR_OTHER, BAD_DIR_OTHER), 0);
    } else
        ck_assert_int_eq(chmod(sub, 0755), 0);
    snprintf(env, sizeof env, "XDG_RUNTIME_DIR=%s", dir);
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 40;
    o.rank_timeout_s = 60;
    o.env[0] = env;
    o.env[1] = "TUTTI_JOB_TOKEN"; /* unset: the host's secret file is what is tested */
    o.env[2] = "SLURM_JOB_ID";
    int rc = th_run_opts(2, &o, bad_dir_rank, foreign ? (void *)1 : NULL);
    rmdir(sub);
    rmdir(dir);
    ck_assert_msg(rc == 0, "an unusable secret directory: see stderr");
}
END_TEST

START_TEST(test_stranger)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    o.rank_timeout_s = 20;
    if (_i == 1)
        o.env[0] = "TUTTI_JOB_TOKEN=" TOKEN_A;
    ck_assert_msg(th_run_opts(2, &o, stranger_rank, _i == 1 ? (void *)1 : NULL) == 0,
                  "a stranger at the store of a %s job: see stderr",
                  _i == 1 ? "TUTTI_JOB_TOKEN" : "default (host file)");
}
END_TEST

/* ---- creations back to back on one port ---------------------------------------------------- */

/* A communicator, then another at once while the first lives (tutti_comm_init_env twice): a
 * rank that finishes the first creation early meets the first store still saying goodbye to
 * the others, its secret file already gone. It must look again, not take it for another job's
 * (it did: "finds no secret of its job", and the others waited out their timeout). */
static int back_to_back_rank(int rank, int size, void *arg)
{
    (void)arg;
    for (int round = 0; round < 3; round++) {
        tutti_comm_t *a = NULL, *b = NULL;
        if (tutti_comm_init_env(NULL, &a) != TUTTI_OK)
            return th_fail("round %d, first creation: %s", round, tutti_last_error());
        if (tutti_comm_init_env(NULL, &b) != TUTTI_OK) {
            int rc = th_fail("round %d, second creation: %s", round, tutti_last_error());
            tutti_comm_destroy(a);
            return rc;
        }
        int32_t x = rank + 1, y = 0;
        tutti_status_t st = tutti_allreduce(&x, &y, 1, TUTTI_INT32, TUTTI_SUM, b, NULL);
        int rc = st != TUTTI_OK || y != size * (size + 1) / 2
                     ? th_fail("round %d: allreduce on the second: %s, %d", round,
                               tutti_strerror(st), (int)y)
                     : 0;
        tutti_comm_destroy(b);
        tutti_comm_destroy(a);
        if (rc != 0)
            return rc;
    }
    return 0;
}

START_TEST(test_back_to_back)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 60;
    o.rank_timeout_s = 20;
    ck_assert_msg(th_run_opts(3, &o, back_to_back_rank, NULL) == 0,
                  "creations back to back on one port: see stderr");
}
END_TEST

/* ---- two jobs on one port ------------------------------------------------------------------ */

typedef struct twojobs {
    const char *b_env[2]; /* job B's difference from job A ("NAME=VALUE") */
    const char *want;     /* what B's rank 1 must be told */
} twojobs_t;

static const twojobs_t two_cases[] = {
    /* A: rank 0's host file; B: the same, started from another terminal (session) */
    {{NULL, NULL}, "another job"},
    /* A and B with their own tokens */
    {{"TUTTI_JOB_TOKEN=" TOKEN_B, NULL}, "authentication failed"},
    /* launcher ids (Slurm's): B's job id differs */
    {{"SLURM_JOB_ID=222", NULL}, "another job"},
};

/* job B's rank: it fails at once, with a message that says what is wrong */
static int job_b(int rank, const twojobs_t *tc)
{
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    for (int i = 0; i < 2 && tc->b_env[i] != NULL; i++)
        putenv((char *)tc->b_env[i]);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    const char *want = rank == 0 ? "in use" : tc->want;
    if (st != TUTTI_ERR_BOOTSTRAP || strstr(tutti_last_error(), want) == NULL) {
        fprintf(stderr, "job B rank %d: %d (%s): \"%s\", expected TUTTI_ERR_BOOTSTRAP saying "
                "\"%s\"\n", rank, st, tutti_strerror(st), tutti_last_error(), want);
        return 1;
    }
    if (dt > 3.0) {
        fprintf(stderr, "job B rank %d: failing took %.1f s, not at once\n", rank, dt);
        return 1;
    }
    return 0;
}

static int two_jobs_rank(int rank, int size, void *arg)
{
    const twojobs_t *tc = arg;
    if (rank == 0)
        return join_and_check(rank, size);
    /* Rank 1 of job A starts job B on A's port while rank 0 of A serves, as if from another
     * terminal: B's ranks are its children in a session of their own. A's rank 1 joins A once
     * B has failed. */
    usleep(200000);
    int bad = 0;
    for (int b = 1; b >= 0; b--) {
        pid_t p = fork();
        if (p == 0) {
            setsid();
            _exit(job_b(b, tc));
        }
        int st = 0;
        waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = th_fail("job B's rank %d did not fail at once as it should (status 0x%x)", b,
                          st);
    }
    return join_and_check(rank, size) || bad;
}

START_TEST(test_two_jobs)
{
    const twojobs_t *tc = &two_cases[_i];
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    o.rank_timeout_s = 20;
    if (_i == 1)
        o.env[0] = "TUTTI_JOB_TOKEN=" TOKEN_A;
    if (_i == 2)
        o.env[0] = "SLURM_JOB_ID=111";
    ck_assert_msg(th_run_opts(2, &o, two_jobs_rank, (void *)tc) == 0,
                  "two jobs on one port (case %d): see stderr", _i);
}
END_TEST

/* ---- two jobs of one session on one port ---------------------------------------------------- */

/* Two jobs started from one terminal or script on one port, without tokens or launcher ids,
 * cannot be told apart: job B's rank 1 may take job A's free rank 1 and both "succeed" on mixed
 * data. B's rank 0, which finds the port taken and A's secret file readable, tells A's store,
 * which fails every rank of A's rendezvous (B's rank 1 within it), saying why; B's rank 0 says
 * that it did. No rank of either may come out with a communicator. Job A's rank 0 is rank 0
 * here; rank 1 starts B's two ranks at once, in this session (the harness's), and stays out. */
static int session_b(int rank)
{
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    if (st == TUTTI_OK) {
        fprintf(stderr, "job B rank %d joined job A's rendezvous: mixed jobs\n", rank);
        tutti_comm_destroy(comm);
        return 1;
    }
    if (rank == 0 && (strstr(tutti_last_error(), "in use") == NULL ||
                      strstr(tutti_last_error(), "that job was told") == NULL)) {
        fprintf(stderr, "job B rank 0: \"%s\", expected \"in use\" and \"that job was told\"\n",
                tutti_last_error());
        return 1;
    }
    /* B's rank 1 joined A's rendezvous (or came to it failed): whatever else it met, it says why
     * the rendezvous failed (it used to blame A's rank 0 for leaving) */
    if (rank == 1 && strstr(tutti_last_error(), "second process given rank 0") == NULL) {
        fprintf(stderr, "job B rank 1: \"%s\", expected it to name the second rank 0\n",
                tutti_last_error());
        return 1;
    }
    if (dt > 5.0) {
        fprintf(stderr, "job B rank %d: failing took %.1f s, not at once\n", rank, dt);
        return 1;
    }
    return 0;
}

static int one_session_rank(int rank, int size, void *arg)
{
    (void)size, (void)arg;
    if (rank == 0) {
        tutti_comm_t *comm = NULL;
        tutti_status_t st = tutti_comm_init_env(NULL, &comm);
        if (st == TUTTI_OK) {
            tutti_comm_destroy(comm);
            return th_fail("job A's rank 0 formed a communicator with job B's rank 1");
        }
        if (st != TUTTI_ERR_BOOTSTRAP ||
            strstr(tutti_last_error(), "second process given rank 0") == NULL)
            return th_fail("job A's rank 0: %d (%s): \"%s\", expected TUTTI_ERR_BOOTSTRAP "
                           "naming the second rank 0",
                           st, tutti_strerror(st), tutti_last_error());
        return 0;
    }
    usleep(200000); /* A's rank 0 serves by now */
    pid_t kids[2];
    for (int b = 1; b >= 0; b--)
        if ((kids[b] = fork()) == 0)
            _exit(session_b(b));
    int bad = 0;
    for (int b = 1; b >= 0; b--) {
        int st = 0;
        waitpid(kids[b], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = th_fail("job B's rank %d (status 0x%x): see above", b, st);
    }
    return bad;
}

START_TEST(test_two_jobs_one_session)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    o.rank_timeout_s = 20;
    o.env[0] = "TUTTI_TIMEOUT=10";
    ck_assert_msg(th_run_opts(2, &o, one_session_rank, NULL) == 0,
                  "two jobs of one session on one port: see stderr");
}
END_TEST

/* ---- two jobs of two users on one port ----------------------------------------------------- */

/* Job B runs as another user (uid 65534), so its rank finds no secret file for A's store in its
 * own directory, whatever A's is. Case 0: the launchers name the jobs (Slurm ids 111 and 222):
 * A's store says so at once. Case 1: no launcher ids: B's rank 1 meets A's store, which then
 * ends its rendezvous and closes; B's rank 0 had failed on the taken port. B's rank 1 waited
 * out its whole timeout (300 s by default), then blamed "connection refused". */
#define OTHER_UID 65534

static int user_b(int rank, bool named)
{
    if (setresgid(OTHER_UID, OTHER_UID, OTHER_UID) != 0 ||
        setresuid(OTHER_UID, OTHER_UID, OTHER_UID) != 0)
        return th_fail("job B: cannot become uid %d: %s", OTHER_UID, strerror(errno));
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    if (named)
        setenv("SLURM_JOB_ID", "222", 1);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    const char *want = rank == 0 ? "in use" : named ? "serves another job" : "another job's";
    fprintf(stderr, "[two users] job B rank %d after %.1f s: %s\n", rank, dt, tutti_last_error());
    if (st != TUTTI_ERR_BOOTSTRAP || strstr(tutti_last_error(), want) == NULL)
        return th_fail("job B rank %d: %d (%s), expected TUTTI_ERR_BOOTSTRAP saying \"%s\"", rank,
                       st, tutti_strerror(st), want);
    /* its TUTTI_TIMEOUT is 120 s; it gives up 20 s after it met A's store (named: at once) */
    if (dt > (named || rank == 0 ? 3.0 : 60.0))
        return th_fail("job B rank %d: failing took %.1f s", rank, dt);
    return 0;
}

static pid_t start_user_b(int rank, bool named)
{
    pid_t p = fork();
    if (p == 0) {
        setsid();
        _exit(user_b(rank, named));
    }
    return p;
}

static int wait_user_b(pid_t p, int rank)
{
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return th_fail("job B's rank %d did not fail as it should (status 0x%x)", rank, st);
    return 0;
}

static int two_users_rank(int rank, int size, void *arg)
{
    const bool named = arg != NULL;
    if (rank == 0)
        return join_and_check(rank, size);
    usleep(200000); /* A's rank 0 serves by now */
    int bad = wait_user_b(start_user_b(0, named), 0);
    if (named)
        return wait_user_b(start_user_b(1, named), 1) || join_and_check(rank, size) || bad;
    /* B's rank 1 meets A's store while A's rank 1 holds it open, then A ends its rendezvous */
    pid_t b1 = start_user_b(1, named);
    usleep(1500000);
    bad |= join_and_check(rank, size);
    return wait_user_b(b1, 1) || bad;
}

START_TEST(test_two_users)
{
    if (geteuid() != 0) {
        fprintf(stderr, "# two users: needs root to run a job as uid %d\n", OTHER_UID);
        return;
    }
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 120;
    o.rank_timeout_s = 100;
    o.env[0] = "TUTTI_JOB_TOKEN"; /* unset: the host's secret file is what is tested */
    if (_i == 0)
        o.env[1] = "SLURM_JOB_ID=111";
    else
        o.env[1] = "SLURM_JOB_ID";
    ck_assert_msg(th_run_opts(2, &o, two_users_rank, _i == 0 ? (void *)1 : NULL) == 0,
                  "two jobs of two users on one port (case %d): see stderr", _i);
}
END_TEST

/* ---- where the store listens --------------------------------------------------------------- */

/* With MASTER_ADDR=127.0.0.1 the store is not reachable at the host's other addresses. */
static int bind_rank(int rank, int size, void *arg)
{
    (void)arg;
    int bad = 0;
    if (rank == 1) {
        usleep(200000);
        int port = atoi(getenv("MASTER_PORT")), tried = 0;
        struct ifaddrs *ifs = NULL;
        getifaddrs(&ifs);
        for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
                continue;
            struct sockaddr_in a = *(struct sockaddr_in *)i->ifa_addr;
            if ((ntohl(a.sin_addr.s_addr) >> 24) == 127)
                continue;
            a.sin_port = htons((uint16_t)port);
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
            char ip[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
            if (rc == 0)
                bad = th_fail("the store of MASTER_ADDR=127.0.0.1 answers at %s:%d", ip, port);
            tried++;
            close(fd);
        }
        freeifaddrs(ifs);
        if (tried == 0)
            fprintf(stderr, "# bind: this host has no address besides loopback to try\n");
    }
    return join_and_check(rank, size) || bad;
}

START_TEST(test_bind)
{
    ck_assert(th_run(2, "shm", 40, bind_rank, NULL) == 0);
}
END_TEST

/* ---- a flood of clients -------------------------------------------------------------------- */

static long status_kb(int pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, strlen(field)) == 0)
            v = atol(line + strlen(field) + 1);
    if (f != NULL)
        fclose(f);
    return v;
}

static double cpu_s(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, stt = 0;
    if (p == NULL || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                            &stt) != 2)
        return -1;
    return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

#define NFLOOD 200
#define NBODY 60

/* Rank 1 floods rank 0's store with idle clients and with clients that announce 1 MiB bodies
 * before any hello: rank 0 allocates nothing for them and does not spin, and rank 1 still
 * joins (the oldest stranger makes room for it). */
static int flood_rank(int rank, int size, void *arg)
{
    (void)arg;
    int bad = 0, fds[NFLOOD + NBODY];
    if (rank == 1) {
        int port = atoi(getenv("MASTER_PORT")), p0 = th_shared()->pids[0];
        /* The baselines once rank 0 serves (its challenge came), not while it starts. */
        int probe = raw_connect(port);
        uint32_t pw[4];
        char ptext[64];
        if (probe < 0 || raw_reply(probe, pw, ptext, sizeof ptext) != TUTTI__REP_CHALLENGE)
            bad = th_fail("flood: rank 0's store did not answer a first client");
        if (probe >= 0)
            close(probe);
        usleep(100000);
        long vm0 = status_kb(p0, "VmSize:"), rss0 = status_kb(p0, "VmRSS:");
        static char junk[64 << 10];
        memset(junk, 'j', sizeof junk);
        for (int i = 0; i < NFLOOD + NBODY; i++) {
            fds[i] = raw_connect(port);
            if (fds[i] >= 0 && i >= NFLOOD) {
                uint8_t hdr[TUTTI__WIRE_HDR];
                tutti__wire_put_hdr(hdr, TUTTI__REQ_SET, 8, 1u << 20);
                send(fds[i], hdr, sizeof hdr, MSG_NOSIGNAL | MSG_DONTWAIT);
                send(fds[i], junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        usleep(300000);
        double c0 = cpu_s(p0);
        usleep(1000000);
        double spent = cpu_s(p0) - c0;
        long vm1 = status_kb(p0, "VmSize:"), rss1 = status_kb(p0, "VmRSS:");
        if (spent > 0.3)
            bad = th_fail("rank 0 used %.2f s of CPU in 1 s while %d strangers idled", spent,
                          NFLOOD);
        if (vm1 - vm0 > 16 * 1024 || rss1 - rss0 > 8 * 1024)
            bad = th_fail("rank 0 grew by %ld KiB (virtual) and %ld KiB (resident) for %d "
                          "strangers that announced 1 MiB each",
                          vm1 - vm0, rss1 - rss0, NBODY);
        int open = 0; /* connections the store has not hung up on */
        for (int i = 0; i < NFLOOD + NBODY; i++) {
            char buf[4096];
            ssize_t n = 0;
            while (fds[i] >= 0 && (n = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT)) > 0)
                ;
            if (fds[i] >= 0 && n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                open++;
        }
        if (open > 64)
            bad = th_fail("the store holds %d unauthenticated clients at once (at most 64)", open);
    }
    bad |= join_and_check(rank, size);
    if (rank == 1)
        for (int i = 0; i < NFLOOD + NBODY; i++)
            if (fds[i] >= 0)
                close(fds[i]);
    return bad;
}

START_TEST(test_flood)
{
    ck_assert(th_run(2, "shm", 60, flood_rank, NULL) == 0);
}
END_TEST

/* ---- strangers on the liveness port ----------------------------------------------------- */

/* A local user who opens silent connections to every new listening port: rank 0 takes its
 * liveness connections late (TUTTI_FAULT_LIVE_ACCEPT_MS, a rank descheduled on a busy node),
 * and 20 strangers queue behind rank 1's connection. Rank 0 kept the newest 9 of its backlog
 * unread and dropped rank 1's: the job failed at its timeout, blaming rank 1 ("never opened its
 * liveness connection"; a helper's probe, 1 job in 12-30 with no delay at all). */
#define LIVE_STRANGERS 20

typedef struct sniper {
    int store_port;
    volatile int stop;
    int fds[LIVE_STRANGERS];
    int nfds;
} sniper_t;

/* own_sockets fills inodes with this process's socket inodes (from /proc/self/fd); returns
 * how many (at most cap). */
static int own_sockets(unsigned long *inodes, int cap)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while (n < cap && (e = readdir(d)) != NULL) {
        char path[64], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        if (k <= 0)
            continue;
        link[k] = '\0';
        if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1)
            n++;
    }
    closedir(d);
    return n;
}

/* listener_with_peer finds the port that this process (rank 1) has connected to on this host,
 * other than skip (the store's), that something still listens on: rank 0's liveness port,
 * in *port, its address in *addr; 0 if none yet. Only this process's own connections count,
 * so that another test's ports on a busy machine are never taken for it. */
static int listener_with_peer(int skip, uint32_t *addr, int *port)
{
    unsigned long mine[256];
    int nmine = own_sockets(mine, 256);
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL)
        return 0;
    char line[512];
    unsigned lports[64], rports[64], raddrs[64];
    int nl = 0, nr = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned lp, ra, rp, st;
        unsigned long inode;
        /* sl, local address:port, remote address:port, state, queues, timer, retransmits, uid,
         * timeout, inode */
        if (sscanf(line, " %*d: %*8X:%4X %8X:%4X %2X %*X:%*X %*X:%*X %*X %*u %*u %lu", &lp, &ra,
                   &rp, &st, &inode) != 5)
            continue;
        if (st == 0x0A && (int)lp != skip && nl < 64) {
            lports[nl++] = lp;
        } else if (st == 0x01 && (int)rp != skip && nr < 64) {
            for (int i = 0; i < nmine; i++)
                if (mine[i] == inode) {
                    raddrs[nr] = ra;
                    rports[nr++] = rp;
                }
        }
    }
    fclose(f);
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < nr; j++)
            if (rports[j] == lports[i]) {
                *addr = raddrs[j]; /* as the kernel stores it: network order read as a word */
                *port = (int)lports[i];
                return 1;
            }
    return 0;
}

static void *snipe(void *arg)
{
    sniper_t *sn = arg;
    uint32_t addr = 0;
    int port = 0;
    double end = th_now() + 20;
    while (!sn->stop && th_now() < end && !listener_with_peer(sn->store_port, &addr, &port))
        usleep(1000);
    if (port == 0)
        return NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = addr == 0 ? htonl(INADDR_LOOPBACK) : addr;
    for (int i = 0; i < LIVE_STRANGERS; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            sn->fds[sn->nfds++] = fd;
        else if (fd >= 0)
            close(fd);
    }
    return NULL;
}

static int live_flood_rank(int rank, int size, void *arg)
{
    (void)arg;
    if (rank == 0) {
        setenv("TUTTI_FAULT_LIVE_ACCEPT_MS", "1500", 1);
        return join_and_check(rank, size);
    }
    sniper_t sn = {.store_port = atoi(getenv("MASTER_PORT"))};
    pthread_t t;
    if (pthread_create(&t, NULL, snipe, &sn) != 0)
        return th_fail("pthread_create");
    int bad = join_and_check(rank, size);
    sn.stop = 1;
    pthread_join(t, NULL);
    if (sn.nfds < 10)
        bad = th_fail("the sniper queued %d strangers on rank 0's liveness port (want 10 or "
                      "more: the test did not test)", sn.nfds);
    for (int i = 0; i < sn.nfds; i++)
        close(sn.fds[i]);
    return bad;
}

START_TEST(test_live_flood)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 50;
    o.rank_timeout_s = 15;
    ck_assert(th_run_opts(2, &o, live_flood_rank, NULL) == 0);
}
END_TEST

/* A client that connects and says nothing is dropped after the store's idle deadline (10 s). */
static int idle_rank(int rank, int size, void *arg)
{
    (void)arg;
    int bad = 0;
    if (rank == 1) {
        usleep(200000);
        int fd = raw_connect(atoi(getenv("MASTER_PORT")));
        struct timeval tv = {14, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        uint32_t w[4];
        char text[64];
        double t0 = th_now();
        if (raw_reply(fd, w, text, sizeof text) != TUTTI__REP_CHALLENGE)
            bad = th_fail("idle client: no challenge");
        char c;
        ssize_t n = recv(fd, &c, 1, 0);
        double dt = th_now() - t0;
        if (n != 0 || dt < 9.0 || dt > 13.0)
            bad = th_fail("idle client: recv gave %zd after %.1f s; expected the store to hang up "
                          "after 10 s", n, dt);
        close(fd);
    }
    return join_and_check(rank, size) || bad;
}

START_TEST(test_idle)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 50;
    o.rank_timeout_s = 30;
    ck_assert(th_run_opts(2, &o, idle_rank, NULL) == 0);
}
END_TEST

/* ---- no file descriptor left --------------------------------------------------------------- */

/* A store whose process has no descriptor left cannot accept: it must rest rather than spin on
 * the readable listening socket, and serve the waiting clients once descriptors are back. */
START_TEST(test_emfile)
{
    int ctl[2], back[2];
    ck_assert_int_eq(pipe(ctl), 0);
    ck_assert_int_eq(pipe(back), 0);
    pid_t p = fork();
    if (p == 0) {
        alarm(30);
        uint8_t key[TUTTI__AUTH_KEY] = {1};
        tutti__auth_t a;
        tutti__auth_from_key(key, &a);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        tutti__store_server_t *sv = NULL;
        bool in_use;
        if (tutti__store_server_start(&sa, "127.0.0.1", 2, &a, tutti__now() + 25, &sv,
                                      &in_use) != 0)
            _exit(2);
        struct rlimit rl = {64, 64};
        setrlimit(RLIMIT_NOFILE, &rl);
        int fill[64], nfill = 0;
        while (nfill < 64 && (fill[nfill] = open("/dev/null", O_RDONLY)) >= 0)
            nfill++;
        int port = tutti__store_server_port(sv);
        if (write(back[1], &port, sizeof port) != sizeof port)
            _exit(3);
        char go;
        if (read(ctl[0], &go, 1) != 1) /* the parent has measured: descriptors come back */
            _exit(4);
        while (nfill > 0)
            close(fill[--nfill]);
        if (read(ctl[0], &go, 1) != 1)
            _exit(5);
        tutti__store_server_stop(sv, true);
        _exit(0);
    }
    int port = 0;
    ck_assert_int_eq(read(back[0], &port, sizeof port), (ssize_t)sizeof port);
    int c[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_ge(c[i] = raw_connect(port), 0); /* waits in the backlog */
    usleep(300000);
    double c0 = cpu_s(p);
    usleep(1000000);
    double spent = cpu_s(p) - c0;
    ck_assert_int_eq(write(ctl[1], "g", 1), 1);
    /* The clients get their challenge once the store can accept again. */
    for (int i = 0; i < 3; i++) {
        uint32_t w[4];
        char text[64];
        ck_assert_msg(raw_reply(c[i], w, text, sizeof text) == TUTTI__REP_CHALLENGE,
                      "client %d got no challenge once descriptors were back", i);
        close(c[i]);
    }
    ck_assert_int_eq(write(ctl[1], "s", 1), 1);
    int st;
    waitpid(p, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "store process: status 0x%x", st);
    ck_assert_msg(spent < 0.3, "the store used %.2f s of CPU in 1 s at the descriptor limit", spent);
}
END_TEST

/* Rank 0 (and rank 1) with a soft limit of open files too low to serve the store and open the
 * liveness mesh for every rank: raised toward the hard limit, the job forms; with the hard limit that low too, rank 0 fails at once,
 * naming the limit (it evicted its own ranks' connections to make room, and the job waited
 * out its timeout with ranks that "never arrived"). */
static int fd_limit_rank(int rank, int size, void *arg)
{
    bool hard = arg != NULL;
    if (rank == 0 || (!hard && rank == 1)) { /* rank 1: its liveness mesh needs room too */
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = 24;
        if (hard)
            rl.rlim_max = 24;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return th_fail("setrlimit: %s", strerror(errno));
    }
    tutti_comm_t *comm = NULL;
    double t0 = tutti__now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (!hard) {
        if (st != TUTTI_OK)
            return th_fail("a soft limit of 24 at %d ranks: %s", size, tutti_last_error());
        int64_t one = 1, sum = 0;
        st = tutti_allreduce(&one, &sum, 1, TUTTI_INT64, TUTTI_SUM, comm, NULL);
        tutti_comm_destroy(comm);
        return st == TUTTI_OK && sum == size ? 0 : th_fail("allreduce: %lld", (long long)sum);
    }
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("formed with rank 0 unable to hold its ranks' connections");
    }
    if (rank == 0 && (strstr(tutti_last_error(), "ulimit -n") == NULL || tutti__now() - t0 > 5))
        return th_fail("rank 0 after %.1f s: %s", tutti__now() - t0, tutti_last_error());
    return 0;
}

/* Rank 0 with a hard limit of 40 open files, room for the store and the mesh of 2 ranks: the
 * job forms. (The store asked for room for both and 16 to spare, 41 here: rank 0 refused at
 * once and rank 1 waited out its timeout for a store that never came; a helper's probe.) */
static int fd_limit_small_rank(int rank, int size, void *arg)
{
    (void)arg;
    if (rank == 0) {
        struct rlimit rl = {40, 40};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return th_fail("setrlimit: %s", strerror(errno));
    }
    return join_and_check(rank, size);
}

START_TEST(test_fd_limit)
{
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 60;
    o.rank_timeout_s = 5; /* the others wait for a store that never comes */
    ck_assert_msg(th_run_opts(24, &o, fd_limit_rank, NULL) == 0, "soft limit: see stderr");
    ck_assert_msg(th_run_opts(24, &o, fd_limit_rank, "hard") == 0, "hard limit: see stderr");
    o.rank_timeout_s = 20;
    ck_assert_msg(th_run_opts(2, &o, fd_limit_small_rank, NULL) == 0,
                  "2 ranks, rank 0 at 40 files: see stderr");
}
END_TEST

/* A rank given another TUTTI_JOB_TOKEN is refused and says so at once; rank 0, which waited for
 * it to its deadline, said only "never arrived: check WORLD_SIZE/MASTER_ADDR/MASTER_PORT" (a
 * helper's multi-node audit): it now says that its store refused a client's proof. */
static int token_mismatch_rank(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    setenv("TUTTI_JOB_TOKEN", rank == 0 ? TOKEN_A : TOKEN_B, 1);
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("formed with two tokens");
    }
    const char *want = rank == 0 ? "refused 1 client(s) that did not prove this job's secret"
                                 : "authentication failed";
    if (strstr(tutti_last_error(), want) == NULL)
        return th_fail("rank %d: the text lacks \"%s\": %s", rank, want, tutti_last_error());
    return 0;
}

START_TEST(test_token_mismatch)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    o.rank_timeout_s = 4; /* rank 0 waits for the refused rank to its deadline */
    ck_assert(th_run_opts(2, &o, token_mismatch_rank, NULL) == 0);
}
END_TEST

/* TUTTI_SOCKET_IFNAME choosing loopback while rank 0 is on another host: the kernel refuses
 * every connect from 127.0.0.1 there (EINVAL), which no wait mends. The rank retried until its
 * timeout (under torch's store-less path the group's), then asked "does interface lo reach
 * MASTER_ADDR?"; now it fails at once, saying why (a helper's multi-node audit). */
START_TEST(test_ifname_loopback)
{
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "10.255.255.1", 1); /* no host of this machine */
    setenv("MASTER_PORT", "29999", 1);
    setenv("TUTTI_SOCKET_IFNAME", "lo", 1);
    setenv("TUTTI_TIMEOUT", "30", 1);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    ck_assert_msg(st == TUTTI_ERR_BOOTSTRAP, "got %d: %s", st, tutti_last_error());
    ck_assert_msg(strstr(tutti_last_error(), "TUTTI_SOCKET_IFNAME chose, 127.0.0.1") != NULL &&
                      strstr(tutti_last_error(), "loopback") != NULL,
                  "the text does not say the loopback choice is why: %s", tutti_last_error());
    ck_assert_msg(dt < 15, "failed after %.1f s, not at once", dt);
}
END_TEST

/* ---- a server that poses as rank 0 --------------------------------------------------------- */

typedef struct fake {
    int lfd;
    int mode; /* 0: a challenge, then OK with a made-up proof; 1: garbage instead of a challenge */
} fake_t;

static void *fake_server(void *arg)
{
    fake_t *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    uint8_t m[TUTTI__WIRE_HDR + 32] = {0};
    if (f->mode == 1) {
        send(fd, "HTTP/1.1 200 OK\r\n\r\nhello, world", 31, MSG_NOSIGNAL);
    } else {
        tutti__wire_put_hdr(m, TUTTI__REP_CHALLENGE, TUTTI__WIRE_STRICT, 32);
        send(fd, m, sizeof m, MSG_NOSIGNAL);
        uint8_t hello[TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY];
        read_n(fd, hello, sizeof hello);
        tutti__wire_put_hdr(m, TUTTI__REP_OK, 0, 32);
        memset(m + TUTTI__WIRE_HDR, 0x42, 32);
        send(fd, m, sizeof m, MSG_NOSIGNAL);
    }
    usleep(200000);
    close(fd);
    return NULL;
}

START_TEST(test_fake_server)
{
    for (int mode = 0; mode < 2; mode++) {
        fake_t f = {socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), mode};
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof sa;
        ck_assert_int_eq(bind(f.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
        ck_assert_int_eq(listen(f.lfd, 4), 0);
        getsockname(f.lfd, (struct sockaddr *)&sa, &sl);
        pthread_t t;
        pthread_create(&t, NULL, fake_server, &f);
        uint8_t key[TUTTI__AUTH_KEY] = {9};
        tutti__auth_t a;
        tutti__auth_from_key(key, &a);
        tutti__store_t *s = NULL;
        tutti_status_t st = tutti__store_open(1, 2, "127.0.0.1", ntohs(sa.sin_port), &a,
                                              tutti__now() + 5, &s);
        pthread_join(t, NULL);
        close(f.lfd);
        const char *want = mode == 0 ? "did not prove" : "not a tutti rendezvous store";
        ck_assert_msg(st == TUTTI_ERR_BOOTSTRAP && strstr(tutti_last_error(), want) != NULL,
                      "a fake store (mode %d): %d, \"%s\"; expected a refusal saying \"%s\"", mode,
                      st, tutti_last_error(), want);
        ck_assert_ptr_null(s);
    }
}
END_TEST

/* ---- the store's own keys ------------------------------------------------------------------ */

/* core_feed gives c the n bytes at p as the socket would, and returns the type of the reply
 * they brought (0: none). */
static uint32_t core_feed(tutti__store_core_t *k, tutti__sconn_t *c, const uint8_t *p, size_t n)
{
    while (n > 0) {
        uint8_t *dst;
        size_t want;
        tutti__store_conn_want(c, &dst, &want);
        if (want == 0)
            break;
        size_t take = want < n ? want : n;
        memcpy(dst, p, take);
        tutti__store_conn_got(k, c, take);
        p += take;
        n -= take;
    }
    uint32_t w[4] = {0};
    if (c->olen >= TUTTI__WIRE_HDR)
        tutti__wire_get_hdr(c->out, w);
    if (c->olen > 0)
        tutti__store_conn_sent(c, c->olen);
    return w[1];
}

/* A rank that passed its handshake is still another process: it may not set the key under
 * which the store tells everyone that the job is doomed, and why (an admitted rank could make
 * every other rank stop with a text of its choosing). */
START_TEST(test_reserved_key)
{
    uint8_t key[TUTTI__AUTH_KEY] = {7};
    tutti__auth_t a;
    tutti__auth_from_key(key, &a);
    tutti__store_core_t k;
    ck_assert(tutti__store_core_init(&k, 2, 1, &a));
    tutti__sconn_t c;
    ck_assert(tutti__store_conn_open(&k, &c, 3, true, 0.0));
    tutti__store_conn_sent(&c, c.olen); /* the challenge */
    uint8_t m[TUTTI__WIRE_HDR + TUTTI__WIRE_HELLO_BODY];
    uint8_t *b = m + TUTTI__WIRE_HDR;
    memset(m, 0, sizeof m);
    tutti__wire_put_hdr(m, TUTTI__REQ_HELLO, 1, 2);
    tutti__wire_put32(b + TUTTI__WIRE_HELLO_FLAGS, TUTTI__WIRE_PROOF);
    memcpy(b + TUTTI__WIRE_HELLO_JOB, a.job, TUTTI__AUTH_JOB);
    memset(b + TUTTI__WIRE_HELLO_NONCE, 0x3c, TUTTI__AUTH_NONCE);
    tutti__auth_client_mac(a.key, c.ns, b + TUTTI__WIRE_HELLO_NONCE, 1, 2, a.job,
                           TUTTI__WIRE_PROOF, b + TUTTI__WIRE_HELLO_MAC);
    ck_assert_uint_eq(core_feed(&k, &c, m, sizeof m), TUTTI__REP_OK);
    ck_assert_int_eq(c.rank, 1);
    const char *keys[] = {"0123456789abcdef0123456789abcdef", TUTTI__STORE_DOOMED_KEY};
    const char val[] = "\x1b[2Jforged";
    for (int i = 0; i < 2; i++) {
        uint8_t req[TUTTI__WIRE_HDR + 64];
        size_t kl = strlen(keys[i]);
        tutti__wire_put_hdr(req, TUTTI__REQ_SET, (uint32_t)kl, (uint32_t)sizeof val);
        memcpy(req + TUTTI__WIRE_HDR, keys[i], kl);
        memcpy(req + TUTTI__WIRE_HDR + kl, val, sizeof val);
        uint32_t rep = core_feed(&k, &c, req, TUTTI__WIRE_HDR + kl + sizeof val);
        ck_assert_msg(rep == (i == 0 ? TUTTI__REP_OK : TUTTI__REP_ERROR),
                      "SET of %s: reply %u", keys[i], rep);
    }
    ck_assert(c.drop);
    ck_assert(!k.doomed);
    tutti__store_conn_close(&k, &c);
    tutti__store_core_free(&k);
}
END_TEST

/* ---- a job of one rank --------------------------------------------------------------------- */

/* Twenty single-rank programs at once, with no launcher variables, while the default port is
 * taken: none serves a store, so all of them work (issue 15: 13 of 20 failed). */
START_TEST(test_single_rank)
{
    int hold = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(hold, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(29500),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool held = bind(hold, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(hold, 4) == 0;
    pid_t p[20];
    for (int i = 0; i < 20; i++) {
        if ((p[i] = fork()) == 0) {
            alarm(30);
            static const char *const vars[] = {"RANK", "WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                               "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                               "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR",
                                               "MASTER_PORT"};
            for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
                unsetenv(vars[v]);
            tutti_comm_t *comm = NULL;
            if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK) {
                fprintf(stderr, "single rank %d: %s\n", i, tutti_last_error());
                _exit(1);
            }
            int x = i, y = -1;
            if (tutti_allreduce(&x, &y, 1, TUTTI_INT32, TUTTI_SUM, comm, NULL) != TUTTI_OK ||
                y != i || tutti_comm_destroy(comm) != TUTTI_OK)
                _exit(2);
            _exit(0);
        }
    }
    int failed = 0;
    for (int i = 0; i < 20; i++) {
        int st;
        waitpid(p[i], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    close(hold);
    ck_assert_msg(failed == 0, "%d of 20 single-rank programs failed (port 29500 %s)", failed,
                  held ? "held by the test" : "in use elsewhere");
}
END_TEST

/* ---- the host file's rules ------------------------------------------------------------------ */

static char xdg[128];

static void xdg_setup(void)
{
    snprintf(xdg, sizeof xdg, "/tmp/tutti-test-xdg-%d", (int)getpid());
    mkdir(xdg, 0700);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    unsetenv("SLURM_JOB_ID");
    unsetenv("TUTTI_JOB_TOKEN");
    unsetenv("OMPI_MCA_orte_precondition_transports");
}

static void xdg_teardown(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", xdg);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", xdg);
}

/* reader forks a process that reads the file (fork_twice: through an intermediate process, so
 * that its parent is not ours; new_session: in a session of its own); returns 0 when it read
 * the secret, else 1, and the text. */
static int reader(bool fork_twice, bool new_session, const tutti__auth_t *a, char *msg,
                  size_t cap)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return -1;
    pid_t p = fork();
    if (p == 0) {
        if (fork_twice) {
            pid_t q = fork();
            if (q != 0) {
                int st;
                waitpid(q, &st, 0);
                _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 3);
            }
        }
        if (new_session)
            setsid();
        tutti__auth_t b = *a;
        b.have_key = false;
        memset(b.key, 0, sizeof b.key);
        bool absent;
        tutti_status_t st = tutti__secret_file_read("127.0.0.1", 4242, 1, &b, &absent);
        dprintf(pfd[1], "%s", st == TUTTI_OK ? "" : tutti_last_error());
        _exit(st == TUTTI_OK && memcmp(b.key, a->key, sizeof b.key) == 0 ? 0 : 1);
    }
    close(pfd[1]);
    ssize_t n = read(pfd[0], msg, cap - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(pfd[0]);
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

START_TEST(test_secret_file)
{
    tutti__auth_t a;
    ck_assert_int_eq(tutti__auth_from_env(NULL, &a), TUTTI_OK);
    ck_assert_int_eq(a.mode, TUTTI__AUTH_HOST);
    memset(a.key, 0xc3, sizeof a.key);
    a.have_key = true;
    char path[640], msg[1200], dir[200];
    snprintf(dir, sizeof dir, "%s/tutti", xdg);
    ck_assert_int_eq(tutti__secret_file_write("127.0.0.1", 4242, &a, path, sizeof path), TUTTI_OK);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_msg((sb.st_mode & 0777) == 0600, "the file has mode %o", sb.st_mode & 0777);
    ck_assert_int_eq(stat(dir, &sb), 0);
    ck_assert_msg((sb.st_mode & 0777) == 0700, "the directory has mode %o", sb.st_mode & 0777);

    /* a sibling (same parent as the writer, the test) and a child of the writer read it */
    ck_assert_msg(reader(false, false, &a, msg, sizeof msg) == 0, "a child of the writer: %s", msg);
    /* a process of another parent in the writer's session (a rank under a wrapper such as
     * timeout) is of the job; one of another parent and another session is another job */
    ck_assert_msg(reader(true, false, &a, msg, sizeof msg) == 0, "a grandchild of the writer: %s",
                  msg);
    ck_assert_msg(reader(true, true, &a, msg, sizeof msg) == 1 && strstr(msg, "another job"),
                  "a grandchild of the writer in a session of its own: %s", msg);
    /* a child of the writer in a session of its own is still its job (torchrun's workers) */
    ck_assert_msg(reader(false, true, &a, msg, sizeof msg) == 0, "a child in its own session: %s",
                  msg);
    /* ... unless the launcher named the job: then the job id decides */
    a.launcher_id = true;
    ck_assert_int_eq(tutti__secret_file_write("127.0.0.1", 4242, &a, path, sizeof path), TUTTI_OK);
    ck_assert_msg(reader(true, true, &a, msg, sizeof msg) == 0, "same launcher id: %s", msg);
    tutti__auth_t other = a;
    other.job[0] ^= 1;
    ck_assert_msg(reader(false, false, &other, msg, sizeof msg) == 1 && strstr(msg, "another job"),
                  "another job id: %s", msg);
    a.launcher_id = false;

    /* a file others may read is refused */
    ck_assert_int_eq(chmod(path, 0644), 0);
    ck_assert_msg(reader(false, false, &a, msg, sizeof msg) == 1 && strstr(msg, "not a private file"),
                  "mode 0644: %s", msg);
    /* a directory others may enter is refused, for writing too */
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_msg(reader(false, false, &a, msg, sizeof msg) == 1 && strstr(msg, "closed to others"),
                  "directory 0755: %s", msg);
    char kept[640];
    snprintf(kept, sizeof kept, "%s", path);
    ck_assert_int_eq(tutti__secret_file_write("127.0.0.1", 4242, &a, path, sizeof path),
                     TUTTI_ERR_BOOTSTRAP);
    ck_assert_str_eq(path, "");
    ck_assert_msg(strstr(tutti_last_error(), "chmod 700") != NULL, "%s", tutti_last_error());
    snprintf(path, sizeof path, "%s", kept);
    ck_assert_int_eq(chmod(dir, 0700), 0);
    /* one that another user made first (anyone can, in /tmp): this user cannot remove it, and
     * is told what it can do instead */
    if (geteuid() == 0) {
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        ck_assert_int_eq(tutti__secret_file_write("127.0.0.1", 4242, &a, path, sizeof path),
                         TUTTI_ERR_BOOTSTRAP);
        ck_assert_msg(strstr(tutti_last_error(), "cannot remove it") != NULL &&
                          strstr(tutti_last_error(), "TUTTI_JOB_TOKEN") != NULL,
                      "%s", tutti_last_error());
        ck_assert_int_eq(chown(dir, 0, 0), 0);
        snprintf(path, sizeof path, "%s", kept);
    }

    /* a file whose writer has exited is stale */
    pid_t w = fork();
    if (w == 0)
        _exit(tutti__secret_file_write("127.0.0.1", 4242, &a, path, sizeof path) == 0 ? 0 : 1);
    int st;
    waitpid(w, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(reader(false, false, &a, msg, sizeof msg) == 1 && strstr(msg, "has exited"),
                  "a stale file: %s", msg);
    /* no file at all */
    tutti__secret_file_remove(path);
    ck_assert_msg(reader(false, false, &a, msg, sizeof msg) == 1 && strstr(msg, "TUTTI_JOB_TOKEN"),
                  "no file: %s", msg);
    /* files that killed rank 0s left are swept by the next writer, once a day old and their
     * writer gone; a young one, or one whose writer lives, stays */
    {
        char live[64], text[200];
        FILE *self = fopen("/proc/self/stat", "r");
        unsigned long long start = 0;
        ck_assert(self != NULL && fscanf(self, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                                               "%*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                                         &start) == 1);
        fclose(self);
        snprintf(live, sizeof live, "%d %llu", (int)getpid(), start);
        static const char *const names[] = {"store-1-127.0.0.9-1111", "store-1-127.0.0.9-2222",
                                            "store-1-127.0.0.9-3333", ".store-1-x-1.99.tmp"};
        const char *bodies[] = {"tutti-secret-v2 999999 5", "tutti-secret-v2 999999 5", live, "x"};
        const int days[] = {2, 0, 2, 2};
        for (int i = 0; i < 4; i++) {
            char f[512];
            snprintf(f, sizeof f, "%s/%s", dir, names[i]);
            snprintf(text, sizeof text, "%s%s", i == 2 ? "tutti-secret-v2 " : "", bodies[i]);
            FILE *o = fopen(f, "w");
            ck_assert(o != NULL);
            fputs(text, o);
            fclose(o);
            struct timespec t[2] = {{time(NULL) - days[i] * 86400 - 60, 0},
                                    {time(NULL) - days[i] * 86400 - 60, 0}};
            ck_assert_int_eq(utimensat(AT_FDCWD, f, t, 0), 0);
        }
        ck_assert_int_eq(tutti__secret_file_write("127.0.0.1", 4242, &a, path, sizeof path),
                         TUTTI_OK);
        const bool kept_want[] = {false, true, true, false};
        for (int i = 0; i < 4; i++) {
            char f[512];
            snprintf(f, sizeof f, "%s/%s", dir, names[i]);
            ck_assert_msg((access(f, F_OK) == 0) == kept_want[i], "%s: %s", names[i],
                          kept_want[i] ? "swept" : "left");
            unlink(f);
        }
        tutti__secret_file_remove(path);
    }
    /* a symbolic link in the file's place is not followed */
    ck_assert_int_eq(symlink("/etc/passwd", path), 0);
    ck_assert_msg(reader(false, false, &a, msg, sizeof msg) == 1, "a symlink was followed");
    unlink(path);
}
END_TEST

/* XDG_RUNTIME_DIR that is another user's (`su` keeps the caller's): the file goes to
 * /tmp/tutti-<uid> instead, where this user's readers look too (the writer used to fail, and
 * the other ranks waited for their timeout). Needs root, to give the directory away. */
START_TEST(test_secret_file_foreign_xdg)
{
    if (geteuid() != 0) {
        fprintf(stderr, "check_rendezvous: not root, foreign XDG_RUNTIME_DIR not tried\n");
        return;
    }
    ck_assert_int_eq(chown(xdg, 65534, 65534), 0);
    tutti__auth_t a;
    ck_assert_int_eq(tutti__auth_from_env(NULL, &a), TUTTI_OK);
    memset(a.key, 0x5a, sizeof a.key);
    a.have_key = true;
    char path[640], want[64];
    ck_assert_msg(tutti__secret_file_write("127.0.0.1", 4243, &a, path, sizeof path) == TUTTI_OK,
                  "%s", tutti_last_error());
    snprintf(want, sizeof want, "/tmp/tutti-%u/", (unsigned)geteuid());
    ck_assert_msg(strncmp(path, want, strlen(want)) == 0, "the file went to %s", path);
    tutti__auth_t b = a;
    b.have_key = false;
    memset(b.key, 0, sizeof b.key);
    bool absent;
    ck_assert_msg(tutti__secret_file_read("127.0.0.1", 4243, 1, &b, &absent) == TUTTI_OK &&
                      memcmp(a.key, b.key, sizeof a.key) == 0,
                  "a reader did not find it: %s", tutti_last_error());
    tutti__secret_file_remove(path);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rendezvous");
    TCase *tc = tcase_create("attacks");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_stranger, 0, 2);
    tcase_add_loop_test(tc, test_two_jobs, 0, (int)(sizeof two_cases / sizeof two_cases[0]));
    tcase_add_test(tc, test_two_jobs_one_session);
    tcase_add_loop_test(tc, test_two_users, 0, 2);
    tcase_add_test(tc, test_back_to_back);
    tcase_add_test(tc, test_bind);
    tcase_add_test(tc, test_flood);
    tcase_add_test(tc, test_live_flood);
    tcase_add_test(tc, test_idle);
    tcase_add_test(tc, test_emfile);
    tcase_add_test(tc, test_fd_limit);
    tcase_add_test(tc, test_ifname_loopback);
    tcase_add_test(tc, test_token_mismatch);
    tcase_add_test(tc, test_fake_server);
    tcase_add_test(tc, test_reserved_key);
    tcase_add_test(tc, test_any_addr);
    tcase_add_loop_test(tc, test_bad_secret_dir, 0, 2);
    suite_add_tcase(s, tc);
    /* It holds the default port 29500, which other launchers' tests (torchrun's default) bind:
     * a test of its own that scripts/test.sh never runs beside those (tests/meson.build). */
    tc = tcase_create("default_port");
    tcase_set_tags(tc, "default_port");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_single_rank);
    suite_add_tcase(s, tc);
    tc = tcase_create("host_file");
    tcase_add_checked_fixture(tc, xdg_setup, xdg_teardown);
    tcase_add_test(tc, test_secret_file);
    tcase_add_test(tc, test_secret_file_foreign_xdg);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(suite)
