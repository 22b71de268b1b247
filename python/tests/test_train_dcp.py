"""test_train_dcp.py: torch.distributed.checkpoint over tutti. The small GPT-2 of
train_common.py, sharded with FSDP2 (bf16 mixed precision) on 2 ranks, is trained three ways,
each a separate launch with init_process_group("tutti"):

  straight  steps 0..11 in one go;
  save      steps 0..5, then dcp.save of the model's and the optimizer's sharded state
            (torch.distributed.checkpoint.state_dict.get_state_dict: DTensor shards, AdamW's
            moments and step counts), and the process group is gone;
  resume    a model initialised with other random weights, dcp.load of that checkpoint
            (set_state_dict), then steps 6..11.

The losses of save + resume are bit-identical to straight's, step by step, and so are the final
parameter shards: the checkpoint carried everything, and the resumed run continues the same
curve. DCP's planning runs over the group too (gather_object / scatter_object /
all_gather_object, i.e. gather, scatter, allgather and broadcast of pickled bytes), and a
resumed run that had not loaded would start again from a loss near ln(256).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import train_common as tc  # noqa: E402

STEPS = 12
SAVE_AT = 6


def model_and_opt(torch, seed):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = tc.tiny_gpt2(torch, seed=seed)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for block in model.transformer.h:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return model, opt


def steps(torch, dist, model, opt, rank, first, last):
    succ = tc.successor_table(torch)
    losses = []
    for step in range(first, last):
        ids = tc.batch(torch, rank, step, succ)
        opt.zero_grad(set_to_none=True)
        loss = tc.lm_loss(torch, model, ids, autocast=False)
        loss.backward()
        opt.step()
        losses.append(tc.mean_over_ranks(torch, dist, loss.item()))
    return losses


def w_dcp(phase, ckpt, outdir):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    rank, n = harness.init("tutti")
    if phase == "straight":
        model, opt = model_and_opt(torch, seed=1234)
        losses = steps(torch, dist, model, opt, rank, 0, STEPS)
    elif phase == "save":
        model, opt = model_and_opt(torch, seed=1234)
        losses = steps(torch, dist, model, opt, rank, 0, SAVE_AT)
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
    else:
        model, opt = model_and_opt(torch, seed=4321)  # other weights: only the load restores
        before = tc.flat_state(torch, [p.to_local() for p in model.parameters()])
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=ckpt)
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        after = tc.flat_state(torch, [p.to_local() for p in model.parameters()])
        assert not torch.equal(before, after), "dcp.load changed no parameter"
        losses = steps(torch, dist, model, opt, rank, SAVE_AT, STEPS)
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert type(be).__name__ == "BackendTutti", type(be).__name__
    shards = tc.flat_state(torch, [p.to_local() for p in model.parameters()])
    tc.save_result(torch, outdir, rank, losses=losses, shards=shards)
    dist.destroy_process_group()
    print("rank %d: %s: losses %s" % (rank, phase, " ".join("%.4f" % v for v in losses)))


class TestCheckpoint(harness.RankTest):
    script = os.path.abspath(__file__)

    def test_save_load_resume_same_curve(self):
        import torch

        with tempfile.TemporaryDirectory() as tmp:
            ckpt = os.path.join(tmp, "ckpt")
            got = {}
            for phase in ("straight", "save", "resume"):
                out = os.path.join(tmp, phase)
                self.ranks("dcp", 2, timeout=300, args=(phase, ckpt, out))
                got[phase] = tc.load_results(torch, out, 2)
            self.assertTrue(os.path.exists(os.path.join(ckpt, ".metadata")),
                            "dcp.save wrote no checkpoint metadata")
        straight = got["straight"][0]["losses"]
        resumed = got["save"][0]["losses"] + got["resume"][0]["losses"]
        self.assertEqual(len(resumed), STEPS)
        self.assertEqual(resumed, straight, "save + resume losses differ from the straight "
                         "run:\n %s\n %s" % (resumed, straight))
        for r in range(2):
            diff = tc.first_difference(torch, got["resume"][r]["shards"],
                                       got["straight"][r]["shards"])
            self.assertEqual(diff, "", "rank %d: final shards differ: %s" % (r, diff))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(harness.worker_main({"dcp": w_dcp}))
    import unittest

    unittest.main()
