"""test_ops.py: every torch.distributed operation of backend "tutti" against a result computed
locally, at 2 and 3 ranks: allreduce (every op on every dtype), allreduce_coalesced, broadcast,
allgather, _allgather_base, allgather_coalesced, reduce, reduce_scatter, _reduce_scatter_base,
alltoall_base (equal and uneven splits), alltoall, gather, scatter, barrier, send, recv; with
non-contiguous tensors, futures, Work.wait's timeout, subgroups, and the refusals (bad dtypes,
several tensors per call, tutti's own argument errors) as Python exceptions with tutti's text.

Inputs are small integers, so every expected result is exact in every dtype (bf16 included) and
is compared bit for bit: sums stay within +-30, products of +-1 and +-2, averages of sums that
divide by the world size.
"""
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

INTS = ["int8", "uint8", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def gen(torch, r, n, count, dtype, op, offset=0):
    """Rank r's input for op over n ranks: exact small integers (see the module text)."""
    idx = torch.arange(offset, offset + count, dtype=torch.int64)
    x = idx * 2654435761 + r * 40503 + 12345
    unsigned = dtype == torch.uint8
    if op in ("BAND", "BOR", "BXOR"):
        v = x % 256 if unsigned else x % 256 - 128
    elif op == "PRODUCT":
        mag = (idx % n == r).to(torch.int64) + 1
        v = mag + (x % 2) * 2 if unsigned else torch.where(x % 2 == 1, -mag, mag)
    elif op == "AVG":  # every rank adds base, rank 0 adds n*k: the sum divides by n
        base = (idx * 1540483477 + 7) % 21 - 10
        k = (idx * 31 + 3) % 5 - 2
        v = base + (n * k if r == 0 else 0)
    else:
        v = x % 11 if unsigned else x % 21 - 10
    return v.to(dtype)


def expected(torch, n, count, dtype, op, offset=0):
    vals = [gen(torch, r, n, count, dtype, op, offset).to(torch.int64) for r in range(n)]
    acc = vals[0].clone()
    for v in vals[1:]:
        if op in ("SUM", "AVG"):
            acc = acc + v
        elif op == "PRODUCT":
            acc = acc * v
        elif op == "MIN":
            acc = torch.minimum(acc, v)
        elif op == "MAX":
            acc = torch.maximum(acc, v)
        elif op == "BAND":
            acc = acc & v
        elif op == "BOR":
            acc = acc | v
        else:
            acc = acc ^ v
    if op == "AVG":
        assert bool((acc % n == 0).all())
        acc = acc // n
    return acc.to(dtype)


def same(torch, got, want, what):
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[0].tolist()
        raise AssertionError("%s: element %s is %s, expected %s" % (
            what, bad, got[tuple(bad)].item(), want[tuple(bad)].item()))


def raises(fn, *needles):
    """fn() must raise RuntimeError whose text holds every needle; returns the text."""
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        for s in needles:
            assert s in text, "error %r lacks %r" % (text, s)
        return text
    raise AssertionError("no error raised; expected one with %s" % (needles,))


# ---------------------------------------------------------------- worker side

def w_ops():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    pg = dist.distributed_c10d._get_default_group()
    dt = {name: getattr(torch, name) for name in INTS + FLOATS}
    assert dist.get_backend() == "tutti", dist.get_backend()

    # ---- allreduce: every op on every dtype, at a small size (runs inline) and a large one
    # (runs on tutti's worker thread, so completion and the Future come from there) ----
    for name, d in dt.items():
        for op in OPS:
            if op == "AVG" and name in INTS:
                continue
            if op in ("BAND", "BOR", "BXOR") and name in FLOATS:
                continue
            for count in (7, 70001):
                t = gen(torch, rank, n, count, d, op)
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=True)
                fut = work.get_future()
                work.wait()
                same(torch, t, expected(torch, n, count, d, op), "allreduce %s %s %d" %
                     (name, op, count))
                res = fut.wait()
                assert len(res) == 1 and res[0] is not None
                same(torch, res[0], t, "allreduce future %s %s" % (name, op))
    print("allreduce: ok")

    # refusals: clear errors, nothing posted, the group stays usable
    for bad in (torch.bool, torch.int16, torch.float128 if hasattr(torch, "float128")
                else torch.complex128):
        raises(lambda: pg.allreduce([torch.zeros(4, dtype=bad)]), "tutti allreduce",
               "cannot be reduced", "bfloat16")
    raises(lambda: dist.all_reduce(torch.zeros(4, dtype=torch.bool)), "cannot be reduced")
    # complex: torch.distributed itself reduces SUM as the real view (float32 pairs)
    z = torch.complex(torch.arange(4.0) + rank, -torch.arange(4.0))
    dist.all_reduce(z)
    same(torch, z, torch.complex(n * torch.arange(4.0) + sum(range(n)), -n * torch.arange(4.0)),
         "allreduce complex64 sum")
    raises(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND), "integer tensor")
    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.AVG),
           "tutti allreduce")  # tutti's own argument check, in its words
    raises(lambda: pg.allreduce([torch.ones(2), torch.ones(2)]).wait(), "exactly one tensor")
    raises(lambda: dist.broadcast(torch.ones(2), src=n), "out of range")
    print("refusals: ok")

    # non-contiguous tensors are reduced through a contiguous copy and written back in place
    base = gen(torch, rank, n, 60, torch.float32, "SUM").view(6, 10)
    t = base.t()
    assert not t.is_contiguous()
    dist.all_reduce(t)
    same(torch, base, expected(torch, n, 60, torch.float32, "SUM").view(6, 10),
         "allreduce non-contiguous")

    # ---- allreduce_coalesced: several tensors, one operation ----
    ts = [gen(torch, rank, n, c, torch.bfloat16, "SUM", offset=c) for c in (3, 1000, 5)]
    dist.all_reduce_coalesced(ts)
    for c, t in zip((3, 1000, 5), ts):
        same(torch, t, expected(torch, n, c, torch.bfloat16, "SUM", offset=c), "coalesced")
    ts = [gen(torch, rank, n, c, torch.int32, "MAX", offset=c) for c in (4, 9)]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    print("allreduce_coalesced: ok")

    # ---- broadcast: every root, every dtype (bytes move, so bool and complex too) ----
    for root in range(n):
        for d in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64,
                  torch.int16):
            src = (torch.arange(24) * (root + 3)).to(d)
            t = src.clone() if rank == root else torch.zeros(24, dtype=d)
            dist.broadcast(t, src=root)
            same(torch, t, src, "broadcast %s root %d" % (d, root))
        nc = torch.zeros(8, 6)[:, ::2] if rank != root else torch.full((8, 6), 5.0)[:, ::2]
        dist.broadcast(nc, src=root)
        same(torch, nc, torch.full((8, 3), 5.0), "broadcast non-contiguous")
    big = torch.arange(300000, dtype=torch.float32) if rank == 0 else torch.zeros(300000)
    dist.broadcast(big, 0)
    same(torch, big, torch.arange(300000, dtype=torch.float32), "broadcast big")
    print("broadcast: ok")

    # ---- allgather: separate outputs, views of one tensor, non-contiguous outputs ----
    mine = torch.arange(10, dtype=torch.int64).view(2, 5) + 100 * rank
    outs = [torch.empty(2, 5, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outs, mine)
    for r in range(n):
        same(torch, outs[r], torch.arange(10).view(2, 5) + 100 * r, "allgather list")
    flat = torch.empty(n * 10, dtype=torch.int64)
    dist.all_gather(list(flat.view(n, 2, 5).unbind(0)), mine)
    same(torch, flat, torch.cat([torch.arange(10) + 100 * r for r in range(n)]), "allgather views")
    ncs = [torch.zeros(5, 2, dtype=torch.int64).t() for _ in range(n)]
    dist.all_gather(ncs, mine.t().contiguous().t())
    for r in range(n):
        same(torch, ncs[r], torch.arange(10).view(2, 5) + 100 * r, "allgather non-contiguous")
    # _allgather_base
    out = torch.empty(n * 6, dtype=torch.float16)
    dist._all_gather_base(out, torch.full((6,), float(rank + 1), dtype=torch.float16))
    same(torch, out, torch.cat([torch.full((6,), float(r + 1), dtype=torch.float16)
                                for r in range(n)]), "_allgather_base")
    raises(lambda: dist._all_gather_base(torch.empty(n * 6 + 1), torch.ones(6)), "world size")
    # allgather_coalesced: output_lists[r][i] = rank r's inputs[i], shapes differ per input
    ins = [torch.full((2, 3), rank + 1.0), torch.arange(5.0) * (rank + 1), torch.tensor([-1.0])]
    outl = [[torch.empty_like(x) for x in ins] for _ in range(n)]
    dist.all_gather_coalesced(outl, ins)
    for r in range(n):
        same(torch, outl[r][0], torch.full((2, 3), r + 1.0), "allgather_coalesced 0")
        same(torch, outl[r][1], torch.arange(5.0) * (r + 1), "allgather_coalesced 1")
        same(torch, outl[r][2], torch.tensor([-1.0]), "allgather_coalesced 2")
    print("allgather: ok")

    # ---- reduce: every root; the root gets the reduction ----
    for root in range(n):
        for op, d in (("SUM", torch.float32), ("MAX", torch.int8), ("AVG", torch.bfloat16)):
            t = gen(torch, rank, n, 33, d, op)
            dist.reduce(t, dst=root, op=getattr(dist.ReduceOp, op))
            if rank == root:
                same(torch, t, expected(torch, n, 33, d, op), "reduce %s root %d" % (op, root))
    print("reduce: ok")

    # ---- reduce_scatter and _reduce_scatter_base ----
    c = 9
    for op, d in (("SUM", torch.float32), ("MIN", torch.int64), ("AVG", torch.float16),
                  ("PRODUCT", torch.int32)):
        full = gen(torch, rank, n, n * c, d, op)
        want = expected(torch, n, n * c, d, op)[rank * c:(rank + 1) * c]
        out = torch.empty(c, dtype=d)
        dist.reduce_scatter(out, [x.clone() for x in full.chunk(n)],  # separate tensors
                            op=getattr(dist.ReduceOp, op))
        same(torch, out, want, "reduce_scatter %s" % op)
        out = torch.empty(c, dtype=d)
        dist.reduce_scatter(out, list(full.chunk(n)), op=getattr(dist.ReduceOp, op))  # views
        same(torch, out, want, "reduce_scatter views %s" % op)
        out = torch.empty(c, dtype=d)
        dist._reduce_scatter_base(out, full, op=getattr(dist.ReduceOp, op))
        same(torch, out, want, "_reduce_scatter_base %s" % op)
    print("reduce_scatter: ok")

    # ---- alltoall_base: equal splits, then uneven ones (rank r sends r+j+1 rows to j) ----
    inp = torch.arange(n * 4, dtype=torch.float32) + 1000 * rank
    out = torch.empty(n * 4)
    dist.all_to_all_single(out, inp)
    same(torch, out, torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) +
                                1000 * s for s in range(n)]), "alltoall_base equal")

    def rows(src, dst):
        return src + dst + 1 if (src + dst) % 3 else 0  # some peers get nothing

    send_splits = [rows(rank, j) for j in range(n)]
    recv_splits = [rows(j, rank) for j in range(n)]
    inp = torch.cat([torch.full((rows(rank, j), 3), float(10 * rank + j)) for j in range(n)])
    out = torch.empty(sum(recv_splits), 3)
    dist.all_to_all_single(out, inp, recv_splits, send_splits)
    want = torch.cat([torch.full((rows(s, rank), 3), float(10 * s + rank)) for s in range(n)])
    same(torch, out, want, "alltoall_base uneven")
    raises(lambda: dist.all_to_all_single(torch.empty(3), torch.empty(3), [1] * n, [5] * n),
           "split sizes")
    # alltoall (lists): tensors of different sizes per peer
    ins = [torch.full((rank + j + 1,), rank * 10 + j, dtype=torch.int32) for j in range(n)]
    outs = [torch.empty(s + rank + 1, dtype=torch.int32) for s in range(n)]
    dist.all_to_all(outs, ins)
    for s in range(n):
        same(torch, outs[s], torch.full((s + rank + 1,), s * 10 + rank, dtype=torch.int32),
             "alltoall list")
    print("alltoall: ok")

    # ---- gather and scatter: every root ----
    for root in range(n):
        mine = torch.arange(6, dtype=torch.float64) * (rank + 1)
        outs = [torch.empty(6, dtype=torch.float64) for _ in range(n)] if rank == root else None
        dist.gather(mine, outs, dst=root)
        if rank == root:
            for r in range(n):
                same(torch, outs[r], torch.arange(6, dtype=torch.float64) * (r + 1), "gather")
        out = torch.empty(2, 4, dtype=torch.int64)
        ins = [torch.arange(8).view(2, 4) + 10 * j for j in range(n)] if rank == root else None
        dist.scatter(out, ins, src=root)
        same(torch, out, torch.arange(8).view(2, 4) + 10 * rank, "scatter root %d" % root)
    print("gather, scatter: ok")

    # ---- barrier, send, recv ----
    dist.barrier()
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for tag in (0, 7, 1023):
        s = torch.arange(5, dtype=torch.float32) + rank + tag
        r = torch.empty(5)
        reqs = [dist.isend(s, nxt, tag=tag), dist.irecv(r, prv, tag=tag)]
        for q in reqs:
            q.wait()
        same(torch, r, torch.arange(5, dtype=torch.float32) + prv + tag, "send/recv tag %d" % tag)
    # several messages to one peer are matched in posting order; non-contiguous receive
    if rank == 0:
        dist.send(torch.tensor([1.0, 2.0]), 1)
        dist.send(torch.arange(6.0).view(2, 3), 1)
    elif rank == 1:
        a = torch.empty(2)
        b = torch.zeros(3, 2).t()
        dist.recv(a, 0)
        dist.recv(b, 0)
        same(torch, a, torch.tensor([1.0, 2.0]), "recv 1")
        same(torch, b, torch.arange(6.0).view(2, 3), "recv non-contiguous")
    # an exchange whose receives are posted before the sends (irecv, then isend), small and
    # large: receives must not hold up the sends queued after them
    for count in (5, 400000):
        s = torch.full((count,), float(rank))
        r = torch.empty(count)
        rq = dist.irecv(r, prv, tag=1)
        sq = dist.isend(s, nxt, tag=1)
        sq.wait()
        rq.wait()
        same(torch, r, torch.full((count,), float(prv)), "irecv-then-isend %d" % count)
    # tutti's own refusal (tag range) arrives as RuntimeError in its words
    raises(lambda: dist.send(torch.ones(1), nxt, tag=5000), "tag 5000 is out of range 0..1023")
    print("send, recv: ok")

    # ---- Work.wait(timeout): a recv with no send yet times out, then completes ----
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        r = torch.zeros(3)
        work = dist.irecv(r, 1, tag=3)
        raises(lambda: work.wait(datetime.timedelta(milliseconds=200)), "not complete after",
               "200 ms")
        assert not work.is_completed()
        store.set("recv_timed_out", "1")
        work.wait()
        assert work.is_completed() and work.is_success()
        same(torch, r, torch.tensor([4.0, 5.0, 6.0]), "recv after timeout")
    elif rank == 1:
        store.wait(["recv_timed_out"])
        dist.send(torch.tensor([4.0, 5.0, 6.0]), 0, tag=3)
    # the same for a small collective: the post returns at once (it does not run in the
    # caller's thread while a peer is missing), and wait(timeout) raises until the peer joins
    t = torch.full((4,), float(rank + 1))
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
        raises(lambda: work.wait(datetime.timedelta(milliseconds=200)), "tutti allreduce",
               "not complete after")
        store.set("allreduce_timed_out", "1")
        work.wait()
    else:
        store.wait(["allreduce_timed_out"])
        dist.all_reduce(t)
    same(torch, t, torch.full((4,), float(n * (n + 1) // 2)), "allreduce after wait timeout")
    print("wait timeout: ok")

    # ---- subgroups (dist.new_group): own communicators through torch's prefixed stores ----
    g = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=g)
        same(torch, t, torch.full((4,), float(1 + n)), "subgroup allreduce")
        out = [torch.empty(1) for _ in range(2)]
        dist.all_gather(out, torch.tensor([float(rank)]), group=g)
        same(torch, torch.cat(out), torch.tensor([0.0, float(n - 1)]), "subgroup allgather")
    if n >= 3:
        g2 = dist.new_group([1, 2])
        if rank in (1, 2):
            t = torch.tensor([rank], dtype=torch.int64)
            dist.broadcast(t, src=2, group=g2)  # global rank 2 is the group's rank 1
            same(torch, t, torch.tensor([2]), "subgroup broadcast")
    # the world group still works after the subgroups
    t = torch.ones(3)
    dist.all_reduce(t)
    same(torch, t, torch.full((3,), float(n)), "world after subgroups")
    print("subgroups: ok")

    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: all ops ok" % rank)


# ---------------------------------------------------------------- test side

class TestOps(harness.RankTest):
    script = os.path.abspath(__file__)

    def test_ops_2_ranks(self):
        res = self.ranks("ops", 2, timeout=150)
        self.assertIn("all ops ok", res[0].out)

    def test_ops_3_ranks(self):
        res = self.ranks("ops", 3, timeout=200)
        self.assertIn("all ops ok", res[2].out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"ops": w_ops}))
    import unittest

    unittest.main()
