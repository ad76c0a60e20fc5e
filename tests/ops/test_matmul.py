"""matmul, @, bmm, mm, mv, dot: per-example torch.matmul semantics,
contracting real entries only."""
import pytest
import torch

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.ops._registry import RULES
from matchbox.test_utils import mb_test
from _padding import poison, lift

LENGTHS = ("mixed", "one", "equal")
kw = dict(dtype=torch.float64)


def mm(f):
    return lambda a, b: f(poison(a), poison(b))


# name -> (f(a, b), spec of a, spec of b); per example every batch spec has its leading 1
CASES = {
    # MaskedBatch @ plain Tensor
    "seq@W": (lambda a, b: a @ b, (4, (True, 5), (False, 3)), (3, 2)),
    "seq@W_dyn_static": (lambda a, b: torch.matmul(a, b), (3, (False, 2), (True, 4), (False, 3)), (3, 2)),
    "vec@W": (lambda a, b: a.matmul(b), (4, (False, 3)), (3, 2)),
    "vec@w": (lambda a, b: lift(a @ b) if a.dim() == 1 else a @ b, (4, (False, 3)), (3,)),
    "seq@w": (lambda a, b: a @ b, (4, (True, 5), (False, 3)), (3,)),
    "heads@W": (lambda a, b: a @ b, (3, (False, 2), (True, 4), (False, 3)), (3, 2)),
    "seq@W3": (lambda a, b: a @ b, (3, (True, 4), (False, 3)), (1, 3, 2)),
    # plain Tensor @ MaskedBatch
    "W@seq": (lambda a, b: b @ a, (3, (False, 3), (True, 4)), (5, 3)),
    "w@seq": (lambda a, b: torch.matmul(b, a), (3, (False, 3), (True, 4)), (3,)),
    "W3@seq": (lambda a, b: b @ a, (3, (False, 3), (True, 4)), (1, 5, 3)),
    # MaskedBatch @ MaskedBatch
    "dyn_contract": (lambda a, b: a @ b, (4, (True, 5), (True, 3)), (4, (True, 3), (True, 4))),
    "static_contract": (lambda a, b: a @ b, (4, (True, 5), (False, 3)), (4, (False, 3), (True, 4))),
    "heads": (lambda a, b: a @ b, (3, (False, 2), (True, 4), (True, 3)),
              (3, (False, 2), (True, 3), (False, 2))),
    "heads_bcast": (lambda a, b: a @ b, (3, (False, 2), (True, 4), (False, 3)),
                    (3, (False, 1), (False, 3), (True, 5))),
    "dyn_heads": (lambda a, b: a @ b, (3, (True, 2), (False, 4), (False, 3)),
                  (3, (True, 2), (False, 3), (True, 5))),
    "row@seq": (lambda a, b: a @ b, (3, (True, 3)), (3, (True, 3), (False, 2))),
    "bmm": (lambda a, b: torch.bmm(a, b), (4, (True, 5), (True, 3)), (4, (True, 3), (False, 2))),
    "bmm_method": (lambda a, b: a.bmm(b), (4, (True, 5), (False, 3)), (4, (False, 3), (True, 2))),
    "mm": (lambda a, b: torch.mm(a, b), (4, (False, 3)), (3, 2)),
    "mm_method": (lambda a, b: a.mm(b), (4, (False, 1)), (4, (True, 3))),  # (1,1) mm (1,l)
    "mv": (lambda a, b: torch.mv(a, b), (4, (False, 3)), (3,)),
    "mv_method": (lambda a, b: a.mv(b), (4, (False, 3)), (3,)),
    # per example (1,): a batch of one number per example
    "dot": (lambda a, b: lift(torch.dot(b, a)), "scalars", (1,)),
    "dot_method": (lambda a, b: lift(a.dot(b)), "scalars", (1,)),
    "scalar@row": (lambda a, b: a @ b, "scalars", (1, 1)),
}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", CASES)
def test_matmul(name, lengths):
    f, sa, sb = CASES[name]
    if sa == "scalars":
        sa = MaskedBatch.fromlist([torch.randn(1, dtype=torch.float64) for _ in range(4)])
    mb_test(mm(f), sa, sb, lengths=lengths, **kw)


def test_matmul_scalar_per_example():
    # per example (1,) @ (1,) is a dot product: one scalar per example
    x = MaskedBatch.fromlist([torch.tensor([2.0]), torch.tensor([3.0])])
    y = x @ torch.tensor([5.0])
    assert y.dims == () and y.padded_data.tolist() == [10.0, 15.0]


@pytest.mark.parametrize("lengths", LENGTHS)
def test_attention_with_transpose(lengths):
    if torch.Tensor.transpose not in RULES:
        pytest.skip("needs the shape rules (transpose)")
    spec_q, spec_k = (4, (True, 5), (False, 3)), (4, (True, 4), (False, 3))
    mb_test(lambda q, k: poison(q) @ poison(k).transpose(1, 2), spec_q, spec_k, lengths=lengths, **kw)
    mb_test(lambda q, k: torch.softmax(poison(q) @ poison(k).transpose(1, 2) / 3 ** 0.5, -1) @ poison(k),
            spec_q, spec_k, lengths=lengths, **kw)


@pytest.mark.parametrize("squares", [(True, 3), (False, 3)])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_causal_attention_original_matchbox(squares, lengths):
    mb_test(lambda x: x.causal_mask(2, 1).softmax(-1) @ x, (4, squares, squares), lengths=lengths, **kw)


def test_result_mask_is_outer_product():
    a = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    b = MaskedBatch.fromlist([torch.randn(1, 3, 5), torch.randn(1, 3, 1)], (False, True))
    y = a @ b
    assert y.dims == (True, True) and y.padded_data.shape == (2, 4, 5)
    want = torch.zeros(2, 4, 5, dtype=torch.bool)
    want[0, :2, :5] = True
    want[1, :4, :1] = True
    assert torch.equal(y.mask, want)
    assert (a @ torch.randn(3, 2)).dims == (True, False)


def test_padding_gets_zero_gradient_in_shared_weight():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (1, 4)], (True, False))
    x = poison(x, float("inf"))
    W = torch.randn(3, 2, requires_grad=True)
    y = x @ W
    assert torch.isfinite(y.padded_data).all()
    (y.padded_data * torch.randn_like(y.padded_data)).sum().backward()
    assert torch.isfinite(W.grad).all()


def test_dormant_lanes_do_not_leak():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4)], (True, False))
    W = torch.randn(3, 2, requires_grad=True)
    with lanes(torch.tensor([True, False])):
        y = MaskedBatch._new(x.padded_data.masked_fill(torch.tensor([False, True])[:, None, None], float("nan")),
                             x._mask, x.dims) @ W
    assert torch.isfinite(y.padded_data).all() and (y.padded_data[1] == 0).all()
    y.padded_data.sum().backward()
    assert torch.isfinite(W.grad).all()


def test_contracting_different_lengths_raises():
    a = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 2, 2)], (False, True))
    b = MaskedBatch.fromlist([torch.randn(1, 2, 4), torch.randn(1, 3, 4)], (True, False))
    with pytest.raises(ValueError, match="matmul: per-example lengths differ"):
        a @ b
    with pytest.raises(ValueError, match="bmm: per-example lengths differ"):
        torch.bmm(a, b)


def test_dynamic_meets_static_raises():
    a = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 2, 2)], (False, True))
    with pytest.raises(ValueError, match="matmul: .*dynamic.*static size 3"):
        a @ torch.randn(3, 4)


def test_result_leaving_leading_one_raises():
    a = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    with pytest.raises(ValueError, match="leading 1"):
        a @ torch.randn(5, 3, 2)   # per example (5, n, 2)


def test_batch_size_mismatch_and_fixed_rank_ops():
    a = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    b = MaskedBatch.fromlist([torch.randn(1, 3, 2)] * 3)
    with pytest.raises(ValueError, match="batch sizes differ"):
        a @ b
    with pytest.raises(RuntimeError, match="mm: needs per-example operands with 2 and 2"):
        torch.mm(a, torch.randn(3, 2))
    with pytest.raises(RuntimeError, match="bmm: .*3 and 3"):
        a.bmm(torch.randn(3, 2))
