"""harness.py: starts the ranks of a tutti_torch test as separate processes (torchrun's way: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free port), under a deadline, and reports
every rank's exit status and output; also a runner for launchers (torchrun, mpirun).

Each test file is both the unittest that meson runs and, with --worker NAME, the code of one
rank; the worker's own assertions fail the rank, and the test fails with every rank's stderr.
"""
import os
import random
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


def run_ranks(script, worker, n, timeout=90, env=None, args=()):
    """Runs `python script --worker worker args...` as ranks 0..n-1; returns (results,
    timed_out)."""
    port = free_port()
    procs, files = [], []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        e.update(env or {})
        fo = tempfile.TemporaryFile("w+")
        fe = tempfile.TemporaryFile("w+")
        procs.append(subprocess.Popen([PY, script, "--worker", worker] + list(args), env=e,
                                      stdout=fo, stderr=fe, text=True, start_new_session=True))
        files.append((fo, fe))
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
