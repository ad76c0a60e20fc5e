"""roll, tile, repeat_interleave, diff, diagonal, cummax/cummin/logcumsumexp
and tril/triu: batched vs per-example (values and gradients) on static and
dynamic dims, with NaN in the padding (a rule that reads padding fails)."""
import pytest
import torch

from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test
from _padding import poison

MODES = ("mixed", "one", "equal")
kw = dict(dtype=torch.float64)
B = 4
DYN = (B, (True, 5), (False, 3))             # (1, n, 3)
STAT = (B, (False, 3), (False, 2))           # (1, 3, 2)
DYN2 = (B, (True, 4), (True, 3), (False, 2))  # (1, n, m, 2)
SQ = (B, (True, 4), (True, 4))               # (1, n, n')
HEADS = (B, (False, 2), (True, 4), (True, 3))
LAST = (B, (False, 3), (True, 5))            # (1, 3, n)

CASES = {
    "roll_dyn": (lambda x: x.roll(2, 1), [DYN]),
    "roll_multi": (lambda x: torch.roll(x, (-1, 1, 1), (1, 2, 0)), [DYN2]),
    "roll_static": (lambda x: x.roll(-2, -1), [DYN]),
    "roll_flat_static": (lambda x: x.roll(2), [STAT]),
    "tile": (lambda x: x.tile(2), [DYN]),
    "tile_dyn": (lambda x: torch.tile(x, (2, 1)), [DYN]),
    "tile_lead": (lambda x: x.tile((1, 2, 1, 1)), [DYN]),
    "repeat_interleave_dyn": (lambda x: x.repeat_interleave(2, 1), [DYN]),
    "repeat_interleave_static": (lambda x: torch.repeat_interleave(x, 3, dim=-1), [DYN]),
    "repeat_interleave_counts": (lambda x: x.repeat_interleave(torch.tensor([1, 0, 2]), 2), [DYN]),
    "diff_dyn": (lambda x: x.diff(dim=1), [DYN]),
    "diff_n2_static": (lambda x: torch.diff(x, 2, -1), [DYN]),
    "diff_n2_dyn": (lambda x: torch.diff(x, 2, -1), [LAST]),
    "diff_prepend": (lambda x, p: torch.diff(x, dim=1, prepend=p), [DYN, (1, 2, 3)]),
    "diff_append_dyn": (lambda x, a: torch.diff(x, dim=1, append=a), [DYN, (B, (True, 4), (False, 3))]),
    "diagonal_dyn": (lambda x: x.diagonal(0, 1, 2), [SQ]),
    "diagonal_offset": (lambda x: torch.diagonal(x, 1, 1, 2), [SQ]),
    "diagonal_neg_offset": (lambda x: torch.diagonal(x, -1, 2, 1), [SQ]),
    "diagonal_dyn_static": (lambda x: x.diagonal(0, 1, 3), [DYN2]),
    "diagonal_keeps_dyn": (lambda x: x.diagonal(0, 2, 3), [DYN2]),
    "diagonal_static": (lambda x: x.diagonal(dim1=1, dim2=2), [STAT]),
    "cummax_dyn": (lambda x: x.cummax(1), [DYN]),
    "cummin_dyn": (lambda x: torch.cummin(x, -1), [LAST]),
    "cummax_static": (lambda x: torch.cummax(x, 2), [DYN]),
    "cummin_leading": (lambda x: x.cummin(0), [DYN]),
    "logcumsumexp_dyn": (lambda x: x.logcumsumexp(1), [DYN]),
    "logcumsumexp_static": (lambda x: torch.logcumsumexp(x, 2), [DYN]),
    "tril_dyn": (lambda x: x.tril(), [SQ]),
    "triu_dyn_diag": (lambda x: torch.triu(x, 1), [SQ]),
    "tril_heads": (lambda x: torch.tril(x, diagonal=-1), [HEADS]),
    "triu_row": (lambda x: x.triu(-2), [(B, (True, 5))]),
    "tril_dyn_cols": (lambda x: x.tril(1), [LAST]),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_op(name, mode):
    f, specs = CASES[name]
    mb_test(lambda *xs: f(*map(poison, xs)), *specs, lengths=mode, seed=2, **kw)


COUNTS = MaskedBatch.fromlist([torch.tensor([k]) for k in (2, 0, 1, 3)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dim", [1, 2])
def test_repeat_interleave_per_example_counts(mode, dim):
    y = mb_test(lambda x, r: poison(x).repeat_interleave(r, dim), DYN, COUNTS, lengths=mode, **kw)
    assert y.dims[dim - 1]
    assert y.examples()[1].size(dim) == 0  # a count of 0 leaves the example empty there


def test_diff_of_length_one_is_empty_but_present():
    y = mb_test(lambda x: poison(x).diff(dim=1), DYN, lengths="mixed", **kw)
    assert y.examples()[0].shape == (1, 0, 3)


@pytest.mark.parametrize("call, exc, match", [
    (lambda x: x.roll(1), ValueError, "pass dims"),
    (lambda x: x.tile((2, 1, 1, 1)), ValueError, "leading"),
    (lambda x: x.repeat_interleave(2), ValueError, "pass a per-example dim"),
    (lambda x: x.repeat_interleave(torch.tensor([1, 2, 3, 4, 5]), 1), ValueError, "dynamic"),
    (lambda x: x.diagonal(), ValueError, "dimension 0"),
    (lambda x: x.diff(dim=0), ValueError, "dimension 0"),
    (lambda x: x.sum(1).sum(1).tril(), RuntimeError, "at least 2 dimensions"),
])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call(mb_rand(DYN, lengths="mixed"))
