"""test_wheel.py: the pip package. `pip wheel` of the repository (with this Python's torch, no
build isolation, to keep it quick; scripts/test.sh's plain `pip install .` path differs only in
where torch comes from) makes a wheel that holds tutti_torch (the extension and __init__.py),
libtutti.so for it, and the torch.distributed.backends entry point; unpacked into an empty
directory that alone is on the Python path, `import tutti_torch` runs 2 ranks over tutti, with
libtutti loaded from the wheel's copy through the extension's RPATH (no LD_LIBRARY_PATH). Then 2
ranks that never import tutti_torch find "tutti" as torch >= 2.14 does, through the installed
package's torch.distributed.backends entry point, and run over it.
"""
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def w_installed(target):
    import torch
    import torch.distributed as dist

    import tutti_torch

    assert tutti_torch.__file__.startswith(target), tutti_torch.__file__
    rank, n = harness.init()
    t = torch.full((1000,), float(rank + 1), dtype=torch.bfloat16)
    dist.all_reduce(t)
    assert bool((t == n * (n + 1) / 2).all()), t
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "libtutti" in line}
    want = os.path.join(target, ".tutti_torch.mesonpy.libs", "libtutti.so")
    assert libs == {want}, "libtutti loaded from %s, not %s" % (libs, want)
    dist.destroy_process_group()
    print("rank %d: wheel ok (%s)" % (rank, want))


def w_entry_point(target):
    """What torch >= 2.14's lazy lookup does for an unknown backend name (2.13 has no such
    lookup, so this does it by hand): find the name in the torch.distributed.backends entry
    points, load the target and call it; the program itself never imports tutti_torch."""
    import datetime
    from importlib.metadata import entry_points

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    assert "tutti" not in dist.Backend.backend_list, "registered before the lookup"
    found = [ep for ep in entry_points(group="torch.distributed.backends") if ep.name == "tutti"]
    assert len(found) == 1, "entry points named tutti: %s" % found
    where = str(found[0].dist.locate_file(""))
    assert where.startswith(target), "the entry point comes from %s, not the wheel" % where
    found[0].load()()
    assert "tutti" in dist.Backend.backend_list, dist.Backend.backend_list
    dist.init_process_group("tutti", init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    t = torch.full((100,), float(rank + 1))
    dist.all_reduce(t)
    assert bool((t == n * (n + 1) / 2).all()), t
    assert dist.get_backend() == "tutti", dist.get_backend()
    dist.destroy_process_group()
    print("rank %d: entry point ok" % rank)


class TestWheel(unittest.TestCase):
    def test_wheel_builds_installs_and_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, PATH=os.path.dirname(harness.PY) + os.pathsep +
                       os.environ.get("PATH", ""))
            env.pop("PYTHONPATH", None)
            env.pop("LD_LIBRARY_PATH", None)
            wheels = os.path.join(tmp, "wheels")
            cmd = [harness.PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                   "--disable-pip-version-check", "-q", "-w", wheels, harness.ROOT]
            res, timed_out = harness.run_cmd(cmd, timeout=600, env=env)
            self.assertFalse(timed_out, "pip wheel hung: " + harness.report([res], True))
            self.assertEqual(res.rc, 0, harness.report([res]))
            made = os.listdir(wheels)
            self.assertEqual(len(made), 1, made)
            with zipfile.ZipFile(os.path.join(wheels, made[0])) as z:
                names = set(z.namelist())
                self.assertIn("tutti_torch/__init__.py", names)
                self.assertIn(".tutti_torch.mesonpy.libs/libtutti.so", names)
                self.assertTrue(any(n.startswith("tutti_torch/_C.") for n in names), names)
                self.assertFalse(any(n.endswith(".h") or n.endswith(".pc") for n in names),
                                 "the wheel carries C development files: %s" % names)
                ep = [n for n in names if n.endswith("entry_points.txt")]
                self.assertEqual(len(ep), 1, names)
                text = z.read(ep[0]).decode()
                self.assertIn("[torch.distributed.backends]", text)
                self.assertIn("tutti = tutti_torch:register", text)
                target = os.path.join(tmp, "site")
                z.extractall(target)
            for worker, said in (("installed", "wheel ok"), ("entry_point", "entry point ok")):
                # 2 ranks with the unpacked wheel alone on the path
                results, timed_out = harness.run_ranks(
                    os.path.abspath(__file__), worker, 2, timeout=120,
                    env={"PYTHONPATH": target, "LD_LIBRARY_PATH": ""}, args=(target,))
                self.assertFalse(timed_out, harness.report(results, timed_out))
                for r in results:
                    self.assertEqual(r.rc, 0, harness.report(results))
                    self.assertIn(said, r.out, harness.report(results))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"installed": w_installed, "entry_point": w_entry_point}))
    unittest.main()
