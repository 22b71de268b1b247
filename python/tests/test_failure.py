"""test_failure.py: a rank killed with SIGKILL becomes a Python exception on the others, carrying
tutti's text, well before the group's timeout: in plain collectives (2 ranks) and inside DDP's
backward pass, where the error arrives through Work.getFuture() (3 ranks). The group's timeout
is 300 s and the test's deadline 90 s, so only tutti's detection of the dead peer can pass.
A call with a timeout of its own (c10d's opts.timeout) fails at it, not at the group's. A rank
that raises between steps and ends its group fails its peers' next call, naming it.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

GROUP_TIMEOUT_S = 300


def names_victim(text, victim):
    """Whether an error names the dead rank: found by this rank ("rank 2 (pid ...") or by a
    survivor whose failure notice came first ("...; it named rank 2")."""
    return "rank %d (pid" % victim in text or "it named rank %d" % victim in text


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def survivors_leave(dist, rank, n):
    """The survivors meet in the Store before they exit (os._exit: no collective teardown of a
    group that lost a rank), so that none sees another survivor leave and names it instead."""
    store = dist.distributed_c10d._get_default_store()
    store.set("caught/%d" % rank, "1")
    store.wait(["caught/%d" % r for r in range(n - 1)])
    if rank == 0:  # it serves the store: it leaves last
        store.wait(["left/%d" % r for r in range(1, n - 1)])
    else:
        store.set("left/%d" % rank, "1")
    sys.stdout.flush()
    os._exit(0)


def w_collectives():
    import torch
    import torch.distributed as dist

    rank, n = harness.init(timeout_s=GROUP_TIMEOUT_S)
    victim = n - 1
    small, big = torch.ones(8), torch.ones(1 << 18)
    for _ in range(3):
        dist.all_reduce(small)
        dist.all_reduce(big)
    if rank == victim:
        die()
    t0 = time.monotonic()
    try:
        for _ in range(100000):  # the victim never joins: the first one must fail
            dist.all_reduce(big)
            dist.all_reduce(small)
        raise AssertionError("collectives went on after rank %d died" % victim)
    except RuntimeError as e:
        text = str(e)
    took = time.monotonic() - t0
    assert text.startswith("tutti allreduce: "), text
    # the victim, named by this rank, or by the survivor whose notice came first
    assert names_victim(text, victim) and "a peer rank died or left" in text, text
    assert took < GROUP_TIMEOUT_S / 2, "took %.1f s: the timeout, not the peer's death" % took
    # the group has failed: later calls fail at once instead of waiting again
    t1 = time.monotonic()
    try:
        dist.all_reduce(small)
        raise AssertionError("a collective succeeded on a failed group")
    except RuntimeError as e2:
        assert "tutti" in str(e2), str(e2)
    print("rank %d: error after %.2f s: %s" % (rank, took, text))
    print("rank %d: next call failed after %.2f s" % (rank, time.monotonic() - t1))
    survivors_leave(dist, rank, n)


def w_ddp():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, n = harness.init(timeout_s=GROUP_TIMEOUT_S)
    victim = n - 1
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    t0 = None
    try:
        for step in range(100000):
            if step == 3:
                if rank == victim:
                    die()
                t0 = time.monotonic()
            opt.zero_grad()
            loss = ddp(torch.randn(8, 64)).square().mean()
            loss.backward()
            opt.step()
        raise AssertionError("DDP went on after rank %d died" % victim)
    except RuntimeError as e:
        text = str(e)
    assert t0 is not None, "failed before the victim died: " + text
    took = time.monotonic() - t0
    assert "tutti" in text and names_victim(text, victim), text
    assert took < GROUP_TIMEOUT_S / 2, "took %.1f s: the timeout, not the peer's death" % took
    print("rank %d: DDP error after %.2f s: %s" % (rank, took, text.splitlines()[0]))
    survivors_leave(dist, rank, n)


def w_shrink():
    """torch.distributed.shrink_group after a rank died (VICTIM in the environment; rank 0 serves
    torch's TCPStore, which dies with it, and tutti's shrink needs neither): the survivors get a
    default group of the ranks left, renumbered in order, whose collectives are exact."""
    import torch
    import torch.distributed as dist

    kwargs = {}
    if "STORE_PORT" in os.environ:  # a store that outlives rank 0 (as torchrun's agent hosts it)
        import datetime

        kwargs = dict(store=dist.TCPStore("127.0.0.1", int(os.environ["STORE_PORT"]),
                                          is_master=False,
                                          timeout=datetime.timedelta(seconds=60)),
                      rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank, n = harness.init(timeout_s=GROUP_TIMEOUT_S, **kwargs)
    victim = int(os.environ["VICTIM"])
    assert dist.get_backend() == "tutti"
    t = torch.ones(1 << 16)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == victim:
        die()
    try:
        for _ in range(100000):
            dist.all_reduce(t)
        raise AssertionError("collectives went on after rank %d died" % victim)
    except RuntimeError as e:
        assert "rank %d (pid" % victim in str(e), str(e)
    t0 = time.monotonic()
    pg = dist.shrink_group([victim])
    took = time.monotonic() - t0
    survivors = [r for r in range(n) if r != victim]
    assert dist.get_world_size() == n - 1 and pg.size() == n - 1, (dist.get_world_size(), pg.size())
    assert dist.get_rank() == survivors.index(rank), (dist.get_rank(), rank)
    olds = [torch.zeros(1, dtype=torch.int64) for _ in range(n - 1)]
    dist.all_gather(olds, torch.tensor([rank], dtype=torch.int64))
    assert [int(x) for x in olds] == survivors, olds
    x = torch.arange(1, 100001, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(x)
    want = torch.arange(1, 100001, dtype=torch.float32) * sum(r + 1 for r in survivors)
    assert torch.equal(x, want), (x[:4], want[:4])
    y = torch.full((5,), rank + 1.0, dtype=torch.bfloat16)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    assert y.tolist() == [max(survivors) + 1.0] * 5, y
    print("rank %d: error after 0 s; shrink_group took %.2f s: now rank %d of %d" %
          (rank, took, dist.get_rank(), dist.get_world_size()))
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def w_teardown():
    """destroy_process_group with operations still queued whose Works and tensors Python has
    dropped already: tutti's worker must not need the GIL (which the destroying thread holds)
    to free them, or the destroy waits for the worker forever."""
    import torch
    import torch.distributed as dist

    rank, n = harness.init(timeout_s=GROUP_TIMEOUT_S)
    for rnd in range(3):
        g = dist.new_group()
        for _ in range(30):
            dist.all_reduce(torch.ones(1 << 17), group=g, async_op=True)  # dropped at once
            dist.broadcast(torch.ones(100), 0, group=g, async_op=True)
        t0 = time.monotonic()
        dist.destroy_process_group(g)
        print("rank %d: round %d: destroy took %.2f s" % (rank, rnd, time.monotonic() - t0))
    t = torch.ones(4)
    dist.all_reduce(t)  # the world group is unharmed
    assert t.tolist() == [float(n)] * 4, t
    dist.destroy_process_group()
    print("rank %d: teardown ok" % rank)


def w_call_timeout():
    """c10d's per-call timeout (opts.timeout; dist.barrier(timeout=...)): a call that has one
    fails at it, not at the group's 300 s; one that ends in time leaves the thread's later calls
    on the group's timeout; a timeout tutti cannot take is refused before anything is posted."""
    import datetime

    import torch
    import torch.distributed as dist

    rank, n = harness.init(timeout_s=GROUP_TIMEOUT_S)
    g2 = dist.new_group()
    pg = dist.group.WORLD
    t = torch.ones(8)
    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(0)
    try:
        pg.allreduce([t], opts).wait()
        raise AssertionError("a zero per-call timeout was taken")
    except RuntimeError as e:
        assert "opts.timeout" in str(e), e
    # 5 s: both ranks must post within it (1 s failed where one rank was descheduled as long)
    opts.timeout = datetime.timedelta(seconds=5)
    pg.allreduce([t], opts).wait()
    assert t.tolist() == [float(n)] * 8, t
    # The 5 s above is not left on the thread: this barrier waits for rank 1's 7.5 s sleep.
    if rank == 1:
        time.sleep(7.5)
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        time.sleep(6)  # joins neither of rank 0's barriers below
        store.set("done/1", "1")
        sys.stdout.flush()
        os._exit(0)
    for what, call in (("blocking", lambda: dist.barrier(timeout=datetime.timedelta(seconds=1.5))),
                       ("async", lambda: dist.barrier(group=g2, async_op=True,
                                                      timeout=datetime.timedelta(seconds=1.5)).wait())):
        t0 = time.monotonic()
        try:
            call()
            raise AssertionError("%s barrier: rank 1 never came, yet it succeeded" % what)
        except RuntimeError as e:
            took = time.monotonic() - t0
            assert "timed out after 1.5 s" in str(e), e
            assert took < 30, "%s barrier failed after %.1f s, not at its 1.5 s" % (what, took)
            print("rank 0: %s barrier with timeout 1.5 s: error after %.2f s: %s" % (what, took, e))
    store.wait(["done/1"])
    sys.stdout.flush()
    os._exit(0)


def w_raised():
    """Rank 1 raises between two steps and ends its group in a `finally` (as scripts do), while
    rank 0 waits in the next step's all_reduce: rank 0's call fails naming rank 1 as one it
    never posted (rank 1's goodbye carries how many calls it had posted), not after the grace a
    departed rank's last data gets, and the traceback of rank 1 is its own."""
    import torch
    import torch.distributed as dist

    rank, n = harness.init(timeout_s=GROUP_TIMEOUT_S)
    t = torch.ones(1000)
    try:
        try:
            for step in range(5):
                if rank == 1 and step == 3:
                    raise ValueError("rank 1 fails on purpose")
                dist.all_reduce(t)
        finally:
            dist.destroy_process_group()
        raise AssertionError("rank %d went on after rank 1 raised" % rank)
    except ValueError as e:
        assert rank == 1, e
        print("rank 1 raised")
    except RuntimeError as e:
        text = str(e)
        assert rank == 0, text
        assert text.startswith("tutti allreduce: "), text
        assert "rank 1 destroyed its communicator after 3 call(s), without posting this one " \
               "(#3)" in text, text
        print("rank 0: error: %s" % text)


class TestFailure(harness.RankTest):
    script = os.path.abspath(__file__)

    def check(self, worker, n):
        results, timed_out = harness.run_ranks(self.script, worker, n, timeout=90)
        self.assertFalse(timed_out, "hung: " + harness.report(results, timed_out))
        self.assertEqual(results[-1].rc, -signal.SIGKILL, harness.report(results))
        for r in range(n - 1):
            self.assertEqual(results[r].rc, 0, harness.report(results))
            self.assertIn("error after", results[r].out, harness.report(results))

    def test_killed_rank_fails_collectives(self):
        self.check("collectives", 2)

    def test_killed_rank_fails_ddp(self):
        self.check("ddp", 3)

    def test_shrink_group_after_a_death(self):
        if not hasattr(__import__("torch").distributed, "shrink_group"):
            self.skipTest("this torch has no shrink_group")
        import datetime

        import torch.distributed as dist

        # torch's shrink_group clones the group's store: when rank 0 dies, only a store that
        # lives elsewhere (torchrun's agent, a store server of its own) lets it go on.
        port = harness.free_port()
        store = dist.TCPStore("127.0.0.1", port, is_master=True,
                              timeout=datetime.timedelta(seconds=60))
        for victim, env in ((2, {}), (0, {"STORE_PORT": str(port)})):
            env["VICTIM"] = str(victim)
            results, timed_out = harness.run_ranks(self.script, "shrink", 3, timeout=90, env=env)
            self.assertFalse(timed_out, "hung: " + harness.report(results, timed_out))
            self.assertEqual(results[victim].rc, -signal.SIGKILL, harness.report(results))
            for r in range(3):
                if r != victim:
                    self.assertEqual(results[r].rc, 0, harness.report(results))
                    self.assertIn("shrink_group took", results[r].out, harness.report(results))
        del store

    def test_per_call_timeout(self):
        res = self.ranks("call_timeout", 2, timeout=90)
        self.assertEqual(res[0].out.count("error after"), 2, harness.report(res))

    def test_raised_rank_fails_peers_next_call(self):
        res = self.ranks("raised", 2, timeout=90)
        self.assertIn("rank 0: error", res[0].out, harness.report(res))
        self.assertIn("rank 1 raised", res[1].out, harness.report(res))

    def test_destroy_with_operations_in_flight(self):
        res = self.ranks("teardown", 2, timeout=90)
        self.assertIn("teardown ok", res[0].out)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"collectives": w_collectives, "ddp": w_ddp,
                                         "shrink": w_shrink, "teardown": w_teardown,
                                         "call_timeout": w_call_timeout,
                                         "raised": w_raised}))
    import unittest

    unittest.main()
