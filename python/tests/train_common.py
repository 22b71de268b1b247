"""train_common.py: what the training tests share: a small GPT-2 built from its config with
random weights (Hugging Face transformers, nothing downloaded), synthetic token batches that
have something to learn, one optimizer step, and helpers that save and compare what the ranks
end with.

The data: every sequence follows a fixed random successor table (token t is followed by
succ[t] four times out of five, by a random token otherwise), so a two-layer model's loss falls
from ln(256) ~ 5.5 within a few dozen steps. Each rank draws its own batches, seeded by
(rank, step), so a run is a pure function of the step numbers it covers: an interrupted run
resumed from a checkpoint sees the same batches as one that ran straight through.

Dropout is off: the tests compare what communication does, and dropout's masks, though seeded
the same on both sides, would only add noise to the FSDP-against-DDP comparison.
"""
import os

VOCAB = 256
SEQ = 32
BATCH = 8  # sequences per rank per step


def tiny_gpt2(torch, seed=1234, layers=2, width=64, heads=4):
    """A GPT-2 (GPT2LMHeadModel) of `layers` blocks, built from its config with weights drawn
    from torch's generator seeded with seed: the same model in every process."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=width, n_layer=layers,
                        n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.train()
    return model


def successor_table(torch):
    g = torch.Generator().manual_seed(99)
    return torch.randperm(VOCAB, generator=g)


def batch(torch, rank, step, succ, batch=BATCH):
    """Rank `rank`'s token ids for step `step`: (batch, SEQ) int64."""
    g = torch.Generator().manual_seed(1_000_003 * (rank + 1) + step)
    ids = torch.empty(batch, SEQ, dtype=torch.int64)
    ids[:, 0] = torch.randint(0, VOCAB, (batch,), generator=g)
    noise = torch.randint(0, VOCAB, (batch, SEQ), generator=g)
    keep = torch.rand(batch, SEQ, generator=g) < 0.8
    for t in range(1, SEQ):
        ids[:, t] = torch.where(keep[:, t], succ[ids[:, t - 1]], noise[:, t])
    return ids


def lm_loss(torch, model, ids, autocast):
    """The language-model loss of ids (fp32), the forward pass under CPU bf16 autocast when
    asked."""
    if autocast:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
    else:
        out = model(input_ids=ids, labels=ids)
    return out.loss.float()


def mean_over_ranks(torch, dist, value):
    """The mean over ranks of a float, as every rank sees it (fp64 sum, then / size)."""
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def flat_state(torch, tensors):
    """One fp64 vector of every tensor's values (fp32 and bf16 are exact in fp64)."""
    return torch.cat([t.detach().to(torch.float64).flatten() for t in tensors])


def assert_same_on_every_rank(torch, dist, vec, what):
    """Every rank holds exactly vec (rank 0's copy, broadcast, compared bit for bit)."""
    ref = vec.clone()
    dist.broadcast(ref, 0)
    if not torch.equal(ref, vec):
        bad = (ref != vec).nonzero()[0].item()
        raise AssertionError("%s: rank %d differs from rank 0 at element %d (%r vs %r)" %
                             (what, dist.get_rank(), bad, vec[bad].item(), ref[bad].item()))


def save_result(torch, outdir, rank, **items):
    os.makedirs(outdir, exist_ok=True)
    torch.save(items, os.path.join(outdir, "rank%d.pt" % rank))


def load_results(torch, outdir, n):
    return [torch.load(os.path.join(outdir, "rank%d.pt" % r)) for r in range(n)]


def first_difference(torch, a, b):
    """'' when a and b are identical, else where and by how much they differ."""
    if a.shape != b.shape:
        return "shapes differ: %s vs %s" % (tuple(a.shape), tuple(b.shape))
    if torch.equal(a, b):
        return ""
    diff = (a - b).abs()
    i = int((a != b).nonzero()[0].item())
    return ("%d of %d elements differ; first at %d (%r vs %r); max |diff| %g" %
            (int((a != b).sum()), a.numel(), i, a[i].item(), b[i].item(), diff.max().item()))
