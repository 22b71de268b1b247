/* coll_matrix.h: the case matrix of the collectives tests (algorithm x dtype x op x size x buffer
 * layout, on the shm and ofi transports at 1, 2, 3, 4 and 8 ranks) and the runner that walks it.
 * Each check_<family>.c supplies the bodies of its own kinds of case and ends with
 * CM_FAMILY_MAIN(its family); the runner numbers every case of every family as one sequence,
 * so a case gets the same number, data and choices whichever binary runs it. */
#ifndef TUTTI_TEST_COLL_MATRIX_H
#define TUTTI_TEST_COLL_MATRIX_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>

#include "check_main.h"
#include "coll_ref.h"

/* The kinds of case, in the order the matrix walks them. */
typedef enum cm_kind {
    CM_ALLREDUCE,
    CM_REDUCE_SCATTER,
    CM_REDUCE,
    CM_ALLGATHER,
    CM_ALLTOALL,
    CM_BCAST,
    CM_ALLGATHERV,
    CM_ALLTOALLV,
    CM_BARRIER,   /* one round: two barriers and a count of the arrivals */
    CM_P2P,       /* the whole point-to-point stage */
    CM_PIPELINED, /* the whole stage of several collectives in flight */
    CM_KIND_COUNT
} cm_kind_t;

/* One case: the fields its kind reads. */
typedef struct cm_case {
    tutti_dtype_t dt;
    int op;      /* a tutti_op_t, or -1 */
    size_t n;    /* elements: in all (allreduce, reduce, bcast), per rank or per peer (the rest) */
    int mode;    /* M_* */
    int root;    /* reduce, bcast */
    int base;    /* v-variants: the pattern of counts (zeros included) ... */
    size_t mult; /* ... times this */
    bool packed; /* v-variants: displacements NULL, or blocks in reverse order with gaps */
} cm_case_t;

typedef void (*cm_body_t)(ctx_t *c, const cm_case_t *k);

/* A family: one test binary. body[kind] runs one case of that kind; a NULL body is another
 * binary's, and the runner only counts its cases. add_tcases, if not NULL, adds the family's
 * tests beyond the matrix. */
typedef struct cm_family {
    const char *name;
    cm_body_t body[CM_KIND_COUNT];
    void (*add_tcases)(Suite *s);
} cm_family_t;

/* cm_algo_names[coll]: every algorithm of a collective, NULL-terminated. */
extern const char *const cm_algo_names[TUTTI_COLL_COUNT][4];

/* cm_names_all tells whether text names every algorithm of coll (but direct, if skip_direct). */
bool cm_names_all(const char *text, tutti_coll_t coll, bool skip_direct);

/* cm_use_algo sets coll's algorithm and checks that tutti_comm_algorithm reports it at every
 * size: 1 if it is in use now, 0 if it does not apply here (direct on ofi, which must be
 * refused, and is checked to be), -1 on a failure (reported). */
int cm_use_algo(ctx_t *c, tutti_coll_t coll, const char *name);

/* cm_suite builds the family's Suite: one TCase per transport x rank count, then its own. */
Suite *cm_suite(const cm_family_t *f);

/* CM_FAMILY_MAIN(family) defines main() to run cm_suite(&family). */
#define CM_FAMILY_MAIN(family)                                                                 \
    int main(void)                                                                             \
    {                                                                                          \
        return th_check_run(cm_suite(&(family)));                                              \
    }

#endif /* TUTTI_TEST_COLL_MATRIX_H */
