/* launcher.c: the rank and size that a launcher (torchrun, MPICH's or Intel MPI's Hydra, Open MPI,
 * Slurm) gave this process through its environment. */
#include <stdlib.h>

#include "discover.h"

static bool env_int(const char *name, long *out)
{
    const char *v = tutti__env_get(name);
    if (v == NULL)
        return false;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || end == v)
        return false;
    *out = x;
    return true;
}

/* Launchers in the order of the design card: torchrun, MPICH/Intel MPI, Open MPI, Slurm. The
 * first set wins (torchrun inside mpirun or srun, mpirun inside an sbatch script), but the two
 * MPI launchers' variables must agree where both are set: one of them leaked in from an outer
 * launcher (mpirun.mpich -n 1 around mpirun.openmpi -n 2 gave every rank PMI_RANK=0,
 * PMI_SIZE=1), and trusting either silently could make each rank a job of its own. */
tutti_status_t tutti__launcher_rank(int *rank, int *size, const char **how)
{
    static const char *const pairs[][3] = {
        {"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE", "PMI_RANK/PMI_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK/SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_PROCID/SLURM_NTASKS"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        long r = 0, s = 0;
        bool hr = env_int(pairs[i][0], &r), hs = env_int(pairs[i][1], &s);
        if (!hr && !hs && tutti__env_get(pairs[i][0]) == NULL && tutti__env_get(pairs[i][1]) == NULL)
            continue;
        if (!hr || !hs || s < 1 || s > (1 << 20) || r < 0 || r >= s)
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                    "bootstrap: %s=\"%s\" and %s=\"%s\" do not make a valid rank and "
                                    "size (need 0 <= rank < size); fix the launcher's environment",
                                    pairs[i][0], tutti__env_get(pairs[i][0]) ? tutti__env_get(pairs[i][0]) : "",
                                    pairs[i][1], tutti__env_get(pairs[i][1]) ? tutti__env_get(pairs[i][1]) : "");
        long r2 = 0, s2 = 0;
        if ((i == 1 || i == 2) && env_int(pairs[3 - i][0], &r2) && env_int(pairs[3 - i][1], &s2) &&
            (r2 != r || s2 != s))
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                    "bootstrap: two launchers' variables disagree: %s say rank %ld "
                                    "of %ld, %s say rank %ld of %ld: one set leaked in from an outer "
                                    "launcher (an mpirun inside another); unset the outer one's, or "
                                    "set RANK and WORLD_SIZE, which win",
                                    pairs[i][2], r, s, pairs[3 - i][2], r2, s2);
        *rank = (int)r;
        *size = (int)s;
        *how = pairs[i][2];
        return TUTTI_OK;
    }
    *rank = 0;
    *size = 1;
    *how = "no launcher variables: a single rank";
    return TUTTI_OK;
}
