"""tutti_torch: tutti as a torch.distributed backend for CPU tensors. Importing it registers the
backend "tutti", so that one word switches a torch program from Gloo to tutti:

    import tutti_torch  # noqa: F401  (registers "tutti")
    import torch.distributed as dist
    dist.init_process_group("tutti")  # rank, world size and store from torchrun or mpirun

The backend is a thin C++ c10d::Backend (tutti_torch._C.BackendTutti) over tutti's C API,
registered for the "cpu" device with torch's extended API. It bootstraps through the c10d Store
torch hands it (no port of its own), so it runs wherever init_process_group works: torchrun, or
by hand with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT. Under mpirun (MPICH, Intel MPI,
Open MPI), setup_env_from_launcher(), which this import calls, fills in RANK, WORLD_SIZE and
LOCAL_RANK from the launcher's variables, as Hugging Face's Trainer does. "cpu:tutti,cuda:nccl"
puts CPU tensors on tutti and CUDA tensors on NCCL in one group.

Written for torch 2.13 (tested with 2.13.0), the torch it was built against; see
docs/pytorch.md.
"""
import contextlib
import os
import re
import signal
import threading

import torch  # noqa: F401  (loads libtorch and its pybind11 types before the extension)
import torch.distributed as dist

# Debian's libfabric, which libtutti links, loads libinfinipath, whose library constructor
# replaces the process's SIGINT, SIGTERM, SIGSEGV, ... handlers (Ctrl-C then exits with status 1
# and no KeyboardInterrupt, a *.btr file lands in the working directory, and a SIGTERM that comes
# while Python exits can deadlock) unless these are set before it loads. libtutti puts such
# handlers back to the default, which for an interpreter is not its own: so set them here first.
os.environ.setdefault("IPATH_NO_BACKTRACE", "1")
os.environ.setdefault("HFI_NO_BACKTRACE", "1")

from ._C import BackendTutti, Options, version as _version  # noqa: E402

if threading.current_thread() is threading.main_thread():
    # libfabric loaded earlier by another module (mpi4py's MPICH) took these before the
    # variables above could help, and libtutti reset them to the default: where Python has a
    # handler of its own (KeyboardInterrupt's, or one set with signal.signal), put it back.
    for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGABRT, signal.SIGBUS, signal.SIGILL,
                 signal.SIGSEGV):
        _handler = signal.getsignal(_sig)
        if callable(_handler):
            signal.signal(_sig, _handler)

__all__ = ["BackendTutti", "Options", "setup_env_from_launcher", "monitored_barrier",
           "register", "BACKEND", "__version__"]

BACKEND = "tutti"
__version__ = _version()

# Launchers' variables (rank, size, local rank), in order of precedence: torchrun's own first,
# then MPICH / Intel MPI (PMI_*, MPI_LOCALRANKID), Open MPI (OMPI_COMM_WORLD_*), MVAPICH
# (MV2_COMM_WORLD_*), Slurm's srun. A rank and a size always come from the same launcher.
# Slurm's size is the step's: a batch script or an salloc shell has SLURM_PROCID=0 and
# SLURM_NTASKS too, but no SLURM_STEP_NUM_TASKS, and a process started there without srun is
# not rank 0 of a job (libtutti reads them alike: src/bootstrap/launcher.c).
_SLURM = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID")
_LAUNCHERS = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
              ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
              ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
              _SLURM)
_RANK_VARS = tuple(f[0] for f in _LAUNCHERS)
_SIZE_VARS = tuple(f[1] for f in _LAUNCHERS)


def _launcher_vars(env):
    return {k: env[k] for k in _RANK_VARS + _SIZE_VARS if k in env}


def _launched(env):
    """Whether some launcher's variables are set (Slurm's only in a task of an srun step)."""
    return any(env.get(r) or env.get(s) for r, s, _ in _LAUNCHERS
               if (r, s) != _SLURM[:2] or env.get(_SLURM[1]))


def _hostlist_first(hosts):
    """The first host of a Slurm host list ("node[07-09,12],gpu1" gives "node07",
    "rack[1-2]-n[3-4]" gives "rack1-n3"); None for one it cannot read. The same reading as
    libtutti's tutti__hostlist_first."""
    first = re.match(r"(?:[^,\[\]]|\[[^\[\]]*\])*", hosts).group(0)  # up to a ',' outside [ ]
    # a name before each bracket; in it digits, '-' and ',' only, its first item a number
    host = r"[^\[\]\s,]+(?:\[[0-9]+(?:[-,][0-9,-]*)?\][^\[\]\s,]*)*"
    if first == "" or hosts[len(first):len(first) + 1] not in ("", ",") or \
            not re.fullmatch(host, first, re.ASCII):
        return None
    for lo, dash, hi in re.findall(r"\[([0-9]+)(-?)([0-9]*)", first):
        # a range must end, not before its start, within 64 bits (as strtoul reads it)
        if dash and (hi == "" or int(hi) < int(lo) or int(hi) >= 1 << 64):
            return None
    return re.sub(r"\[([0-9]+)[^\]]*\]", r"\1", first)


def _slurm_store(env, want_addr):
    """(MASTER_ADDR or None, MASTER_PORT) for a Slurm step, as libtutti picks them: a port of
    the job and step's own, so that jobs sharing a node do not meet on one; the first node of
    the step when it spans several, where srun's block and cyclic distributions put rank 0."""
    def num(name):
        try:
            return max(int(env.get(name, "0")), 0)
        except ValueError:
            return 0
    port = 20000 + (num("SLURM_JOB_ID") % 1000) * 10 + num("SLURM_STEP_ID") % 10
    addr = None
    nodes = env.get("SLURM_STEP_NUM_NODES")
    if want_addr and nodes is not None and not (re.fullmatch(r"\s*\+?[0-9]+\s*", nodes, re.ASCII)
                                                and 1 <= int(nodes) <= 1 << 20):
        raise ValueError("tutti_torch: SLURM_STEP_NUM_NODES=%r is not a node count (1 to "
                         "1048576), so the step's first node, where it meets, is unknown: fix "
                         "it, or set MASTER_ADDR to rank 0's host" % nodes)
    if want_addr and num("SLURM_STEP_NUM_NODES") > 1:
        addr = _hostlist_first(env.get("SLURM_STEP_NODELIST", ""))
        if addr is None:
            raise ValueError("tutti_torch: a Slurm step on %s nodes whose SLURM_STEP_NODELIST=%r "
                             "names no first node: set MASTER_ADDR to rank 0's host"
                             % (env.get("SLURM_STEP_NUM_NODES"),
                                env.get("SLURM_STEP_NODELIST", "")))
    return addr, port


_JOB_PORT_BASE, _JOB_PORTS = 30000, 2000  # libtutti's TUTTI__JOB_PORT_BASE / TUTTI__JOB_PORTS


def _hydra_proxy_pid():
    """The pid of the Hydra proxy (MPICH's hydra_pmi_proxy, Intel MPI's pmi_proxy) this process
    descends from, through whatever wrapper sits between; 0 if none is seen."""
    pid = os.getppid()
    for _ in range(8):
        if pid <= 1:
            break
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                stat = f.read(512).decode("ascii", "replace")
        except OSError:
            return 0
        # "pid (comm) state ppid ...": comm ends at the last ')'
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        if comm in ("hydra_pmi_proxy", "pmi_proxy"):
            return pid
        try:
            pid = int(stat[stat.rfind(")") + 1:].split()[1])
        except (IndexError, ValueError):
            return 0
    return 0


def _fnv1a(data):
    """FNV-1a of bytes, as libtutti hashes a job's name."""
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xffffffff
    return h


def _control_port(pid):
    """The --control-port of Hydra proxy pid (its mpiexec's host:port, the same for every
    proxy of one mpiexec, on every node), as bytes; None if it has none (or one of 256 bytes
    or more, which libtutti does not take either)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read(4095).split(b"\0")
    except OSError:
        return None
    for i, a in enumerate(args[:-1]):
        if a == b"--control-port":
            return args[i + 1] if 0 < len(args[i + 1]) < 256 else None
    return None


def _launcher_port(env, names):
    """A store port of the job's own for a job the launcher names (names: its rank/size
    variables), as libtutti picks it (tutti__launcher_port), so that two jobs of one node do not
    meet on 29500, and the job it names; (None, None) where the launcher names no job."""
    if names == "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE":
        job = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE")
        if not job:
            return None, None
        return (_JOB_PORT_BASE + _fnv1a(job.encode("utf-8", "surrogateescape")) % _JOB_PORTS,
                "Open MPI job " + job)
    if names == "PMI_RANK/PMI_SIZE":
        proxy = _hydra_proxy_pid()
        ctl = _control_port(proxy) if proxy else None
        if ctl:  # mpiexec's address, which every proxy of the job is given
            return (_JOB_PORT_BASE + _fnv1a(ctl) % _JOB_PORTS,
                    "Hydra job of mpiexec " + ctl.decode("ascii", "replace"))
        if proxy and env.get("MPI_LOCALNRANKS") and \
                env.get("MPI_LOCALNRANKS") == env.get("PMI_SIZE"):
            # every rank on this node: its proxy
            return _JOB_PORT_BASE + proxy % _JOB_PORTS, "Hydra job of proxy %d" % proxy
    return None, None


def _srun_pmi(env, rank, size):
    """Whether PMI_RANK/PMI_SIZE are srun's own (--mpi=pmi2), not an mpiexec's inside the step:
    srun sets PMI_JOBID to "<job>.<step>" and numbers ranks as the step (libtutti's srun_pmi)."""
    return bool(env.get("SLURM_JOB_ID")) and bool(env.get("SLURM_STEP_ID")) and \
        env.get("PMI_JOBID") == "%s.%s" % (env["SLURM_JOB_ID"], env["SLURM_STEP_ID"]) and \
        env.get("SLURM_PROCID") == str(rank) and env.get("SLURM_STEP_NUM_TASKS") == str(size)


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
    """Sets RANK, WORLD_SIZE and LOCAL_RANK (and MASTER_ADDR=127.0.0.1 and MASTER_PORT where
    unset) from whichever launcher started this process, so that init_method "env://" works under
    mpirun too. The port is one of the job's own where the launcher names the job (srun, Open
    MPI's mpirun, Hydra's mpiexec through its proxy; as libtutti's store picks it), else 29500,
    so that two jobs started on one node at once do not meet on one port. Variables already set are kept. Returns (rank, world_size, local_rank); a process
    no launcher started is rank 0 of 1; local_rank is None (and LOCAL_RANK stays unset) when no
    launcher's variables give it, as when RANK and WORLD_SIZE alone are set by hand. environ:
    the mapping to read and update (os.environ).
    """
    env = os.environ if environ is None else environ
    found = []  # (rank, size, local, names) of each launcher whose variables are set
    for rname, sname, lname in _LAUNCHERS:
        if (rname, sname) == _SLURM[:2] and not env.get(sname):
            continue  # not a task of an srun step
        r, s = _first_int(env, (rname,), None), _first_int(env, (sname,), None)
        if r is None and s is None:
            continue
        if r is None or s is None:
            # torch, given RANK without WORLD_SIZE, refuses: never make it a job of one rank
            have, missing = (rname, sname) if s is None else (sname, rname)
            raise ValueError("tutti_torch: %s is set but %s is not: set both (launcher "
                             "variables: %s)" % (have, missing, _launcher_vars(env)))
        found.append((r, s, _first_int(env, (lname,), None), "%s/%s" % (rname, sname)))
    if not found:
        if _first_int(env, (_SLURM[0],), 0) > 0:  # a batch script or salloc shell is task 0
            raise ValueError("tutti_torch: SLURM_PROCID=%s is set but SLURM_STEP_NUM_TASKS is "
                             "not, so this is no task of an srun step; start the ranks with "
                             "srun, or set RANK and WORLD_SIZE" % env[_SLURM[0]])
        rank, size, local = 0, 1, 0
        if _first_int(env, ("SLURM_NTASKS",), 1) > 1:
            import warnings

            warnings.warn("tutti_torch: SLURM_NTASKS=%s, but this process is not a task of an "
                          "srun step (no SLURM_STEP_NUM_TASKS: a batch script or an salloc "
                          "shell), so it runs as a single rank; start the ranks with srun"
                          % env["SLURM_NTASKS"], RuntimeWarning, stacklevel=2)
    else:
        rank, size, local, names = found[0]
        if local is None:
            local = _first_int(env, ("LOCAL_RANK",), None)
        # RANK/WORLD_SIZE set by hand, or left in the shell, beside an MPI launcher that says
        # otherwise, with no sign of torchrun (which sets them from its own agent inside an
        # mpirun): every rank takes the same numbers and the job cannot form. Warned, not
        # refused: another launcher of one's own may set them on purpose.
        if names == "RANK/WORLD_SIZE" and not env.get("TORCHELASTIC_RUN_ID") and \
                not env.get("GROUP_RANK"):
            for r, s, l, other in found[1:]:
                if other != "%s/%s" % _SLURM[:2] and (r, s) != (rank, size):
                    import warnings

                    warnings.warn("tutti_torch: RANK=%d and WORLD_SIZE=%d are set, but %s say "
                                  "rank %d of %d: RANK/WORLD_SIZE win, so every rank of this "
                                  "mpirun may take the same rank; if they were left in the "
                                  "shell, unset them" % (rank, size, other, r, s),
                                  RuntimeWarning, stacklevel=2)
                    break
        # Two MPI launchers that disagree: one's variables leaked in from an outer mpirun.
        for r, s, l, other in found[1:]:
            # Slurm's stay set around an mpirun or torchrun inside an srun step
            if names != "RANK/WORLD_SIZE" and other != "%s/%s" % _SLURM[:2] and (r, s) != (rank, size):
                raise ValueError("tutti_torch: two launchers' variables disagree: %s say rank %d "
                                 "of %d, %s say rank %d of %d: one set leaked in from an outer "
                                 "launcher; unset the outer one's, or set RANK and WORLD_SIZE"
                                 % (names, rank, size, other, r, s))
            if local is None and (r, s) == (rank, size):
                local = l  # a launcher that agrees may be the one that knows the local rank
        if local is None and size == 1:
            local = 0
    if not 0 <= rank < size:
        raise ValueError("tutti_torch: rank %d is outside world size %d (launcher variables: %s)"
                         % (rank, size, _launcher_vars(env)))
    env.setdefault("RANK", str(rank))
    env.setdefault("WORLD_SIZE", str(size))
    if local is not None:
        # No launcher said it (RANK and WORLD_SIZE set by hand): left unset rather than
        # guessed, since 0 on every rank would make each one its node's first process.
        env.setdefault("LOCAL_RANK", str(local))
    addr, port = "127.0.0.1", 29500
    names = found[0][3] if found else None
    if names == "PMI_RANK/PMI_SIZE" and _srun_pmi(env, rank, size):
        names = "%s/%s" % _SLURM[:2]
    job = None
    if names == "%s/%s" % _SLURM[:2] and size > 1:
        slurm_addr, port = _slurm_store(env, want_addr=not env.get("MASTER_ADDR"))
        addr = slurm_addr or addr
        job = "Slurm job %s step %s" % (env.get("SLURM_JOB_ID", "?"),
                                        env.get("SLURM_STEP_ID", "?"))
    elif found and size > 1:
        derived, job = _launcher_port(env, names)
        port = derived or port
    if not env.get("MASTER_ADDR"):
        # 127.0.0.1 serves a job on one host; one that spans hosts would wait out its timeout
        # for a store no other host can reach (plain torch refuses at once, as here). Only the
        # launcher in use says so, each with its own count of local ranks.
        local_size = {"PMI_RANK/PMI_SIZE": "MPI_LOCALNRANKS",
                      "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE"}
        here = _first_int(env, (local_size[names],), None) if names in local_size else None
        if addr == "127.0.0.1" and here is not None and here < size:
            raise ValueError("tutti_torch: MASTER_ADDR is not set, and this job spans several "
                             "hosts (%d of its %d ranks on this one): set MASTER_ADDR to rank "
                             "0's host, where the store will listen" % (here, size))
        env["MASTER_ADDR"] = addr
    derived = not env.get("MASTER_PORT")
    if derived:
        env["MASTER_PORT"] = str(port)
    if env is os.environ:
        global _launcher_job, _port_derived
        _launcher_job, _port_derived = ((rank, size), job), derived
    return rank, size, local


# The job the launcher named for this process (setup_env_from_launcher), else None, and
# whether MASTER_PORT was derived from it. Two jobs can meet on one port: given the same
# MASTER_PORT (left in a shell, a sweep started at once: one rank 0 loses the port, and its
# ranks reach the other's store), or by their derived ports (Slurm's steps 10 apart; a hash's
# chance elsewhere). torch's TCPStore, unlike libtutti's store, admits any client: a rank of one
# job would join the other's group and reduce with it, silently. _create compares it with rank
# 0's.
_launcher_job = (None, None)  # ((rank, size) the launcher gave, its job), or Nones
_port_derived = False
_JOB_KEY = "tutti/launcher_job"


def _check_job(store, rank, size, timeout):
    """Rank 0 records the job its launcher named in the group's store; a rank whose launcher
    named one compares its own and refuses another job's store. Only where the group is the
    launcher's job, rank and size as it gave them: a group built on purpose from several
    launches (init_process_group(rank=offset + local, world_size=...)) records and checks
    nothing."""
    placed, job = _launcher_job
    if placed != (rank, size):
        job = None
    if rank == 0:
        store.set(_JOB_KEY, job or "")
        return
    if job is None:
        return
    import time

    end, pause = time.monotonic() + timeout.total_seconds(), 0.0005
    while not store.check([_JOB_KEY]):
        if time.monotonic() >= end:
            return  # rank 0 never came: tutti's own wait says so, naming it
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    theirs = store.get(_JOB_KEY).decode("utf-8", "replace")
    if theirs and theirs != job:
        # another process wrote it: only printable text goes into the message
        theirs = "".join(c if c.isprintable() else "?" for c in theirs[:200])
        host, port = _store_address(store)
        env_port = os.environ.get("MASTER_PORT")
        if port is not None and str(port) != env_port:
            how = ("both jobs were given the store %s:%s; give each job a port of its own"
                   % (host, port))
        elif _port_derived:
            how = ("the port was derived from the job, and two jobs' derived ports met; set "
                   "MASTER_PORT to a port of this job's own")
        else:
            how = ("both jobs were given MASTER_PORT=%s; give each job a port of its own, or "
                   "leave MASTER_PORT unset under mpirun or srun, and tutti_torch derives one "
                   "from the job" % env_port)
        where = ("the store at %s:%s" % (host, port) if port is not None else
                 "the group's store")
        raise RuntimeError(
            "tutti_torch: %s belongs to another job: its rank 0 is of %s, this rank is of %s "
            "(%s)" % (where, theirs, job, how))


def _store_address(store):
    """The host and port of the TCPStore under store's prefixes, or (None, None) for another
    kind of store (a FileStore, a HashStore)."""
    for _ in range(16):
        if hasattr(store, "port") and hasattr(store, "host"):
            return store.host, store.port
        store = getattr(store, "underlying_store", None)
        if store is None:
            break
    return None, None


_generations = {}  # (group name, its global ranks): such groups this process made (_create)
_generations_lock = threading.Lock()


def _key_prefix(name, ranks):
    """Where a group's keys go in its store, the same on every rank of the group and unused by
    any group before it. torch names groups "0", "1", ... again after destroy_process_group, and
    a store that outlives them keeps the last ones' keys: torchrun's agent store outlives even a
    restart (its workers are new processes, which count from 0 again), and a group named like an
    earlier one may have other ranks (a rank that was not in the earlier one counts 0). So: the
    restart, from TORCHELASTIC_RESTART_COUNT where the workers use the agent's store (torch's
    own rendezvous keyed its store by it once); the group's ranks; and the count of groups of
    this name with these ranks this process made, which every member made alike."""
    with _generations_lock:
        gen = _generations.get((name, ranks), 0)
        _generations[(name, ranks)] = gen + 1
    attempt = 0
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        try:
            attempt = max(0, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
        except ValueError:
            attempt = 0
    digest = 0
    for r in ranks:  # FNV-1a over the ranks: short, and the same in every process
        digest = ((digest ^ (r & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
    return "tutti/a%d/r%08x-%d/g%d/" % (attempt, digest, len(ranks), gen), gen


def _interface_from_gloo(env):
    """A job set up for Gloo names its network interface in GLOO_SOCKET_IFNAME (exact names,
    comma-separated): unless TUTTI_SOCKET_IFNAME says otherwise, tutti uses the same (it
    ignored it, and chose by MASTER_ADDR's route, where a firewall may refuse it). True when it
    set TUTTI_SOCKET_IFNAME, which the caller removes once the group is made."""
    gloo = env.get("GLOO_SOCKET_IFNAME", "").strip()
    if gloo and not env.get("TUTTI_SOCKET_IFNAME"):
        env["TUTTI_SOCKET_IFNAME"] = "=" + gloo
        return True
    return False


def _create(dist_opts, pg_options):
    """The creator torch calls for backend "tutti" (init_process_group, new_group), with the
    extended API: dist_opts carries the group's store (already prefixed per group and device),
    rank, size, timeout, name and global ranks; pg_options is the caller's pg_options."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError("tutti_torch: pg_options must be a tutti_torch.Options, not %s"
                        % type(pg_options).__name__)
    # The group's own copy (the backend keeps it): one Options object handed to several groups
    # (init_process_group, then new_group with another timeout) must not rename or re-time the
    # groups made before. init_process_group's timeout wins, as for NCCL.
    options = Options(dist_opts.timeout)
    if pg_options is not None:
        options.inline_max = pg_options.inline_max
        options.worker_count = pg_options.worker_count
        options.transport = pg_options.transport
    options.group_name = dist_opts.group_id
    # init_process_group creates its group before it records it as the default one
    options._default_group = not dist.is_initialized()
    options.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
    options._key_prefix, generation = _key_prefix(dist_opts.group_id,
                                                  tuple(options.global_ranks_in_group))
    if options._default_group and generation == 0:
        _check_job(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                   dist_opts.timeout)
    from_gloo = _interface_from_gloo(os.environ)
    try:
        return BackendTutti(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, options)
    except RuntimeError as e:
        if from_gloo and "TUTTI_SOCKET_IFNAME" in str(e):
            raise RuntimeError("%s (tutti_torch set TUTTI_SOCKET_IFNAME from GLOO_SOCKET_IFNAME="
                               "%s)" % (e, os.environ.get("GLOO_SOCKET_IFNAME"))) from e
        raise
    finally:
        if from_gloo:  # for this group's creation only: not for children, nor later groups
            os.environ.pop("TUTTI_SOCKET_IFNAME", None)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for a tutti group (torch's own refuses every backend
    but Gloo before it reaches the backend): every rank but 0 reports to rank 0, which waits up
    to timeout (default: the group's) and raises naming the rank that did not arrive (with
    wait_all_ranks, every such rank); the others then raise too, with rank 0's verdict."""
    import datetime

    group = group if group is not None else dist.distributed_c10d._get_default_group()
    if dist.distributed_c10d._rank_not_in_group(group):
        return  # as every torch collective does on a rank outside the group
    if timeout is None:
        timeout = group._get_backend(torch.device("cpu")).timeout
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError("tutti_torch.monitored_barrier: timeout must be a datetime.timedelta")
    group.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


_torch_monitored_barrier = dist.distributed_c10d.monitored_barrier


def _monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, which importing tutti_torch puts in torch's place:
    a tutti group goes to tutti_torch.monitored_barrier (torch's refuses every backend but Gloo
    before the backend is reached), any other group to torch's own, unchanged."""
    if group is not None and dist.distributed_c10d._rank_not_in_group(group):
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)  # warns, as torch does
    if dist.is_initialized() and dist.get_backend(group) == BACKEND:
        import datetime

        if isinstance(timeout, (int, float)):  # torch converts (and warns about) plain seconds
            timeout = datetime.timedelta(seconds=timeout)
        return monitored_barrier(group, timeout, wait_all_ranks)
    return _torch_monitored_barrier(group, timeout, wait_all_ranks)


# Code written for Gloo calls dist.monitored_barrier; let it reach tutti's.
_monitored_barrier.__doc__ = ((_monitored_barrier.__doc__ or "") + "\n\ntorch's own:\n" +
                              (_torch_monitored_barrier.__doc__ or ""))  # None under python -OO
dist.monitored_barrier = dist.distributed_c10d.monitored_barrier = _monitored_barrier


_torch_coalescing_manager = dist.distributed_c10d._coalescing_manager


@contextlib.contextmanager
def _coalescing_manager(group=None, device=None, async_ops=False):
    """torch's _coalescing_manager (batch_isend_irecv's), which importing tutti_torch puts in
    its place: an exception inside the block (a refused send or receive) ends the block, in torch
    and in the backend, before it propagates. torch's own left it open: every later collective
    of the group was recorded for the block and never run, silently. Otherwise unchanged, for
    any backend."""
    manager = _torch_coalescing_manager(group, device, async_ops)
    cm = manager.__enter__()
    try:
        yield cm
    except BaseException:
        g = group or dist.distributed_c10d._get_default_group()
        dist.distributed_c10d._world.pg_coalesce_state.pop(g, None)
        if device:
            try:  # the backend leaves its block too (what it collected runs, on every rank alike)
                g._end_coalescing(device)
            except Exception:  # noqa: BLE001  (the first error is the one to report)
                pass
        raise
    manager.__exit__(None, None, None)


dist.distributed_c10d._coalescing_manager = _coalescing_manager
if getattr(dist, "_coalescing_manager", None) is _torch_coalescing_manager:
    dist._coalescing_manager = _coalescing_manager


def register():
    """Registers the backend "tutti" with torch.distributed for the "cpu" device (importing
    tutti_torch does it; torch >= 2.14 also calls this through the torch.distributed.backends
    entry point). Registering twice is harmless."""
    if "tutti" not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])


register()


def _batch_shell(env):
    """An sbatch script or an salloc shell of several tasks, where Python runs without srun."""
    try:
        return _first_int(env, ("SLURM_NTASKS",), 1) > 1
    except ValueError:
        return False


# Only under a launcher: a process nobody launched keeps its environment as it is, so that an
# "env://" init without RANK fails as it would without this import. Python run in a batch
# script without srun is told so, and runs as a job of one rank, as a C program there does.
if _launched(os.environ) or _batch_shell(os.environ):
    try:
        setup_env_from_launcher()
    except ValueError as e:
        # the environment is left as it was: init_process_group fails in its own words; say why
        import warnings

        warnings.warn(str(e), RuntimeWarning, stacklevel=2)
