/* coll_matrix.c: the case matrix of the collectives tests and the runner that walks it (see
 * coll_matrix.h). The walk is the order of the one binary these tests were before: allreduce,
 * reduce_scatter, reduce, allgather(v), alltoall(v), bcast, barrier, send/recv, several in flight,
 * several MiB. A family's binary runs its own cases and walks the others "dry": it sets their
 * algorithms and counts their cases and calls without making them, so that every case keeps its
 * number (which seeds its data, its root, its buffer layout at large sizes and whether it blocks)
 * and the algorithms in force are those of the one-binary walk. */
#include "coll_matrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const cm_algo_names[TUTTI_COLL_COUNT][4] = {
    [TUTTI_COLL_ALLREDUCE] = {"ring", "tree", "direct", NULL},
    [TUTTI_COLL_ALLGATHER] = {"ring", "direct", NULL},
    [TUTTI_COLL_ALLTOALL] = {"pairwise", "direct", NULL},
    [TUTTI_COLL_REDUCE_SCATTER] = {"ring", "direct", NULL},
    [TUTTI_COLL_BCAST] = {"tree", "direct", NULL},
    [TUTTI_COLL_REDUCE] = {"tree", "direct", NULL},
    [TUTTI_COLL_BARRIER] = {"dissemination", "direct", NULL},
};
static const char *const coll_name[TUTTI_COLL_COUNT] = {
    "allreduce", "allgather", "alltoall", "reduce_scatter", "bcast", "reduce", "barrier",
};

static const size_t red_sizes[] = {0, 1, 7, 1031, 65537};
static const size_t blk_sizes[] = {0, 1, 7, 1031, 8209}; /* per rank or per peer */
#define NSIZES 5

/* ---- algorithm selection ---------------------------------------------------------------------- */

bool cm_names_all(const char *text, tutti_coll_t coll, bool skip_direct)
{
    for (int k = 0; cm_algo_names[coll][k]; k++) {
        if (skip_direct && strcmp(cm_algo_names[coll][k], "direct") == 0)
            continue;
        if (text == NULL || strstr(text, cm_algo_names[coll][k]) == NULL)
            return false;
    }
    return true;
}

int cm_use_algo(ctx_t *c, tutti_coll_t coll, const char *name)
{
    const char *prev = tutti_comm_algorithm(c->comm, coll, 64);
    char prevbuf[64];
    snprintf(prevbuf, sizeof prevbuf, "%s", prev ? prev : "(NULL)");
    c->algo = name;
    cr_describe(c, coll_name[coll], TUTTI_INT8, -1, 0, -1, "tutti_comm_set_algorithm");
    tutti_status_t st = tutti_comm_set_algorithm(c->comm, coll, name);
    bool direct = strcmp(name, "direct") == 0;
    if (direct && c->ofi) {
        if (st == TUTTI_OK && c->size == 1)
            goto set; /* one rank needs no transport, so a window may well exist */
        if (st != TUTTI_ERR_INVALID_ARG) {
            cr_report(c, "\"direct\" on transport ofi: expected TUTTI_ERR_INVALID_ARG, got %d (%s)", st,
                      tutti_strerror(st));
            return -1;
        }
        const char *now = tutti_comm_algorithm(c->comm, coll, 64);
        if (now == NULL || strcmp(now, prevbuf) != 0)
            cr_report(c, "after the refused \"direct\" the algorithm changed from %s to %s", prevbuf,
                      now ? now : "(NULL)");
        if (tutti_comm_last_error(c->comm)[0] == '\0')
            cr_report(c, "refused \"direct\" but tutti_comm_last_error is empty");
        return 0;
    }
    if (st != TUTTI_OK) {
        cr_report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
        return -1;
    }
set:;
    static const size_t probe[] = {0, 8, 100, 65536, 1u << 30};
    for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
        const char *a = tutti_comm_algorithm(c->comm, coll, probe[k]);
        if (a == NULL || strcmp(a, name) != 0) {
            cr_report(c, "tutti_comm_algorithm(%zu bytes) = %s after setting %s", probe[k],
                      a ? a : "(NULL)", name);
            return -1;
        }
    }
    return 1;
}

/* The kind of case that stands for a collective. */
static const cm_kind_t kind_of[TUTTI_COLL_COUNT] = {
    [TUTTI_COLL_ALLREDUCE] = CM_ALLREDUCE, [TUTTI_COLL_ALLGATHER] = CM_ALLGATHER,
    [TUTTI_COLL_ALLTOALL] = CM_ALLTOALL,   [TUTTI_COLL_REDUCE_SCATTER] = CM_REDUCE_SCATTER,
    [TUTTI_COLL_BCAST] = CM_BCAST,         [TUTTI_COLL_REDUCE] = CM_REDUCE,
    [TUTTI_COLL_BARRIER] = CM_BARRIER,
};

/* check_unknown_algo: an unknown name is refused for each of the family's collectives, with a
 * text that lists the valid ones, and changes nothing. */
static void check_unknown_algo(ctx_t *c, const cm_family_t *f)
{
    for (int coll = 0; coll < TUTTI_COLL_COUNT; coll++) {
        if (f->body[kind_of[coll]] == NULL)
            continue;
        c->algo = "bogus";
        cr_describe(c, coll_name[coll], TUTTI_INT8, -1, 0, -1, "set_algorithm(\"bogus\")");
        const char *before = tutti_comm_algorithm(c->comm, (tutti_coll_t)coll, 64);
        char prev[64];
        snprintf(prev, sizeof prev, "%s", before ? before : "(NULL)");
        tutti_status_t st = tutti_comm_set_algorithm(c->comm, (tutti_coll_t)coll, "bogus");
        if (st != TUTTI_ERR_INVALID_ARG) {
            cr_report(c, "expected TUTTI_ERR_INVALID_ARG, got %d (%s)", st, tutti_strerror(st));
            continue;
        }
        const char *msg = tutti_comm_last_error(c->comm);
        if (!cm_names_all(msg, (tutti_coll_t)coll, true))
            cr_report(c, "the error text does not list the valid names: \"%s\"", msg);
        const char *after = tutti_comm_algorithm(c->comm, (tutti_coll_t)coll, 64);
        if (after == NULL || strcmp(after, prev) != 0)
            cr_report(c, "the failed call changed the algorithm from %s to %s", prev,
                      after ? after : "(NULL)");
        st = tutti_comm_set_algorithm(c->comm, (tutti_coll_t)coll, "ring:0-100;bogus:101-max");
        if (st != TUTTI_ERR_INVALID_ARG)
            cr_report(c, "\"ring:0-100;bogus:101-max\": expected TUTTI_ERR_INVALID_ARG, got %d", st);
    }
    c->algo = NULL;
}

/* ---- budget ------------------------------------------------------------------------------------ */

/* want keeps the run within minutes on two cores: every small case everywhere; large ones with
 * fewer ops and layouts, and at 8 ranks (which oversubscribe the cores) fewer dtypes. */
static bool want(ctx_t *c, size_t n, int mode, tutti_dtype_t dt, int op)
{
    int rot = 1 + (int)(((unsigned)dt + (unsigned)(op < 0 ? 0 : op) + c->ncase / 7) % (M_COUNT - 1));
    if (n > 1031) {
        if (op >= 0 && op != TUTTI_SUM && op != TUTTI_AVG && op != TUTTI_MAX && op != TUTTI_BXOR)
            return false;
        if (c->size >= 8 && op >= 0 && dt != TUTTI_FLOAT32 && dt != TUTTI_BFLOAT16 &&
            dt != TUTTI_INT8)
            return false;
        return mode == M_OOP || mode == rot;
    }
    return true;
}

static int check_getters(ctx_t *c)
{
    int bad = 0;
    cr_describe(c, "getters", TUTTI_INT8, -1, 0, -1, NULL);
    if (tutti_comm_rank(c->comm) != c->rank)
        cr_report(c, "tutti_comm_rank = %d", tutti_comm_rank(c->comm)), bad = 1;
    if (tutti_comm_size(c->comm) != c->size)
        cr_report(c, "tutti_comm_size = %d", tutti_comm_size(c->comm)), bad = 1;
    if (tutti_comm_local_rank(c->comm) != c->rank)
        cr_report(c, "tutti_comm_local_rank = %d (one node)", tutti_comm_local_rank(c->comm)), bad = 1;
    if (tutti_comm_local_size(c->comm) != c->size)
        cr_report(c, "tutti_comm_local_size = %d (one node)", tutti_comm_local_size(c->comm)), bad = 1;
    if (tutti_comm_node_count(c->comm) != 1)
        cr_report(c, "tutti_comm_node_count = %d (one node)", tutti_comm_node_count(c->comm)), bad = 1;
    if (tutti_comm_seq(c->comm) != 0)
        cr_report(c, "tutti_comm_seq = %llu on a new communicator",
                  (unsigned long long)tutti_comm_seq(c->comm)), bad = 1;
    for (int p = 0; p < c->size; p++) {
        const char *t = tutti_comm_transport(c->comm, p);
        const char *want_t = p == c->rank ? "self" : c->tp;
        if (t == NULL || strcmp(t, want_t) != 0)
            cr_report(c, "tutti_comm_transport(peer %d) = %s, expected %s", p, t ? t : "(NULL)",
                      want_t), bad = 1;
    }
    if (tutti_comm_transport(c->comm, -1) != NULL || tutti_comm_transport(c->comm, c->size) != NULL)
        cr_report(c, "tutti_comm_transport of an out-of-range peer is not NULL"), bad = 1;
    if (tutti_comm_last_error(c->comm) == NULL || tutti_comm_last_error(c->comm)[0] != '\0')
        cr_report(c, "tutti_comm_last_error on a new communicator is \"%s\"",
               tutti_comm_last_error(c->comm) ? tutti_comm_last_error(c->comm) : "(NULL)"), bad = 1;
    return bad;
}

/* ---- the walk -------------------------------------------------------------------------------- */

/* The family this binary runs (set before the ranks fork). */
static const cm_family_t *fam;

/* stage_dry: the walk is in a stage none of whose kinds this binary runs. */
static bool stage_dry(cm_kind_t a, cm_kind_t b)
{
    return fam->body[a] == NULL && fam->body[b] == NULL;
}

/* run_case runs one case, or only counts its calls when it belongs to another binary. */
static void run_case(ctx_t *c, cm_kind_t kind, const cm_case_t *k, unsigned long calls)
{
    if (fam->body[kind] != NULL)
        fam->body[kind](c, k);
    else
        c->nrun += calls;
}

/* use_nth_algo sets coll's a-th algorithm: true if it is in use now; false if it does not apply
 * here, or failed (which ends the walk). */
static bool use_nth_algo(ctx_t *c, tutti_coll_t coll, int a)
{
    int u = cm_use_algo(c, coll, cm_algo_names[coll][a]);
    if (u < 0)
        c->fatal = true;
    return u > 0;
}

static void run_reductions(ctx_t *c, tutti_coll_t coll)
{
    cm_kind_t kind = kind_of[coll];
    c->dry = stage_dry(kind, kind);
    for (int a = 0; cm_algo_names[coll][a] && !c->fatal; a++) {
        if (!use_nth_algo(c, coll, a))
            continue;
        for (int d = 0; d < CR_NDT && !c->fatal; d++) {
            tutti_dtype_t dt = cr_all_dtypes[d];
            size_t es = tutti_dtype_size(dt);
            for (int op = 0; op < TUTTI_OP_COUNT && !c->fatal; op++) {
                if (!cr_op_ok((tutti_op_t)op, dt))
                    continue;
                for (int s = 0; s < NSIZES && !c->fatal; s++) {
                    size_t n = coll == TUTTI_COLL_REDUCE_SCATTER ? blk_sizes[s] : red_sizes[s];
                    for (int m = 0; m < M_COUNT && !c->fatal; m++) {
                        if (cr_mode_skip(m, es, n))
                            continue;
                        if (coll == TUTTI_COLL_REDUCE_SCATTER && m == M_SAME)
                            continue; /* in place for reduce_scatter is TUTTI_IN_PLACE only */
                        c->ncase++;
                        if (!want(c, n, m, dt, op))
                            continue;
                        cm_case_t k = {.dt = dt, .op = op, .n = n, .mode = m};
                        if (coll == TUTTI_COLL_REDUCE)
                            k.root = (int)(c->ncase % (unsigned)c->size);
                        run_case(c, kind, &k, 1);
                    }
                }
            }
        }
    }
    c->algo = NULL;
    c->dry = false;
}

static void run_moves(ctx_t *c, tutti_coll_t coll)
{
    static const int bmodes[] = {M_OOP, M_INPLACE, M_OFF_ELEM, M_OFF_BYTE}; /* allgather */
    static const int amodes[] = {M_OOP, M_SAME, M_OFF_ELEM, M_OFF_BYTE};    /* alltoall */
    static const int cmodes[] = {M_OOP, M_OFF_ELEM, M_OFF_BYTE};            /* bcast */
    cm_kind_t kind = kind_of[coll];
    cm_kind_t vkind = coll == TUTTI_COLL_ALLGATHER  ? CM_ALLGATHERV
                      : coll == TUTTI_COLL_ALLTOALL ? CM_ALLTOALLV
                                                    : kind;
    c->dry = stage_dry(kind, vkind);
    for (int a = 0; cm_algo_names[coll][a] && !c->fatal; a++) {
        if (!use_nth_algo(c, coll, a))
            continue;
        for (int d = 0; d < CR_NMDT && !c->fatal; d++) {
            tutti_dtype_t dt = cr_move_dtypes[d];
            size_t es = tutti_dtype_size(dt);
            for (int s = 0; s < NSIZES && !c->fatal; s++) {
                size_t n = coll == TUTTI_COLL_BCAST ? red_sizes[s] : blk_sizes[s];
                const int *modes = coll == TUTTI_COLL_ALLGATHER ? bmodes
                                   : coll == TUTTI_COLL_ALLTOALL ? amodes : cmodes;
                int nm = coll == TUTTI_COLL_BCAST ? 3 : 4;
                for (int j = 0; j < nm && !c->fatal; j++) {
                    int m = modes[j];
                    if (cr_mode_skip(m, es, n))
                        continue;
                    c->ncase++;
                    if (!want(c, n, m, dt, -1))
                        continue;
                    cm_case_t k = {.dt = dt, .op = -1, .n = n, .mode = m};
                    if (coll != TUTTI_COLL_BCAST) {
                        run_case(c, kind, &k, 1);
                    } else if (n <= 7) { /* every root for small messages */
                        for (k.root = 0; k.root < c->size && !c->fatal; k.root++)
                            run_case(c, kind, &k, 1);
                    } else { /* one root in turn for the rest */
                        k.root = (int)(c->ncase % (unsigned)c->size);
                        run_case(c, kind, &k, 1);
                    }
                }
            }
        }
        /* the v-variants go through the same algorithm setting */
        static const size_t mults[] = {1, 613};
        for (int base = 0; base < 5 && !c->fatal; base++)
            for (int mi = 0; mi < 2 && !c->fatal; mi++)
                for (int packed = 0; packed < 2 && !c->fatal; packed++)
                    for (int ip = 0; ip < 2 && !c->fatal; ip++) {
                        c->ncase++;
                        if (c->size >= 8 && mults[mi] > 1 && base % 2)
                            continue;
                        if (vkind == kind)
                            continue; /* bcast has no v-variant */
                        cm_case_t k = {
                            .dt = (base + ip) % 2 ? TUTTI_FLOAT64 : TUTTI_INT8,
                            .op = -1,
                            .mode = !ip ? M_OOP : coll == TUTTI_COLL_ALLGATHER ? M_INPLACE : M_SAME,
                            .base = base,
                            .mult = mults[mi],
                            .packed = packed != 0,
                        };
                        run_case(c, vkind, &k, 1);
                    }
    }
    c->algo = NULL;
    c->dry = false;
}

static void run_barrier(ctx_t *c)
{
    c->dry = stage_dry(CM_BARRIER, CM_BARRIER);
    for (int a = 0; cm_algo_names[TUTTI_COLL_BARRIER][a] && !c->fatal; a++) {
        if (!use_nth_algo(c, TUTTI_COLL_BARRIER, a))
            continue;
        cm_case_t k = {.dt = TUTTI_INT8, .op = -1, .mode = -1};
        for (int r = 0; r < 4 && !c->fatal; r++)
            run_case(c, CM_BARRIER, &k, 2);
    }
    c->algo = NULL;
    c->dry = false;
}

/* run_large: several MiB per rank, the sizes where the algorithms cut messages into segments. */
static void run_large(ctx_t *c)
{
    static const char *const ar[] = {"ring", "tree", "direct"};
    static const cm_case_t ark[] = {
        {.dt = TUTTI_INT8, .op = TUTTI_SUM, .n = (3u << 20) + 5u, .mode = M_OOP},
        {.dt = TUTTI_FLOAT32, .op = TUTTI_SUM, .n = 6u << 18, .mode = M_INPLACE},
        {.dt = TUTTI_BFLOAT16, .op = TUTTI_AVG, .n = (1u << 20) + 3u, .mode = M_OFF_BYTE},
    };
    c->dry = stage_dry(CM_ALLREDUCE, CM_ALLREDUCE);
    for (int a = 0; a < 3 && !c->fatal; a++) {
        if (cm_use_algo(c, TUTTI_COLL_ALLREDUCE, ar[a]) <= 0)
            continue;
        for (int j = 0; j < 3 && !c->fatal; j++) {
            c->ncase++;
            run_case(c, CM_ALLREDUCE, &ark[j], 1);
        }
    }
    static const char *const ag[] = {"ring", "direct"};
    static const cm_case_t agk = {.dt = TUTTI_INT8, .op = -1, .n = 1u << 20, .mode = M_OOP};
    c->dry = stage_dry(CM_ALLGATHER, CM_ALLGATHER);
    for (int a = 0; a < 2 && !c->fatal; a++) {
        if (cm_use_algo(c, TUTTI_COLL_ALLGATHER, ag[a]) <= 0)
            continue;
        c->ncase++;
        run_case(c, CM_ALLGATHER, &agk, 1);
    }
    c->algo = NULL;
    c->dry = false;
}

/* ---- the rank body --------------------------------------------------------------------------- */

typedef struct mcfg {
    const char *tp;
    int nranks;
    bool large;
    double timeout; /* tcase timeout; the harness gets a little less */
} mcfg_t;

static const mcfg_t matrix[] = {
    {"shm", 1, false, 60},  {"shm", 2, true, 90},  {"shm", 3, true, 90},  {"shm", 4, false, 90},
    {"shm", 8, false, 120}, {"ofi", 1, false, 60}, {"ofi", 2, true, 90},  {"ofi", 3, true, 120},
    {"ofi", 4, false, 120}, {"ofi", 8, false, 150},
};
#define NMATRIX ((int)(sizeof matrix / sizeof matrix[0]))

static int matrix_rank(int rank, int size, void *arg)
{
    const mcfg_t *cfg = arg;
    ctx_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = size;
    c.tp = cfg->tp;
    c.ofi = strcmp(cfg->tp, "ofi") == 0;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &c.comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    double t_init = th_now() - t0;
    check_getters(&c);
    check_unknown_algo(&c, fam);
    run_reductions(&c, TUTTI_COLL_ALLREDUCE);
    run_reductions(&c, TUTTI_COLL_REDUCE_SCATTER);
    run_reductions(&c, TUTTI_COLL_REDUCE);
    run_moves(&c, TUTTI_COLL_ALLGATHER);
    run_moves(&c, TUTTI_COLL_ALLTOALL);
    run_moves(&c, TUTTI_COLL_BCAST);
    if (!c.fatal)
        run_barrier(&c);
    if (!c.fatal && fam->body[CM_P2P] != NULL)
        fam->body[CM_P2P](&c, NULL);
    if (!c.fatal) {
        c.ncase++;
        if (fam->body[CM_PIPELINED] != NULL)
            fam->body[CM_PIPELINED](&c, NULL);
    }
    if (!c.fatal && cfg->large)
        run_large(&c);
    double t2 = th_now();
    st = tutti_comm_destroy(c.comm);
    if (st != TUTTI_OK && !c.fatal)
        cr_report(&c, "tutti_comm_destroy returned %d (%s): %s", st, tutti_strerror(st),
                  tutti_last_error());
    if (tutti_comm_rank(c.comm) != -1 || tutti_comm_size(c.comm) != -1)
        cr_report(&c, "getters on a destroyed communicator do not return -1");
    if (rank == 0)
        fprintf(stderr, "[%s %s x %d] %lu calls (cases of every family: %lu): init %.2f s, "
                "all %.2f s, destroy %.2f s\n",
                fam->name, cfg->tp, size, c.ncalls, c.ncase, t_init, t2 - t0, th_now() - t2);
    return c.errors ? 1 : 0;
}

START_TEST(test_matrix)
{
    const mcfg_t *cfg = &matrix[_i];
    int rc = th_run(cfg->nranks, cfg->tp, cfg->timeout - 5, matrix_rank, (void *)cfg);
    ck_assert_msg(rc == 0, "%s on %s with %d ranks failed (details on stderr)", fam->name, cfg->tp,
                  cfg->nranks);
}
END_TEST

Suite *cm_suite(const cm_family_t *f)
{
    fam = f;
    Suite *s = suite_create(f->name);
    static char names[NMATRIX][32]; /* Check keeps the pointer, not a copy */
    for (int i = 0; i < NMATRIX; i++) {
        snprintf(names[i], sizeof names[i], "%s_%d", matrix[i].tp, matrix[i].nranks);
        TCase *tc = tcase_create(names[i]);
        tcase_set_timeout(tc, matrix[i].timeout);
        tcase_add_loop_test(tc, test_matrix, i, i + 1);
        suite_add_tcase(s, tc);
    }
    if (f->add_tcases != NULL)
        f->add_tcases(s);
    return s;
}
