"""Losses: every reduction per example via mb_test (values and gradients):
'none' one loss per position, 'mean'/'sum' (and kl_div's 'batchmean') one
value per example, as the same call on that example alone.  The batch
objectives (example_sum, example_mean, token_mean, MaskedBatch.backward)
against the hand-written padded formulas.  Losses accumulated in @batch
step loops: tests/ops/test_loss_loops.py."""
import pytest
import torch
import torch.nn.functional as F

import matchbox.functional as MF
from matchbox import MaskedBatch, example_mean, example_sum, token_mean
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test

LENGTHS = {"mixed": [1, 4, 2, 3], "one": [1, 1, 1], "equal": [3, 3, 3]}
DT = torch.float64
C = 5


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ builders
# layout -> (input shape per example given length n, dims, target shape, target dims)
LAYOUTS = {
    "class": (lambda n: (1, C), (False,), lambda n: (1,), ()),
    "seq": (lambda n: (1, C, n), (False, True), lambda n: (1, n), (True,)),
    "seq_static": (lambda n: (1, C, 3), (False, False), lambda n: (1, 3), (False,)),
    "grid": (lambda n: (1, C, n, 5 - n), (False, True, True), lambda n: (1, n, 5 - n), (True, True)),
}


def _class_examples(layout, lengths, seed=0, ignore_index=None, probs=False):
    g = _gen(seed)
    xshape, xdims, tshape, tdims = LAYOUTS[layout]
    xs = [torch.randn(xshape(n), generator=g, dtype=DT) for n in lengths]
    if probs:
        ts = [torch.softmax(torch.randn(xshape(n), generator=g, dtype=DT), 1) for n in lengths]
        return xs, xdims, ts, xdims
    ts = [torch.randint(0, C, tshape(n), generator=g) for n in lengths]
    if ignore_index is not None:
        for t in ts:
            flat = t.view(-1)
            flat[torch.rand(flat.shape, generator=g) < 0.3] = ignore_index
    return xs, xdims, ts, tdims


def _flat_logits(x):
    return x.movedim(1, -1).reshape(-1, x.size(1))


def _check_reduced(fn, args, dims, reduction):
    """``fn`` with ``reduction`` on MaskedBatches of the per-example tensor
    lists ``args`` equals it on each example alone (values and gradients);
    'mean'/'sum'/'batchmean' give one 0-dim value per example."""
    out = mb_test(fn, *[MaskedBatch.fromlist(a, d) for a, d in zip(args, dims)], dtype=DT)
    if reduction != "none":
        assert isinstance(out, MaskedBatch) and out.dims == () and out.padded_data.shape == (len(args[0]),)
        assert all(fn(*ex).dim() == 0 for ex in zip(*args))
    return out


CE_OPTIONS = {
    "plain": {},
    "weight": {"weight": torch.rand(C, generator=_gen(7), dtype=DT) + 0.1},
    "ignore": {"ignore_index": 2},
    "ignore_default": {"ignore_index": -100},
    "smooth": {"label_smoothing": 0.2},
    "weight_smooth_ignore": {"weight": torch.rand(C, generator=_gen(8), dtype=DT) + 0.1,
                             "label_smoothing": 0.1, "ignore_index": -100},
}


def _ignore_of(opts):
    return opts.get("ignore_index") if "ignore_index" in opts else None


@pytest.mark.usefixtures("row_strategy")
# ------------------------------------------------------------------ cross_entropy
@pytest.mark.parametrize("option", CE_OPTIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_cross_entropy_none(lengths, layout, option):
    opts = CE_OPTIONS[option]
    xs, xd, ts, td = _class_examples(layout, LENGTHS[lengths], ignore_index=_ignore_of(opts))
    out = mb_test(lambda x, t: F.cross_entropy(x, t, reduction="none", **opts),
                  MaskedBatch.fromlist(xs, xd), MaskedBatch.fromlist(ts, td), dtype=DT)
    assert isinstance(out, MaskedBatch) and out.dims == td


@pytest.mark.usefixtures("row_strategy")
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("option", CE_OPTIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_cross_entropy_reduced_per_example(lengths, layout, option, reduction):
    opts = CE_OPTIONS[option]
    xs, xd, ts, td = _class_examples(layout, LENGTHS[lengths], ignore_index=_ignore_of(opts))
    _check_reduced(lambda x, t: F.cross_entropy(x, t, reduction=reduction, **opts),
                   [xs, ts], [xd, td], reduction)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("option", ["plain", "weight", "smooth"])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_cross_entropy_probability_targets(lengths, option, reduction):
    opts = {k: v for k, v in CE_OPTIONS[option].items() if k != "ignore_index"}
    xs, xd, ps, pd = _class_examples("seq", LENGTHS[lengths], probs=True)
    _check_reduced(lambda x, p: F.cross_entropy(x, p, reduction=reduction, **opts),
                   [xs, ps], [xd, pd], reduction)


def test_cross_entropy_default_is_each_examples_mean():
    xs, xd, ts, td = _class_examples("seq", [2, 5, 1])
    out = F.cross_entropy(MaskedBatch.fromlist(xs, xd), MaskedBatch.fromlist(ts, td))
    assert isinstance(out, MaskedBatch) and out.dims == ()
    torch.testing.assert_close(out.padded_data, torch.stack([F.cross_entropy(x, t) for x, t in zip(xs, ts)]))


@pytest.mark.usefixtures("row_strategy")
def test_cross_entropy_plain_target_tensor_is_shared():
    """A plain Tensor target is shared by every example (SPEC section 3):
    a (1,) label is every example's label; a (B,) Tensor is never read as
    one label per example just because its size is B (issue 18, item 3)."""
    xs, xd, ts, td = _class_examples("class", [1, 1, 1, 1])
    xb = MaskedBatch.fromlist(xs, xd)
    shared = ts[0]
    torch.testing.assert_close(torch.cat(F.cross_entropy(xb, shared, reduction="none").examples()),
                               torch.cat([F.cross_entropy(x, shared, reduction="none") for x in xs]))
    with pytest.raises(ValueError, match=r"plain Tensor of shape \(4,\); a plain Tensor is shared"):
        F.cross_entropy(xb, torch.cat(ts))


def test_cross_entropy_legacy_size_average():
    xs, xd, ts, td = _class_examples("seq", [2, 3])
    out = F.cross_entropy(MaskedBatch.fromlist(xs, xd), MaskedBatch.fromlist(ts, td), size_average=False)
    want = [F.cross_entropy(x, t, reduction="sum") for x, t in zip(xs, ts)]
    torch.testing.assert_close(out.padded_data, torch.stack(want))


@pytest.mark.usefixtures("row_strategy")
def test_cross_entropy_nan_padding_and_garbage_targets():
    lengths = [1, 4, 2]
    xs, xd, ts, td = _class_examples("seq", lengths)
    xb = MaskedBatch.fromlist(xs, xd)
    tb = MaskedBatch.fromlist(ts, td)
    xdata = xb.padded_data.clone()
    xdata[~xb.mask.expand_as(xdata)] = float("nan")
    tdata = tb.padded_data.clone()
    tdata[~tb.mask] = 10 ** 6
    x = MaskedBatch(xdata.requires_grad_(), xb.mask, xd)
    t = MaskedBatch(tdata, tb.mask, td)
    for reduction in ("mean", "sum"):
        loss = F.cross_entropy(x, t, reduction=reduction, label_smoothing=0.1)
        want = [F.cross_entropy(e, f, reduction=reduction, label_smoothing=0.1) for e, f in zip(xs, ts)]
        torch.testing.assert_close(loss.padded_data, torch.stack(want))
        x.padded_data.grad = None
        loss.backward()
        g = x.padded_data.grad
        assert torch.isfinite(g).all()
        assert (g[~xb.mask.expand_as(g)] == 0).all()
    out = F.cross_entropy(x, t, reduction="none")
    for e, xe, te in zip(out.examples(), xs, ts):
        torch.testing.assert_close(e, F.cross_entropy(xe, te, reduction="none"))


@pytest.mark.usefixtures("row_strategy")
def test_cross_entropy_dormant_lanes_excluded():
    xs, xd, ts, td = _class_examples("class", [1, 1, 1])
    xb, tb = MaskedBatch.fromlist(xs, xd), MaskedBatch.fromlist(ts, td)
    tb.padded_data[1] = 99  # dormant lane: garbage must not raise
    xb.padded_data.requires_grad_()
    with lanes(torch.tensor([True, False, True])):
        loss = F.cross_entropy(xb, tb)
    want = [F.cross_entropy(xs[j], ts[j]) for j in (0, 2)]
    torch.testing.assert_close(loss.padded_data[[0, 2]], torch.stack(want))
    assert torch.isfinite(loss.padded_data).all()
    loss.backward()
    assert (xb.padded_data.grad[1] == 0).all()  # a dormant lane gets no gradient


def test_cross_entropy_errors():
    xs, xd, ts, td = _class_examples("seq", [2, 3])
    xb, tb = MaskedBatch.fromlist(xs, xd), MaskedBatch.fromlist(ts, td)
    # class dimension dynamic (the (1, n, C) layout)
    xt = MaskedBatch.fromlist([x.transpose(1, 2).contiguous() for x in xs], (True, False))
    with pytest.raises(ValueError, match="class dimension"):
        F.cross_entropy(xt, tb)
    # lengths differ
    t2 = MaskedBatch.fromlist([torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)], (True,))
    with pytest.raises(ValueError, match="per-example sizes differ"):
        F.cross_entropy(xb, t2)
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(xb, tb, reduction="avg")
    bad = MaskedBatch.fromlist([torch.tensor([[7, 0]]), torch.tensor([[1, 2, 3]])], (True,))
    with pytest.raises((IndexError, RuntimeError)):
        F.cross_entropy(xb, bad)
    with pytest.raises(ValueError, match="one dimension fewer"):
        F.cross_entropy(xb, MaskedBatch.fromlist([t.unsqueeze(1) for t in ts], (False, True)))


# ------------------------------------------------------------------ nll_loss
NLL_OPTIONS = {k: v for k, v in CE_OPTIONS.items() if "label_smoothing" not in v}


@pytest.mark.usefixtures("row_strategy")
@pytest.mark.parametrize("option", NLL_OPTIONS)
@pytest.mark.parametrize("layout", ["class", "seq", "grid"])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_nll_loss(lengths, layout, option):
    opts = NLL_OPTIONS[option]
    xs, xd, ts, td = _class_examples(layout, LENGTHS[lengths], ignore_index=_ignore_of(opts))
    out = mb_test(lambda x, t: F.nll_loss(x, t, reduction="none", **opts),
                  MaskedBatch.fromlist(xs, xd), MaskedBatch.fromlist(ts, td), dtype=DT)
    assert out.dims == td
    for reduction in ("mean", "sum"):
        _check_reduced(lambda x, t: F.nll_loss(x, t, reduction=reduction, **opts),
                       [xs, ts], [xd, td], reduction)


# ------------------------------------------------------------------ elementwise losses
def _sig(x):
    return torch.sigmoid(x)


# name -> (fn(input, target, reduction), input transform for concat ref, target maker)
ELEMENTWISE = {
    "mse": lambda x, t, r: F.mse_loss(x, t, reduction=r),
    "l1": lambda x, t, r: F.l1_loss(x, t, reduction=r),
    "smooth_l1": lambda x, t, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.5),
    "huber": lambda x, t, r: F.huber_loss(x, t, reduction=r, delta=0.7),
    "bce_logits": lambda x, t, r: F.binary_cross_entropy_with_logits(x, t.abs().clamp(max=1.0), reduction=r),
    "bce_logits_pos_weight": lambda x, t, r: F.binary_cross_entropy_with_logits(
        x, t.abs().clamp(max=1.0), reduction=r, pos_weight=torch.tensor([1.0, 2.0, 0.5], dtype=DT)),
    "bce": lambda x, t, r: F.binary_cross_entropy(torch.sigmoid(x), t.abs().clamp(max=1.0), reduction=r),
    "kl_div": lambda x, t, r: F.kl_div(x, t.abs() + 0.1, reduction=r),
    "kl_div_log_target": lambda x, t, r: F.kl_div(x, t, reduction=r, log_target=True),
}
EW_SPECS = {
    "dynamic": (4, (True, 5), (False, 3)),
    "static": (3, (False, 2), (False, 3)),
    "two_dynamic": (3, (True, 4), (True, 3), (False, 3)),
}


def _ew_examples(spec, lengths, seed=0):
    g = _gen(seed)
    B, dims = spec[0], spec[1:]
    lens = {}
    shapes = []
    for b in range(B):
        shape = [1]
        for dyn, size in dims:
            if dyn:
                ls = lens.setdefault(size, ([1] * B if lengths == "one" else [size] * B if lengths == "equal"
                                            else [1 + (b * 7 + size) % size for b in range(B)]))
                if lengths == "mixed":
                    ls[0], ls[-1] = 1, size
                shape.append(ls[b])
            else:
                shape.append(size)
        shapes.append(shape)
    xs = [torch.randn(s, generator=g, dtype=DT) for s in shapes]
    ts = [torch.randn(s, generator=g, dtype=DT) for s in shapes]
    return xs, ts, tuple(d for d, _ in dims)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", EW_SPECS)
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_none(name, spec, lengths):
    f = ELEMENTWISE[name]
    out = mb_test(lambda x, t: f(x, t, "none"), EW_SPECS[spec], EW_SPECS[spec], lengths=lengths, dtype=DT)
    assert out.dims == tuple(d for d, _ in EW_SPECS[spec][1:])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", EW_SPECS)
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_reduced_per_example(name, spec, lengths, reduction):
    f = ELEMENTWISE[name]
    xs, ts, dims = _ew_examples(EW_SPECS[spec], lengths)
    _check_reduced(lambda x, t: f(x, t, reduction), [xs, ts], [dims, dims], reduction)


@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_kl_div_batchmean(lengths, log_target):
    xs, ts, dims = _ew_examples(EW_SPECS["dynamic"], lengths)
    ts = ts if log_target else [t.abs() + 0.1 for t in ts]
    _check_reduced(lambda x, t: F.kl_div(x, t, reduction="batchmean", log_target=log_target),
                   [xs, ts], [dims, dims], "batchmean")


@pytest.mark.parametrize("name", ["mse", "l1", "huber"])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_weighted_elementwise(name, lengths):
    fn = {"mse": F.mse_loss, "l1": MF.l1_loss, "huber": F.huber_loss}[name]
    xs, ts, dims = _ew_examples(EW_SPECS["dynamic"], lengths)
    ws = [t.abs() + 0.1 for t in _ew_examples(EW_SPECS["dynamic"], lengths, seed=3)[1]]
    mb_test(lambda x, t, w: fn(x, t, reduction="none", weight=w), MaskedBatch.fromlist(xs, dims),
            MaskedBatch.fromlist(ts, dims), MaskedBatch.fromlist(ws, dims), dtype=DT)
    for reduction in ("mean", "sum"):
        _check_reduced(lambda x, t, w: fn(x, t, reduction=reduction, weight=w),
                       [xs, ts, ws], [dims, dims, dims], reduction)


def test_l1_weight_given_to_torchs_l1_loss_is_refused():
    """torch.nn.functional.l1_loss does not pass weight on to MaskedBatch's
    dispatch; matchbox.functional.l1_loss does."""
    xs, ts, dims = _ew_examples(EW_SPECS["dynamic"], "mixed")
    x, t = MaskedBatch.fromlist(xs, dims), MaskedBatch.fromlist(ts, dims)
    with pytest.raises(NotImplementedError, match="matchbox.functional.l1_loss"):
        F.l1_loss(x, t, weight=t.abs())
    F.l1_loss(x, t)   # no weight: as ever


def test_bce_with_weight_tensor():
    xs, ts, dims = _ew_examples(EW_SPECS["dynamic"], "mixed")
    ts = [t.abs().clamp(max=1) for t in ts]
    w = torch.tensor([0.5, 1.0, 2.0], dtype=DT)
    _check_reduced(lambda x, t: F.binary_cross_entropy_with_logits(x, t, weight=w),
                   [xs, ts], [dims, dims], "mean")


def test_mse_nan_padding():
    xs, ts, dims = _ew_examples(EW_SPECS["dynamic"], "mixed")
    xb, tb = MaskedBatch.fromlist(xs, dims), MaskedBatch.fromlist(ts, dims)
    xdata = xb.padded_data.clone()
    xdata[~xb.mask.expand_as(xdata)] = float("nan")
    tdata = tb.padded_data.clone()
    tdata[~tb.mask.expand_as(tdata)] = float("inf")
    x = MaskedBatch(xdata.requires_grad_(), xb.mask, dims)
    t = MaskedBatch(tdata, tb.mask, dims)
    for fn in (F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.binary_cross_entropy_with_logits):
        tt = t if fn is not F.binary_cross_entropy_with_logits else MaskedBatch(tdata.abs().clamp(max=1), tb.mask, dims)
        loss = fn(x, tt)
        assert torch.isfinite(loss.padded_data).all()
        x.padded_data.grad = None
        loss.backward()
        assert torch.isfinite(x.padded_data.grad).all()
        assert (x.padded_data.grad[~xb.mask.expand_as(xdata)] == 0).all()


def test_bce_none_with_garbage_padding_does_not_raise():
    xs = [torch.rand(1, n, dtype=DT) for n in (1, 3)]
    ts = [torch.rand(1, n, dtype=DT) for n in (1, 3)]
    xb = MaskedBatch.fromlist(xs, (True,))
    xdata = xb.padded_data.clone()
    xdata[~xb.mask] = 7.0  # outside [0, 1]: torch would refuse it
    x = MaskedBatch(xdata, xb.mask, (True,))
    out = F.binary_cross_entropy(x, MaskedBatch.fromlist(ts, (True,)), reduction="none")
    for e, xe, te in zip(out.examples(), xs, ts):
        torch.testing.assert_close(e, F.binary_cross_entropy(xe, te, reduction="none"))


def test_elementwise_errors():
    xs, ts, dims = _ew_examples(EW_SPECS["dynamic"], "mixed")
    xb, tb = MaskedBatch.fromlist(xs, dims), MaskedBatch.fromlist(ts, dims)
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(xb, tb, reduction="batchmean")
    with pytest.raises(ValueError, match="weight"):
        F.mse_loss(xb, tb, weight=torch.ones(1, 5, 3))


# ------------------------------------------------------------------ combining examples
def _seq_batch(lengths=(1, 4, 2, 3), seed=0):
    xs, xd, ts, td = _class_examples("seq", list(lengths), seed=seed)
    leaves = [x.clone().requires_grad_() for x in xs]
    return leaves, MaskedBatch.fromlist(leaves, xd), ts, MaskedBatch.fromlist(ts, td)


def _padded_reference(xs, ts):
    """What hand-written padded code computes: per-token losses (B, T) and
    the real mask."""
    T = max(t.size(1) for t in ts)
    logits = torch.cat([F.pad(x, (0, T - x.size(2))) for x in xs])
    tags = torch.cat([F.pad(t, (0, T - t.size(1))) for t in ts])
    real = torch.arange(T)[None] < torch.tensor([t.size(1) for t in ts])[:, None]
    return F.cross_entropy(logits, tags, reduction="none"), real


def _grads_equal(fn_batched, fn_ref, lengths=(1, 4, 2, 3)):
    xs, xb, ts, tb = _seq_batch(lengths)
    ref = [x.detach().clone().requires_grad_() for x in xs]
    got, want = fn_batched(xb, tb), fn_ref(ref, ts)
    assert isinstance(got, torch.Tensor) and got.dim() == 0
    torch.testing.assert_close(got, want)
    got.backward()
    want.backward()
    for a, b in zip(xs, ref):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("lengths", [(1, 4, 2, 3), (3, 3, 3), (1,)])
def test_backward_sums_over_examples(lengths):
    """loss.backward() on per-example losses == a loop over examples that
    calls backward() on each."""
    for reduction in ("mean", "sum", "none"):
        xs, xb, ts, tb = _seq_batch(lengths)
        F.cross_entropy(xb, tb, reduction=reduction).backward()
        ref = [x.detach().clone().requires_grad_() for x in xs]
        for x, t in zip(ref, ts):
            F.cross_entropy(x, t, reduction=reduction).sum().backward()
        for a, b in zip(xs, ref):
            torch.testing.assert_close(a.grad, b.grad)


def test_backward_with_gradient_argument():
    xs, xb, ts, tb = _seq_batch()
    loss = F.cross_entropy(xb, tb, reduction="none")
    g = MaskedBatch.fromlist([torch.full(t.shape, float(j + 1), dtype=DT) for j, t in enumerate(ts)], (True,))
    loss.backward(g)
    for j, (x, t) in enumerate(zip(xs, ts)):
        r = x.detach().clone().requires_grad_()
        (F.cross_entropy(r, t, reduction="none") * (j + 1)).sum().backward()
        torch.testing.assert_close(x.grad, r.grad)
    xs, xb, ts, tb = _seq_batch()
    F.cross_entropy(xb, tb).backward(torch.tensor(2.0, dtype=DT))  # a shared weight
    for x, t in zip(xs, ts):
        r = x.detach().clone().requires_grad_()
        (2 * F.cross_entropy(r, t)).backward()
        torch.testing.assert_close(x.grad, r.grad)


def test_example_sum_and_mean():
    _grads_equal(lambda x, t: example_sum(F.cross_entropy(x, t, reduction="sum")),
                 lambda xs, ts: sum(F.cross_entropy(x, t, reduction="sum") for x, t in zip(xs, ts)))
    _grads_equal(lambda x, t: example_mean(F.cross_entropy(x, t)),
                 lambda xs, ts: sum(F.cross_entropy(x, t) for x, t in zip(xs, ts)) / len(xs))
    # per-token losses: each example's real entries are summed first
    _grads_equal(lambda x, t: example_mean(F.cross_entropy(x, t, reduction="none")),
                 lambda xs, ts: sum(F.cross_entropy(x, t, reduction="sum") for x, t in zip(xs, ts)) / len(xs))


def test_token_mean_is_the_hand_written_padded_mean():
    def hand(xs, ts):
        loss, real = _padded_reference(xs, ts)
        return loss.masked_fill(~real, 0).sum() / real.sum()
    _grads_equal(lambda x, t: token_mean(F.cross_entropy(x, t, reduction="none")), hand)
    # per-example sums plus each example's number of tokens
    _grads_equal(lambda x, t: token_mean(F.cross_entropy(x, t, reduction="sum"), t.size_as_tensor(1)), hand)
    _grads_equal(lambda x, t: token_mean(F.cross_entropy(x, t, reduction="sum"),
                                         torch.tensor([1, 4, 2, 3])), hand)


def test_combining_helpers_on_one_plain_example():
    """The same training code runs on a plain Tensor holding one example."""
    xs, _, ts, _ = _seq_batch((3,))
    x, t = xs[0], ts[0]
    torch.testing.assert_close(example_sum(F.cross_entropy(x, t, reduction="sum")),
                               F.cross_entropy(x, t, reduction="sum"))
    torch.testing.assert_close(example_mean(F.cross_entropy(x, t)), F.cross_entropy(x, t))
    torch.testing.assert_close(token_mean(F.cross_entropy(x, t, reduction="none")), F.cross_entropy(x, t))
    torch.testing.assert_close(token_mean(F.cross_entropy(x, t, reduction="sum"), 3), F.cross_entropy(x, t))
    with pytest.raises(TypeError, match="MaskedBatch or Tensor"):
        example_mean([1.0])

