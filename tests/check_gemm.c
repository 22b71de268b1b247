/* check_gemm.c: unit tests of the training example's bf16 GEMM (every variant this CPU runs,
 * against an fp64 reference) and of its MLP's gradients (against an fp64 reference checked by
 * finite differences).
 *
 * Tolerances. A gemm_bf16 output is a sum of k products of bf16 numbers; each product is exact in
 * fp32 (8 x 8 significant bits), so the only error is the fp32 accumulation: with k + 1 roundings
 * (k products and, accumulating, the initial C), in any order and with VDPBF16PS's pairing,
 * |C - exact| <= (k + 1) u (|C0| + sum |a b|), u = 2^-24 (the standard bound gamma_n ~ n u of
 * recursive summation). The reference is computed in fp64 from the same bf16 inputs, so it is
 * exact to far below that bound. A second test uses small integers, whose sums are exact in fp32
 * in any order: there every variant must match the reference bit for bit. */
#include <check.h>
#include "check_main.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "mlp.h"

static uint64_t rng_state = 12345;

static double urand(void) /* [-1, 1) */
{
    return (double)(splitmix64(&rng_state) >> 11) * 0x1.0p-52 - 1.0;
}

static bf16_t rand_bf16(int ints)
{
    if (ints)
        return bf16_from_f32((float)((int)(splitmix64(&rng_state) % 5) - 2));
    /* Magnitudes over several binades, both signs. */
    return bf16_from_f32((float)(urand() * 4.0));
}

/* One shape and layout: B given as k x n (trans 0) or n x k (trans 1), as bf16 or fp32. */
typedef struct gcase {
    int m, n, k;
} gcase_t;

static const gcase_t shapes[] = {
    {1, 1, 1}, {1, 17, 3}, {3, 5, 7}, {8, 16, 2}, {8, 32, 64}, {9, 17, 33}, {7, 31, 1},
    {13, 48, 64}, {16, 33, 128}, {17, 65, 255}, {31, 100, 513}, {64, 10, 512}, {2, 129, 9},
    /* Whole 16 x 16 AMX tiles and 32-k chunks, with and without a partial 2 x 2 tile block. */
    {32, 32, 32}, {48, 80, 96}, {33, 47, 97},
};

/* Run one variant on one shape and layout; fail with the worst element. */
static void check_one(gemm_variant_t v, gcase_t s, int trans, int from_f32, int accumulate,
                      int ints)
{
    int lda = s.k + 3, ldb = (trans ? s.k : s.n) + 2, ldc = s.n + 5;
    int brows = trans ? s.n : s.k;
    bf16_t *a = malloc(sizeof *a * (size_t)s.m * lda);
    bf16_t *b = malloc(sizeof *b * (size_t)brows * ldb);
    float *bf = malloc(sizeof *bf * (size_t)brows * ldb);
    float *c = malloc(sizeof *c * (size_t)s.m * ldc);
    double *ref = malloc(sizeof *ref * (size_t)s.m * s.n);
    double *mag = malloc(sizeof *mag * (size_t)s.m * s.n);
    ck_assert(a && b && bf && c && ref && mag);
    for (size_t i = 0; i < (size_t)s.m * lda; i++)
        a[i] = rand_bf16(ints);
    for (size_t i = 0; i < (size_t)brows * ldb; i++) {
        b[i] = rand_bf16(ints);
        bf[i] = bf16_to_f32(b[i]); /* already bf16 values: packing from fp32 is exact here */
    }
    /* C starts as a guard pattern (checked after in the columns past n) or, accumulating, as
     * bf16-valued numbers. */
    for (size_t i = 0; i < (size_t)s.m * ldc; i++)
        c[i] = accumulate ? bf16_to_f32(rand_bf16(ints)) : -12345.0f;
    for (int i = 0; i < s.m; i++)
        for (int j = 0; j < s.n; j++) {
            double r = accumulate ? (double)c[(size_t)i * ldc + j] : 0.0;
            double g = fabs(r);
            for (int kk = 0; kk < s.k; kk++) {
                double bv = bf16_to_f32(trans ? b[(size_t)j * ldb + kk] : b[(size_t)kk * ldb + j]);
                double p = (double)bf16_to_f32(a[(size_t)i * lda + kk]) * bv;
                r += p;
                g += fabs(p);
            }
            ref[(size_t)i * s.n + j] = r;
            mag[(size_t)i * s.n + j] = g;
        }
    gemm_packed_t p;
    ck_assert_int_eq(gemm_packed_alloc(&p, s.k, s.n), 0);
    if (from_f32)
        gemm_pack_f32(&p, bf, ldb, trans);
    else
        gemm_pack_bf16(&p, b, ldb, trans);
    gemm_bf16(v, s.m, a, lda, &p, c, ldc, accumulate);

    const double u = 0x1.0p-24;
    for (int i = 0; i < s.m; i++) {
        for (int j = 0; j < s.n; j++) {
            double got = c[(size_t)i * ldc + j], want = ref[(size_t)i * s.n + j];
            double tol = ints ? 0.0 : (s.k + 1) * u * mag[(size_t)i * s.n + j];
            ck_assert_msg(fabs(got - want) <= tol,
                          "%s m=%d n=%d k=%d trans=%d f32=%d acc=%d ints=%d: C[%d][%d] = %.9g, "
                          "reference %.9g, tolerance %.3g",
                          gemm_variant_name(v), s.m, s.n, s.k, trans, from_f32, accumulate, ints,
                          i, j, got, want, tol);
        }
        for (int j = s.n; j < ldc && !accumulate; j++)
            ck_assert_msg(c[(size_t)i * ldc + j] == -12345.0f,
                          "%s m=%d n=%d k=%d: wrote C[%d][%d], past the %d columns",
                          gemm_variant_name(v), s.m, s.n, s.k, i, j, s.n);
    }
    gemm_packed_free(&p);
    free(a);
    free(b);
    free(bf);
    free(c);
    free(ref);
    free(mag);
}

/* _i: the variant. Every shape, both B layouts, both packers, with and without accumulation. */
START_TEST(test_gemm_random)
{
    gemm_variant_t v = (gemm_variant_t)_i;
    if (!gemm_variant_available(v)) {
        fprintf(stderr, "check_gemm: %s not available on this CPU; skipped\n",
                gemm_variant_name(v));
        return;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 8; t++)
            check_one(v, shapes[s], t & 1, (t >> 1) & 1, (t >> 2) & 1, 0);
}
END_TEST

START_TEST(test_gemm_exact)
{
    gemm_variant_t v = (gemm_variant_t)_i;
    if (!gemm_variant_available(v)) {
        fprintf(stderr, "check_gemm: %s not available on this CPU; exact test skipped\n",
                gemm_variant_name(v));
        return;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 8; t++)
            check_one(v, shapes[s], t & 1, (t >> 1) & 1, (t >> 2) & 1, 1);
}
END_TEST

/* The CPU flags and the parser agree: "auto" is the best available (amx before avx512bf16
 * before scalar), a named variant parses exactly when it is available, an unknown name fails. */
START_TEST(test_variant_choice)
{
    gemm_variant_t v;
    const char *why = NULL;
    ck_assert_int_eq(gemm_variant_parse("auto", &v, &why), 0);
    ck_assert_int_eq(v, gemm_best_variant());
    ck_assert(gemm_variant_available(v));
    ck_assert_int_eq(gemm_variant_parse("scalar", &v, &why), 0);
    ck_assert_int_eq(v, GEMM_SCALAR);
    ck_assert_int_ne(gemm_variant_parse("avx1024", &v, &why), 0);
    ck_assert_ptr_nonnull(why);
    for (int i = GEMM_AVX512BF16; i < GEMM_VARIANT_COUNT; i++) {
        int has = gemm_variant_available((gemm_variant_t)i);
        why = NULL;
        int ok = gemm_variant_parse(gemm_variant_name((gemm_variant_t)i), &v, &why) == 0;
        ck_assert_int_eq(ok, has);
        if (ok)
            ck_assert_int_eq(v, i);
        else
            ck_assert_ptr_nonnull(why);
        fprintf(stderr, "check_gemm: %s %s on this CPU\n", gemm_variant_name((gemm_variant_t)i),
                has ? "available" : "not available");
    }
    gemm_variant_t best = gemm_variant_available(GEMM_AMX)          ? GEMM_AMX
                          : gemm_variant_available(GEMM_AVX512BF16) ? GEMM_AVX512BF16
                                                                    : GEMM_SCALAR;
    ck_assert_int_eq(gemm_best_variant(), best);
}
END_TEST

START_TEST(test_bf16_rounding)
{
    /* Ties go to even; the largest float rounds to infinity; NaN stays NaN; exact values stay. */
    ck_assert_uint_eq(bf16_from_f32(1.0f + 0x1.0p-8f), 0x3f80);
    ck_assert_uint_eq(bf16_from_f32(1.0f + 3 * 0x1.0p-8f), 0x3f82);
    ck_assert_uint_eq(bf16_from_f32(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3f81);
    ck_assert_uint_eq(bf16_from_f32(-2.5f), 0xc020);
    ck_assert_uint_eq(bf16_from_f32(3.4028235e38f), 0x7f80);
    ck_assert(isnan(bf16_to_f32(bf16_from_f32(NAN))));
    ck_assert_uint_eq(bf16_from_f32(INFINITY), 0x7f80);
    for (int i = 0; i < 65536; i++) {
        bf16_t h = (bf16_t)i;
        float f = bf16_to_f32(h);
        if (!isnan(f))
            ck_assert_uint_eq(bf16_from_f32(f), h);
    }
}
END_TEST

START_TEST(test_transpose)
{
    int dims[][2] = {{1, 1}, {3, 70}, {33, 31}, {64, 64}, {100, 7}};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        int r = dims[t][0], c = dims[t][1];
        bf16_t *s = malloc(sizeof *s * (size_t)r * (c + 1));
        bf16_t *d = malloc(sizeof *d * (size_t)c * (r + 2));
        for (int i = 0; i < r * (c + 1); i++)
            s[i] = (bf16_t)(i * 7 + 1);
        transpose_bf16(d, r + 2, s, c + 1, r, c);
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++)
                ck_assert_uint_eq(d[(size_t)j * (r + 2) + i], s[(size_t)i * (c + 1) + j]);
        free(s);
        free(d);
    }
}
END_TEST

/*
 * The MLP's gradient against an fp64 reference: the same network (the bf16 copies of the
 * weights and biases, the bf16 inputs) run forward and backward in double with nothing rounded.
 * The bf16 path rounds every stored tensor (activations, logits, dlogits, each layer's dZ, the
 * gradient itself) to 8 significant bits, a relative error of at most 2^-9 each; a gradient
 * element passes through at most 2 L + 3 such roundings (7 for L = 2 hidden layers), so its
 * error is at most about 1.4% of the terms it sums, and the norm-wise relative error of a tensor
 * stays below that. We require 2% per tensor, norm-wise: a wrong index, a missing ReLU mask or a
 * sign error gives errors of order 100%.
 */
enum { GIN = 5, GHID = 7, GCLS = 3, GB = 9, GL = 2 };

typedef struct ref_net {
    int nl, in[GL + 1], out[GL + 1];
    double w[GL + 1][GHID * GHID], b[GL + 1][GHID];
} ref_net_t;

/* Forward and backward in fp64; returns the mean loss; fills gw, gb if not NULL. */
static double ref_loss(const ref_net_t *n, const double *x, const int *y, int rows,
                       double gw[][GHID * GHID], double gb[][GHID])
{
    double h[GL + 2][GB][GHID];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < GIN; j++)
            h[0][i][j] = x[i * GIN + j];
    for (int l = 0; l < n->nl; l++)
        for (int i = 0; i < rows; i++)
            for (int o = 0; o < n->out[l]; o++) {
                double z = n->b[l][o];
                for (int k = 0; k < n->in[l]; k++)
                    z += n->w[l][o * n->in[l] + k] * h[l][i][k];
                h[l + 1][i][o] = l < n->nl - 1 && z < 0 ? 0 : z;
            }
    double loss = 0.0, dz[GB][GHID], dn[GB][GHID];
    for (int i = 0; i < rows; i++) {
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < GCLS; j++)
            mx = fmax(mx, h[n->nl][i][j]);
        for (int j = 0; j < GCLS; j++)
            s += exp(h[n->nl][i][j] - mx);
        loss += log(s) - (h[n->nl][i][y[i]] - mx);
        for (int j = 0; j < GCLS; j++)
            dz[i][j] = (exp(h[n->nl][i][j] - mx) / s - (j == y[i])) / rows;
    }
    if (gw == NULL)
        return loss / rows;
    for (int l = n->nl - 1; l >= 0; l--) {
        for (int o = 0; o < n->out[l]; o++) {
            gb[l][o] = 0.0;
            for (int i = 0; i < rows; i++)
                gb[l][o] += dz[i][o];
            for (int k = 0; k < n->in[l]; k++) {
                double s = 0.0;
                for (int i = 0; i < rows; i++)
                    s += dz[i][o] * h[l][i][k];
                gw[l][o * n->in[l] + k] = s;
            }
        }
        for (int i = 0; i < rows; i++)
            for (int k = 0; k < n->in[l]; k++) {
                double s = 0.0;
                for (int o = 0; o < n->out[l]; o++)
                    s += dz[i][o] * n->w[l][o * n->in[l] + k];
                dn[i][k] = h[l][i][k] > 0 ? s : 0.0;
            }
        memcpy(dz, dn, sizeof dz);
    }
    return loss / rows;
}

typedef struct hook_log {
    const mlp_t *m;
    int calls, order[GL + 1];
    bf16_t snap[4096];
} hook_log_t;

static void record_hook(int layer, void *arg)
{
    hook_log_t *h = arg;
    const mlp_layer_t *L = &h->m->layer[layer];
    size_t n = (size_t)L->in * L->out + (size_t)L->out;
    ck_assert(h->calls <= GL);
    h->order[h->calls++] = layer;
    /* W and b of a layer are one range starting at w_off; keep a copy of them as of now. */
    memcpy(h->snap + L->w_off, h->m->grad + L->w_off, n * sizeof(bf16_t));
}

static double rel_err(const double *got, const double *want, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return sqrt(num / (den > 0 ? den : 1.0));
}

START_TEST(test_mlp_gradient)
{
    gemm_variant_t v = (gemm_variant_t)_i;
    if (!gemm_variant_available(v)) {
        fprintf(stderr, "check_gemm: %s not available on this CPU; gradient test skipped\n",
                gemm_variant_name(v));
        return;
    }
    mlp_t *m = mlp_create(GIN, GHID, GL, GCLS, GB, GB, 777, v);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_le(m->nparams, 4096);
    /* Non-zero biases, so that their path is exercised too. */
    for (int l = 0; l < m->nlayers; l++)
        for (int o = 0; o < m->layer[l].out; o++)
            m->master[m->layer[l].b_off + o] = (float)(0.1 * urand());
    mlp_refresh(m);

    bf16_t x[GB * GIN];
    double xd[GB * GIN];
    int y[GB];
    for (int i = 0; i < GB * GIN; i++) {
        x[i] = bf16_from_f32((float)(2.0 * urand()));
        xd[i] = bf16_to_f32(x[i]);
    }
    for (int i = 0; i < GB; i++)
        y[i] = (int)(splitmix64(&rng_state) % GCLS);

    ref_net_t n = {.nl = m->nlayers};
    for (int l = 0; l < m->nlayers; l++) {
        const mlp_layer_t *L = &m->layer[l];
        n.in[l] = L->in;
        n.out[l] = L->out;
        for (int i = 0; i < L->in * L->out; i++)
            n.w[l][i] = bf16_to_f32(bf16_from_f32(m->master[L->w_off + i]));
        for (int o = 0; o < L->out; o++)
            n.b[l][o] = bf16_to_f32(bf16_from_f32(m->master[L->b_off + o]));
    }
    static double gw[GL + 1][GHID * GHID], gb[GL + 1][GHID];
    double want_loss = ref_loss(&n, xd, y, GB, gw, gb);

    /* First the reference itself, by central differences (fp64, h = 1e-6: truncation error
     * O(h^2), rounding O(1e-16 / h); agreement to 1e-6 relative or 1e-9 absolute). */
    for (int l = 0; l < n.nl; l++)
        for (int i = 0; i < n.in[l] * n.out[l]; i += 3) {
            ref_net_t p = n, q = n;
            p.w[l][i] += 1e-6;
            q.w[l][i] -= 1e-6;
            double fd = (ref_loss(&p, xd, y, GB, NULL, NULL) - ref_loss(&q, xd, y, GB, NULL, NULL)) /
                        2e-6;
            ck_assert_msg(fabs(fd - gw[l][i]) <= 1e-6 * fabs(gw[l][i]) + 1e-9,
                          "reference dW[%d][%d] = %.12g, finite difference %.12g", l, i, gw[l][i],
                          fd);
        }

    int hits;
    double loss = mlp_forward(m, x, y, GB, &hits) / GB;
    ck_assert_msg(fabs(loss - want_loss) <= 2e-2 * fabs(want_loss), "loss %.6g, reference %.6g",
                  loss, want_loss);
    hook_log_t h = {.m = m};
    mlp_backward(m, y, 1.0f, record_hook, &h);
    ck_assert_int_eq(h.calls, m->nlayers);
    for (int c = 0; c < m->nlayers; c++)
        ck_assert_int_eq(h.order[c], m->nlayers - 1 - c); /* last layer first */
    ck_assert_msg(memcmp(h.snap, m->grad, m->nparams * sizeof(bf16_t)) == 0,
                  "a layer's gradients changed after its hook said they were final");

    for (int l = 0; l < n.nl; l++) {
        const mlp_layer_t *L = &m->layer[l];
        double got[GHID * GHID], gotb[GHID];
        for (int i = 0; i < L->in * L->out; i++)
            got[i] = bf16_to_f32(m->grad[L->w_off + i]);
        for (int o = 0; o < L->out; o++)
            gotb[o] = bf16_to_f32(m->grad[L->b_off + o]);
        double ew = rel_err(got, gw[l], (size_t)L->in * L->out);
        double eb = rel_err(gotb, gb[l], (size_t)L->out);
        fprintf(stderr, "check_gemm: %s layer %d: relative error dW %.2e, db %.2e\n",
                gemm_variant_name(v), l, ew, eb);
        ck_assert_msg(ew <= 2e-2, "%s layer %d: dW relative error %.3g > 2e-2",
                      gemm_variant_name(v), l, ew);
        ck_assert_msg(eb <= 2e-2, "%s layer %d: db relative error %.3g > 2e-2",
                      gemm_variant_name(v), l, eb);
    }

    /* The SGD step: momentum = g (from zero), master -= lr * g, exactly in fp32. */
    float before = m->master[5], g = bf16_to_f32(m->grad[5]);
    mlp_sgd_step(m, 0.5f, 0.9f);
    ck_assert_float_eq(m->master[5], before - 0.5f * g);
    ck_assert_float_eq(m->momentum[5], g);
    mlp_destroy(m);
}
END_TEST

/* The data set depends only on (seed, index): a subset made alone equals the same rows of the
 * whole, and another seed gives other data. */
START_TEST(test_dataset)
{
    dataset_t all, part, other;
    ck_assert_int_eq(dataset_make(&all, 5, 8, 4, 2, 1.0f, 0, 100), 0);
    ck_assert_int_eq(dataset_make(&part, 5, 8, 4, 2, 1.0f, 40, 10), 0);
    ck_assert_int_eq(dataset_make(&other, 6, 8, 4, 2, 1.0f, 0, 100), 0);
    ck_assert_mem_eq(part.x, all.x + 40 * 8, 10 * 8 * sizeof(bf16_t));
    ck_assert_mem_eq(part.y, all.y + 40, 10 * sizeof(int));
    ck_assert(memcmp(other.x, all.x, 100 * 8 * sizeof(bf16_t)) != 0);
    int seen[4] = {0};
    for (int i = 0; i < 100; i++)
        seen[all.y[i]]++;
    for (int c = 0; c < 4; c++)
        ck_assert_int_gt(seen[c], 5);
    dataset_free(&all);
    dataset_free(&part);
    dataset_free(&other);
}
END_TEST

static Suite *gemm_suite(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_gemm_random, 0, GEMM_VARIANT_COUNT);
    tcase_add_loop_test(tc, test_gemm_exact, 0, GEMM_VARIANT_COUNT);
    tcase_add_test(tc, test_variant_choice);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_transpose);
    suite_add_tcase(s, tc);
    tc = tcase_create("mlp");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_mlp_gradient, 0, GEMM_VARIANT_COUNT);
    tcase_add_test(tc, test_dataset);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(gemm_suite)
