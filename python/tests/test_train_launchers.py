"""test_train_launchers.py: the DDP training example (examples/torch_ddp.py, fp32 and bf16
autocast) over tutti under every way users start ranks: torchrun, MPICH's mpirun (PMI_RANK /
PMI_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_*; as root with --allow-run-as-root, and
OMPI_MCA_plm=isolated where there is no ssh), and plain environment variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, one process per rank, as harness.py starts them).

Under each, the example must report identical replicas; and since the launcher only decides
how ranks find each other (Open MPI also binds each rank to a core), the weights rank 0 ends
with must be bit-identical across launchers, and to the same job over Gloo.
"""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

EXAMPLE = os.path.join(harness.ROOT, "examples", "torch_ddp.py")
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_RANK",
             "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
STEPS = "20"


class TestTrainLaunchers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tutti-launchers-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def env(self, **extra):
        e = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
        e.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        e.update(extra)
        return e

    def args(self, dtype, backend, out):
        return [EXAMPLE, "--steps", STEPS, "--dtype", dtype, "--backend", backend,
                "--save-weights", out]

    def check(self, results, timed_out, out):
        self.assertFalse(timed_out, "hung: " + harness.report(results, True))
        for res in results:
            self.assertEqual(res.rc, 0, harness.report(results))
        text = "".join(r.out for r in results)
        self.assertIn("replicas identical: yes", text, harness.report(results))
        # one job of 2 ranks (rank 0 prints), not 2 jobs of one rank each
        self.assertEqual(text.count("torch_ddp.py: 2 ranks, backend"), 1,
                         harness.report(results))
        self.assertTrue(os.path.exists(out), "rank 0 saved no weights")

    def run_launcher(self, launcher, dtype, backend="tutti"):
        out = os.path.join(self.tmp, "%s-%s-%s.pt" % (launcher, dtype, backend))
        args = self.args(dtype, backend, out)
        port = str(harness.free_port())
        if launcher == "env":
            results, timed_out = self.run_env(args, port)
        elif launcher == "torchrun":
            cmd = [harness.PY, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--master_addr", "127.0.0.1", "--master_port", port] + args
            res, timed_out = harness.run_cmd(cmd, timeout=180, env=self.env())
            results = [res]
        elif launcher == "mpich":
            cmd = ["mpirun.mpich", "-n", "2", harness.PY] + args
            res, timed_out = harness.run_cmd(cmd, timeout=180, env=self.env(MASTER_PORT=port))
            results = [res]
        else:
            env = self.env(MASTER_PORT=port)
            if not shutil.which("ssh") and not shutil.which("rsh"):
                env["OMPI_MCA_plm"] = "isolated"  # no ssh/rsh: Open MPI's local launcher
            cmd = ["mpirun.openmpi", "-n", "2", "-x", "MASTER_PORT", "-x", "PYTHONPATH",
                   "-x", "OMP_NUM_THREADS"]
            if os.geteuid() == 0:
                cmd.insert(1, "--allow-run-as-root")
            if (os.cpu_count() or 1) < 2:
                cmd.insert(1, "--oversubscribe")
            res, timed_out = harness.run_cmd(cmd + [harness.PY] + args, timeout=180, env=env)
            results = [res]
        self.check(results, timed_out, out)
        return out

    def run_env(self, args, port):
        """Two processes with torchrun's variables set by hand (no launcher at all)."""
        import subprocess
        import time

        procs, files = [], []
        for r in range(2):
            e = self.env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                         MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            fo, fe = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            procs.append(subprocess.Popen([harness.PY] + args, env=e, stdout=fo, stderr=fe,
                                          text=True, start_new_session=True))
            files.append((fo, fe))
        return harness._collect(procs, files, time.monotonic() + 180)

    def same_weights(self, paths):
        import torch

        ref = torch.load(paths[0])
        for p in paths[1:]:
            got = torch.load(p)
            for k in ref:
                self.assertTrue(torch.equal(ref[k], got[k]), "%s: %s differs from %s" %
                                (k, os.path.basename(p), os.path.basename(paths[0])))

    def launchers(self):
        have = ["env", "torchrun"]
        if shutil.which("mpirun.mpich"):
            have.append("mpich")
        if shutil.which("mpirun.openmpi"):
            have.append("openmpi")
        return have

    def test_fp32_every_launcher(self):
        paths = [self.run_launcher(l, "fp32") for l in self.launchers()]
        paths.append(self.run_launcher("env", "fp32", backend="gloo"))
        self.same_weights(paths)

    def test_bf16_autocast_every_launcher(self):
        paths = [self.run_launcher(l, "autocast") for l in self.launchers()]
        paths.append(self.run_launcher("env", "autocast", backend="gloo"))
        self.same_weights(paths)


if __name__ == "__main__":
    unittest.main()
