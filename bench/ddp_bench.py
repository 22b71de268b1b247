#!/usr/bin/env python3
"""ddp_bench.py: DDP training step time over tutti against Gloo: a BERT-base-sized model (BERT
with its masked-LM head, ~110 M parameters, built from its config with random weights),
bf16 autocast, 2 ranks, the same synthetic batches; several launches in one run, the backend
alternating from launch to launch (tutti, gloo, gloo, tutti, tutti, ...: each backend runs first
in a pair as often as the other), and the medians compared.

    .venv/bin/python bench/ddp_bench.py                         # 6 launches, BERT-base
    .venv/bin/python bench/ddp_bench.py --launches 2 --layers 2 --steps 3 --warmup 1   # quick

Each launch starts -n fresh rank processes (torchrun's variables, under --timeout; when one
rank fails the others are stopped: bench/ranks.py) with
init_process_group(BACKEND), wraps the model in DistributedDataParallel (default buckets, 25
MB: gradients are fp32 under autocast, ~440 MB allreduced per step), runs --warmup untimed
steps and then --steps timed ones (forward under torch.autocast(cpu, bf16), backward with DDP's
allreduces overlapping it, AdamW step). A step's time is taken on every rank between two
points every rank passes together (the steps are synchronous through the gradient allreduce);
the launch reports the median over its steps of the slowest rank's time. samples/s is the
global batch (ranks x --batch sequences) over that median.

The table shows, per backend, each launch's median step time, the median over launches, and
samples/s; then the ratio. At 2 ranks under autocast the gradients are fp32 and reduced as one
addition a + b in either backend, so both backends must train identically: the loss after the
last step is printed per launch and a mismatch between backends is reported (and fails the
run), which also checks that the comparison is between equal work.

Threads: each rank runs --threads torch threads (default: the cores divided among the ranks).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ranks  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(prog="ddp_bench.py", description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--launches", type=int, default=6,
                   help="launches in all, backends alternating (default 6)")
    p.add_argument("--backends", default="tutti,gloo", help="two backends (default tutti,gloo)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per launch (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step (default 8)")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument("--layers", type=int, default=12, help="BERT layers (default 12: BERT-base)")
    p.add_argument("--hidden", type=int, default=768, help="hidden size (default 768)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads per rank (default: cores / ranks, at least 1)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (default 25)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per launch (default 1800)")
    p.add_argument("--json", help="write every launch's step times to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.backends = [b for b in a.backends.split(",") if b]
    if len(a.backends) != 2 or any(b not in ("tutti", "gloo") for b in a.backends):
        p.error("--backends: two of tutti, gloo")
    if min(a.n, a.launches, a.steps, a.batch, a.seq, a.layers) < 1 or a.warmup < 0:
        p.error("-n, --launches, --steps, --batch, --seq, --layers must be positive")
    if a.threads <= 0:
        a.threads = max(1, (os.cpu_count() or 1) // a.n)
    return a


def worker(a):
    """One rank of one launch: trains, writes its step times and last loss to --result."""
    import torch
    import torch.distributed as dist
    import transformers
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import BertConfig, BertForMaskedLM

    try:
        import tutti_torch  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))
        import tutti_torch  # noqa: F401
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    dist.init_process_group(a.worker, timeout=datetime.timedelta(seconds=a.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    config = BertConfig(num_hidden_layers=a.layers, hidden_size=a.hidden,
                        num_attention_heads=max(1, a.hidden // 64),
                        intermediate_size=4 * a.hidden, max_position_embeddings=max(512, a.seq))
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model, bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1 + rank)
    ids = torch.randint(5, config.vocab_size, (a.batch, a.seq), generator=g)
    labels = torch.where(torch.rand(a.batch, a.seq, generator=g) < 0.15, ids,
                         torch.full_like(ids, -100))
    times, loss = [], None
    for step in range(a.warmup + a.steps):
        dist.barrier()  # every rank starts the step together
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = ddp(input_ids=ids, labels=labels)
        out.loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            t = torch.tensor([dt], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times.append(t.item())
        loss = out.loss.detach().float()
    dist.all_reduce(loss)
    if rank == 0:
        with open(a.result, "w") as f:
            json.dump({"backend": a.worker, "times": times, "loss": loss.item() / n,
                       "params": params, "threads": a.threads,
                       "backend_class": type(dist.group.WORLD._get_backend(
                           torch.device("cpu"))).__name__}, f)
    # Teardown is not measured, and Gloo's sometimes never returns here (seen twice in 8 Gloo
    # launches: rank 0, which serves the TCPStore, waiting on a futex after its peer had
    # exited): a rank that cannot tear down in 60 s says so and leaves.
    guard = threading.Timer(60, lambda: (print("ddp_bench.py: rank %d: %s teardown hung for 60 s; "
                                               "exiting" % (rank, a.worker), file=sys.stderr,
                                               flush=True), os._exit(0)))
    guard.daemon = True
    guard.start()
    dist.barrier()
    dist.destroy_process_group()
    guard.cancel()
    return 0


def launch(a, backend, result):
    """One launch of -n ranks over backend; returns (status, why)."""
    args = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + \
        ["--worker", backend, "--result", result, "--threads", str(a.threads)]
    return ranks.run(args, a.n, a.timeout, quiet_ranks=False,
                     env={"OMP_NUM_THREADS": str(a.threads), "PYTHONWARNINGS": "ignore"})


def main():
    a = parse_args()
    if a.worker:
        return worker(a)
    b0, b1 = a.backends
    # tutti gloo | gloo tutti | tutti gloo ...: in each pair of launches both run, and each
    # backend goes first as often as the other
    order = [(b0, b1)[(i + i // 2) % 2] for i in range(a.launches)]
    runs = {b0: [], b1: []}
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i, backend in enumerate(order):
            result = os.path.join(tmp, "launch%d.json" % i)
            t0 = time.time()
            rc, why = launch(a, backend, result)
            if rc != 0 or not os.path.exists(result):
                print("ddp_bench.py: launch %d (%s) failed: %s" %
                      (i + 1, backend, why or "rank 0 wrote no result"), file=sys.stderr)
                return 1
            with open(result) as f:
                r = json.load(f)
            r["median"] = statistics.median(r["times"])
            runs[backend].append(r)
            print("ddp_bench.py: launch %d/%d %-5s median step %.3f s (%d steps, loss %.6f) "
                  "in %.0f s" % (i + 1, a.launches, backend, r["median"], len(r["times"]),
                                 r["loss"], time.time() - t0), file=sys.stderr, flush=True)
    first = (runs[b0] or runs[b1])[0]
    print("ddp_bench.py: DDP, BERT (%d layers, hidden %d) with MLM head, %.1f M parameters, "
          "bf16 autocast, %d ranks x %d threads, batch %d x %d tokens per rank, %d timed steps "
          "after %d, %d launches alternating; %s" %
          (a.layers, a.hidden, first["params"] / 1e6, a.n, a.threads, a.batch, a.seq, a.steps,
           a.warmup, a.launches, datetime.date.today().isoformat()))
    print()
    print("| backend | step time per launch (s) | median step (s) | samples/s |")
    print("|---|---|---:|---:|")
    med = {}
    for b in (b0, b1):
        if not runs[b]:
            continue
        med[b] = statistics.median(r["median"] for r in runs[b])
        print("| %s (%s) | %s | %.3f | %.1f |" % (
            b, runs[b][0]["backend_class"], " ".join("%.3f" % r["median"] for r in runs[b]),
            med[b], a.n * a.batch / med[b]))
    ok = True
    if b0 in med and b1 in med:
        print()
        print("%s/%s step time: %.3f (below 1: %s is faster)" % (b0, b1, med[b0] / med[b1], b0))
        losses = {b: {r["loss"] for r in runs[b]} for b in (b0, b1)}
        if len(losses[b0] | losses[b1]) != 1:
            ok = False
            print("LOSS MISMATCH: the launches did not train identically: %s" % losses)
    print("command: bench/ddp_bench.py %s; %.0f s in all" % (" ".join(sys.argv[1:]),
                                                          time.time() - t_start))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs, "median": med}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
