"""test_ops.py: every torch.distributed operation of backend "tutti" against a result computed
locally, at 2 and 3 ranks, each run once with async_op=False (the backend runs the call blocking
in the caller's thread) and once with async_op=True (posted; Work.wait and the Future):
allreduce (every ReduceOp on every dtype it applies to, bool included), allreduce_coalesced,
broadcast, allgather, all_gather_into_tensor, allgather_coalesced, reduce,
reduce_scatter (inputs of equal and of different sizes), reduce_scatter_tensor, alltoall_single
(equal and uneven splits), alltoall, gather, scatter,
barrier, send, recv; with non-contiguous tensors, views, the in-place forms where an output is
a view into the input (reduce_scatter_tensor(inp.chunk(n)[r], inp), gather and scatter at the
root, ...), and new_group subgroups.

Inputs are small integers, so every expected result is exact in every dtype (bf16 included) and
is compared bit for bit: sums stay within +-30, products of +-1 and +-2, averages of sums that
divide by the world size. test_backend.py covers PREMUL_SUM, coalescing, split, abort, timeouts,
monitoredBarrier and the refusals.
"""
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
    """Bit for bit: dtype, shape and every element."""
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[0].tolist()
        raise AssertionError("%s: element %s is %s, expected %s" % (
            what, bad, got[tuple(bad)].item(), want[tuple(bad)].item()))


def torch_future(torch):
    return torch._C.Future


class Caller:
    """Runs torch.distributed calls with async_op as the mode says. Asynchronous: the call returns
    a Work, its Future (asked for before the wait, so it completes from the backend's side)
    holds the outputs once wait() returns. Synchronous: the call returns None, done."""

    def __init__(self, torch, asynchronous):
        self.torch = torch
        self.asynchronous = asynchronous

    def __call__(self, fn, *args, **kwargs):
        work = fn(*args, async_op=self.asynchronous, **kwargs)
        if not self.asynchronous:
            assert work is None, "%s with async_op=False returned %r" % (fn.__name__, work)
            return None
        assert work is not None, fn.__name__
        if isinstance(work, torch_future(self.torch)):  # all_reduce_coalesced returns the Future
            return work.wait()
        fut = work.get_future()
        assert work.wait() is True
        assert work.is_completed() and work.exception() is None, fn.__name__
        res = fut.wait()  # completed with the outputs (a list of tensors)
        assert isinstance(res, list), (fn.__name__, type(res))
        return res


# ---------------------------------------------------------------- worker side

def w_ops(mode):
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    assert dist.get_backend() == "tutti", dist.get_backend()
    call = Caller(torch, mode == "async")
    dt = {name: getattr(torch, name) for name in INTS + FLOATS}

    # ---- allreduce: every op on every dtype, at a small size and a large one ----
    for name, d in dt.items():
        for op in OPS:
            if op == "AVG" and name in INTS:
                continue
            if op in ("BAND", "BOR", "BXOR") and name in FLOATS:
                continue
            for count in (7, 70001):
                t = gen(torch, rank, n, count, d, op)
                res = call(dist.all_reduce, t, op=getattr(dist.ReduceOp, op))
                same(torch, t, expected(torch, n, count, d, op),
                     "allreduce %s %s %d" % (name, op, count))
                if res is not None:
                    same(torch, res[0], t, "allreduce future %s %s" % (name, op))
    # bool: SUM, MAX, BOR are a logical or, PRODUCT, MIN, BAND a logical and, BXOR a parity
    x = torch.arange(64) * 2654435761 + 7
    allbits = [((x >> r) & 1).bool() for r in range(n)]  # rank r's input
    bits = allbits[rank]
    anyb, allb, parity = allbits[0].clone(), allbits[0].clone(), allbits[0].clone()
    for b in allbits[1:]:
        anyb, allb, parity = anyb | b, allb & b, parity ^ b
    for op, want in (("SUM", anyb), ("MAX", anyb), ("BOR", anyb), ("PRODUCT", allb),
                     ("MIN", allb), ("BAND", allb), ("BXOR", parity)):
        t = bits.clone()
        call(dist.all_reduce, t, op=getattr(dist.ReduceOp, op))
        same(torch, t, want, "allreduce bool %s" % op)
        assert t.view(torch.uint8).max().item() <= 1, "allreduce bool %s: not 0/1 bytes" % op
    # complex: torch.distributed reduces SUM as the real view (float32 pairs)
    z = torch.complex(torch.arange(4.0) + rank, -torch.arange(4.0))
    call(dist.all_reduce, z)
    same(torch, z, torch.complex(n * torch.arange(4.0) + sum(range(n)), -n * torch.arange(4.0)),
         "allreduce complex64 sum")
    # ... and the backend reduces complex tensors as their parts where torch hands them over
    # whole (reduce, reduce_scatter in all its forms, all_reduce_coalesced: they were refused,
    # where Gloo reduces them), by SUM, AVG and PREMUL_SUM; MAX and the like are refused
    for cd in (torch.complex64, torch.complex128):
        zs = [torch.complex(torch.arange(4.0 * n) + q, q - torch.arange(4.0 * n)).to(cd)
              for q in range(n)]
        zsum = sum(zs)
        t = zs[rank].clone()
        call(dist.reduce, t, dst=n - 1)
        if rank == n - 1:
            same(torch, t, zsum, "reduce %s" % cd)
        out = torch.empty(4, dtype=cd)
        call(dist.reduce_scatter_tensor, out, zs[rank].clone())
        same(torch, out, zsum[4 * rank:4 * rank + 4], "reduce_scatter_tensor %s" % cd)
        call(dist.reduce_scatter, out, list(zs[rank].clone().chunk(n)), op=dist.ReduceOp.AVG)
        assert torch.allclose(out, zsum[4 * rank:4 * rank + 4] / n), "reduce_scatter avg %s" % cd
        ts = [zs[rank].clone(), zs[rank][:3].clone()]
        call(dist.all_reduce_coalesced, ts)
        same(torch, ts[0], zsum, "coalesced %s" % cd)
        same(torch, ts[1], zsum[:3], "coalesced %s, 3" % cd)
        t = zs[rank].clone()
        call(dist.reduce, t, dst=0, op=dist._make_nccl_premul_sum(0.5))
        if rank == 0:
            assert torch.allclose(t, zsum * 0.5), "reduce premul %s" % cd
        try:
            dist.reduce(zs[rank].clone(), dst=0, op=dist.ReduceOp.MAX)
            raise AssertionError("reduce MAX of %s was accepted" % cd)
        except RuntimeError as e:
            assert "complex tensors are reduced by SUM, AVG and PREMUL_SUM" in str(e), e
    # non-contiguous tensors are reduced through a contiguous copy and written back in place
    base = gen(torch, rank, n, 60, torch.float32, "SUM").view(6, 10)
    t = base.t()
    assert not t.is_contiguous()
    call(dist.all_reduce, t)
    same(torch, base, expected(torch, n, 60, torch.float32, "SUM").view(6, 10),
         "allreduce non-contiguous")
    print("allreduce: ok")

    # ---- allreduce_coalesced: several tensors, one operation ----
    ts = [gen(torch, rank, n, c, torch.bfloat16, "SUM", offset=c) for c in (3, 1000, 5)]
    call(dist.all_reduce_coalesced, ts)
    for c, t in zip((3, 1000, 5), ts):
        same(torch, t, expected(torch, n, c, torch.bfloat16, "SUM", offset=c), "coalesced")
    ts = [gen(torch, rank, n, c, torch.int32, "MAX", offset=c) for c in (4, 9)]
    ts[1] = ts[1].view(3, 3).t()  # a non-contiguous one
    call(dist.all_reduce_coalesced, ts, op=dist.ReduceOp.MAX)
    same(torch, ts[0], expected(torch, n, 4, torch.int32, "MAX", offset=4), "coalesced max 0")
    same(torch, ts[1], expected(torch, n, 9, torch.int32, "MAX", offset=9).view(3, 3).t(),
         "coalesced max 1")
    print("allreduce_coalesced: ok")

    # ---- broadcast: every root, every dtype (bytes move, so bool, int16 and complex too) ----
    for root in range(n):
        for d in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64,
                  torch.int16, torch.uint16, torch.float8_e4m3fn):
            src = (torch.arange(24) * (root + 3) % 100).to(d)
            t = src.clone() if rank == root else torch.zeros(24, dtype=d)
            call(dist.broadcast, t, src=root)
            same(torch, t.view(torch.uint8) if d == torch.float8_e4m3fn else t,
                 src.view(torch.uint8) if d == torch.float8_e4m3fn else src,
                 "broadcast %s root %d" % (d, root))
        nc = torch.zeros(8, 6)[:, ::2] if rank != root else torch.full((8, 6), 5.0)[:, ::2]
        call(dist.broadcast, nc, src=root)
        same(torch, nc, torch.full((8, 3), 5.0), "broadcast non-contiguous")
    big = torch.arange(300000, dtype=torch.float32) if rank == 0 else torch.zeros(300000)
    call(dist.broadcast, big, 0)
    same(torch, big, torch.arange(300000, dtype=torch.float32), "broadcast big")
    print("broadcast: ok")

    # ---- allgather: separate outputs, views of one tensor, non-contiguous outputs ----
    mine = torch.arange(10, dtype=torch.int64).view(2, 5) + 100 * rank
    outs = [torch.empty(2, 5, dtype=torch.int64) for _ in range(n)]
    call(dist.all_gather, outs, mine)
    for r in range(n):
        same(torch, outs[r], torch.arange(10).view(2, 5) + 100 * r, "allgather list")
    flat = torch.empty(n * 10, dtype=torch.int64)
    call(dist.all_gather, list(flat.view(n, 2, 5).unbind(0)), mine)
    same(torch, flat, torch.cat([torch.arange(10) + 100 * r for r in range(n)]), "allgather views")
    ncs = [torch.zeros(5, 2, dtype=torch.int64).t() for _ in range(n)]
    call(dist.all_gather, ncs, mine.t().contiguous().t())
    for r in range(n):
        same(torch, ncs[r], torch.arange(10).view(2, 5) + 100 * r, "allgather non-contiguous")
    # all_gather_into_tensor (_allgather_base), into a contiguous and a non-contiguous output
    out = torch.empty(n * 6, dtype=torch.float16)
    call(dist.all_gather_into_tensor, out, torch.full((6,), float(rank + 1), dtype=torch.float16))
    same(torch, out, torch.cat([torch.full((6,), float(r + 1), dtype=torch.float16)
                                for r in range(n)]), "all_gather_into_tensor")
    out = torch.zeros(4, n * 2, dtype=torch.int32).t()
    call(dist.all_gather_into_tensor, out, torch.arange(8, dtype=torch.int32).view(2, 4) + rank)
    same(torch, out, torch.cat([torch.arange(8, dtype=torch.int32).view(2, 4) + r
                                for r in range(n)]), "all_gather_into_tensor non-contiguous")
    # allgather_coalesced: output_lists[r][i] = rank r's inputs[i], shapes differ per input
    ins = [torch.full((2, 3), rank + 1.0), torch.arange(5.0) * (rank + 1), torch.tensor([-1.0])]
    outl = [[torch.empty_like(x) for x in ins] for _ in range(n)]
    call(dist.all_gather_coalesced, outl, ins)
    for r in range(n):
        same(torch, outl[r][0], torch.full((2, 3), r + 1.0), "allgather_coalesced 0")
        same(torch, outl[r][1], torch.arange(5.0) * (r + 1), "allgather_coalesced 1")
        same(torch, outl[r][2], torch.tensor([-1.0]), "allgather_coalesced 2")
    print("allgather: ok")

    # ---- reduce: every root; the root gets the reduction, the others keep their input ----
    for root in range(n):
        for op, d in (("SUM", torch.float32), ("MAX", torch.int8), ("AVG", torch.bfloat16)):
            t = gen(torch, rank, n, 33, d, op)
            mine = t.clone()
            call(dist.reduce, t, dst=root, op=getattr(dist.ReduceOp, op))
            if rank == root:
                same(torch, t, expected(torch, n, 33, d, op), "reduce %s root %d" % (op, root))
            else:
                same(torch, t, mine, "reduce %s: a non-root's input changed" % op)
    print("reduce: ok")

    # ---- reduce_scatter and reduce_scatter_tensor ----
    c = 9
    for op, d in (("SUM", torch.float32), ("MIN", torch.int64), ("AVG", torch.float16),
                  ("PRODUCT", torch.int32), ("BXOR", torch.uint8)):
        full = gen(torch, rank, n, n * c, d, op)
        keep = full.clone()
        want = expected(torch, n, n * c, d, op)[rank * c:(rank + 1) * c]
        out = torch.empty(c, dtype=d)
        call(dist.reduce_scatter, out, [x.clone() for x in full.chunk(n)],  # separate tensors
             op=getattr(dist.ReduceOp, op))
        same(torch, out, want, "reduce_scatter %s" % op)
        out = torch.empty(c, dtype=d)
        call(dist.reduce_scatter, out, list(full.chunk(n)), op=getattr(dist.ReduceOp, op))  # views
        same(torch, out, want, "reduce_scatter views %s" % op)
        out = torch.empty(c, dtype=d)
        call(dist.reduce_scatter_tensor, out, full, op=getattr(dist.ReduceOp, op))
        same(torch, out, want, "reduce_scatter_tensor %s" % op)
        same(torch, full, keep, "reduce_scatter_tensor %s changed its input" % op)
        # inputs of different sizes (Gloo takes them): input j, rank j's block, has 2j+1
        # elements, the output a 2-D view of rank's size, non-contiguous
        full = gen(torch, rank, n, n * n, d, op)
        want = expected(torch, n, n * n, d, op)
        ins = [full[j * n:j * n + 2 * j + 1 if 2 * j + 1 <= n else j * n + n].clone()
               for j in range(n)]
        k = ins[rank].numel()
        base = torch.zeros((k, 2), dtype=d)
        out = base[:, 1]  # k elements, stride 2
        call(dist.reduce_scatter, out, ins, op=getattr(dist.ReduceOp, op))
        same(torch, out, want[rank * n:rank * n + k], "reduce_scatter uneven %s" % op)
        same(torch, base[:, 0], torch.zeros(k, dtype=d), "reduce_scatter uneven %s: wrote "
             "outside its output" % op)
    print("reduce_scatter: ok")

    # ---- all_to_all_single: equal splits, then uneven ones (rank r sends r+j+1 rows to j) ----
    inp = torch.arange(n * 4, dtype=torch.float32) + 1000 * rank
    out = torch.empty(n * 4)
    call(dist.all_to_all_single, out, inp)
    same(torch, out, torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) +
                                1000 * s for s in range(n)]), "alltoall_base equal")

    # uneven: rank r sends rows(r, j) rows to j. First some peers get nothing; then splits that
    # happen to be equal on one rank (0: 2 rows to and from everyone) among unequal ones
    # elsewhere, where every rank must still run the same call (a build that ran equal splits
    # as an alltoall failed there as mismatched)
    routes = {"alltoall_base uneven": lambda s, d: s + d + 1 if (s + d) % 3 else 0,
              "alltoall_base, equal splits on rank 0 only":
                  lambda s, d: 2 if 0 in (s, d) else s + d + 1}
    for what, rows in routes.items():
        send_splits = [rows(rank, j) for j in range(n)]
        recv_splits = [rows(j, rank) for j in range(n)]
        inp = torch.cat([torch.full((rows(rank, j), 3), float(10 * rank + j)) for j in range(n)])
        out = torch.empty(sum(recv_splits), 3)
        call(dist.all_to_all_single, out, inp, recv_splits, send_splits)
        want = torch.cat([torch.full((rows(s, rank), 3), float(10 * s + rank)) for s in range(n)])
        same(torch, out, want, what)
    # random routings, as a mixture of experts sends: the same split matrix on every rank (one
    # seed), rows from 0 to 20000 (blocks on both sides of single copy's thresholds), a whole
    # rank's row empty now and then, several dtypes (a script like this one found the defect of
    # the case above at its first step)
    routing = torch.Generator().manual_seed(4321)
    for step in range(24):
        S = torch.randint(0, [1, 10, 1000, 20000][step % 4] + 1, (n, n), generator=routing)
        if step % 5 == 0:
            S[step % n] = 0
        dt = [torch.float32, torch.bfloat16, torch.int8][step % 3]
        send_splits, recv_splits = S[rank].tolist(), S[:, rank].tolist()
        inp = torch.cat([torch.full((send_splits[j], 2), (rank * 31 + j * 7 + step) % 100,
                                    dtype=dt) for j in range(n)])
        out = torch.full((sum(recv_splits), 2), -1, dtype=dt)
        call(dist.all_to_all_single, out, inp, recv_splits, send_splits)
        want = torch.cat([torch.full((recv_splits[s], 2), (s * 31 + rank * 7 + step) % 100,
                                     dtype=dt) for s in range(n)])
        same(torch, out, want, "alltoall_base, random routing %d" % step)
    # in place: output and input at one address, with splits whose send and receive sizes
    # differ (rank r sends (2r + j) % 4 rows to j; prefix views of one tensor)
    send_splits = [(2 * rank + j) % 4 for j in range(n)]
    recv_splits = [(2 * s + rank) % 4 for s in range(n)]
    buf = torch.full((max(sum(send_splits), sum(recv_splits)), 3), -1.0)
    buf[:sum(send_splits)] = torch.cat([torch.full((send_splits[j], 3), float(10 * rank + j))
                                        for j in range(n)])
    call(dist.all_to_all_single, buf[:sum(recv_splits)], buf[:sum(send_splits)], recv_splits,
         send_splits)
    want = torch.cat([torch.full((recv_splits[s], 3), float(10 * s + rank)) for s in range(n)])
    same(torch, buf[:sum(recv_splits)], want, "alltoall_base uneven, in place")
    # alltoall (lists): tensors of different sizes per peer
    ins = [torch.full((rank + j + 1,), rank * 10 + j, dtype=torch.int32) for j in range(n)]
    outs = [torch.empty(s + rank + 1, dtype=torch.int32) for s in range(n)]
    call(dist.all_to_all, outs, ins)
    for s in range(n):
        same(torch, outs[s], torch.full((s + rank + 1,), s * 10 + rank, dtype=torch.int32),
             "alltoall list")
    print("alltoall: ok")

    # ---- gather and scatter: every root, separate tensors and views of one tensor ----
    for root in range(n):
        mine = torch.arange(6, dtype=torch.float64) * (rank + 1)
        outs = [torch.empty(6, dtype=torch.float64) for _ in range(n)] if rank == root else None
        call(dist.gather, mine, outs, dst=root)
        if rank == root:
            for r in range(n):
                same(torch, outs[r], torch.arange(6, dtype=torch.float64) * (r + 1), "gather")
        flat = torch.empty(n, 6, dtype=torch.float64)
        call(dist.gather, mine, list(flat.unbind(0)) if rank == root else None, dst=root)
        if rank == root:
            same(torch, flat, torch.stack([torch.arange(6, dtype=torch.float64) * (r + 1)
                                           for r in range(n)]), "gather views")
        out = torch.empty(2, 4, dtype=torch.int64)
        ins = [torch.arange(8).view(2, 4) + 10 * j for j in range(n)] if rank == root else None
        call(dist.scatter, out, ins, src=root)
        same(torch, out, torch.arange(8).view(2, 4) + 10 * rank, "scatter root %d" % root)
        out = torch.zeros(4, 2, dtype=torch.int64).t()
        src = torch.arange(8 * n).view(n, 2, 4) if rank == root else None
        call(dist.scatter, out, list(src.unbind(0)) if rank == root else None, src=root)
        same(torch, out, torch.arange(8).view(2, 4) + 8 * rank, "scatter views, non-contiguous")
    print("gather, scatter: ok")

    # ---- barrier, send, recv ----
    call(dist.barrier)
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
        fut = rq.get_future()
        sq.wait()
        rq.wait()
        same(torch, r, torch.full((count,), float(prv)), "irecv-then-isend %d" % count)
        same(torch, fut.wait()[0], r, "recv future")
    # batch_isend_irecv: the backend supports coalescing, so torch runs it as one coalesced block
    s = torch.full((3,), float(rank), dtype=torch.bfloat16)
    r = torch.empty(3, dtype=torch.bfloat16)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, r, prv), dist.P2POp(dist.isend, s, nxt)])
    for q in reqs:
        q.wait()
    same(torch, r, torch.full((3,), float(prv), dtype=torch.bfloat16), "batch_isend_irecv")
    print("send, recv: ok")

    # ---- object collectives (torch.distributed.checkpoint uses them): pickles as bytes ----
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    assert objs == [{"rank": r, "s": "x" * r} for r in range(n)], objs
    lst = [{"from": rank}, rank * 2]
    dist.broadcast_object_list(lst, src=n - 1)
    assert lst == [{"from": n - 1}, (n - 1) * 2], lst
    gathered = [None] * n if rank == 0 else None
    dist.gather_object(("r", rank), gathered, dst=0)
    if rank == 0:
        assert gathered == [("r", r) for r in range(n)], gathered
    out = [None]
    dist.scatter_object_list(out, [("to", r) for r in range(n)] if rank == 0 else None, src=0)
    assert out == [("to", rank)], out
    print("object collectives: ok")

    # ---- in-place forms torch users write: an output that is a view into the input (or the
    # reverse). Every rank must run them (tutti itself refuses partly overlapping buffers, and
    # rank 0's view starts where the whole does, so a refusal would come on some ranks only).
    s = 5
    base = torch.arange(n * s, dtype=torch.float32)
    total = base * n + sum(range(n))  # sum over ranks of base + rank
    inp = base + rank
    call(dist.reduce_scatter_tensor, inp.chunk(n)[rank], inp)
    same(torch, inp.chunk(n)[rank], total.chunk(n)[rank], "reduce_scatter_tensor in place")
    ins = list((base + rank).chunk(n))
    call(dist.reduce_scatter, ins[rank], ins)
    same(torch, ins[rank], total.chunk(n)[rank], "reduce_scatter in place")
    out = torch.zeros(n * s)
    out.chunk(n)[rank].copy_(torch.full((s,), float(rank)))
    call(dist.all_gather_into_tensor, out, out.chunk(n)[rank])
    same(torch, out, torch.arange(n).repeat_interleave(s).float(), "all_gather_into_tensor in place")
    outs = list(torch.zeros(n * s).chunk(n))
    outs[rank].fill_(float(rank))
    call(dist.all_gather, outs, outs[rank])
    same(torch, torch.cat(outs), torch.arange(n).repeat_interleave(s).float(), "all_gather in place")
    root = n - 1
    outs = list(torch.zeros(n * s).chunk(n)) if rank == root else None
    x = outs[root].fill_(float(root)) if rank == root else torch.full((s,), float(rank))
    call(dist.gather, x, outs, dst=root)
    if rank == root:
        same(torch, torch.cat(outs), torch.arange(n).repeat_interleave(s).float(), "gather in place")
    ins = list(base.clone().chunk(n)) if rank == root else None
    y = ins[root] if rank == root else torch.zeros(s)
    call(dist.scatter, y, ins, src=root)
    same(torch, y, base.chunk(n)[rank], "scatter in place")
    t = base + 100 * rank
    call(dist.all_to_all_single, t, t)
    same(torch, t, torch.cat([(base + 100 * k).chunk(n)[rank] for k in range(n)]),
         "all_to_all_single in place")
    print("in-place forms: ok")

    # ---- subgroups (dist.new_group): own communicators through torch's prefixed stores ----
    g = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        t = torch.full((4,), float(rank + 1))
        call(dist.all_reduce, t, group=g)
        same(torch, t, torch.full((4,), float(1 + n)), "subgroup allreduce")
        out = [torch.empty(1) for _ in range(2)]
        call(dist.all_gather, out, torch.tensor([float(rank)]), group=g)
        same(torch, torch.cat(out), torch.tensor([0.0, float(n - 1)]), "subgroup allgather")
    if n >= 3:
        g2 = dist.new_group([1, 2])
        if rank in (1, 2):
            t = torch.tensor([rank], dtype=torch.int64)
            call(dist.broadcast, t, src=2, group=g2)  # global rank 2 is the group's rank 1
            same(torch, t, torch.tensor([2]), "subgroup broadcast")
    # the world group still works after the subgroups
    t = torch.ones(3)
    call(dist.all_reduce, t)
    same(torch, t, torch.full((3,), float(n)), "world after subgroups")
    print("subgroups: ok")

    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: all ops ok (%s)" % (rank, mode))


# ---------------------------------------------------------------- test side

class TestOps(harness.RankTest):
    script = os.path.abspath(__file__)

    def test_ops_2_ranks_sync(self):
        res = self.ranks("ops", 2, timeout=150, args=("sync",))
        self.assertIn("all ops ok", res[0].out)

    def test_ops_2_ranks_async(self):
        res = self.ranks("ops", 2, timeout=150, args=("async",))
        self.assertIn("all ops ok", res[0].out)

    def test_ops_3_ranks_sync(self):
        res = self.ranks("ops", 3, timeout=200, args=("sync",))
        self.assertIn("all ops ok", res[2].out)

    def test_ops_3_ranks_async(self):
        res = self.ranks("ops", 3, timeout=200, args=("async",))
        self.assertIn("all ops ok", res[2].out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"ops": w_ops}))
    import unittest

    unittest.main()
