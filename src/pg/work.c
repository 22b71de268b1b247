/* work.c: work handles: wait with a timeout, test, status, error text, free. Collectives still
 * run in the posting thread, so a handle is complete when the post returns; the interface is the
 * one asynchronous execution will keep. */
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

static bool done(const tutti_work_t *w)
{
    return __atomic_load_n(&w->state, __ATOMIC_ACQUIRE) == TUTTI__WORK_DONE;
}

TUTTI_API tutti_status_t tutti_work_wait(tutti_work_t *w, double timeout_s)
{
    if (w == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_work_wait: work is NULL");
    double deadline = timeout_s < 0 ? -1.0 : tutti__now() + timeout_s;
    tutti__backoff_t b;
    tutti__backoff_init(&b, false);
    while (!done(w)) {
        if (deadline >= 0 && tutti__now() >= deadline)
            return TUTTI_IN_PROGRESS;
        tutti__backoff_pause(&b);
    }
    if (w->status < 0)
        snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", w->error);
    return w->status;
}

TUTTI_API tutti_status_t tutti_work_test(tutti_work_t *w, int *is_done)
{
    if (w == NULL || is_done == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_work_test: work or done is NULL");
    *is_done = done(w);
    return *is_done ? w->status : TUTTI_IN_PROGRESS;
}

TUTTI_API tutti_status_t tutti_work_status(const tutti_work_t *w)
{
    if (w == NULL)
        return TUTTI_ERR_INVALID_ARG;
    return done(w) ? w->status : TUTTI_IN_PROGRESS;
}

TUTTI_API const char *tutti_work_error(const tutti_work_t *w)
{
    return w != NULL && done(w) ? w->error : "";
}

TUTTI_API void tutti_work_free(tutti_work_t *w)
{
    if (w == NULL)
        return;
    tutti_work_wait(w, -1.0);
    free(w->owned);
    free(w);
}
