"""test_harness.py: the harness's own promises, since every torch test trusts them: a rank forked
from the zygote (zygote.py) reports what a spawned one would (exit status, an exception's
traceback, death by a signal, its output), is killed at the deadline with its children, sees
its own environment and arguments, and joins a real group; a rank whose environment torch reads
at import is spawned instead, and TUTTI_TEST_SPAWN=1 spawns every rank.
"""
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def w_raise():
    print("before the raise")
    raise RuntimeError("raised by rank %s" % os.environ["RANK"])


def w_exit(code):
    print("leaving with %s" % code)
    sys.exit(int(code))


def w_kill():
    os.kill(os.getpid(), signal.SIGKILL)


def w_hang(path):
    # a child in the rank's session: the deadline's kill must take it too
    child = subprocess.Popen(["sleep", "300"])
    with open(path + "." + os.environ["RANK"], "w") as f:
        f.write(str(child.pid))
    time.sleep(300)


def w_env(last):
    import torch  # noqa: F401  (already there when forked)

    print("env %s %s %s %s %s" % (os.environ["RANK"], os.environ["WORLD_SIZE"],
                                  os.environ.get("TUTTI_HARNESS_PROBE"), last,
                                  "tutti_torch" in sys.modules))
    print("session leader %s" % (os.getsid(0) == os.getpid()))
    print("parent %d" % os.getppid())


def w_group():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    t = torch.full((8,), float(rank + 1))
    dist.all_reduce(t)
    assert bool((t == n * (n + 1) / 2).all()), t
    dist.destroy_process_group()
    print("group ok")


WORKERS = {"raise": w_raise, "exit": w_exit, "kill": w_kill, "hang": w_hang, "env": w_env,
           "group": w_group}


class TestHarness(unittest.TestCase):
    script = os.path.abspath(__file__)

    def run_ranks(self, worker, n=2, timeout=60, env=None, args=()):
        return harness.run_ranks(self.script, worker, n, timeout, env, args)

    def test_exception_fails_the_rank_with_its_traceback(self):
        results, timed_out = self.run_ranks("raise")
        self.assertFalse(timed_out)
        for r, res in enumerate(results):
            self.assertEqual(res.rc, 1, harness.report(results))
            self.assertIn("before the raise", res.out)
            self.assertIn("RuntimeError: raised by rank %d" % r, res.err)

    def test_exit_status(self):
        for code in ("0", "3"):
            results, timed_out = self.run_ranks("exit", args=(code,))
            self.assertFalse(timed_out)
            self.assertEqual([res.rc for res in results], [int(code)] * 2,
                             harness.report(results))
            self.assertIn("leaving with %s" % code, results[1].out)

    def test_signal(self):
        results, timed_out = self.run_ranks("kill")
        self.assertFalse(timed_out)
        self.assertEqual([res.rc for res in results], [-signal.SIGKILL] * 2)

    def test_deadline_kills_the_rank_and_its_children(self):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "child")
            t0 = time.monotonic()
            results, timed_out = self.run_ranks("hang", timeout=8, args=(path,))
            self.assertTrue(timed_out)
            self.assertLess(time.monotonic() - t0, 60)
            self.assertEqual([res.rc for res in results], [None, None])
            for r in range(2):
                with open(path + "." + str(r)) as f:
                    pid = int(f.read())
                for _ in range(100):  # the kill is sent; the init process reaps it
                    if not os.path.exists("/proc/%d" % pid) or \
                            open("/proc/%d/stat" % pid).read().split()[2] == "Z":
                        break
                    time.sleep(0.05)
                else:
                    self.fail("rank %d's child %d outlived the deadline's kill" % (r, pid))

    def check_env(self, env, forked):
        results, timed_out = self.run_ranks("env", env=env, args=("last-arg",))
        self.assertFalse(timed_out)
        for r, res in enumerate(results):
            self.assertEqual(res.rc, 0, harness.report(results))
            self.assertIn("env %d 2 probe last-arg False" % r, res.out)
            self.assertIn("session leader True", res.out)
            zygote = harness._zygote.proc.pid if harness._zygote else None
            self.assertEqual("parent %d" % zygote in res.out, forked, res.out)

    def test_forked_rank_sees_its_own_environment(self):
        if os.environ.get("TUTTI_TEST_SPAWN", "0") != "0":
            self.skipTest("TUTTI_TEST_SPAWN is set: every rank is spawned")
        self.check_env({"TUTTI_HARNESS_PROBE": "probe"}, forked=True)

    def test_import_time_environment_is_spawned(self):
        self.check_env({"TUTTI_HARNESS_PROBE": "probe", "TORCH_CPP_LOG_LEVEL": "ERROR"},
                       forked=False)

    def test_spawn_everything(self):
        old = os.environ.get("TUTTI_TEST_SPAWN")
        os.environ["TUTTI_TEST_SPAWN"] = "1"
        try:
            self.check_env({"TUTTI_HARNESS_PROBE": "probe"}, forked=False)
        finally:
            if old is None:
                del os.environ["TUTTI_TEST_SPAWN"]
            else:
                os.environ["TUTTI_TEST_SPAWN"] = old

    def test_forked_ranks_form_a_group(self):
        for n in (2, 3):
            results, timed_out = self.run_ranks("group", n=n, timeout=90)
            self.assertFalse(timed_out, harness.report(results, True))
            for res in results:
                self.assertEqual(res.rc, 0, harness.report(results))
                self.assertIn("group ok", res.out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main(WORKERS))
    unittest.main()
