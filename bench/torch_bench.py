#!/usr/bin/env python3
"""torch_bench.py: tutti against Gloo through torch.distributed, in one run: all_reduce,
all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single, fp32 and bf16, 8 B to
256 MiB, each size timed over both backends in alternation, repetition after repetition, and
reported as the median time per call and the median bus bandwidth of each, with their ratio.

    .venv/bin/python bench/torch_bench.py                      # 2 ranks, everything
    .venv/bin/python bench/torch_bench.py -n 2 -b 64K -e 16M --colls all_reduce --dtypes bf16
    torchrun --nproc_per_node 2 bench/torch_bench.py ...      # or started by a launcher

Started without RANK in the environment it starts its own -n ranks (one process each, torchrun's
variables, under a deadline) and prints rank 0's table. Each rank runs one thread of torch
(torch.set_num_threads(1)); pin or bind the ranks with the launcher if wanted.

How: both process groups live in the same processes, the default one over tutti and a second
over Gloo (dist.new_group(backend="gloo")), so both see the same machine at the same moment.
For each collective, dtype and size, the buffers are made once and checked once per backend
against the exact expected result (inputs are small integers, exact in bf16); then -r
repetitions each time both backends, the first backend alternating, each for about --budget
seconds of calls (after --warmup untimed calls the first time, one later). A repetition's time
per call is the slowest rank's mean; the table shows the median over repetitions. tutti's
worker threads sleep on a condition variable while Gloo is being timed (checked: they take no
CPU time then).

Sizes follow nccl-tests: "size" is the larger buffer of one rank (all_reduce: the buffer;
all_gather_into_tensor: the output, n x the input; reduce_scatter_tensor: the input, n x the
output; all_to_all_single: the input, which equals the output; all_to_all_uneven, uneven splits
as a mixture of experts sends, only with --colls: the larger of input and output); algbw = size / time;
busbw = algbw x 2(n-1)/n for all_reduce and x (n-1)/n for the others.

--json FILE writes every measurement (all repetitions) for plots or the README.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time
import warnings

COLLS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
         "all_to_all_uneven"]
DTYPES = {"fp32": 4, "bf16": 2}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ranks  # noqa: E402


def parse_bytes(s):
    t = s.strip().lower()
    if t.endswith("b") and len(t) > 1 and not t[-2].isdigit():
        t = t[:-1]
    shift = {"k": 10, "m": 20, "g": 30}.get(t[-1:], 0)
    if shift:
        t = t[:-1]
    if not t.isdigit():
        raise argparse.ArgumentTypeError('"%s" is not a size like 8, 64K, 4M' % s)
    return int(t) << shift


def human(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return "%d %s" % (nbytes >> shift, unit)
    return "%d B" % nbytes


def parse_args():
    p = argparse.ArgumentParser(prog="torch_bench.py", description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=2, help="ranks, when it starts them (default 2)")
    p.add_argument("-b", type=parse_bytes, default=8, help="smallest size (default 8)")
    p.add_argument("-e", type=parse_bytes, default=256 << 20, help="largest size (default 256M)")
    p.add_argument("-f", type=int, default=4, help="size multiplier per row (default 4)")
    p.add_argument("-r", type=int, default=5, help="alternating repetitions (default 5)")
    p.add_argument("--budget", type=float, default=0.2,
                   help="seconds of timed calls per size, backend and repetition (default 0.2)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls before the first timing of a size (default 3; one "
                        "before each later one)")
    p.add_argument("--max-iters", type=int, default=2000, help="most timed calls per timing")
    p.add_argument("--colls", default=",".join(COLLS[:4]), help="comma-separated subset of %s "
                   "(default: all but all_to_all_uneven)" % ",".join(COLLS))
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--backends", default="tutti,gloo",
                   help="the backends to time, in the order of the first repetition")
    p.add_argument("--no-check", action="store_true", help="skip the one checked call per size")
    p.add_argument("--json", help="write every measurement to this file (rank 0)")
    p.add_argument("--timeout", type=int, default=3600,
                   help="seconds the whole run may take when it starts its ranks (default 3600)")
    a = p.parse_args()
    a.colls = [c for c in a.colls.split(",") if c]
    a.dtypes = [d for d in a.dtypes.split(",") if d]
    a.backends = [b for b in a.backends.split(",") if b]
    for c in a.colls:
        if c not in COLLS:
            p.error("--colls: %r is not one of %s" % (c, ", ".join(COLLS)))
    for d in a.dtypes:
        if d not in DTYPES:
            p.error("--dtypes: %r is not fp32 or bf16" % d)
    for b in a.backends:
        if b not in ("tutti", "gloo"):
            p.error("--backends: %r is not tutti or gloo" % b)
    if a.n < 1 or a.f < 2 or a.r < 1 or a.b > a.e or a.budget <= 0 or a.max_iters < 1:
        p.error("need -n >= 1, -f >= 2, -r >= 1, -b <= -e, --budget > 0, --max-iters >= 1")
    return a


def launch(a):
    """Starts -n ranks of this script (torchrun's variables) and waits, under --timeout; a rank
    that fails stops the others (bench/ranks.py)."""
    rc, why = ranks.run([sys.executable] + sys.argv, a.n, a.timeout,
                        env={"OMP_NUM_THREADS": "1"})
    if rc:
        print("torch_bench.py: %s" % why, file=sys.stderr)
    return rc


def import_tutti_torch():
    """tutti_torch as pip installed it, else scripts/build.sh's build in <repo>/build/python."""
    try:
        import tutti_torch
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))
        import tutti_torch
    return tutti_torch


def sizes(a):
    """-b, -b*f, -b*f*f, ... up to -e, and -e itself (8 B .. 256 MiB by 4 ends 128M, 256M)."""
    out, s = [], a.b
    while s <= a.e:
        out.append(s)
        s *= a.f
    if out[-1] != a.e:
        out.append(a.e)
    return out


class Case:
    """The buffers of one collective, dtype and size on this rank, the call on a group, and
    the check of its result."""

    def __init__(self, torch, dist, coll, dtype, nbytes, rank, n):
        esize = dtype.itemsize
        count = nbytes // esize
        self.coll, self.torch, self.dist = coll, torch, dist

        def data(r, k, offset=0):
            # small integers, exact in bf16 and fp32, also after summing 2..8 ranks
            idx = torch.arange(offset, offset + k, dtype=torch.int64)
            return ((idx * 7 + r * 13) % 31 - 15).to(dtype)

        if coll == "all_reduce":
            self.send = data(rank, count)
            self.buf = self.send.clone()
            self.expect = sum(data(r, count).double() for r in range(n)).to(dtype)
            self.out = self.buf
        elif coll == "all_gather_into_tensor":
            per = count // n
            self.send = data(rank, per)
            self.out = torch.empty(per * n, dtype=dtype)
            self.expect = torch.cat([data(r, per) for r in range(n)])
        elif coll == "reduce_scatter_tensor":
            per = count // n
            self.send = data(rank, per * n)
            self.out = torch.empty(per, dtype=dtype)
            self.expect = sum(data(r, per, rank * per).double() for r in range(n)).to(dtype)
        elif coll == "all_to_all_single":  # block j of rank r's input goes to rank j
            per = count // n
            self.send = data(rank, per * n)
            self.out = torch.empty(per * n, dtype=dtype)
            self.expect = torch.cat([data(r, per, rank * per) for r in range(n)])
        else:  # all_to_all_uneven: splits as a mixture of experts routes tokens, 2/3 or 4/3 of
            # the even block by the parity of sender + receiver
            per = count // n

            def rows(src, dst):
                return per * 2 // 3 if (src + dst) % 2 else per * 4 // 3

            self.in_splits = [rows(rank, j) for j in range(n)]
            self.out_splits = [rows(r, rank) for r in range(n)]
            self.send = torch.cat([data(rank, rows(rank, j), j * count) for j in range(n)])
            self.out = torch.empty(sum(self.out_splits), dtype=dtype)
            self.expect = torch.cat([data(r, rows(r, rank), rank * count) for r in range(n)])
        self.nbytes = max(self.send.numel(), self.out.numel()) * esize

    def call(self, group):
        d = self.dist
        if self.coll == "all_reduce":
            d.all_reduce(self.buf, group=group)
        elif self.coll == "all_gather_into_tensor":
            d.all_gather_into_tensor(self.out, self.send, group=group)
        elif self.coll == "reduce_scatter_tensor":
            d.reduce_scatter_tensor(self.out, self.send, group=group)
        elif self.coll == "all_to_all_single":
            d.all_to_all_single(self.out, self.send, group=group)
        else:
            d.all_to_all_single(self.out, self.send, self.out_splits, self.in_splits,
                                group=group)

    def check(self, group):
        """One call from fresh buffers; '' when the result is exact, else what is wrong."""
        if self.coll == "all_reduce":
            self.buf.copy_(self.send)
        else:
            self.out.fill_(0)
        self.call(group)
        if self.torch.equal(self.out, self.expect):
            return ""
        bad = int((self.out != self.expect).nonzero()[0][0])
        return "element %d is %r, expected %r" % (bad, self.out[bad].item(),
                                                  self.expect[bad].item())


def main():
    a = parse_args()
    if "RANK" not in os.environ:
        return launch(a)
    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's name
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    tutti_torch = import_tutti_torch()
    dist.init_process_group("tutti", timeout=datetime.timedelta(seconds=600))
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"tutti": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    ctl = groups["gloo"]  # the timings are agreed over Gloo, outside every timed stretch

    def slowest(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
        return t.item()

    busf = {"all_reduce": 2.0 * (n - 1) / n}
    records = []
    if rank == 0:
        print("# torch_bench.py: torch %s, tutti %s, %d ranks, %s; %d alternating repetitions "
              "of ~%g s per size and backend; median us per call (slowest rank) and median "
              "busbw GB/s (nccl-tests sizes and factors)" %
              (torch.__version__, tutti_torch.__version__, n,
               datetime.date.today().isoformat(), a.r, a.budget), flush=True)
    for coll in a.colls:
        for dname in a.dtypes:
            dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dname]
            if rank == 0:
                print("\n## %s %s, %d ranks\n" % (coll, dname, n))
                cols = ["size"] + ["%s us" % b for b in a.backends] + \
                    ["%s busbw" % b for b in a.backends]
                if len(a.backends) == 2:
                    cols.append("busbw %s/%s" % tuple(a.backends))
                print("| " + " | ".join(cols) + " |")
                print("|" + "|".join("---:" for _ in cols) + "|", flush=True)
            for nbytes in sizes(a):
                # every collective but all_reduce needs n whole blocks of elements
                need = 1 if coll == "all_reduce" else n
                if nbytes // DTYPES[dname] < need:
                    continue
                case = Case(torch, dist, coll, dtype, nbytes, rank, n)
                row = {"coll": coll, "dtype": dname, "size": case.nbytes, "ranks": n}
                notes = {}
                for b in a.backends:
                    wrong = "" if a.no_check else case.check(groups[b])
                    bad = slowest(1.0 if wrong else 0.0)
                    if wrong:
                        print("torch_bench.py: rank %d: %s %s %d B over %s: %s" %
                              (rank, coll, dname, case.nbytes, b, wrong), file=sys.stderr)
                    if bad:
                        notes[b] = "WRONG"
                times = {b: [] for b in a.backends}
                iters = {}
                for rep in range(a.r):
                    order = a.backends if rep % 2 == 0 else a.backends[::-1]
                    for b in order:
                        g = groups[b]
                        # the first repetition warms up; later ones make one untimed call
                        # (the other backend ran in between)
                        for _ in range(a.warmup if rep == 0 else min(1, a.warmup)):
                            case.call(g)
                        if b not in iters:  # from one timed call: about --budget of calls
                            dist.barrier(group=g)
                            t0 = time.perf_counter()
                            case.call(g)
                            one = slowest(time.perf_counter() - t0)
                            iters[b] = max(1, min(a.max_iters, int(a.budget / max(one, 1e-7))))
                        dist.barrier(group=g)
                        t0 = time.perf_counter()
                        for _ in range(iters[b]):
                            case.call(g)
                        per = slowest((time.perf_counter() - t0) / iters[b])
                        times[b].append(per)
                if rank == 0:
                    f = busf.get(coll, (n - 1) / n)
                    med = {b: statistics.median(times[b]) for b in a.backends}
                    bw = {b: case.nbytes / med[b] / 1e9 * f for b in a.backends}
                    cells = [human(case.nbytes)]
                    cells += ["%.2f%s" % (med[b] * 1e6, " " + notes[b] if b in notes else "")
                              for b in a.backends]
                    cells += ["%.3f" % bw[b] for b in a.backends]
                    if len(a.backends) == 2:
                        b0, b1 = a.backends
                        cells.append("%.2fx" % (bw[b0] / bw[b1]) if bw[b1] > 0 else "n/a")
                    print("| " + " | ".join(cells) + " |", flush=True)
                    row.update({"iters": iters, "seconds": times, "busbw_factor": f,
                                "median_us": {b: med[b] * 1e6 for b in a.backends},
                                "busbw_GBps": bw, "wrong": sorted(notes)})
                    records.append(row)
                del case
    if rank == 0 and a.json:
        with open(a.json, "w") as fjson:
            json.dump({"torch": torch.__version__, "tutti": tutti_torch.__version__,
                       "ranks": n, "date": datetime.date.today().isoformat(),
                       "command": " ".join(sys.argv), "rows": records}, fjson, indent=1)
    wrong = any(r["wrong"] for r in records) if rank == 0 else False
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
