#!/usr/bin/env python3
"""late_peer.py: what waiting for a late rank costs. Rank 1 comes LATE seconds after rank 0 to
each round; rank 0 reports the share of a core its whole process used while it waited (every
thread: the caller, tutti's workers and progress threads), and how long the call took once rank
1 came. A shared machine wants the first small (Gloo sleeps in the kernel: about 0.3%), a late
peer the second unchanged.

Run one process per rank, as torchrun does (--backend tutti or gloo; tutti from `pip install .`,
else scripts/build.sh's build in <repo>/build/python):

    OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 bench/late_peer.py --late 4

Each round: an all_reduce of --bytes (4 KiB: the small-message path), one of --big-bytes (64
MiB: chunked, where a wait that slept between chunks would show), and a send/recv of as many.
The share of a core covers the whole call, so for the big ones it includes the copy itself.
"""
import argparse
import os
import resource
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
build = os.path.join(os.path.dirname(here), "build", "python")
if os.path.isdir(build):
    sys.path.append(build)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="tutti", choices=["tutti", "gloo"])
    ap.add_argument("--late", type=float, default=4.0, help="seconds rank 1 comes late")
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--big-bytes", type=int, default=64 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.backend == "tutti":
        import tutti_torch  # noqa: F401
    dist.init_process_group(a.backend)
    rank = dist.get_rank()
    if dist.get_world_size() != 2:
        sys.exit("late_peer.py: run it with 2 ranks")
    small = torch.ones(a.bytes // 4)
    big = torch.ones(a.big_bytes // 4)
    stamp = torch.zeros(1, dtype=torch.float64)
    for t in (small, big):  # warm: connections, windows, first touch
        dist.all_reduce(t)
    rows = {"all_reduce small": small, "all_reduce big": big, "recv big": big}
    results = {k: ([], []) for k in rows}  # share of a core while waiting; ms once rank 1 came
    for _ in range(a.rounds):
        for what, t in rows.items():
            dist.barrier()
            if rank == 1:
                time.sleep(a.late)
                stamp[0] = time.time()
                dist.send(t, 0) if what == "recv big" else dist.all_reduce(t)
                dist.send(stamp, 0)  # when it came
                continue
            c0, w0 = cpu_s(), time.time()
            dist.recv(t, 1) if what == "recv big" else dist.all_reduce(t)
            c1, w1 = cpu_s(), time.time()
            dist.recv(stamp, 1)
            results[what][0].append(100 * (c1 - c0) / (w1 - w0))
            results[what][1].append(1e3 * (w1 - stamp.item()))
    if rank == 0:
        print("# late_peer: %s, rank 1 %.1f s late, %d rounds, medians [min-max]"
              % (a.backend, a.late, a.rounds))
        print("# %-16s %-22s %s" % ("call", "% of a core waiting", "ms once rank 1 came"))
        for k, (cpu, ms) in results.items():
            print("%-18s %6.1f [%.1f-%.1f]   %8.1f [%.1f-%.1f]"
                  % (k, statistics.median(cpu), min(cpu), max(cpu), statistics.median(ms),
                     min(ms), max(ms)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
