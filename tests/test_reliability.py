"""Issue 18: inputs and reads that used to give a silently wrong number or
an unhelpful error.  Each test gives the per-example answer (checked with
mb_test against single-example runs) or asserts the clear error."""
import pickle

import pytest
import torch

import matchbox
from matchbox import MaskedBatch


# ------------------------------------------------------------------ item 4: validation
def test_mask_with_two_dynamic_dims_must_be_rectangular():
    data = torch.randn(1, 2, 2)
    mask = torch.tensor([[[True, True], [True, False]]])
    with pytest.raises(ValueError, match=r"examples \[0\] is not rectangular"):
        MaskedBatch(data, mask, (True, True))
    ok = torch.tensor([[[True, True], [False, False]]])
    assert MaskedBatch(data, ok, (True, True)).examples()[0].shape == (1, 1, 2)


def test_fromlist_refuses_mixed_dtypes_naming_the_example():
    xs = [torch.tensor([[2 ** 40 + 1]]), torch.tensor([[0.5]])]
    with pytest.raises(ValueError, match=r"example 1 has dtype torch.float32 but example 0 has torch.int64"):
        MaskedBatch.fromlist(xs)


# ------------------------------------------------------------------ item 5: errors
def test_zero_examples_reduce():
    x = MaskedBatch.from_padded(torch.randn(0, 5, 3), torch.zeros(0, dtype=torch.long))
    assert x.sum(1).padded_data.shape == (0, 3)
    assert x.sum().padded_data.shape == (0,)
    assert x.mean().padded_data.shape == (0,)


def test_format_spec_says_to_combine_examples():
    loss = MaskedBatch.fromlist([torch.ones(1, 2), torch.ones(1, 2)]).sum(1)
    with pytest.raises(TypeError, match=r"example_mean\(loss\).item\(\)"):
        f"{loss:.3f}"
    assert f"{loss}" == repr(loss)


def test_tensor_attributes_read_as_on_a_tensor():
    x = MaskedBatch.fromlist([torch.ones(1, 2), torch.ones(1, 3)]).requires_grad_()
    assert hasattr(x, "grad_fn") and x.grad_fn is None and x.is_leaf
    y = x * 2
    assert y.grad_fn is not None and not y.is_leaf and y.requires_grad
    assert x.layout == torch.strided and x.names == (None, None)
    assert not x.is_sparse and not x.is_quantized and not x.is_meta and x.is_cpu
    assert x.itemsize == 4 and x.grad is None
    # an op the general fallback refuses: hasattr answers False, the call names the op
    assert getattr(x, "data_ptr", "default") == "default"
    with pytest.raises(NotImplementedError, match="Tensor.data_ptr has no rule"):
        x.data_ptr
    # a value attribute without a rule is each example's own (the general fallback)
    assert [h.shape for h in x.H.examples()] == [(2, 1), (3, 1)]


def test_torch_load_with_weights_only_and_pickle_keep_any_batch(tmp_path):
    b = MaskedBatch.fromlist([torch.ones(1, 2), torch.ones(1, 3)])
    absent = list(b.unbind(1))[2]    # a step example 0 lacks: kept as it is
    for v in (b, absent):
        torch.save(v, tmp_path / "b.pt")
        with torch.serialization.safe_globals([MaskedBatch]):
            c = torch.load(tmp_path / "b.pt")
        d = pickle.loads(pickle.dumps(v))
        for w in (c, d):
            assert torch.equal(w.mask, v.mask) and w.dims == v.dims
            assert torch.equal(w.padded_data, v.padded_data)
    assert "weights_only" in open("docs/api.md").read()


# ------------------------------------------------------------------ item 1: absent examples
def _rnn_batch():
    torch.manual_seed(0)
    xs = [torch.randn(1, n, 4) for n in (3, 5, 2)]
    return torch.nn.RNNCell(4, 4), xs, MaskedBatch.fromlist(xs, (True, False))


@pytest.mark.parametrize("combine", ["example_sum", "example_mean", "token_mean", "backward"])
def test_a_value_some_examples_lack_refuses_to_reach_a_loss(combine):
    cell, _, x = _rnn_batch()
    h = cell(list(x.unbind(1))[-1])   # the padded last step: examples 0 and 2 lack it
    loss = torch.nn.functional.mse_loss(h, torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"examples \[0, 2\] of this batch hold no value.*@matchbox.batch"):
        if combine == "backward":
            loss.backward()
        else:
            getattr(matchbox, combine)(loss)
    # a per-example reduction keeps the absence; it does not raise by itself
    assert h.sum(1).mask.tolist() == [False, True, False]


@pytest.mark.parametrize("last", ["loop", "sum_of_steps"])
def test_a_per_step_loop_outside_batch_raises_where_a_step_is_missing(last):
    """Issue 27 item 7: where the step some examples lack meets a value they
    hold, not at the loss."""
    cell, _, x = _rnn_batch()
    with pytest.raises(ValueError, match=r"holds no value for example 2.*@matchbox.batch"):
        if last == "loop":              # a per-step loop without @batch
            h = x.batch_zeros(4)
            for x_t in x.unbind(1):
                h = cell(x_t, h)
        else:
            sum(v for v in x.unbind(1))


def test_the_same_loop_under_batch_combines_every_example():
    cell, xs, x = _rnn_batch()

    @matchbox.batch
    def last(x):
        h = x.batch_zeros(4)
        for x_t in x.unbind(1):
            h = cell(x_t, h)
        return h

    loss = torch.nn.functional.mse_loss(last(x), torch.zeros(1, 4))
    want = sum(torch.nn.functional.mse_loss(last(e), torch.zeros(1, 4)) for e in xs) / 3
    torch.testing.assert_close(matchbox.example_mean(loss), want)


# ------------------------------------------------------------------ item 2: length-0 examples
def test_an_empty_example_is_a_real_example():
    from matchbox.test_utils import mb_test
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4)
    xs = [torch.randn(1, n, 3) for n in (0, 2, 3)]
    b = MaskedBatch.fromlist(xs, (True, False))

    def loss(x):  # an empty sentence's logits are the bias
        return torch.nn.functional.cross_entropy(lin(x.sum(1)), torch.tensor([1]))

    mb_test(loss, b, params=list(lin.parameters()))
    want = sum(loss(x) for x in xs) / 3
    torch.testing.assert_close(matchbox.example_mean(loss(b)), want)
    mb_test(lambda x: x.prod(1) * 2 + x.sum(1), b)
    m = b.mean(1).padded_data
    assert torch.isnan(m[0]).all() and torch.isfinite(m[1:]).all()
    with pytest.raises(ValueError, match=r"max: examples \[0\] have length 0"):
        b.max(1)
    fp = MaskedBatch.from_padded(b.padded_data, torch.tensor([0, 2, 3]))
    assert [e.shape for e in fp.sum(1).examples()] == [(1, 3)] * 3


def test_an_empty_example_keeps_its_other_sizes():
    from matchbox.test_utils import mb_test
    xs = [torch.randn(1, a, c) for a, c in ((0, 2), (2, 3), (3, 1))]
    b = MaskedBatch.fromlist(xs, (True, True))
    assert [tuple(e.shape) for e in b.examples()] == [(1, 0, 2), (1, 2, 3), (1, 3, 1)]
    assert [tuple(e.shape) for e in b.sum(1).examples()] == [(1, 2), (1, 3), (1, 1)]
    mb_test(lambda x: x.sum(1) * 3, b)


# ------------------------------------------------------------------ item 11
def _nan_padded(lengths, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    pad = torch.randn(len(lengths), max(lengths), d, generator=g, dtype=torch.float64)
    for b, n in enumerate(lengths):
        pad[b, n:] = float("nan")
    return pad


@matchbox.batch
def _step_loop(x, w):
    acc = x[:, 0].sum(1) * 0
    for x_t in x.unbind(1):
        v = (x_t * w).sum(1)
        acc = acc + v
        if v > 0:
            acc = acc + torch.log(v)
    return acc


@pytest.mark.parametrize("lengths", [[3, 1, 4], [2, 2], [1]])
def test_nan_padding_from_from_padded_never_reaches_a_gradient(lengths):
    """NaN (or any garbage) in the padding of a Tensor handed to from_padded
    reached the gradient of a parameter through a loop over steps; padding
    now enters clean."""
    pad = _nan_padded(lengths)
    w = torch.randn(2, dtype=torch.float64, requires_grad=True)
    matchbox.example_sum(_step_loop(MaskedBatch.from_padded(pad, torch.tensor(lengths)), w)).backward()
    want = w.detach().clone().requires_grad_()
    sum(_step_loop(pad[b:b + 1, :n], want).sum() for b, n in enumerate(lengths)).backward()
    torch.testing.assert_close(w.grad, want.grad)

    xs = pad.clone().requires_grad_()
    y = torch.nn.functional.normalize(MaskedBatch.from_padded(xs, torch.tensor(lengths)), dim=1)
    matchbox.example_sum(y * torch.tensor([1.0, 2.0], dtype=torch.float64)).backward()
    for b, n in enumerate(lengths):
        one = pad[b:b + 1, :n].clone().requires_grad_()
        (torch.nn.functional.normalize(one, dim=1) * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum().backward()
        torch.testing.assert_close(xs.grad[b:b + 1, :n], one.grad)
        assert (xs.grad[b, n:] == 0).all()


@matchbox.batch
def _countdown(x):
    while x.sum() > 0:
        x = x - 1
    return x


def test_a_batch_of_no_examples_runs_a_while_loop():
    x = MaskedBatch(torch.zeros(0, 3), None, (False,))
    assert _countdown(x).batch_size == 0


# ------------------------------------------------------------------ issue 27 item 12: no examples
def _no_sentences(batch_first=True):
    """A batch of 0 token sentences, (1, n) each (or (n, 1) sequence-first)."""
    data = torch.zeros(0, 5, dtype=torch.long)
    return MaskedBatch.from_padded(data if batch_first else data.t(), torch.zeros(0, dtype=torch.long),
                                   batch_first=batch_first)


torch.manual_seed(0)
EMB = torch.nn.Embedding(7, 4)
NO_EXAMPLES = {
    "lstm_cross_entropy": lambda t: torch.nn.functional.cross_entropy(
        torch.nn.Linear(4, 7)(torch.nn.LSTM(4, 4, batch_first=True)(EMB(t))[0]).transpose(1, 2), t),
    "lstm_sequence_first_view": lambda t: torch.nn.functional.cross_entropy(
        torch.nn.LSTM(4, 7, num_layers=2, bidirectional=True)(EMB(t.t()))[0][..., :7].view(-1, 7),
        t.view(-1)),
    "gru_state": lambda t: torch.nn.GRU(4, 3, batch_first=True)(EMB(t))[1][-1],
    "nll_loss": lambda t: torch.nn.functional.nll_loss(EMB(t).log_softmax(-1).transpose(1, 2),
                                                       t.clamp(max=3), reduction="sum"),
    "multihead_attention": lambda t: torch.nn.MultiheadAttention(4, 2, batch_first=True)(
        EMB(t), EMB(t), EMB(t))[0],
    "transformer_layer": lambda t: torch.nn.TransformerEncoderLayer(4, 2, 8, batch_first=True)(EMB(t)),
    "batch_norm": lambda t: torch.nn.BatchNorm1d(4)(EMB(t).transpose(1, 2)),
    "positive_entries": lambda t: EMB(t)[EMB(t) > 0],
    "last_step_and_cat": lambda t: torch.cat([EMB(t)[:, -1].unsqueeze(1), EMB(t)], 1),
}


@pytest.mark.parametrize("name", NO_EXAMPLES)
def test_a_batch_of_no_examples_gives_the_empty_result(name):
    """nn.LSTM packed its 0 sequences ('Cannot pack empty tensors'), class
    losses, attention, x[:, -1] and cat reshaped with -1 over 0 entries."""
    out = NO_EXAMPLES[name](_no_sentences())
    assert out.batch_size == 0 and out.examples() == []
    if out.requires_grad:
        out.backward()
