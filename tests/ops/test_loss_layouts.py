"""Class losses on examples laid out otherwise than ``(1, C, ...)``: with no
batch-of-one dimension (``(C,)``, ``(N, C)``, ``(N, C, d)``, the
``torch.func.vmap`` convention, as in ``F.cross_entropy(logits, probs)`` on
one example), or a target read from a value labelled otherwise.  Values and
gradients per example via mb_test, every reduction."""
import pytest
import torch
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

LENGTHS = {"mixed": [1, 4, 2, 3], "one": [1, 1, 1], "equal": [3, 3, 3]}
DT = torch.float64
C = 5


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# per example, no batch-of-one dim: input shape given length n, its dims
# (dynamic or not), and the class dim torch reads (0 for (C,), else 1)
UNBATCHED = {
    "C": (lambda n: (C,), (False,), 0),
    "NC": (lambda n: (n, C), (True, False), 1),
    "NC_static": (lambda n: (3, C), (False, False), 1),
    "NCd": (lambda n: (n, C, 2), (True, False, False), 1),
    "NCn": (lambda n: (2, C, n), (False, False, True), 1),
}
OPTIONS = {
    "plain": {},
    "weight": {"weight": torch.rand(C, generator=_gen(7), dtype=DT) + 0.1},
    "smooth": {"label_smoothing": 0.2},
    "weight_smooth": {"weight": torch.rand(C, generator=_gen(8), dtype=DT) + 0.1,
                      "label_smoothing": 0.1},
}


@pytest.mark.usefixtures("row_strategy")
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("target", ["probs", "indices"])
@pytest.mark.parametrize("layout", UNBATCHED)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_cross_entropy_without_batch_of_one_dim(lengths, layout, target, option, reduction):
    """``F.cross_entropy(logits, target)`` per example with logits ``(C,)``,
    ``(N, C)`` or ``(N, C, d)`` and a probability target of the same shape
    (or class indices without the class dim): before, probability targets
    of ``(N, C)`` examples crashed inside torch (issue 30) and ``(N, C, d)``
    examples were refused."""
    shape, dims, cdim = UNBATCHED[layout]
    g = _gen(1)
    ns = LENGTHS[lengths]
    xs = [torch.randn(shape(n), generator=g, dtype=DT) for n in ns]
    if target == "probs":
        ts = [torch.softmax(torch.randn(shape(n), generator=g, dtype=DT), cdim) for n in ns]
        tdims = dims
    else:
        ts = [torch.randint(0, C, shape(n)[:cdim] + shape(n)[cdim + 1:], generator=g) for n in ns]
        tdims = dims[:cdim] + dims[cdim + 1:]
    opts = OPTIONS[option]
    out = mb_test(lambda x, t: F.cross_entropy(x, t, reduction=reduction, **opts),
                  MaskedBatch.fromlist(xs, dims, None), MaskedBatch.fromlist(ts, tdims, None),
                  dtype=DT)
    if reduction == "none":
        assert out.examples()[0].shape == F.cross_entropy(xs[0], ts[0], reduction="none").shape


@pytest.mark.parametrize("lengths", LENGTHS)
def test_nll_loss_without_batch_of_one_dim(lengths):
    """nll_loss shares cross_entropy's layouts: ``(N, C, d)`` log-probabilities
    with an ``(N, d)`` target, N dynamic."""
    g = _gen(2)
    ns = LENGTHS[lengths]
    xs = [torch.randn(n, C, 2, generator=g, dtype=DT) for n in ns]
    ts = [torch.randint(0, C, (n, 2), generator=g) for n in ns]
    mb_test(lambda x, t: F.nll_loss(x.log_softmax(1), t),
            MaskedBatch.fromlist(xs, (True, False, False), None),
            MaskedBatch.fromlist(ts, (True, False), None), dtype=DT)


# ------------------------------------------------------------------ a target labelled otherwise
@pytest.mark.parametrize("lengths", list(LENGTHS))
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_target_with_no_batch_of_one_dim(loss, lengths):
    """A (1, C) input and a (1,) target read as tags[0] of a (1, 1) tag: per
    example torch takes it (issue 27 item 11); before, the batch refused
    the target's rank."""
    g = _gen(3)
    xs = [torch.randn(1, C, dtype=DT, generator=g) for _ in LENGTHS[lengths]]
    tags = MaskedBatch.fromlist([torch.randint(0, C, (1, 1), generator=g) for _ in xs])
    fn = getattr(F, loss)
    mb_test(lambda x, t: fn(x.log_softmax(1) if loss == "nll_loss" else x, t[0]),
            MaskedBatch.fromlist(xs), tags, dtype=DT)
