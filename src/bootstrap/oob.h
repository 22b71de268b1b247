/* oob.h: put, get, allgather and group barrier over an out-of-band key-value store (the TCP
 * store, or the caller's tutti_oob_t) while a communicator is created. */
#ifndef TUTTI_BOOTSTRAP_OOB_H
#define TUTTI_BOOTSTRAP_OOB_H

#include "../common/common.h"

typedef struct tutti__bootstrap {
    int rank, size;
    double deadline;    /* absolute, tutti__now() clock */
    tutti_oob_t oob;
    unsigned round;     /* allgather rounds so far; the same on every rank */
    const char *where;  /* for messages: "the TCP store at 127.0.0.1:29500", "the caller's store" */
    /* cancelled, when set, is asked between a wait's polls: an error status (with the reason
     * in the thread's error text) ends the wait with it (tutti_comm_shrink: a rank it counted
     * on died meanwhile, so the creation can never end); TUTTI_OK lets it go on. */
    tutti_status_t (*cancelled)(void *ctx);
    void *cancel_ctx;
    /* fail_keys: a rank whose creation fails says so under "fail/<rank>" in the store
     * (tutti__bs_report), and a wait for a rank's key looks there too, so that the others stop
     * at once with its reason. Set for the caller's store, which has no other way to tell;
     * tutti's TCP store carries failures itself (cancelled). */
    bool fail_keys;
} tutti__bootstrap_t;

/* tutti__bs_report puts this rank's failure, st and the thread's error text, under
 * "fail/<rank>" when bs->fail_keys; the error text is kept. At most once per creation. */
void tutti__bs_report(tutti__bootstrap_t *bs, tutti_status_t st);

/* tutti__bs_cancelled asks bs->cancelled, if set: TUTTI_OK, or the status to fail with. */
tutti_status_t tutti__bs_cancelled(tutti__bootstrap_t *bs);

/* tutti__bs_put stores a value under a key; keys are unique per communicator creation. */
tutti_status_t tutti__bs_put(tutti__bootstrap_t *bs, const char *key, const void *val, size_t len);

/* tutti__bs_get waits until bs->deadline for key, which rank from writes (-1: unknown), and
 * copies exactly len bytes (a value of another length is TUTTI_ERR_BOOTSTRAP). */
tutti_status_t tutti__bs_get(tutti__bootstrap_t *bs, const char *key, void *val, size_t len,
                             int from);

/*
 * tutti__bs_allgather: every rank contributes len bytes; all[] receives size * len bytes in rank
 * order. A rank missing at the deadline is TUTTI_ERR_BOOTSTRAP whose text names the missing
 * ranks.
 */
tutti_status_t tutti__bs_allgather(tutti__bootstrap_t *bs, const void *mine, size_t len, void *all);

/* tutti__bs_group_barrier: the n ranks in ranks[] (all calling with the same list and name)
 * wait for each other; name makes the keys unique. */
tutti_status_t tutti__bs_group_barrier(tutti__bootstrap_t *bs, const char *name, const int *ranks,
                                       int n);

#endif /* TUTTI_BOOTSTRAP_OOB_H */
