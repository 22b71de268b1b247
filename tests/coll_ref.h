/* coll_ref.h: what every collectives test binary shares to check a call exactly: the per-rank
 * context and its failure reports, the call wrapper (blocking, handle + wait, handle + test in
 * turn), buffers with guard zones, inputs whose reduction is exact in any order (nccl-tests'
 * trick) with their reference results, and bit-for-bit comparisons. */
#ifndef TUTTI_TEST_COLL_REF_H
#define TUTTI_TEST_COLL_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "tutti.h"

/* ---- the dimensions of the matrix ---------------------------------------------------------- */

/* Buffer layouts: out of place, the two in-place spellings, and pointers off alignment. */
enum { M_OOP = 0, M_INPLACE, M_SAME, M_OFF_ELEM, M_OFF_BYTE, M_COUNT };
extern const char *const cr_mode_name[M_COUNT];

/* Every dtype, for the reductions; one dtype of each element size, for the collectives that
 * only move bytes. */
#define CR_NDT 8
#define CR_NMDT 4
extern const tutti_dtype_t cr_all_dtypes[CR_NDT];
extern const tutti_dtype_t cr_move_dtypes[CR_NMDT];

/* cr_is_float: fp16, bf16, fp32, fp64. cr_op_ok: avg only on floats, bitwise ops only on
 * integers (what the library accepts). */
bool cr_is_float(tutti_dtype_t dt);
bool cr_op_ok(tutti_op_t op, tutti_dtype_t dt);

/* ---- per-rank context ---------------------------------------------------------------------- */

typedef struct ctx {
    tutti_comm_t *comm;
    int rank, size;
    const char *tp;
    bool ofi;
    char desc[256];      /* the case being run, for messages */
    const char *algo;
    unsigned long ncase; /* the case's number: the same on every rank, so it seeds data and
                          * choices; coll_matrix.c numbers cases as one sequence over every
                          * family, whichever binary runs them */
    unsigned long nrun;  /* calls so far in that sequence (picks blocking or a handle) */
    unsigned long ncalls; /* calls this binary made */
    bool dry;            /* walking another family's cases: count them, log and call nothing */
    int errors;          /* mismatches and failures */
    int printed;
    bool fatal;          /* a collective failed: the communicator is no longer usable */
    tutti_work_t *w;
    int wmode;           /* 0 blocking, 1 handle + wait, 2 handle + test loop */
    uint64_t seq0;
    long barrier_rounds;
} ctx_t;

/* cr_report counts an error and prints "<case>: <message>" for the first 30 of them. */
void cr_report(ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* cr_describe sets the text that names the case in every report. With TH_CASE_LOG=FILE in the
 * environment, rank 0 also appends the case with its number to FILE (unless c->dry), so that
 * the cases two versions of the tests run can be compared. op and mode: -1 for none. */
void cr_describe(ctx_t *c, const char *coll, tutti_dtype_t dt, int op, size_t count, int mode,
                 const char *extra);

/* cr_wk prepares one call: NULL (blocking) or a place for a work handle, in turn. */
tutti_work_t **cr_wk(ctx_t *c);

/* cr_fin completes a call started with cr_wk: its status, the work handle (waited for or polled
 * with tutti_work_test, then freed), and for a collective the sequence number's step of one.
 * Returns 0 if the call succeeded; else reports it, marks the context fatal and returns 1. */
int cr_fin(ctx_t *c, tutti_status_t st, bool is_coll);

/* ---- buffers with guard zones -------------------------------------------------------------- */

#define CR_FILL_BYTE 0xee

typedef struct tbuf {
    unsigned char *base;
    unsigned char *p; /* base + guard + off */
    size_t bytes, off;
} tbuf_t;

/* tb_make allocates bytes at offset off from an aligned block, filled with CR_FILL_BYTE between
 * guard zones (it exits the rank on out of memory); tb_free frees it. tb_guards reports and
 * returns 1 if a byte outside [p, p + bytes) changed. */
void tb_make(tbuf_t *b, size_t bytes, size_t off);
void tb_free(tbuf_t *b);
int tb_guards(ctx_t *c, const tbuf_t *b, const char *which);

/* cr_offsets gives a mode's send and receive offsets in bytes for elements of es bytes. */
void cr_offsets(int mode, size_t es, size_t *soff, size_t *roff);

/* cr_mode_skip: odd byte offsets only matter for elements wider than a byte and more than one. */
bool cr_mode_skip(int mode, size_t es, size_t n);

/* cr_cmp compares n elements of es bytes and reports the first mismatch with its bits and how
 * many differ; returns 1 on a mismatch. */
int cr_cmp(ctx_t *c, const char *what, const void *exp, const void *got, size_t n, size_t es);

/* cr_check_out checks the output of a call that succeeded: recvbuf R against exp (nr elements of
 * es bytes) and R's guards; and, when the call read sendbuf S (sb == S->p), that it left S's ns
 * elements as orig (orig NULL: not compared) and S's guards. */
void cr_check_out(ctx_t *c, const tbuf_t *R, const void *exp, size_t nr, const void *sb,
                  const tbuf_t *S, const void *orig, size_t ns, size_t es);

/* ---- exact inputs and their reference ------------------------------------------------------ */

/* cr_fill_bytes gives a block its own bytes, keyed by (a, b). */
void cr_fill_bytes(void *p, size_t nbytes, uint64_t a, uint64_t b);

/* cr_gen_red writes rank r's input for a reduction with op, elements start .. start+n-1 of the
 * logical vector (salt varies the data between cases). */
void cr_gen_red(void *p, tutti_dtype_t dt, tutti_op_t op, int r, size_t start, size_t n,
                unsigned long salt);

/* cr_ref_red writes the expected reduction over nranks of those elements: exact, since every
 * input and partial result is an integer the dtype holds (avg: the exact sum divided once in
 * the dtype's accumulation precision, fp32 for bf16 / fp16, rounded to nearest even). */
void cr_ref_red(void *p, tutti_dtype_t dt, tutti_op_t op, int nranks, size_t start, size_t n,
                unsigned long salt);

/* ---- v-collectives ---------------------------------------------------------------------------- */

/* cr_vcount: uneven counts with zeros, (a pattern of 0..4 picked by base, i and j) x mult; j < 0
 * for a count that depends on one index. */
size_t cr_vcount(int base, size_t mult, int i, int j);

/* cr_layout writes the displacements of P blocks of counts[] and returns the elements the buffer
 * spans: packed in rank order, or in reverse rank order with 3-element gaps (and 3 before the
 * first) that must stay untouched. */
size_t cr_layout(int P, const size_t *counts, bool packed, size_t *displs);

#endif /* TUTTI_TEST_COLL_REF_H */
