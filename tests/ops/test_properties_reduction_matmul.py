"""Property tests: for random shapes, lengths and dims, reductions, softmax
and matmul on a batch equal the per-example runs (values and gradients)."""
import torch
from hypothesis import given, settings, strategies as st

from matchbox.test_utils import mb_test
from _padding import poison, lift

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def batch_specs(draw, min_dims=1, max_dims=3):
    B = draw(st.integers(1, 4))
    k = draw(st.integers(min_dims, max_dims))
    dims = [(draw(st.booleans()), draw(st.integers(1, 4))) for _ in range(k)]
    return (B,) + tuple(dims)


@st.composite
def reduce_dims(draw, k, allow_tuple=True):
    """None, an int (maybe negative) or a tuple of distinct per-example dims."""
    kind = draw(st.sampled_from(["none", "int", "tuple"] if allow_tuple else ["none", "int"]))
    if kind == "none":
        return None
    pick = lambda: draw(st.integers(1, k)) - draw(st.sampled_from([0, k + 1]))  # noqa: E731
    if kind == "int":
        return pick()
    return tuple(draw(st.sets(st.integers(1, k), min_size=1, max_size=k)))


REDUCTIONS = {  # name: (op, tuples allowed, keepdim allowed without dim)
    "sum": (torch.sum, True, True), "mean": (torch.mean, True, True),
    "prod": (torch.prod, False, False), "logsumexp": (torch.logsumexp, True, None),
    "amax": (torch.amax, True, True), "max": (torch.max, False, False),
    "argmin": (torch.argmin, False, True),
    "var": (lambda x, *a, **k: torch.var(x, *a, correction=0, **k), True, True),
    "std": (lambda x, *a, **k: torch.std(x, *a, correction=0, **k), True, True),
    "norm": (lambda x, *a, **k: torch.linalg.vector_norm(x, 2, *a, **k), True, True),
    "any": (lambda x, *a, **k: torch.any(x > 0, *a, **k), True, True),
}


@SETTINGS
@given(st.data(), batch_specs(), st.sampled_from(sorted(REDUCTIONS)), st.booleans(),
       st.integers(0, 2 ** 31))
def test_reductions(data, spec, name, keepdim, seed):
    op, tuples, keep_none = REDUCTIONS[name]
    dim = data.draw(reduce_dims(len(spec) - 1, tuples))
    if dim is None and keep_none is None:
        dim = -1
    if dim is None:
        f = (lambda x: op(poison(x), dim=None, keepdim=True)) if keepdim and keep_none \
            else (lambda x: lift(op(poison(x))))
    else:
        f = lambda x: op(poison(x), dim, keepdim=keepdim)  # noqa: E731
    mb_test(f, spec, seed=seed, dtype=torch.float64)


@SETTINGS
@given(st.data(), batch_specs(), st.booleans(), st.integers(0, 2 ** 31))
def test_softmax(data, spec, log, seed):
    k = len(spec) - 1
    dim = data.draw(st.integers(1, k)) - data.draw(st.sampled_from([0, k + 1]))
    fn = torch.log_softmax if log else torch.softmax
    mb_test(lambda x: fn(poison(x), dim), spec, seed=seed, dtype=torch.float64)


@SETTINGS
@given(st.integers(1, 4), st.lists(st.tuples(st.booleans(), st.integers(1, 4)), min_size=3, max_size=3),
       st.sampled_from(["W", "w", "mb", "mb_heads", "W@", "vec"]), st.integers(0, 2 ** 31))
def test_matmul(B, sizes, kind, seed):
    (dn, n), (dc, c), (dm, m) = sizes
    if kind in ("W", "w", "vec", "W@"):
        dc = False  # a plain Tensor meets the contracted dim: every example has size c there
    if kind == "W":      # (1, n, c) @ (c, m)
        specs, f = [(B, (dn, n), (dc, c)), (c, m)], lambda a, b: a @ b
    elif kind == "w":    # (1, n, c) @ (c,)
        specs, f = [(B, (dn, n), (dc, c)), (c,)], lambda a, b: torch.matmul(a, b)
    elif kind == "vec":  # (1, c) @ (c, m)
        specs, f = [(B, (dc, c)), (c, m)], lambda a, b: a @ b
    elif kind == "W@":   # (m, c) @ (1, c, n)
        specs, f = [(B, (dc, c), (dn, n)), (m, c)], lambda a, b: b @ a
    elif kind == "mb":   # (1, n, c) @ (1, c, m)
        specs, f = [(B, (dn, n), (dc, c)), (B, (dc, c), (dm, m))], lambda a, b: a @ b
    else:                # (1, 2, n, c) @ (1, 1, c, m)
        specs, f = [(B, (False, 2), (dn, n), (dc, c)), (B, (False, 1), (dc, c), (dm, m))], \
            lambda a, b: a @ b
    mb_test(lambda a, b: f(poison(a), poison(b)), *specs, seed=seed, dtype=torch.float64)
