/* config.c: how a communicator is asked for: the caller's tutti_comm_config_t over the
 * environment's knobs (timeout, transport, workers, inline size, the calling thread's
 * placement), checked and kept. */
#include <limits.h>
#include <stddef.h>

#include "comm.h"

tutti_status_t tutti__config_read(const tutti_comm_config_t *cfg, tutti__config_t *out)
{
    double t = 300.0;
    bool given = false;
    /* inline_max -1 unless TUTTI_INLINE_MAX says otherwise: an asynchronous post returns at
     * once, as MPI's nonblocking calls do. Run inline, a small one waits in the caller for the
     * peers to join, and a legal program (rank 0: iallreduce, then a blocking send; rank 1: the
     * matching receive, then its iallreduce) waits for the timeout. */
    long workers = 1, worker_wait = 1, inline_max = -1;
    TUTTI__CHECK(tutti__env_long("CCL_WORKER_COUNT", 1, 16, &workers));
    TUTTI__CHECK(tutti__env_bytes("TUTTI_INLINE_MAX", 0, LONG_MAX, &inline_max));
    TUTTI__CHECK(tutti__env_long("CCL_WORKER_WAIT", 0, 1, &worker_wait));
    long naps = 1;
    TUTTI__CHECK(tutti__env_long("TUTTI_BUSY_CORE_NAP", 0, 1, &naps));
    TUTTI__CHECK(tutti__env_double("TUTTI_TIMEOUT", TUTTI__TIMEOUT_MIN, TUTTI__TIMEOUT_MAX, &t));
    const char *transport = tutti__env_get("TUTTI_TRANSPORT");
    const char *caller = tutti__env_get("TUTTI_CALLER_AFFINITY");
    static const char *const callers[] = {"auto", "move", "pin", "none"};
    const char *caller_mode = NULL;
    for (size_t i = 0; i < sizeof callers / sizeof callers[0]; i++)
        if (strcmp(caller, callers[i]) == 0)
            caller_mode = callers[i];
    if (caller_mode == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "TUTTI_CALLER_AFFINITY=\"%s\": valid are auto (the default), "
                                "move, pin and none",
                                caller);
    if (cfg != NULL) {
        if (cfg->struct_size < offsetof(tutti_comm_config_t, timeout_s) + sizeof(double))
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "tutti_comm_config_t.struct_size is %zu: initialize the "
                                    "config with TUTTI_COMM_CONFIG_INIT",
                                    cfg->struct_size);
        if (cfg->timeout_s != cfg->timeout_s ||
            (cfg->timeout_s > 0 &&
             (cfg->timeout_s < TUTTI__TIMEOUT_MIN || cfg->timeout_s > TUTTI__TIMEOUT_MAX)))
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "tutti_comm_config_t.timeout_s is %g: use seconds from %g to "
                                    "%g, or 0 for TUTTI_TIMEOUT",
                                    cfg->timeout_s, TUTTI__TIMEOUT_MIN, TUTTI__TIMEOUT_MAX);
        if (cfg->timeout_s > 0) {
            t = cfg->timeout_s;
            given = true;
        }
        if (cfg->struct_size >= offsetof(tutti_comm_config_t, transport) + sizeof(char *) &&
            cfg->transport != NULL)
            transport = cfg->transport;
        if (cfg->struct_size >= offsetof(tutti_comm_config_t, worker_count) + sizeof(int) &&
            cfg->worker_count != 0) {
            if (cfg->worker_count < 1 || cfg->worker_count > 16)
                return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                        "tutti_comm_config_t.worker_count is %d: use 1..16, or 0 "
                                        "for CCL_WORKER_COUNT",
                                        cfg->worker_count);
            workers = cfg->worker_count;
        }
        if (cfg->struct_size >= offsetof(tutti_comm_config_t, inline_max) + sizeof(long) &&
            cfg->inline_max != 0) {
            if (cfg->inline_max < -1)
                return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                        "tutti_comm_config_t.inline_max is %ld: use a byte count, "
                                        "0 for TUTTI_INLINE_MAX, or -1 for never",
                                        cfg->inline_max);
            inline_max = cfg->inline_max; /* -1: no asynchronous post inline, blocking calls may */
        }
    }
    if (strcmp(transport, "auto") != 0 && strcmp(transport, "shm") != 0 &&
        strcmp(transport, "ofi") != 0)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "unknown transport \"%s\" (TUTTI_TRANSPORT or config): valid are "
                                "auto, shm, ofi",
                                transport);
    /* Keep a static copy: sub-communicators inherit it after the caller's string is gone. */
    const char *mode = strcmp(transport, "shm") == 0 ? "shm" : strcmp(transport, "ofi") == 0 ? "ofi" : "auto";
    *out = (tutti__config_t){t, given, mode, workers, worker_wait != 0, inline_max, caller_mode};
    /* The process's, as the variable is: set once the creation's settings all passed. */
    __atomic_store_n(&tutti__busy_core_naps, naps == 1, __ATOMIC_RELAXED);
    return TUTTI_OK;
}

const char *tutti__config_token(const tutti_comm_config_t *cfg)
{
    if (cfg == NULL ||
        cfg->struct_size < offsetof(tutti_comm_config_t, job_token) + sizeof(const char *))
        return NULL;
    return cfg->job_token;
}
