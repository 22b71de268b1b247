#!/usr/bin/env python3
"""hf_trainer.py: a Hugging Face Trainer job on CPUs with tutti as the torch.distributed backend.

    torchrun --nproc_per_node 2 examples/hf_trainer.py
    mpirun.mpich -n 2 python examples/hf_trainer.py      # MPICH; Open MPI: see torch_ddp.py
    python examples/hf_trainer.py --backend gloo          # the same job over Gloo

(python: one with torch 2.13, transformers and tutti_torch, e.g. .venv/bin/python after
scripts/build.sh, or any environment where `pip install .` put tutti_torch.)

Transformers accepts only its own list of backends in TrainingArguments(ddp_backend=...) and
tutti is not on it; what works is to create the process group yourself before the
TrainingArguments, and ask for the CPU:

    import tutti_torch                      # registers the backend "tutti"
    torch.distributed.init_process_group("tutti")
    args = TrainingArguments(..., use_cpu=True, bf16=True)   # no ddp_backend

Accelerate, under the Trainer, finds the group initialised and wraps the model in
DistributedDataParallel over it, so every gradient allreduce goes through tutti (Accelerate
still reports "gloo" as its backend's name: it names the backend it would have picked).

The job: a small GPT-2 (GPT2LMHeadModel built from its config, random weights: nothing is
downloaded) learns synthetic token sequences (SuccessorTokens), in bf16 autocast, for --steps steps. At the end every rank checks that its weights are
bit-identical to rank 0's and that the model the Trainer trained was wrapped in DDP over the
tutti group; rank 0 prints the loss and the verdict, and the exit status is 0 only when the
loss fell and the checks held.
"""
import argparse
import os
import socket
import sys
import tempfile

VOCAB, SEQ = 256, 32


def import_tutti_torch():
    try:
        import tutti_torch
    except ImportError:
        build = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "build", "python")
        if not os.path.isdir(os.path.join(build, "tutti_torch")):
            sys.exit("hf_trainer.py: tutti_torch is not importable and %s has no build of it: "
                     "pip install . (in an environment with torch 2.13), or bash "
                     "scripts/build.sh and run with .venv/bin/python" % build)
        sys.path.insert(0, build)
        import tutti_torch
    return tutti_torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SuccessorTokens:
    """n synthetic sequences (a torch Dataset) for a causal language model: each token is
    followed by its successor in a fixed random table four times in five, by a random token
    otherwise, so the loss can fall from ln(VOCAB) ~ 5.5 towards ~1.6 as the model learns the
    table. labels = input_ids (the model shifts them itself)."""

    def __init__(self, torch, n, seed):
        g = torch.Generator().manual_seed(seed)
        succ = torch.randperm(VOCAB, generator=g)
        ids = torch.empty(n, SEQ, dtype=torch.int64)
        ids[:, 0] = torch.randint(0, VOCAB, (n,), generator=g)
        noise = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        keep = torch.rand(n, SEQ, generator=g) < 0.8
        for t in range(1, SEQ):
            ids[:, t] = torch.where(keep[:, t], succ[ids[:, t - 1]], noise[:, t])
        self.ids = ids

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i],
                "attention_mask": self.ids[i].new_ones(SEQ)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="tutti", help="tutti (default) or gloo")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    p.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--no-bf16", action="store_true", help="train in fp32 instead of bf16")
    p.add_argument("--save-weights", default=None,
                   help="rank 0 writes the final weights here (torch.save of the state dict)")
    p.add_argument("--output-dir", default=None, help="the Trainer's output_dir (default: a "
                   "temporary directory)")
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
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    # 1. the process group first, over tutti: the Trainer will use it as it finds it
    dist.init_process_group(a.backend)
    rank, size = dist.get_rank(), dist.get_world_size()

    # 2. a small GPT-2 from its config (random weights, the same on every rank: seeded)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=128, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    data = SuccessorTokens(torch, n=a.batch * size * a.steps, seed=1)

    # 3. TrainingArguments with use_cpu=True and no ddp_backend (Transformers would refuse
    #    "tutti"); Accelerate finds the group initialised and keeps it
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=a.output_dir or tmp, use_cpu=True, bf16=not a.no_bf16,
            per_device_train_batch_size=a.batch, max_steps=a.steps, learning_rate=a.lr,
            warmup_steps=0, weight_decay=0.01, logging_steps=max(1, a.steps // 6),
            save_strategy="no", report_to=[], seed=0, dataloader_num_workers=0,
            ddp_find_unused_parameters=False, disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=data)
        result = trainer.train()

    # 4. checks: the model was wrapped in DDP over this group, whose cpu backend is tutti's,
    #    and the ranks, each trained on its own batches, hold identical weights
    wrapped = trainer.model_wrapped
    ddp = isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    on_group = size == 1 or (ddp and wrapped.process_group._get_backend(torch.device("cpu"))
                             is backend)
    flat = torch.cat([q.detach().double().flatten() for q in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    ok = torch.tensor([int(torch.equal(flat, ref) and on_group)], dtype=torch.int32)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    fell = len(losses) >= 2 and losses[-1] < losses[0]
    if rank == 0:
        if a.save_weights:
            torch.save(model.state_dict(), a.save_weights)
        print("hf_trainer.py: %d ranks, torch %s, transformers %s, backend %s (%s), %s, "
              "DDP over the default group: %s" %
              (size, torch.__version__, transformers.__version__, dist.get_backend(),
               type(backend).__name__, "fp32" if a.no_bf16 else "bf16",
               "none: ONE process, not distributed" if size == 1
               else "yes" if on_group else "NO"))
        print("hf_trainer.py: loss %s; %d steps in %.1f s; weights identical on every rank: %s"
              % (" ".join("%.3f" % v for v in losses), result.global_step,
                 result.metrics["train_runtime"], "yes" if ok.item() else "NO"), flush=True)
    dist.destroy_process_group()
    return 0 if ok.item() and fell else 1


if __name__ == "__main__":
    sys.exit(main())
