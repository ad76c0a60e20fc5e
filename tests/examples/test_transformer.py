"""The Transformer example: the teacher-forced forward equals per-example
runs (values and gradients), greedy decoding stops per example exactly
where each example's own decode stops, and training runs."""
import math

import pytest
import torch

import matchbox
from examples import transformer as ex
from matchbox.test_utils import mb_test


def pairs_for(mode, B, longest=5, seed=0):
    """(source, target) pairs whose source lengths follow a length mode
    ("mixed" has 1 and ``longest``); targets are one token longer."""
    if mode == "one":
        lengths = [1] * B
    elif mode == "equal":
        lengths = [longest] * B
    else:
        g = torch.Generator().manual_seed(seed)
        lengths = ([1, longest] + torch.randint(1, longest + 1, (B,), generator=g).tolist())[:B]
    pairs = []
    for i, n in enumerate(lengths):
        pairs += ex.make_data(1, min_len=n, max_len=n, seed=seed + i)
    return pairs


def small_model(scale=1.0):
    """A tiny float64 model; ``scale`` > 1 enlarges the weight matrices so an
    untrained model's decodes differ from input to input."""
    model = ex.Transformer(d_model=16, heads=2, layers=2, d_ff=32).double()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(scale)
    return model


@pytest.mark.parametrize("mode,B", [("mixed", 4), ("one", 3), ("equal", 3), ("mixed", 1)])
def test_teacher_forced_forward(mode, B):
    model = small_model()
    src, tgt_in, tgt_out = ex.make_batch(pairs_for(mode, B))
    mb_test(lambda s, i, o: ex.token_losses(model, s, i, o), src, tgt_in, tgt_out,
            params=list(model.parameters()), dtype=torch.float64)
    mb_test(model, src, tgt_in, dtype=torch.float64)  # the logits themselves


def test_batch_loss_is_mean_over_all_target_tokens():
    model = small_model()
    pairs = pairs_for("mixed", 4)
    src, tgt_in, tgt_out = ex.make_batch(pairs)
    loss = matchbox.token_mean(ex.token_losses(model, src, tgt_in, tgt_out))
    each = [ex.token_losses(model, *(b.examples()[j] for b in (src, tgt_in, tgt_out)))
            for j in range(len(pairs))]
    assert loss.item() == pytest.approx(torch.cat(each, 1).mean().item(), rel=1e-10)
    # a default (mean) cross entropy is each pair's own mean
    per_pair = torch.nn.functional.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out)
    torch.testing.assert_close(per_pair.padded_data, torch.stack([e.mean() for e in each]))


def test_decoder_is_causal():
    """Teacher-forced logits at position t depend on the target prefix up to
    t only (what makes training match greedy decoding), batched too."""
    model = small_model()
    src, tgt_in, _ = ex.make_batch(pairs_for("mixed", 3, longest=4))
    full = model(src, tgt_in)
    cut = model(src, tgt_in[:, :2])
    for f, c in zip(full.examples(), cut.examples()):
        torch.testing.assert_close(f[:, :c.size(1)], c)


def test_split_heads_takes_contiguous_slices():
    """split_dim(2, d // heads) makes head h of the d features the slice
    h*d/heads .. (h+1)*d/heads (the layout of bench.tasks.transformer's
    hand-batched attention), on a Tensor and on a batch."""
    mha = ex.MultiHeadAttention(12, 3)
    x = torch.randn(1, 5, 12)
    want = x.view(1, 5, 3, 4).transpose(1, 2)
    assert torch.equal(mha.split_heads(x), want)
    xs = [torch.randn(1, n, 12) for n in (1, 5, 3)]
    got = mha.split_heads(matchbox.MaskedBatch.fromlist(xs, (True, False))).examples()
    for g, e in zip(got, xs):
        assert torch.equal(g, e.view(1, -1, 3, 4).transpose(1, 2))


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="not divisible by heads"):
        ex.MultiHeadAttention(10, 3)


@pytest.mark.parametrize("mode,B", [("mixed", 6), ("one", 3), ("equal", 3), ("mixed", 1)])
def test_greedy_decode_stops_per_example(mode, B):
    torch.manual_seed(2)
    model = small_model(scale=3.0)
    src, _, _ = ex.make_batch(pairs_for(mode, B, seed=3))
    out = mb_test(lambda s: ex.greedy_decode(model, s, 8), src, grad=False, dtype=torch.float64)
    singles = [ex.greedy_decode(model, s, 8) for s in src.examples()]
    assert out.size_as_tensor(1).padded_data.tolist() == [s.size(1) for s in singles]
    for s in singles:  # each decode ends at its first <eos> or at the length limit
        tokens = s.reshape(-1).tolist()
        assert ex.EOS not in tokens[:-1] and (tokens[-1] == ex.EOS or len(tokens) == 8)


def test_greedy_decode_lengths_differ():
    """The decoding test above is only meaningful if the untrained model's
    decodes have different lengths (some stop early, some hit the limit)."""
    torch.manual_seed(2)
    model = small_model(scale=3.0)
    src, _, _ = ex.make_batch(pairs_for("mixed", 6, seed=3))
    out = ex.greedy_decode(model, src, 8)
    lengths = out.size_as_tensor(1).padded_data.tolist()
    assert out.dims == (True,) and len(set(lengths)) > 1 and 8 in lengths, lengths


def test_main_runs_and_learns():
    metrics = ex.main(steps=6, batch_size=8, d_model=16, heads=2, layers=1, max_len=5,
                      test_size=8, lr=1e-2)
    for k in ("loss", "start_loss", "test_loss", "seq_acc", "tok_acc"):
        assert math.isfinite(metrics[k]), k
    assert metrics["loss"] < metrics["start_loss"]
    assert 0.0 <= metrics["seq_acc"] <= 1.0 and 0.0 <= metrics["tok_acc"] <= 1.0
