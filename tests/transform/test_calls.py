"""Calls to other @batch functions and recursion: a call made in a masked
region runs for the lanes active there.  A TreeLSTM-style encoder recurses
on left/right children of random binary trees stored as per-example index
tensors (leaves point at an out-of-range index)."""
import contextlib
import random

import pytest
import torch

import matchbox
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test

H = 4
NONE = 1000  # child index of a leaf: out of range on purpose


@batch
def clipped(x):
    if x > 1:
        return torch.sqrt(x)
    return x


@batch
def caller(x):
    y = x * 1.0
    if x > 0:
        y = clipped(x * 3)
    else:
        y = clipped(-x) - 1
    return y


@batch
def encode(left, right, feats, i, w):
    """TreeLSTM-style encoder of the subtree rooted at node ``i``."""
    x = feats[:, i][:, 0]                     # (1, H)
    if left[:, i] >= NONE:                    # a leaf
        h = torch.tanh(x * w)
        c = x * 1.0
    else:
        hl, cl = encode(left, right, feats, left[:, i][:, 0], w)
        hr, cr = encode(left, right, feats, right[:, i][:, 0], w)
        gate = torch.sigmoid(hl - hr + x)
        c = gate * cl + (1 - gate) * cr
        h = torch.tanh(c) * torch.sigmoid(x * w + hl + hr)
    return h, c


def random_tree(rng, n_leaves):
    """Preorder arrays (left, right) of a random full binary tree."""
    left, right = [], []

    def build(n):
        k = len(left)
        left.append(NONE)
        right.append(NONE)
        if n > 1:
            m = rng.randint(1, n - 1)
            left[k] = build(m)
            right[k] = build(n - m)
        return k

    build(n_leaves)
    return left, right


def tree_batch(B, seed, max_leaves=5):
    rng = random.Random(seed)
    ls, rs, fs, roots = [], [], [], []
    for b in range(B):
        n = 1 if b == 0 else rng.randint(1, max_leaves)
        left, right = random_tree(rng, n)
        ls.append(torch.tensor([left]))
        rs.append(torch.tensor([right]))
        fs.append(torch.randn(1, len(left), H, dtype=torch.float64))
        roots.append(torch.tensor([0]))
    return (MaskedBatch.fromlist(ls, (True,)), MaskedBatch.fromlist(rs, (True,)),
            MaskedBatch.fromlist(fs, (True, False)), MaskedBatch.fromlist(roots, ()))


@pytest.mark.parametrize("lengths", ("mixed", "one", "equal"))
def test_call_in_masked_region(lengths):
    mb_test(caller, (6, (False, 1)), lengths=lengths, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
def test_tree_encoder_recursion(seed):
    left, right, feats, root = tree_batch(6, seed)
    mb_test(encode, left, right, feats, root, (H,), dtype=torch.float64, seed=seed)


def test_tree_encoder_plain_tensors():
    rng = random.Random(0)
    left, right = random_tree(rng, 3)
    feats = torch.randn(1, len(left), H)
    w = torch.randn(H)
    h, c = encode(torch.tensor([left]), torch.tensor([right]), feats, torch.tensor([0]), w)
    assert h.shape == (1, H)


# ------------------------------------------------------------------ merge_calls=True (forced)
@contextlib.contextmanager
def recursing_into(name, merged):
    """The module global ``name``, which the recursion calls, bound to the
    merged version for a while."""
    plain = globals()[name]
    globals()[name] = merged
    try:
        yield merged
    finally:
        globals()[name] = plain


def test_sibling_calls_are_merged_unless_turned_off():
    assert "sibling_calls" in matchbox.to_source(batch(encode.__wrapped__, merge_calls=True))
    assert "sibling_calls" in matchbox.to_source(encode)   # the default (issue 22)
    assert "sibling_calls" not in matchbox.to_source(batch(encode.__wrapped__, merge_calls=False))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("B", (1, 6))
def test_merged_tree_recursion_equals_per_example(seed, B):
    left, right, feats, root = tree_batch(B, seed)
    with recursing_into("encode", batch(encode.__wrapped__, merge_calls=True)) as f:
        mb_test(f, left, right, feats, root, (H,), dtype=torch.float64, seed=seed)


def fib_like(x, n):
    """Two recursive calls with different per-example arguments and a
    number returned at the leaves."""
    if n <= 1:
        return x * 0.0 + 1.0
    a = fib_like(x * 0.5, n - 1)
    b = fib_like(x + 1.0, n - 2)
    return a + b * x


def dependent(x, n):
    if n <= 0:
        return x * 1.0
    a = dependent(x, n - 1)
    b = dependent(a, n - 1)      # reads the first call's result: not merged
    return a + b


@pytest.mark.parametrize("lengths", ("mixed", "one", "equal"))
@pytest.mark.parametrize("name", ["fib_like", "dependent"])
def test_merged_recursion_with_per_example_arguments(name, lengths):
    n = MaskedBatch.fromlist([torch.tensor([k]) for k in (0, 3, 1, 4, 2)], ())
    with recursing_into(name, batch(globals()[name], merge_calls=True)) as f:
        mb_test(f, (5, (False, 2)), n, lengths=lengths, dtype=torch.float64)
        assert ("sibling_calls" in matchbox.to_source(f)) == (name == "fib_like")


def differing_constant(x, depth):
    if depth >= 2 or x.sum() > 3:
        return x * 1.0
    a = differing_constant(x + 1.0, depth + 1)
    b = differing_constant(x * 2.0, depth + 2)   # python ints that differ: two plain calls
    return a - b


def test_calls_that_do_not_stack_run_one_after_the_other():
    with recursing_into("differing_constant", batch(differing_constant, merge_calls=True)) as f:
        mb_test(lambda x: f(x, 0), (5, (False, 2)), dtype=torch.float64)
