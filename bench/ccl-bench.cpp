/* ccl-bench.cpp: tutti-bench's twin over Intel oneCCL's C++ API (ccl::allreduce, ccl::allgather,
 * ...), built by bench/oneccl/setup.sh against the oneCCL that pip installs into .venv-oneccl/, with
 * the same flags, rows and -c check as tutti-bench and mpi-bench (all three include
 * bench_common.h), so that bench/compare lines oneCCL up with the others column by column. oneCCL
 * is configured the way its users configure it, by environment (CCL_ATL_TRANSPORT,
 * CCL_WORKER_COUNT, FI_PROVIDER, ...) and by the launcher that starts the ranks; this file only
 * finds its rank, hands oneCCL's key-value store address from rank 0 to the others, and times the
 * calls. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <exception>
#include <memory>
#include <string>

#include <oneapi/ccl.hpp>

#define BENCH_PROG "ccl-bench"
#include "bench_common.h"

/* bytes per element of bench_common.h's D_* */
static const size_t dtype_sizes[D_COUNT] = {1, 1, 4, 8, 2, 2, 4, 8};

static const char *const coll_ccl[C_COUNT] = {
    "ccl::allreduce", "ccl::allgather", "ccl::alltoall", "ccl::reduce_scatter",
    "ccl::broadcast", "ccl::reduce",    "ccl::barrier",
};

/* oneCCL's own algorithm-selection variable for each collective (-a sets it). */
static const char *const coll_env[C_COUNT] = {
    "CCL_ALLREDUCE", "CCL_ALLGATHER", "CCL_ALLTOALL", "CCL_REDUCE_SCATTER",
    "CCL_BCAST",     "CCL_REDUCE",    "CCL_BARRIER",
};


/* The rendezvous protocol: a rank sends MAGIC, its rank and the world size; rank 0 answers MAGIC and
 * the address. A connection that says anything else is dropped, so a stray client changes nothing. */
static const char MAGIC[16] = "ccl-bench kvs 1";

typedef struct hello {
    char magic[16];
    int32_t rank, size;
} hello_t;

typedef struct reply {
    char magic[16];
    char address[sizeof(ccl::kvs::address_type)];
} reply_t;

typedef struct bench {
    opts_t o;
    int rank, size;
    size_t esize;
    ccl::datatype dt;
    ccl::reduction op;
    ccl::communicator *comm;
    std::string settings; /* the CCL_*, FI_* and I_MPI_* variables as the run began */
    bufs_t bf;
} bench_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ccl-bench COLL [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-x WARMUP]\n"
            "                      [-d DTYPE] [-o OP] [-a ALGO] [-c]\n"
            "  COLL       allreduce, allgather, alltoall, reduce_scatter, bcast, reduce, barrier\n"
            "             (ccl::allreduce, ccl::allgather, ccl::alltoall, ccl::reduce_scatter,\n"
            "             ccl::broadcast and ccl::reduce from rank 0, ccl::barrier)\n"
            "  -b MIN     smallest per-rank message in bytes, K/M/G suffixes allowed (default 8)\n"
            "  -e MAX     largest per-rank message in bytes (default 4M)\n"
            "  -f FACTOR  size multiplier from one row to the next (default 2)\n"
            "  -i ITERS   timed iterations per size (default 100; fewer where one size would\n"
            "             take over %.0f s, judged on the warm-up)\n"
            "  -x WARMUP  untimed iterations per size (default 10)\n"
            "  -d DTYPE   int8 uint8 int32 int64 fp16 bf16 fp32 fp64 (default fp32)\n"
            "  -o OP      sum prod min max avg (default sum; oneCCL has no band/bor/bxor)\n"
            "  -a ALGO    oneCCL's own algorithm selection, set as CCL_<COLL>=ALGO before ccl::init\n"
            "             (oneCCL's syntax, e.g. \"ring\" or \"direct:0-8192;ring:8193-max\")\n"
            "  -c         check every result bit for bit (avg: within 1 ulp) and exit 1 on the\n"
            "             first wrong element\n"
            "The same rows as tutti-bench. Ranks come from PMI_RANK/PMI_SIZE (Intel MPI's or MPICH's\n"
            "mpirun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI) or RANK/WORLD_SIZE (one process per rank);\n"
            "rank 0 hands its key-value store's address to the others over TCP at\n"
            "MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500). oneCCL reads its own settings from\n"
            "the environment (CCL_ATL_TRANSPORT=ofi|mpi, FI_PROVIDER, CCL_WORKER_COUNT, ...); run it\n"
            "through bench/oneccl/env, which points them at .venv-oneccl/:\n"
            "  bench/oneccl/env mpirun -n 2 .venv-oneccl/bin/ccl-bench allreduce\n",
            TIME_BUDGET_S);
}

static void bench_abort(void)
{
    exit(1); /* the launcher ends the other ranks; under plain processes, their caller's timeout */
}

/* ---- rank discovery and the key-value store ---------------------------------------------- */

/* env_long reads variable name as an integer in [lo, hi]; false if it is not set, exits if it is
 * set but not such a number (a launcher that says nonsense must not be guessed around). */
static bool env_long(const char *name, long lo, long hi, long *out)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return false;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "ccl-bench: %s=\"%s\" is not an integer in %ld..%ld\n", name, s, lo, hi);
        exit(2);
    }
    *out = x;
    return true;
}

/* rendezvous_s: the seconds rank 0 waits for every other rank to fetch the key-value store's
 * address, and each of them for rank 0 to serve it: 120 (a loaded machine starts ranks late), or
 * TUTTI_BENCH_RENDEZVOUS_S. */
static double rendezvous_s(void)
{
    long s = 120;
    env_long("TUTTI_BENCH_RENDEZVOUS_S", 1, 86400, &s);
    return (double)s;
}

/* find_rank takes rank and size from the launcher's variables; one rank when there are none. */
static void find_rank(int *rank, int *size)
{
    static const char *const pairs[][2] = {
        {"PMI_RANK", "PMI_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"RANK", "WORLD_SIZE"}};
    for (auto &p : pairs) {
        long r, n;
        bool has_r = env_long(p[0], 0, 1L << 20, &r), has_n = env_long(p[1], 1, 1L << 20, &n);
        if (!has_r && !has_n)
            continue;
        if (!has_r || !has_n || r >= n) {
            fprintf(stderr, "ccl-bench: %s and %s must both be set, with %s < %s\n", p[0], p[1], p[0], p[1]);
            exit(2);
        }
        *rank = (int)r;
        *size = (int)n;
        return;
    }
    *rank = 0;
    *size = 1;
}

static int remaining_ms(double deadline)
{
    double left = deadline - now_s();
    return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

/* io_all reads (send false) or writes n bytes of fd before the deadline; false on EOF, error or time. */
static bool io_all(int fd, void *buf, size_t n, bool send_it, double deadline)
{
    char *p = (char *)buf;
    while (n > 0) {
        struct pollfd pfd = {fd, (short)(send_it ? POLLOUT : POLLIN), 0};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) <= 0)
            return false;
        ssize_t k = send_it ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k <= 0) {
            if (k < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            return false;
        }
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* rendezvous_addr resolves MASTER_ADDR:MASTER_PORT (defaults 127.0.0.1:29500), or exits. */
static struct sockaddr_in rendezvous_addr(void)
{
    const char *host = getenv("MASTER_ADDR");
    if (host == NULL || *host == '\0')
        host = "127.0.0.1";
    long port = 29500;
    env_long("MASTER_PORT", 1, 65535, &port);
    struct addrinfo hints = {}, *ai = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc != 0 || ai == NULL) {
        fprintf(stderr, "ccl-bench: MASTER_ADDR \"%s\": %s\n", host, gai_strerror(rc));
        exit(2);
    }
    struct sockaddr_in sa;
    memcpy(&sa, ai->ai_addr, sizeof sa);
    freeaddrinfo(ai);
    sa.sin_port = htons((uint16_t)port);
    return sa;
}

/* serve_address: rank 0 answers each other rank's hello with the address, once per rank. */
static void serve_address(const ccl::kvs::address_type &addr, int size)
{
    struct sockaddr_in sa = rendezvous_addr();
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, size) != 0) {
        fprintf(stderr, "ccl-bench: rank 0: cannot listen on %s:%d for the other ranks: %s (set "
                        "MASTER_ADDR/MASTER_PORT to a free local address and port)\n",
                inet_ntoa(sa.sin_addr), ntohs(sa.sin_port), strerror(errno));
        exit(1);
    }
    reply_t rep = {};
    memcpy(rep.magic, MAGIC, sizeof MAGIC);
    memcpy(rep.address, addr.data(), sizeof rep.address);
    std::unique_ptr<bool[]> served(new bool[(size_t)size]());
    int left = size - 1;
    double deadline = now_s() + rendezvous_s();
    while (left > 0) {
        struct pollfd pfd = {lfd, POLLIN, 0};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) <= 0)
            break;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        hello_t h;
        double conn_deadline = now_s() + 5.0; /* one slow or silent client cannot stall the rest */
        if (io_all(fd, &h, sizeof h, false, conn_deadline) && memcmp(h.magic, MAGIC, sizeof MAGIC) == 0 &&
            h.size == size && h.rank > 0 && h.rank < size && !served[h.rank] &&
            io_all(fd, &rep, sizeof rep, true, conn_deadline)) {
            served[h.rank] = true;
            left--;
        }
        close(fd);
    }
    close(lfd);
    if (left > 0) {
        fprintf(stderr, "ccl-bench: rank 0: %d of %d ranks did not ask for the key-value store's "
                        "address within %.0f s (are they launched, with the same MASTER_ADDR/"
                        "MASTER_PORT and world size?)\n", left, size - 1, rendezvous_s());
        exit(1);
    }
}

/* fetch_address: a rank other than 0 asks rank 0 for the address, retrying until it answers. */
static ccl::kvs::address_type fetch_address(int rank, int size)
{
    struct sockaddr_in sa = rendezvous_addr();
    hello_t h = {};
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.rank = rank;
    h.size = size;
    double deadline = now_s() + rendezvous_s();
    const char *why = "no answer";
    while (now_s() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct timeval tv = {2, 0}; /* bounds connect() to an unreachable host */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        reply_t rep;
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            double conn_deadline = now_s() + 10.0;
            if (io_all(fd, &h, sizeof h, true, conn_deadline) &&
                io_all(fd, &rep, sizeof rep, false, conn_deadline)) {
                close(fd);
                if (memcmp(rep.magic, MAGIC, sizeof MAGIC) != 0 ||
                    memchr(rep.address, '\0', sizeof rep.address) == NULL || rep.address[0] == '\0') {
                    fprintf(stderr, "ccl-bench: rank %d: %s:%d answered, but not with a ccl-bench "
                                    "key-value store address (another program on that port?)\n",
                            rank, inet_ntoa(sa.sin_addr), ntohs(sa.sin_port));
                    exit(1);
                }
                ccl::kvs::address_type addr;
                memcpy(addr.data(), rep.address, sizeof rep.address);
                return addr;
            }
            why = "connection closed";
        } else {
            why = strerror(errno);
        }
        if (fd >= 0)
            close(fd);
        usleep(50 * 1000);
    }
    fprintf(stderr, "ccl-bench: rank %d: rank 0 at %s:%d did not hand out the key-value store's "
                    "address within %.0f s (%s)\n",
            rank, inet_ntoa(sa.sin_addr), ntohs(sa.sin_port), rendezvous_s(), why);
    exit(1);
}

/* make_kvs: oneCCL's key-value store, the way its API asks for it: rank 0 creates the main one,
 * and its address reaches the others out of band. */
static ccl::shared_ptr_class<ccl::kvs> make_kvs(int rank, int size)
{
    if (rank == 0) {
        ccl::shared_ptr_class<ccl::kvs> kvs = ccl::create_main_kvs();
        if (size > 1)
            serve_address(kvs->get_address(), size);
        return kvs;
    }
    return ccl::create_kvs(fetch_address(rank, size));
}

/* ---- types ------------------------------------------------------------------------------- */

/* setup_types maps -d/-o to oneCCL's enums; false (with the reason) where oneCCL has no such op. */
static bool setup_types(bench_t *b, char *why, size_t whylen)
{
    static const ccl::datatype dts[D_COUNT] = {
        ccl::datatype::int8,    ccl::datatype::uint8,    ccl::datatype::int32,   ccl::datatype::int64,
        ccl::datatype::float16, ccl::datatype::bfloat16, ccl::datatype::float32, ccl::datatype::float64,
    };
    b->dt = dts[b->o.dtype];
    bool reduces = b->o.coll == C_ALLREDUCE || b->o.coll == C_REDUCE_SCATTER || b->o.coll == C_REDUCE;
    switch (b->o.op) {
    case O_SUM: b->op = ccl::reduction::sum; break;
    case O_PROD: b->op = ccl::reduction::prod; break;
    case O_MIN: b->op = ccl::reduction::min; break;
    case O_MAX: b->op = ccl::reduction::max; break;
    case O_AVG: b->op = ccl::reduction::avg; break;
    default:
        if (!reduces)
            return true;
        snprintf(why, whylen, "oneCCL has no %s reduction (ccl::reduction: sum prod min max avg)",
                 op_names[b->o.op]);
        return false;
    }
    return true;
}

/* ---- one call ---------------------------------------------------------------------------- */

static void run_once(void *ctx, size_t count)
{
    bench_t *b = (bench_t *)ctx;
    const ccl::communicator &c = *b->comm;
    void *s = b->bf.sendbuf, *r = b->bf.recvbuf;
    switch (b->o.coll) {
    case C_ALLREDUCE: ccl::allreduce(s, r, count, b->dt, b->op, c).wait(); break;
    case C_ALLGATHER: ccl::allgather(s, r, count, b->dt, c).wait(); break;
    case C_ALLTOALL: ccl::alltoall(s, r, count, b->dt, c).wait(); break;
    case C_REDUCE_SCATTER: ccl::reduce_scatter(s, r, count, b->dt, b->op, c).wait(); break;
    case C_BCAST: ccl::broadcast(s, count, b->dt, 0, c).wait(); break;
    case C_REDUCE: ccl::reduce(s, r, count, b->dt, b->op, 0, c).wait(); break;
    default: ccl::barrier(c).wait(); break;
    }
}

static double hook_reduce_f64(void *ctx, double v, int op)
{
    bench_t *b = (bench_t *)ctx;
    double out = 0.0;
    ccl::reduction rop = op == O_SUM ? ccl::reduction::sum : op == O_MIN ? ccl::reduction::min
                                                                            : ccl::reduction::max;
    ccl::allreduce(&v, &out, 1, ccl::datatype::float64, rop, *b->comm).wait();
    return out;
}

static void hook_barrier(void *ctx, bool before_timing)
{
    (void)before_timing;
    ccl::barrier(*((bench_t *)ctx)->comm).wait();
}

/* ---- header -------------------------------------------------------------------------------- */

/* node_count counts distinct (host name, network namespace) pairs: namespace "hosts" on one
 * machine share the host name, not the namespace. */
static int node_count(bench_t *b)
{
    char host[256] = "", ns[64] = "";
    gethostname(host, sizeof host - 1);
    ssize_t k = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    if (k > 0)
        ns[k] = '\0';
    uint64_t id = 0xcbf29ce484222325ull; /* FNV-1a over both */
    const char *parts[] = {host, "/", ns};
    for (const char *p : parts)
        for (; *p; p++)
            id = (id ^ (unsigned char)*p) * 0x100000001b3ull;
    std::unique_ptr<uint64_t[]> all(new uint64_t[(size_t)b->size]);
    ccl::allgather(&id, all.get(), 1, ccl::datatype::uint64, *b->comm).wait();
    int nodes = 0;
    for (int i = 0; i < b->size; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = all[j] == all[i];
        nodes += !seen;
    }
    return nodes;
}

/* settings lists the variables that change what oneCCL does, as they were set for this run: taken
 * before ccl::init, which sets some FI_* defaults of its own in the environment. */
static std::string settings(void)
{
    extern char **environ;
    std::string out;
    for (char **e = environ; *e != NULL; e++) {
        const char *v = *e;
        bool ours = strncmp(v, "CCL_", 4) == 0 || strncmp(v, "FI_", 3) == 0 || strncmp(v, "I_MPI_", 6) == 0;
        const char *eq = strchr(v, '=');
        if (!ours || eq == NULL)
            continue;
        std::string name(v, (size_t)(eq - v));
        /* where things are installed, not how oneCCL runs; and what Intel MPI's mpirun tells its
         * ranks about the machine (I_MPI_INFO_*, the pin map, its job id) */
        if (name == "CCL_ROOT" || name == "I_MPI_ROOT" || name.find("_PATH") != std::string::npos ||
            name == "CCL_CONFIGURATION" || name.rfind("I_MPI_INFO_", 0) == 0 ||
            name == "I_MPI_HYDRA_UUID" || name == "I_MPI_MPIRUN" || name == "I_MPI_PIN_MAPPING" ||
            name == "I_MPI_PIN_INFO" || name == "I_MPI_HYDRA_TOPOLIB" ||
            name == "I_MPI_INTERNAL_MEM_POLICY" || name == "I_MPI_BIND_WIN_ALLOCATE" ||
            name == "I_MPI_RETURN_WIN_MEM_NUMA")
            continue;
        out += out.empty() ? "" : " ";
        out += v;
    }
    return out.empty() ? std::string("none (oneCCL's defaults)") : out;
}

/* launcher names what started the ranks, from the variables each one sets. */
static const char *launcher(void)
{
    if (getenv("I_MPI_HYDRA_UUID") != NULL)
        return "Intel MPI's mpirun";
    if (getenv("PMI_RANK") != NULL)
        return "Hydra (PMI)";
    if (getenv("OMPI_COMM_WORLD_RANK") != NULL)
        return "Open MPI's mpirun";
    return getenv("RANK") != NULL ? "none (RANK/WORLD_SIZE)" : "none (one rank)";
}

/* cpus_allowed: how many CPUs this process may run on (1: the launcher bound it to a core). */
static int cpus_allowed(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

static void print_header(bench_t *b, int nodes, int max_cpus)
{
    ccl::library_version v = ccl::get_library_version();
    const char *atl = getenv("CCL_ATL_TRANSPORT"), *prov = getenv("FI_PROVIDER");
    std::string transport;
    if (atl && *atl) {
        transport = std::string("ATL ") + atl;
    } else { /* oneCCL's default: mpi, unless no MPI launcher's variables are there */
        atl = getenv("PMI_RANK") || getenv("OMPI_COMM_WORLD_RANK") ? "mpi" : "ofi";
        transport = std::string("ATL ") + atl + " (oneCCL's default here)";
    }
    if (strcmp(atl, "mpi") != 0)
        transport += std::string(", FI_PROVIDER ") + (prov && *prov ? prov : "libfabric's choice");
    const char *algo = getenv(coll_env[b->o.coll]);
    printf("# oneCCL %d.%d.%d (%s)  ccl-bench %s (%s)  dtype %s  op %s  ranks %d  nodes %d  "
           "transport %s  algorithm %s  launcher %s  %s\n",
           v.major, v.minor, v.update, v.full, coll_names[b->o.coll], coll_ccl[b->o.coll],
           dtype_names[b->o.dtype], op_names[b->o.op], b->size, nodes, transport.c_str(),
           algo && *algo ? algo : "oneCCL's choice", launcher(),
           max_cpus == 1 ? "bound (one CPU per rank)" : "unbound");
    printf("# oneCCL settings: %s\n", b->settings.c_str());
    print_conventions(&b->o);
}

/* ---- main ---------------------------------------------------------------------------------- */

static int run(bench_t &b)
{
    ccl::init();
    ccl::shared_ptr_class<ccl::kvs> kvs = make_kvs(b.rank, b.size);
    ccl::communicator comm = ccl::create_communicator(b.size, b.rank, kvs);
    if (comm.rank() != b.rank || comm.size() != b.size) {
        fprintf(stderr, "ccl-bench: rank %d of %d: oneCCL made rank %d of %d\n", b.rank, b.size,
                comm.rank(), comm.size());
        return 1;
    }
    b.comm = &comm;

    size_t n = (size_t)b.size;
    size_t max_count = b.o.max_bytes / b.esize;
    if (b.o.coll != C_BARRIER && max_count > SIZE_MAX / n / b.esize) {
        if (b.rank == 0)
            fprintf(stderr, "ccl-bench: -e %zu is too large for %d ranks\n", b.o.max_bytes, b.size);
        return 2;
    }
    size_t nsend, nrecv;
    counts(b.o.coll, b.size, max_count, &nsend, &nrecv);
    b.bf.sendbuf = alloc(nsend * b.esize);
    b.bf.recvbuf = alloc(nrecv * b.esize);
    if (b.o.check) {
        b.bf.expect = alloc((b.o.coll == C_BCAST ? nsend : nrecv) * b.esize);
        b.bf.sendcopy = alloc(nsend * b.esize);
    }

    int nodes = node_count(&b);
    int max_cpus = (int)hook_reduce_f64(&b, (double)cpus_allowed(), O_MAX);
    if (b.rank == 0)
        print_header(&b, nodes, max_cpus);

    static const hooks_t hooks = {run_once, hook_barrier, hook_reduce_f64, coll_ccl};
    bool ok;
    try {
        ok = run_sizes(&hooks, &b, &b.o, b.size, b.rank, b.esize, &b.bf); /* all ranks agree */
    } catch (const ccl::exception &e) {
        /* oneCCL checks a call's arguments alike on every rank: what it does not support, it
         * refuses on all of them at the first call, which is a refusal, not a failure */
        if (strstr(e.what(), "not supported") == NULL)
            throw;
        if (b.rank == 0)
            printf("# ccl-bench: cannot run %s %s %s: oneCCL refuses it: %s\n", coll_names[b.o.coll],
                   dtype_names[b.o.dtype], op_names[b.o.op], e.what());
        fprintf(stderr, "ccl-bench: rank %d: oneCCL refuses %s %s %s: %s\n", b.rank,
                coll_names[b.o.coll], dtype_names[b.o.dtype], op_names[b.o.op], e.what());
        return 2;
    }

    free(b.bf.sendbuf);
    free(b.bf.recvbuf);
    free(b.bf.expect);
    free(b.bf.sendcopy);
    if (!ok) {
        if (b.rank == 0)
            fprintf(stderr, "ccl-bench: -c found wrong results (see the messages above)\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_t b = {};
    parse_args(argc, argv, &b.o, usage, NULL);
    b.esize = dtype_sizes[b.o.dtype];
    find_rank(&b.rank, &b.size);
    g_rank = b.rank;

    char why[160];
    if (!setup_types(&b, why, sizeof why)) { /* every rank refuses alike, before oneCCL starts */
        if (b.rank == 0) {
            printf("# ccl-bench: cannot run %s %s %s: %s\n", coll_names[b.o.coll],
                   dtype_names[b.o.dtype], op_names[b.o.op], why);
            fprintf(stderr, "ccl-bench: %s\n", why);
        }
        return 2;
    }
    if (b.o.algo != NULL) /* before ccl::init, which reads it */
        setenv(coll_env[b.o.coll], b.o.algo, 1);
    b.settings = settings();

    try {
        return run(b);
    } catch (const std::exception &e) {
        fprintf(stderr, "ccl-bench: rank %d: oneCCL failed: %s\n", b.rank, e.what());
        return 1;
    }
}
