"""Property tests: indexing a batch equals indexing each example, for random
shapes, lengths, negative indices and slices (values and gradients)."""
import torch
from hypothesis import given, settings, strategies as st

from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def batches(draw):
    """A float64 MaskedBatch with one dynamic dim at position 1 or 2."""
    B = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, 6), min_size=B, max_size=B))
    feat = draw(st.integers(1, 3))
    dyn_last = draw(st.booleans())
    seed = draw(st.integers(0, 2 ** 16))
    g = torch.Generator().manual_seed(seed)
    shape = (lambda n: (1, feat, n)) if dyn_last else (lambda n: (1, n, feat))
    xs = [torch.randn(shape(n), dtype=torch.float64, generator=g) for n in lengths]
    dims = (False, True) if dyn_last else (True, False)
    return MaskedBatch.fromlist(xs, dims), (2 if dyn_last else 1), lengths


bounds = st.one_of(st.none(), st.integers(-7, 7))


@SETTINGS
@given(batches(), bounds, bounds, st.integers(1, 3))
def test_slices_per_example(xb, start, stop, step):
    x, d, _ = xb
    sl = (slice(None),) * d + (slice(start, stop, step),)
    mb_test(lambda x: x[sl], x, dtype=torch.float64)


@SETTINGS
@given(batches(), st.data())
def test_int_index_per_example(xb, data):
    x, d, lengths = xb
    i = data.draw(st.integers(-min(lengths), min(lengths) - 1))
    mb_test(lambda x: x[(slice(None),) * d + (i,)], x, dtype=torch.float64)


@SETTINGS
@given(batches(), st.data())
def test_per_example_index_batch(xb, data):
    x, d, lengths = xb
    idx = [data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3)) for n in lengths]
    k = len(idx[0])
    idx = [(i * k)[:k] for i in idx]  # the same count per example (a static dim)
    ib = MaskedBatch.fromlist([torch.tensor([i]) for i in idx], (False,))
    mb_test(lambda x, i: x[(slice(None),) * d + (i,)], x, ib, dtype=torch.float64)


@SETTINGS
@given(batches(), st.integers(-3, 3), bounds, st.integers(1, 2))
def test_slice_then_index(xb, i, start, step):
    x, d, lengths = xb
    sl = (slice(None),) * d
    n = [len(range(*slice(start, None, step).indices(m))) for m in lengths]
    if not -min(n) <= i < min(n):
        i = 0 if min(n) else None
    if i is None:
        return
    mb_test(lambda x: x[sl + (slice(start, None, step),)][sl + (i,)], x, dtype=torch.float64)
