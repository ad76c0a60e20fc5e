"""take_along_dim, scatter/scatter_add/scatter_reduce, index_add and
nonzero/argwhere: batched vs per-example (values and gradients) on static
and dynamic dims, with NaN in the padding (a rule that reads padding fails)."""
import pytest
import torch

from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand, mb_test
from _padding import poison

MODES = ("mixed", "one", "equal")
kw = dict(dtype=torch.float64)
B = 4
DYN = (B, (True, 5), (False, 3))   # (1, n, 3)
LAST = (B, (False, 2), (True, 5))  # (1, 2, n)


def half(s, d):
    """An index in range of each example's size along ``d``: ranks // 2."""
    return s.argsort(d).argsort(d) // 2


CASES = {
    "take_along_dim_dyn": (lambda x: torch.take_along_dim(x, x.argsort(1), 1), [DYN]),
    "take_along_dim_static": (lambda x: x.take_along_dim(x.argmax(2, keepdim=True), 2), [DYN]),
    "take_along_dim_broadcast": (lambda x: torch.take_along_dim(x, x[:, :, :1].argmax(1, keepdim=True), 1),
                                 [DYN]),
    "scatter_add_dyn": (lambda x, s: x.scatter_add(1, half(s, 1), s), [DYN, 0]),
    "scatter_add_last": (lambda x, s: torch.scatter_add(x, -1, half(s, -1), s), [LAST, 0]),
    "scatter_dyn": (lambda x, s: torch.scatter(x, 1, s.argsort(1), s * 2), [DYN, 0]),
    "scatter_value": (lambda x: x.scatter(2, x.argsort(2).narrow(2, 0, 1), 7.0), [DYN]),
    "scatter_static": (lambda x, s: x.scatter_add(2, s.argsort(2), s), [DYN, 0]),
    "scatter_small_index": (lambda x, s: x.scatter_add(1, half(s, 1).narrow(2, 0, 2),
                                                       s.narrow(2, 0, 2)), [DYN, 0]),
    "scatter_reduce_amax": (lambda x, s: x.scatter_reduce(1, half(s, 1), s, "amax"), [DYN, 0]),
    "scatter_reduce_prod": (lambda x, s: x.scatter_reduce(1, half(s, 1), s, "prod"), [DYN, 0]),
    "scatter_reduce_mean": (lambda x, s: torch.scatter_reduce(x, 1, half(s, 1), s, "mean",
                                                              include_self=False), [DYN, 0]),
    "index_add_static": (lambda x, s: x.index_add(2, torch.tensor([2, 0]), s),
                         [DYN, (B, (True, 5), (False, 2))]),
    "index_add_into_dyn": (lambda x, s: torch.index_add(x, 1, torch.tensor([0, 0, 0]), s, alpha=2),
                           [DYN, (B, (False, 3), (False, 3))]),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_indexing_op(name, mode):
    f, specs = CASES[name]
    mb_test(lambda *xs: f(*map(poison, xs)), *specs, lengths=mode, seed=3, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_index_add_per_example_index(mode):
    idx = MaskedBatch.fromlist([torch.tensor([k]) for k in (0, 1, 0, 2)])
    mb_test(lambda x, i, s: poison(x).index_add(2, i, poison(s)), DYN, idx, (B, (True, 5), (False, 1)),
            lengths=mode, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_index_add_a_vector_per_example(mode):
    """index (k,) and source (k, 3) per example, k dynamic (0 included), with
    no batch-of-one dim: each example adds its own rows."""
    g = torch.Generator().manual_seed(0)
    ks = {"mixed": (2, 0, 3), "one": (1, 1, 1), "equal": (3, 3, 3)}[mode]
    idx = MaskedBatch.fromlist([torch.randperm(4, generator=g)[:k] for k in ks], (True,), None)
    src = MaskedBatch.fromlist([torch.randn(k, 3, generator=g, **kw) for k in ks], (True, False),
                               None)
    x = MaskedBatch.fromlist([torch.randn(4, 3, generator=g, **kw)] * 3, (False, False), None)
    mb_test(lambda x, i, s: poison(x).index_add(0, i, poison(s)), x, idx, src, **kw)


def examples(y):
    return [tuple(e) for e in zip(*[z.examples() for z in y])] if isinstance(y, tuple) else y.examples()


@pytest.mark.parametrize("f", [lambda t: t.nonzero(), lambda t: torch.argwhere(t),
                               lambda t: torch.nonzero(t, as_tuple=True)])
@pytest.mark.parametrize("spec", [DYN, LAST, (B, (False, 3))])
@pytest.mark.parametrize("batch_dim", [0, None])
def test_nonzero_per_example(f, spec, batch_dim):
    x = mb_rand(spec, lengths="mixed", batch_dim=batch_dim)
    x = MaskedBatch._new(torch.where(x.padded_data > 0.3, x.padded_data, 0.0), x._mask, x.dims,
                         bdim=batch_dim)
    got, want = examples(f(poison(x, 1.0))), [f(e) for e in x.examples()]
    for g, w in zip(got, want):
        for a, b in zip(g if isinstance(g, tuple) else [g], w if isinstance(w, tuple) else [w]):
            assert a.shape == b.shape and torch.equal(a, b)


def test_nonzero_result_has_a_dynamic_count():
    x = MaskedBatch.fromlist([torch.tensor([[0., 1, 2]]), torch.tensor([[3.]]), torch.tensor([[0., 0]])])
    y = poison(x).nonzero()
    assert y.dims == (True, False) and y.batch_dim is None
    assert [e.shape for e in y.examples()] == [(2, 2), (1, 2), (0, 2)]


@pytest.mark.parametrize("call, exc, match", [
    (lambda x: x.take_along_dim(x.argsort(1)), ValueError, "pass a per-example dim"),
    (lambda x: torch.take_along_dim(x, torch.zeros(1, 5, 3, dtype=torch.long), 2), ValueError,
     "dynamic in one operand"),
    (lambda x: x.scatter_add(1, torch.full((1, 1, 3), 3), torch.ones(1, 1, 3)), IndexError,
     "out of range for dimension 1 of example 0"),
    (lambda x: x.index_add(1, torch.tensor([0, 1]), torch.ones(1, 3, 3)), RuntimeError,
     "index has 2 entries"),
])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call(mb_rand(DYN, lengths="mixed"))
