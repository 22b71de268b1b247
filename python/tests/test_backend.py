"""test_backend.py: what backend "tutti" does beyond plain operations:

- PREMUL_SUM (FSDP2's reduce-scatter with a divide factor), with the factor as a number and as
  a one-element tensor, in allreduce, reduce, reduce_scatter_tensor and the coalesced forms, at
  2 and 3 ranks, bf16, fp16 and fp32, against the local reference sum over ranks of torch's own
  `x * factor`, summed exactly and rounded once (what tutti's kernels do), bit for bit;
- coalescing: torch's _coalescing_manager (all_reduce, all_gather_into_tensor,
  reduce_scatter_tensor; small calls packed into one tutti operation, large ones one per
  tensor), startCoalescing/endCoalescing with other calls inside, both synchronous and not;
- ProcessGroup.split_group (tutti_comm_split) into two groups, and new_group (whose errors
  say which global ranks its group ranks are);
- abort (an operation in flight fails at once, later calls are refused) and shutdown;
- Work.wait(timeout), getFuture on synchronous and failed Works, Backend.setTimeout;
- monitored_barrier, passing, and naming the rank (or with wait_all_ranks every rank) that did
  not arrive;
- refusals: dtypes tutti cannot reduce, ReduceOps a dtype has no result for, bad roots, sizes,
  splits, tags, sending to oneself, pg_options of another type; each a RuntimeError in
  tutti's words, and the group still usable after.
"""
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_ops import same  # noqa: E402


def raises(fn, *needles, exc=RuntimeError):
    """fn() must raise exc whose text holds every needle; returns the text."""
    try:
        fn()
    except exc as e:
        text = str(e)
        for s in needles:
            assert s in text, "error %r lacks %r" % (text, s)
        return text
    raise AssertionError("no error raised; expected one with %s" % (needles,))


def premul_reference(torch, xs, factor):
    """Sum over ranks of x * factor (torch's own multiply, in x's dtype), summed exactly and
    rounded once to x's dtype. A one-element tensor factor of any shape scales like a 0-dim one
    (x * factor stays in x's dtype, as NCCL's premul sum multiplies in the input's type)."""
    if torch.is_tensor(factor):
        factor = factor.reshape(())
    return torch.stack([(x * factor).double() for x in xs]).sum(0).to(xs[0].dtype)


def same_premul(torch, got, want, n, what, xs=None, factor=None):
    """Bit for bit where tutti's sum is exact before its one rounding: bf16 and fp16 (summed in
    fp32), and any dtype at 2 ranks (a + b is one rounding in any order). fp32 at 3 ranks adds
    in fp32, twice, in the algorithm's order: each addition rounds by at most half a unit in the
    last place of the sum of the magnitudes, so the result is within 2**-23 of that sum."""
    if got.dtype != torch.float32 or n == 2:
        return same(torch, got, want, what)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    bound = torch.stack([(x * factor).double().abs() for x in xs]).sum(0) * 2.0 ** -23
    err = (got.double() - want.double()).abs()
    if not bool((err <= bound).all()):
        bad = (err - bound).argmax().item()
        raise AssertionError("%s: element %d is %r, expected %r" % (what, bad, got[bad].item(),
                                                                   want[bad].item()))


# ---------------------------------------------------------------- worker side

def w_premul():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    for d in (torch.bfloat16, torch.float16, torch.float32):
        for count in (1001, 600000):  # the direct algorithm and the sliced/ring one
            xs = [torch.randn(count, generator=torch.Generator().manual_seed(7 * r + count))
                  .to(d) for r in range(n)]
            # a number, 0-dim tensors (wider and the input's dtype), a 1-D one-element tensor
            # (fp32, wider than bf16/fp16: its product must not come out promoted)
            for factor in (1.0 / 3, torch.tensor(0.1, dtype=torch.float64),
                           torch.tensor(1.0 / 7, dtype=d), torch.tensor([0.2])):
                what = "%s %d factor %s" % (d, count, factor)
                op = dist._make_nccl_premul_sum(factor)
                want = premul_reference(torch, xs, factor)
                t = xs[rank].clone()
                dist.all_reduce(t, op=op)
                same_premul(torch, t, want, n, "allreduce PREMUL_SUM " + what, xs, factor)
                # the scaled sum differs from the plain one: the factor was applied
                assert not torch.equal(want, premul_reference(torch, xs, 1.0)), what
                t = xs[rank].clone()
                work = dist.all_reduce(t, op=op, async_op=True)
                work.wait()
                same_premul(torch, t, want, n, "allreduce PREMUL_SUM async " + what, xs, factor)
                # reduce_scatter_tensor: rank r gets block r; the input stays as it was
                m = count // n * n
                full = xs[rank][:m].clone()
                out = torch.empty(m // n, dtype=d)
                dist.reduce_scatter_tensor(out, full, op=op)
                blk = premul_reference(torch, [x[:m] for x in xs], factor).chunk(n)[rank]
                same_premul(torch, out, blk, n, "reduce_scatter_tensor PREMUL_SUM " + what,
                            [x[:m].chunk(n)[rank] for x in xs], factor)
                same(torch, full, xs[rank][:m], "reduce_scatter_tensor PREMUL_SUM input")
            # reduce: the root gets it, the others keep their input
            for factor in (0.25, torch.tensor([0.25], dtype=torch.float64)):
                t = xs[rank].clone()
                dist.reduce(t, dst=n - 1, op=dist._make_nccl_premul_sum(factor))
                if rank == n - 1:
                    same_premul(torch, t, premul_reference(torch, xs, factor), n,
                                "reduce PREMUL_SUM %s %s" % (d, factor), xs, factor)
                else:
                    same(torch, t, xs[rank], "reduce PREMUL_SUM changed a non-root's input")
    # coalesced forms: allreduce_coalesced, reduce_scatter_tensor_coalesced (small: packed)
    xs = [[torch.randn(c, generator=torch.Generator().manual_seed(r * 100 + c)).bfloat16()
           for c in (5, 300)] for r in range(n)]
    ts = [x.clone() for x in xs[rank]]
    dist.all_reduce_coalesced(ts, op=dist._make_nccl_premul_sum(0.3))
    for i, t in enumerate(ts):
        same(torch, t, premul_reference(torch, [xs[r][i] for r in range(n)], 0.3),
             "allreduce_coalesced PREMUL_SUM %d" % i)
    # entries that alias or overlap: every element is scaled once, as a single all_reduce does
    base = torch.arange(8, dtype=torch.float32) + rank
    b = base.clone()
    dist.all_reduce_coalesced([b, b], op=dist._make_nccl_premul_sum(0.5))
    want = sum(torch.arange(8, dtype=torch.float32) + r for r in range(n)) * 0.5
    same(torch, b, want, "allreduce_coalesced PREMUL_SUM of one tensor twice")
    b = base.clone()
    dist.all_reduce_coalesced([b[:5], b[3:]], op=dist._make_nccl_premul_sum(0.5))
    same(torch, b, want, "allreduce_coalesced PREMUL_SUM of overlapping views")
    b = base.clone().view(2, 4)
    dist.all_reduce_coalesced([b[:, ::2], b[:, 1::2], b[1]], op=dist._make_nccl_premul_sum(0.5))
    same(torch, b.reshape(-1), want, "allreduce_coalesced PREMUL_SUM of strided views")
    pg = dist.distributed_c10d._get_default_group()
    ins = [torch.randn(n * c, generator=torch.Generator().manual_seed(rank * 10 + c)).half()
           for c in (4, 1000)]
    outs = [torch.empty(c, dtype=torch.half) for c in (4, 1000)]
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist._make_nccl_premul_sum(0.5)
    pg.reduce_scatter_tensor_coalesced(outs, ins, opts).wait()
    for i, c in enumerate((4, 1000)):
        allin = [torch.randn(n * c, generator=torch.Generator().manual_seed(r * 10 + c)).half()
                 for r in range(n)]
        same(torch, outs[i], premul_reference(torch, allin, 0.5).chunk(n)[rank],
             "reduce_scatter_tensor_coalesced PREMUL_SUM %d" % i)
    # over 1 MiB a tensor goes alone (scaled copies), with a 1-D fp32 factor on bf16
    c = 300000
    allin = [torch.randn(n * c, generator=torch.Generator().manual_seed(r + 77)).bfloat16()
             for r in range(n)]
    outs = [torch.empty(c, dtype=torch.bfloat16)]
    factor = torch.tensor([0.125])
    opts.reduceOp = dist._make_nccl_premul_sum(factor)
    pg.reduce_scatter_tensor_coalesced(outs, [allin[rank].clone()], opts).wait()
    same(torch, outs[0], premul_reference(torch, allin, factor).chunk(n)[rank],
         "reduce_scatter_tensor_coalesced PREMUL_SUM over 1 MiB, 1-D factor")
    # a call refused for its own options (a timeout of 0 ms) leaves its tensors as they were:
    # the scaling in place comes only once the call is accepted (before, they stayed scaled)
    t = base.clone()
    o = dist.AllreduceOptions()
    o.reduceOp = dist._make_nccl_premul_sum(0.5)
    o.timeout = datetime.timedelta(milliseconds=0)
    raises(lambda: pg.allreduce([t], o), "timeout")
    same(torch, t, base, "a refused allreduce PREMUL_SUM changed its tensor")
    ts = [base.clone(), base[:3].clone()]
    o = dist.AllreduceCoalescedOptions()
    o.reduceOp = dist._make_nccl_premul_sum(0.5)
    o.timeout = datetime.timedelta(milliseconds=0)
    raises(lambda: pg.allreduce_coalesced(ts, o), "timeout")
    same(torch, ts[0], base, "a refused allreduce_coalesced PREMUL_SUM changed its tensor")
    same(torch, ts[1], base[:3], "a refused allreduce_coalesced PREMUL_SUM changed its tensor")
    dist.destroy_process_group()
    print("rank %d: PREMUL_SUM ok" % rank)


def w_coalescing():
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _coalescing_manager

    rank, n = harness.init()
    pg = dist.distributed_c10d._get_default_group()
    cpu = torch.device("cpu")
    for asynchronous in (False, True):
        for big in (False, True):  # packed into one operation, or one per tensor
            c = 300000 if big else 50
            # all_reduce: one allreduce_coalesced
            ts = [torch.full((c + i,), float(rank + i)) for i in range(3)]
            with _coalescing_manager(async_ops=asynchronous) as cm:
                for t in ts:
                    dist.all_reduce(t)
            if asynchronous:
                cm.wait()
            for i, t in enumerate(ts):
                same(torch, t, torch.full((c + i,), float(sum(range(n)) + n * i)),
                     "coalesced all_reduce")
            # all_gather_into_tensor: one allgather_into_tensor_coalesced
            ins = [torch.arange(c + i, dtype=torch.int32) + rank for i in range(2)]
            outs = [torch.empty(n * (c + i), dtype=torch.int32) for i in range(2)]
            outs[1] = torch.empty(c + 1, n, dtype=torch.int32).t()  # non-contiguous output
            with _coalescing_manager(async_ops=asynchronous) as cm:
                for o, i in zip(outs, ins):
                    dist.all_gather_into_tensor(o, i)
            if asynchronous:
                cm.wait()
            for i in range(2):
                want = torch.cat([torch.arange(c + i, dtype=torch.int32) + r for r in range(n)])
                same(torch, outs[i].reshape(-1), want, "coalesced all_gather_into_tensor %d" % i)
            # reduce_scatter_tensor: one reduce_scatter_tensor_coalesced, AVG in bf16
            ins = [torch.arange(n * (c + i)).bfloat16() * 0 + float(2 * rank)
                   for i in range(2)]
            outs = [torch.empty(c + i, dtype=torch.bfloat16) for i in range(2)]
            with _coalescing_manager(async_ops=asynchronous) as cm:
                for o, i in zip(outs, ins):
                    dist.reduce_scatter_tensor(o, i, op=dist.ReduceOp.AVG)
            if asynchronous:
                cm.wait()
            for i in range(2):
                same(torch, outs[i], torch.full((c + i,), float(n - 1), dtype=torch.bfloat16),
                     "coalesced reduce_scatter_tensor AVG %d" % i)
        # several dtypes in one block: one operation per dtype, in one Work (gloo takes
        # reduce_scatter_tensor's; NCCL both)
        a32, a64 = torch.full((6,), float(rank)), torch.full((5,), float(rank), dtype=torch.float64)
        a16 = torch.full((4,), float(rank), dtype=torch.bfloat16)
        with _coalescing_manager(async_ops=asynchronous) as cm:
            for t in (a32, a64, a16):
                dist.all_reduce(t)
        if asynchronous:
            cm.wait()
        for t in (a32, a64, a16):
            same(torch, t, torch.full(t.shape, float(sum(range(n))), dtype=t.dtype),
                 "coalesced all_reduce of several dtypes: %s" % t.dtype)
        ins = [torch.full((n * 3,), float(rank + 1), dtype=d)
               for d in (torch.float32, torch.float64, torch.int32)]
        outs = [torch.empty(3, dtype=i.dtype) for i in ins]
        with _coalescing_manager(async_ops=asynchronous) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i)
        if asynchronous:
            cm.wait()
        for o in outs:
            same(torch, o, torch.full((3,), n * (n + 1) // 2, dtype=o.dtype),
                 "coalesced reduce_scatter_tensor of several dtypes: %s" % o.dtype)
        # with the device: startCoalescing / endCoalescing around other calls as well (torch
        # collects the all_reduces itself, one dtype and op, and runs the broadcast as it comes)
        a, b = torch.ones(10) * rank, torch.ones(20) * rank
        bc = torch.arange(5) if rank == 0 else torch.zeros(5, dtype=torch.int64)
        with _coalescing_manager(device=cpu, async_ops=asynchronous) as cm:
            dist.broadcast(bc, 0, async_op=asynchronous)
            dist.all_reduce(a, op=dist.ReduceOp.MAX)
            dist.all_reduce(b, op=dist.ReduceOp.MAX)
        if asynchronous:
            cm.wait()
        same(torch, bc, torch.arange(5), "coalesced broadcast")
        same(torch, a, torch.full((10,), float(n - 1)), "coalesced all_reduce (device)")
        same(torch, b, torch.full((20,), float(n - 1)), "coalesced max")
    # the Work every call in the block returns completes with the block; waiting inside the
    # block, before anything was posted, is refused
    pg._start_coalescing(cpu)
    t1, t2 = torch.ones(4), torch.ones(4) * 2
    w1 = pg.allreduce([t1])
    w2 = pg.allreduce([t2])
    raises(lambda: w1.wait(), "tutti coalesced", "inside a coalescing block")
    raises(lambda: pg._start_coalescing(cpu), "already coalescing")
    w = pg._end_coalescing(cpu)
    w.wait()
    assert w1.wait() and w2.wait()
    same(torch, t1, torch.full((4,), float(n)), "coalesced Work 1")
    same(torch, t2, torch.full((4,), 2.0 * n), "coalesced Work 2")
    res = w.get_future().wait()
    assert len(res) == 2 and res[0] is not None, res
    raises(lambda: pg._end_coalescing(cpu), "without startCoalescing")
    dist.destroy_process_group()
    print("rank %d: coalescing ok" % rank)


def w_groups():
    """3 ranks: split_group into {0, 2} and {1}; abort; shutdown."""
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    assert n == 3
    world = dist.distributed_c10d._get_default_group()
    backend = world._get_backend(torch.device("cpu"))
    assert backend.supports_splitting and backend.supports_coalescing
    # split: every rank of the parent takes part; each names its own group
    mine = [0, 2] if rank in (0, 2) else [1]
    sub = world.split_group(mine, timeout=datetime.timedelta(seconds=30), group_name="halves")
    assert sub is not None
    assert (sub.rank(), sub.size()) == (mine.index(rank), len(mine)), (sub.rank(), sub.size())
    t = torch.full((5,), float(rank + 1))
    sub.allreduce([t]).wait()
    same(torch, t, torch.full((5,), float(sum(r + 1 for r in mine))), "split allreduce")
    opts = dist.BroadcastOptions()
    opts.rootRank = len(mine) - 1
    t = torch.tensor([rank])
    sub.broadcast([t], opts).wait()
    same(torch, t, torch.tensor([mine[-1]]), "split broadcast")
    # a rank left out of the split gets no group
    only = world.split_group([0, 1], group_name="pair")
    assert (only is None) == (rank == 2), (rank, only)
    if only is not None:
        t = torch.ones(2)
        only.allreduce([t]).wait()
        same(torch, t, torch.full((2,), 2.0), "split pair allreduce")
    # ranks that name different lists for one group: the rank whose list nobody else named
    # fails (before 2026-11-29 all three shared one communicator: a silent wrong sum)
    if rank == 2:
        raises(lambda: world.split_group([0, 2], group_name="odd"), "tutti split",
               "named a group of 2 ranks (0, 2), but only 1 of them named the same list")
    else:
        pair = world.split_group([0, 1], group_name="odd")
        t = torch.full((2,), 10.0 ** rank)
        pair.allreduce([t]).wait()
        same(torch, t, torch.full((2,), 11.0), "split of lists that differ")
    # abort: a receive in flight fails at once with "aborted", later calls are refused; the
    # world group is unharmed
    g = dist.new_group([0, 1])
    store = dist.distributed_c10d._get_default_store()
    if rank in (0, 1):
        t = torch.zeros(3)
        work = dist.irecv(t, 1 - rank, group=g, tag=9)  # never sent
        fut = work.get_future()
        time.sleep(0.2)
        t0 = time.monotonic()
        dist.distributed_c10d._abort_process_group(g)
        raises(lambda: work.wait(), "tutti recv", "aborted")
        raises(lambda: fut.wait(), "aborted")
        assert time.monotonic() - t0 < 10, "abort took %.1f s" % (time.monotonic() - t0)
        raises(lambda: g.allreduce([torch.ones(1)]), "tutti allreduce", "was aborted")
    # shutdown: destroy_process_group on a group; a later call is refused
    h = dist.new_group([1, 2])
    if rank in (1, 2):
        hb = h._get_backend(torch.device("cpu"))
        dist.all_reduce(torch.ones(1), group=h)
        dist.destroy_process_group(h)
        raises(lambda: hb.allreduce([torch.ones(1)]), "shut down")
    # an error on a group that is not WORLD's says which global ranks its group ranks are
    # (rank 2 stays away: rank 1's allreduce times out, naming group rank 1)
    k = dist.new_group([1, 2], timeout=datetime.timedelta(seconds=2))
    if rank == 1:
        raises(lambda: dist.all_reduce(torch.ones(2), group=k),
               "tutti allreduce (on a group of global ranks 1, 2; the ranks named here are group "
               "ranks", "waiting for rank(s) 1")
    store.set("groups/%d" % rank, "1")
    store.wait(["groups/%d" % r for r in range(n)])
    t = torch.ones(3)
    dist.all_reduce(t)
    same(torch, t, torch.full((3,), float(n)), "world after split and abort")
    dist.destroy_process_group()
    print("rank %d: groups ok" % rank)


def w_timeouts():
    """2 ranks: Work.wait(timeout), futures, Backend.setTimeout."""
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    store = dist.distributed_c10d._get_default_store()
    # Work.wait(timeout): a recv with no send yet times out, then completes
    if rank == 0:
        r = torch.zeros(3)
        work = dist.irecv(r, 1, tag=3)
        raises(lambda: work.wait(datetime.timedelta(milliseconds=200)), "not complete after",
               "200 ms")
        assert not work.is_completed()
        store.set("recv_timed_out", "1")
        work.wait()
        assert work.is_completed() and work.exception() is None
        same(torch, r, torch.tensor([4.0, 5.0, 6.0]), "recv after timeout")
    else:
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
    # futures: of a synchronous call's Work (made complete), of a completed async one, chained
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    t = torch.ones(2)
    work = pg.allreduce([t], opts)
    assert work.is_completed(), "a synchronous call's Work must be complete on return"
    same(torch, work.get_future().wait()[0], torch.full((2,), float(n)), "sync future")
    t = torch.ones(2)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 10)
    same(torch, fut.wait(), torch.full((2,), 10.0 * n), "chained future")
    # setTimeout: a group whose timeout is lowered to 1 s fails a collective the peer never
    # joins after about 1 s, not after its 60 s
    g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=60))
    g.set_timeout(datetime.timedelta(seconds=1))
    assert g._get_backend(torch.device("cpu")).timeout == datetime.timedelta(seconds=1)
    if rank == 0:
        t0 = time.monotonic()
        text = raises(lambda: dist.all_reduce(torch.ones(1), group=g), "tutti allreduce",
                      "timed out")
        took = time.monotonic() - t0
        assert took < 20, "timed out after %.1f s, not about 1 s" % took
        # what to raise is the group's timeout, not TUTTI_TIMEOUT (which a group does not read)
        assert "init_process_group(timeout=" in text and "raise TUTTI_TIMEOUT" not in text, text
        print("rank 0: setTimeout: failed after %.2f s: %s" % (took, text.splitlines()[0]))
    store.set("timeout_done/%d" % rank, "1")
    store.wait(["timeout_done/0", "timeout_done/1"])
    dist.destroy_process_group(g)
    raises(lambda: pg.set_timeout(datetime.timedelta(seconds=0)), "positive")
    # a group's timeout of 0 or less is refused, on every rank alike, before anything is made (it
    # ran silently with 30 minutes; Gloo reads 0 as no timeout at all): new_group, split_group
    for bad in (datetime.timedelta(0), datetime.timedelta(seconds=-5)):
        raises(lambda: dist.new_group([0, 1], timeout=bad), "tutti init", "from 1 ms to 1e9 s")
        raises(lambda: pg.split_group([0, 1], timeout=bad), "tutti split", "from 1 ms to 1e9 s")
    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: timeouts ok" % rank)


def w_monitored():
    """3 ranks: monitored_barrier passes; then rank 2 stays away and rank 0 names it; then ranks
    1 and 2 stay away and wait_all_ranks names both; on a subgroup of ranks 1 and 2, rank 0
    returns at once."""
    import torch  # noqa: F401
    import torch.distributed as dist

    import tutti_torch

    rank, n = harness.init()
    store = dist.distributed_c10d._get_default_store()
    tutti_torch.monitored_barrier(timeout=datetime.timedelta(seconds=20))
    tutti_torch.monitored_barrier()  # the group's timeout
    short = datetime.timedelta(seconds=1)
    # the first round's ranks 0 and 1 must both come within it: 3 s (1 s failed where one was
    # descheduled as long)
    first = datetime.timedelta(seconds=3)
    if rank != 2:
        text = raises(lambda: tutti_torch.monitored_barrier(timeout=first),
                      "tutti monitoredBarrier", "Rank 2 failed to pass monitoredBarrier in 3000 ms")
        print("rank %d: %s" % (rank, text))
    store.set("mb1/%d" % rank, "1")
    store.wait(["mb1/%d" % r for r in range(n)])
    if rank == 2:  # its call of the first round: it only reads rank 0's old verdict and fails
        raises(lambda: tutti_torch.monitored_barrier(timeout=first), "Rank 2 failed")
    if rank == 0:
        raises(lambda: tutti_torch.monitored_barrier(timeout=short, wait_all_ranks=True),
               "Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms")
    store.set("mb2/%d" % rank, "1")
    store.wait(["mb2/%d" % r for r in range(n)])
    if rank != 0:  # their call of the second round
        raises(lambda: tutti_torch.monitored_barrier(timeout=short), "Ranks 1, 2 failed")
    # torch's own monitored_barrier refuses every backend but Gloo before reaching ours: the
    # one importing tutti_torch puts in its place lets a tutti group through, so that code
    # written for Gloo runs unchanged, its timeout given as seconds too
    # (rank 0 comes 6 s late to this round: as with Gloo, the others wait for its verdict up to
    # the group's timeout, 60 s here, not only twice their 1 s, and pass; on a group whose
    # timeout is 3 s, rank 0 coming 8 s late, they give up after 3 s)
    late = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    store.set("mb3/%d" % rank, "1")
    store.wait(["mb3/%d" % r for r in range(n)])
    t0 = time.monotonic()
    if rank != 0:
        dist.monitored_barrier(timeout=1.0)
        waited = time.monotonic() - t0
        assert waited > 4, "rank %d passed after %.1f s, before rank 0 came" % (rank, waited)
        t0 = time.monotonic()
        raises(lambda: dist.monitored_barrier(late, timeout=1.0), "rank 0 did not reach",
               "within 3000 ms")
        waited = time.monotonic() - t0
        assert 2.5 < waited < 30, "rank %d gave up after %.1f s, not 3" % (rank, waited)
    else:
        time.sleep(6)
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
        time.sleep(8)
        dist.monitored_barrier(late, timeout=datetime.timedelta(seconds=20))
    raises(lambda: tutti_torch._torch_monitored_barrier(), "only implemented for GLOO",
           exc=ValueError)
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
    dist.distributed_c10d.monitored_barrier()
    tutti_torch.monitored_barrier(timeout=datetime.timedelta(seconds=20))
    if rank == 0:  # another backend's group still goes to torch's own (Gloo runs it)
        g0 = dist.new_group([0], backend="gloo")
        dist.monitored_barrier(g0, timeout=datetime.timedelta(seconds=20))
    else:
        dist.new_group([0], backend="gloo")
    # a timeout spent before rank 0 could wait for anyone: rank 0 timed out, as Gloo says it
    # (torch's suite, tutti registered as "gloo": test_monitored_barrier_gloo_rank_0_timeout)
    everyone = dist.new_group(list(range(n)))
    if rank == 0:
        raises(lambda: dist.monitored_barrier(everyone, timeout=datetime.timedelta(0)),
               "Rank 0 timed out in monitoredBarrier after 0 ms")
    # on a subgroup: a rank outside it returns at once, as from every torch collective
    g = dist.new_group([1, 2])
    tutti_torch.monitored_barrier(g, timeout=datetime.timedelta(seconds=20))
    dist.destroy_process_group()
    print("rank %d: monitored_barrier ok" % rank)


def w_refusals():
    import torch
    import torch.distributed as dist

    import tutti_torch

    rank, n = harness.init()
    pg = dist.distributed_c10d._get_default_group()
    for bad in (torch.int16, torch.uint16, torch.uint32, torch.float8_e4m3fn):
        raises(lambda: dist.all_reduce(torch.zeros(4, dtype=bad)), "tutti allreduce",
               "dtype %s cannot be reduced" % bad, "bfloat16")
    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.AVG),
           "tutti allreduce", "AVG of a torch.int32 tensor")
    raises(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND),
           "BAND needs an integer or bool tensor, not torch.float32")
    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG),
           "AVG on a bool tensor")
    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int64),
                                   op=dist._make_nccl_premul_sum(2.0)),
           "PREMUL_SUM needs a floating-point tensor")
    raises(lambda: dist.all_reduce(torch.ones(4), op=dist._make_nccl_premul_sum(torch.ones(2))),
           "numel() == 1")  # torch's own check, when the op is made
    raises(lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.int16),
                                              torch.empty(2 * n, dtype=torch.int16)),
           "tutti _reduce_scatter_base", "cannot be reduced")
    raises(lambda: pg.allreduce([torch.ones(2), torch.ones(2)]).wait(), "exactly one tensor")
    # several dtypes go one operation each, but one that cannot be reduced fails the whole
    raises(lambda: pg.allreduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.int16)]),
           "tutti allreduce_coalesced", "cannot be reduced")
    opts = dist.BroadcastOptions()
    opts.rootRank = n
    raises(lambda: pg.broadcast([torch.ones(2)], opts), "tutti broadcast",
           "root rank %d is out of range" % n)
    raises(lambda: dist.all_gather_into_tensor(torch.empty(n * 6 + 1), torch.ones(6)),
           "world size")
    raises(lambda: dist.all_gather_into_tensor(torch.empty(n * 6, dtype=torch.float64),
                                               torch.ones(6)), "dtypes differ")
    raises(lambda: dist.all_to_all_single(torch.empty(3), torch.empty(3), [1] * n, [5] * n),
           "split sizes")
    # the same element count in another shape is refused, as Gloo refuses it
    raises(lambda: dist.all_gather([torch.empty(3, 2) for _ in range(n)], torch.ones(2, 3)),
           "tutti allgather", "shape (2, 3), got (3, 2) at index 0")
    if rank == 0:  # refused on the root before anything is posted
        raises(lambda: dist.scatter(torch.empty(2, 3), [torch.ones(3, 2)] * n, src=0),
               "tutti scatter", "shape (2, 3), got (3, 2)")
    raises(lambda: dist.all_to_all_single(torch.empty(n + 1), torch.empty(n + 1)),
           "divisible by the world size")
    raises(lambda: dist.send(torch.ones(1), (rank + 1) % n, tag=-1), "tutti send",
           "tag -1 is negative")  # test_p2p.py has the other point-to-point refusals
    raises(lambda: pg.send([torch.ones(1)], rank, 0), "is this rank")
    raises(lambda: tutti_torch._create(None, object()), "pg_options must be a tutti_torch.Options",
           exc=TypeError)
    # none of that posted anything: the group still works, on every rank alike
    t = torch.ones(3)
    dist.all_reduce(t)
    same(torch, t, torch.full((3,), float(n)), "allreduce after the refusals")

    # an output whose elements share memory (expand) on one rank: the call completes on every
    # rank, and that rank is told which call could not write its result, and why
    def expanded_allreduce(async_op):
        t = torch.ones(1).expand(4) if rank == 0 else torch.ones(4)
        w = dist.all_reduce(t, async_op=async_op)
        if w is not None:
            w.wait()
        return t

    for async_op in (False, True):
        if rank == 0:
            raises(lambda: expanded_allreduce(async_op), "tutti allreduce: the call completed, "
                   "but its result could not be copied", "single memory location")
        else:
            same(torch, expanded_allreduce(async_op), torch.full((4,), float(n)),
                 "allreduce beside rank 0's expanded output")
    dist.destroy_process_group()
    raises(lambda: pg.allreduce([torch.ones(1)]), "shut down")
    print("rank %d: refusals ok" % rank)


def w_mismatch_hints():
    """Ops that tutti runs as another call (gather and scatter as an alltoallv of bytes): a
    mismatch's text says so in the op's terms, on every rank, blocking and through a Work; each
    case on a group of its own, since a mismatch ends the group's communicator."""
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    assert n == 2

    def gather(g, a):  # rank 0 names root 0, rank 1 root 1
        return dist.gather(torch.ones(4), [torch.empty(4) for _ in range(n)], dst=rank,
                           group=g, async_op=a)

    def scatter(g, a):
        return dist.scatter(torch.empty(4), [torch.ones(4) for _ in range(n)], src=rank,
                            group=g, async_op=a)

    def alltoall(g, a):  # rank 0 sends rank 1 six rows, rank 1 expects two
        out_split = [4, 2] if rank == 0 else [2, 4]
        in_split = [4, 6] if rank == 0 else [2, 4]
        return dist.all_to_all_single(torch.empty(sum(out_split)), torch.ones(sum(in_split)),
                                      out_split, in_split, group=g, async_op=a)

    def mixed(g, a):  # even splits given on rank 0, none on rank 1 (Gloo accepts it)
        splits = [2, 2] if rank == 0 else None
        return dist.all_to_all_single(torch.empty(4), torch.ones(4), splits, splits, group=g,
                                      async_op=a)

    cases = [("gather", "roots (dst)", gather), ("scatter", "roots (src)", scatter),
             ("alltoall_base", "input split for rank j", alltoall),
             ("alltoall_base", "give split sizes, or none", mixed)]
    for async_op in (False, True):
        for name, want, fn in cases:
            g = dist.new_group(list(range(n)))

            def call():
                w = fn(g, async_op)
                if w is not None:
                    w.wait()

            text = raises(call, "tutti %s" % name, "mismatched", "above are bytes", want)
            print("rank %d: %s: %s" % (rank, name, text[:120]))
            dist.destroy_process_group(g)
    t = torch.ones(2)
    dist.all_reduce(t)  # the default group is untouched
    same(torch, t, torch.full((2,), float(n)), "allreduce after the groups' mismatches")
    print("rank %d: mismatch hints ok" % rank)


def w_options():
    """pg_options: a tutti_torch.Options reaches the backend (inline_max, worker_count)."""
    import torch
    import torch.distributed as dist

    import tutti_torch

    opts = tutti_torch.Options()
    opts.inline_max = 1 << 16
    opts.worker_count = 2
    opts.transport = "shm"
    rank, n = harness.init(pg_options=opts)
    b = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    got = b.options
    assert (got.inline_max, got.worker_count, got.transport) == (1 << 16, 2, "shm"), got
    assert b.transport == ["self" if p == rank else "shm" for p in range(n)], b.transport
    for count in (10, 1 << 20):  # inline, then sliced over the two workers
        t = torch.full((count,), float(rank))
        dist.all_reduce(t, async_op=True).wait()
        same(torch, t, torch.full((count,), float(sum(range(n)))), "allreduce with Options")
    # the same Options object for a second group with another timeout: each group keeps its own
    import datetime
    world_timeout = b.timeout
    g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=7), pg_options=opts)
    gb = g._get_backend(torch.device("cpu"))
    assert gb.timeout == datetime.timedelta(seconds=7), gb.timeout
    assert b.timeout == world_timeout, "new_group changed WORLD's timeout to %s" % b.timeout
    assert b.options.group_name != gb.options.group_name, (b.options.group_name,
                                                           gb.options.group_name)
    assert gb.options.worker_count == 2 and gb.options.transport == "shm", gb.options
    t = torch.ones(3)
    dist.all_reduce(t, group=g)
    same(torch, t, torch.full((3,), float(n)), "allreduce on the second group")
    dist.destroy_process_group()
    print("rank %d: options ok" % rank)


def w_debug_detail():
    """TORCH_DISTRIBUTED_DEBUG=DETAIL (set by the test): torch wraps the group in its checking
    wrapper, which needs sequence numbers: collectives run and count alike on every rank, and
    a collective whose shape differs between ranks fails on every rank with torch's "Detected
    mismatch" instead of running."""
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    world = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert type(world).__name__ == "_ProcessGroupWrapper", type(world).__name__
    t = torch.arange(4.0) + rank
    dist.all_reduce(t)
    same(torch, t, torch.arange(4.0) * n + sum(range(n)), "allreduce under DETAIL")
    outs = [torch.zeros(2) for _ in range(n)]
    dist.all_gather(outs, torch.full((2,), float(rank)))
    for r in range(n):
        same(torch, outs[r], torch.full((2,), float(r)), "all_gather under DETAIL")
    seq = world._get_sequence_number_for_group()
    dist.barrier()
    assert world._get_sequence_number_for_group() > seq, "the barrier was not counted"
    seqs = [None] * n
    dist.all_gather_object(seqs, world._get_sequence_number_for_group())
    assert len(set(seqs)) == 1, "sequence numbers differ across ranks: %s" % seqs
    try:
        dist.all_reduce(torch.ones(5 + rank))
        raise AssertionError("a collective of different shapes ran under DETAIL")
    except RuntimeError as e:
        assert "Detected mismatch between collectives" in str(e), str(e)
    dist.destroy_process_group()
    print("rank %d: debug detail ok" % rank)


def w_reinit(mode="env"):
    """init_process_group, collectives on the group and on two new groups, monitored_barrier,
    destroy_process_group: five times in one process, on the same MASTER_PORT ("env": torch's
    env:// store, a new server in rank 0 each time; under torchrun, its agent's store, which
    outlives the groups) or on one TCPStore the script keeps ("store"). Failed before
    2026-11-28: a rank that left destroy first reached rank 0's closing server ("Broken pipe"),
    and a store that outlived a group still held its keys, which the next group of the same name
    read (an earlier group's addresses: "cannot reach rank 0")."""
    import torch
    import torch.distributed as dist

    import tutti_torch

    store = None
    if mode == "store":
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), size, rank == 0,
                              timeout=datetime.timedelta(seconds=60))
    for cycle in range(5):
        if store is None:
            rank, size = harness.init()
        else:
            rank, size = harness.init(store=store, rank=rank, world_size=size)
        t = torch.full((1000,), float(rank + 1 + cycle))
        dist.all_reduce(t)
        assert t[0].item() == size * (size + 1) / 2 + size * cycle, (cycle, t[0])
        everyone = dist.new_group(list(range(size)))
        firsts = dist.new_group([0, 1])
        t = torch.ones(4)
        dist.all_reduce(t, group=everyone)
        assert t[0].item() == size, t
        if rank < 2:
            dist.all_reduce(t, group=firsts)
            assert t[0].item() == 2 * size, t
        tutti_torch.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        dist.destroy_process_group()
    print("reinit (%s) ok" % mode)


def w_group_ends():
    """Groups ending in orders that wait on each other (a 120 s timeout, so that waiting for
    it fails the test's own limit). (a) Rank 0 raises with a second group alive, in a step where
    rank 1 is in an allreduce of the default group; rank 0's `finally` destroys every group,
    the subgroup first (torch's order): rank 1's allreduce must fail saying rank 0 destroyed
    its communicator. Before 2026-11-28 rank 0 waited in the subgroup's destroy for rank 1,
    which waited in the allreduce for rank 0: both until the timeout (Gloo: 0.3 s). (b) Two
    groups destroyed in opposite orders on the two ranks (each waited for the other until the
    timeout), then a destroy followed by a collective on one rank and the other way round."""
    import torch
    import torch.distributed as dist

    rank, size = harness.init(timeout_s=120)
    sub = dist.new_group(list(range(size)))
    try:
        for step in range(10):
            if rank == 0 and step == 2:
                raise ValueError("a bug on rank 0")
            dist.all_reduce(torch.ones(1000), group=sub if step % 2 else None)
        raise AssertionError("rank %d: no step failed" % rank)
    except ValueError:
        assert rank == 0
    except RuntimeError as e:
        assert rank != 0 and "rank 0 destroyed its communicator" in str(e), e
    finally:
        dist.destroy_process_group()

    rank, size = harness.init(timeout_s=120)
    g1, g2 = dist.new_group([0, 1]), dist.new_group([0, 1])
    for g in (g1, g2):
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        assert t[0].item() == 2, t
    for g in ((g1, g2) if rank == 0 else (g2, g1)):
        dist.destroy_process_group(g)
    g3 = dist.new_group([0, 1])
    t = torch.ones(4)
    if rank == 0:
        dist.destroy_process_group(g3)
        dist.all_reduce(t)
    else:
        dist.all_reduce(t)
        dist.destroy_process_group(g3)
    assert t[0].item() == 2, t
    dist.destroy_process_group()
    print("group ends ok")


# ---------------------------------------------------------------- test side

class TestBackend(harness.RankTest):
    script = os.path.abspath(__file__)

    def test_premul_sum_2_ranks(self):
        self.assertIn("PREMUL_SUM ok", self.ranks("premul", 2, timeout=150)[0].out)

    def test_premul_sum_3_ranks(self):
        self.assertIn("PREMUL_SUM ok", self.ranks("premul", 3, timeout=200)[0].out)

    def test_coalescing(self):
        self.assertIn("coalescing ok", self.ranks("coalescing", 2, timeout=150)[0].out)

    def test_split_abort_shutdown(self):
        self.assertIn("groups ok", self.ranks("groups", 3, timeout=150)[0].out)

    def test_timeouts_and_futures(self):
        res = self.ranks("timeouts", 2, timeout=150)
        self.assertIn("timeouts ok", res[0].out)

    def test_monitored_barrier(self):
        res = self.ranks("monitored", 3, timeout=150)
        self.assertIn("monitored_barrier ok", res[0].out)

    def test_refusals(self):
        self.assertIn("refusals ok", self.ranks("refusals", 2, timeout=150)[0].out)

    def test_options(self):
        self.assertIn("options ok", self.ranks("options", 2, timeout=150)[0].out)

    def test_reinit_same_port(self):
        self.assertIn("reinit (env) ok", self.ranks("reinit", 2, timeout=150)[0].out)
        res = self.ranks("reinit", 3, timeout=150, args=("store",))
        self.assertIn("reinit (store) ok", res[0].out)

    def test_group_ends(self):
        self.assertIn("group ends ok", self.ranks("group_ends", 2, timeout=100)[0].out)

    def test_mismatch_hints(self):
        self.assertIn("mismatch hints ok", self.ranks("mismatch_hints", 2, timeout=150)[0].out)

    def test_debug_detail(self):
        res = self.ranks("debug_detail", 2, timeout=150,
                         env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
        self.assertIn("debug detail ok", res[0].out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"premul": w_premul, "coalescing": w_coalescing,
                                      "groups": w_groups, "timeouts": w_timeouts,
                                      "monitored": w_monitored, "refusals": w_refusals,
                                      "options": w_options,
                                      "mismatch_hints": w_mismatch_hints,
                                      "debug_detail": w_debug_detail,
                                      "reinit": w_reinit, "group_ends": w_group_ends}))
    import unittest

    unittest.main()
