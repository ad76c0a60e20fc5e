"""Whole-sequence nn.LSTM / nn.GRU / nn.RNN on a MaskedBatch with a dynamic
time dim: batched vs per-example values and gradients (input, initial
states, parameters), final states at each example's own last step, padding
and dormant lanes, dropout, and the errors."""
import pytest
import torch
import torch.nn as nn

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

LAYERS = {
    "lstm": lambda i, h, **kw: nn.LSTM(i, h, batch_first=True, **kw),
    "gru": lambda i, h, **kw: nn.GRU(i, h, batch_first=True, **kw),
    "rnn_tanh": lambda i, h, **kw: nn.RNN(i, h, batch_first=True, **kw),
    "rnn_relu": lambda i, h, **kw: nn.RNN(i, h, batch_first=True, nonlinearity="relu", **kw),
}
MODES = ("mixed", "one", "equal")
IN, HID, T = 3, 2, 5


def torch_layout(h):
    """A state made as (1, L*D, H) per example -> the layer's (L*D, 1, H)
    (batched: its batch-of-one dimension moves to 1)."""
    return h.transpose(0, 1)


def run(layer, x, *h0):
    """Per example: ``out, h = layer(x[, h0])``, states (L*D, 1, H) as the
    unbatched layer has them."""
    x = poison(x)
    if not h0:
        out, h = layer(x)
    elif isinstance(layer, nn.LSTM):
        out, h = layer(x, tuple(torch_layout(s) for s in h0))
    else:
        out, h = layer(x, torch_layout(h0[0]))
    return (out,) + (h if isinstance(h, tuple) else (h,))


def check(layer, B, mode, with_h0, T=T):
    layer = layer.double()
    D = 2 if layer.bidirectional else 1
    specs = [(B, (True, T), (False, IN))]
    if with_h0:
        LD, H = layer.num_layers * D, layer.proj_size or layer.hidden_size
        specs.append((B, (False, LD), (False, H)))
        if isinstance(layer, nn.LSTM):
            specs.append((B, (False, LD), (False, layer.hidden_size)))
    return mb_test(lambda *a: run(layer, *a), *specs, lengths=mode, dtype=torch.float64,
                   params=list(layer.parameters()))


@pytest.mark.parametrize("mode, B", [("mixed", 3), ("one", 3), ("equal", 3), ("mixed", 1)])
@pytest.mark.parametrize("with_h0", (False, True))
@pytest.mark.parametrize("num_layers", (1, 2))
@pytest.mark.parametrize("bidirectional", (False, True))
@pytest.mark.parametrize("kind", LAYERS)
def test_layer_equals_per_example(kind, bidirectional, num_layers, with_h0, mode, B):
    layer = LAYERS[kind](IN, HID, num_layers=num_layers, bidirectional=bidirectional)
    out = check(layer, B, mode, with_h0)[0]
    assert isinstance(out, MaskedBatch) and out.dims == (True, False)


@pytest.mark.parametrize("mode", MODES)
def test_lstm_with_projection_and_no_bias(mode):
    check(nn.LSTM(IN, 4, batch_first=True, proj_size=HID, bidirectional=True, bias=False),
          3, mode, True)


def test_output_mask_and_state_layout():
    layer = nn.GRU(IN, HID, num_layers=2, bidirectional=True, batch_first=True)
    xs = [torch.randn(1, n, IN) for n in (2, 5, 1)]
    x = MaskedBatch.fromlist(xs, (True, False))
    out, h = layer(x)
    assert torch.equal(out.mask, x.mask) and out.padded_data.shape == (3, 5, 2 * HID)
    assert isinstance(h, MaskedBatch) and h.batch_dim == 1 and h.shape == (4, 1, HID)
    for hb, xb in zip(h.examples(), xs):  # final states: each example's own last step
        torch.testing.assert_close(hb, layer(xb)[1])
    # the backward direction's h_n is its output at the example's FIRST step
    torch.testing.assert_close(h[-1].padded_data, out.padded_data[:, 0, HID:])


def test_state_rows_and_chaining():
    """h_n[-1] is batch rows (per example (1, H)); h_n starts a decoder."""
    enc = nn.LSTM(IN, HID, num_layers=2, batch_first=True).double()
    dec = nn.LSTM(IN, HID, num_layers=2, batch_first=True).double()
    head = nn.Linear(HID, 2).double()
    params = [*enc.parameters(), *dec.parameters(), *head.parameters()]

    def seq2seq(x, y):
        _, (h, c) = enc(x)
        out, _ = dec(y, (h, c))
        return out, head(h[-1])
    for mode in MODES:
        mb_test(seq2seq, (3, (True, 4), (False, IN)), (3, (True, 6), (False, IN)),
                lengths=mode, dtype=torch.float64, params=params)


def test_padding_garbage_never_leaks():
    """NaN in padding: outputs and every parameter gradient stay finite and
    equal the per-example ones (the values check is in the mb_test above;
    here the padding holds NaN and inf directly)."""
    layer = nn.LSTM(IN, HID, bidirectional=True, batch_first=True).double()
    xs = [torch.randn(1, n, IN, dtype=torch.float64) for n in (1, 4, 2)]
    x = MaskedBatch.fromlist(xs, (True, False))
    x = poison(poison(x), float("inf"))
    out, (h, c) = layer(x)
    (out.to_padded(0).sum() + h.padded_data.sum() + c.padded_data.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
    got = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    for xb in xs:
        o, (hb, cb) = layer(xb)
        (o.sum() + hb.sum() + cb.sum()).backward()
    for g, p in zip(got, layer.parameters()):
        torch.testing.assert_close(g, p.grad)


@pytest.mark.parametrize("kind", LAYERS)
def test_dormant_and_empty_lanes_keep_their_state(kind):
    """A dormant SIMT lane (and an example with no step) keeps h0, reads no
    NaN and sends no gradient to the parameters."""
    layer = LAYERS[kind](IN, HID, bidirectional=True).double()
    data = torch.randn(3, 4, IN, dtype=torch.float64)
    data[1] = float("nan")
    x = MaskedBatch.from_padded(data, torch.tensor([2, 3, 0]))
    h0 = torch.randn(2, 3, HID, dtype=torch.float64)  # torch's padded layout (L*D, B, H)

    def per_example(h):  # each example's (L*D, 1, H)
        return MaskedBatch(h.transpose(0, 1), batch_dim=1)
    hx = (per_example(h0), per_example(h0 + 1)) if kind == "lstm" else per_example(h0)
    with lanes(torch.tensor([True, False, True])):
        out, h = layer(x, hx)
    states = [s.padded_data.transpose(0, 1) for s in (h if isinstance(h, tuple) else (h,))]
    starts = (h0, h0 + 1) if kind == "lstm" else (h0,)
    for s, s0 in zip(states, starts):
        torch.testing.assert_close(s[:, 1:], s0[:, 1:])  # lanes 1 (dormant) and 2 (empty)
    ref = layer(data[:1, :2], tuple(s[:, :1] for s in starts) if kind == "lstm" else h0[:, :1])
    torch.testing.assert_close(out.padded_data[:1, :2], ref[0])
    assert (out.padded_data[1:] == 0).all()
    sum(s[:, 1:].sum() for s in states).backward()  # only the lanes that did not run
    assert all(p.grad is None or (p.grad == 0).all() for p in layer.parameters())


def test_dropout():
    """Eval mode ignores dropout (exact); in training dropout is applied
    between layers (dropout=1 zeroes the second layer's input, which makes
    the batched run comparable per example)."""
    layer = nn.GRU(IN, HID, num_layers=2, dropout=1.0, batch_first=True)
    check(layer.eval(), 3, "mixed", True)
    check(layer.train(), 3, "mixed", False)
    layer = nn.GRU(IN, HID, num_layers=2, dropout=0.5, batch_first=True)
    x = MaskedBatch.fromlist([torch.randn(1, n, IN) for n in (2, 5)], (True, False))
    train, evald = layer.train()(x)[0], layer.eval()(x)[0]
    assert torch.equal(train.mask, x.mask) and torch.isfinite(train.padded_data).all()
    assert not torch.allclose(train.to_padded(), evald.to_padded())  # dropout was applied


def test_errors():
    xs = [torch.randn(1, n, IN) for n in (2, 3)]
    dyn = MaskedBatch.fromlist(xs, (True, False))
    static = MaskedBatch.fromlist([torch.randn(1, 3, IN)] * 2, (True, False))
    for x in (dyn, static):  # batch-first examples for a sequence-first layer
        with pytest.raises(ValueError, match="batch-of-one dimension at 1.*batch_first=True"):
            nn.LSTM(IN, HID)(x)
    gru = nn.GRU(IN, HID, bidirectional=True, batch_first=True)
    h0 = MaskedBatch.fromlist([torch.randn(1, 2, HID)] * 2, (False, False))  # (1, L*D, H)
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        gru(dyn, h0)  # the module's own check, as for one example
    with pytest.raises(ValueError, match="shared by every example"):
        torch.gru(dyn, torch.zeros(2, 2, HID), gru._flat_weights, True, 1, 0.0, False, True, True)
    feat = MaskedBatch.fromlist([torch.randn(1, 2, IN), torch.randn(1, 2, IN + 1)], (True, True))
    with pytest.raises(ValueError, match="feature dimension"):
        torch.gru(feat, torch.zeros(2, 2, HID), gru._flat_weights, True, 1, 0.0, False, True, True)
    w = [MaskedBatch.fromlist([p.detach().unsqueeze(0)] * 2) for p in gru._flat_weights]
    with pytest.raises(NotImplementedError, match="per-example weights"):
        torch.gru(dyn, torch.zeros(2, 2, HID), w, True, 1, 0.0, False, True, True)
    with pytest.raises(NotImplementedError, match="the input must be the MaskedBatch"):
        torch.gru(torch.randn(2, 3, IN), h0, gru._flat_weights, True, 1, 0.0, False, True, True)
    packed = dyn.to_packed()
    with pytest.raises(NotImplementedError, match="PackedSequence"):
        torch.gru(packed.data, packed.batch_sizes, h0, gru._flat_weights, True, 1, 0.0, False, True)
