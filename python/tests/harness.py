"""harness.py: starts the ranks of a tutti_torch test as separate processes (torchrun's way: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free port), under a deadline, and reports
every rank's exit status and output; also a runner for launchers (torchrun, mpirun). A rank is
forked from a Python that has imported torch already (zygote.py) where its environment allows,
which spares each rank torch's import (TUTTI_TEST_SPAWN=1 spawns every rank fresh).

Each test file is both the unittest that meson runs and, with --worker NAME, the code of one
rank; the worker's own assertions fail the rank, and the test fails with every rank's stderr.
"""
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    """A port nothing holds now, below Linux's ephemeral range (32768 and up): a port the kernel
    hands out for bind(0) may next be taken as the local port of some process's outgoing
    connection, and a store told to listen there failed with EADDRINUSE (seen in CI). Not the
    ranges tutti derives job ports from (20000-31999)."""
    for _ in range(200):
        port = random.randrange(12000, 20000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Result:
    """One process: its exit status (None: killed at the deadline), stdout and stderr."""

    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err


def _collect(procs, files, deadline):
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # its own session: the rank and its children
                except ProcessLookupError:
                    pass
        for p in procs:
            p.wait()
    results = []
    for p, (fo, fe) in zip(procs, files):
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
        fo.close()
        fe.close()
        results.append(Result(None if timed_out and p.returncode < 0 else p.returncode, out, err))
    return results, timed_out


# What torch reads as it is imported: a rank whose environment differs from the zygote's here
# is spawned, not forked (zygote.py).
_IMPORT_ENV = ("TORCH", "LD_", "PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "GLOG_", "CUDA", "NCCL_")


class _Zygote:
    """harness's side of zygote.py: one per test process, started at the first rank it forks."""

    def __init__(self):
        self.env = dict(os.environ, OMP_NUM_THREADS="1")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([PY, os.path.join(HERE, "zygote.py"), str(theirs.fileno())],
                                     env=self.env, pass_fds=[theirs.fileno()],
                                     start_new_session=True)
        theirs.close()
        self.sock = mine
        self.exits = {}
        self.replies = []

    def fits(self, env):
        keys = {k for k in list(env) + list(self.env) if k.startswith(_IMPORT_ENV)}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def pump(self, timeout):
        """Reads what the zygote said within timeout seconds (at least what is there now)."""
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        while ready:
            msg = self.sock.recv(1 << 16)
            if not msg:
                raise RuntimeError("harness: the zygote (zygote.py) ended, exit %s; its ranks "
                                   "are unaccounted for" % self.proc.wait())
            m = json.loads(msg)
            if "exit" in m:
                self.exits[m["exit"]] = m["rc"]
            else:
                self.replies.append(m)
            ready, _, _ = select.select([self.sock], [], [], 0)

    def fork(self, argv, env, fo, fe):
        socket.send_fds(self.sock, [json.dumps({"argv": argv, "env": env,
                                                "cwd": os.getcwd()}).encode()],
                        [fo.fileno(), fe.fileno()])
        end = time.monotonic() + 60
        while not self.replies:
            if time.monotonic() > end:
                raise RuntimeError("harness: the zygote did not answer a fork in 60 s")
            self.pump(end - time.monotonic())
        m = self.replies.pop(0)
        if "error" in m:
            raise RuntimeError("harness: the zygote could not fork a rank: " + m["error"])
        return _Forked(self, m["pid"])


class _Forked:
    """A rank forked by the zygote, with what _collect uses of a Popen."""

    def __init__(self, zygote, pid):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self):
        if self.returncode is None:
            self.zygote.pump(0)
            self.returncode = self.zygote.exits.pop(self.pid, None)
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.2 if end is None else min(0.2, end - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired([PY, "--worker"], timeout)
            self.zygote.pump(left)
        return self.returncode


_zygote = None


def _start_rank(argv, env, fo, fe):
    """Forks the rank from the zygote where its environment allows (TUTTI_TEST_SPAWN=1: never),
    else spawns a fresh Python."""
    global _zygote
    if os.environ.get("TUTTI_TEST_SPAWN", "0") == "0":
        if _zygote is None:
            _zygote = _Zygote()
        if _zygote.fits(env):
            return _zygote.fork(argv, env, fo, fe)
    return subprocess.Popen([PY] + argv, env=env, stdout=fo, stderr=fe, text=True,
                            start_new_session=True)


def run_ranks(script, worker, n, timeout=90, env=None, args=()):
    """Runs `python script --worker worker args...` as ranks 0..n-1 (forked from the zygote, or
    spawned: _start_rank); returns (results, timed_out)."""
    port = free_port()
    procs, files = [], []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        e.update(env or {})
        fo = tempfile.TemporaryFile("w+")
        fe = tempfile.TemporaryFile("w+")
        files.append((fo, fe))
        procs.append(_start_rank([script, "--worker", worker] + list(args), e, fo, fe))
    return _collect(procs, files, time.monotonic() + timeout)


def run_cmd(cmd, timeout=90, env=None):
    """Runs one command (a launcher) in its own session; returns (Result, timed_out)."""
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.update(env or {})
    fo = tempfile.TemporaryFile("w+")
    fe = tempfile.TemporaryFile("w+")
    p = subprocess.Popen(cmd, env=e, stdout=fo, stderr=fe, text=True, start_new_session=True)
    results, timed_out = _collect([p], [(fo, fe)], time.monotonic() + timeout)
    return results[0], timed_out


def report(results, timed_out=False):
    lines = ["ranks %s" % ("TIMED OUT (killed)" if timed_out else "finished")]
    for r, res in enumerate(results):
        lines.append("---- rank %d: exit %s ----" % (r, res.rc))
        if res.out.strip():
            lines.append("stdout:\n" + res.out.strip()[-3000:])
        if res.err.strip():
            lines.append("stderr:\n" + res.err.strip()[-6000:])
    return "\n".join(lines)


class RankTest(unittest.TestCase):
    """A TestCase with helpers that launch ranks and assert they all passed."""

    script = None  # the test file, set by subclasses

    def ranks(self, worker, n, timeout=90, env=None, args=()):
        results, timed_out = run_ranks(self.script, worker, n, timeout, env, args)
        self.assertFalse(timed_out, report(results, timed_out))
        for res in results:
            self.assertEqual(res.rc, 0, report(results))
        return results


def init(backend="tutti", timeout_s=60, **kwargs):
    """Worker side: imports tutti_torch (registers "tutti") and joins the default group
    (kwargs go to init_process_group, e.g. pg_options)."""
    import datetime

    import torch
    import torch.distributed as dist

    import tutti_torch  # noqa: F401

    torch.manual_seed(0)
    torch.set_num_threads(1)
    global _backend
    _backend = backend
    if "store" not in kwargs:
        kwargs["init_method"] = "env://"
    dist.init_process_group(backend,
                            timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return dist.get_rank(), dist.get_world_size()


_backend = None  # the default group's backend, once init() has run


def worker_main(workers):
    """Worker side: runs the function named after --worker, then leaves the group."""
    i = sys.argv.index("--worker")
    name = sys.argv[i + 1]
    workers[name](*sys.argv[i + 2:])
    if _backend == "gloo":
        # A Gloo reference run skips the interpreter's finalization: Gloo's worker threads can
        # still drop a tensor then, and the process aborts ("terminate called without an active
        # exception" in ProcessGroupGloo::runLoop) and hangs in the crash handler until the test
        # kills it (seen once in CI, test_train_ddp's Gloo half). Its results are on disk.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
