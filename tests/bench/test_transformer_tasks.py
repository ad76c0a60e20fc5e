"""The transformer (training) and decode (greedy decoding) benchmark tasks:
every variant computes the per-example numbers, each runs a step, the check
rejects a wrong hand variant, the hand model's padding masks are what make
it right, and the decode task's lengths really differ per example."""
import pytest
import torch

from bench import harness
from bench.tasks import decode, transformer
from examples.transformer import EOS

SHORT = 10  # source (and decode) length cap: quick tests


@pytest.mark.parametrize("B", [1, 3])
def test_transformer_variants_agree_and_train(B):
    variants = transformer.build(batch_size=B, seed=B, max_len=SHORT, compiled=False)
    assert set(variants) == {"per_example", "matchbox", "hand"}
    harness.check(variants, transformer.TRAINS)
    for name, v in variants.items():
        before = v.model.out.weight.detach().clone()
        loss = harness.step(v, transformer.TRAINS)
        assert loss.dim() == 0 and torch.isfinite(loss), name
        assert not torch.equal(before, v.model.out.weight), name   # the SGD step moved it


def test_transformer_pairs_have_a_length_spread():
    pairs = transformer.make_pairs(64, "cpu", seed=0)
    src_lens = [s.size(1) for s, _, _ in pairs]
    assert min(src_lens) >= 3 and max(src_lens) <= 60 and len(set(src_lens)) > 10
    for src, tgt_in, tgt in pairs:   # targets: related length, <bos>-shifted input, <eos> last
        assert abs(tgt.size(1) - src.size(1)) <= 4 and tgt_in.shape == tgt.shape
        assert tgt[0, -1] == EOS and torch.equal(tgt_in[0, 1:], tgt[0, :-1])


def test_transformer_check_catches_a_wrong_hand_model():
    variants = transformer.build(batch_size=3, max_len=SHORT, compiled=False)
    with torch.no_grad():
        variants["hand"].model.decoder[0].ff[0].weight.add_(0.01)
    with pytest.raises(AssertionError, match="hand"):
        harness.check(variants, transformer.TRAINS)


def test_transformer_hand_needs_its_key_padding_mask():
    """Without the source padding mask the hand loss is wrong: the batch
    really has padding that the masks must hide."""
    variants = transformer.build(batch_size=3, seed=3, max_len=SHORT, compiled=False)
    pairs = transformer.make_pairs(3, "cpu", seed=3, max_len=SHORT)
    (src, src_real), (tgt_in, tgt_real), (tgt, _) = (transformer.pad(list(x)) for x in zip(*pairs))
    assert not src_real.all()
    with torch.no_grad():
        ref = variants["per_example"].run()
        right = transformer.hand_loss(variants["hand"].model, src, src_real, tgt_in, tgt, tgt_real)
        wrong = transformer.hand_loss(variants["hand"].model, src, torch.ones_like(src_real),
                                      tgt_in, tgt, tgt_real)
    torch.testing.assert_close(right, ref)
    assert not torch.allclose(wrong, ref, rtol=1e-4)


def test_transformer_compiled_variant_is_offered():
    """torch.compile is lazy: building the compiled variant costs nothing
    (running it compiles for about a minute, so the runner does that)."""
    variants = transformer.build(batch_size=1, max_len=SHORT)
    for kind in ("compiled", "matchbox_compiled"):
        assert "torch.compile" in variants[kind].note


@pytest.mark.parametrize("B", [1, 3])
def test_decode_variants_agree(B):
    variants = decode.build(batch_size=B, seed=3, max_len=SHORT)
    harness.check(variants, decode.TRAINS)
    outs = {name: harness.step(v, decode.TRAINS) for name, v in variants.items()}
    for name, out in outs.items():
        assert len(out) == B, name
        for tokens in out:   # 1-D ids up to the first <eos>, or the length limit
            assert tokens.dim() == 1 and tokens.dtype == torch.long, name
            assert EOS not in tokens[:-1].tolist(), name
            assert tokens[-1] == EOS or len(tokens) == SHORT, name
    if B > 1:   # otherwise the per-example stop is not exercised
        assert len({len(t) for t in outs["per_example"]}) > 1


def test_decode_check_catches_a_wrong_hand_model():
    variants = decode.build(batch_size=3, seed=3, max_len=SHORT)
    with torch.no_grad():
        variants["hand"].model.out.bias[EOS] -= 100.0   # never stops
    with pytest.raises(AssertionError, match="hand"):
        harness.check(variants, decode.TRAINS)


def test_decode_calibration_hits_the_mean_length():
    """The <eos> bias makes the mean decode length the target, to within
    one example's stop (``calibrate_eos`` moves the stop of one at a time)."""
    B, limit = 8, 12
    variants = decode.build(batch_size=B, seed=1, max_len=limit)
    with torch.no_grad():
        got = [len(t) for t in variants["hand"].run()]
    target = min(decode.MEAN_DECODE, limit / 2)
    assert target - limit / B <= sum(got) / B <= target, got
    assert len(set(got)) > 2, got
