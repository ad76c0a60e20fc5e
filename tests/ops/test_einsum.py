"""einsum, tensordot, bilinear, outer and addmm/addmv/addr/baddbmm:
batched vs per-example, values and gradients, on static and dynamic dims,
with NaN in the padding (a rule that reads padding fails)."""
import pytest
import torch

from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test
from _padding import poison

LENGTHS = ("mixed", "one", "equal")
kw = dict(dtype=torch.float64)
B = 4
SEQ = (B, (True, 5), (False, 3))         # (1, n, 3)
SEQ2 = (B, (True, 4), (False, 3))        # (1, m, 3), m independent of n
HEADS = (B, (False, 2), (True, 5), (False, 3))
SQ = (B, (True, 5), (True, 3))           # (1, n, k)
KS = (B, (True, 3), (False, 2))          # (1, k, 2), k shared with SQ


def scalars():
    return MaskedBatch.fromlist([torch.randn(1, dtype=torch.float64) for _ in range(B)])


def p(f):
    """``f`` on poisoned inputs: padding holds NaN."""
    return lambda *xs: f(*map(poison, xs))


_bil = torch.nn.Bilinear(3, 2, 4).double()

# name -> (f, specs, params)
CASES = {
    "einsum_bmm_dyn_contract": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), [SQ, KS], None),
    "einsum_shared_weight": (lambda a, w: torch.einsum("bnd,de->bne", a, w), [SEQ, (3, 2)], None),
    "einsum_sum_dyn": (lambda a: torch.einsum("bnd->bd", a), [SEQ], None),
    "einsum_scores": (lambda a, b: torch.einsum("bnd,bmd->bnm", a, b), [SEQ, SEQ2], None),
    "einsum_heads_ellipsis": (lambda a, b: torch.einsum("...nd,...md->...nm", a, b),
                              [HEADS, (B, (False, 2), (True, 4), (False, 3))], None),
    "einsum_implicit": (lambda a, w: torch.einsum("bnd,de", a, w), [SEQ, (3, 2)], None),  # ->ben
    "einsum_transpose": (lambda a: torch.einsum("bnd->bdn", a), [SEQ], None),
    "einsum_to_scalar": (lambda a, b: torch.einsum("bnd,bnd->b", a, b), [SEQ, 0], None),
    "einsum_sublist": (lambda a, b: torch.einsum(a, [0, 1, 2], b, [0, 2, 3], [0, 1, 3]),
                       [SQ, KS], None),
    "einsum_list_operands": (lambda a, b: torch.einsum("bij,bjk->bik", [a, b]), [SQ, KS], None),
    "einsum_static_meets_dyn": (lambda a, w: torch.einsum("bij,jk->bik", a, w),
                                [(B, (True, 3), (False, 4)), (4, 2)], None),
    "tensordot_dims_lists": (lambda a, b: torch.tensordot(a, b, dims=([1], [2])),
                             [SEQ, (B, (False, 2), (True, 5))], None),
    "tensordot_int": (lambda a, w: torch.tensordot(a, w, 1), [SEQ, (3, 2)], None),
    "bilinear_module": (lambda a, b: _bil(a, b), [SEQ, (B, (True, 5), (False, 2))],
                        list(_bil.parameters())),
    "bilinear_static": (lambda a, b, w: torch.nn.functional.bilinear(a, b, w),
                        [(B, (False, 3)), (B, (False, 2)), (4, 3, 2)], None),
    "addmm": (lambda c, a, w: torch.addmm(c, a, w, beta=0.5, alpha=2),
              [(B, (False, 2)), (B, (False, 3)), (3, 2)], None),
    "addmm_method": (lambda c, a, w: c.addmm(a, w), [(B, (False, 2)), (B, (False, 3)), (3, 2)], None),
    "addmv": (lambda c, a, v: torch.addmv(c, a, v, alpha=3), [(1,), (B, (False, 3)), (3,)], None),
    "baddbmm_dyn": (lambda c, a, b: torch.baddbmm(c, a, b), [(B, (True, 5), (False, 2)), SQ, KS],
                    None),
    "baddbmm_beta0": (lambda c, a, b: torch.baddbmm(c, a, b, beta=0, alpha=0.5),
                      [(1, 1, 2), SQ, KS], None),
}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_contraction(name, lengths):
    f, specs, params = CASES[name]
    mb_test(p(f), *specs, lengths=lengths, params=params, **kw)


@pytest.mark.parametrize("f", [lambda a, b: torch.outer(a, b), lambda a, b: a.ger(b),
                               lambda a, b: torch.addr(torch.ones(1, 3, dtype=a.dtype), a, b)])
def test_outer_of_one_number_per_example(f):
    mb_test(f, scalars(), (3,), **kw)


def test_outer_of_two_batches():
    mb_test(lambda a, b: torch.outer(a, b), scalars(), scalars(), **kw)


def test_einsum_result_keeps_dynamic_mask():
    y = mb_test(lambda a, b: torch.einsum("bij,bjk->bik", a, b), SQ, KS, lengths="mixed", **kw)
    assert y.dims == (True, False) and y.padded
    y = mb_test(lambda a, b: torch.einsum("bij,bjk->bk", a, b), SQ, KS, lengths="mixed", **kw)
    assert y.dims == (False,)


@pytest.mark.parametrize("call, exc, match", [
    (lambda a: torch.einsum("bnd->nbd", a), ValueError, "leading 1"),
    (lambda a: torch.einsum("bnd,bmd->bnm", a, a.transpose(1, 2)), ValueError, "static size 3"),
    (lambda a: torch.einsum("bnd,bnd->bn", a, mb_rand(B, (True, 7), (False, 3), lengths="equal")),
     ValueError, "lengths differ"),
    (lambda a: torch.einsum("bnd,nd->bd", a, torch.ones(9, 3)), ValueError, "static size 9"),
    (lambda a: torch.einsum("bhnd,bhmd", a.unsqueeze(1), a.unsqueeze(1)), ValueError, "leading 1"),
    (lambda a: torch.outer(a, torch.ones(3)), RuntimeError, "1-D"),
    (lambda a: torch.addbmm(torch.zeros(5, 5), a, a.transpose(1, 2)), ValueError, "baddbmm"),
])
def test_errors(call, exc, match):
    a = mb_rand(SEQ, lengths="mixed")
    with pytest.raises(exc, match=match):
        call(a)
