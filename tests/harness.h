/* harness.h: a small fork harness that runs one test function as N ranks of a tutti job on
 * this machine (its own rendezvous port, environment and deadline), plus helpers the tests
 * share: failure messages that name the rank, a page shared by all ranks, and bf16 / fp16
 * converters written independently of the library's. */
#ifndef TUTTI_TEST_HARNESS_H
#define TUTTI_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#define TH_MAX_RANKS 64

/* th_fn is a rank's body: return 0 when everything it checked passed. */
typedef int (*th_fn)(int rank, int size, void *arg);

typedef struct th_opts {
    const char *transport; /* TUTTI_TRANSPORT for every rank; NULL leaves it unset */
    double timeout_s;      /* overall deadline; stragglers are SIGKILLed after it */
    double rank_timeout_s; /* TUTTI_TIMEOUT in the ranks; <= 0: 20 s */
    int nstart;            /* start only ranks 0 .. nstart-1 (WORLD_SIZE stays nranks); 0: all */
    int kill_rank;         /* the parent SIGKILLs this rank kill_after_s after the start; -1: none */
    double kill_after_s;
    int kill_after_ready;  /* nonzero: kill_after_s counts from when every rank called th_ready */
    const char *env[8];    /* extra "NAME=VALUE" for every rank ("NAME" alone unsets); NULL ends */
} th_opts_t;

#define TH_OPTS_INIT {NULL, 60.0, 0.0, 0, -1, 0.0, 0, {NULL}}

/*
 * th_run_opts picks a free port on 127.0.0.1, forks nstart ranks, each with RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, TUTTI_TRANSPORT and TUTTI_TIMEOUT set (the CCL_<COLL> overrides and
 * other launchers' variables unset), runs fn in each and _exit()s with its result. It waits
 * for all of them until timeout_s, SIGKILLs the ones left, and returns 0 only if every rank
 * exited 0; a rank killed on purpose (kill_rank or th_kill_rank) does not count. Each failure
 * is printed to stderr (rank, exit code or signal).
 */
int th_run_opts(int nranks, const th_opts_t *o, th_fn fn, void *arg);

/* th_run is th_run_opts with only a transport and a deadline. */
int th_run(int nranks, const char *transport, double timeout_s, th_fn fn, void *arg);

/* The page every rank of the current th_run shares (zeroed at each start). */
typedef struct th_shared {
    volatile int pids[TH_MAX_RANKS];
    volatile double killed_at;  /* th_now() when a rank was killed on purpose, 0 if none */
    volatile int killed_rank;   /* -1 if none */
    volatile uint64_t killed_mask;
    volatile int ready;         /* ranks that called th_ready */
    volatile double all_ready_at; /* th_now() when the last one did, 0 before */
    volatile long counter;      /* free for tests (atomics: __atomic_*) */
    volatile long slots[64];    /* free for tests */
} th_shared_t;

/* th_free_port returns a TCP port nobody was bound to a moment ago, never one th_run picks for
 * its own rendezvous (for a test's second communicator); -1 if none is found. */
int th_free_port(void);

/* th_await_slot waits until th_shared()->slots[i] is nonzero, up to limit_s: 0, or -1 after
 * saying so (the rank that was to set it failed or left early: its own output says why). */
int th_await_slot(int i, double limit_s);

/* th_await_proc_state waits until /proc says pid is in one of states (stat's letters: "tT"
 * stopped, "ZX" gone; X also when pid has no /proc entry any more), up to limit_s: 0, or -1
 * after saying so. */
int th_await_proc_state(int pid, const char *states, double limit_s);

/* th_shared returns the shared page (valid in the parent and in every rank). */
th_shared_t *th_shared(void);

/* th_kill_rank SIGKILLs rank of the current run (from the parent or any rank) and records
 * when, so that the harness does not count its death as a failure. */
void th_kill_rank(int rank);

/* th_ready tells the harness that this rank is set up (see kill_after_ready). */
void th_ready(void);

/* th_now is CLOCK_MONOTONIC in seconds (the same clock in every process). */
double th_now(void);

/* In a rank: its rank, size and transport ("-" when unset), for messages. */
extern int th_rank, th_size;
extern const char *th_transport;

/* th_fail prints "[rank r/n tp] message" to stderr and returns 1 (so `return th_fail(...)`). */
int th_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* th_hex writes an n-byte little-endian element as "0x" and hex digits, most significant first
 * (an fp32 1.0 reads 0x3f800000) into out, which holds at least 2n+3 chars; returns out. */
char *th_hex(char *out, const void *p, size_t n);

/* th_mentions_rank tells whether text names rank r: "rank 1", "ranks 0, 1", "rank=1",
 * "rank(s) 1 2"... (a number equal to r among the few tokens after a word starting "rank"). */
int th_mentions_rank(const char *text, int r);

/* th_mentions_number tells whether text holds n as a whole number (not part of a longer one). */
int th_mentions_number(const char *text, unsigned long long n);

/* bf16 / fp16 by value, independent of the library: round to nearest even, overflow to Inf,
 * NaN to a quiet NaN (sign kept), subnormals exact. */
uint16_t th_to_f16(double x);
uint16_t th_to_bf16(double x);
double th_from_f16(uint16_t h);
double th_from_bf16(uint16_t h);

/* th_hash64 mixes its inputs into 64 random-looking bits (splitmix64 finalizer). */
static inline uint64_t th_hash64(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 0x2545f4914f6cdd1dull) * 0x94d049bb133111ebull;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* th_shm_snapshot lists the "tutti-*" names in /dev/shm into names (cap entries of 256 chars);
 * returns how many. th_shm_new counts names now present that the snapshot lacked, printing
 * each. */
int th_shm_snapshot(char (*names)[256], int cap);
int th_shm_new(char (*before)[256], int nbefore);

#endif /* TUTTI_TEST_HARNESS_H */
