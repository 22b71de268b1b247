"""ranks.py: starts the ranks of a benchmark as local processes with torchrun's variables and
waits for them, so that no rank outlives the run: when one rank fails the others are stopped
(after a grace, to let them print why), at the deadline all are, and so are they when this
process is itself stopped (SIGTERM, Ctrl-C). Used by torch_bench.py and ddp_bench.py.
"""
import os
import signal
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the rank and anything it started
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def run(cmd, n, timeout_s, env=None, quiet_ranks=True, grace_s=15):
    """Runs cmd as ranks 0..n-1 (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT set; env adds to os.environ). Rank 0's stdout is this process's; the others'
    is dropped when quiet_ranks. Returns (status, why): 0 and "" when every rank exited 0,
    else the first failing rank's status (124 at the deadline) and a sentence."""
    port = str(free_port())
    procs = []

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        for r in range(n):
            e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                     LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            e.update(env or {})
            procs.append(subprocess.Popen(
                cmd, env=e, start_new_session=True,
                stdout=subprocess.DEVNULL if quiet_ranks and r > 0 else None))
        deadline = time.monotonic() + timeout_s
        failed_at = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            now = time.monotonic()
            if bad and failed_at is None:
                failed_at = now
            if failed_at is not None and now - failed_at > grace_s:
                r, c = bad[0]
                _stop(procs)
                return c, "rank %d exited with status %d; the others were stopped" % (r, c)
            if now > deadline:
                _stop(procs)
                return 124, "the ranks were stopped at the %d s deadline" % timeout_s
            time.sleep(0.1)
        for r, c in enumerate(codes):
            if c != 0:
                return c, "rank %d exited with status %d" % (r, c)
        return 0, ""
    finally:
        _stop(procs)
        signal.signal(signal.SIGTERM, old)
