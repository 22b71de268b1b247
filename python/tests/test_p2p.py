"""test_p2p.py: point-to-point over backend "tutti" (send, recv, isend, irecv, recv from any
source, batch_isend_irecv) at 2 and 3 ranks, every received byte compared exactly:

- basic: every dtype torch can make and send (float8, uint16, complex, bit and sub-byte dtypes
  included; the quantized ones torch refuses for every backend),
  contiguous and not; zero-size tensors; tags from 0 to INT_MAX, received in another order than
  sent; messages of one tag in posting order; small (eager) and large (rendezvous) messages;
  a subgroup's ranks;
- anysource: dist.recv without src returning the sender, irecv without src then wait and
  work._source_rank(), small, large and empty, a receive from any source skipping messages of
  other tags, MPI's order between a named receive and one from any source posted after it, in
  a subgroup (global ranks), and _source_rank refusing on a send, before completion, and after
  a failed receive;
- batch: batch_isend_irecv with the receives first on every rank (an exchange at 2 ranks, a
  ring at 3), sends first, every pair at once, small and large; sends and receives interleaved
  with synchronous and asynchronous collectives of the same group;
- errors: a receive whose size differs from the message (smaller and larger, eager and
  rendezvous, named source and any source, blocking and not) raising a RuntimeError that names
  both sizes, its buffer untouched, the sender unaffected, the next message and collectives
  still going through; negative tags, peers out of range and oneself refused before anything
  is posted.

Each worker is one rank (harness.py); its assertions fail the test with every rank's output.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_backend import raises  # noqa: E402
from test_ops import same  # noqa: E402

INT_MAX = 2 ** 31 - 1
LARGE = 100000  # float32 elements: 400 KB, over the engine's 16 KiB eager limit


def all_dtypes(torch):
    """Every dtype torch can make a CPU tensor of and view as bytes, in a fixed order, but the
    quantized ones, which torch's dispatcher refuses for every backend (c10d's ops have no
    QuantizedCPU kernel)."""
    seen = []
    for name in sorted(dir(torch)):
        d = getattr(torch, name)
        if isinstance(d, torch.dtype) and d not in seen:
            try:
                t = torch.empty(2, dtype=d)
                t.view(torch.uint8)
            except Exception:  # noqa: BLE001 (a dtype torch cannot make here: not ours to test)
                continue
            if not t.is_quantized:
                seen.append(d)
    return seen


def payload(torch, shape, dtype, *key):
    """Random bytes (a valid 0/1 for bool) filling a tensor of shape and dtype, the same on every
    rank for the same key."""
    g = torch.Generator().manual_seed(_seed(key))
    t = torch.empty(shape, dtype=dtype)
    b = t.view(torch.uint8) if t.dim() > 0 else t.reshape(1).view(torch.uint8)
    b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8, generator=g))
    if dtype == torch.bool:
        b.remainder_(2)
    return t


def _seed(key):
    """A seed from key's text that does not depend on Python's hash randomisation."""
    s = 1469598103934665603
    for ch in repr(key).encode():
        s = ((s ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return s & 0x7FFFFFFFFFFF


def as_bytes(torch, t):
    """t's bytes, packed, as uint8 (torch copies some dtypes, torch.uint1 for one, only through
    a view of another dtype of the same size)."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    same_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64,
                 16: torch.complex128}[t.element_size()]
    return t.view(same_size).contiguous().reshape(-1).view(torch.uint8)


def same_bytes(torch, got, want, what):
    """Bit for bit through the bytes (NaNs, float8 and bit dtypes included)."""
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    gb, wb = as_bytes(torch, got), as_bytes(torch, want)
    if not torch.equal(gb, wb):
        bad = (gb != wb).nonzero()[0].item()
        raise AssertionError("%s: byte %d is %d, expected %d" % (what, bad, gb[bad].item(),
                                                                 wb[bad].item()))


def checkpoint(dist, name):
    """Every rank reaches name before any goes on (through the store, not tutti)."""
    store = dist.distributed_c10d._get_default_store()
    rank, n = dist.get_rank(), dist.get_world_size()
    store.set("%s/%d" % (name, rank), "1")
    store.wait(["%s/%d" % (name, r) for r in range(n)])


# ---------------------------------------------------------------- worker side

def w_basic():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    nxt, prv = (rank + 1) % n, (rank - 1) % n

    # every dtype around the ring, contiguous and transposed (sent from, received into)
    dtypes = all_dtypes(torch)
    assert len(dtypes) >= 30, dtypes  # float8, bit, sub-byte and complex ones are in
    for i, d in enumerate(dtypes):
        s = payload(torch, (3, 5), d, "dtype", rank, i)
        r = torch.empty(3, 5, dtype=d)
        works = [dist.isend(s, nxt, tag=i), dist.irecv(r, prv, tag=i)]
        for w in works:
            w.wait()
        same_bytes(torch, r, payload(torch, (3, 5), d, "dtype", prv, i), "ring %s" % d)
        base = payload(torch, (5, 3), d, "nc-base", rank, i)
        s = payload(torch, (5, 3), d, "nc", rank, i).t()  # a transposed view: not contiguous
        r = base.t()
        assert not s.is_contiguous() and not r.is_contiguous()
        works = [dist.irecv(r, prv, tag=i), dist.isend(s, nxt, tag=i)]
        for w in works:
            w.wait()
        same_bytes(torch, base.t(), payload(torch, (5, 3), d, "nc", prv, i).t(),
                   "ring non-contiguous %s" % d)
    print("dtypes: %d ok" % len(dtypes))

    # blocking send and recv between ranks 0 and 1 (the others look on), every size class
    for count in (0, 1, 8, 4096, LARGE):
        want = payload(torch, (count,), torch.float32, "blocking", count)
        if rank == 0:
            dist.send(want, 1, tag=count % 1000)
        elif rank == 1:
            got = torch.full((count,), -1.0)
            dist.recv(got, 0, tag=count % 1000)
            same_bytes(torch, got, want, "blocking %d" % count)
    print("blocking: ok")

    # zero-size tensors, ring, of several shapes; a receive of 0 elements touches nothing
    for shape in ((0,), (0, 3), (4, 0, 2)):
        s = torch.empty(shape)
        r = torch.empty(shape)
        works = [dist.irecv(r, prv, tag=3), dist.isend(s, nxt, tag=3)]
        for w in works:
            w.wait()
        assert r.shape == torch.Size(shape), r.shape
    print("zero-size: ok")

    # strided slices: every other element of a vector, a column block; what lies between the
    # received elements stays as it was
    base = torch.full((2 * LARGE,), -7.0)
    r = base[::2]
    s = payload(torch, (2 * LARGE,), torch.float32, "slice", rank)[1::2]
    works = [dist.isend(s, nxt, tag=5), dist.irecv(r, prv, tag=5)]
    for w in works:
        w.wait()
    same_bytes(torch, base[::2], payload(torch, (2 * LARGE,), torch.float32, "slice", prv)[1::2],
               "strided receive")
    same(torch, base[1::2], torch.full((LARGE,), -7.0), "between the strided elements")
    grid = torch.zeros(6, 8, dtype=torch.int64)
    s = (torch.arange(48).view(6, 8) * (rank + 1))[:, 2:5]
    works = [dist.irecv(grid[:, 1:4], prv, tag=6), dist.isend(s, nxt, tag=6)]
    for w in works:
        w.wait()
    want = torch.zeros(6, 8, dtype=torch.int64)
    want[:, 1:4] = (torch.arange(48).view(6, 8) * (prv + 1))[:, 2:5]
    same(torch, grid, want, "column block")
    print("non-contiguous: ok")

    # tags: rank 0 sends to rank 1 with tags 1, 2, 3 (small and large), rank 1 receives them
    # as 3, 1, 2; tags up to INT_MAX
    tags = [1, 2, 3, 0, INT_MAX, 1 << 20]
    order = [3, 1, 2, INT_MAX, 0, 1 << 20]
    for count in (6, LARGE):
        if rank == 0:
            works = [dist.isend(payload(torch, (count,), torch.float32, "tag", t), 1, tag=t)
                     for t in tags]
            for w in works:
                w.wait()
        elif rank == 1:
            got = {t: torch.empty(count) for t in order}
            works = [dist.irecv(got[t], 0, tag=t) for t in order]
            for w in works:
                w.wait()
            for t in order:
                same_bytes(torch, got[t], payload(torch, (count,), torch.float32, "tag", t),
                           "tag %d (%d elements)" % (t, count))
    # messages of one pair and tag never overtake each other: five sends, five receives,
    # alternating small and large
    sizes = [3, LARGE, 5, LARGE + 1, 0]
    if rank == 0:
        works = [dist.isend(payload(torch, (c,), torch.float32, "order", i), 1, tag=4)
                 for i, c in enumerate(sizes)]
        for w in works:
            w.wait()
    elif rank == 1:
        for i, c in enumerate(sizes):
            got = torch.empty(c)
            dist.recv(got, 0, tag=4)
            same_bytes(torch, got, payload(torch, (c,), torch.float32, "order", i),
                       "message %d of one tag" % i)
    print("tags: ok")

    # a subgroup of the first and last rank: group ranks in tutti, global ranks in torch
    g = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        other = n - 1 - rank
        s = payload(torch, (7,), torch.int32, "group", rank)
        r = torch.empty(7, dtype=torch.int32)
        works = [dist.irecv(r, other, group=g, tag=2), dist.isend(s, other, group=g, tag=2)]
        for w in works:
            w.wait()
        same_bytes(torch, r, payload(torch, (7,), torch.int32, "group", other), "subgroup")
        # group_src / group_dst: the group's own ranks
        if rank == 0:
            dist.send(s, group=g, group_dst=1, tag=3)
        else:
            dist.recv(r, group=g, group_src=0, tag=3)
            same_bytes(torch, r, payload(torch, (7,), torch.int32, "group", 0), "group_src")
    print("subgroup: ok")

    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: basic ok" % rank)


def w_anysource():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    store = dist.distributed_c10d._get_default_store()

    # blocking: every other rank sends one message to rank 0, which receives them without
    # naming the source; dist.recv returns each sender, whose message it holds. A tag per
    # round: with 3 ranks a sender may be a round ahead of the other, and a receive from any
    # source takes the first message of its tag, whichever round it belongs to
    for rnd, count in enumerate((4, LARGE, 0)):
        if rank == 0:
            seen = set()
            for _ in range(n - 1):
                got = torch.full((count,), -1.0)
                src = dist.recv(got, tag=50 + rnd)
                assert src in range(1, n) and src not in seen, (src, seen)
                seen.add(src)
                same_bytes(torch, got, payload(torch, (count,), torch.float32, "any", src),
                           "recv from any source, %d elements, from %d" % (count, src))
        else:
            dist.send(payload(torch, (count,), torch.float32, "any", rank), 0, tag=50 + rnd)
    # many in a row: dist.recv asks the Work for its sender right after wait() returns, which
    # once raced with the Work's completion
    # (each sender's k-th message holds 1000 * sender + k; one sender's never overtake)
    count = [0] * n
    for i in range(300):
        if rank == 0:
            got = torch.empty(1, dtype=torch.int64)
            src = dist.recv(got, tag=17)
            same(torch, got, torch.tensor([src * 1000 + count[src]]), "any source %d" % i)
            count[src] += 1
        elif i % (n - 1) == rank - 1:
            dist.send(torch.tensor([rank * 1000 + i // (n - 1)]), 0, tag=17)
    print("blocking any source: ok")

    # asynchronous: rank 0 posts its receives first, the senders send once they are posted;
    # work._source_rank() after wait() names the sender
    for count in (3, LARGE):
        if rank == 0:
            bufs = [torch.empty(count, dtype=torch.int64) for _ in range(n - 1)]
            works = [dist.irecv(b, tag=6) for b in bufs]
            store.set("posted/%d" % count, "1")
            srcs = []
            for w, b in zip(works, bufs):
                w.wait()
                src = w._source_rank()
                srcs.append(src)
                same_bytes(torch, b, payload(torch, (count,), torch.int64, "async", src),
                           "irecv from any source from %d" % src)
            assert sorted(srcs) == list(range(1, n)), srcs
        else:
            store.wait(["posted/%d" % count])
            dist.isend(payload(torch, (count,), torch.int64, "async", rank), 0, tag=6).wait()
    print("async any source: ok")

    # a receive from any source meets only its tag: rank 1 sends tag 8, then tag 7; rank 0
    # receives tag 7 first (the later message), then tag 8
    if rank == 1:
        dist.send(torch.tensor([8.0]), 0, tag=8)
        dist.send(torch.tensor([7.0]), 0, tag=7)
    elif rank == 0:
        a, b = torch.empty(1), torch.empty(1)
        assert dist.recv(a, tag=7) == 1
        assert dist.recv(b, tag=8) == 1
        same(torch, torch.cat([a, b]), torch.tensor([7.0, 8.0]), "any source by tag")
    # MPI's order: a named receive posted before one from any source meets the first message
    if rank == 0:
        named = torch.empty(2)
        anyb = torch.empty(2)
        w1 = dist.irecv(named, 1, tag=9)
        w2 = dist.irecv(anyb, tag=9)
        store.set("order-posted", "1")
        w1.wait()
        w2.wait()
        assert w2._source_rank() == 1 and w1._source_rank() == 1
        same(torch, torch.stack([named, anyb]), torch.tensor([[1.0, 1.0], [2.0, 2.0]]),
             "named then any source")
    elif rank == 1:
        store.wait(["order-posted"])
        dist.send(torch.tensor([1.0, 1.0]), 0, tag=9)
        dist.send(torch.tensor([2.0, 2.0]), 0, tag=9)
    print("any source and tags: ok")

    # in a subgroup of the last two ranks: dist.recv returns the sender's global rank
    lo, hi = n - 2, n - 1
    g = dist.new_group([lo, hi])
    if rank == hi:
        dist.send(torch.tensor([hi], dtype=torch.int32), lo, group=g, tag=12)
    elif rank == lo:
        t = torch.empty(1, dtype=torch.int32)
        assert dist.recv(t, group=g, tag=12) == hi
        same(torch, t, torch.tensor([hi], dtype=torch.int32), "any source in a subgroup")
        w = dist.irecv(t, group=g, tag=13)
        store.set("sub-posted", "1")
        w.wait()
        assert w._source_rank() == 1, w._source_rank()  # the group's rank of hi
    if rank == hi:
        store.wait(["sub-posted"])
        dist.send(torch.tensor([5], dtype=torch.int32), lo, group=g, tag=13)
    print("any source in a subgroup: ok")

    # _source_rank: refused on a send, before the receive completed, after a failed receive;
    # a receive from a named source answers it too (as Gloo's do)
    if rank == 0:
        w = dist.irecv(torch.empty(3), tag=14)
        raises(lambda: w._source_rank(), "tutti recvAnysource", "wait for it first")
        store.set("early-asked", "1")
        w.wait()
        assert w._source_rank() == n - 1
        short = torch.full((2,), -3.0)
        w = dist.irecv(short, tag=15)
        raises(lambda: w.wait(), "tutti recvAnysource", "has 12 bytes", "expects 8")
        raises(lambda: w._source_rank(), "receive that succeeded")
        same(torch, short, torch.full((2,), -3.0), "failed any-source receive untouched")
        w = dist.irecv(torch.empty(1), n - 1, tag=16)
        w.wait()
        assert w._source_rank() == n - 1
    elif rank == n - 1:
        store.wait(["early-asked"])
        w = dist.isend(torch.ones(3), 0, tag=14)
        w.wait()
        raises(lambda: w._source_rank(), "tutti send", "not one")
        dist.send(torch.ones(3), 0, tag=15)
        dist.send(torch.ones(1), 0, tag=16)
    print("source rank: ok")

    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: anysource ok" % rank)


def w_batch():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    nxt, prv = (rank + 1) % n, (rank - 1) % n

    # receives first on every rank: an exchange at 2 ranks, a ring at 3; then sends first
    for count in (5, LARGE):
        for recv_first in (True, False):
            s = payload(torch, (count,), torch.float32, "batch", rank, count)
            r = torch.full((count,), -1.0)
            ops = [dist.P2POp(dist.irecv, r, prv, tag=1), dist.P2POp(dist.isend, s, nxt, tag=1)]
            if not recv_first:
                ops.reverse()
            works = dist.batch_isend_irecv(ops)
            for w in works:
                w.wait()
            same_bytes(torch, r, payload(torch, (count,), torch.float32, "batch", prv, count),
                       "batch ring %d, receives %s" % (count, "first" if recv_first else "last"))
    # every pair at once, receives first, two messages per pair with different tags (the
    # second received before the first in the list)
    bufs = {}
    ops = []
    for p in range(n):
        if p != rank:
            for tag in (2, 1):
                bufs[p, tag] = torch.empty(LARGE // 4 * tag, dtype=torch.bfloat16)
                ops.append(dist.P2POp(dist.irecv, bufs[p, tag], p, tag=tag))
    for p in range(n):
        if p != rank:
            for tag in (1, 2):
                ops.append(dist.P2POp(dist.isend, payload(torch, (LARGE // 4 * tag,),
                                                          torch.bfloat16, "pairs", rank, p, tag),
                                      p, tag=tag))
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    for (p, tag), b in bufs.items():
        same_bytes(torch, b, payload(torch, (LARGE // 4 * tag,), torch.bfloat16, "pairs", p, rank,
                                     tag), "batch pair %d->%d tag %d" % (p, rank, tag))
    print("batch_isend_irecv: ok")

    # interleaved with collectives of the same group: a receive posted before a synchronous
    # allreduce and the send after it, an asynchronous allgather in between, then the waits
    for it, count in enumerate((7, LARGE, 0, LARGE)):
        r = torch.full((count,), -1.0)
        rq = dist.irecv(r, prv, tag=20 + it)
        x = torch.full((1000,), float(rank + it))
        dist.all_reduce(x)
        same(torch, x, torch.full((1000,), float(sum(range(n)) + n * it)), "allreduce between")
        sq = dist.isend(payload(torch, (count,), torch.float32, "mixed", rank, it), nxt,
                        tag=20 + it)
        out = torch.empty(n * 3, dtype=torch.int64)
        ag = dist.all_gather_into_tensor(out, torch.full((3,), rank + it), async_op=True)
        for w in (ag, sq, rq):
            w.wait()
        same(torch, out, (torch.arange(n).repeat_interleave(3) + it), "allgather between")
        same_bytes(torch, r, payload(torch, (count,), torch.float32, "mixed", prv, it),
                   "receive across collectives %d" % it)
    # a large send that cannot complete until its receive is posted, with collectives in
    # between on both sides; and a collective posted before a blocking send and receive
    big = payload(torch, (4 * LARGE,), torch.float32, "big", rank)
    if rank == 0:
        sq = dist.isend(big, 1, tag=30)
        t = torch.ones(5)
        dist.all_reduce(t)
        dist.barrier()
        sq.wait()
    elif rank == 1:
        t = torch.ones(5)
        dist.all_reduce(t)
        dist.barrier()
        r = torch.empty(4 * LARGE)
        dist.recv(r, 0, tag=30)
        same_bytes(torch, r, payload(torch, (4 * LARGE,), torch.float32, "big", 0),
                   "large send across collectives")
    else:
        t = torch.ones(5)
        dist.all_reduce(t)
        dist.barrier()
    same(torch, t, torch.full((5,), float(n)), "allreduce beside a pending send")
    y = torch.full((LARGE,), float(rank))
    ar = dist.all_reduce(y, async_op=True)
    r = torch.empty(LARGE)
    works = [dist.irecv(r, prv, tag=31)]
    dist.send(big[:LARGE], nxt, tag=31)
    for w in works + [ar]:
        w.wait()
    same(torch, y, torch.full((LARGE,), float(sum(range(n)))), "async allreduce around p2p")
    same_bytes(torch, r, payload(torch, (4 * LARGE,), torch.float32, "big", prv)[:LARGE],
               "blocking send under an async allreduce")
    print("interleaved with collectives: ok")

    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: batch ok" % rank)


def w_errors():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    pg = dist.distributed_c10d._get_default_group()

    # length mismatches, rank 0 to rank 1: smaller and larger receives, eager and rendezvous;
    # each raises naming both sizes, leaves its buffer as it was, and the sender completes; the
    # next message of the same tag reaches the next receive
    cases = [(4, 5), (6, 3), (LARGE, LARGE - 1), (LARGE, LARGE + 10), (10, LARGE), (0, 2),
             (2, 0)]
    for i, (sent, expect) in enumerate(cases):
        if rank == 0:
            dist.send(payload(torch, (sent,), torch.float32, "bad", i), 1, tag=3)
            dist.send(payload(torch, (expect,), torch.float32, "good", i), 1, tag=3)
        elif rank == 1:
            r = torch.full((expect,), -2.0)
            if i % 2 == 0:
                raises(lambda: dist.recv(r, 0, tag=3), "tutti recv", "has %d bytes" % (4 * sent),
                       "expects %d" % (4 * expect), "rank 0", "tag 3")
            else:
                w = dist.irecv(r, 0, tag=3)
                fut = w.get_future()
                raises(lambda: w.wait(), "tutti recv", "has %d bytes" % (4 * sent))
                raises(lambda: fut.wait(), "expects %d" % (4 * expect))
            same(torch, r, torch.full((expect,), -2.0), "buffer of a failed receive")
            dist.recv(r, 0, tag=3)
            same_bytes(torch, r, payload(torch, (expect,), torch.float32, "good", i),
                       "the message after a mismatch")
    # the same from any source, at 3 ranks from rank 2
    if rank == n - 1:
        dist.send(torch.ones(LARGE), 0, tag=4)
        dist.send(torch.full((LARGE // 2,), 3.0), 0, tag=4)
    elif rank == 0:
        r = torch.zeros(LARGE // 2)
        raises(lambda: dist.recv(r, tag=4), "tutti recvAnysource", "rank %d" % (n - 1),
               "has %d bytes" % (4 * LARGE))
        same(torch, r, torch.zeros(LARGE // 2), "buffer of a failed any-source receive")
        assert dist.recv(r, tag=4) == n - 1
        same(torch, r, torch.full((LARGE // 2,), 3.0), "any source after a mismatch")
    # the group is unharmed: collectives and point-to-point on every rank
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    same(torch, t, torch.full((3,), float(sum(range(n)))), "allreduce after mismatches")
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    r = torch.empty(2, dtype=torch.int64)
    works = [dist.irecv(r, prv), dist.isend(torch.tensor([rank, 9]), nxt)]
    for w in works:
        w.wait()
    same(torch, r, torch.tensor([prv, 9]), "ring after mismatches")
    print("length mismatch: ok")

    # refusals, before anything is posted
    raises(lambda: dist.send(torch.ones(1), nxt, tag=-1), "tutti send", "tag -1 is negative")
    raises(lambda: dist.recv(torch.ones(1), prv, tag=-5), "tutti recv", "tag -5 is negative")
    raises(lambda: dist.irecv(torch.ones(1), tag=-2), "tutti recvAnysource", "tag -2")
    raises(lambda: pg.send([torch.ones(1)], n, 0), "tutti send", "peer rank %d is out of range" % n)
    raises(lambda: pg.recv([torch.ones(1)], -3, 0), "tutti recv", "peer rank -3 is out of range")
    raises(lambda: pg.send([torch.ones(1)], rank, 0), "tutti send", "is this rank")
    raises(lambda: pg.recv([torch.ones(1)], rank, 0), "tutti recv", "is this rank")
    raises(lambda: pg.send([torch.ones(1), torch.ones(1)], nxt, 0), "exactly one tensor")
    raises(lambda: pg.recv_anysource([torch.ones(1), torch.ones(1)], 0), "exactly one tensor")
    # none of them posted anything: what follows still matches on every rank
    r = torch.empty(1)
    works = [dist.irecv(r, prv, tag=0), dist.isend(torch.tensor([float(rank)]), nxt, tag=0)]
    for w in works:
        w.wait()
    same(torch, r, torch.tensor([float(prv)]), "ring after the refusals")
    t = torch.ones(2)
    dist.all_reduce(t)
    same(torch, t, torch.full((2,), float(n)), "allreduce after the refusals")
    print("refusals: ok")

    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: errors ok" % rank)


# ---------------------------------------------------------------- test side

class TestP2P(harness.RankTest):
    script = os.path.abspath(__file__)

    def run_worker(self, name, n):
        res = self.ranks(name, n, timeout=150 if n == 2 else 200)
        for r in range(n):
            self.assertIn("rank %d: %s ok" % (r, name), res[r].out)

    def test_basic_2_ranks(self):
        self.run_worker("basic", 2)

    def test_basic_3_ranks(self):
        self.run_worker("basic", 3)

    def test_anysource_2_ranks(self):
        self.run_worker("anysource", 2)

    def test_anysource_3_ranks(self):
        self.run_worker("anysource", 3)

    def test_batch_2_ranks(self):
        self.run_worker("batch", 2)

    def test_batch_3_ranks(self):
        self.run_worker("batch", 3)

    def test_errors_2_ranks(self):
        self.run_worker("errors", 2)

    def test_errors_3_ranks(self):
        self.run_worker("errors", 3)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"basic": w_basic, "anysource": w_anysource,
                                      "batch": w_batch, "errors": w_errors}))
    import unittest

    unittest.main()
