"""Calls to other @batch functions and recursion: a call made in a masked
region runs for the lanes active there.  A TreeLSTM-style encoder recurses
on left/right children of random binary trees stored as per-example index
tensors (leaves point at an out-of-range index)."""
import random

import pytest
import torch

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
