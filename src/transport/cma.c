/* cma.c: cross-memory attach: reading another local process's memory with process_vm_readv, one
 * copy made by the kernel, where ptrace rules allow it (same user; Yama's ptrace_scope 0 where
 * Yama is on; containers that forbid ptrace or filter the call refuse it), and why not. */
#include <errno.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport.h"

int tutti__cma_probe(int32_t pid, uint64_t addr, uint64_t want)
{
    uint64_t got = 0;
    struct iovec l = {&got, sizeof got}, r = {(void *)(uintptr_t)addr, sizeof got};
    if (pid <= 0)
        return ESRCH;
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0)
        return errno != 0 ? errno : EIO;
    /* Read, but not the value the peer wrote: pid names another process here (the ranks see
     * different PID namespaces). */
    return n == (ssize_t)sizeof got && got == want ? 0 : EBADMSG;
}

void tutti__cma_explain(int err, char *buf, size_t cap)
{
    const char *why;
    switch (err) {
    case EPERM:
        why = access("/proc/sys/kernel/yama/ptrace_scope", F_OK) == 0
                  ? "ptrace rules forbid it: the ranks run as different users, or one made "
                    "itself non-dumpable, or /proc/sys/kernel/yama/ptrace_scope is above 0, or "
                    "a container lacks CAP_SYS_PTRACE"
                  : "ptrace rules forbid it: the ranks run as different users, or one made "
                    "itself non-dumpable (prctl PR_SET_DUMPABLE), or a container or security "
                    "module (AppArmor, SELinux) denies ptrace; CAP_SYS_PTRACE allows it";
        break;
    case ENOSYS:
        why = "the kernel or a seccomp filter (a container's default profile) blocks "
              "process_vm_readv";
        break;
    case ESRCH:
    case EBADMSG:
        why = "the ranks see each other's process ids differently (they run in different PID "
              "namespaces: containers)";
        break;
    default:
        why = "unexpected failure";
        break;
    }
    snprintf(buf, cap, "%s (%s)", why, strerror(err));
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
