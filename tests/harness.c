/* harness.c: the fork harness behind the multi-rank tests (see harness.h). */
#include "harness.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int th_rank = -1, th_size = 0;
const char *th_transport = "-";

static th_shared_t *shared;
static int th_nstart; /* ranks started in the current run (as seen by the ranks) */

double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

th_shared_t *th_shared(void)
{
    if (shared == NULL) {
        void *p = mmap(NULL, sizeof(th_shared_t), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("harness: mmap of the shared page");
            abort();
        }
        shared = p;
    }
    return shared;
}

int th_fail(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d/%d %s] %s\n", th_rank, th_size, th_transport, msg);
    return 1;
}

char *th_hex(char *out, const void *p, size_t n)
{
    const unsigned char *b = p;
    out[0] = '0';
    out[1] = 'x';
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 + 2 * i, "%02x", b[n - 1 - i]);
    out[2 + 2 * n] = '\0';
    return out;
}

/* bindable tells whether port can be bound now on every address (not in use, nor held by a
 * connection in TIME_WAIT). */
static int bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A free port for the rendezvous store. It comes from below the kernel's ephemeral range
 * (32768 and up), so that no socket a rank binds to port 0 (liveness mesh, ofi endpoints) can be
 * handed the same port before rank 0 binds it; we check that it is free now on every address,
 * and the two above it, where a store under torchrun goes (its next odd port). */
static int free_port_in(int lo, int n)
{
    static unsigned seed;
    if (seed == 0)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)(th_now() * 1e6);
    for (int tries = 0; tries < 500; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = lo + (int)((seed >> 8) % (unsigned)n);
        if (port >= 29400 && port < 29600)
            continue; /* torch's and tutti's default (29500) and its neighbours, which tests
                       * and other programs bind as they are */
        int ok = bindable(port);
        if (ok < 0)
            return -1;
        if (ok && bindable(port + 1) == 1 && bindable(port + 2) == 1)
            return port;
    }
    return -1;
}

/* Ports. A binary run alone (no TH_PORT_SLOT) draws th_run's ports from 20000-30999 and
 * th_free_port's from 31000-32699, below the kernel's ephemeral range: a test's second port never
 * meets the run's own. Binaries that meson runs side by side get TH_PORT_SLOT k of TH_PORT_SLOTS
 * (tests/meson.build) and draw from 5000-10999 and 11000-11999 instead, slot k from its own k-th
 * share: two of them never pick one port (a port is free when picked, but rank 0 binds it only
 * later: two jobs of two tests could otherwise meet on it), and none meets a test that runs alone,
 * which scripts/test.sh may run beside them (as it does the other launchers' tests, whose ports
 * are 12000-31999: python/tests/harness.py, tests/e2e_train.sh, Slurm's job ports). */
static int port_share(int lo, int n, int slotted_lo, int slotted_n)
{
    const char *s = getenv("TH_PORT_SLOT"), *k = getenv("TH_PORT_SLOTS");
    int slot = s ? atoi(s) : -1, slots = k ? atoi(k) : 0;
    if (slots < 1 || slot < 0 || slot >= slots || slotted_n / slots < 16)
        return free_port_in(lo, n);
    return free_port_in(slotted_lo + slot * (slotted_n / slots), slotted_n / slots);
}

static int free_port(void) { return port_share(20000, 11000, 5000, 6000); }

int th_free_port(void) { return port_share(31000, 1700, 11000, 1000); }

int th_await_slot(int i, double limit_s)
{
    th_shared_t *sh = th_shared();
    for (double t0 = th_now(); __atomic_load_n(&sh->slots[i], __ATOMIC_ACQUIRE) == 0;) {
        if (th_now() - t0 > limit_s) {
            fprintf(stderr, "harness: slot %d not set within %.0f s: the rank that was to set it "
                    "failed or left early (see its output)\n", i, limit_s);
            return -1;
        }
        usleep(1000);
    }
    return 0;
}

int th_await_proc_state(int pid, const char *states, double limit_s)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    for (double t0 = th_now();;) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        /* the state follows the command name, which may hold spaces and parentheses */
        const char *p = strrchr(buf, ')');
        if (f == NULL ? strchr(states, 'X') != NULL
                      : p != NULL && p[1] == ' ' && p[2] != '\0' && strchr(states, p[2]) != NULL)
            return 0;
        if (th_now() - t0 > limit_s) {
            fprintf(stderr, "harness: pid %d did not reach state [%s] within %.0f s\n", pid,
                    states, limit_s);
            return -1;
        }
        usleep(1000);
    }
}

void th_kill_rank(int rank)
{
    th_shared_t *s = th_shared();
    if (rank < 0 || rank >= TH_MAX_RANKS || s->pids[rank] <= 0)
        return;
    __atomic_fetch_or(&s->killed_mask, 1ull << rank, __ATOMIC_SEQ_CST);
    s->killed_rank = rank;
    s->killed_at = th_now();
    kill(s->pids[rank], SIGKILL);
}

void th_ready(void)
{
    th_shared_t *s = th_shared();
    int n = __atomic_add_fetch(&s->ready, 1, __ATOMIC_SEQ_CST);
    if (n == th_nstart)
        s->all_ready_at = th_now();
}

static void child_env(int rank, int nranks, int port, const th_opts_t *o)
{
    static const char *const unset[] = {
        "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID",
        "SLURM_NTASKS", "CCL_ALLREDUCE", "CCL_ALLGATHER", "CCL_ALLTOALL", "CCL_REDUCE_SCATTER",
        "CCL_BCAST", "CCL_REDUCE", "CCL_BARRIER", "TUTTI_TRANSPORT",
    };
    for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++)
        unsetenv(unset[i]);
    char v[64];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", nranks);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    if (o->transport != NULL)
        setenv("TUTTI_TRANSPORT", o->transport, 1);
    snprintf(v, sizeof v, "%g", o->rank_timeout_s > 0 ? o->rank_timeout_s : 20.0);
    setenv("TUTTI_TIMEOUT", v, 1);
    for (int i = 0; i < 8 && o->env[i] != NULL; i++) {
        const char *eq = strchr(o->env[i], '=');
        if (eq == NULL) {
            unsetenv(o->env[i]);
        } else {
            char name[128];
            size_t n = (size_t)(eq - o->env[i]);
            if (n >= sizeof name)
                n = sizeof name - 1;
            memcpy(name, o->env[i], n);
            name[n] = '\0';
            setenv(name, eq + 1, 1);
        }
    }
}

static void describe(int rank, int status, char *out, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(out, cap, "rank %d exited with code %d", rank, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, cap, "rank %d was killed by signal %d (%s)", rank, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out, cap, "rank %d ended with wait status 0x%x", rank, status);
}

int th_run_opts(int nranks, const th_opts_t *o, th_fn fn, void *arg)
{
    int nstart = o->nstart > 0 ? o->nstart : nranks;
    if (nranks < 1 || nranks > TH_MAX_RANKS || nstart > nranks) {
        fprintf(stderr, "harness: bad rank count %d (start %d)\n", nranks, nstart);
        return 1;
    }
    int port = free_port();
    if (port < 0) {
        perror("harness: no free TCP port on 127.0.0.1");
        return 1;
    }
    th_shared_t *s = th_shared();
    memset((void *)s, 0, sizeof *s);
    s->killed_rank = -1;

    th_nstart = nstart;
    pid_t parent = getpid();
    pid_t pids[TH_MAX_RANKS];
    int status[TH_MAX_RANKS];
    int done[TH_MAX_RANKS];
    double t0 = th_now();
    fflush(NULL);
    for (int r = 0; r < nstart; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("harness: fork");
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            for (int k = 0; k < r; k++)
                waitpid(pids[k], NULL, 0);
            return 1;
        }
        if (pid == 0) {
            /* A rank must not outlive the test that started it. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(99);
            alarm((unsigned)ceil(o->timeout_s) + 5u);
            child_env(r, nranks, port, o);
            th_rank = r;
            th_size = nranks;
            th_transport = o->transport ? o->transport : "-";
            s->pids[r] = getpid();
            int rc = fn(r, nranks, arg);
            _exit(rc == 0 ? 0 : (rc > 0 && rc < 256 ? rc : 1));
        }
        pids[r] = pid;
        s->pids[r] = pid;
        done[r] = 0;
        status[r] = 0;
    }

    int left = nstart, timed_out = 0;
    double deadline = t0 + o->timeout_s;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < nstart; r++)
                if (pids[r] == p && !done[r]) {
                    done[r] = 1;
                    status[r] = st;
                    left--;
                }
            continue;
        }
        if (p < 0 && errno == ECHILD)
            break;
        double now = th_now();
        double kill_t0 = o->kill_after_ready ? s->all_ready_at : t0;
        if (o->kill_rank >= 0 && o->kill_rank < nstart && !done[o->kill_rank] &&
            s->killed_at == 0 && kill_t0 > 0 && now - kill_t0 >= o->kill_after_s)
            th_kill_rank(o->kill_rank);
        if (now > deadline) {
            timed_out = 1;
            break;
        }
        usleep(2000);
    }
    int fails = 0;
    if (timed_out) {
        for (int r = 0; r < nstart; r++)
            if (!done[r]) {
                fprintf(stderr, "harness: rank %d still running after %.1f s; killing it\n", r,
                        o->timeout_s);
                kill(pids[r], SIGKILL);
            }
        for (int r = 0; r < nstart; r++)
            if (!done[r]) {
                waitpid(pids[r], &status[r], 0);
                done[r] = 1;
                fails++;
            }
    }
    for (int r = 0; r < nstart; r++) {
        int st = status[r];
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && (s->killed_mask >> r & 1u))
            continue; /* killed on purpose */
        char d[160];
        describe(r, st, d, sizeof d);
        if (!(timed_out && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
            fails++;
        fprintf(stderr, "harness: %d ranks, transport %s: %s\n", nranks,
                o->transport ? o->transport : "-", d);
    }
    return fails == 0 ? 0 : 1;
}

int th_run(int nranks, const char *transport, double timeout_s, th_fn fn, void *arg)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = transport;
    o.timeout_s = timeout_s;
    return th_run_opts(nranks, &o, fn, arg);
}

/* ---- text checks ---- */

static int number_at(const char *p, unsigned long long n)
{
    char want[32];
    snprintf(want, sizeof want, "%llu", n);
    size_t len = strlen(want);
    return strncmp(p, want, len) == 0 && !isdigit((unsigned char)p[len]);
}

int th_mentions_number(const char *text, unsigned long long n)
{
    if (text == NULL)
        return 0;
    for (const char *p = text; *p; p++)
        if (isdigit((unsigned char)*p) && (p == text || !isdigit((unsigned char)p[-1])) &&
            number_at(p, n))
            return 1;
    return 0;
}

int th_mentions_rank(const char *text, int r)
{
    if (text == NULL)
        return 0;
    for (const char *p = text; (p = strcasestr(p, "rank")) != NULL; p += 4) {
        /* the list after the word: "rank 1", "ranks 0, 2 and 5", "rank(s) [1]", "rank=1" */
        const char *q = p + 4;
        if (*q == 's')
            q++;
        else if (strncmp(q, "(s)", 3) == 0)
            q += 3;
        while (*q) {
            if (isdigit((unsigned char)*q)) {
                if (number_at(q, (unsigned long long)r))
                    return 1;
                while (isdigit((unsigned char)*q))
                    q++;
            } else if (strchr(" ,=:[]{}#", *q) != NULL) {
                q++;
            } else if (strncmp(q, "and ", 4) == 0) {
                q += 4;
            } else {
                break;
            }
        }
    }
    return 0;
}

/* ---- bf16 / fp16 by value ---- */

/* to_small rounds x to a binary format with ebits exponent and mbits mantissa bits, nearest
 * even, by scaling to the format's quantum and letting nearbyint (default rounding mode:
 * nearest even) do the rounding. */
static uint16_t to_small(double x, int ebits, int mbits)
{
    uint16_t sign = signbit(x) ? (uint16_t)(1u << (ebits + mbits)) : 0;
    int bias = (1 << (ebits - 1)) - 1;
    uint16_t expmask = (uint16_t)(((1u << ebits) - 1u) << mbits);
    if (isnan(x))
        return (uint16_t)(sign | expmask | (1u << (mbits - 1)));
    double a = fabs(x);
    if (isinf(a))
        return (uint16_t)(sign | expmask);
    if (a == 0.0)
        return sign;
    int emin = 1 - bias, e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (e < emin)
        e = emin;
    double q = ldexp(1.0, e - mbits);
    double r = nearbyint(a / q) * q;
    if (r >= ldexp(1.0, bias + 1))
        return (uint16_t)(sign | expmask);
    if (r == 0.0)
        return sign;
    frexp(r, &e);
    e -= 1;
    if (e < emin)
        return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, emin - mbits)));
    uint16_t m = (uint16_t)((r / ldexp(1.0, e) - 1.0) * (double)(1u << mbits));
    return (uint16_t)(sign | (uint16_t)((unsigned)(e + bias) << mbits) | m);
}

static double from_small(uint16_t h, int ebits, int mbits)
{
    int bias = (1 << (ebits - 1)) - 1;
    unsigned e = (h >> mbits) & ((1u << ebits) - 1u);
    unsigned m = h & ((1u << mbits) - 1u);
    double s = (h >> (ebits + mbits)) & 1u ? -1.0 : 1.0;
    if (e == (1u << ebits) - 1u)
        return m ? NAN : s * INFINITY;
    if (e == 0)
        return s * ldexp((double)m, 1 - bias - mbits);
    return s * ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits);
}

uint16_t th_to_f16(double x) { return to_small(x, 5, 10); }
uint16_t th_to_bf16(double x) { return to_small(x, 8, 7); }
double th_from_f16(uint16_t h) { return from_small(h, 5, 10); }
double th_from_bf16(uint16_t h) { return from_small(h, 8, 7); }

/* ---- /dev/shm ---- */

int th_shm_snapshot(char (*names)[256], int cap)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "tutti-", 6) == 0 && n < cap)
            snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    return n;
}

int th_shm_new(char (*before)[256], int nbefore)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "tutti-", 6) != 0)
            continue;
        int seen = 0;
        for (int i = 0; i < nbefore && !seen; i++)
            seen = strcmp(before[i], e->d_name) == 0;
        if (!seen) {
            fprintf(stderr, "harness: /dev/shm/%s was left behind\n", e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}
