#!/usr/bin/env python3
"""torch_ddp.py: PyTorch DistributedDataParallel training over tutti (backend "tutti"), on CPUs.

    mpirun.mpich -n 2 python examples/torch_ddp.py           # MPICH (Open MPI: below)
    torchrun --nproc_per_node 2 examples/torch_ddp.py
    mpirun.mpich -n 2 python examples/torch_ddp.py --dtype bf16      # bf16 parameters
    mpirun.mpich -n 2 python examples/torch_ddp.py --dtype autocast  # fp32 + CPU autocast

(python: one with torch 2.13 and tutti_torch, e.g. .venv/bin/python after scripts/build.sh.)
It trains a small MLP to fit a fixed random linear map (each rank its own batches) and prints
the loss, which falls. The only tutti-specific lines are `import tutti_torch` and the backend
name; `--backend gloo` runs the same script over Gloo for comparison. tutti_torch is taken from
the Python path (pip install .), else from <repo>/build/python (scripts/build.sh's build); under
mpirun, importing it maps the launcher's rank variables to RANK / WORLD_SIZE / LOCAL_RANK.
Open MPI passes across nodes only the variables named with -x (and, as root, wants
--allow-run-as-root; on a machine without ssh, OMPI_MCA_plm=isolated):
    mpirun.openmpi -n 2 -x MASTER_PORT=29600 -x PYTHONPATH python examples/torch_ddp.py
Without a launcher, set the variables torchrun would, one process per rank:
    RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 python examples/torch_ddp.py &
    RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 python examples/torch_ddp.py
"""
import argparse
import datetime
import gc
import os
import sys
import time


def import_tutti_torch():
    try:
        import tutti_torch
    except ImportError:
        build = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "build", "python")
        if not os.path.isdir(os.path.join(build, "tutti_torch")):
            sys.exit("torch_ddp.py: tutti_torch is not importable and %s has no build of it: "
                     "pip install . (in an environment with torch 2.13), or bash "
                     "scripts/build.sh and run with .venv/bin/python" % build)
        sys.path.insert(0, build)
        import tutti_torch
    return tutti_torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "autocast"], default="fp32",
                   help="fp32, bf16 parameters, or fp32 parameters under CPU autocast to bf16")
    p.add_argument("--backend", default="tutti", help="tutti (default) or gloo")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--save-weights", default=None,
                   help="rank 0 writes the final weights here (torch.save of the state dict)")
    p.add_argument("--timeout", type=float, default=120, help="process group timeout, seconds")
    a = p.parse_args()

    tutti_torch = import_tutti_torch()
    rank, size, local_rank = tutti_torch.setup_env_from_launcher()  # import did it too
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, size)))
    dist.init_process_group(a.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=a.timeout))
    rank, size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same target on every rank; DDP broadcasts rank 0's weights
    din, dout = 64, 16
    target = torch.randn(din, dout) / din ** 0.5
    model = torch.nn.Sequential(torch.nn.Linear(din, a.hidden), torch.nn.GELU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.GELU(),
                                torch.nn.Linear(a.hidden, dout))
    if a.dtype == "bf16":
        model = model.to(torch.bfloat16)
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    if rank == 0:
        print("torch_ddp.py: %d ranks, backend %s, %s, torch %s, tutti %s" %
              (size, dist.get_backend(), a.dtype, torch.__version__, tutti_torch.__version__),
              flush=True)
    t0 = time.time()
    first = last = None
    for step in range(a.steps):
        x = torch.randn(a.batch, din, generator=gen)
        y = x @ target
        opt.zero_grad()
        if a.dtype == "autocast":
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                out = ddp(x)
        else:
            out = ddp(x.to(next(model.parameters()).dtype))
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()  # DDP allreduces the gradients here, bucket by bucket, over tutti
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.SUM)
        avg = avg.item() / size
        first = avg if first is None else first
        last = avg
        if rank == 0 and (step % 10 == 0 or step == a.steps - 1):
            print("step %4d  loss %.5f" % (step, avg), flush=True)

    # DDP keeps the replicas identical: check it bit for bit against rank 0
    flat = torch.cat([q.detach().float().flatten() for q in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    same = torch.equal(flat, ref)
    ok = torch.tensor([1 if same else 0], dtype=torch.int32)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if rank == 0:
        if a.save_weights:
            torch.save(model.state_dict(), a.save_weights)
        print("torch_ddp.py: loss %.5f -> %.5f in %d steps, %.2f s; replicas identical: %s" %
              (first, last, a.steps, time.time() - t0, "yes" if ok.item() else "NO"), flush=True)
    result = 0 if ok.item() and last < first else 1
    # DDP holds the group: drop it first, so that no backend thread outlives the interpreter
    # (Gloo's run loop, still alive at exit, aborted a rank with "terminate called without an
    # active exception" once in CI)
    del ddp, model, opt
    gc.collect()
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    sys.exit(main())
