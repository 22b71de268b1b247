"""test_ddp.py: DistributedDataParallel over backend "tutti".

- fp32: the same model trained for some steps with tutti and with Gloo (a Gloo subgroup of the
  same processes) ends with bit-identical parameters. At 2 ranks both backends sum a gradient
  as a + b (one IEEE addition, commutative), and DDP divides by the world size the same way for
  both, so every step must match bit for bit; several small buckets, BatchNorm buffers (fp32
  and int64, broadcast every step) and momentum make the path DDP takes the full one.
- bf16 parameters (gradients reduced in bf16): tutti against Gloo, which reduces bf16 since
  torch 2.x: at 2 ranks both add a + b with one rounding, so the parameters after the same
  steps are identical. bf16 parameters and an fp32 model under CPU autocast to bf16 both
  train with tutti: the loss falls, and the parameters stay identical on every rank.
- comm hooks, which live on Work.getFuture(): a Python hook that reduces gradients in bf16
  (Future.then; torch's own bf16_compress_hook is refused on CPU builds), torch's
  fp16_compress_hook, and PowerSGD, whose callbacks wait for further allreduces of the group
  from inside a Future callback.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS_FP32 = 8
STEPS_BF16 = 30


def make_model(torch):
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64, bias=False), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def train_fp32(torch, dist, group, rank, dtype=None):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model(torch)
    if dtype is not None:
        model = model.to(dtype)
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.004)  # 4 KB: several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS_FP32):
        g = torch.Generator().manual_seed(1000 * rank + step)
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 8, generator=g)
        if dtype is not None:
            x, y = x.to(dtype), y.to(dtype)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()] + \
        [b.detach().clone() for b in model.buffers()]


def w_fp32():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    gloo = dist.new_group(backend="gloo")
    initial = [p.detach().clone() for p in make_model(torch).parameters()]
    got_tutti = train_fp32(torch, dist, None, rank)
    got_gloo = train_fp32(torch, dist, gloo, rank)
    assert len(got_tutti) == len(got_gloo)
    for i, (a, b) in enumerate(zip(got_tutti, got_gloo)):
        if not torch.equal(a, b):
            raise AssertionError("tensor %d differs between tutti and gloo: max |diff| %g" %
                                 (i, (a.double() - b.double()).abs().max().item()))
    for a, b in zip(got_tutti, initial):
        assert not torch.equal(a, b), "a parameter did not change: no training happened"
    # bf16 parameters: bf16 gradient buckets, reduced by both backends
    got_tutti16 = train_fp32(torch, dist, None, rank, torch.bfloat16)
    got_gloo16 = train_fp32(torch, dist, gloo, rank, torch.bfloat16)
    for i, (a, b) in enumerate(zip(got_tutti16, got_gloo16)):
        if not torch.equal(a, b):
            raise AssertionError("bf16 tensor %d differs between tutti and gloo: max |diff| %g" %
                                 (i, (a.double() - b.double()).abs().max().item()))
    # every rank holds the same parameters (not buffers: BatchNorm's running statistics come
    # from rank 0 at each forward, then each rank's own batch updates them)
    nparams = len(initial)
    flat = torch.cat([t.double().flatten() for t in got_tutti[:nparams]])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    assert torch.equal(flat, ref), "ranks disagree after DDP training"
    dist.destroy_process_group()
    print("rank %d: DDP fp32 and bf16 tutti == gloo bit for bit over %d tensors" %
          (rank, len(got_tutti)))


def bf16_hook(state, bucket):
    """A DDP comm hook: allreduce the gradient bucket in bf16, average, write it back."""
    import torch
    import torch.distributed as dist

    buf = bucket.buffer()
    low = buf.to(torch.bfloat16)
    fut = dist.all_reduce(low, op=dist.ReduceOp.AVG, async_op=True).get_future()

    def back(f):
        buf.copy_(f.value()[0])
        return buf

    return fut.then(back)


def train_bf16(torch, rank, autocast, hook=None):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(7)
    w_true = torch.randn(16, 4)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    if not autocast:
        model = model.to(torch.bfloat16 if hook is None else torch.float32)
    ddp = DDP(model, bucket_cap_mb=0.001)
    if hook is not None:
        ddp.register_comm_hook(*hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS_BF16):
        g = torch.Generator().manual_seed(100 * rank + step)
        x = torch.randn(32, 16, generator=g)
        y = x @ w_true
        opt.zero_grad()
        if autocast:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                out = ddp(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
        else:
            out = ddp(x.to(next(model.parameters()).dtype))
            loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


def w_bf16():
    import torch
    import torch.distributed as dist

    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    rank, n = harness.init()
    runs = [("bf16 parameters", False, None), ("bf16 autocast", True, None),
            ("fp32, bf16 comm hook", False, (None, bf16_hook)),
            ("fp32, fp16_compress_hook", False, (None, default_hooks.fp16_compress_hook)),
            ("fp32, PowerSGD hook", False,
             (powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                          start_powerSGD_iter=2), powerSGD_hook.powerSGD_hook))]
    for what, autocast, hook in runs:
        model, losses = train_bf16(torch, rank, autocast, hook)
        dtype = {p.dtype for p in model.parameters()}
        want = torch.float32 if autocast or hook else torch.bfloat16
        assert dtype == {want}, dtype
        first = sum(losses[:3]) / 3
        last = sum(losses[-3:]) / 3
        # the task is linear: 30 SGD steps take the loss well down from where it starts
        assert last < 0.5 * first, "%s: loss %.4f -> %.4f did not go down (%s)" % (
            what, first, last, ["%.3f" % v for v in losses])
        flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, 0)
        assert torch.equal(flat, ref), "%s: ranks disagree" % what
        print("rank %d: DDP %s: loss %.4f -> %.4f" % (rank, what, first, last))
    dist.destroy_process_group()


class TestDDP(harness.RankTest):
    script = os.path.abspath(__file__)

    def test_ddp_fp32_matches_gloo_bit_for_bit(self):
        res = self.ranks("fp32", 2, timeout=120)
        self.assertIn("bit for bit", res[0].out)

    def test_ddp_bf16_trains(self):
        res = self.ranks("bf16", 2, timeout=120)
        self.assertIn("bf16 autocast", res[0].out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"fp32": w_fp32, "bf16": w_bf16}))
    import unittest

    unittest.main()
