/* fds.c: room for the descriptors a process is about to open (a rendezvous store's clients, a
 * liveness mesh's connections): its soft limit of open files, raised toward the hard one where
 * it falls short, as a job of a thousand ranks needs under the usual soft limit of 1024. */
#include <dirent.h>
#include <sys/resource.h>

#include "common.h"

/* open_count is how many descriptors this process holds now; 0 if /proc cannot say. */
static unsigned long long open_count(void)
{
    unsigned long long n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n > 3 ? n - 3 : n; /* ".", ".." and the directory's own descriptor */
}

bool tutti__fds_make_room(unsigned long long more, const char *what, unsigned long long *open_now,
                          struct rlimit *limit)
{
    struct rlimit rl;
    *open_now = open_count();
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        limit->rlim_cur = limit->rlim_max = RLIM_INFINITY;
        return true; /* cannot tell: the opens themselves will say */
    }
    *limit = rl;
    unsigned long long need = *open_now + more + TUTTI__FDS_HEADROOM;
    if (rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur)
        return true;
    if (rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max)
        return false;
    /* Some room beyond the need, for what the program opens next; never past the hard limit. */
    struct rlimit up = {need + need / 4, rl.rlim_max};
    if (rl.rlim_max != RLIM_INFINITY && up.rlim_cur > rl.rlim_max)
        up.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &up) != 0)
        return false;
    TUTTI__LOG(TUTTI__LOG_INFO, "raised this process's soft limit of open files from %llu to %llu "
               "for %s", (unsigned long long)rl.rlim_cur, (unsigned long long)up.rlim_cur, what);
    *limit = up;
    return true;
}
