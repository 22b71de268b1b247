/* gemm_amx.c: the AMX kernel of gemm_bf16 (compiled alone with -mamx-tile -mamx-bf16; called
 * only where cpuid, xgetbv and Linux's arch_prctl say the tiles may be used).
 *
 * Algorithm: C is cut into blocks of 2 x 2 tiles of 16 x 16 fp32 (tmm0-3). For each chunk of 32
 * k, two A tiles (16 rows x 32 bf16, tmm4-5) and two B tiles (16 pair-rows x 16 columns x 2 bf16,
 * tmm6-7) meet in four TDPBF16PS, each 16 x 16 x 32 multiply-adds; B tiles load straight from the
 * packed VNNI layout (stride np * 4 bytes), which is exactly the layout TDPBF16PS wants. Each tile
 * loaded serves two TDPBF16PS. Cost: m * np * k / 8192 TDPBF16PS (rounded up to whole tiles);
 * it wins over VDPBF16PS by several times once m, n and k fill tiles (>= 16, 16 and 32).
 * Edges (m or n not a multiple of 16, k not a multiple of 32, odd k) go through zero-padded
 * copies in 64-byte-row buffers: padding A with zeros against zero-padded B adds exact zeros, and
 * only the real rows and columns of C are read and written. */
#include "gemm_bf16.h"

#include <immintrin.h>
#include <string.h>

/* The tile configuration (palette 1): every tile 16 rows x 64 bytes. */
typedef struct tilecfg {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;

_Static_assert(sizeof(tilecfg_t) == 64, "the tile configuration is 64 bytes");

/* Zero-padded copies of edge tiles. */
typedef struct edge_bufs {
    _Alignas(64) float c[4][16 * 16];
    _Alignas(64) bf16_t a[2][16 * 32];
    _Alignas(64) bf16_t b[2][16 * 32];
} edge_bufs_t;

/* How many of the 16 rows (or columns) from start on are below total: a tile's real part. */
static inline int part16(int total, int start)
{
    return total - start >= 16 ? 16 : total - start;
}

#define C_LOAD(t, ti, tj)                                                                       \
    do {                                                                                       \
        int r_ = part16(m, i0 + 16 * (ti)), w_ = part16(n, j0 + 16 * (tj));                  \
        float *cp_ = c + (size_t)(i0 + 16 * (ti)) * ldc + j0 + 16 * (tj);                      \
        if (r_ == 16 && w_ == 16) {                                                            \
            if (accumulate)                                                                    \
                _tile_loadd(t, cp_, (long)ldc * 4);                                            \
            else                                                                               \
                _tile_zero(t);                                                                 \
        } else {                                                                               \
            float *e_ = eb->c[t];                                                              \
            memset(e_, 0, sizeof eb->c[t]);                                                    \
            if (accumulate)                                                                    \
                for (int y_ = 0; y_ < r_; y_++)                                                \
                    memcpy(e_ + 16 * y_, cp_ + (size_t)y_ * ldc, (size_t)w_ * 4);              \
            _tile_loadd(t, e_, 64);                                                            \
        }                                                                                      \
    } while (0)

#define C_STORE(t, ti, tj)                                                                      \
    do {                                                                                       \
        int r_ = part16(m, i0 + 16 * (ti)), w_ = part16(n, j0 + 16 * (tj));                  \
        float *cp_ = c + (size_t)(i0 + 16 * (ti)) * ldc + j0 + 16 * (tj);                      \
        if (r_ == 16 && w_ == 16) {                                                            \
            _tile_stored(t, cp_, (long)ldc * 4);                                               \
        } else {                                                                               \
            float *e_ = eb->c[t];                                                              \
            _tile_stored(t, e_, 64);                                                           \
            for (int y_ = 0; y_ < r_; y_++)                                                    \
                memcpy(cp_ + (size_t)y_ * ldc, e_ + 16 * y_, (size_t)w_ * 4);                  \
        }                                                                                      \
    } while (0)

/* A tile ti: rows i0 + 16 ti.., k columns k0..k0+31. */
#define A_LOAD(t, ti)                                                                           \
    do {                                                                                       \
        int r_ = part16(m, i0 + 16 * (ti)), w_ = k - k0 >= 32 ? 32 : k - k0;                  \
        const bf16_t *ap_ = a + (size_t)(i0 + 16 * (ti)) * lda + k0;                           \
        if (r_ == 16 && w_ == 32) {                                                            \
            _tile_loadd(t, ap_, (long)lda * 2);                                                \
        } else {                                                                               \
            bf16_t *e_ = eb->a[(ti)];                                                          \
            memset(e_, 0, sizeof eb->a[(ti)]);                                                 \
            for (int y_ = 0; y_ < r_; y_++)                                                    \
                memcpy(e_ + 32 * y_, ap_ + (size_t)y_ * lda, (size_t)w_ * 2);                  \
            _tile_loadd(t, e_, 64);                                                            \
        }                                                                                      \
    } while (0)

/* B tile tj: pair-rows k0/2.., columns j0 + 16 tj..+15 (always inside np; the packer zeroed the
 * columns past n and the odd k's missing half). */
#define B_LOAD(t, tj)                                                                           \
    do {                                                                                       \
        int pr_ = kpairs - k0 / 2 >= 16 ? 16 : kpairs - k0 / 2;                                \
        const bf16_t *bp_ = p->data + (size_t)(k0 / 2) * brow + (size_t)(j0 + 16 * (tj)) * 2;  \
        if (pr_ == 16) {                                                                       \
            _tile_loadd(t, bp_, (long)brow * 2);                                               \
        } else {                                                                               \
            bf16_t *e_ = eb->b[(tj)];                                                          \
            memset(e_, 0, sizeof eb->b[(tj)]);                                                 \
            for (int y_ = 0; y_ < pr_; y_++)                                                   \
                memcpy(e_ + 32 * y_, bp_ + (size_t)y_ * brow, 64);                             \
            _tile_loadd(t, e_, 64);                                                            \
        }                                                                                      \
    } while (0)

void gemm_bf16_amx(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c, int ldc,
                   int accumulate)
{
    int n = p->n, k = p->k;
    if (n <= 0 || m <= 0)
        return;
    if (k <= 0) { /* nothing to add: C = 0 or stays */
        for (int i = 0; !accumulate && i < m; i++)
            memset(c + (size_t)i * ldc, 0, (size_t)n * sizeof *c);
        return;
    }
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* The configuration is per thread and cheap to load; every call loads its own, so that
     * callers on any thread need no set-up beyond the process's permission. */
    _tile_loadconfig(&cfg);
    edge_bufs_t ebs, *eb = &ebs;
    size_t brow = (size_t)p->np * 2;
    int kpairs = (k + 1) / 2;

    /* Column blocks outside, so that a panel of B (k / 2 x 128 bytes) is reused from cache by
     * every row block. */
    for (int j0 = 0; j0 < n; j0 += 32) {
        int two_n = n - j0 > 16;
        for (int i0 = 0; i0 < m; i0 += 32) {
            int two_m = m - i0 > 16;
            C_LOAD(0, 0, 0);
            if (two_n)
                C_LOAD(1, 0, 1);
            if (two_m)
                C_LOAD(2, 1, 0);
            if (two_m && two_n)
                C_LOAD(3, 1, 1);
            for (int k0 = 0; k0 < k; k0 += 32) {
                A_LOAD(4, 0);
                B_LOAD(6, 0);
                _tile_dpbf16ps(0, 4, 6);
                if (two_n) {
                    B_LOAD(7, 1);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (two_m) {
                    A_LOAD(5, 1);
                    _tile_dpbf16ps(2, 5, 6);
                    if (two_n)
                        _tile_dpbf16ps(3, 5, 7);
                }
            }
            C_STORE(0, 0, 0);
            if (two_n)
                C_STORE(1, 0, 1);
            if (two_m)
                C_STORE(2, 1, 0);
            if (two_m && two_n)
                C_STORE(3, 1, 1);
        }
    }
    _tile_release();
}
