/* train_bf16.c: a bf16 data-parallel training job over tutti, done the way PyTorch DDP does it:
 * an MLP classifier (mlp.c, GEMMs in gemm_bf16.c) trained on seeded Gaussian clusters, launched
 * with mpirun (MPICH, Open MPI) or by hand with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT.
 *
 * Each step: every rank takes its shard of the global batch, runs forward and backward in bf16,
 * and as soon as the backward pass has finished the layers of a gradient bucket (last layer
 * first) posts an asynchronous bf16 allreduce (TUTTI_AVG) of that bucket, so the reduction runs
 * on tutti's worker thread while the layers below are still being differentiated. Before the
 * optimizer step it waits for all buckets; since tutti's allreduce leaves the same bits on every
 * rank and the optimizer is deterministic, every rank holds bit-identical parameters.
 *
 * With --elastic a failed collective (a rank died) does not end the job: the survivors shrink
 * the communicator (tutti_comm_shrink), take the new rank 0's parameters, momentum and step
 * (a survivor may have finished one step more than another), split each global batch over
 * the ranks left, and train on. */
#include <signal.h>
#include <unistd.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tutti.h>

#include "gemm_bf16.h"
#include "mlp.h"

typedef struct options {
    int steps, batch, hidden, layers, dim, classes, clusters, train_size, test_size, eval_rows;
    double sigma, lr, momentum, bucket_kb;
    uint64_t seed;
    const char *gemm, *save_params, *ref_params;
    int param_hash;
    int elastic;
    int ndie, die_rank[8], die_step[8]; /* --die-at: who SIGKILLs itself at which step */
} options_t;

static const options_t defaults = {
    .steps = 256, .batch = 256, .hidden = 512, .layers = 2, .dim = 32, .classes = 10,
    .clusters = 4, .train_size = 16384, .test_size = 4096, .eval_rows = 256, .sigma = 1.0,
    .lr = 0.05, .momentum = 0.9, .bucket_kb = 256, .seed = 1, .gemm = "auto",
    .save_params = NULL, .ref_params = NULL, .param_hash = 0, .elastic = 0, .ndie = 0,
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: train_bf16 [options]   (one process per rank: mpirun -n 4 train_bf16 ..., or\n"
        "       RANK=r WORLD_SIZE=n MASTER_ADDR=a MASTER_PORT=p train_bf16 ... per rank)\n"
        "\n"
        "Trains an MLP classifier in bf16 with data parallelism over tutti (as PyTorch DDP:\n"
        "parameters broadcast from rank 0, each rank a shard of every global batch, gradients\n"
        "averaged by asynchronous bf16 allreduce in buckets while backward runs).\n"
        "\n"
        "  --steps N        optimizer steps (default %d)\n"
        "  --batch B        global batch, split evenly over the ranks; must be a multiple of\n"
        "                   the number of ranks (default %d)\n"
        "  --hidden H       width of the hidden layers (default %d)\n"
        "  --layers L       hidden layers, 1..8 (default %d)\n"
        "  --seed S         seed of the data, the initial weights and the sample order (default %d)\n"
        "  --lr X           SGD learning rate (default %g)\n"
        "  --momentum X     SGD momentum (default %g)\n"
        "  --bucket-kb K    gradient bucket size in KiB; 0 = one bucket per layer (default %g)\n"
        "  --dim D          input features (default %d)\n"
        "  --classes C      classes (default %d)\n"
        "  --clusters K     Gaussian clusters per class (default %d)\n"
        "  --sigma X        noise of a point around its cluster center (default %g)\n"
        "  --train-size N   training samples; an epoch is N / B steps (default %d)\n"
        "  --test-size N    held-out samples (default %d)\n"
        "  --gemm V         auto, scalar, avx512bf16 (VDPBF16PS) or amx (TDPBF16PS tiles);\n"
        "                   auto takes amx, else avx512bf16, else scalar (default auto)\n"
        "  --param-hash     print each rank's hash of the final fp32 master weights; an error\n"
        "                   if they differ\n"
        "  --save-params P  each rank writes its final fp32 master weights to P.<rank>\n"
        "  --ref-params F   print the relative L2 distance of the final weights to file F\n"
        "                   (written by --save-params)\n"
        "  --elastic        when a rank dies, the others shrink the communicator and train on\n"
        "                   (the global batch split over the ranks left, unevenly if need be)\n"
        "  --die-at R:S[,R:S...]  fault injection: launch rank R kills itself (SIGKILL) at\n"
        "                   step S (up to 8 pairs)\n"
        "  -h, --help       this text\n"
        "\n"
        "Output (rank 0 only; errors from any rank on stderr): a line per epoch, then last\n"
        "  final: loss=<held-out mean cross-entropy> accuracy=<held-out accuracy>\n"
        "         samples_per_s=<global samples per second of training steps>\n"
        "         comm_s=<seconds some gradient allreduce was in flight, post to completion>\n"
        "         overlap=<1 - exposed_wait_s / comm_s>\n"
        "where exposed_wait_s is the time the training thread spent blocked on the gradient\n"
        "allreduces: waiting for them after backward, and inside the posts (a bucket of up to\n"
        "TUTTI_INLINE_MAX bytes may run in the caller's thread). overlap is the fraction of the\n"
        "communication hidden behind backward compute (0 when nothing was hidden).\n",
        defaults.steps, defaults.batch, defaults.hidden, defaults.layers, (int)defaults.seed,
        defaults.lr, defaults.momentum, defaults.bucket_kb, defaults.dim, defaults.classes,
        defaults.clusters, defaults.sigma, defaults.train_size, defaults.test_size);
}

/* The rank the launcher set, before there is a communicator, in tutti's order: only rank 0
 * reports a bad command line, which every rank sees alike. */
static int launcher_rank(void)
{
    static const char *const vars[] = {"RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && *v != '\0')
            return atoi(v);
    }
    return 0;
}

static int rank_g = -1; /* for messages */

static void fail_msg(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "train_bf16: rank %d: %s\n", rank_g, msg);
    fflush(stderr);
}

static int parse_int(const char *name, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        if (launcher_rank() == 0)
            fprintf(stderr, "train_bf16: --%s %s: expected an integer in %d..%d\n", name, s, lo,
                    hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_double(const char *name, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        if (launcher_rank() == 0)
            fprintf(stderr, "train_bf16: --%s %s: expected a number in %g..%g\n", name, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* @return 0 to go on, 1 to exit 0 (--help), 2 for a bad command line. */
static int parse_args(int argc, char **argv, options_t *o)
{
    enum { O_STEPS = 256, O_BATCH, O_HIDDEN, O_LAYERS, O_SEED, O_LR, O_MOM, O_BUCKET, O_DIM,
           O_CLASSES, O_CLUSTERS, O_SIGMA, O_TRAIN, O_TEST, O_GEMM, O_HASH, O_SAVE, O_REF,
           O_ELASTIC, O_DIE };
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, O_STEPS},
        {"batch", required_argument, NULL, O_BATCH},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"layers", required_argument, NULL, O_LAYERS},
        {"seed", required_argument, NULL, O_SEED},
        {"lr", required_argument, NULL, O_LR},
        {"momentum", required_argument, NULL, O_MOM},
        {"bucket-kb", required_argument, NULL, O_BUCKET},
        {"dim", required_argument, NULL, O_DIM},
        {"classes", required_argument, NULL, O_CLASSES},
        {"clusters", required_argument, NULL, O_CLUSTERS},
        {"sigma", required_argument, NULL, O_SIGMA},
        {"train-size", required_argument, NULL, O_TRAIN},
        {"test-size", required_argument, NULL, O_TEST},
        {"gemm", required_argument, NULL, O_GEMM},
        {"param-hash", no_argument, NULL, O_HASH},
        {"save-params", required_argument, NULL, O_SAVE},
        {"ref-params", required_argument, NULL, O_REF},
        {"elastic", no_argument, NULL, O_ELASTIC},
        {"die-at", required_argument, NULL, O_DIE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = defaults;
    opterr = launcher_rank() == 0;
    int c, seed;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_STEPS: bad = parse_int("steps", optarg, 1, 100000000, &o->steps); break;
        case O_BATCH: bad = parse_int("batch", optarg, 1, 1 << 20, &o->batch); break;
        case O_HIDDEN: bad = parse_int("hidden", optarg, 1, 16384, &o->hidden); break;
        case O_LAYERS: bad = parse_int("layers", optarg, 1, 8, &o->layers); break;
        case O_SEED:
            bad = parse_int("seed", optarg, 0, 2147483647, &seed);
            o->seed = (uint64_t)seed;
            break;
        case O_LR: bad = parse_double("lr", optarg, 0.0, 100.0, &o->lr); break;
        case O_MOM: bad = parse_double("momentum", optarg, 0.0, 0.999, &o->momentum); break;
        case O_BUCKET: bad = parse_double("bucket-kb", optarg, 0.0, 1048576.0, &o->bucket_kb); break;
        case O_DIM: bad = parse_int("dim", optarg, 1, 16384, &o->dim); break;
        case O_CLASSES: bad = parse_int("classes", optarg, 2, 16384, &o->classes); break;
        case O_CLUSTERS: bad = parse_int("clusters", optarg, 1, 1024, &o->clusters); break;
        case O_SIGMA: bad = parse_double("sigma", optarg, 0.0, 1000.0, &o->sigma); break;
        case O_TRAIN: bad = parse_int("train-size", optarg, 1, 1 << 26, &o->train_size); break;
        case O_TEST: bad = parse_int("test-size", optarg, 1, 1 << 26, &o->test_size); break;
        case O_GEMM: o->gemm = optarg; break;
        case O_HASH: o->param_hash = 1; break;
        case O_SAVE: o->save_params = optarg; break;
        case O_REF: o->ref_params = optarg; break;
        case O_ELASTIC: o->elastic = 1; break;
        case O_DIE:
            o->ndie = 0;
            for (char *save = NULL, *pair = strtok_r(optarg, ",", &save); pair != NULL && !bad;
                 pair = strtok_r(NULL, ",", &save)) {
                char *colon = strchr(pair, ':');
                bad = colon == NULL || o->ndie == 8;
                if (!bad) {
                    *colon = '\0';
                    bad = parse_int("die-at rank", pair, 0, 1 << 20, &o->die_rank[o->ndie]) ||
                          parse_int("die-at step", colon + 1, 0, 100000000,
                                    &o->die_step[o->ndie]);
                    o->ndie++;
                }
            }
            bad |= o->ndie == 0;
            break;
        case 'h': usage(stdout); return 1;
        default: bad = 1; break;
        }
        if (bad) {
            if (launcher_rank() == 0)
                fprintf(stderr, "train_bf16: bad command line; see train_bf16 --help\n");
            return 2;
        }
    }
    if (optind < argc) {
        if (launcher_rank() == 0)
            fprintf(stderr, "train_bf16: unexpected argument '%s'; see train_bf16 --help\n",
                    argv[optind]);
        return 2;
    }
    if (o->batch > o->train_size) {
        if (launcher_rank() == 0)
            fprintf(stderr, "train_bf16: --batch %d is larger than --train-size %d\n", o->batch,
                    o->train_size);
        return 2;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A gradient bucket: the parameters of layers lo..hi, one contiguous range of the gradient
 * buffer (the buffer holds the last layer first), posted when layer lo's gradients are done. */
typedef struct bucket {
    int lo, hi;
    size_t off, count;
    tutti_work_t *work;
    double t_post, t_done; /* t_done: written by the completion callback (a worker thread) */
} bucket_t;

typedef struct ddp {
    tutti_comm_t *comm;
    mlp_t *model;
    bucket_t *buckets;
    int nbuckets;
    int step;
    double post_s;             /* time spent inside the posts (small ones may run inline) */
    tutti_status_t post_error; /* the first failed post, reported after backward */
    int post_error_bucket;
} ddp_t;

static void on_done(tutti_work_t *work, void *arg)
{
    (void)work;
    double t = now_s();
    __atomic_store(&((bucket_t *)arg)->t_done, &t, __ATOMIC_RELEASE);
}

/* The backward hook: post the bucket whose lowest layer just finished. The allreduce works in
 * place on the bucket's range of m->grad, which backward does not touch again this step. */
static void post_bucket(int layer, void *arg)
{
    ddp_t *d = arg;
    for (int i = 0; i < d->nbuckets; i++) {
        bucket_t *b = &d->buckets[i];
        if (b->lo != layer || d->post_error != TUTTI_OK)
            continue;
        bf16_t *g = d->model->grad + b->off;
        b->t_done = 0.0;
        b->t_post = now_s();
        tutti_status_t st =
            tutti_allreduce(g, g, b->count, TUTTI_BFLOAT16, TUTTI_AVG, d->comm, &b->work);
        if (st == TUTTI_OK || st == TUTTI_IN_PROGRESS)
            st = tutti_work_on_complete(b->work, on_done, b);
        d->post_s += now_s() - b->t_post;
        if (st != TUTTI_OK && st != TUTTI_IN_PROGRESS) {
            d->post_error = st;
            d->post_error_bucket = i;
        }
    }
}

/* make_buckets cuts the layers, last first, into buckets of at least cap bytes (the last one
 * may be smaller); cap 0 gives one bucket per layer. */
static int make_buckets(ddp_t *d, double cap_bytes)
{
    mlp_t *m = d->model;
    d->buckets = calloc((size_t)m->nlayers, sizeof *d->buckets);
    if (d->buckets == NULL)
        return -1;
    d->nbuckets = 0;
    size_t bytes = 0;
    bucket_t *cur = NULL;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        const mlp_layer_t *L = &m->layer[l];
        size_t n = (size_t)L->in * L->out + (size_t)L->out;
        if (cur == NULL) {
            cur = &d->buckets[d->nbuckets++];
            cur->hi = l;
            cur->off = L->w_off;
            cur->count = 0;
            bytes = 0;
        }
        cur->lo = l;
        cur->count += n;
        bytes += n * sizeof(bf16_t);
        if ((double)bytes >= cap_bytes)
            cur = NULL;
    }
    return 0;
}

/* The failure text of a collective: its status, then what tutti says happened. */
static void report_tutti(tutti_comm_t *comm, tutti_work_t *w, tutti_status_t st, const char *what)
{
    const char *txt = w != NULL ? tutti_work_error(w) : "";
    if (txt == NULL || *txt == '\0')
        txt = comm != NULL ? tutti_comm_last_error(comm) : tutti_last_error();
    if (txt == NULL || *txt == '\0')
        txt = tutti_last_error();
    fail_msg("%s failed: %s (%s); the job stops here", what, tutti_strerror(st), txt);
}

/* Held-out evaluation, a shard per rank, summed over ranks: out = {loss sum, hits, count}. */
static int evaluate(mlp_t *m, const dataset_t *test, int rank, int size, tutti_comm_t *comm,
                    double sums[5], int report)
{
    int lo = (int)((long long)test->n * rank / size), hi = (int)((long long)test->n * (rank + 1) / size);
    double loss = 0.0, hits = 0.0;
    for (int i = lo; i < hi; i += m->max_rows) {
        int rows = hi - i < m->max_rows ? hi - i : m->max_rows, c = 0;
        loss += mlp_forward(m, test->x + (size_t)i * test->dim, test->y + i, rows, &c);
        hits += c;
    }
    sums[2] += loss;
    sums[3] += hits;
    sums[4] += hi - lo;
    tutti_status_t st = tutti_allreduce(sums, sums, 5, TUTTI_FLOAT64, TUTTI_SUM, comm, NULL);
    if (st != TUTTI_OK) {
        if (report)
            report_tutti(comm, NULL, st, "allreduce of the evaluation sums");
        return -1;
    }
    return 0;
}

static int save_params(const options_t *o, const mlp_t *m, int rank)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", o->save_params, rank);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(m->master, sizeof(float), m->nparams, f) != m->nparams ||
        fclose(f) != 0) {
        fail_msg("cannot write the parameters to %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Relative L2 distance ||w - ref|| / ||ref|| to a file written by --save-params. */
static int ref_distance(const char *path, const mlp_t *m, double *dist)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fail_msg("cannot open --ref-params %s: %s", path, strerror(errno));
        return -1;
    }
    double num = 0.0, den = 0.0;
    size_t n = 0;
    float buf[4096];
    size_t got;
    while ((got = fread(buf, sizeof(float), 4096, f)) > 0) {
        for (size_t i = 0; i < got && n + i < m->nparams; i++) {
            double d = (double)m->master[n + i] - buf[i];
            num += d * d;
            den += (double)buf[i] * buf[i];
        }
        n += got;
    }
    fclose(f);
    if (n != m->nparams) {
        fail_msg("--ref-params %s holds %zu floats, this model has %zu: not the same model", path,
                 n, m->nparams);
        return -1;
    }
    *dist = den > 0.0 ? sqrt(num / den) : sqrt(num);
    return 0;
}

/* shard is rank's rows of a global batch of b over size ranks: [*lo, *lo + rows). */
static int shard(int b, int rank, int size, int *lo)
{
    *lo = (int)((long long)b * rank / size);
    return (int)((long long)b * (rank + 1) / size) - *lo;
}

/* Where this rank stands: its rank, the ranks, and its shard of a global batch of `batch`. */
typedef struct place {
    int rank, size, first, local;
} place_t;

/*
 * recover, after a collective failed on *comm (--elastic): every bucket's allreduce is let go,
 * the survivors shrink the communicator, and all take the new rank 0's parameters, momentum
 * and step (*step: this rank's step to go on from, in and out), so that a survivor that
 * finished one more step than another does not drift from it; *pl gets this rank's new place
 * and shard. Returns 0, or -1 after saying why.
 */
static int recover(tutti_comm_t **comm, ddp_t *ddp, mlp_t *m, int *step, int batch, place_t *pl)
{
    double t0 = now_s();
    for (int i = 0; i < ddp->nbuckets; i++) {
        if (ddp->buckets[i].work != NULL)
            (void)tutti_work_wait(ddp->buckets[i].work, 10.0); /* the failed ones end at once */
        tutti_work_free(ddp->buckets[i].work);
        ddp->buckets[i].work = NULL;
    }
    ddp->post_error = TUTTI_OK;
    ddp->post_s = 0.0;
    int old_size = tutti_comm_size(*comm);
    tutti_comm_t *nc = NULL;
    tutti_status_t st = tutti_comm_shrink(*comm, NULL, 0, &nc);
    if (st != TUTTI_OK) {
        fail_msg("--elastic: tutti_comm_shrink failed: %s (%s); the job stops here",
                 tutti_strerror(st), tutti_last_error());
        return -1;
    }
    tutti_comm_destroy(*comm); /* failed: returns at once */
    *comm = nc;
    ddp->comm = nc;
    rank_g = tutti_comm_rank(nc);
    int64_t at = *step;
    if ((st = tutti_broadcast(&at, 1, TUTTI_INT64, 0, nc, NULL)) == TUTTI_OK &&
        (st = tutti_broadcast(m->master, m->nparams, TUTTI_FLOAT32, 0, nc, NULL)) == TUTTI_OK)
        st = tutti_broadcast(m->momentum, m->nparams, TUTTI_FLOAT32, 0, nc, NULL);
    if (st != TUTTI_OK) {
        report_tutti(nc, NULL, st, "--elastic: the broadcast of rank 0's state");
        return -1;
    }
    mlp_refresh(m);
    *step = (int)at;
    pl->rank = tutti_comm_rank(nc);
    pl->size = tutti_comm_size(nc);
    pl->local = shard(batch, pl->rank, pl->size, &pl->first);
    m->batch = pl->local;
    if (rank_g == 0)
        printf("elastic: %d of %d ranks left; going on from step %d (recovery took %.3f s)\n",
               tutti_comm_size(nc), old_size, *step + 1, now_s() - t0);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    options_t o;
    int pr = parse_args(argc, argv, &o);
    if (pr != 0)
        return pr == 1 ? 0 : 2;

    gemm_variant_t gv;
    const char *why = NULL;
    if (gemm_variant_parse(o.gemm, &gv, &why) != 0) {
        if (launcher_rank() == 0)
            fprintf(stderr, "train_bf16: --gemm %s: %s\n", o.gemm, why);
        return 2;
    }

    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    rank_g = launcher_rank();
    if (st != TUTTI_OK) {
        fail_msg("cannot create the communicator: %s (%s)", tutti_strerror(st), tutti_last_error());
        return 1;
    }
    place_t pl = {.rank = tutti_comm_rank(comm), .size = tutti_comm_size(comm)};
    const int launch_rank = pl.rank;
    rank_g = pl.rank;
    int rc = 1;
    mlp_t *model = NULL;
    dataset_t train = {0}, test = {0};
    ddp_t ddp = {0};
    int *perm = NULL, *ybuf = NULL;
    bf16_t *xbuf = NULL;

    /* DistributedSampler would pad or drop to split a batch; we refuse, so that a W-rank run
     * sees exactly the samples of the 1-rank run with the same global batch. */
    if (o.batch % pl.size != 0 && !o.elastic) {
        if (pl.rank == 0)
            fail_msg("--batch %d is not a multiple of the %d ranks: every rank takes batch / ranks "
                     "samples of each global batch; choose a multiple of %d",
                     o.batch, pl.size, pl.size);
        rc = 2;
        goto out;
    }
    pl.local = shard(o.batch, pl.rank, pl.size, &pl.first);
    int steps_per_epoch = o.train_size / o.batch;

    if (dataset_make(&train, o.seed, o.dim, o.classes, o.clusters, (float)o.sigma, 0,
                     o.train_size) != 0 ||
        dataset_make(&test, o.seed, o.dim, o.classes, o.clusters, (float)o.sigma, 1ull << 40,
                     o.test_size) != 0) {
        fail_msg("out of memory for the data set");
        goto out;
    }
    /* Each rank initializes on its own seed, as separate processes would; the broadcast from
     * rank 0 is what makes them equal (rank 0's initial weights are those of a 1-rank run). */
    uint64_t init_seed = o.seed + 0x51ed2701ull * (uint64_t)pl.rank;
    /* An elastic job's shard grows as ranks die: room for the whole batch. */
    int rows_max = o.elastic ? o.batch : pl.local;
    model = mlp_create(o.dim, o.hidden, o.layers, o.classes, rows_max, o.eval_rows, init_seed, gv);
    perm = malloc((size_t)o.train_size * sizeof *perm);
    xbuf = malloc((size_t)rows_max * o.dim * sizeof *xbuf);
    ybuf = malloc((size_t)rows_max * sizeof *ybuf);
    if (model == NULL || perm == NULL || xbuf == NULL || ybuf == NULL) {
        fail_msg("out of memory for the model (hidden %d, %d layers, batch %d)", o.hidden,
                 o.layers, pl.local);
        goto out;
    }
    st = tutti_broadcast(model->master, model->nparams, TUTTI_FLOAT32, 0, comm, NULL);
    if (st != TUTTI_OK) {
        report_tutti(comm, NULL, st, "broadcast of the initial parameters");
        goto out;
    }
    mlp_refresh(model);
    model->batch = pl.local;

    ddp.comm = comm;
    ddp.model = model;
    ddp.post_error = TUTTI_OK;
    if (make_buckets(&ddp, o.bucket_kb * 1024.0) != 0) {
        fail_msg("out of memory");
        goto out;
    }

    if (pl.rank == 0) {
        printf("train_bf16: %d rank%s, global batch %d (%d per rank), model %d", pl.size,
               pl.size == 1 ? "" : "s", o.batch, pl.local, o.dim);
        for (int l = 0; l < o.layers; l++)
            printf("-%d", o.hidden);
        printf("-%d (%zu parameters), gemm %s, %d gradient bucket%s (", o.classes, model->nparams,
               gemm_variant_name(gv), ddp.nbuckets, ddp.nbuckets == 1 ? "" : "s");
        for (int i = 0; i < ddp.nbuckets; i++)
            printf("%s%.1f KiB", i ? ", " : "", (double)ddp.buckets[i].count * 2 / 1024.0);
        printf("), %d steps of %d per epoch, %d training / %d held-out samples, seed %" PRIu64
               "%s\n",
               o.steps, steps_per_epoch, o.train_size, o.test_size, o.seed,
               o.elastic ? ", elastic" : "");
    }

    double train_s = 0.0, comm_s = 0.0, exposed_s = 0.0, epoch_t0 = now_s();
    double sums[5] = {0}, train_loss = 0.0, train_rows = 0.0;
    int epoch = 0, perm_epoch = -1;
    for (int step = 0; step < o.steps; step++) {
        for (int i = 0; i < o.ndie; i++)
            if (launch_rank == o.die_rank[i] && step == o.die_step[i]) {
                fflush(stdout);
                kill(getpid(), SIGKILL);
            }
        int in_epoch = step % steps_per_epoch;
        epoch = step / steps_per_epoch;
        if (perm_epoch != epoch) {
            perm_epoch = epoch;
            /* The same sample order on every rank, from (seed, epoch): Fisher-Yates. */
            uint64_t s = o.seed * 0x2545f4914f6cdd1dull + (uint64_t)epoch + 1;
            for (int i = 0; i < o.train_size; i++)
                perm[i] = i;
            for (int i = o.train_size - 1; i > 0; i--) {
                int j = (int)(splitmix64(&s) % (uint64_t)(i + 1));
                int t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        const int *idx = perm + (size_t)in_epoch * o.batch + (size_t)pl.first;
        for (int i = 0; i < pl.local; i++) {
            memcpy(xbuf + (size_t)i * o.dim, train.x + (size_t)idx[i] * o.dim,
                   (size_t)o.dim * sizeof *xbuf);
            ybuf[i] = train.y[idx[i]];
        }

        double t0 = now_s();
        train_loss += mlp_forward(model, xbuf, ybuf, pl.local, NULL);
        train_rows += pl.local;
        ddp.step = step;
        /* The mean over this shard, weighted by its share of the batch: TUTTI_AVG over the
         * ranks then gives the batch's mean, whatever the shards' sizes. */
        mlp_backward(model, ybuf, (float)((double)pl.local * pl.size / o.batch), post_bucket,
                     &ddp);
        double t_bwd = now_s();
        int failed = ddp.post_error != TUTTI_OK;
        for (int i = 0; i < ddp.nbuckets && !failed && o.elastic; i++)
            failed = tutti_work_wait(ddp.buckets[i].work, -1.0) != TUTTI_OK;
        if (failed && o.elastic) {
            int at = step;
            if (recover(&comm, &ddp, model, &at, o.batch, &pl) != 0)
                goto out;
            train_loss = train_rows = 0.0;
            step = at - 1; /* the loop's step++ goes to at */
            continue;
        }
        if (ddp.post_error != TUTTI_OK) {
            char what[128];
            snprintf(what, sizeof what, "posting the allreduce of gradient bucket %d at step %d",
                     ddp.post_error_bucket, step);
            report_tutti(comm, ddp.buckets[ddp.post_error_bucket].work, ddp.post_error, what);
            goto out;
        }
        for (int i = 0; i < ddp.nbuckets; i++) {
            bucket_t *b = &ddp.buckets[i];
            st = tutti_work_wait(b->work, -1.0);
            if (st != TUTTI_OK) {
                char what[128];
                snprintf(what, sizeof what, "allreduce of gradient bucket %d (%zu bf16) at step %d",
                         i, b->count, step);
                report_tutti(comm, b->work, st, what);
                goto out;
            }
        }
        double t_wait = now_s();
        /* Communication time: the union of the buckets' [post, done] intervals (they run in
         * post order, one after the other). Exposed: what the wait above cost. */
        double end = 0.0;
        for (int i = 0; i < ddp.nbuckets; i++) {
            bucket_t *b = &ddp.buckets[i];
            double done;
            __atomic_load(&b->t_done, &done, __ATOMIC_ACQUIRE);
            if (done <= 0.0)
                done = t_wait; /* the callback has not run yet: at the latest now */
            double s0 = b->t_post > end ? b->t_post : end;
            if (done > s0)
                comm_s += done - s0;
            end = done > end ? done : end;
            tutti_work_free(b->work);
            b->work = NULL;
        }
        /* A post of up to TUTTI_INLINE_MAX bytes on an idle communicator runs in this thread:
         * the time inside the posts is exposed as much as the wait. */
        exposed_s += t_wait - t_bwd + ddp.post_s;
        ddp.post_s = 0.0;
        mlp_sgd_step(model, (float)o.lr, (float)o.momentum);
        train_s += now_s() - t0;

        int last = step == o.steps - 1;
        if (in_epoch == steps_per_epoch - 1 || last) {
            sums[0] = train_loss;
            sums[1] = train_rows;
            sums[2] = sums[3] = sums[4] = 0.0;
            if (evaluate(model, &test, pl.rank, pl.size, comm, sums, !o.elastic) != 0) {
                if (!o.elastic)
                    goto out;
                int at = step + 1; /* this step is done: its evaluation is what is lost */
                if (recover(&comm, &ddp, model, &at, o.batch, &pl) != 0)
                    goto out;
                train_loss = train_rows = 0.0;
                if (at >= o.steps) { /* the last evaluation again, on the ranks left */
                    sums[0] = sums[1] = sums[2] = sums[3] = sums[4] = 0.0;
                    sums[1] = 1.0;
                    if (evaluate(model, &test, pl.rank, pl.size, comm, sums, 1) != 0)
                        goto out;
                }
                step = at - 1;
                continue;
            }
            if (pl.rank == 0)
                printf("epoch %d: step %d train_loss=%.4f heldout_loss=%.4f heldout_accuracy=%.4f "
                       "time=%.2fs\n",
                       epoch + 1, step + 1, sums[0] / sums[1], sums[2] / sums[4],
                       sums[3] / sums[4], now_s() - epoch_t0);
            train_loss = train_rows = 0.0;
            epoch_t0 = now_s();
        }
    }

    if (o.param_hash) {
        int64_t h = (int64_t)mlp_hash(model);
        int64_t *all = calloc((size_t)pl.size, sizeof *all);
        if (all == NULL) {
            fail_msg("out of memory");
            goto out;
        }
        st = tutti_allgather(&h, all, 1, TUTTI_INT64, comm, NULL);
        if (st != TUTTI_OK) {
            free(all);
            report_tutti(comm, NULL, st, "allgather of the parameter hashes");
            goto out;
        }
        int same = 1;
        for (int r = 0; r < pl.size; r++)
            same &= all[r] == all[0];
        if (pl.rank == 0) {
            for (int r = 0; r < pl.size; r++)
                printf("param_hash: rank %d %016" PRIx64 "\n", r, (uint64_t)all[r]);
            if (!same)
                fail_msg("the ranks' final parameters differ (hashes above): data parallelism "
                         "broke");
        }
        free(all);
        if (!same)
            goto out;
    }
    if (o.save_params != NULL && save_params(&o, model, pl.rank) != 0)
        goto out;
    if (o.ref_params != NULL && pl.rank == 0) {
        double dist;
        if (ref_distance(o.ref_params, model, &dist) != 0)
            goto out;
        printf("param_distance: %.6g (relative L2 to %s)\n", dist, o.ref_params);
    }
    if (pl.rank == 0) {
        /* The 1-rank job has nothing to reduce: comm_s is the cost of tutti's self copy. */
        double overlap = comm_s > 0.0 ? 1.0 - exposed_s / comm_s : 0.0;
        overlap = overlap < 0.0 ? 0.0 : overlap;
        printf("final: loss=%.6f accuracy=%.6f samples_per_s=%.1f comm_s=%.6f overlap=%.4f\n",
               sums[2] / sums[4], sums[3] / sums[4], (double)o.steps * o.batch / train_s, comm_s,
               overlap);
    }
    rc = 0;
out:
    if (rc != 0 && comm != NULL)
        tutti_comm_abort(comm);
    for (int i = 0; i < ddp.nbuckets; i++)
        tutti_work_free(ddp.buckets[i].work);
    if (comm != NULL) {
        st = tutti_comm_destroy(comm);
        if (st != TUTTI_OK && rc == 0) {
            fail_msg("tutti_comm_destroy: %s (%s)", tutti_strerror(st), tutti_last_error());
            rc = 1;
        }
    }
    free(ddp.buckets);
    free(perm);
    free(xbuf);
    free(ybuf);
    dataset_free(&train);
    dataset_free(&test);
    mlp_destroy(model);
    return rc;
}
