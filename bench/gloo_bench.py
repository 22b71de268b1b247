#!/usr/bin/env python3
"""gloo_bench.py: tutti-bench's twin over PyTorch's Gloo backend (torch.distributed), with the same
flags and the same rows, for bench/compare. `--backend tutti` times the same torch.distributed
calls over tutti's c10d backend (tutti_torch as `pip install .` installed it, else
scripts/build.sh's build in <repo>/build/python).

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun
does), under the Python that has torch 2.13 (.venv/bin/python, which scripts/build.sh makes):

    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29650 \\
        .venv/bin/python bench/gloo_bench.py allreduce -b 8 -e 64M & done; wait

(bench/torch_bench.py compares the two backends in one run, alternating; this script keeps
tutti-bench's flags and rows for bench/compare.)

Calls are timed the way torch users make them: all_reduce, reduce and broadcast work in place on
one tensor, all_gather fills a list of views of one output tensor, all_to_all_single and
reduce_scatter write an output tensor. Where the backend cannot do what is asked (a dtype or op
it refuses) it prints the backend's own error on a '#' line and exits 2.
"""
import argparse
import datetime
import os
import socket
import sys
import time

TIME_BUDGET_S = 1.0  # each size runs at most this long, judged on the warm-up (as tutti-bench)

COLLS = ["allreduce", "allgather", "alltoall", "reduce_scatter", "bcast", "reduce", "barrier"]
DTYPES = ["int8", "uint8", "int32", "int64", "fp16", "bf16", "fp32", "fp64"]
OPS = ["sum", "prod", "min", "max", "avg", "band", "bor", "bxor"]
CALLS = {
    "allreduce": "dist.all_reduce, in place",
    "allgather": "dist.all_gather into views of one tensor",
    "alltoall": "dist.all_to_all_single",
    "reduce_scatter": "dist.reduce_scatter",
    "bcast": "dist.broadcast from rank 0",
    "reduce": "dist.reduce to rank 0, in place",
    "barrier": "dist.barrier",
}


def parse_bytes(s):
    units = {"": 0, "k": 10, "m": 20, "g": 30}
    t = s.lower()
    if t.endswith("b") and len(t) > 1 and not t[-2].isdigit():
        t = t[:-1]
    unit = t[-1] if t and t[-1] in "kmg" else ""
    num = t[: len(t) - len(unit)]
    if not num.isdigit():
        raise argparse.ArgumentTypeError('"%s" is not a size like 8, 64K, 4M' % s)
    return int(num) << units[unit]


def parse_args():
    p = argparse.ArgumentParser(
        prog="gloo_bench.py",
        description="osu-style benchmark of PyTorch's Gloo collectives (tutti-bench's columns)")
    p.add_argument("coll", choices=COLLS)
    p.add_argument("-b", type=parse_bytes, default=8, help="smallest per-rank message (default 8)")
    p.add_argument("-e", type=parse_bytes, default=4 << 20, help="largest per-rank message (default 4M)")
    p.add_argument("-f", type=int, default=2, help="size multiplier per row (default 2)")
    p.add_argument("-i", type=int, default=100, help="timed iterations per size (default 100)")
    p.add_argument("-x", type=int, default=10, help="untimed iterations per size (default 10)")
    p.add_argument("-d", choices=DTYPES, default="fp32", help="dtype (default fp32)")
    p.add_argument("-o", choices=OPS, default="sum", help="reduction op (default sum)")
    p.add_argument("-a", help="not supported: the backend picks its own algorithms")
    p.add_argument("-c", action="store_true", help="check every result bit for bit")
    p.add_argument("--backend", choices=["gloo", "tutti"], default="gloo",
                   help="torch.distributed backend to time (default gloo; tutti: tutti_torch)")
    a = p.parse_args()
    if a.a is not None:
        p.error("-a: the backend picks its own algorithms")
    if a.f < 2 or a.i < 1 or a.x < 0 or a.b > a.e:
        p.error("need -f >= 2, -i >= 1, -x >= 0 and -b <= -e")
    return a


LABELS = {"gloo": "Gloo", "tutti": "tutti (torch.distributed)"}


def cannot(rank, what, err, backend="gloo"):
    """Reports a collective the backend refuses, in its words, and leaves with status 2."""
    if rank == 0:
        msg = " ".join(str(err).split())
        print("# %s cannot run %s: %s" % (LABELS[backend], what, msg[:300]), flush=True)
    sys.exit(2)


def import_tutti_torch():
    """tutti_torch as pip installed it (or from PYTHONPATH), else from scripts/build.sh's build
    in <repo>/build/python."""
    try:
        import tutti_torch
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path.insert(0, os.path.join(root, "build", "python"))
        import tutti_torch
    return tutti_torch


def main():
    a = parse_args()
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print("# gloo: n/a (no torch: %s)" % e, flush=True)
        return 2

    rank = int(os.environ.get("RANK", "0"))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    torch.set_num_threads(1)  # one core per rank, as the C benches use
    if a.backend == "tutti":
        try:
            import_tutti_torch()
        except ImportError as e:
            print("# tutti (torch.distributed): n/a (no tutti_torch: %s; pip install . in this "
                  "environment, or bash scripts/build.sh)" % e, flush=True)
            return 2
    dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))

    tdt = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
           "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
           "fp64": torch.float64}[a.d]
    esize = torch.tensor([], dtype=tdt).element_size()
    op_name = a.o
    rop = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
           "bxor": dist.ReduceOp.BXOR}.get(op_name)
    if rop is None:
        rop = getattr(dist.ReduceOp, "AVG", None)
    coll = a.coll
    n = size
    reduces = coll in ("allreduce", "reduce_scatter", "reduce")
    if reduces and rop is None:
        cannot(rank, "%s op %s" % (coll, op_name), "this torch has no ReduceOp.AVG", a.backend)

    # ---- inputs and expected results: small integers, exact in every dtype ----
    limit = {"int8": 127, "uint8": 255, "int32": 1 << 24, "int64": 1 << 40, "fp16": 2048,
             "bf16": 256, "fp32": 1 << 24, "fp64": 1 << 40}[a.d]
    unsigned = a.d == "uint8"

    def gen(r, idx):
        """Rank r's input at element indices idx (an int64 tensor), in tdt."""
        x = idx * 2654435761 + r * 40503 + 12345
        if op_name in ("band", "bor", "bxor"):
            v = x % 256 if unsigned else x % 256 - 128
        elif op_name == "prod":  # +-1 and one 2 per element: every product is exact
            mag = (idx % n == r).to(torch.int64) + 1
            v = mag + (x % 2) * 2 if unsigned else torch.where(x % 2 == 1, -mag, mag)
        elif op_name == "avg":  # every rank adds base, rank 0 adds n*k too: the sum divides by n
            h = max(1, limit // (2 * n))
            y = idx * 1540483477 + 7
            span = h + 1 if unsigned else 2 * h + 1
            base = y % span - (0 if unsigned else h)
            k = (y // 7) % span - (0 if unsigned else h)
            v = base + (n * k if r == 0 else 0)
        else:
            h = min(limit, 1000) if op_name in ("min", "max") else max(1, min(limit // n, 1000000))
            v = x % (h + 1) if unsigned else x % (2 * h + 1) - h
        return v.to(tdt)

    def reduced(idx):
        vals = [gen(r, idx) for r in range(n)]
        acc = vals[0].clone()
        for v in vals[1:]:
            if op_name in ("sum", "avg"):
                acc = acc + v
            elif op_name == "prod":
                acc = acc * v
            elif op_name == "min":
                acc = torch.minimum(acc, v)
            elif op_name == "max":
                acc = torch.maximum(acc, v)
            elif op_name == "band":
                acc = acc & v
            elif op_name == "bor":
                acc = acc | v
            else:
                acc = acc ^ v
        if op_name == "avg":
            acc = (acc / n).to(tdt) if tdt.is_floating_point else acc // n
        return acc

    def ar(n_el):
        return torch.arange(n_el, dtype=torch.int64)

    # ---- one size ----
    def setup(count, want=a.c):
        """Buffers and closures for one size: run (the timed call), refill (restores what a call
        overwrites), out and expect (what -c compares, where checked)."""
        st = {}
        if coll in ("allreduce", "reduce"):
            send = gen(rank, ar(count))
            buf = send.clone()
            st["run"] = (lambda: dist.all_reduce(buf, op=rop)) if coll == "allreduce" else \
                (lambda: dist.reduce(buf, 0, op=rop))
            st["refill"] = lambda: buf.copy_(send)
            st["expect"] = reduced(ar(count)) if want else None
            st["out"] = buf
            st["checked"] = coll == "allreduce" or rank == 0
        elif coll == "allgather":
            send = gen(rank, ar(count))
            out = torch.empty(n * count, dtype=tdt)
            views = list(out.chunk(n))
            st["run"] = lambda: dist.all_gather(views, send)
            st["refill"] = lambda: out.fill_(0)
            st["expect"] = torch.cat([gen(s, ar(count)) for s in range(n)]) if want else None
            st["out"] = out
            st["checked"] = True
        elif coll == "alltoall":
            send = gen(rank, ar(n * count))
            out = torch.empty(n * count, dtype=tdt)
            st["run"] = lambda: dist.all_to_all_single(out, send)
            st["refill"] = lambda: out.fill_(0)
            st["expect"] = torch.cat([gen(s, rank * count + ar(count)) for s in range(n)]) \
                if want else None
            st["out"] = out
            st["checked"] = True
        elif coll == "reduce_scatter":
            send = gen(rank, ar(n * count))
            parts = list(send.chunk(n))
            out = torch.empty(count, dtype=tdt)
            st["run"] = lambda: dist.reduce_scatter(out, parts, op=rop)
            st["refill"] = lambda: out.fill_(0)
            st["expect"] = reduced(rank * count + ar(count)) if want else None
            st["out"] = out
            st["checked"] = True
        elif coll == "bcast":
            src = gen(0, ar(count))
            buf = src.clone() if rank == 0 else torch.zeros(count, dtype=tdt)
            st["run"] = lambda: dist.broadcast(buf, 0)
            st["refill"] = (lambda: None) if rank == 0 else (lambda: buf.fill_(0))
            st["expect"] = src
            st["out"] = buf
            st["checked"] = True
        else:
            st["run"] = dist.barrier
            st["refill"] = lambda: None
            st["expect"] = None
            st["out"] = None
            st["checked"] = False
        return st

    def allreduce_f64(v, op):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=op)
        return float(t[0])

    busbw = {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1) / n, "alltoall": (n - 1) / n,
             "reduce_scatter": (n - 1) / n, "bcast": 1.0, "reduce": 1.0, "barrier": 0.0}[coll]
    whole = coll in ("allgather", "reduce_scatter", "alltoall")
    wrong = [False]

    def bench_size(count):
        nbytes = count * esize
        st = setup(count)
        run, refill = st["run"], st["refill"]
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.x):
            run()
        warm = (time.perf_counter() - t0) / a.x if a.x > 0 else 0.0
        iters = a.i
        if a.x > 0:
            slowest = allreduce_f64(warm, dist.ReduceOp.MAX)
            if slowest * iters > TIME_BUDGET_S:
                iters = max(1, int(TIME_BUDGET_S / slowest))
        bad = None
        total = 0.0
        dist.barrier()
        if not a.c:
            t0 = time.perf_counter()
            for _ in range(iters):
                run()
            total = time.perf_counter() - t0
        else:
            for it in range(iters):
                refill()
                t0 = time.perf_counter()
                run()
                total += time.perf_counter() - t0
                if bad is None and st["checked"] and not torch.equal(st["out"], st["expect"]):
                    diff = (st["out"] != st["expect"]).nonzero()
                    j = int(diff[0][0])
                    bad = "timed iteration %d: element %d is %s, expected %s" % (
                        it, j, st["out"][j].item(), st["expect"][j].item())
        per = total / iters
        avg = allreduce_f64(per, dist.ReduceOp.SUM) / n
        mn = allreduce_f64(per, dist.ReduceOp.MIN)
        mx = allreduce_f64(per, dist.ReduceOp.MAX)
        ok = True
        if a.c:
            if bad is not None:
                print("gloo_bench: rank %d: %s %s %s of %d bytes, %s" %
                      (rank, coll, a.d, op_name, nbytes, bad), file=sys.stderr, flush=True)
            ok = allreduce_f64(1.0 if bad else 0.0, dist.ReduceOp.MAX) == 0.0
        if rank == 0:
            algbw = (nbytes * (n if whole else 1)) / avg / 1e9 if avg > 0 else 0.0
            print("%12d %12.2f %12.2f %12.2f %8d %12.3f %12.3f%s" %
                  (nbytes, avg * 1e6, mn * 1e6, mx * 1e6, iters, algbw, algbw * busbw,
                   "" if ok else "  WRONG"), flush=True)
        if not ok:
            wrong[0] = True
        return ok

    # ---- header, then one row per size ----
    hosts = [None] * n
    dist.all_gather_object(hosts, socket.gethostname())
    if rank == 0:
        conv = {
            "allgather": "size = bytes each rank sends (receives n*size); algbw = n*size/time",
            "reduce_scatter": "size = bytes each rank receives (sends n*size); algbw = n*size/time",
            "alltoall": "size = bytes each rank sends to each peer (n*size in all); "
                        "algbw = n*size/time",
            "barrier": "size = 0 (no data); algbw = 0",
        }.get(coll, "size = bytes of each rank's buffer; algbw = size/time")
        factor = {"allreduce": "2(n-1)/n", "bcast": "1", "reduce": "1", "barrier": "0"}.get(
            coll, "(n-1)/n")
        if a.backend == "tutti":
            be = dist.group.WORLD._get_backend(torch.device("cpu"))  # tutti_torch.BackendTutti
            peers = sorted(set(be.transport) - {"self"}) or ["self"]
            lib = "tutti %s" % sys.modules["tutti_torch"].__version__
            transport = "tutti %s" % "+".join(peers)
            algo = "tutti's choice"
        else:
            lib, transport, algo = "Gloo", "gloo tcp", "Gloo's choice"
        print("# PyTorch %s %s  gloo_bench --backend %s %s (%s)  dtype %s  op %s  ranks %d  "
              "nodes %d  transport %s  algorithm %s" %
              (torch.__version__, lib, a.backend, coll, CALLS[coll], a.d, op_name, n,
               len(set(hosts)), transport, algo))
        print("# %s; busbw = algbw * %s (nccl-tests)" % (conv, factor))
        print("# us per call: each rank's mean over iters, then avg/min/max over ranks; "
              "GBps = 1e9 bytes/s%s" % ("; -c: every result checked" if a.c else ""))
        print("%12s %12s %12s %12s %8s %12s %12s" %
              ("size", "avg_us", "min_us", "max_us", "iters", "algbw_GBps", "busbw_GBps"),
              flush=True)

    # Gloo (and tutti) refuse unsupported dtypes and ops on the call itself, before any data
    # moves: try one small call first, so that the refusal is reported in the backend's words
    # instead of a traceback.
    try:
        setup(1, want=False)["run"]()
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        cannot(rank, "%s (%s) dtype %s op %s" % (coll, CALLS[coll], a.d, op_name), e, a.backend)
    dist.barrier()

    if coll == "barrier":
        bench_size(0)
    else:
        last = 0
        nbytes = a.b
        while nbytes <= a.e:
            count = nbytes // esize
            if count > 0 and count != last:
                if not bench_size(count):
                    break
            last = count
            if nbytes > a.e // a.f:
                break
            nbytes = nbytes * a.f if nbytes else 1
    dist.destroy_process_group()
    if wrong[0]:
        if rank == 0:
            print("gloo_bench: -c found wrong results (see the messages above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
