"""Attention rules: F.scaled_dot_product_attention, nn.MultiheadAttention
(F.multi_head_attention_forward), nn.Transformer{Encoder,Decoder}Layer, and
the key_padding_mask interop of MaskedBatch.

Batched vs per-example (values and gradients of inputs and module
parameters) via mb_test in float64, lengths mixed / one / equal, B 1 and 3.
Inputs are poisoned with NaN in their padding, so a rule that lets padding
reach a value or a gradient fails.  Masks given as plain Tensors are sized to
the padded lengths (``x.maxsize(d)``, which is the size on a plain Tensor),
so the same code builds each example's own mask when run alone."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

D = torch.float64
LENGTHS = ("mixed", "one", "equal")
LB = [("mixed", 3), ("one", 3), ("equal", 3), ("mixed", 1)]   # (lengths mode, batch size)
sdpa = F.scaled_dot_product_attention


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def fixed(n, m, kind, seed=1):
    """A (n, m) mask whose top-left blocks are the per-example masks: bool
    (True = attend, column 0 always on) or additive float."""
    g = torch.Generator().manual_seed(seed)
    if kind == "bool":
        mask = torch.rand(n, m, generator=g) > 0.4
        mask[:, 0] = True
        return mask
    return torch.randn(n, m, generator=g, dtype=D)


def sq(x):
    return x.maxsize(-2)


# ------------------------------------------------------------------ sdpa
@pytest.mark.parametrize("lengths,B", LB)
@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_self(lengths, B, heads, causal):
    spec = (B, (False, 2), (True, 5), (False, 4)) if heads else (B, (True, 5), (False, 4))
    mb_test(lambda x: sdpa(poison(x), poison(x), poison(x), is_causal=causal),
            spec, lengths=lengths, dtype=D)


@pytest.mark.parametrize("lengths,B", LB)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_cross_lengths_differ(lengths, B, causal):
    """q has its own lengths, k and v share theirs; v has another width."""
    mb_test(lambda q, k, v: sdpa(poison(q), poison(k), poison(v), is_causal=causal),
            (B, (True, 4), (False, 3)), (B, (True, 6), (False, 3)), (B, (True, 6), (False, 5)),
            lengths=lengths, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_plain_mask_top_left_block(lengths, kind):
    big = fixed(8, 8, kind)

    def f(q, k, v):
        return sdpa(poison(q), poison(k), poison(v), attn_mask=big[:sq(q), :sq(k)])
    mb_test(f, (3, (True, 4), (False, 3)), (3, (True, 6), (False, 3)), 1, lengths=lengths, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masked_batch_mask(lengths, kind):
    """A per-example mask computed from the inputs (a MaskedBatch); the float
    one is differentiable, so gradients also flow through the mask."""
    def f(q, k):
        scores = q @ k.transpose(-2, -1)
        mask = scores > -0.5 if kind == "bool" else 0.3 * scores
        return sdpa(poison(q), poison(k), poison(k), attn_mask=mask, scale=0.7)
    mb_test(f, (3, (True, 4), (False, 3)), (3, (True, 5), (False, 3)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_sdpa_gqa_and_shared_key(lengths):
    mb_test(lambda q, k: sdpa(poison(q), poison(k), poison(k), enable_gqa=True),
            (3, (False, 4), (True, 5), (False, 3)), (3, (False, 2), (True, 5), (False, 3)),
            lengths=lengths, dtype=D)
    # keys/values shared by every example: a plain (1, S, E) Tensor
    mb_test(lambda q, k: sdpa(poison(q), k, k), (3, (True, 5), (False, 3)), (1, 4, 3),
            lengths=lengths, dtype=D)


def test_sdpa_padded_rows_finite_and_zero():
    x = poison(MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (1, 4)], (True, False)))
    out = sdpa(x, x, x, is_causal=True)
    assert torch.isfinite(out.padded_data).all()
    assert (out.padded_data[0, 1:] == 0).all()
    assert out.dims == (True, False) and out._mask is x._mask


def test_sdpa_dormant_lanes():
    """Inside @batch control flow a dormant lane gives finite values, and the
    active lanes are unchanged."""
    xs = [torch.randn(1, n, 4, dtype=D) for n in (2, 4, 3)]
    x = poison(MaskedBatch.fromlist(xs, (True, False)))
    with lanes(torch.tensor([True, False, True])):
        out = sdpa(x, x, x, is_causal=True)
    assert torch.isfinite(out.padded_data).all()
    for b in (0, 2):
        torch.testing.assert_close(out.examples()[b], sdpa(xs[b], xs[b], xs[b], is_causal=True))


def test_sdpa_errors():
    x = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (2, 3)], (True, False))
    y = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (2, 4)], (True, False))
    with pytest.raises(RuntimeError, match="is_causal"):
        sdpa(x, x, x, attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="key and value"):
        sdpa(x, x, y)
    with pytest.raises(ValueError, match="padded"):
        sdpa(x, x, x, attn_mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="shared"):
        sdpa(x, torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    z = MaskedBatch.fromlist([torch.randn(1, 3, n) for n in (2, 4)], (False, True))
    with pytest.raises(ValueError, match="dynamic"):
        sdpa(z, z, z)


# ------------------------------------------------------------------ nn.MultiheadAttention
def mha(*args, mode="train", **kwargs):
    m = nn.MultiheadAttention(*args, batch_first=True, **kwargs).double()
    return m.train() if mode == "train" else m.eval()


def check_module(m, f, *specs, lengths):
    mb_test(f, *specs, lengths=lengths, dtype=D, params=list(m.parameters()))


@pytest.mark.parametrize("lengths,B", LB)
@pytest.mark.parametrize("mode,need_weights", [("train", True), ("eval", False), ("eval", True)])
def test_mha_self(lengths, B, mode, need_weights):
    m = mha(8, 2, mode=mode)
    check_module(m, lambda x: m(poison(x), poison(x), poison(x), need_weights=need_weights),
                 (B, (True, 5), (False, 8)), lengths=lengths)


@pytest.mark.parametrize("lengths,B", LB)
@pytest.mark.parametrize("average", [True, False])
def test_mha_cross_per_head_weights(lengths, B, average):
    m = mha(8, 2, kdim=5, vdim=3)
    f = lambda q, k, v: m(poison(q), poison(k), poison(v), average_attn_weights=average)
    check_module(m, f, (B, (True, 4), (False, 8)), (B, (True, 6), (False, 5)),
                 (B, (True, 6), (False, 3)), lengths=lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("extra", ["bias_kv", "zero_attn", "both"])
def test_mha_extra_keys(lengths, extra):
    """bias_k/bias_v and add_zero_attn append keys after each example's own;
    the returned weights put them right after its real keys."""
    m = mha(8, 2, add_bias_kv=extra != "zero_attn", add_zero_attn=extra != "bias_kv")
    check_module(m, lambda q, k: m(poison(q), poison(k), poison(k)),
                 (3, (True, 4), (False, 8)), (3, (True, 5), (False, 8)), lengths=lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("mode,need_weights", [("train", True), ("eval", False)])
def test_mha_causal(lengths, need_weights, mode):
    m = mha(8, 2, mode=mode)

    def f(x):
        causal = nn.Transformer.generate_square_subsequent_mask(x.maxsize(1), dtype=D)
        return m(poison(x), poison(x), poison(x), attn_mask=causal, is_causal=True,
                 need_weights=need_weights)
    check_module(m, f, (3, (True, 5), (False, 8)), lengths=lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mha_attn_mask_2d_and_per_head(lengths, kind):
    m = mha(8, 2)
    big = fixed(8, 8, kind)
    big = ~big if kind == "bool" else big   # MHA: True = do not attend
    per_head = torch.stack([big, big.flip(1) if kind == "float" else big])

    def f(q, k):
        return (m(poison(q), poison(k), poison(k), attn_mask=big[:sq(q), :sq(k)]),
                m(poison(q), poison(k), poison(k), attn_mask=per_head[:, :sq(q), :sq(k)]))
    check_module(m, f, (3, (True, 4), (False, 8)), (3, (True, 6), (False, 8)), lengths=lengths)


def ragged_pair(lengths, feat, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(1, n, feat, generator=g, dtype=D) for n in lengths]
    kpm = [torch.rand(1, n, generator=g) > 0.6 for n in lengths]
    for k in kpm:
        k[0, 0] = False   # every example keeps a key
    return MaskedBatch.fromlist(xs, (True, False)), MaskedBatch.fromlist(kpm, (True,))


@pytest.mark.parametrize("lengths", [(2, 5, 1), (3,), (4, 4)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_functional_masked_batch_key_padding_mask(lengths, need_weights):
    """A per-example key_padding_mask (a MaskedBatch) through a direct
    F.multi_head_attention_forward call in PyTorch's (L, N, E) layout."""
    m = mha(8, 2)
    x, kpm = ragged_pair(lengths, 8)

    def f(x, kpm):
        s = x.transpose(0, 1)
        out, w = F.multi_head_attention_forward(
            s, s, s, 8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
            m.out_proj.weight, m.out_proj.bias, key_padding_mask=kpm, need_weights=need_weights)
        return out.transpose(0, 1), w
    mb_test(f, x, kpm, dtype=D, params=list(m.parameters()))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_mha_plain_key_padding_mask_from_padded_pipeline(mode):
    """A padded pipeline's (B, S) key_padding_mask composes with the batch's
    own padding: example b sees key_padding_mask[b, :S_b]."""
    m = mha(8, 2, mode=mode)
    x, kpm = ragged_pair((2, 5, 3), 8)
    user = kpm.to_padded(True)
    out, w = m(x, x, x, key_padding_mask=user)
    for b, (xe, oe, we) in enumerate(zip(x.examples(), out.examples(), w.examples())):
        n = xe.size(1)
        ref, ref_w = m(xe, xe, xe, key_padding_mask=user[b:b + 1, :n])
        torch.testing.assert_close(oe, ref)
        torch.testing.assert_close(we, ref_w)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_mask_hiding_every_key_of_a_padded_row(lengths, need_weights):
    """"Attend to yourself and later keys": a padded query row of a short
    example sees only padded keys.  The rule must keep that row finite (it
    attends key 0) so no NaN reaches parameter gradients."""
    m = mha(8, 2)

    def f(x):
        n = x.maxsize(1)
        later = torch.ones(n, n, dtype=torch.bool).tril(-1)   # True = do not attend
        return m(poison(x), poison(x), poison(x), attn_mask=later, need_weights=need_weights)
    check_module(m, f, (3, (True, 5), (False, 8)), lengths=lengths)


def nan_cotangent_grads(f, x, params):
    """Gradients of f's batched output under a cotangent that is NaN at
    every non-real entry: a rule must drop it there."""
    out = f(x)
    out = out[0] if isinstance(out, tuple) else out
    g = torch.where(out.mask, torch.randn_like(out.padded_data), float("nan"))
    out.padded_data.backward(g)
    return [x.padded_data.grad] + [p.grad for p in params]


@pytest.mark.parametrize("which", ["sdpa", "mha"])
def test_nan_cotangent_at_padding_is_dropped(which):
    x = MaskedBatch.fromlist([torch.randn(1, n, 8, dtype=D, requires_grad=True) for n in (1, 4, 2)],
                             (True, False))
    x = MaskedBatch(x.padded_data.detach().requires_grad_(), x._mask, x.dims)
    m = mha(8, 2)
    f = (lambda x: sdpa(x, x, x, is_causal=True)) if which == "sdpa" else (lambda x: m(x, x, x))
    params = [] if which == "sdpa" else list(m.parameters())
    for grad in nan_cotangent_grads(f, x, params):
        assert torch.isfinite(grad).all()


def test_mha_errors():
    x = MaskedBatch.fromlist([torch.randn(1, n, 8, dtype=D) for n in (2, 3)], (True, False))
    seq_first = nn.MultiheadAttention(8, 2).double()   # batch_first=False
    with pytest.raises(ValueError, match="batch_first=True"):
        seq_first(x, x, x)
    m = mha(8, 2)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        m(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="padded lengths"):
        m(x, x, x, attn_mask=torch.zeros(2, 2, dtype=D))
    with pytest.raises(ValueError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=torch.zeros(2, 2, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="MaskedBatch attn_mask"):
        s = x.transpose(0, 1)
        F.multi_head_attention_forward(
            s, s, s, 8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
            m.out_proj.weight, m.out_proj.bias, attn_mask=(x @ x.transpose(1, 2)) > 0)


def test_transposed_batch_is_sequence_first():
    """x.transpose(0, 1) of (1, n, E) examples is each example's (n, 1, E):
    ops run on it per example, and it transposes back to x's layout."""
    x = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (2, 3)], (True, False))
    s = x.transpose(0, 1)
    assert s.batch_dim == 1 and s.transpose(1, 0).batch_dim == 0
    for a, b in zip(torch.tanh(s).examples(), x.examples()):
        torch.testing.assert_close(a, b.tanh().transpose(0, 1))
    assert x.is_nested is False


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_mha_sequence_first(lengths):
    """nn.MultiheadAttention(batch_first=False) on (L, 1, E) examples."""
    m = nn.MultiheadAttention(8, 2).double().eval()
    mb_test(lambda x: m(x, x, x)[0], (3, (True, 5), (False, 8)), batch_dim=1, lengths=lengths,
            dtype=D, params=list(m.parameters()))


# ------------------------------------------------------------------ Transformer layers
def layer(kind, norm_first, mode):
    cls = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    m = cls(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True, norm_first=norm_first)
    m = m.double()
    return m.train() if mode == "train" else m.eval()


@pytest.mark.parametrize("lengths,B", LB)
@pytest.mark.parametrize("norm_first,mode,causal",
                         [(False, "train", False), (True, "eval", True), (False, "eval", True),
                          (True, "train", False)])
def test_encoder_layer(lengths, B, norm_first, mode, causal):
    m = layer("encoder", norm_first, mode)

    def f(x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.maxsize(1), dtype=D) if causal else None
        return m(poison(x), src_mask=mask, is_causal=causal)
    check_module(m, f, (B, (True, 5), (False, 8)), lengths=lengths)


@pytest.mark.parametrize("lengths,B", LB)
@pytest.mark.parametrize("norm_first,mode", [(False, "train"), (True, "eval")])
def test_decoder_layer_causal_cross(lengths, B, norm_first, mode):
    m = layer("decoder", norm_first, mode)

    def f(tgt, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.maxsize(1), dtype=D)
        return m(poison(tgt), poison(memory), tgt_mask=mask, tgt_is_causal=True)
    check_module(m, f, (B, (True, 4), (False, 8)), (B, (True, 6), (False, 8)), lengths=lengths)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_stacks_on_static_lengths(mode):
    """nn.TransformerEncoder / Decoder run on batches whose sequence dim is
    static (their forward reads src.size(), see the next test)."""
    enc = nn.TransformerEncoder(layer("encoder", False, mode), 2, enable_nested_tensor=True)
    dec = nn.TransformerDecoder(layer("decoder", True, mode), 2)
    dec = dec.train() if mode == "train" else dec.eval()

    def f(src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), dtype=D)
        return dec(tgt, enc(src), tgt_mask=mask)
    params = list(enc.parameters()) + list(dec.parameters())
    mb_test(f, (3, (False, 5), (False, 8)), (3, (False, 4), (False, 8)), dtype=D, params=params)


def test_stacks_on_dynamic_lengths():
    """TransformerEncoder / Decoder.forward read src.size() (to detect a
    causal mask): a per-example size, so they run per example; where the
    check's answer differs between examples (a causal mask sized to the
    padded length is each example's own only for the longest) it raises
    at torch's `if`, naming size_as_tensor: give the hint
    (tgt_is_causal=True) or loop over the layers."""
    enc = nn.TransformerEncoder(layer("encoder", False, "train"), 2, enable_nested_tensor=False)
    dec = nn.TransformerDecoder(layer("decoder", True, "eval"), 2).eval()
    params = list(enc.parameters()) + list(dec.parameters())

    def f(src, tgt, hint=True):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.maxsize(1), dtype=D)
        return dec(tgt, enc(src), tgt_mask=mask, tgt_is_causal=hint or None)
    for lengths in ("mixed", "one", "equal"):
        mb_test(f, (3, (True, 5), (False, 8)), (3, (True, 4), (False, 8)), dtype=D,
                params=params, lengths=lengths)
    x = MaskedBatch.fromlist([torch.randn(1, n, 8, dtype=D) for n in (2, 3)], (True, False))
    with pytest.raises(TypeError, match="size_as_tensor"):
        f(x, x, hint=False)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_stack_layers_in_a_loop_on_dynamic_lengths(lengths):
    """The workaround the size error suggests: the stack's layers in a loop."""
    enc = nn.TransformerEncoder(layer("encoder", False, "eval"), 2, enable_nested_tensor=False,
                                norm=nn.LayerNorm(8, dtype=D))

    def f(src):
        for l in enc.layers:
            src = l(poison(src))
        return enc.norm(src)
    mb_test(f, (3, (True, 5), (False, 8)), dtype=D, params=list(enc.parameters()),
            lengths=lengths)


# ------------------------------------------------------------------ key_padding_mask interop
def test_key_padding_mask_round_trip():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4, 1)], (True, False))
    kpm = x.key_padding_mask()
    assert kpm.tolist() == [[False, False, True, True], [False] * 4, [False, True, True, True]]
    assert not x.key_padding_mask(2).any()
    y = MaskedBatch.from_padded(x.to_padded(0.0), key_padding_mask=kpm)
    assert y.dims == (True, False)
    for a, b in zip(x.examples(), y.examples()):
        assert torch.equal(a, b)
    # the same mask drives PyTorch's own padded call and the batched one alike
    m = mha(3, 1).float()
    ref, _ = m(x.to_padded(0.0), x.to_padded(0.0), x.to_padded(0.0), key_padding_mask=kpm)
    out, _ = m(y, y, y)
    for b, e in enumerate(out.examples()):
        torch.testing.assert_close(e, ref[b:b + 1, :e.size(1)])


def test_key_padding_mask_errors():
    data = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="at the end"):
        MaskedBatch.from_padded(data, key_padding_mask=torch.tensor([[True, False, False]] * 2))
    with pytest.raises(ValueError, match="shape"):
        MaskedBatch.from_padded(data, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="not both"):
        MaskedBatch.from_padded(data, [1, 2], key_padding_mask=torch.zeros(2, 3, dtype=torch.bool))
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3)], (True, False))
    with pytest.raises(ValueError, match="dimension 0"):
        x.key_padding_mask(0)
