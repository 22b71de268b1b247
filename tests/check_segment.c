/* check_segment.c: the shared segment is handed only to the ranks it is for, and nothing of it
 * is left behind however a rank dies (issue 15, point 2): the leader's unix socket refuses a
 * wrong token, another user and a taken index; a leader killed while it waits for the others
 * leaves nothing in /dev/shm; nor does a rank killed at any moment of communicator creation. */
#include <check.h>
#include "check_main.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/transport/shm_impl.h"
#include "harness.h"

/* ---- who gets the segment ------------------------------------------------------------------ */

/* ask runs in a child: it asks for the segment as local index `local`, with pub (its token
 * altered when wrong_token) and, when uid >= 0, as that user. Exit 0: it got a descriptor whose
 * first bytes read "segment!". */
static int ask(const seg_pub_t *pub, int local, bool wrong_token, int uid)
{
    seg_pub_t p = *pub;
    if (wrong_token)
        p.token[3] ^= 0x40;
    if (uid >= 0 && setuid((uid_t)uid) != 0)
        return 9;
    int fd = -1;
    if (tutti__shm_pass_fetch(&p, local, 0, tutti__now() + 3, &fd) != TUTTI_OK)
        return 1;
    char buf[9] = {0};
    return pread(fd, buf, 8, 0) == 8 && strcmp(buf, "segment!") == 0 ? 0 : 2;
}

static int run_ask(const seg_pub_t *pub, int local, bool wrong_token, int uid)
{
    pid_t p = fork();
    if (p == 0) {
        alarm(10);
        _exit(ask(pub, local, wrong_token, uid));
    }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/* serve_in_child: a forked leader listens, tells the parent over pp what it would publish,
 * and serves local ranks 1..n-1 (with every descriptor taken first when starve); returns its
 * pid. The child exits with check(status, seconds taken) or 2 if it could not listen. */
static pid_t serve_in_child(int memfd, int n, int pp[2], bool starve,
                            int (*check)(tutti_status_t, double))
{
    pid_t leader = fork();
    if (leader != 0)
        return leader;
    alarm(20);
    int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    seg_pub_t mine;
    memset(&mine, 0, sizeof mine);
    int lfd = -1;
    if (tutti__shm_pass_listen(&mine, &lfd) != TUTTI_OK ||
        write(pp[1], &mine, sizeof mine) != (ssize_t)sizeof mine)
        _exit(2);
    if (starve) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = 64;
        setrlimit(RLIMIT_NOFILE, &rl);
        while (dup(0) >= 0) /* every descriptor taken */
            ;
    }
    tutti__bootstrap_t bs = {.deadline = tutti__now() + 15};
    double t0 = tutti__now();
    tutti_status_t st = tutti__shm_pass_serve(lfd, memfd, &mine, ranks, n, &bs);
    _exit(check(st, tutti__now() - t0));
}

static int served_ok(tutti_status_t st, double took)
{
    (void)took;
    return st == TUTTI_OK ? 0 : 1;
}

START_TEST(test_handout)
{
    int memfd = memfd_create("test-segment", MFD_CLOEXEC);
    ck_assert_int_ge(memfd, 0);
    ck_assert_int_eq(pwrite(memfd, "segment!", 8, 0), 8);
    /* The leader listens and serves three local ranks (indexes 1 and 2 to hand out) from its
     * own process, and tells the test what it would publish. */
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    pid_t leader = serve_in_child(memfd, 3, pp, false, served_ok);
    seg_pub_t pub;
    ck_assert_int_eq(read(pp[0], &pub, sizeof pub), (ssize_t)sizeof pub);
    ck_assert_msg(strncmp(pub.sock, "tutti-", 6) == 0 && strlen(pub.sock) == 38, "socket \"%s\"",
                  pub.sock);
    ck_assert_int_eq(pub.pid, (int32_t)leader);
    /* A wrong token, and a right one from another user, get nothing. */
    ck_assert_int_eq(run_ask(&pub, 1, true, -1), 1);
    if (geteuid() == 0)
        ck_assert_int_eq(run_ask(&pub, 1, false, 65534), 1);
    /* A leader that is not the published pid is not trusted. */
    seg_pub_t liar = pub;
    liar.pid = (int32_t)getpid();
    ck_assert_int_eq(run_ask(&liar, 1, false, -1), 1);
    /* Index 0 is the leader's own, 3 is out of range. */
    ck_assert_int_eq(run_ask(&pub, 0, false, -1), 1);
    ck_assert_int_eq(run_ask(&pub, 3, false, -1), 1);
    /* The right token and index: the segment; the same index again: nothing. */
    ck_assert_int_eq(run_ask(&pub, 1, false, -1), 0);
    ck_assert_int_eq(run_ask(&pub, 1, false, -1), 1);
    ck_assert_int_eq(run_ask(&pub, 2, false, -1), 0);
    int st;
    waitpid(leader, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the leader's serve: status 0x%x", st);
    /* Everyone has it: the socket is gone. */
    ck_assert_int_eq(run_ask(&pub, 2, false, -1), 1);
    close(memfd);
}
END_TEST

static int refused_at_once(tutti_status_t st, double took)
{
    if (st == TUTTI_ERR_SYSTEM && strstr(tutti_last_error(), "ulimit -n") != NULL && took < 5)
        return 0;
    fprintf(stderr, "leader at EMFILE: %s after %.1f s: %s\n", tutti_strerror(st), took,
            tutti_last_error());
    return 1;
}

/* A leader at its limit of open files cannot accept the ranks that ask: it says so at once
 * (the limit and what to do), where it used to poll a socket that stayed readable until its
 * deadline and then blame the ranks for never asking. */
START_TEST(test_handout_emfile)
{
    int memfd = memfd_create("test-segment", MFD_CLOEXEC);
    ck_assert_int_ge(memfd, 0);
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    pid_t leader = serve_in_child(memfd, 2, pp, true, refused_at_once);
    seg_pub_t pub;
    ck_assert_int_eq(read(pp[0], &pub, sizeof pub), (ssize_t)sizeof pub);
    ck_assert_int_eq(run_ask(&pub, 1, false, -1), 1); /* asks, gets nothing */
    int st;
    waitpid(leader, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the leader's serve: status 0x%x", st);
    close(memfd);
}
END_TEST

/* ---- nothing left behind -------------------------------------------------------------------- */

/* has_memfd tells whether pid holds a descriptor of the nameless segment. */
static bool has_memfd(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    bool found = false;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL && !found) {
        char path[600], target[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strstr(target, "memfd:tutti-shm") != NULL;
        }
    }
    if (d != NULL)
        closedir(d);
    return found;
}

/* leader_waits: local rank 0 of 2 creates the segment and waits for rank 1, which never asks
 * for it. */
static void leader_waits(int port, int ready_fd)
{
    uint8_t key[TUTTI__AUTH_KEY] = {7};
    tutti__auth_t a;
    tutti__auth_from_key(key, &a);
    tutti__store_t *s = NULL;
    double deadline = tutti__now() + 20;
    if (tutti__store_open(0, 2, "127.0.0.1", port, &a, deadline, &s) != TUTTI_OK)
        _exit(2);
    tutti__bootstrap_t bs = {.rank = 0, .size = 2, .deadline = deadline,
                             .oob = tutti__store_oob(s), .where = "the test's store"};
    int ranks[2] = {0, 1};
    tutti__transport_t *t = NULL;
    if (write(ready_fd, "r", 1) != 1)
        _exit(3);
    tutti__shm_create(2, &bs, ranks, 2, 0, &t, NULL); /* killed in here */
    _exit(4);
}

START_TEST(test_leader_killed_waiting)
{
    char before[256][256];
    int nbefore = th_shm_snapshot(before, 256);
    int port = th_free_port(); /* this binary's share of the harness's ports */
    ck_assert_int_gt(port, 0);
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t leader = fork();
    if (leader == 0) {
        alarm(30);
        leader_waits(port, pipefd[1]);
    }
    pid_t other = fork();
    if (other == 0) { /* rank 1: joins the store, then never asks for the segment */
        alarm(30);
        uint8_t key[TUTTI__AUTH_KEY] = {7};
        tutti__auth_t a;
        tutti__auth_from_key(key, &a);
        tutti__store_t *s = NULL;
        if (tutti__store_open(1, 2, "127.0.0.1", port, &a, tutti__now() + 20, &s) != TUTTI_OK)
            _exit(2);
        pause();
        _exit(0);
    }
    char c;
    ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
    /* The leader holds the segment and waits for rank 1 to take it. */
    double t0 = th_now();
    while (!has_memfd(leader) && th_now() - t0 < 10)
        usleep(10000);
    ck_assert_msg(has_memfd(leader), "the leader never made its segment");
    usleep(300000);
    int st;
    ck_assert_int_eq(waitpid(leader, &st, WNOHANG), 0); /* still waiting */
    kill(leader, SIGKILL);
    waitpid(leader, &st, 0);
    kill(other, SIGKILL);
    waitpid(other, &st, 0);
    ck_assert_int_eq(th_shm_new(before, nbefore), 0);
}
END_TEST

/* A rank killed at any moment of communicator creation (the leader included) leaves nothing in
 * /dev/shm; the survivors fail, they do not hang. */
static int create_rank(int rank, int size, void *arg)
{
    (void)rank, (void)size, (void)arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st == TUTTI_OK)
        tutti_comm_destroy(comm);
    return 0; /* either outcome is fine; what is left behind is the test */
}

START_TEST(test_kill_during_creation)
{
    char before[256][256];
    int nbefore = th_shm_snapshot(before, 256);
    for (int i = 0; i < 8; i++) {
        th_opts_t o = TH_OPTS_INIT;
        o.transport = "shm";
        o.timeout_s = 40;
        o.rank_timeout_s = 10;
        o.kill_rank = i % 3;
        o.kill_after_s = 0.01 + 0.03 * i;
        ck_assert_msg(th_run_opts(3, &o, create_rank, NULL) == 0, "run %d: see stderr", i);
        ck_assert_int_eq(th_shm_new(before, nbefore), 0);
    }
}
END_TEST

/* ---- the header other ranks read -------------------------------------------------------- */

/* hdr_for writes into page a header as a leader would for these sizes, consistent with
 * tutti__shm_layout's sums for them (so only the bounds checks can refuse it). */
static void hdr_for(void *page, uint64_t region, uint64_t slot, uint32_t ncoll, uint32_t np2p)
{
    layout_t L;
    memset(page, 0, HDR_SPACE);
    seg_hdr_t h = {.magic = SEG_MAGIC, .version = SEG_VERSION, .nlocal = 2, .nchan = 1,
                   .nwin = 1, .region_size = region, .slot_size = slot, .nslots_p2p = np2p,
                   .nslots_coll = ncoll};
    h.size = tutti__shm_layout(&L, 2, 1, 1, region, slot, ncoll, np2p) ? L.size : 0;
    memcpy(page, &h, sizeof h);
}

static tutti_status_t hdr_verdict(const void *page)
{
    seg_hdr_t h;
    memcpy(&h, page, sizeof h);
    layout_t L;
    return tutti__shm_hdr_check(page, h.size, 2, 1, 1, 0, &L);
}

/* A header whose sums agree with the file's size is not enough: a window size, or a ring of
 * many large slots, that wraps around when rounded to pages made a segment of a few pages look
 * like one with a window of 2^64 bytes or slots of 4 GiB, which the algorithms and the rings
 * would then write into; zero-sized slots or windows made every send "corrupt". */
START_TEST(test_header_bounds)
{
    static _Alignas(64) unsigned char page[HDR_SPACE];
    hdr_for(page, 1 << 20, 65536, 8, 8);
    ck_assert_int_eq(hdr_verdict(page), TUTTI_OK);
    const struct {
        uint64_t region, slot;
        uint32_t ncoll, np2p;
    } bad[] = {
        {UINT64_MAX - PAGE + 2, 65536, 8, 8}, /* rounds up to 0 */
        {1 << 20, 0, 8, 8},
        {0, 65536, 8, 8},
        {1 << 20, (uint64_t)UINT32_MAX + 1, 8, 8},
        {1 << 20, UINT32_MAX, 8, UINT32_MAX - 63}, /* the rings' stride rounds up to 0 */
        {1 << 20, 65536, 0, 8},
        {1 << 20, 65536, 8, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hdr_for(page, bad[i].region, bad[i].slot, bad[i].ncoll, bad[i].np2p);
        ck_assert_msg(hdr_verdict(page) == TUTTI_ERR_INTERNAL, "case %zu accepted", i);
        ck_assert_ptr_nonnull(strstr(tutti_last_error(), "inconsistent header"));
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("segment");
    TCase *tc = tcase_create("segment");
    tcase_set_timeout(tc, 200);
    tcase_add_test(tc, test_header_bounds);
    tcase_add_test(tc, test_handout);
    tcase_add_test(tc, test_handout_emfile);
    tcase_add_test(tc, test_leader_killed_waiting);
    tcase_add_test(tc, test_kill_during_creation);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(suite)
