/* auth.h: how a rank proves at the rendezvous store that it belongs to the job, and how the store
 * proves it back: the job's secret and where it comes from, the handshake's MACs, and the
 * file in which rank 0 leaves a secret for the ranks of its host when the job brings none. */
#ifndef TUTTI_BOOTSTRAP_AUTH_H
#define TUTTI_BOOTSTRAP_AUTH_H

#include <sys/socket.h>

#include "../common/common.h"

#define TUTTI__AUTH_KEY 32 /* bytes of a job's secret */
#define TUTTI__AUTH_JOB 16 /* bytes of a job's public identity */
#define TUTTI__AUTH_NONCE 32

/*
 * The two ways a job authenticates (docs/security.md says what each protects against):
 *
 * TUTTI__AUTH_SECRET  every rank holds the job's secret (TUTTI_JOB_TOKEN, the
 *                     tutti_comm_config_t token, Open MPI's per-job key, or a parent
 *                     communicator's) and proves it; a client that cannot is refused.
 * TUTTI__AUTH_HOST    no secret came with the job: rank 0 makes one and leaves it in a file only
 *                     its user can read (secret_file.c); ranks on rank 0's host must prove it,
 *                     ranks on other hosts, which cannot read that file, join without proof.
 */
typedef enum tutti__auth_mode { TUTTI__AUTH_SECRET = 1, TUTTI__AUTH_HOST = 2 } tutti__auth_mode_t;

typedef struct tutti__auth {
    tutti__auth_mode_t mode;
    bool have_key;                /* SECRET: always; HOST: rank 0, and the ranks of its host once
                                     they have read its file */
    uint8_t key[TUTTI__AUTH_KEY];
    uint8_t job[TUTTI__AUTH_JOB]; /* the launcher's job id, hashed: the same on every rank of a
                                     job, told to the store in every hello (not secret) */
    bool launcher_id;             /* job came from a launcher's id; without one, the ranks of a
                                     host must share a parent process or a
                                     session (secret_file.c) */
    char source[96];              /* where the secret came from, for messages */
} tutti__auth_t;

/*
 * tutti__auth_from_env decides how this rank authenticates: token (the caller's
 * tutti_comm_config_t.job_token; NULL or "" for none), else TUTTI_JOB_TOKEN, else Open MPI's
 * per-job key (OMPI_MCA_orte_precondition_transports) make a SECRET job; nothing makes a HOST
 * one. The job id hashes the launcher's ids (Slurm's job and step, Open MPI's job id,
 * torchrun's run id). A token shorter than 16 characters is TUTTI_ERR_INVALID_ARG.
 */
tutti_status_t tutti__auth_from_env(const char *token, tutti__auth_t *out);

/* tutti__auth_from_key makes a SECRET job of key (a sub-communicator's, from its parent). */
void tutti__auth_from_key(const uint8_t key[TUTTI__AUTH_KEY], tutti__auth_t *out);

/* tutti__auth_derive makes a child secret: HMAC(parent, label || salt). */
void tutti__auth_derive(const uint8_t parent[TUTTI__AUTH_KEY], const char *label,
                        const void *salt, size_t saltlen, uint8_t out[TUTTI__AUTH_KEY]);

/* The handshake (wire.h): the client proves the secret over both nonces, its rank, size, job
 * and flags; the server proves it over the same, in the other order with another label, so
 * that neither proof can be replayed as the other. */
void tutti__auth_client_mac(const uint8_t key[TUTTI__AUTH_KEY], const uint8_t *ns,
                            const uint8_t *nc, uint32_t rank, uint32_t size, const uint8_t *job,
                            uint32_t flags, uint8_t out[32]);
void tutti__auth_server_mac(const uint8_t key[TUTTI__AUTH_KEY], const uint8_t *ns,
                            const uint8_t *nc, uint32_t rank, uint32_t size, const uint8_t *job,
                            uint8_t out[32]);

/* tutti__auth_key_mixer is the key that store keys are hashed with (store_client.c): from the
 * secret in a SECRET job, from the public job id in a HOST one (whose remote ranks hold no
 * secret). */
void tutti__auth_key_mixer(const tutti__auth_t *a, uint8_t out[32]);

/* tutti__addr_local tells whether sa (IPv4) is an address of this host, in this network
 * namespace (one that a socket can bind); if_unknown when it cannot tell (no socket left): the
 * store's server passes true, so that a client it cannot place must prove the secret. */
bool tutti__addr_local(const struct sockaddr *sa, socklen_t len, bool if_unknown);

/* ---- the host file (secret_file.c) ---- */

/*
 * tutti__secret_file_write writes a HOST job's secret (a->key) for the store that serves
 * ip:port in this network namespace, into <dir>/store-<netns>-<ip>-<port>, mode 0600, dir being
 * $XDG_RUNTIME_DIR/tutti or /tmp/tutti-<uid> (made 0700; one that another user owns or others
 * can enter is refused). With the secret go this process's id and start time, its parent's and
 * its session leader's,
 * and a->job, so that a reader can tell a file of its own job from another's or a stale one.
 * The file's path goes to path (cap bytes) for tutti__secret_file_remove.
 */
tutti_status_t tutti__secret_file_write(const char *ip, int port, const tutti__auth_t *a,
                                        char *path, size_t cap);

/*
 * tutti__secret_file_read reads the secret of the store at ip:port into a->key (a->have_key
 * set). TUTTI_ERR_BOOTSTRAP with a message that says why and what to do when: there is no
 * such file or it is stale (its writer is gone), it is not private to this user, it belongs to
 * another job (another job id; or, without a launcher's id, a writer that is neither this
 * rank's parent, nor its sibling, nor in its session). *absent tells the first case: no file
 * at all.
 */
tutti_status_t tutti__secret_file_read(const char *ip, int port, int rank, tutti__auth_t *a,
                                       bool *absent);

/* tutti__secret_dir_check fails, saying why and what to do, when the directory for this user's
 * secret files exists but rank 0 cannot use it (another user's, open to others, not a
 * directory): a rank on rank 0's host that finds no store then knows rank 0 refused, as it did,
 * instead of waiting for its timeout. OK when there is none yet. */
tutti_status_t tutti__secret_dir_check(void);

/* tutti__secret_file_remove removes the file tutti__secret_file_write made (path "" is fine). */
void tutti__secret_file_remove(const char *path);

#endif /* TUTTI_BOOTSTRAP_AUTH_H */
