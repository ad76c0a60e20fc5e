"""softmax / log_softmax: normalised over real entries only."""
import pytest
import torch
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test
from _padding import poison

LENGTHS = ("mixed", "one", "equal")
SPECS = {
    "dyn_static": (4, (True, 5), (False, 3)),
    "static_dyn": (3, (False, 3), (True, 4)),
    "two_dyn": (3, (True, 4), (True, 3)),
    "static": (3, (False, 2), (False, 3)),
}
FNS = {
    "torch.softmax": lambda x, d: torch.softmax(x, d),
    "Tensor.softmax": lambda x, d: x.softmax(d),
    "F.softmax": lambda x, d: F.softmax(x, dim=d),
    "torch.log_softmax": lambda x, d: torch.log_softmax(x, d),
    "Tensor.log_softmax": lambda x, d: x.log_softmax(dim=d),
    "F.log_softmax": lambda x, d: F.log_softmax(x, d),
    "special.softmax": lambda x, d: torch.special.softmax(x, d),
}


CASES = [(s, n) for s in SPECS for n in (LENGTHS if s in ("dyn_static", "two_dyn") else ("mixed",))]


@pytest.mark.parametrize("spec,lengths", CASES)
@pytest.mark.parametrize("dim", [1, 2, -2])
@pytest.mark.parametrize("name", ["torch.softmax", "torch.log_softmax"])
def test_softmax(name, dim, spec, lengths):
    f = FNS[name]
    mb_test(lambda x: f(poison(x), dim), SPECS[spec], lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("dim", [1, -1])
@pytest.mark.parametrize("name", FNS)
def test_softmax_forms(name, dim):
    f = FNS[name]
    mb_test(lambda x: f(poison(x), dim), SPECS["two_dyn"], lengths="mixed", dtype=torch.float64)


@pytest.mark.parametrize("dtype_form", ["torch", "method", "F"])
def test_softmax_dtype_argument(dtype_form):
    f = {"torch": lambda x: torch.softmax(poison(x), -1, torch.float32),
         "method": lambda x: poison(x).log_softmax(1, dtype=torch.float32),
         "F": lambda x: F.softmax(poison(x), -1, dtype=torch.float32)}[dtype_form]
    y = mb_test(f, SPECS["two_dyn"], lengths="mixed", dtype=torch.float64)
    assert y.dtype == torch.float32


@pytest.mark.parametrize("squares", [(True, 3), (False, 3)])
def test_causal_attention_original_matchbox(squares):
    for lengths in LENGTHS:
        mb_test(lambda x: x.causal_mask(2, 1).softmax(-1) @ x, (4, squares, squares),
                lengths=lengths, dtype=torch.float64)


def test_implicit_dim_of_F_softmax():
    # per example (1, n) is 2-D, so the legacy implicit dim is 1
    with pytest.warns(UserWarning):
        mb_test(lambda x: F.softmax(poison(x)), (3, (True, 4)), lengths="mixed", dtype=torch.float64)


def test_mask_and_dims_kept():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 1)], (True, True))
    y = x.softmax(1)
    assert y.dims == x.dims and y._mask is x._mask


def test_row_without_real_entries_is_zero_not_nan():
    data = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    for f in (torch.softmax, torch.log_softmax):
        x = MaskedBatch.from_padded(data, torch.tensor([2, 0]), dim=1)   # example 1 is empty
        y = f(poison(x), 1)
        assert torch.isfinite(y.padded_data).all()
        data.grad = None
        (y.padded_data * torch.randn_like(y.padded_data)).sum().backward()
        assert torch.isfinite(data.grad).all() and (data.grad[1] == 0).all()


def test_attention_weights_give_finite_value_gradients():
    # padded query rows produce padding-only softmax rows; they must not poison dv
    q = MaskedBatch.fromlist([torch.randn(1, n, 4, dtype=torch.float64) for n in (1, 3)], (True, False))
    k = MaskedBatch.fromlist([torch.randn(1, n, 4, dtype=torch.float64) for n in (1, 3)], (True, False))
    v = MaskedBatch.fromlist([torch.randn(1, n, 4, dtype=torch.float64) for n in (1, 3)], (True, False))
    v.padded_data.requires_grad_(True)
    scores = MaskedBatch._new(poison(q).padded_data @ poison(k).padded_data.transpose(1, 2),
                              q._mask[:, :, :1] & k._mask[:, None, :, 0], (True, True))
    out = torch.softmax(poison(scores, float("inf")), -1) @ poison(v)
    (out.padded_data * torch.randn_like(out.padded_data)).sum().backward()
    assert torch.isfinite(v.padded_data.grad).all()


def test_dormant_lane_is_finite():
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 2)], (True,))
    with lanes(torch.tensor([True, False])):
        y = torch.softmax(poison(x), 1)
    assert torch.isfinite(y.padded_data).all()
    assert torch.allclose(y.padded_data[0], torch.softmax(x.padded_data[0], 0))


def test_softmax_over_the_batch_of_one_dim_is_over_a_size_1_dim():
    # as in torch: ones (softmax, softmin) or zeros (log_softmax), no gradient
    for f in (lambda x: x.softmax(0), lambda x: F.log_softmax(x, -2), lambda x: F.softmin(x, 0)):
        mb_test(f, (3, (True, 4)), lengths="mixed", dtype=torch.float64)
    with pytest.raises(IndexError, match="softmax: dimension 2 out of range"):
        MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 2)], (True,)).softmax(2)


PLACES = {"first": 0, "second": 1, "none": None}
RANKS = {1: (3, (True, 4)),                        # (1, n), (n, 1), (n,)
         2: (3, (True, 4), (False, 3)),            # (1, n, 3), (n, 1, 3), (n, 3)
         3: (3, (False, 2), (True, 4), (False, 3))}
IMPLICIT = {
    "F.softmax": F.softmax, "F.log_softmax": F.log_softmax, "F.softmin": F.softmin,
    "nn.Softmax()": torch.nn.Softmax(), "nn.LogSoftmax()": torch.nn.LogSoftmax(),
    "nn.Softmin()": torch.nn.Softmin(),
}


@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("name", IMPLICIT)
def test_implicit_dim_follows_each_examples_own_rank(name, place, rank, lengths):
    """torch's legacy implicit dim (0 for 0-, 1- and 3-dim values, else 1)
    read on each example's shape: on sequence-first (n, 1) examples it is
    the size-1 dim 1 (before, the batch normalised over n); on (n, C) ones
    dim 1 (before, it raised)."""
    f = IMPLICIT[name]
    mb_test(lambda x: f(poison(x)), RANKS[rank], batch_dim=PLACES[place], lengths=lengths,
            dtype=torch.float64)
