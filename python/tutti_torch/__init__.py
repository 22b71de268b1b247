"""tutti_torch: tutti as a torch.distributed backend. Importing it registers the backend "tutti",
so that one line switches a torch 1.13 program from Gloo to tutti:

    import tutti_torch  # noqa: F401  (registers "tutti")
    import torch.distributed as dist
    dist.init_process_group("tutti")  # rank, world size and store from torchrun or mpirun

The process group is a thin C++ layer (tutti_torch._C.ProcessGroupTutti) over tutti's C API. It
bootstraps through the c10d Store torch hands it (no port of its own), so it runs wherever
init_process_group works: torchrun, or by hand with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT.
Under mpirun (MPICH, Intel MPI, Open MPI), setup_env_from_launcher(), which this import calls,
fills in RANK, WORLD_SIZE and LOCAL_RANK from the launcher's variables, as Hugging Face's Trainer
does.
"""
import os

import torch  # noqa: F401  (loads libtorch and its pybind11 types before the extension)
import torch.distributed as dist

from ._C import ProcessGroupTutti, version as _version

__all__ = ["ProcessGroupTutti", "setup_env_from_launcher", "BACKEND", "__version__"]

BACKEND = "tutti"
__version__ = _version()

# Launcher variables per field, in order of precedence: torchrun's own first, then MPICH / Intel
# MPI (PMI_*, MPI_LOCALRANKID), Open MPI (OMPI_COMM_WORLD_*), MVAPICH (MV2_COMM_WORLD_*).
_RANK_VARS = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
_LOCAL_VARS = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
               "MV2_COMM_WORLD_LOCAL_RANK")


def _first_int(env, names, default):
    for name in names:
        value = env.get(name, "")
        if value != "":
            try:
                return int(value)
            except ValueError:
                raise ValueError("tutti_torch: %s=%r is not an integer" % (name, value)) from None
    return default


def setup_env_from_launcher(environ=None):
    """Sets RANK, WORLD_SIZE and LOCAL_RANK (and MASTER_ADDR=127.0.0.1, MASTER_PORT=29500 where
    unset) from whichever launcher started this process, so that init_method "env://" works under
    mpirun too. Variables already set are kept. Returns (rank, world_size, local_rank); a process
    no launcher started is rank 0 of 1. environ: the mapping to read and update (os.environ).
    """
    env = os.environ if environ is None else environ
    rank = _first_int(env, _RANK_VARS, 0)
    size = _first_int(env, _SIZE_VARS, 1)
    local = _first_int(env, _LOCAL_VARS, 0)
    if not 0 <= rank < size:
        raise ValueError("tutti_torch: rank %d is outside world size %d (launcher variables: %s)"
                         % (rank, size, {k: env[k] for k in _RANK_VARS + _SIZE_VARS if k in env}))
    env.setdefault("RANK", str(rank))
    env.setdefault("WORLD_SIZE", str(size))
    env.setdefault("LOCAL_RANK", str(local))
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    return rank, size, local


def _create(store, rank, size, timeout):
    """The creator torch calls for backend "tutti" (init_process_group and new_group): store is
    already prefixed per group, so each group gets its own tutti communicator."""
    return ProcessGroupTutti(store, rank, size, timeout)


if getattr(dist.Backend, BACKEND.upper(), None) is None:
    dist.Backend.register_backend(BACKEND, _create)

# Only under a launcher: a process nobody launched keeps its environment as it is, so that an
# "env://" init without RANK fails as it would without this import.
if any(os.environ.get(v) for v in _RANK_VARS + _SIZE_VARS):
    try:
        setup_env_from_launcher()
    except ValueError:
        pass  # inconsistent launcher variables: init_process_group reports them in its own words
