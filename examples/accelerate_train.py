#!/usr/bin/env python3
"""accelerate_train.py: a Hugging Face Accelerate training loop on CPUs over tutti.

    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_train.py
    torchrun --nproc_per_node 2 examples/accelerate_train.py
    mpirun.mpich -n 2 python examples/accelerate_train.py # MPICH; Open MPI: see torch_ddp.py

(python: one with torch 2.13, transformers, accelerate and tutti_torch, e.g. .venv/bin/python
after scripts/build.sh. On a machine without GPUs, `--multi_gpu` only picks Accelerate's
torchrun launcher; the Accelerator below stays on the CPU.)

Accelerate picks "gloo" for CPU processes and refuses a backend it would not pick
(Accelerator(backend="tutti") raises), so the route is the same as for the Trainer: create the
process group over tutti first, then the Accelerator, which finds it initialised and keeps it:

    import tutti_torch                      # registers the backend "tutti"
    torch.distributed.init_process_group("tutti")
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")

accelerator.prepare() then wraps the model in DistributedDataParallel over that group, so the
gradients are allreduced by tutti (accelerator.state still names "gloo", the backend Accelerate
would have chosen).

The job: a small BERT sequence classifier (BertForSequenceClassification built from its config,
random weights, nothing downloaded) learns whether a synthetic sequence starts with a token
from the upper half of the vocabulary, in bf16 autocast, each rank on its own shard of the
data. At the end every rank checks that its weights are bit-identical to rank 0's and that the
model was wrapped in DDP over the tutti group; rank 0 prints the loss and the verdict, and the
exit status is 0 only when the loss fell and the checks held.
"""
import argparse
import os
import socket
import sys

VOCAB, SEQ = 256, 16


def import_tutti_torch():
    try:
        import tutti_torch
    except ImportError:
        build = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "build", "python")
        if not os.path.isdir(os.path.join(build, "tutti_torch")):
            sys.exit("accelerate_train.py: tutti_torch is not importable and %s has no build of "
                     "it: pip install . (in an environment with torch 2.13), or bash "
                     "scripts/build.sh and run with .venv/bin/python" % build)
        sys.path.insert(0, build)
        import tutti_torch
    return tutti_torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_data(torch, n, seed):
    """n random sequences and their labels: 1 when the first token is in the upper half."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    labels = (ids[:, 0] >= VOCAB // 2).long()
    return torch.utils.data.TensorDataset(ids, labels)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="tutti", help="tutti (default) or gloo")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps (default 40)")
    p.add_argument("--batch", type=int, default=32, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate (default 1e-3)")
    p.add_argument("--save-weights", default=None,
                   help="rank 0 writes the final weights here (torch.save of the state dict)")
    a = p.parse_args()

    tutti_torch = import_tutti_torch()
    if not any(os.environ.get(v) for v in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")):
        # started without a launcher: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    tutti_torch.setup_env_from_launcher()  # mpirun's PMI_* / OMPI_* -> RANK, WORLD_SIZE

    import torch
    import torch.distributed as dist
    import transformers
    from accelerate import Accelerator
    from transformers import BertConfig, BertForSequenceClassification

    transformers.logging.set_verbosity_error()
    # 1. the process group first, over tutti; 2. the Accelerator, which keeps it
    dist.init_process_group(a.backend)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    rank, size = dist.get_rank(), dist.get_world_size()

    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=SEQ, num_labels=2, pad_token_id=0)
    torch.manual_seed(0)  # the same random weights on every rank
    model = BertForSequenceClassification(config)
    data = make_data(torch, a.batch * size * a.steps, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=False)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    # 3. prepare: DDP over the default group, and each rank its own shard of the batches
    wrapped, opt, loader = accelerator.prepare(model, opt, loader)

    losses = []
    for step, (ids, labels) in enumerate(loader):
        if step == a.steps:
            break
        out = wrapped(input_ids=ids, labels=labels)
        accelerator.backward(out.loss)
        opt.step()
        opt.zero_grad()
        mean = accelerator.reduce(out.loss.detach().float(), reduction="mean")
        losses.append(mean.item())

    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    ddp = isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
    on_group = size == 1 or (ddp and wrapped.process_group._get_backend(torch.device("cpu"))
                             is backend)
    flat = torch.cat([q.detach().double().flatten() for q in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    ok = torch.tensor([int(torch.equal(flat, ref) and on_group)], dtype=torch.int32)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    k = max(1, len(losses) // 5)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    if rank == 0:
        if a.save_weights:
            torch.save(accelerator.unwrap_model(wrapped).state_dict(), a.save_weights)
        print("accelerate_train.py: %d ranks, torch %s, accelerate %s, backend %s (%s), "
              "mixed precision %s, DDP over the default group: %s" %
              (size, torch.__version__, sys.modules["accelerate"].__version__,
               dist.get_backend(), type(backend).__name__, accelerator.mixed_precision,
               "none: ONE process, not distributed (accelerate launch --cpu --num_processes N, "
               "a MULTI_CPU config without a hostfile, or a config with distributed_type NO, as "
               "'accelerate config default' writes, starts one: use --multi_gpu --num_processes "
               "N)" if size == 1
               else "yes" if on_group else "NO"))
        print("accelerate_train.py: loss %.4f -> %.4f in %d steps; weights identical on every "
              "rank: %s" % (first, last, len(losses), "yes" if ok.item() else "NO"), flush=True)
    dist.destroy_process_group()
    return 0 if ok.item() and last < first else 1


if __name__ == "__main__":
    sys.exit(main())
