/* auth.c: a job's secret and identity from the caller and the launcher's environment, and the
 * MACs of the rendezvous handshake, all HMAC-SHA-256 (common/sha256.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

#include "../common/sha256.h"
#include "auth.h"
#include "discover.h"

#define TOKEN_MIN 16

/* The launcher ids that name one job (the same on every rank of it, different for the next):
 * Slurm's job and step, Open MPI's job, torchrun's run id when it is not its default "none",
 * and Hydra's mpiexec address, which its proxies carry (Hydra puts every rank in a session of
 * its own, and a wrapper script gives each a parent of its own: without it, ranks started
 * through `mpirun -n 2 ./run.sh` looked like strangers to each other). */
static void launcher_ids(char *buf, size_t cap, bool *found)
{
    static const char *const vars[] = {"SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid",
                                       "TORCHELASTIC_RUN_ID"};
    size_t n = 0;
    *found = false;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = tutti__env_get(vars[i]);
        if (v == NULL || (i == 3 && strcmp(v, "none") == 0))
            continue;
        *found = true;
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s=%s;", vars[i], v);
    }
    char hydra[256];
    if (tutti__hydra_job(hydra, sizeof hydra)) {
        *found = true;
        snprintf(buf + n, n < cap ? cap - n : 0, "hydra=%s;", hydra);
    }
}

static void make_job(tutti__auth_t *a)
{
    char ids[1024];
    launcher_ids(ids, sizeof ids, &a->launcher_id);
    uint8_t h[32];
    tutti__hmac("tutti job id v1", 15, ids, strlen(ids), h);
    memcpy(a->job, h, TUTTI__AUTH_JOB);
}

static void key_of_token(const char *token, uint8_t key[TUTTI__AUTH_KEY])
{
    tutti__hmac(token, strlen(token), "tutti job secret v1", 19, key);
}

tutti_status_t tutti__auth_from_env(const char *token, tutti__auth_t *out)
{
    memset(out, 0, sizeof *out);
    make_job(out);
    const char *what = "tutti_comm_config_t.job_token";
    if (token == NULL || token[0] == '\0') {
        token = tutti__env_get("TUTTI_JOB_TOKEN");
        what = "TUTTI_JOB_TOKEN";
    }
    if (token != NULL && token[0] != '\0') {
        if (strlen(token) < TOKEN_MIN)
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "%s has %zu characters: a job's token needs at least %d "
                                    "random ones (tutti_job_token() makes one, or: head -c 32 "
                                    "/dev/urandom | od -An -tx1 | tr -d ' \\n')",
                                    what, strlen(token), TOKEN_MIN);
        out->mode = TUTTI__AUTH_SECRET;
        key_of_token(token, out->key);
        out->have_key = true;
        snprintf(out->source, sizeof out->source, "%s", what);
        return TUTTI_OK;
    }
    /* Open MPI's mpirun gives every rank of a job the same random key (meant for PSM); no
     * process of another user can read it, and a host on the network never sees it. */
    const char *ompi = tutti__env_get("OMPI_MCA_orte_precondition_transports");
    if (ompi != NULL && strlen(ompi) >= TOKEN_MIN) {
        out->mode = TUTTI__AUTH_SECRET;
        key_of_token(ompi, out->key);
        out->have_key = true;
        snprintf(out->source, sizeof out->source,
                 "Open MPI's per-job key (OMPI_MCA_orte_precondition_transports)");
        return TUTTI_OK;
    }
    out->mode = TUTTI__AUTH_HOST;
    snprintf(out->source, sizeof out->source, "rank 0's secret file");
    return TUTTI_OK;
}

void tutti__auth_from_key(const uint8_t key[TUTTI__AUTH_KEY], tutti__auth_t *out)
{
    memset(out, 0, sizeof *out);
    out->mode = TUTTI__AUTH_SECRET;
    memcpy(out->key, key, TUTTI__AUTH_KEY);
    out->have_key = true;
    out->launcher_id = true;
    snprintf(out->source, sizeof out->source, "the parent communicator");
}

void tutti__auth_derive(const uint8_t parent[TUTTI__AUTH_KEY], const char *label,
                        const void *salt, size_t saltlen, uint8_t out[TUTTI__AUTH_KEY])
{
    tutti__hmac_t m;
    tutti__hmac_init(&m, parent, TUTTI__AUTH_KEY);
    tutti__hmac_update(&m, label, strlen(label) + 1);
    tutti__hmac_update(&m, salt, saltlen);
    tutti__hmac_final(&m, out);
}

static void put_be32(tutti__hmac_t *m, uint32_t x)
{
    uint32_t be = htonl(x);
    tutti__hmac_update(m, &be, 4);
}

void tutti__auth_client_mac(const uint8_t key[TUTTI__AUTH_KEY], const uint8_t *ns,
                            const uint8_t *nc, uint32_t rank, uint32_t size, const uint8_t *job,
                            uint32_t flags, uint8_t out[32])
{
    tutti__hmac_t m;
    tutti__hmac_init(&m, key, TUTTI__AUTH_KEY);
    tutti__hmac_update(&m, "tutti hello client v2", 22);
    tutti__hmac_update(&m, ns, TUTTI__AUTH_NONCE);
    tutti__hmac_update(&m, nc, TUTTI__AUTH_NONCE);
    put_be32(&m, rank);
    put_be32(&m, size);
    tutti__hmac_update(&m, job, TUTTI__AUTH_JOB);
    put_be32(&m, flags);
    tutti__hmac_final(&m, out);
}

void tutti__auth_server_mac(const uint8_t key[TUTTI__AUTH_KEY], const uint8_t *ns,
                            const uint8_t *nc, uint32_t rank, uint32_t size, const uint8_t *job,
                            uint8_t out[32])
{
    tutti__hmac_t m;
    tutti__hmac_init(&m, key, TUTTI__AUTH_KEY);
    tutti__hmac_update(&m, "tutti hello server v2", 22);
    tutti__hmac_update(&m, nc, TUTTI__AUTH_NONCE);
    tutti__hmac_update(&m, ns, TUTTI__AUTH_NONCE);
    put_be32(&m, rank);
    put_be32(&m, size);
    tutti__hmac_update(&m, job, TUTTI__AUTH_JOB);
    tutti__hmac_final(&m, out);
}

void tutti__auth_key_mixer(const tutti__auth_t *a, uint8_t out[32])
{
    if (a->mode == TUTTI__AUTH_SECRET)
        tutti__hmac(a->key, TUTTI__AUTH_KEY, "tutti store keys v1", 19, out);
    else
        tutti__hmac(a->job, TUTTI__AUTH_JOB, "tutti store keys v1", 19, out);
}

bool tutti__addr_local(const struct sockaddr *sa, socklen_t len, bool if_unknown)
{
    if (sa->sa_family != AF_INET || len < (socklen_t)sizeof(struct sockaddr_in))
        return false;
    struct sockaddr_in a = *(const struct sockaddr_in *)sa;
    if ((ntohl(a.sin_addr.s_addr) >> 24) == 127)
        return true;
    /* An address a socket can bind is one of this host's (in this network namespace). */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return if_unknown; /* no socket to tell with (EMFILE) */
    a.sin_port = 0;
    bool local = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return local;
}
