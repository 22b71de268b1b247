/* mlp.c: forward, backward and SGD step of the training example's bf16 MLP, and its data set
 * (see mlp.h). Every matrix product goes through gemm_bf16 (fp32 accumulation); what is stored
 * between layers is bf16, rounded once to nearest even, as torch.autocast(bfloat16) would. */
#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double normal01(uint64_t *state)
{
    /* 53-bit uniforms in (0, 1]: log never sees 0. */
    double u1 = ((double)(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(splitmix64(state) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void *zalloc(size_t bytes)
{
    bytes = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes > 0 ? bytes : 64);
    if (p != NULL)
        memset(p, 0, bytes > 0 ? bytes : 64);
    return p;
}

mlp_t *mlp_create(int in_dim, int hidden, int hidden_layers, int classes, int batch, int eval_rows,
                  uint64_t seed, gemm_variant_t gemm)
{
    mlp_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->nlayers = hidden_layers + 1;
    m->in_dim = in_dim;
    m->hidden = hidden;
    m->classes = classes;
    m->batch = batch;
    m->max_rows = eval_rows > batch ? eval_rows : batch;
    m->gemm = gemm;
    m->layer = calloc((size_t)m->nlayers, sizeof *m->layer);
    m->act = calloc((size_t)m->nlayers, sizeof *m->act);
    if (m->layer == NULL || m->act == NULL)
        goto fail;

    int widest = classes > in_dim ? classes : in_dim;
    widest = hidden > widest ? hidden : widest;
    size_t off = 0;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        mlp_layer_t *L = &m->layer[l];
        L->in = l == 0 ? in_dim : hidden;
        L->out = l == m->nlayers - 1 ? classes : hidden;
        L->w_off = off;
        off += (size_t)L->in * L->out;
        L->b_off = off;
        off += (size_t)L->out;
    }
    m->nparams = off;
    m->master = zalloc(off * sizeof(float));
    m->momentum = zalloc(off * sizeof(float));
    m->grad = zalloc(off * sizeof(bf16_t));
    m->z = zalloc((size_t)m->max_rows * widest * sizeof(float) +
                  (size_t)widest * widest * sizeof(float));
    m->logits = zalloc((size_t)m->max_rows * classes * sizeof(float));
    m->dz = zalloc((size_t)batch * widest * sizeof(bf16_t));
    m->dz2 = zalloc((size_t)batch * widest * sizeof(bf16_t));
    m->dzt = zalloc((size_t)batch * widest * sizeof(bf16_t));
    if (!m->master || !m->momentum || !m->grad || !m->z || !m->logits || !m->dz || !m->dz2 ||
        !m->dzt)
        goto fail;
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        m->act[l] = zalloc((size_t)m->max_rows * L->in * sizeof(bf16_t));
        if (m->act[l] == NULL || gemm_packed_alloc(&L->wf, L->in, L->out) != 0 ||
            gemm_packed_alloc(&L->wb, L->out, L->in) != 0 ||
            gemm_packed_alloc(&L->xp, batch, L->in) != 0)
            goto fail;
    }

    /* He-normal for the ReLU layers (variance 2 / fan_in), 1 / fan_in for the logits. */
    uint64_t st = seed ^ 0x6d6c702d696e6974ull;
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        double sd = sqrt((l == m->nlayers - 1 ? 1.0 : 2.0) / L->in);
        for (size_t i = 0; i < (size_t)L->in * L->out; i++)
            m->master[L->w_off + i] = (float)(sd * normal01(&st));
    }
    mlp_refresh(m);
    return m;
fail:
    mlp_destroy(m);
    return NULL;
}

void mlp_destroy(mlp_t *m)
{
    if (m == NULL)
        return;
    for (int l = 0; m->layer != NULL && l < m->nlayers; l++) {
        gemm_packed_free(&m->layer[l].wf);
        gemm_packed_free(&m->layer[l].wb);
        gemm_packed_free(&m->layer[l].xp);
        if (m->act != NULL)
            free(m->act[l]);
    }
    free(m->layer);
    free(m->act);
    free(m->master);
    free(m->momentum);
    free(m->grad);
    free(m->z);
    free(m->logits);
    free(m->dz);
    free(m->dz2);
    free(m->dzt);
    free(m);
}

void mlp_refresh(mlp_t *m)
{
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        gemm_pack_f32(&L->wf, m->master + L->w_off, L->in, 1);
        gemm_pack_f32(&L->wb, m->master + L->w_off, L->in, 0);
    }
}

double mlp_forward(mlp_t *m, const bf16_t *x, const int *y, int rows, int *correct)
{
    memcpy(m->act[0], x, (size_t)rows * m->in_dim * sizeof(bf16_t));
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        gemm_bf16(m->gemm, rows, m->act[l], L->in, &L->wf, m->z, L->out, 0);
        /* The bias is a bf16 copy of the master too, added in fp32 before the one rounding. */
        const float *b = m->master + L->b_off;
        int last = l == m->nlayers - 1;
        for (int i = 0; i < rows; i++) {
            const float *zi = m->z + (size_t)i * L->out;
            if (last) {
                float *o = m->logits + (size_t)i * L->out;
                for (int j = 0; j < L->out; j++)
                    o[j] = bf16_to_f32(bf16_from_f32(zi[j] + bf16_to_f32(bf16_from_f32(b[j]))));
            } else {
                bf16_t *o = m->act[l + 1] + (size_t)i * L->out;
                for (int j = 0; j < L->out; j++) {
                    float v = zi[j] + bf16_to_f32(bf16_from_f32(b[j]));
                    o[j] = bf16_from_f32(v > 0.0f ? v : 0.0f);
                }
            }
        }
    }
    /* Cross-entropy in fp32 (autocast runs softmax and the loss in fp32), summed in double. */
    double loss = 0.0;
    int hits = 0;
    for (int i = 0; i < rows; i++) {
        const float *o = m->logits + (size_t)i * m->classes;
        int best = 0;
        for (int j = 1; j < m->classes; j++)
            if (o[j] > o[best])
                best = j;
        float mx = o[best], s = 0.0f;
        for (int j = 0; j < m->classes; j++)
            s += expf(o[j] - mx);
        loss += (double)(logf(s) - (o[y[i]] - mx));
        hits += best == y[i];
    }
    if (correct != NULL)
        *correct = hits;
    return loss;
}

void mlp_backward(mlp_t *m, const int *y, float grad_scale, void (*hook)(int layer, void *arg),
                  void *arg)
{
    int rows = m->batch;
    float scale = grad_scale / (float)rows;
    /* d(mean loss) / d(logits) = (softmax - onehot) / rows, rounded to bf16. */
    for (int i = 0; i < rows; i++) {
        const float *o = m->logits + (size_t)i * m->classes;
        bf16_t *d = m->dz + (size_t)i * m->classes;
        float mx = o[0], s = 0.0f;
        for (int j = 1; j < m->classes; j++)
            mx = o[j] > mx ? o[j] : mx;
        for (int j = 0; j < m->classes; j++)
            s += expf(o[j] - mx);
        for (int j = 0; j < m->classes; j++) {
            float p = expf(o[j] - mx) / s;
            d[j] = bf16_from_f32((p - (j == y[i] ? 1.0f : 0.0f)) * scale);
        }
    }
    bf16_t *dz = m->dz, *dnext = m->dz2;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        mlp_layer_t *L = &m->layer[l];
        /* dW[out][in] = dZ^T (out x rows) . X (rows x in): the contraction runs over the rows. */
        transpose_bf16(m->dzt, rows, dz, L->out, rows, L->out);
        gemm_pack_bf16(&L->xp, m->act[l], L->in, 0);
        gemm_bf16(m->gemm, L->out, m->dzt, rows, &L->xp, m->z, L->in, 0);
        bf16_t *gw = m->grad + L->w_off, *gb = m->grad + L->b_off;
        for (size_t i = 0; i < (size_t)L->out * L->in; i++)
            gw[i] = bf16_from_f32(m->z[i]);
        for (int j = 0; j < L->out; j++) {
            const bf16_t *t = m->dzt + (size_t)j * rows;
            float s = 0.0f;
            for (int i = 0; i < rows; i++)
                s += bf16_to_f32(t[i]);
            gb[j] = bf16_from_f32(s);
        }
        if (hook != NULL)
            hook(l, arg);
        if (l == 0)
            break;
        /* dX = dZ (rows x out) . W (out x in), through the ReLU of the layer below. */
        gemm_bf16(m->gemm, rows, dz, L->out, &L->wb, m->z, L->in, 0);
        const bf16_t *h = m->act[l];
        for (size_t i = 0; i < (size_t)rows * L->in; i++)
            dnext[i] = (h[i] & 0x7fffu) != 0 && !(h[i] & 0x8000u) ? bf16_from_f32(m->z[i]) : 0;
        bf16_t *t = dz;
        dz = dnext;
        dnext = t;
    }
}

void mlp_sgd_step(mlp_t *m, float lr, float mu)
{
    for (size_t i = 0; i < m->nparams; i++) {
        float v = mu * m->momentum[i] + bf16_to_f32(m->grad[i]);
        m->momentum[i] = v;
        m->master[i] -= lr * v;
    }
    mlp_refresh(m);
}

uint64_t mlp_hash(const mlp_t *m)
{
    const unsigned char *p = (const unsigned char *)m->master;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < m->nparams * sizeof(float); i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int dataset_make(dataset_t *d, uint64_t seed, int dim, int classes, int clusters, float sigma,
                 uint64_t first, int n)
{
    d->n = n;
    d->dim = dim;
    d->classes = classes;
    d->x = malloc((size_t)n * dim * sizeof(bf16_t) + 1);
    d->y = malloc((size_t)n * sizeof(int) + 1);
    float *centers = malloc((size_t)classes * clusters * dim * sizeof(float) + 1);
    if (d->x == NULL || d->y == NULL || centers == NULL) {
        free(centers);
        dataset_free(d);
        return -1;
    }
    uint64_t st = seed ^ 0x63656e7465727321ull;
    for (size_t i = 0; i < (size_t)classes * clusters * dim; i++)
        centers[i] = (float)normal01(&st);
    for (int i = 0; i < n; i++) {
        /* A generator per sample, seeded by (seed, index): any subset can be made alone. */
        uint64_t s = seed * 0x9e3779b97f4a7c15ull ^ ((first + (uint64_t)i) * 0xd1b54a32d192ed03ull);
        splitmix64(&s);
        int c = (int)(splitmix64(&s) % (uint64_t)classes);
        int k = (int)(splitmix64(&s) % (uint64_t)clusters);
        const float *mu = centers + ((size_t)c * clusters + k) * dim;
        for (int j = 0; j < dim; j++)
            d->x[(size_t)i * dim + j] = bf16_from_f32(mu[j] + sigma * (float)normal01(&s));
        d->y[i] = c;
    }
    free(centers);
    return 0;
}

void dataset_free(dataset_t *d)
{
    free(d->x);
    free(d->y);
    d->x = NULL;
    d->y = NULL;
}
