/* cma.c: cross-memory attach: reading another local process's memory with process_vm_readv, one
 * copy made by the kernel, where ptrace rules allow it (same user; Yama's ptrace_scope 0, or a
 * process that allowed it; containers that forbid ptrace refuse it). */
#include <errno.h>
#include <stdio.h>
#include <sys/uio.h>

#include "transport.h"

bool tutti__cma_probe(int32_t pid, uint64_t addr, uint64_t want)
{
    uint64_t got = 0;
    struct iovec l = {&got, sizeof got}, r = {(void *)(uintptr_t)addr, sizeof got};
    return pid > 0 && process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof got &&
           got == want;
}

tutti_status_t tutti__cma_read(const tutti__window_t *w, int r, uint64_t remote, void *dst,
                               size_t len, char *err)
{
    char *d = dst;
    size_t done = 0;
    while (done < len) {
        struct iovec l = {d + done, len - done},
                     rv = {(void *)(uintptr_t)(remote + done), len - done};
        ssize_t got = process_vm_readv(w->pids[r], &l, 1, &rv, 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return tutti__fmt_error(err, TUTTI_ERR_SYSTEM,
                                    "process_vm_readv of %zu bytes from rank %d (pid %d) failed "
                                    "after %zu: %s; set TUTTI_CMA=off to copy through shared "
                                    "memory instead",
                                    len - done, r, (int)w->pids[r], done,
                                    got < 0 ? strerror(errno) : "nothing read");
        done += (size_t)got;
    }
    return TUTTI_OK;
}
