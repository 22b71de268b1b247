/* check_p2p.c: point-to-point on shm and ofi at 2 to 8 ranks: a ring of asynchronous sends and
 * receives (several per pair, tags 0..1023, 0 bytes to 1 MiB, misaligned) and a blocking pair,
 * every byte compared. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

/* A ring of messages: to rank+1, from rank-1, several per pair with different tags and sizes,
 * posted even ranks send-first and odd ranks receive-first so that even an implementation
 * that runs them one at a time cannot deadlock. */
static void run_p2p(ctx_t *c, const cm_case_t *k)
{
    (void)k;
    if (c->size < 2)
        return;
    static const struct {
        size_t count;
        tutti_dtype_t dt;
        int tag;
    } msgs[] = {
        {0, TUTTI_INT8, 0}, {1, TUTTI_FLOAT32, 7}, {1 << 20, TUTTI_INT8, 1023}, {1, TUTTI_INT64, 1},
        {1031, TUTTI_BFLOAT16, 512},
    };
    enum { NM = sizeof msgs / sizeof msgs[0] };
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    tbuf_t S[NM], R[NM];
    tutti_work_t *ws[NM], *wr[NM];
    c->algo = NULL;
    cr_describe(c, "send/recv ring", TUTTI_INT8, -1, 0, -1, NULL);
    for (int m = 0; m < NM; m++) {
        size_t bytes = msgs[m].count * tutti_dtype_size(msgs[m].dt);
        tb_make(&S[m], bytes, m % 2);
        tb_make(&R[m], bytes, (m + 1) % 2);
        cr_fill_bytes(S[m].p, bytes, (uint64_t)c->rank, 1000u + (unsigned)m);
        ws[m] = wr[m] = NULL;
    }
    for (int m = 0; m < NM && !c->fatal; m++) {
        for (int half = 0; half < 2; half++) {
            bool send = (half == 0) == (c->rank % 2 == 0);
            tutti_status_t st;
            if (send)
                st = tutti_send(S[m].p, msgs[m].count, msgs[m].dt, next, msgs[m].tag, c->comm, &ws[m]);
            else
                st = tutti_recv(R[m].p, msgs[m].count, msgs[m].dt, prev, msgs[m].tag, c->comm, &wr[m]);
            if (st != TUTTI_OK) {
                cr_report(c, "message %d (%zu x %s, tag %d): %s returned %d (%s): %s", m, msgs[m].count,
                       tutti_dtype_name(msgs[m].dt), msgs[m].tag, send ? "tutti_send" : "tutti_recv",
                       st, tutti_strerror(st), tutti_comm_last_error(c->comm));
                c->fatal = true;
                break;
            }
        }
    }
    for (int m = 0; m < NM; m++) {
        tutti_work_t *h[2] = {ws[m], wr[m]};
        for (int k = 0; k < 2; k++) {
            if (h[k] == NULL)
                continue;
            tutti_status_t st = tutti_work_wait(h[k], -1.0);
            if (st != TUTTI_OK) {
                cr_report(c, "message %d: %s finished with %d (%s): %s", m, k ? "recv" : "send", st,
                          tutti_strerror(st), tutti_work_error(h[k]));
                c->fatal = true;
            }
            tutti_work_free(h[k]);
        }
    }
    if (!c->fatal) {
        for (int m = 0; m < NM; m++) {
            size_t bytes = R[m].bytes;
            char *exp = malloc(bytes + 1);
            cr_fill_bytes(exp, bytes, (uint64_t)prev, 1000u + (unsigned)m);
            char what[96];
            snprintf(what, sizeof what, "message %d (%zu bytes, tag %d) from rank %d", m, bytes,
                     msgs[m].tag, prev);
            cr_cmp(c, what, exp, R[m].p, bytes, 1);
            tb_guards(c, &R[m], what);
            free(exp);
        }
    }
    for (int m = 0; m < NM; m++) {
        tb_free(&S[m]);
        tb_free(&R[m]);
    }

    /* blocking calls between ranks 0 and 1 */
    if (!c->fatal && c->rank < 2) {
        size_t n = 1 << 20;
        tbuf_t B;
        tb_make(&B, n, 0);
        char *exp = malloc(n);
        cr_fill_bytes(exp, n, 77, 77);
        tutti_status_t st;
        if (c->rank == 0) {
            memcpy(B.p, exp, n);
            st = tutti_send(B.p, n, TUTTI_UINT8, 1, 3, c->comm, NULL);
        } else {
            st = tutti_recv(B.p, n, TUTTI_UINT8, 0, 3, c->comm, NULL);
        }
        cr_describe(c, "blocking send/recv", TUTTI_UINT8, -1, n, -1, NULL);
        if (st != TUTTI_OK) {
            cr_report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
            c->fatal = true;
        } else {
            cr_cmp(c, "buf", exp, B.p, n, 1);
        }
        tb_free(&B);
        free(exp);
    }
}

static const cm_family_t family = {
    .name = "p2p",
    .body = {[CM_P2P] = run_p2p},
};

CM_FAMILY_MAIN(family)
