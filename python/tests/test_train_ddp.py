"""test_train_ddp.py: DistributedDataParallel training of a small GPT-2 (built from its config,
random weights, synthetic tokens; train_common.py), launched once with init_process_group
("tutti") and once with ("gloo"), the rest of the program the same:

- fp32: after the steps, the parameters over tutti are bit-identical to those over Gloo, and
  identical on every rank;
- fp32 parameters under CPU bf16 autocast: identical on every rank, and again bit-identical to
  Gloo's. The tolerance is zero on purpose: autocast computes in bf16 but the gradients DDP
  reduces are fp32 (the parameters' dtype), and at 2 ranks both backends compute each
  reduced element as one IEEE addition a + b (commutative, so the order a backend adds in
  cannot matter) before DDP's division by the world size; nothing is left that could differ.
  (At 3 or more ranks the order of the additions would matter and the bound would be a few
  units in the last place; these tests run 2 ranks.)

Each run also checks the loss fell (the model learned) and that the group really was the
backend asked for (the default group's cpu backend object).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import train_common as tc  # noqa: E402

STEPS = 12


def w_ddp(backend, mode, outdir):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, n = harness.init(backend)
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    want = "BackendTutti" if backend == "tutti" else "ProcessGroupGloo"
    assert type(be).__name__ == want, "the default group runs %s, not %s" % (
        type(be).__name__, want)
    model = tc.tiny_gpt2(torch)
    initial = tc.flat_state(torch, model.parameters())
    # small buckets: several allreduces per step, overlapping the backward pass
    ddp = DDP(model, bucket_cap_mb=0.1)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3, weight_decay=0.01)
    succ = tc.successor_table(torch)
    losses = []
    for step in range(STEPS):
        ids = tc.batch(torch, rank, step, succ)
        opt.zero_grad(set_to_none=True)
        loss = tc.lm_loss(torch, ddp, ids, autocast=mode == "autocast")
        loss.backward()
        opt.step()
        losses.append(tc.mean_over_ranks(torch, dist, loss.item()))
    final = tc.flat_state(torch, model.parameters())
    assert not torch.equal(final, initial), "no parameter changed"
    tc.assert_same_on_every_rank(torch, dist, final, "DDP %s %s parameters" % (backend, mode))
    assert losses[-1] < losses[0] - 0.3, "loss did not fall: %s" % losses
    tc.save_result(torch, outdir, rank, params=final, losses=losses)
    dist.destroy_process_group()
    print("rank %d: DDP %s over %s: loss %.4f -> %.4f" % (rank, mode, backend, losses[0],
                                                          losses[-1]))


class TestTrainDDP(harness.RankTest):
    script = os.path.abspath(__file__)

    def run_both(self, mode):
        import torch

        with tempfile.TemporaryDirectory() as tmp:
            got = {}
            for backend in ("tutti", "gloo"):
                out = os.path.join(tmp, backend)
                self.ranks("ddp", 2, timeout=240, args=(backend, mode, out))
                got[backend] = tc.load_results(torch, out, 2)
        for r in range(2):
            diff = tc.first_difference(torch, got["tutti"][r]["params"],
                                       got["gloo"][r]["params"])
            self.assertEqual(diff, "", "rank %d: %s parameters, tutti vs gloo: %s" %
                             (r, mode, diff))
        self.assertEqual(got["tutti"][0]["losses"], got["gloo"][0]["losses"])
        return got

    def test_fp32_bit_identical_to_gloo(self):
        self.run_both("fp32")

    def test_bf16_autocast_identical_to_gloo(self):
        self.run_both("autocast")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"ddp": w_ddp}))
    import unittest

    unittest.main()
