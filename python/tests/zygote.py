"""zygote.py: a Python that has imported torch once and forks each rank of a test from there
(harness.py starts it and talks to it), so that a rank does not pay torch's import again: about
3.4 s of CPU per rank on the development machine, 85-90 % of what the ranks of the torch tests
spent, and the suite's time is CPU time on 2 cores.

A fork runs the test file as `python FILE --worker NAME ARGS...` would, in its own session, with
the environment, directory and output files it was sent; the rest of its life is a fresh
interpreter's (an exception or sys.exit ends it, with the interpreter's own finalization).
harness.py sends here only ranks whose environment agrees with this process's on what torch
reads as it is imported (TORCH_*, LD_*, PYTHON*, the thread pools'), and spawns the others.

Protocol, over the SOCK_SEQPACKET socket whose descriptor is argv[1], one JSON object per
message: a request {"argv", "env", "cwd"} with the rank's stdout and stderr descriptors attached
is answered {"pid": P} (or {"error": TEXT}); a rank that ends is reported {"exit": P, "rc": RC},
RC as subprocess gives it (-N: killed by signal N). The zygote ends when its socket closes.
"""
import json
import os
import runpy
import select
import socket
import sys

import torch  # noqa: F401  (the point: what each rank would import again)
import torch.distributed  # noqa: F401


def _send(sock, obj):
    sock.send(json.dumps(obj).encode())


def _reap(sock, children):
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exit": pid, "rc": os.waitstatus_to_exitcode(status)})


def _become_rank(sock, req, fds):
    """In the fork: the rank's session, output, environment and arguments; then the file. The
    signal dispositions stay the zygote's, which are a fresh Python's (SIGPIPE ignored)."""
    sock.close()
    os.setsid()
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = list(req["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    children = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        _reap(sock, children)
        if not ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        if not msg:
            return 0  # the harness is gone; ranks still running are on their own sessions
        try:
            req = json.loads(msg)
            if len(fds) != 2:
                raise ValueError("a request needs stdout and stderr descriptors, got %d" % len(fds))
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except (OSError, ValueError) as e:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": "%s: %s" % (type(e).__name__, e)})
            continue
        if pid == 0:
            _become_rank(sock, req, fds)
            sys.exit(0)  # the file returned: a rank that ended well (exceptions propagate)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"pid": pid})


if __name__ == "__main__":
    sys.exit(main())
