"""The general fallback (matchbox/ops/fallback.py): ops with no rule run per
example, through torch.func.vmap on static dims and once per example on
dynamic ones.  First the ops a new user met (issue 30), batched vs
per-example in values and gradients; then the fallback's own contract:
which way it runs, the warning, absent examples, dormant lanes, placements,
in-place forms and what it refuses."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.ops.fallback import recording
from matchbox.test_utils import mb_test

MODES = ("mixed", "one", "equal")
DYN = (3, (True, 5), (False, 3))
STATIC = (3, (False, 4), (False, 3))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", matchbox.PerExampleFallbackWarning)
        warnings.filterwarnings("ignore", "There is a performance drop")  # vmap's own loop
        yield


def _ways(f, *args):
    with recording() as log:
        f(*args)
    return {how for _, how in log}


# ------------------------------------------------------------------ the ops a new user met
@pytest.mark.parametrize("lengths", MODES)
def test_quantile(lengths):
    mb_test(lambda x: torch.quantile(x, 0.3, dim=1), DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: x.quantile(torch.tensor([0.2, 0.9], dtype=x.dtype), dim=-1), DYN,
            lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: x.quantile(0.5), STATIC, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_unfold(lengths):
    mb_test(lambda x: x.unfold(2, 2, 1), DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: x.unfold(1, 1, 1).sum(-1), DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: x.unfold(1, 2, 2), (3, (True, 6), (False, 2)), lengths="equal",
            dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_cdist(lengths):
    mb_test(lambda x, y: torch.cdist(x, y), DYN, (3, (True, 4), (False, 3)), lengths=lengths,
            dtype=torch.float64)
    mb_test(lambda x: torch.cdist(x, x.detach() + 1, p=1), STATIC, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_bucketize(lengths):
    edges = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    mb_test(lambda x: torch.bucketize(x, edges), DYN, lengths=lengths, dtype=torch.float64,
            grad=False)
    mb_test(lambda x: torch.bucketize(x, edges, right=True), STATIC, dtype=torch.float64,
            grad=False)


@pytest.mark.parametrize("lengths", MODES)
def test_linalg_norm(lengths):
    mb_test(lambda x: torch.linalg.norm(x), DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: torch.linalg.norm(x, dim=1), DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: torch.linalg.norm(x, ord="fro", dim=(1, 2)), STATIC, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_fft_rfft(lengths):
    mb_test(lambda x: torch.fft.rfft(x, dim=1), DYN, lengths=lengths, dtype=torch.float64,
            grad=False)
    mb_test(lambda x: torch.fft.rfft(x, dim=1).abs(), DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: torch.fft.irfft(torch.fft.rfft(x)), STATIC, dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_interpolate(lengths):
    spec = (3, (False, 2), (True, 5))  # (1, C, L) per example, L dynamic
    mb_test(lambda x: F.interpolate(x, scale_factor=2, mode="linear"), spec, lengths=lengths,
            dtype=torch.float64)
    mb_test(lambda x: F.interpolate(x, size=4), spec, lengths=lengths, dtype=torch.float64)
    mb_test(lambda x: F.interpolate(x.unsqueeze(1), scale_factor=2, mode="bilinear"),
            (3, (False, 3), (False, 4)), dtype=torch.float64)


@pytest.mark.parametrize("lengths", MODES)
def test_unique_consecutive(lengths):
    out = mb_test(lambda x: torch.unique_consecutive(x), (4, (True, 8)), lengths=lengths,
                  dtype=torch.long, batch_dim=None)
    assert out.batch_dim is None
    mb_test(lambda x: torch.unique_consecutive(x, return_counts=True), (4, (False, 8)),
            dtype=torch.long, batch_dim=None)


@pytest.mark.parametrize("lengths", MODES)
def test_bincount(lengths):
    mb_test(lambda x: torch.bincount(x), (4, (True, 8)), lengths=lengths, dtype=torch.long,
            batch_dim=None)
    mb_test(lambda x, w: torch.bincount(x, w.abs(), minlength=6), (4, (True, 8)), (4, (True, 8)),
            lengths=lengths, dtype=torch.long, batch_dim=None, grad=False)


@pytest.mark.parametrize("lengths", MODES)
def test_margin_ranking_loss(lengths):
    def f(a, b, t):
        return F.margin_ranking_loss(a, b, t.sign(), margin=0.1)
    mb_test(f, DYN, DYN, DYN, lengths=lengths, dtype=torch.float64)
    mb_test(lambda a, b, t: F.margin_ranking_loss(a, b, t.sign(), reduction="none"),
            STATIC, STATIC, STATIC, dtype=torch.float64)


def test_multinomial_with_a_generator_draws_what_a_loop_draws():
    """Given a generator, the examples draw from it in order: one call on
    the batch draws exactly the numbers a loop over the examples draws."""
    probs = [torch.rand(1, n) + 0.1 for n in (3, 6, 1, 4)]
    for dims in ((True,), None):
        if dims is None:
            probs = [torch.rand(1, 5) for _ in range(3)]
        batch = MaskedBatch.fromlist(probs, dims)
        got = torch.multinomial(batch, 2, replacement=True,
                                generator=torch.Generator().manual_seed(7))
        g = torch.Generator().manual_seed(7)
        want = [torch.multinomial(p, 2, replacement=True, generator=g) for p in probs]
        for e, w in zip(got.examples(), want):
            assert torch.equal(e, w)


def test_multinomial_draws_each_example_from_its_own_distribution():
    """Without a generator each example draws on its own: never a category
    it gives no weight, nor one past its own length; every category it
    weighs is drawn."""
    probs = [torch.tensor([[0.0, 1.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0, 0.0, 1.0]]),
             torch.tensor([[1.0]])]
    batch = MaskedBatch.fromlist(probs, (True,))
    for x in (batch, MaskedBatch.fromlist([torch.tensor([[0.0, 1.0, 1.0]])] * 3)):
        draws = torch.multinomial(x, 200, replacement=True)
        for p, d in zip(x.examples(), draws.examples()):
            assert d.shape == (1, 200)
            assert set(d.unique().tolist()) == set(p[0].nonzero().flatten().tolist())


def test_arange_of_a_per_example_end_under_batch():
    """``torch.arange(n)`` of a per-example size ``n`` (under @batch) is
    each example's own range: a dynamic dim; a plain int end stays one
    Tensor every example shares."""
    @matchbox.batch
    def f(x):
        n = x.size(1)
        steps = torch.arange(n, dtype=x.dtype)
        evens = torch.arange(0, n, 2)
        return (x[0, :, 0] * steps).sum() + evens.sum() + torch.arange(3).sum() * x[0, 0, 0]

    for lengths in MODES:
        mb_test(f, DYN, lengths=lengths, dtype=torch.float64)


# ------------------------------------------------------------------ the fallback's contract
def test_static_dims_run_through_vmap_and_dynamic_ones_per_example():
    static = MaskedBatch.fromlist([torch.randn(1, 4, 3) for _ in range(3)])
    ragged = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4, 1)], (True, False))
    equal = MaskedBatch.fromlist([torch.randn(1, 4, 3) for _ in range(3)], (True, False))
    assert _ways(torch.special.erfcx, static) == {"vmap"}
    assert _ways(torch.special.erfcx, ragged) == {"per-example"}
    assert _ways(torch.special.erfcx, equal) == {"vmap"}  # every example the same size
    assert _ways(torch.unique_consecutive, static) == {"per-example"}  # sizes depend on values
    assert _ways(torch.tanh, ragged) == set()  # an op with a rule


def test_the_per_example_loop_warns_once_per_op():
    ragged = MaskedBatch.fromlist([torch.randn(1, n) for n in (2, 4)], (True,))
    static = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            torch.special.erfcx(ragged)
            torch.special.i1(ragged)
            torch.special.i0e(static)  # vmap: no warning
    hits = [str(w.message) for w in caught if w.category is matchbox.PerExampleFallbackWarning]
    assert len(hits) == 2 and "torch.special.erfcx" in hits[0] and "torch.special.i1" in hits[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=matchbox.PerExampleFallbackWarning)
        torch.special.erfcx(ragged)
    assert not [w for w in caught if w.category is matchbox.PerExampleFallbackWarning]


@pytest.mark.parametrize("batch_dim", [0, 1, None])
@pytest.mark.parametrize("lengths", MODES)
def test_every_placement_of_the_batch_of_one_dim(batch_dim, lengths):
    mb_test(lambda x: torch.special.erfcx(x) * x.cumsum(-1).logcumsumexp(-1), DYN,
            lengths=lengths, dtype=torch.float64, batch_dim=batch_dim)
    out = mb_test(lambda x: torch.linalg.norm(x, dim=-1, keepdim=True), DYN, lengths=lengths,
                  dtype=torch.float64, batch_dim=batch_dim)
    assert out.batch_dim == batch_dim


def test_examples_that_hold_no_value_stay_without_one():
    """The padded step 2 (``list(x.unbind(1))[2]``) holds no value for an
    example shorter than 3: the op does not run there, and its result holds
    none either."""
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 1, 4)]
    step = list(MaskedBatch.fromlist(xs, (True, False)).unbind(1))[2]
    for f in (torch.special.erfcx, lambda t: torch.linalg.norm(t, dim=-1, keepdim=True),
              lambda t: t.unfold(1, 2, 1)):
        out = f(step)
        with pytest.raises(ValueError, match=r"examples \[1\] of this batch hold no value"):
            out.examples()
        for b in (0, 2):
            assert torch.equal(out.padded_data[b:b + 1], f(xs[b][:, 2]))


def test_dormant_lanes_are_not_run():
    """Under @batch the op runs in the active lanes only: cholesky of the
    examples that take the branch (in the others the matrix is not
    positive-definite, and cholesky would raise there)."""
    @matchbox.batch
    def f(a):
        if a[0, 0, 0] > 0:
            y = torch.linalg.cholesky(a)
        else:
            y = a * 2
        return y

    eye = torch.eye(3, dtype=torch.float64)
    xs = [(eye * 2 + 0.1).unsqueeze(0), -(eye + 1).unsqueeze(0), (eye * 3).unsqueeze(0)]
    batch = MaskedBatch.fromlist(xs)
    for got, x in zip(f(batch).examples(), xs):
        want = torch.linalg.cholesky(x) if x[0, 0, 0] > 0 else x * 2
        assert torch.allclose(got, want)


def test_gradients_flow_per_example_through_both_ways():
    for dims in ((False, False), (True, False)):
        mb_test(lambda x: torch.special.erfcx(x).sum(1), (3, (dims[0], 4), (False, 2)),
                lengths="mixed", dtype=torch.float64)


def test_an_in_place_method_without_a_rule_writes_into_the_batch():
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (2, 4, 1)]
    x = MaskedBatch.fromlist(xs, (True, False))
    y = x.clone()
    assert y.renorm_(2, 1, 0.5) is y
    for got, xe in zip(y.examples(), xs):
        assert torch.allclose(got, xe.renorm(2, 1, 0.5))


@pytest.mark.parametrize("call, why", [
    (lambda x: x.stride(), "Python value"),
    (lambda x: torch.equal(x, x), "Python value"),
    (lambda x: x.is_contiguous(), "Python value"),
    (lambda x: x.register_hook(lambda g: g), "autograd or memory"),
    (lambda x: x.as_strided((1, 2), (2, 1)), "autograd or memory"),
    (lambda x: torch.batch_norm(x, None, None, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5,
                                False), "whole batch"),
    (lambda x: x.to_sparse(), "sparse"),
])
def test_what_the_fallback_refuses_raises_naming_the_op(call, why):
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3, requires_grad=True) for _ in range(2)])
    with pytest.raises(NotImplementedError, match=why):
        call(x)


def test_hasattr_answers_false_for_what_is_refused():
    x = MaskedBatch.fromlist([torch.randn(1, 2) for _ in range(2)])
    assert not hasattr(x, "data_ptr") and not hasattr(x, "is_contiguous")
    assert hasattr(x, "quantile") and hasattr(x, "renorm_")


def test_a_per_example_count_of_results_is_refused():
    """Results of different structures (here tensor_split into as many
    pieces as an example's first value says) cannot be one batch."""
    xs = [torch.tensor([[1.0, 5.0]]), torch.tensor([[2.0, 5.0]])]
    x = MaskedBatch.fromlist(xs)
    with pytest.raises(NotImplementedError, match="different structures"):
        torch.tensor_split(x, x[0, 0].long(), dim=1)
