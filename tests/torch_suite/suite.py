"""suite.py: runs torch's own generic distributed tests (torch.testing._internal.distributed.
distributed_test, the tests torch's test/distributed/test_distributed_spawn.py drives for gloo and
nccl) over a backend registered as a third-party plugin, and writes one JSON line per test.

torch's test_distributed_spawn.py only accepts gloo, nccl and ucc, so this file does its job for a
plugin: it registers the backend named by BACKEND before distributed_test is imported (that
module reads BACKEND at import and asks torch.distributed whether it is available while it
defines the tests), adds it to DistTestCases' "plugin", "ddp" and "subgroup" feature sets (what
a CPU backend that runs DDP and subgroups declares), and defines the same test class the spawn
file defines: TestDistBackend + DistributedTest._DistTestBase, ranks started with "spawn".

Two backends can be named:
  tutti        tutti_torch's BackendTutti (importing tutti_torch registers it)
  gloo_plugin  torch's own ProcessGroupGloo, made exactly as init_process_group makes it for
               "gloo", but registered through Backend.register_backend like tutti: the
               reference that sees the same test decorators tutti sees (every test that says
               `BACKEND != "gloo"` skips for both)
and, for information:
  gloo           the built-in Gloo, as test_distributed_spawn.py runs it;
  tutti_as_gloo  the tests believe BACKEND is "gloo" (so the 25 or so tests that name Gloo
                 run too: get_future, all_reduce_coalesced, scatter_object_list,
                 batch_isend_irecv, ...) while every rank's default group is tutti's. Groups
                 a test makes with an explicit backend="gloo" stay Gloo, and tests that
                 expect Gloo's own behaviour (its timeout messages, its name) cannot pass.

It is started by run.py (once per backend and shard), not by hand; a one-test run for debugging:

    BACKEND=tutti WORLD_SIZE=2 .venv/bin/python tests/torch_suite/suite.py \\
        --out /tmp/r.jsonl -k test_all_reduce_sum
"""
import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

BACKEND = os.environ.setdefault("BACKEND", "tutti")
AS_GLOO = BACKEND == "tutti_as_gloo"
if AS_GLOO:
    os.environ["BACKEND"] = "gloo"  # what distributed_test reads; the groups are tutti's
# "spawn" as torch's test_distributed_spawn.py starts ranks; "fork" saves the 2-3 s each spawned
# rank spends importing torch (this process has made no process group that a fork could copy)
START_METHOD = os.environ.setdefault("TORCH_SUITE_START", "spawn")
os.environ.setdefault("WORLD_SIZE", "2")
# distributed_test's module-level code wants TEMP_DIR/barrier (each test makes its own in setUp)
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="torch-suite-")
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], "barrier"), exist_ok=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def _gloo_plugin(opts, pg_options):
    """ProcessGroupGloo built as distributed_c10d._new_process_group_helper builds it for
    backend "gloo" (same store, rank, size, timeout, options and sequence number)."""
    pg = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size,
                               timeout=opts.timeout)
    pg.options.global_ranks_in_group = list(opts.global_ranks_in_group)
    pg.options.group_name = opts.group_id
    pg._set_sequence_number_for_group()
    return pg


def register(backend):
    """Registers backend as a plugin (for the cpu device); returns the name the tests use."""
    if backend == "tutti":
        try:
            import tutti_torch  # noqa: F401  (registers "tutti")
        except ImportError:
            sys.path.insert(0, os.path.join(ROOT, "build", "python"))
            import tutti_torch  # noqa: F401
    elif backend == "gloo_plugin":
        if "gloo_plugin" not in dist.Backend.backend_list:
            dist.Backend.register_backend("gloo_plugin", _gloo_plugin, extended_api=True,
                                          devices=["cpu"])
    elif backend == "tutti_as_gloo":
        register("tutti")
    elif backend != "gloo":
        raise SystemExit("suite.py: BACKEND=%r: expected tutti, gloo_plugin, gloo or "
                         "tutti_as_gloo" % backend)
    return backend


register(BACKEND)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND not in ("gloo", "tutti_as_gloo"):
    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add(BACKEND)

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """torch's TestDistBackendWithSpawn (test_distributed_spawn.py), for any BACKEND."""

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        """A rank's life: TestDistBackend._run's, but with the default group over tutti when
        the tests are told the backend is Gloo (tutti_as_gloo)."""
        if not AS_GLOO:
            return super()._run(rank, test_name, file_name, pipe, **kwargs)
        import datetime

        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        seconds = distributed_test.CUSTOM_PG_TIMEOUT.get(test_name,
                                                         distributed_test.default_pg_timeout)
        dist.init_process_group(init_method=self.init_method, backend="tutti",
                                world_size=int(self.world_size), rank=rank,
                                timeout=datetime.timedelta(seconds=seconds))
        self._barrier()  # every rank is in before a test that skips at once leaves
        self.run_test(test_name, pipe)
        self._barrier()
        dist.destroy_process_group()
        sys.exit(0)

    def setUp(self):
        super().setUp()
        if START_METHOD == "spawn":
            self._spawn_processes()
        else:  # each rank a fork of this process: no second import of torch per rank
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


class JsonResult(unittest.TestResult):
    """Writes {"test", "status", "seconds", "message"} per test to a file, line by line, so that
    a run killed half way still leaves the results it had."""

    def __init__(self, out, verbose):
        super().__init__()
        self.out, self.verbose = out, verbose
        self.t0 = None

    def startTest(self, test):
        super().startTest(test)
        self.t0 = time.monotonic()
        if self.verbose:
            print("suite.py: %s %s ..." % (BACKEND, test._testMethodName), file=sys.stderr,
                  flush=True)

    def _record(self, test, status, message=""):
        line = {"test": test._testMethodName, "status": status,
                "seconds": round(time.monotonic() - (self.t0 or time.monotonic()), 2),
                "message": message[-4000:]}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()
        if self.verbose:
            print("suite.py: %s %s %s (%.1f s)" % (BACKEND, test._testMethodName, status,
                                                   line["seconds"]), file=sys.stderr, flush=True)

    def stopTest(self, test):
        super().stopTest(test)
        reap(test._testMethodName)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "fail", "".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "fail", "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "xfail", "".join(traceback.format_exception(*err)))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "fail", "unexpected success (the test is marked expectedFailure)")


def reap(name, grace_s=10):
    """Kills a rank process still alive grace_s after its test ended (torch's harness sends it
    SIGTERM when the other rank fails, which must end it), so that one stuck rank cannot hold
    this run at exit; says so on stderr, where run.py finds it."""
    import multiprocessing

    deadline = time.monotonic() + grace_s
    for p in multiprocessing.active_children():
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            print("suite.py: %s: rank process %d still alive %d s after %s ended: killed" %
                  (BACKEND, p.pid, grace_s, name), file=sys.stderr, flush=True)
            p.kill()
            p.join(5)


def test_names():
    return unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="JSON-lines file to append results to (default: stdout)")
    p.add_argument("--list", action="store_true", help="print the test names and leave")
    p.add_argument("-k", action="append", default=[],
                   help="run only tests whose name contains this (repeatable)")
    p.add_argument("--tests", help="file with the test names to run, one per line")
    p.add_argument("-v", action="store_true", help="name each test on stderr as it runs")
    a = p.parse_args()

    names = test_names()
    if a.list:
        print("\n".join(names))
        return 0
    if a.tests:
        with open(a.tests) as f:
            wanted = [ln.strip() for ln in f if ln.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise SystemExit("suite.py: no such tests: %s" % ", ".join(unknown[:10]))
        names = wanted
    if a.k:
        names = [n for n in names if any(k in n for k in a.k)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    out = open(a.out, "a") if a.out else sys.stdout
    try:
        suite.run(JsonResult(out, a.v))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
