/* common.h: tutti's umbrella of internal helpers (errors, time, logging, environment, dtypes,
 * bf16/fp16 conversion); internal only, never installed. */
#ifndef TUTTI_COMMON_H
#define TUTTI_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tutti.h"

#define TUTTI__ERRLEN 1024

/* ---- errors ------------------------------------------------------------------------------ */

/* tutti__set_error formats a message into the calling thread's last-error text (read by
 * tutti_last_error) and returns status, so that `return tutti__set_error(...)` reads well. */
tutti_status_t tutti__set_error(tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* tutti__fmt_error writes a message into buf (TUTTI__ERRLEN bytes) and returns status. */
tutti_status_t tutti__fmt_error(char *buf, tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tutti__tls_error is the calling thread's last-error buffer (TUTTI__ERRLEN bytes). */
char *tutti__tls_error(void);

/* tutti__prefix_error puts a formatted prefix and ": " in front of the calling thread's
 * last-error text (what failed, then why) and returns status. */
tutti_status_t tutti__prefix_error(tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* tutti__append_error adds formatted text at the end of the calling thread's last-error text
 * (a hint at the cause, a note on the numbers in it), cut at TUTTI__ERRLEN. */
void tutti__append_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A copy of the thread's last-error text, kept across cleanup that may overwrite it (closing a
 * store, telling peers about a failure): tutti__save_error takes it, tutti__restore_error puts
 * it back and returns status. */
typedef struct tutti__saved_error {
    char text[TUTTI__ERRLEN];
} tutti__saved_error_t;
void tutti__save_error(tutti__saved_error_t *saved);
tutti_status_t tutti__restore_error(const tutti__saved_error_t *saved, tutti_status_t status);

/* tutti__format_ranks writes ranks[0..n) as "3, 5, 7" into buf (cap bytes, always terminated);
 * when total > n (a caller that kept only the first n of total ranks) it adds ", ... (total
 * in all)". Returns buf. */
char *tutti__format_ranks(char *buf, size_t cap, const int *ranks, int n, int total);

/* TUTTI__CHECK_GOTO runs cmd; on an error status stores it in st and jumps to label. */
#define TUTTI__CHECK_GOTO(cmd, st, label)                                                      \
    do {                                                                                       \
        (st) = (cmd);                                                                          \
        if ((st) < 0)                                                                          \
            goto label;                                                                        \
    } while (0)

#define TUTTI__CHECK(cmd)                                                                      \
    do {                                                                                       \
        tutti_status_t st_ = (cmd);                                                            \
        if (st_ < 0)                                                                           \
            return st_;                                                                        \
    } while (0)

/* ---- time -------------------------------------------------------------------------------- */

/* tutti__now returns CLOCK_MONOTONIC in seconds. */
double tutti__now(void);

/* tutti__sleep_us sleeps for us microseconds. */
void tutti__sleep_us(unsigned us);

/* A backoff for wait loops: spins briefly, then yields, then sleeps, so that ranks that
 * outnumber cores do not starve each other (and naps instead of yielding where yields hand
 * the core to a busy thread of the same scheduling group: time.c). oversubscribed skips the
 * spinning. */
typedef struct tutti__backoff {
    unsigned iter;
    double start;        /* when the wait began, or data last moved; 0 while it spins */
    uint64_t moved_seen; /* tutti__moved when the wait last looked */
    bool oversubscribed;
    bool keep_polling;   /* tutti__backoff_keep_polling */
    unsigned naps;       /* sleeps in place of yields since data last moved (time.c) */
    /* Where a nap can end early: nap(nap_arg, timeout_s) sleeps on a doorbell that whoever
     * the wait is for rings once it has published something (NULL: a plain sleep); set only
     * for one pause (tutti__backoff_pause_on). */
    void (*nap)(void *nap_arg, double timeout_s);
    void *nap_arg;
} tutti__backoff_t;

/* tutti__moved counts the chunks this thread's transport progress has moved (a thread-local, so
 * counting costs no shared cache line). A wait that sees it change knows data flows, and goes
 * back to short pauses: a long sleep between the chunks of a large message would slow it. */
extern _Thread_local uint64_t tutti__moved;
static inline void tutti__note_moved(void) { tutti__moved++; }

/* tutti__busy_core_naps: whether a wait bound beside a busy thread of its own scheduling group
 * naps instead of yielding (time.c); TUTTI_BUSY_CORE_NAP, read at communicator creation. */
extern bool tutti__busy_core_naps;

/* tutti__yield yields the core as a wait's pause does, and notes, as those do, when yields hand
 * it to a busy thread of the same scheduling group (time.c); tutti__yields_lost tells whether
 * this thread's yields are held off for that now: a waiter should then sleep instead. */
void tutti__yield(bool oversubscribed);
bool tutti__yields_lost(void);

void tutti__backoff_init(tutti__backoff_t *b, bool oversubscribed);
/* tutti__backoff_pause waits a little, longer the longer the wait has gone on. */
void tutti__backoff_pause(tutti__backoff_t *b);
/* tutti__backoff_waited tells how long b's wait has gone on: since it stopped spinning, or since
 * this thread's transport progress last moved data, whichever is later. A wait counts as long
 * from when data last moved, so that a large message whose sender came late does not crawl at
 * one chunk per long sleep. */
double tutti__backoff_waited(tutti__backoff_t *b);
/* A wait this long without data moving sleeps 1 ms at a time (an idle waiter then costs about
 * 3% of a core): the peer is late by far more than the millisecond each waiter it held up may
 * add once it comes (a chain of them: a millisecond a hop). */
#define TUTTI__LONG_WAIT_S 1.0

/* About 3 us of pause instructions (a pause is ~20 ns on Zen 4): longer than a hand-off between
 * two busy cores takes, short enough that a waiter sharing its core with the peer it waits for
 * soon steps aside. */
#define TUTTI__SPIN_ITERS 128u

/* tutti__backoff_spinning tells whether b still only spins (no yield or sleep yet): while it
 * does, a wait loop may skip its slower checks. */
static inline bool tutti__backoff_spinning(const tutti__backoff_t *b)
{
    return !b->oversubscribed && b->iter <= TUTTI__SPIN_ITERS;
}

/* tutti__backoff_keep_polling keeps b's long waits at one short sleep in sixteen pauses (the
 * rest yield; naps of at most 100 us where yields lose the core: time.c), for a waiter whose
 * data moves only while it polls and whose moving is not counted (an ofi piece, up to
 * TUTTI_OFI_CHUNK, counts once it has all arrived), or which must answer at once (a worker
 * told to spin). */
static inline void tutti__backoff_keep_polling(tutti__backoff_t *b) { b->keep_polling = true; }

/* tutti__backoff_step_aside makes the rest of b's wait yield at once, as if oversubscribed:
 * for a waiter that found the thread it waits for on its own core. */
static inline void tutti__backoff_step_aside(tutti__backoff_t *b) { b->oversubscribed = true; }

/* tutti__backoff_pause_on is tutti__backoff_pause whose nap, if it takes one (the sleeps that
 * stand in for yields beside a busy thread: time.c), sleeps through nap(arg, timeout_s), which
 * returns early when the awaited thread rings its doorbell; nap NULL: a plain sleep. */
static inline void tutti__backoff_pause_on(tutti__backoff_t *b, void (*nap)(void *, double),
                                           void *arg)
{
    b->nap = nap;
    b->nap_arg = arg;
    tutti__backoff_pause(b);
    b->nap = NULL;
    b->nap_arg = NULL;
}

static inline void tutti__cpu_relax(void) { __builtin_ia32_pause(); }

/* tutti__futex_wait sleeps while *word == expect, at most timeout_s seconds or until
 * tutti__futex_wake; *word may be in memory shared between processes. Wakes may be spurious:
 * callers look again. */
void tutti__futex_wait(volatile uint32_t *word, uint32_t expect, double timeout_s);
/* tutti__futex_wake wakes every thread, of any process, sleeping on word. */
void tutti__futex_wake(volatile uint32_t *word);

/* ---- cores (cpu.c) ------------------------------------------------------------------------ */

/* A set of cores, as many as a cpu_set_t holds, in a fixed layout that processes can exchange. */
#define TUTTI__CPUSET_WORDS 16
#define TUTTI__CPUSET_MAX (TUTTI__CPUSET_WORDS * 64)
typedef struct tutti__cpuset {
    uint64_t w[TUTTI__CPUSET_WORDS];
} tutti__cpuset_t;

static inline bool tutti__cpuset_has(const tutti__cpuset_t *s, int c)
{
    return c >= 0 && c < TUTTI__CPUSET_MAX && (s->w[c / 64] >> (c % 64) & 1u) != 0;
}
static inline void tutti__cpuset_add(tutti__cpuset_t *s, int c)
{
    if (c >= 0 && c < TUTTI__CPUSET_MAX)
        s->w[c / 64] |= (uint64_t)1 << (c % 64);
}
/* tutti__cpuset_count is the number of cores in s. */
int tutti__cpuset_count(const tutti__cpuset_t *s);
/* tutti__cpuset_next is the lowest core of s at or above from, or -1. */
int tutti__cpuset_next(const tutti__cpuset_t *s, int from);

/* tutti__fds_make_room makes sure this process may open `more` descriptors beyond those it
 * holds (what: what they are for, for the log), raising its soft limit of open files toward
 * the hard one if needed (a process-wide change: select() users beware of descriptors past
 * 1024); false if the hard limit is too low. *open_now and *limit: what it found, for messages
 * (the limit after any raise). fds.c. */
struct rlimit;
/* What tutti__fds_make_room keeps free beyond `more`, for what the program opens next. */
#define TUTTI__FDS_HEADROOM 16ull
bool tutti__fds_make_room(unsigned long long more, const char *what, unsigned long long *open_now,
                          struct rlimit *limit);

/* tutti__thread_fail_why writes into buf (cap bytes) why pthread_create failed with rc and
 * what to do (for EAGAIN: which limit, processes or address space), and returns buf.
 * thread_limits.c. */
const char *tutti__thread_fail_why(int rc, char *buf, size_t cap);

/* tutti__cpuset_self fills s with the cores the calling thread may run on (taskset, a
 * launcher's binding, cgroup cpusets); false (s empty) when the system does not say. */
bool tutti__cpuset_self(tutti__cpuset_t *s);

/* tutti__cpu_now is the core the calling thread runs on now, or -1; cheap enough for a wait
 * loop (no system call where the C library has rseq). */
int tutti__cpu_now(void);

/* tutti__round_bytes is how many bytes a direct (shm window) algorithm should move per rank
 * between two barriers when every rank has a core of its own: half of core 0's L2 (from sysfs,
 * so that every process on the node gets the same answer, even on a CPU whose cores differ),
 * 512 KiB where sysfs does not say, within [64 KiB, 1 MiB]. */
size_t tutti__round_bytes(void);

/* tutti__thread_movable tells whether the calling thread may run on more than one core (so
 * that tutti__thread_move can place it without pinning it); remembered per thread, looked up
 * again with refresh (a system call) and after each tutti__thread_move. */
bool tutti__thread_movable(bool refresh);

/* tutti__thread_move moves the calling thread onto core (one of its allowed cores) and, unless
 * keep, gives it back the set of cores it had, so that only where it runs now changes, not
 * where it (or a thread it creates later) may run. False, with nothing changed, when core is
 * not allowed or the system refuses. */
bool tutti__thread_move(int core, bool keep);

/* ---- logging (CCL_LOG_LEVEL) --------------------------------------------------------------- */

enum { TUTTI__LOG_ERROR = 0, TUTTI__LOG_WARN, TUTTI__LOG_INFO, TUTTI__LOG_DEBUG, TUTTI__LOG_TRACE };
/* The level in force; any thread reads it (relaxed atomic loads: a plain load on x86), only
 * tutti__log_init writes it. */
extern int tutti__log_level;
/* tutti__log_init reads CCL_LOG_LEVEL once per process (later calls do nothing). */
void tutti__log_init(void);
void tutti__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TUTTI__LOG(level, ...)                                                                 \
    do {                                                                                       \
        if ((level) <= __atomic_load_n(&tutti__log_level, __ATOMIC_RELAXED))                   \
            tutti__log((level), __VA_ARGS__);                                                  \
    } while (0)

/* ---- environment (env.c holds the one table of knobs with help text) ---------------------- */

typedef struct tutti__env_knob {
    const char *name;
    const char *deflt; /* NULL: unset by default */
    const char *help;
} tutti__env_knob_t;

/* tutti__env_knobs lists every variable tutti reads; tutti__env_knob_count their number. */
extern const tutti__env_knob_t tutti__env_knobs[];
extern const size_t tutti__env_knob_count;

/* tutti__env_get returns the variable's value, or its table default (NULL if none). Only names
 * in the table may be asked for (a debug assertion checks). */
const char *tutti__env_get(const char *name);

/* tutti__env_long parses an integer knob into *out (default used if unset); an unparsable or
 * out-of-range value is TUTTI_ERR_INVALID_ARG with a message naming the variable. */
tutti_status_t tutti__env_long(const char *name, long lo, long hi, long *out);
/* tutti__env_bytes is tutti__env_long for a byte count, which may carry K, M or G (KiB, MiB,
 * GiB), as the benchmarks' sizes and the CCL_<COLL> ranges do. */
tutti_status_t tutti__env_bytes(const char *name, long lo, long hi, long *out);

/* tutti__env_double: the same for a real number in [lo, hi] (NaN and infinities refused). */
tutti_status_t tutti__env_double(const char *name, double lo, double hi, double *out);

/* tutti__parse_size (parse_size.h, shared with bench/) parses "4096", "64K", "16M", "1G". */
#include "parse_size.h"

/* ---- dtypes and ops ----------------------------------------------------------------------- */

bool tutti__dtype_valid(tutti_dtype_t dt);
bool tutti__dtype_is_float(tutti_dtype_t dt);
bool tutti__op_valid(tutti_op_t op);
/* tutti__op_supported: false for AVG on integers and BAND/BOR/BXOR on floating types. */
bool tutti__op_supported(tutti_op_t op, tutti_dtype_t dt);

/* bf16 and fp16 conversions; narrowing rounds to nearest even, NaN stays a quiet NaN. */
static inline float tutti__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tutti__f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float tutti__f16_to_f32(uint16_t h);
uint16_t tutti__f32_to_f16(float f);

#endif /* TUTTI_COMMON_H */
