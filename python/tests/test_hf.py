"""test_hf.py: Hugging Face over tutti, through the copyable examples (examples/hf_trainer.py,
examples/accelerate_train.py), each started by a real launcher at 2 ranks:

- a Trainer job (small GPT-2 from its config, bf16) under torchrun: the process group is
  created with "tutti" before TrainingArguments(use_cpu=True); the example itself checks that
  the Trainer's model was wrapped in DDP over that group (whose cpu backend is BackendTutti)
  and that both ranks end with bit-identical weights. The same job over Gloo ends with the
  same weights bit for bit (bf16 autocast, fp32 gradients: at 2 ranks a + b is one rounding in
  either backend);
- an Accelerate loop (small BERT classifier, bf16) under `accelerate launch` (its torchrun
  launcher) and under MPICH's mpirun: the same checks, and again the same weights as over
  Gloo.

Hugging Face is kept offline and away from any user configuration (HF_HOME in a temporary
directory): nothing is downloaded, models are built from configs.
"""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

EXAMPLES = os.path.join(harness.ROOT, "examples")
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK",
             "OMPI_COMM_WORLD_SIZE")


class TestHuggingFace(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tutti-hf-")
        self.env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
        self.env.update(HF_HOME=os.path.join(self.tmp, "hf"), HF_HUB_OFFLINE="1",
                        TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
                        PYTHONWARNINGS="ignore")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def launch(self, cmd, timeout=240):
        res, timed_out = harness.run_cmd(cmd, timeout=timeout, env=self.env)
        self.assertFalse(timed_out, "hung: " + harness.report([res], True))
        self.assertEqual(res.rc, 0, harness.report([res]))
        return res

    def torchrun(self, script, *args):
        return [harness.PY, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(harness.free_port()),
                script] + list(args)

    def same_weights(self, a, b):
        import torch

        wa, wb = torch.load(a), torch.load(b)
        self.assertEqual(sorted(wa), sorted(wb))
        for k in wa:
            self.assertTrue(torch.equal(wa[k], wb[k]), "%s differs: tutti vs gloo" % k)

    def check_output(self, res, backend_class):
        self.assertIn("backend %s (%s)" % ("tutti" if backend_class == "BackendTutti"
                                           else "gloo", backend_class), res.out,
                      harness.report([res]))
        self.assertIn("2 ranks", res.out)
        self.assertIn("DDP over the default group: yes", res.out, harness.report([res]))
        self.assertIn("weights identical on every rank: yes", res.out, harness.report([res]))

    def test_trainer_torchrun(self):
        script = os.path.join(EXAMPLES, "hf_trainer.py")
        w = {}
        for backend, cls in (("tutti", "BackendTutti"), ("gloo", "ProcessGroupGloo")):
            w[backend] = os.path.join(self.tmp, backend + ".pt")
            res = self.launch(self.torchrun(script, "--backend", backend, "--steps", "20",
                                            "--save-weights", w[backend]))
            self.check_output(res, cls)
            self.assertIn("bf16", res.out)
        self.same_weights(w["tutti"], w["gloo"])

    def test_accelerate_launch(self):
        script = os.path.join(EXAMPLES, "accelerate_train.py")
        accelerate = os.path.join(os.path.dirname(harness.PY), "accelerate")
        if not os.access(accelerate, os.X_OK):
            self.skipTest("no %s" % accelerate)
        w = {}
        for backend, cls in (("tutti", "BackendTutti"), ("gloo", "ProcessGroupGloo")):
            w[backend] = os.path.join(self.tmp, backend + ".pt")
            cmd = [accelerate, "launch", "--multi_gpu", "--num_processes", "2",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", str(harness.free_port()), script,
                   "--backend", backend, "--steps", "20", "--save-weights", w[backend]]
            res = self.launch(cmd)
            self.check_output(res, cls)
            self.assertIn("mixed precision bf16", res.out)
        self.same_weights(w["tutti"], w["gloo"])

    @unittest.skipUnless(shutil.which("mpirun.mpich"), "no mpirun.mpich")
    def test_accelerate_mpich(self):
        script = os.path.join(EXAMPLES, "accelerate_train.py")
        self.env["MASTER_PORT"] = str(harness.free_port())
        res = self.launch(["mpirun.mpich", "-n", "2", harness.PY, script, "--steps", "20"])
        self.check_output(res, "BackendTutti")


if __name__ == "__main__":
    unittest.main()
