/* tutti.h: the public C API of tutti, a collective-communication library for data-parallel
 * training on CPUs (communicators, collectives, work handles, status codes). */
#ifndef TUTTI_H
#define TUTTI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 1
#define TUTTI_VERSION_PATCH 0

#if defined(TUTTI_BUILDING_LIBRARY)
#define TUTTI_API __attribute__((visibility("default")))
#else
#define TUTTI_API
#endif

/**
 * The status codes, as one X-macro list so that codes and messages cannot drift apart.
 * TUTTI_OK is 0, errors are negative, TUTTI_IN_PROGRESS (a work handle still running) is 1.
 */
#define TUTTI_STATUS_MAP(X)                                                                    \
    X(OK, 0, "success")                                                                        \
    X(IN_PROGRESS, 1, "operation still in progress")                                           \
    X(ERR_INVALID_ARG, -1, "invalid argument")                                                 \
    X(ERR_INVALID_COMM, -2, "communicator is NULL, destroyed or was never created")            \
    X(ERR_COMM_FAILED, -3, "communicator failed earlier; destroy it and create a new one")     \
    X(ERR_TIMEOUT, -4, "operation timed out")                                                  \
    X(ERR_PEER_FAILED, -5, "a peer rank died or left")                                         \
    X(ERR_ABORTED, -6, "operation aborted")                                                    \
    X(ERR_NO_MEMORY, -7, "out of memory")                                                      \
    X(ERR_NOT_SUPPORTED, -8, "not supported")                                                  \
    X(ERR_BOOTSTRAP, -9, "bootstrap (rank discovery or rendezvous) failed")                    \
    X(ERR_TRANSPORT, -10, "transport error")                                                   \
    X(ERR_SYSTEM, -11, "system call failed")                                                   \
    X(ERR_INTERNAL, -12, "internal error (a bug in tutti; please report it)")                  \
    X(ERR_MISMATCH, -13, "ranks posted different collectives (count, dtype, op, root or order)")

/** Status of every tutti call: TUTTI_OK (0), TUTTI_IN_PROGRESS (1) or an error (< 0). */
typedef enum tutti_status {
#define TUTTI_STATUS_ENUM_(name, value, text) TUTTI_##name = value,
    TUTTI_STATUS_MAP(TUTTI_STATUS_ENUM_)
#undef TUTTI_STATUS_ENUM_
} tutti_status_t;

/** Element types. */
typedef enum tutti_dtype {
    TUTTI_INT8 = 0,
    TUTTI_UINT8,
    TUTTI_INT32,
    TUTTI_INT64,
    TUTTI_FLOAT16, /**< IEEE 754 binary16 */
    TUTTI_BFLOAT16,
    TUTTI_FLOAT32,
    TUTTI_FLOAT64,
    TUTTI_DTYPE_COUNT
} tutti_dtype_t;

/** Reduction operations. AVG is for floating types; BAND, BOR, BXOR for integer types.
 *  Integer SUM and PROD wrap around (two's complement), as in MPI. */
typedef enum tutti_op {
    TUTTI_SUM = 0,
    TUTTI_PROD,
    TUTTI_MIN,
    TUTTI_MAX,
    TUTTI_AVG,
    TUTTI_BAND,
    TUTTI_BOR,
    TUTTI_BXOR,
    TUTTI_OP_COUNT
} tutti_op_t;

/** Collectives, as named by algorithm overrides (tutti_comm_set_algorithm, CCL_<COLL>). */
typedef enum tutti_coll {
    TUTTI_COLL_ALLREDUCE = 0, /**< CCL_ALLREDUCE */
    TUTTI_COLL_ALLGATHER,     /**< CCL_ALLGATHER; also allgatherv */
    TUTTI_COLL_ALLTOALL,      /**< CCL_ALLTOALL; also alltoallv */
    TUTTI_COLL_REDUCE_SCATTER, /**< CCL_REDUCE_SCATTER */
    TUTTI_COLL_BCAST,         /**< CCL_BCAST */
    TUTTI_COLL_REDUCE,        /**< CCL_REDUCE */
    TUTTI_COLL_BARRIER,       /**< CCL_BARRIER */
    TUTTI_COLL_COUNT
} tutti_coll_t;

/** Pass as sendbuf to say the input is already in recvbuf (MPI_IN_PLACE). sendbuf == recvbuf
 *  means the same for allreduce, reduce and alltoall(v); for allgather(v), in place means the
 *  own block already sits at its place in recvbuf (sendbuf == recvbuf is refused where that
 *  place is not recvbuf's start, which receives another rank's block); for reduce_scatter,
 *  the whole input is in recvbuf and the result replaces its first recvcount elements
 *  (tutti_reduce_scatter also takes NCCL's form, recvbuf = sendbuf + rank * recvcount). */
#define TUTTI_IN_PLACE ((const void *)1)

typedef struct tutti_comm tutti_comm_t; /**< A communicator (opaque). */
typedef struct tutti_work tutti_work_t; /**< A posted operation's handle (opaque). */

/**
 * Out-of-band exchange for bootstrap: a key-value store shared by all ranks, supplied by the
 * caller (PyTorch's c10d Store, an MPI job, ...). Keys are NUL-terminated strings; tutti
 * writes every key once.
 */
typedef struct tutti_oob {
    void *ctx; /**< passed back to the callbacks */
    /** Store value under key. @return 0 on success, nonzero on failure. */
    int (*put)(void *ctx, const char *key, const void *value, size_t len);
    /** Wait up to timeout_s seconds for key, then copy its value (at most cap bytes) to buf and
     *  set *len to the value's full length. @return 0 found, 1 not there after timeout_s,
     *  negative on failure. timeout_s == 0 asks without waiting. */
    int (*get)(void *ctx, const char *key, void *buf, size_t cap, size_t *len, double timeout_s);
} tutti_oob_t;

/** Options for communicator creation; every field has a default. Initialize with
 *  TUTTI_COMM_CONFIG_INIT so that struct_size tells the library which fields exist. */
typedef struct tutti_comm_config {
    size_t struct_size;    /**< sizeof(tutti_comm_config_t) as the caller compiled it */
    double timeout_s;      /**< deadline of every wait, 0.001 to 1e9 s; <= 0: TUTTI_TIMEOUT or
                                300 s (NaN is refused) */
    const char *transport; /**< "auto", "shm" or "ofi"; NULL: TUTTI_TRANSPORT or "auto" */
    int worker_count;      /**< worker threads, 1..16; 0: CCL_WORKER_COUNT or 1 */
    long inline_max;       /**< bytes up to which an asynchronous collective posted on an idle
                                communicator runs in the caller's thread (blocking there until
                                the peers join); 0: TUTTI_INLINE_MAX, or unset -1; -1: never
                                (every post returns at once; a blocking call still runs in the
                                caller's thread when nothing is queued). Point-to-point never goes through
                                the queue: see tutti_send. */
    const char *job_token; /**< the job's secret for tutti_comm_init_env, the same string on
                                every rank, at least 16 characters (tutti_job_token() makes one
                                on rank 0; hand it to the others as NCCL's unique id is handed
                                out); NULL: TUTTI_JOB_TOKEN, else the launcher's (see
                                docs/security.md). Used during creation only. */
} tutti_comm_config_t;

#define TUTTI_COMM_CONFIG_INIT {sizeof(tutti_comm_config_t), 0.0, NULL, 0, 0, NULL}

/** Bytes tutti_job_token writes: 64 hex digits and a NUL. */
#define TUTTI_JOB_TOKEN_LEN 65

/** @return the library's version, "MAJOR.MINOR.PATCH". */
TUTTI_API const char *tutti_version(void);

/**
 * Make a job token: 256 random bits as 64 hex digits. Rank 0 makes it and hands it to every rank
 * (an MPI broadcast, a file only the job's user reads, the launcher's environment as
 * TUTTI_JOB_TOKEN); each passes it as tutti_comm_config_t.job_token. A stranger who does not
 * know it cannot join the job or read anything from its rendezvous.
 * @param buf receives the token, at least TUTTI_JOB_TOKEN_LEN bytes.
 * @return TUTTI_OK, TUTTI_ERR_INVALID_ARG (buf NULL or len too small), or TUTTI_ERR_SYSTEM
 *         when the kernel gives no random bytes.
 */
TUTTI_API tutti_status_t tutti_job_token(char *buf, size_t len);

/** @return a static text describing status (never NULL, also for unknown values). */
TUTTI_API const char *tutti_strerror(tutti_status_t status);

/** @return the size in bytes of one element of dtype, or 0 for an unknown dtype. */
TUTTI_API size_t tutti_dtype_size(tutti_dtype_t dtype);

/** @return "bf16", "fp32", ... or "unknown". */
TUTTI_API const char *tutti_dtype_name(tutti_dtype_t dtype);

/** @return "sum", "avg", ... or "unknown". */
TUTTI_API const char *tutti_op_name(tutti_op_t op);

/**
 * Create a communicator from the launcher's environment. Rank and size come from RANK /
 * WORLD_SIZE (torchrun), PMI_RANK / PMI_SIZE (MPICH, Intel MPI), OMPI_COMM_WORLD_RANK / SIZE
 * (Open MPI) or SLURM_PROCID / SLURM_NTASKS, in that order; a single process with none of
 * them is rank 0 of 1. Ranks meet at a TCP store served by rank 0 on MASTER_ADDR:MASTER_PORT
 * (default 127.0.0.1:29500), listening on that address only, where each proves that it holds
 * the job's secret (config->job_token, TUTTI_JOB_TOKEN, the launcher's; docs/security.md); a
 * job of one rank serves no store. Collective over all ranks; blocks until all have arrived or
 * the timeout passes (the error then names the missing ranks). A rank that refuses its own
 * settings (config or environment) still meets the others at the store, for at most 30 s, to
 * tell them why, then returns its error; they fail within about a second, naming it.
 * @param config NULL for defaults.
 * @param comm receives the new communicator.
 * @return TUTTI_OK, or an error with the text in tutti_last_error().
 */
TUTTI_API tutti_status_t tutti_comm_init_env(const tutti_comm_config_t *config,
                                             tutti_comm_t **comm);

/**
 * Create a communicator of size ranks whose bootstrap travels through the caller's key-value
 * store. Collective over all ranks. A rank that fails (its config refused included) puts
 * "fail/<rank>" (its status and error text) in the store, once; a rank waiting for another's
 * keys asks for that one every half second (get with a 1 ms timeout), and fails at once with
 * its reason. Give each communicator's creation keys of its own (a prefix), as c10d does.
 * @param rank this process's rank, 0 <= rank < size.
 * @param size number of ranks.
 * @param oob the caller's store; it is used only during this call.
 * @param config NULL for defaults.
 * @param comm receives the new communicator.
 */
TUTTI_API tutti_status_t tutti_comm_init(int rank, int size, const tutti_oob_t *oob,
                                         const tutti_comm_config_t *config, tutti_comm_t **comm);

/**
 * Destroy a communicator. On a healthy communicator this waits (up to the timeout) until every
 * live peer has destroyed it too, so that no rank frees memory a peer still reads; on a failed
 * one it returns at once. Any later call with this handle returns TUTTI_ERR_INVALID_COMM.
 * Work handles of this communicator stay valid and must still be freed. Destroy communicators in
 * the same order on every rank (as MPI_Comm_free is ordered): a rank that waits in the destroy
 * of one while a peer waits in the destroy of another waits until the timeout, and gets
 * TUTTI_ERR_TIMEOUT. A child of fork() can neither use nor destroy its parent's communicators
 * (TUTTI_ERR_INVALID_COMM, saying so; the parent's go on unharmed); it may create its own.
 * No other thread may be inside a call on comm meanwhile (the memory it uses is freed): a
 * watchdog thread calls tutti_comm_abort, which ends such calls at once, and the destroy comes
 * once they have returned.
 */
TUTTI_API tutti_status_t tutti_comm_destroy(tutti_comm_t *comm);

/**
 * Abort: every operation still queued or running on comm, and every later one, fails fast with
 * TUTTI_ERR_ABORTED. A collective the abort ends while it runs fails on the other ranks too
 * (TUTTI_ERR_PEER_FAILED, "... failed (operation aborted) in its call #N"), where they are in it
 * or come to it later; their later operations with this rank fail by their deadline or when it
 * destroys the communicator or exits. Safe from any thread, and from a completion callback. The
 * handle must still be destroyed.
 */
TUTTI_API tutti_status_t tutti_comm_abort(tutti_comm_t *comm);

/**
 * The straggler report so far (docs/tracing.md): per collective and size class, which ranks
 * posted the call last, how often and how far behind, and how long each rank waited for the
 * last one, over the latest TUTTI_REPORT_CALLS collectives. Collective: every rank calls it,
 * in the same order as its other collectives; rank 0 gets the text (cut to cap bytes), the
 * others "". Needs recording on (TUTTI_REPORT=1 or TUTTI_TRACE set on any rank when comm was
 * created); TUTTI_REPORT=1 also prints it to stderr at tutti_comm_destroy.
 * @return TUTTI_OK, TUTTI_ERR_NOT_SUPPORTED (nothing recorded), TUTTI_ERR_INVALID_ARG (text NULL
 *         or cap < 2), or a failure of the collectives it runs.
 */
TUTTI_API tutti_status_t tutti_comm_report(tutti_comm_t *comm, char *text, size_t cap);

/**
 * Change comm's timeout (tutti_comm_config_t.timeout_s): an operation that starts waiting from
 * now on gives up timeout_s seconds after its first wait began; operations already waiting keep
 * their deadline. Communicators split from comm later keep the timeout comm was created with.
 * Safe from any thread. (torch's Backend.setTimeout.)
 * @return TUTTI_OK, TUTTI_ERR_INVALID_ARG if timeout_s is not from 0.001 to 1e9 s, or
 *         TUTTI_ERR_INVALID_COMM.
 */
TUTTI_API tutti_status_t tutti_comm_set_timeout(tutti_comm_t *comm, double timeout_s);

/**
 * Give the operations the calling thread posts from now on (collectives, sends and receives, on
 * any communicator) a timeout of their own instead of their communicator's: a collective gives
 * up timeout_s seconds after its first wait began, a send or receive timeout_s seconds after
 * its post. 0 goes back to the communicator's timeout. Operations already posted keep theirs.
 * A call that times out fails as it would at the communicator's timeout (TUTTI_ERR_TIMEOUT; a
 * collective fails its communicator). This is c10d's per-call `opts.timeout`: set it around
 * one post and restore the previous value.
 * @param previous if not NULL, receives the setting this replaces (0: none).
 * @return TUTTI_OK, or TUTTI_ERR_INVALID_ARG if timeout_s is neither 0 nor from 0.001 to 1e9 s
 *         (nothing changes).
 */
TUTTI_API tutti_status_t tutti_set_call_timeout(double timeout_s, double *previous);

/** The color of a rank that joins no new communicator in tutti_comm_split. */
#define TUTTI_UNDEFINED (-1)

/**
 * Split comm into sub-communicators (MPI_Comm_split): ranks that pass the same color form one,
 * ranked by key (ties by rank in comm). Collective over every rank of comm, posted in order
 * with its other operations. Each new communicator has its own transports, ordering, sequence
 * numbers and workers, and is destroyed on its own (before or after comm, in the same order
 * on every rank: tutti_comm_destroy).
 * @param color >= 0, or TUTTI_UNDEFINED to join none (*newcomm is then NULL).
 * @param newcomm receives the new communicator.
 */
TUTTI_API tutti_status_t tutti_comm_split(tutti_comm_t *comm, int color, int key,
                                          tutti_comm_t **newcomm);

/**
 * A communicator of the listed ranks of comm, in that order (torch's new_group). Every rank of
 * comm calls it with the same list; ranks not listed get *newcomm = NULL. Lists that differ
 * between ranks fail on every rank with TUTTI_ERR_MISMATCH. A list that is bad in itself (a
 * rank out of range or listed twice, n out of 1..size) returns TUTTI_ERR_INVALID_ARG on the
 * rank that passed it and posts nothing, as any bad input: the other ranks wait for that rank's
 * next call on comm, up to the timeout.
 */
TUTTI_API tutti_status_t tutti_comm_create_group(tutti_comm_t *comm, const int *ranks, int n,
                                                 tutti_comm_t **newcomm);

/**
 * Shrink (MPI_Comm_shrink, ncclCommShrink): a new communicator of comm's ranks that are still
 * alive, less the ones in exclude, renumbered in order of their rank in comm; for going on after
 * a rank died (docs/shrink.md). Every surviving rank that is not excluded calls
 * it, with the same exclude list; it needs neither comm's collectives nor its rank 0 (the
 * survivors agree over the liveness connections, and the lowest survivor serves the new
 * store), and it goes on if more ranks die while it runs. comm is marked failed (its
 * operations still running fail now) and must still be destroyed; the new communicator has
 * its own transports, shared memory and workers.
 * @param exclude ranks of comm to leave out although alive (a stopped or stuck one), or NULL.
 * @param nexclude how many; 0 to leave out only the dead.
 * @param newcomm receives the new communicator.
 * @return TUTTI_OK; TUTTI_ERR_INVALID_ARG for a bad list (out of range, twice, or this rank);
 *         TUTTI_ERR_PEER_FAILED when the others left this rank out; TUTTI_ERR_TIMEOUT when a
 *         rank neither died nor called it within the timeout.
 */
TUTTI_API tutti_status_t tutti_comm_shrink(tutti_comm_t *comm, const int *exclude, int nexclude,
                                           tutti_comm_t **newcomm);

/** @return this process's rank in comm, or -1 if comm is not a live communicator. */
TUTTI_API int tutti_comm_rank(const tutti_comm_t *comm);
/** @return the number of ranks in comm, or -1. */
TUTTI_API int tutti_comm_size(const tutti_comm_t *comm);
/** @return the rank's index among the ranks of its node, or -1. */
TUTTI_API int tutti_comm_local_rank(const tutti_comm_t *comm);
/** @return the number of ranks on this rank's node, or -1. */
TUTTI_API int tutti_comm_local_size(const tutti_comm_t *comm);
/** @return the number of nodes the communicator spans, or -1. */
TUTTI_API int tutti_comm_node_count(const tutti_comm_t *comm);
/** @return the number of worker threads of comm, or -1. */
TUTTI_API int tutti_comm_worker_count(const tutti_comm_t *comm);
/** @return the core worker runs on (per CCL_WORKER_AFFINITY), or -1 if not pinned or invalid. */
TUTTI_API int tutti_comm_worker_cpu(const tutti_comm_t *comm, int worker);
/** @return the number of collectives posted on comm so far (the next one's sequence number). */
TUTTI_API uint64_t tutti_comm_seq(const tutti_comm_t *comm);
/** @return the transport used towards peer ("shm", "ofi", "self"), or NULL. */
TUTTI_API const char *tutti_comm_transport(const tutti_comm_t *comm, int peer);

/**
 * @return the text of the last error this thread met in a tutti call (what happened, where, and
 * what to do), or "" if none. Also covers errors before a communicator exists.
 */
TUTTI_API const char *tutti_last_error(void);

/** @return the text of the last error met on comm, or "" if none (or comm is invalid): a copy,
 *  valid until this thread calls tutti_comm_last_error again. */
TUTTI_API const char *tutti_comm_last_error(const tutti_comm_t *comm);

/**
 * Override the algorithm choice for one collective, with oneCCL's syntax:
 * "ring", or "tree:0-16384;ring:16385-max" (byte ranges of count * element size). Every rank
 * must make the same call at the same point. NULL, "" and "auto" put back the automatic choice.
 * An unknown or inapplicable name is an error that lists the valid ones; the previous setting
 * then stays.
 */
TUTTI_API tutti_status_t tutti_comm_set_algorithm(tutti_comm_t *comm, tutti_coll_t coll,
                                                  const char *spec);

/** @return the name of the algorithm comm would use for coll at bytes bytes, or NULL. For
 *  TUTTI_COLL_ALLGATHER and TUTTI_COLL_ALLTOALL the answer is for the plain collective, bytes
 *  per block; allgatherv chooses as the plain one at its largest block, and alltoallv, whose
 *  blocks differ between ranks, runs "cma" on one node where single copy is allowed (each
 *  block through the window or read, by its size), else as at 0 bytes, overrides included. */
TUTTI_API const char *tutti_comm_algorithm(const tutti_comm_t *comm, tutti_coll_t coll,
                                           size_t bytes);

/*
 * Collectives. Every rank of the communicator calls the same collectives in the same order.
 * With work == NULL a call blocks until the operation is complete; otherwise it stores a
 * handle in *work that the caller waits on and frees. Arguments are checked before anything
 * happens: bad input returns TUTTI_ERR_INVALID_ARG, touches no buffer and posts nothing.
 */

/** recvbuf[i] = op over ranks of sendbuf[i], for count elements. */
TUTTI_API tutti_status_t tutti_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                         tutti_dtype_t dtype, tutti_op_t op, tutti_comm_t *comm,
                                         tutti_work_t **work);

/**
 * Several allreduces as one operation (DDP's gradient buckets, c10d's allreduce_coalesced):
 * recvbufs[i][j] = op over ranks of sendbufs[i][j] for j < counts[i]. The inputs are copied at
 * the post, so the caller may reuse sendbufs at once; recvbufs are written at completion.
 * sendbufs == NULL, or an entry TUTTI_IN_PLACE, means in place. Receive buffers may share
 * elements only in place (such an element has one input and gets one result); where one of
 * two overlapping entries has a send buffer of its own, the call is refused.
 */
TUTTI_API tutti_status_t tutti_allreduce_coalesced(const void *const *sendbufs,
                                                   void *const *recvbufs, const size_t *counts,
                                                   int nbufs, tutti_dtype_t dtype, tutti_op_t op,
                                                   tutti_comm_t *comm, tutti_work_t **work);

/** recvbuf (size * sendcount elements) = every rank's sendbuf, in rank order. */
TUTTI_API tutti_status_t tutti_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                         tutti_dtype_t dtype, tutti_comm_t *comm,
                                         tutti_work_t **work);

/** Rank r's sendcount elements land at recvbuf + displs[r] (elements); sendcount must equal
 *  recvcounts[rank]. displs == NULL means packed in rank order. Blocks that would share an
 *  element are TUTTI_ERR_INVALID_ARG. */
TUTTI_API tutti_status_t tutti_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                          const size_t *recvcounts, const size_t *displs,
                                          tutti_dtype_t dtype, tutti_comm_t *comm,
                                          tutti_work_t **work);

/** Block j (count elements) of sendbuf goes to rank j, landing as block rank of its recvbuf. */
TUTTI_API tutti_status_t tutti_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                        tutti_dtype_t dtype, tutti_comm_t *comm,
                                        tutti_work_t **work);

/** Like alltoall with per-peer counts and displacements (in elements); NULL displacements
 *  mean packed. sendcounts[j] on this rank must equal recvcounts[this rank] on rank j; the
 *  block to itself too: sendcounts[rank] != recvcounts[rank] is TUTTI_ERR_INVALID_ARG, as are
 *  receive blocks that would share an element (send blocks may). */
TUTTI_API tutti_status_t tutti_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                         const size_t *sdispls, void *recvbuf,
                                         const size_t *recvcounts, const size_t *rdispls,
                                         tutti_dtype_t dtype, tutti_comm_t *comm,
                                         tutti_work_t **work);

/** sendbuf holds size * recvcount elements; rank r receives block r of the reduction. In place:
 *  TUTTI_IN_PLACE (or sendbuf == recvbuf) with the input in recvbuf, the result in its first
 *  block (MPI's form); or recvbuf = sendbuf + r * recvcount, the rank's own block of the input
 *  (NCCL's form: on rank 0 the same as MPI's); other overlaps are TUTTI_ERR_INVALID_ARG. */
TUTTI_API tutti_status_t tutti_reduce_scatter(const void *sendbuf, void *recvbuf,
                                              size_t recvcount, tutti_dtype_t dtype,
                                              tutti_op_t op, tutti_comm_t *comm,
                                              tutti_work_t **work);

/** Root's buf is copied into every rank's buf. */
TUTTI_API tutti_status_t tutti_broadcast(void *buf, size_t count, tutti_dtype_t dtype, int root,
                                         tutti_comm_t *comm, tutti_work_t **work);

/** root's recvbuf = op over ranks of sendbuf; recvbuf is ignored (may be NULL) elsewhere. */
TUTTI_API tutti_status_t tutti_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                      tutti_dtype_t dtype, tutti_op_t op, int root,
                                      tutti_comm_t *comm, tutti_work_t **work);

/** Completes when every rank has entered it. */
TUTTI_API tutti_status_t tutti_barrier(tutti_comm_t *comm, tutti_work_t **work);

/** Pass as the peer of tutti_recv to receive a message from any rank (MPI_ANY_SOURCE); the
 *  sender is then tutti_work_source() of the receive's handle. */
#define TUTTI_ANY_SOURCE (-2)

/**
 * Point-to-point: send count elements of dtype from buf to rank peer, with MPI's matching.
 *
 * A receive from rank p with tag t meets the earliest message p sent to this rank with tag t
 * that no earlier-posted receive has met: messages of one pair and tag never overtake each
 * other; messages with different tags may be received in any order. Sends and receives do not
 * wait for each other or for collectives: every pattern MPI allows with isend/irecv and wait
 * completes (a receive posted before its send on both ranks, a cycle over three ranks), a
 * blocking call never waits behind queued collectives, and collectives never wait behind
 * point-to-point. A send of up to 16 KiB may complete before its receive is posted (its data
 * waits at the receiver); a larger one completes once the receiver has matched it and taken
 * the data.
 *
 * Each call has the communicator's timeout from its post: it fails with TUTTI_ERR_TIMEOUT if
 * its peer has not taken part by then, and with TUTTI_ERR_PEER_FAILED within about a second of
 * the peer's death (or, after a second's grace, of its tutti_comm_destroy), naming the peer;
 * tutti_comm_abort and tutti_comm_destroy fail it with TUTTI_ERR_ABORTED. None of these fails
 * the communicator: its collectives, and point-to-point with other ranks, go on. A send's
 * buffer and a receive's are not touched after the call has completed or failed.
 *
 * @param buf count elements (read until the send completes).
 * @param peer another rank of comm (sending to oneself is not supported).
 * @param tag any int >= 0 (0..INT_MAX).
 * @param work NULL to block until the send is done; else receives a handle to wait on and free.
 * @return TUTTI_OK, TUTTI_ERR_INVALID_ARG for bad arguments (nothing is posted), or the send's
 *         failure (blocking).
 */
TUTTI_API tutti_status_t tutti_send(const void *buf, size_t count, tutti_dtype_t dtype, int peer,
                                    int tag, tutti_comm_t *comm, tutti_work_t **work);

/**
 * Receive count elements of dtype into buf from rank peer (or TUTTI_ANY_SOURCE: the earliest
 * arrival from any rank with that tag), matched as tutti_send describes. The message must
 * have exactly count * size of dtype bytes: otherwise the receive fails with
 * TUTTI_ERR_INVALID_ARG and a text naming both lengths, the peer and the tag; that message is
 * consumed (dropped), so later messages still meet the right receives, and the communicator
 * stays usable (the sender's call completes normally). A receive from any source fails with
 * TUTTI_ERR_PEER_FAILED when a rank dies while it waits, since the message it waits for might
 * have been that rank's.
 * @param peer another rank of comm, or TUTTI_ANY_SOURCE.
 * @param tag any int >= 0.
 * @param work NULL to block until the message is in buf; else receives a handle (its sender:
 *        tutti_work_source).
 */
TUTTI_API tutti_status_t tutti_recv(void *buf, size_t count, tutti_dtype_t dtype, int peer,
                                    int tag, tutti_comm_t *comm, tutti_work_t **work);

/**
 * @return the rank that sent the message of a completed, successful receive (useful after
 *         TUTTI_ANY_SOURCE); -1 for any other handle, or one not complete.
 */
TUTTI_API int tutti_work_source(const tutti_work_t *work);

/**
 * Wait for a posted operation.
 * @param timeout_s the longest to wait here; < 0 waits up to the operation's own deadline
 *        (the communicator's timeout), which always applies.
 * @return the operation's status; TUTTI_IN_PROGRESS if timeout_s passed first (the operation
 *         goes on; wait again or free); TUTTI_ERR_INVALID_ARG for work NULL or timeout_s NaN
 *         (nothing waited for, the operation goes on).
 */
TUTTI_API tutti_status_t tutti_work_wait(tutti_work_t *work, double timeout_s);

/** Check without blocking. *done = 1 once complete. @return the status as tutti_work_status. */
TUTTI_API tutti_status_t tutti_work_test(tutti_work_t *work, int *done);

/** @return TUTTI_IN_PROGRESS while running, then TUTTI_OK or the operation's error. */
TUTTI_API tutti_status_t tutti_work_status(const tutti_work_t *work);

/** @return the operation's error text, "" if none. Valid until tutti_work_free. */
TUTTI_API const char *tutti_work_error(const tutti_work_t *work);

/**
 * Run fn(work, arg) once when the operation completes, on the thread that completes it (a
 * worker; for a send or receive, the progress thread or whichever thread was driving the
 * point-to-point engine); if it has completed already, at once in the calling thread. At
 * most one callback per handle (a second call returns TUTTI_ERR_INVALID_ARG). The callback may
 * query the handle and post new operations, but must not wait on operations of the same
 * communicator: such a wait, on one not yet complete, returns TUTTI_ERR_INVALID_ARG (it would
 * wait for the very thread it runs on), and so does a blocking collective call on it
 * (work == NULL), always, before anything is posted. The same holds where the callback runs
 * at once in the calling thread: the rules do not depend on timing, which differs between
 * ranks. The handle is marked complete before its callback runs: tutti_work_wait and
 * tutti_work_test may return while the callback still runs on the other thread (the handle's
 * memory lives until it is done, as tutti_work_free says).
 */
TUTTI_API tutti_status_t tutti_work_on_complete(tutti_work_t *work,
                                                void (*fn)(tutti_work_t *work, void *arg),
                                                void *arg);

/** Free a handle (NULL is fine). A handle still in progress is waited for first (up to its
 *  deadline); its memory lives until the operation and its callback are done. As with MPI's
 *  requests, no other thread may use the handle (wait, test, query) once free is called. */
TUTTI_API void tutti_work_free(tutti_work_t *work);

#ifdef __cplusplus
}
#endif
#endif /* TUTTI_H */
