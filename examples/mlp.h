/* mlp.h: the model of the training example: an MLP classifier trained in bf16 (activations,
 * weight copies and gradients in bf16, GEMMs accumulating in fp32) with fp32 master weights and
 * SGD-with-momentum state, and the seeded Gaussian-clusters data set it learns. No
 * communication here: train_bf16.c adds data parallelism through the backward hook. */
#ifndef MLP_H
#define MLP_H

#include <stddef.h>
#include <stdint.h>

#include "gemm_bf16.h"

/* One Linear layer y = x W^T + b, W as [out][in] like torch.nn.Linear. */
typedef struct mlp_layer {
    int in, out;
    size_t w_off, b_off; /* offsets (elements) of W and b in the parameter buffers */
    gemm_packed_t wf;    /* bf16 W^T (k = in, n = out) for the forward GEMM */
    gemm_packed_t wb;    /* bf16 W (k = out, n = in) for the input-gradient GEMM */
    gemm_packed_t xp;    /* this layer's input activations (k = batch, n = in) for dW */
} mlp_layer_t;

/*
 * The model. Parameters sit in one buffer, last layer first (its W, then its b, then the layer
 * before it ...), so that the gradients of the layers the backward pass finishes first are one
 * contiguous prefix, ready to go out in buckets while it goes on.
 */
typedef struct mlp {
    int nlayers;      /* hidden layers + 1 */
    int in_dim, hidden, classes;
    int batch;        /* rows of a training step (this rank's shard) */
    int max_rows;     /* rows the forward workspace holds (>= batch) */
    mlp_layer_t *layer;
    size_t nparams;
    float *master;    /* fp32 master weights */
    float *momentum;  /* fp32 SGD momentum buffer */
    bf16_t *grad;     /* bf16 gradients (averaged over ranks in place by the caller) */
    gemm_variant_t gemm;
    bf16_t **act;     /* act[l]: input of layer l (act[0] the data), max_rows x layer[l].in */
    float *z;         /* fp32 GEMM output scratch */
    float *logits;    /* max_rows x classes, bf16 values held as fp32 */
    bf16_t *dz, *dz2; /* gradient w.r.t. the current layer's output (batch x widest) */
    bf16_t *dzt;      /* its transpose (widest x batch) */
} mlp_t;

/* mlp_create builds the model: in_dim -> hidden (x hidden_layers, ReLU) -> classes, He-normal
 * weights from seed, zero biases and momentum. batch: rows of a training step; eval_rows: rows of
 * an evaluation chunk. @return NULL on out of memory. */
mlp_t *mlp_create(int in_dim, int hidden, int hidden_layers, int classes, int batch, int eval_rows,
                  uint64_t seed, gemm_variant_t gemm);
void mlp_destroy(mlp_t *m);

/* mlp_refresh converts the fp32 master weights into the bf16 GEMM operands; call after every
 * change of master (the optimizer step, a broadcast). */
void mlp_refresh(mlp_t *m);

/* mlp_forward runs rows (<= max_rows) inputs x (bf16, rows x in_dim) to m->logits and returns
 * the summed cross-entropy of labels y; *correct gets the number of argmax hits. */
double mlp_forward(mlp_t *m, const bf16_t *x, const int *y, int rows, int *correct);

/*
 * mlp_backward: after mlp_forward on a training batch of exactly m->batch rows, fills m->grad
 * with the gradient of the mean cross-entropy over those rows (times grad_scale). hook(layer,
 * arg), if set, is called as soon as a layer's gradients (W and b) are final, last layer first,
 * before the backward pass goes on to the layers below.
 */
void mlp_backward(mlp_t *m, const int *y, float grad_scale, void (*hook)(int layer, void *arg),
                  void *arg);

/* mlp_sgd_step: momentum = mu * momentum + grad; master -= lr * momentum (fp32); then
 * mlp_refresh. */
void mlp_sgd_step(mlp_t *m, float lr, float mu);

/* mlp_hash: FNV-1a 64 of the fp32 master weights' bytes. */
uint64_t mlp_hash(const mlp_t *m);

/* The data set: Gaussian clusters, `clusters` per class, centers N(0, 1) per coordinate, points
 * a center plus N(0, sigma^2) noise. Sample i depends only on (seed, i), so every rank builds
 * the same set, and the held-out split is just other indices. */
typedef struct dataset {
    int n, dim, classes;
    bf16_t *x; /* n x dim */
    int *y;    /* n labels */
} dataset_t;

/* dataset_make builds samples first .. first + n - 1. @return 0, or -1 out of memory. */
int dataset_make(dataset_t *d, uint64_t seed, int dim, int classes, int clusters, float sigma,
                 uint64_t first, int n);
void dataset_free(dataset_t *d);

/* splitmix64: the example's random numbers (a counter-based generator: state += golden ratio). */
uint64_t splitmix64(uint64_t *state);
/* normal01: a standard normal number from the generator (Box-Muller). */
double normal01(uint64_t *state);

#endif /* MLP_H */
