/* secret_file.c: the file in which rank 0 of a job that brought no secret leaves the one it made,
 * readable only by its user, for the ranks of its host; with it, who wrote it (process, parent
 * and session, with their start times, and its PID namespace) so that a reader can tell its own
 * job's file from another job's or a stale one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/sha256.h"
#include "auth.h"

#define MAGIC "tutti-secret-v3"
#define FILE_MAX 512

/* pidns_of is the inode of process `who`'s PID namespace ("self", or a pid), 0 if unknown:
 * the kernel numbers namespaces alike for every process that can see them. */
static unsigned long long pidns_of(const char *who)
{
    char path[64];
    struct stat sb;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", who);
    return stat(path, &sb) == 0 ? (unsigned long long)sb.st_ino : 0;
}

/* proc_start is pid's start time (clock ticks since boot, /proc/PID/stat field 22) and, when
 * ppid is not NULL, its parent's pid; 0 when there is no such process. With the pid it names a
 * process for good: a pid can be reused, a pid and start time cannot. */
static unsigned long long proc_start(int pid, int *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    int parent = 0;
    unsigned long long start = 0;
    /* fields 3 (state) 4 (ppid) ... 22 (starttime) */
    if (sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu",
               &parent, &start) != 2)
        return 0;
    if (ppid)
        *ppid = parent;
    return start;
}

/* dir_path names this user's private directory for the file: in XDG_RUNTIME_DIR when that is
 * this user's (`su` keeps the caller's, which the new user cannot write: the writer failed and
 * the other ranks waited for their timeout), else in /tmp. Writer and readers of one host and
 * user decide alike. */
static void dir_path(char *dir, size_t cap)
{
    const char *xdg = tutti__env_get("XDG_RUNTIME_DIR");
    struct stat sb;
    if (xdg != NULL && xdg[0] == '/' && stat(xdg, &sb) == 0 && S_ISDIR(sb.st_mode) &&
        sb.st_uid == geteuid())
        snprintf(dir, cap, "%s/tutti", xdg);
    else
        snprintf(dir, cap, "/tmp/tutti-%u", (unsigned)geteuid());
}

/* what_to_do: the advice for a directory that cannot hold the secret. One that another user
 * made (in /tmp anyone can make /tmp/tutti-<uid> first) this user cannot remove. */
static const char *what_to_do(const struct stat *sb)
{
    return sb->st_uid != geteuid()
               ? "another user made it, and this user cannot remove it (root can): set "
                 "TUTTI_JOB_TOKEN to the same random value for every rank, or XDG_RUNTIME_DIR to "
                 "a directory of this user's"
               : "remove it, or set TUTTI_JOB_TOKEN to the same random value for every rank";
}

/* dir_ok tells whether sb (the directory's fstat or lstat) is a real directory of this user that
 * nobody else may enter; if not, the error says why. */
static bool dir_ok(const char *dir, const struct stat *sb)
{
    if (!S_ISDIR(sb->st_mode)) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "bootstrap: cannot use %s for this job's secret: %s, of uid %u (a "
                         "symbolic link is refused); %s",
                         dir, S_ISLNK(sb->st_mode) ? "a symbolic link" : "not a directory",
                         (unsigned)sb->st_uid, what_to_do(sb));
        return false;
    }
    if (sb->st_uid != geteuid() || (sb->st_mode & 077) != 0) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "bootstrap: %s belongs to uid %u with mode %04o: a directory for this "
                         "job's secret must be this user's (uid %u) and closed to others; %s",
                         dir, (unsigned)sb->st_uid, (unsigned)(sb->st_mode & 07777),
                         (unsigned)geteuid(),
                         sb->st_uid == geteuid()
                             ? "chmod 700 it (or remove it), or set TUTTI_JOB_TOKEN to the same "
                               "random value for every rank"
                             : what_to_do(sb));
        return false;
    }
    return true;
}

/* open_dir makes (if needed) and opens the directory for the writer: it must be a real
 * directory (no symlink), owned by this user, that nobody else may enter. */
static int open_dir(char *dir, size_t cap)
{
    dir_path(dir, cap);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "bootstrap: cannot make %s for this job's secret: %s; set "
                         "TUTTI_JOB_TOKEN to the same random value for every rank instead",
                         dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    /* Not a directory, or one this user may not open (another user's, mode 0700): the error
     * says whose it is and what to do, in the words the other ranks use (tutti__secret_dir_check)
     * rather than "remove it", which this user cannot. */
    int open_err = errno;
    if (fd < 0 && lstat(dir, &sb) == 0 && !dir_ok(dir, &sb))
        return -1;
    errno = open_err;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int err = errno;
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "bootstrap: cannot open %s for this job's secret: %s%s; remove it, or "
                         "set TUTTI_JOB_TOKEN for every rank",
                         dir, strerror(err),
                         err == ELOOP || err == ENOTDIR ? " (a symbolic link is refused)" : "");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!dir_ok(dir, &sb)) {
        close(fd);
        return -1;
    }
    return fd;
}

tutti_status_t tutti__secret_dir_check(void)
{
    char dir[512];
    struct stat sb;
    dir_path(dir, sizeof dir);
    if (lstat(dir, &sb) != 0 || dir_ok(dir, &sb))
        return TUTTI_OK; /* none yet (rank 0 makes it), or one rank 0 can use */
    return TUTTI_ERR_BOOTSTRAP;
}

/* file_name names the file after the store it serves: the network namespace (ranks in other
 * namespaces may share /tmp and the address), the address and the port. */
static void file_name(const char *ip, int port, char *name, size_t cap)
{
    struct stat ns;
    unsigned long long netns = stat("/proc/self/ns/net", &ns) == 0 ? (unsigned long long)ns.st_ino
                                                                    : 0;
    snprintf(name, cap, "store-%llu-%s-%d", netns, ip, port);
}

/* sweep removes the files that killed rank 0s left behind (a store's file lives only while its
 * job meets), so that they do not pile up, one per port: those a day old whose writer this
 * host no longer runs. Age as well as the writer: a writer in another PID namespace, over the
 * same /tmp, is not visible from here, and its file is only minutes old while it is in use. */
static void sweep(int dfd)
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    time_t old = time(NULL) - 24 * 3600;
    struct dirent *e;
    for (int seen = 0; seen < 1000 && (e = readdir(d)) != NULL; seen++) {
        struct stat sb;
        bool tmp = e->d_name[0] == '.' && strstr(e->d_name, ".tmp") != NULL;
        if ((strncmp(e->d_name, "store-", 6) != 0 && !tmp) ||
            fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode) ||
            sb.st_uid != geteuid() || sb.st_mtime > old)
            continue;
        char text[64] = "", magic[32];
        int pid = 0;
        unsigned long long start = 0;
        int ffd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (ffd >= 0) {
            ssize_t n = read(ffd, text, sizeof text - 1);
            text[n > 0 ? n : 0] = '\0';
            close(ffd);
        }
        if (!tmp && sscanf(text, "%31s %d %llu", magic, &pid, &start) == 3 &&
            proc_start(pid, NULL) == start)
            continue;
        /* Only the file judged: another writer may have renamed a fresh one over the name
         * since (two rank 0s of one port sweeping at once). */
        struct stat now;
        if (fstatat(dfd, e->d_name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == sb.st_ino &&
            now.st_dev == sb.st_dev && now.st_mtime <= old)
            unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

tutti_status_t tutti__secret_file_write(const char *ip, int port, const tutti__auth_t *a,
                                        char *path, size_t cap)
{
    path[0] = '\0';
    char dir[512], name[128], tmp[160];
    int dfd = open_dir(dir, sizeof dir);
    if (dfd < 0)
        return TUTTI_ERR_BOOTSTRAP;
    sweep(dfd);
    file_name(ip, port, name, sizeof name);
    int me = (int)getpid(), parent = 0, sid = (int)getsid(0);
    unsigned long long start = proc_start(me, &parent), pstart = proc_start(parent, NULL);
    unsigned long long sstart = proc_start(sid, NULL);
    char job[2 * TUTTI__AUTH_JOB + 1], key[2 * TUTTI__AUTH_KEY + 1], text[FILE_MAX];
    tutti__hex(a->job, TUTTI__AUTH_JOB, job);
    tutti__hex(a->key, TUTTI__AUTH_KEY, key);
    int len = snprintf(text, sizeof text, "%s %d %llu %d %llu %d %llu %s %d %s %llu\n", MAGIC,
                       me, start, parent, pstart, sid, sstart, job, a->launcher_id ? 1 : 0, key,
                       pidns_of("self"));
    memset(key, 0, sizeof key);
    /* Written whole under a temporary name, then renamed over any stale file of an earlier
     * store on this port: a reader sees the old file or the new one, never half of one. */
    snprintf(tmp, sizeof tmp, ".%s.%d.tmp", name, me);
    unlinkat(dfd, tmp, 0);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && fchmod(fd, 0600) == 0 && write(fd, text, (size_t)len) == len;
    int err = errno;
    if (fd >= 0)
        close(fd);
    memset(text, 0, sizeof text);
    if (ok && renameat(dfd, tmp, dfd, name) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: rank 0 cannot write this job's secret to %s/%s: %s; "
                                "set TUTTI_JOB_TOKEN to the same random value for every rank "
                                "instead",
                                dir, name, strerror(err));
    }
    close(dfd);
    snprintf(path, cap, "%s/%s", dir, name);
    return TUTTI_OK;
}

void tutti__secret_file_remove(const char *path)
{
    if (path != NULL && path[0] != '\0')
        unlink(path);
}

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* unhex reads exactly 2n hex digits (nothing before, between or after them) into out. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
    if (strnlen(s, 2 * n + 1) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

tutti_status_t tutti__secret_file_read(const char *ip, int port, int rank, tutti__auth_t *a,
                                       bool *absent)
{
    *absent = false;
    /* One descriptor at a time (a rank near its RLIMIT_NOFILE holds the store's connection
     * too): the directory is checked by lstat, not opened. Nobody else can swap it after the
     * check: it is this user's, in its own directory or in sticky /tmp; and the file itself
     * must be a private regular file of this user. */
    char dir[512], name[128], path[700];
    dir_path(dir, sizeof dir);
    file_name(ip, port, name, sizeof name);
    struct stat ds;
    int fd = -1;
    if (lstat(dir, &ds) == 0) {
        if (!dir_ok(dir, &ds))
            return TUTTI_ERR_BOOTSTRAP;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
        *absent = errno == ENOENT;
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: rank %d is on the host of the rendezvous store at "
                                "%s:%d, but finds no secret of its job in %s/%s (%s): is that "
                                "store another job's, one whose ranks had all joined (two jobs "
                                "on one MASTER_PORT: give each its own)? Or are the ranks in "
                                "different containers, or under different XDG_RUNTIME_DIR (set "
                                "TUTTI_JOB_TOKEN to the same random value for every rank)?",
                                rank, ip, port, dir, name, strerror(errno));
    }
    struct stat sb;
    char text[FILE_MAX];
    ssize_t n = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
        (sb.st_mode & 077) == 0 && sb.st_size < FILE_MAX)
        n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: %s/%s is not a private file of this user (uid %u): "
                                "refusing to take a secret from it; remove it",
                                dir, name, (unsigned)geteuid());
    text[n] = '\0';
    char magic[32], job[64], key[128];
    int pid = 0, parent = 0, sid = 0, lid = 0;
    unsigned long long start = 0, pstart = 0, sstart = 0, ns = 0;
    if (sscanf(text, "%31s %d %llu %d %llu %d %llu %63s %d %127s %llu", magic, &pid, &start,
               &parent, &pstart, &sid, &sstart, job, &lid, key, &ns) != 11 ||
        strcmp(magic, MAGIC) != 0) {
        memset(text, 0, sizeof text);
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: %s/%s is garbled (another tutti version?); remove it",
                                dir, name);
    }
    memset(text, 0, sizeof text);
    uint8_t fjob[TUTTI__AUTH_JOB];
    bool ok = unhex(job, fjob, sizeof fjob) == 0 && unhex(key, a->key, TUTTI__AUTH_KEY) == 0;
    memset(key, 0, sizeof key);
    if (!ok)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: %s/%s is garbled (another tutti version?); remove it",
                                dir, name);
    /* The writer's process ids mean nothing in another PID namespace (a container each, over
     * one /tmp): neither whether it lives nor whose session it is can be told from here. */
    bool other_ns = ns != 0 && pidns_of("self") != 0 && ns != pidns_of("self");
    if (other_ns && !a->launcher_id && !lid)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: the rendezvous store at %s:%d is served by pid %d "
                                "of another PID namespace than this rank's (a container each?), "
                                "where process ids cannot show that two processes are one job: "
                                "set TUTTI_JOB_TOKEN to the same random value for every rank",
                                ip, port, pid);
    if (!other_ns && proc_start(pid, NULL) != start)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: the secret in %s/%s was left by pid %d, which has "
                                "exited: the store at %s:%d is not that process's; is another "
                                "program serving that port?",
                                dir, name, pid, ip, port);
    if (memcmp(fjob, a->job, sizeof fjob) != 0)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: the rendezvous store at %s:%d is served by pid %d, "
                                "rank 0 of another job (its launcher's job id differs): set "
                                "MASTER_PORT to a port of this job",
                                ip, port, pid);
    /* Without a launcher's id, one job on one host is the ranks that one process started, or
     * that were started from one terminal, script or service: they share rank 0's parent, or
     * rank 0 started them, or they are rank 0 (a test opening several ranks), or they share its
     * session (wrappers such as timeout put each rank under a parent of its own, but not in a
     * session of its own; torchrun gives each worker a session, but they share the agent as
     * their parent). */
    int me = (int)getpid(), myparent = 0, mysid = (int)getsid(0);
    unsigned long long mystart = proc_start(me, &myparent);
    unsigned long long myparent_start = proc_start(myparent, NULL);
    bool same = (myparent == parent && myparent_start == pstart) ||
                (myparent == pid && myparent_start == start) || (me == pid && mystart == start) ||
                (mysid == sid && proc_start(mysid, NULL) == sstart);
    if (!a->launcher_id && !lid && !same)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "bootstrap: the rendezvous store at %s:%d is served by pid %d "
                                "(parent %d, session %d); this rank, pid %d (parent %d, session "
                                "%d), looks like another job: set MASTER_PORT to a port of this "
                                "job; if they are one job, set TUTTI_JOB_TOKEN to the same random "
                                "value for every rank",
                                ip, port, pid, parent, sid, me, myparent, mysid);
    a->have_key = true;
    return TUTTI_OK;
}
