"""test_work.py: what a c10d Work of backend "tutti" promises torch and its users, as Gloo's do:

- a Work's Future is complete, its callbacks run, once Work.wait has returned (Gloo completes
  the Future first, then the Work), and a wait for that Work in one of those callbacks is
  refused, not a hang;
- an asynchronous call's copy back into a non-contiguous output runs with the poster's
  thread-local state (torch.inference_mode, no_grad), not the worker's defaults;
- a refusal inside a coalescing block (batch_isend_irecv's) leaves torch's coalescing state
  and the backend's clean: the next all_reduce runs (it was recorded and silently dropped);
- destroy_process_group from another thread while a blocking call runs waits for that call
  (it destroyed the communicator under it);
- a completed Work's tensors are freed once the user drops them, not at the group's next call;
- all_gather_coalesced's Future holds a list per input, as Gloo's does.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def w_future_after_wait():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    for i in range(1500):
        t = torch.ones(4)
        w = dist.all_reduce(t, async_op=True)
        f = w.get_future()
        seen = []
        f.then(lambda _: seen.append(1))
        w.wait()
        assert f.done(), "call %d: the Future is not done after Work.wait returned" % i
        assert seen, "call %d: the Future's callback has not run after Work.wait returned" % i
        assert f.value()[0].tolist() == [float(n)] * 4, f.value()
    # Work.wait in a callback of the Work's own Future would wait for itself (the Work completes
    # after its Future's callbacks): refused, not a hang; another Work's wait is fine there.
    # Rank 0 posts 0.3 s late, so that rank 1's callback is registered before its call ends and
    # runs as the call completes. A callback registered on a Future already complete runs at
    # once in the registering thread, when the Work has completed too: its wait returns (on
    # rank 0, most times; CI once saw it on rank 1).
    if rank == 0:
        time.sleep(0.3)
    t = torch.ones(4)
    w = dist.all_reduce(t, async_op=True)
    other = dist.all_reduce(torch.ones(2), async_op=True)
    said = []

    def cb(fut):
        other.wait()
        try:
            w.wait()
            said.append("waited")
        except RuntimeError as e:
            said.append(str(e))
        said.append(threading.get_ident())
        return fut.value()

    w.get_future().then(cb).wait()
    inline = said[1] == threading.get_ident()
    assert "own Future" in said[0] or (inline and said[0] == "waited"), (said, inline)
    print("rank %d: the callback ran %s" % (rank, "at once (the call had ended)" if inline
                                             else "as the call completed: wait refused"))
    w.wait()
    print("rank %d: future after wait ok" % rank)


def w_thread_state():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    with torch.inference_mode():
        for shape in ((4, 3), (1024, 512)):  # a large one completes on tutti's worker
            x = torch.ones(*shape).t()  # not contiguous: the result is copied back
            dist.all_reduce(x, async_op=True).wait()
            assert bool((x == n).all()), x
        z = torch.ones(512, 256, dtype=torch.complex128).t()  # 16-byte elements
        dist.all_reduce(z, async_op=True).wait()
        assert bool((z == n).all()), z
        outs = [torch.zeros(3, 2).t() for _ in range(n)]
        dist.all_gather(outs, torch.full((2, 3), float(rank)), async_op=True).wait()
        for r in range(n):
            assert outs[r].tolist() == [[float(r)] * 3] * 2, outs
    for dt in (torch.float32, torch.complex128):
        leaf = torch.ones(1024, 512, dtype=dt, requires_grad=True)
        with torch.no_grad():
            y = leaf.t()
            dist.all_reduce(y, async_op=True).wait()
        assert bool((leaf.detach() == n).all()), leaf
    print("rank %d: thread state ok" % rank)


def w_coalescing_refusal():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    peer = 1 - rank
    t = torch.ones(4)
    for bad in (dict(tag=-1), dict(peer=rank)):
        ops = [dist.P2POp(dist.isend, t, bad.get("peer", peer), tag=bad.get("tag", 0))]
        try:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            raise AssertionError("batch_isend_irecv took %s" % bad)
        except RuntimeError as e:
            assert "tutti" in str(e), e
        x = torch.ones(4)
        dist.all_reduce(x)  # recorded by a coalescing block left open, it did nothing
        assert x.tolist() == [float(n)] * 4, "an all_reduce after the refusal gave %s" % x
    # a block that works, after the refusals
    a = torch.full((3,), float(rank))
    b = torch.zeros(3)
    ops = [dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, b, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert b.tolist() == [float(peer)] * 3, b
    print("rank %d: coalescing refusal ok" % rank)


def w_destroy_beside_call():
    import torch  # noqa: F401
    import torch.distributed as dist

    rank, n = harness.init(timeout_s=60)
    if rank == 0:
        ended = []
        timer = threading.Timer(1.0, lambda: (dist.destroy_process_group(), ended.append(1)))
        timer.start()
        dist.barrier()  # rank 1 comes at 4 s; the destroy (at 1 s) waits for it
        timer.join(60)
        assert ended, "destroy_process_group did not return"
    else:
        time.sleep(4)
        dist.barrier()
        dist.destroy_process_group()
    print("rank %d: destroy beside a call ok" % rank)


def w_frees():
    import gc
    import weakref

    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    g = dist.new_group()
    x = torch.ones(1 << 16)
    ref = weakref.ref(x)
    dist.all_reduce(x, group=g, async_op=True).wait()
    del x
    gc.collect()
    for _ in range(200):  # the completion may still hold it for a moment
        if ref() is None:
            break
        time.sleep(0.01)
    assert ref() is None, "a completed all_reduce's tensor outlived the Work and the user's name"
    dist.barrier()
    print("rank %d: frees ok" % rank)


def w_coalesced_future():
    import torch
    import torch.distributed as dist

    rank, n = harness.init()
    ins = [torch.full((2,), float(rank)), torch.full((3,), 10.0 + rank)]
    outs = [[torch.zeros(2), torch.zeros(3)] for _ in range(n)]
    fut = dist.all_gather_coalesced(outs, ins, async_op=True)  # torch returns the Future
    v = fut.wait()
    assert len(v) == n and all(isinstance(x, list) and len(x) == 2 for x in v), v
    for r in range(n):
        assert v[r][0].tolist() == [float(r)] * 2 and v[r][1].tolist() == [10.0 + r] * 3, v
    print("rank %d: coalesced future ok" % rank)


class TestWork(harness.RankTest):
    script = os.path.abspath(__file__)

    def test_future_after_wait(self):
        self.assertIn("future after wait ok", self.ranks("future_after_wait", 2, timeout=150)[0].out)

    def test_thread_state(self):
        self.assertIn("thread state ok", self.ranks("thread_state", 2, timeout=100)[0].out)

    def test_coalescing_refusal(self):
        self.assertIn("coalescing refusal ok",
                      self.ranks("coalescing_refusal", 2, timeout=100)[0].out)

    def test_destroy_beside_call(self):
        self.assertIn("destroy beside a call ok",
                      self.ranks("destroy_beside_call", 2, timeout=100)[0].out)

    def test_frees(self):
        self.assertIn("frees ok", self.ranks("frees", 2, timeout=100)[0].out)

    def test_coalesced_future(self):
        self.assertIn("coalesced future ok", self.ranks("coalesced_future", 2, timeout=100)[0].out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"future_after_wait": w_future_after_wait,
                                      "thread_state": w_thread_state,
                                      "coalescing_refusal": w_coalescing_refusal,
                                      "destroy_beside_call": w_destroy_beside_call,
                                      "frees": w_frees,
                                      "coalesced_future": w_coalesced_future}))
    import unittest

    unittest.main()
