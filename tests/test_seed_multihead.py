"""The Matchbox talk's code, verbatim (issue 20 item 1): its `MultiHead`
module (with the `Attention` beside it on the slide) and its
`calc_n_expansions` snippet run unchanged on plain Tensors and on batches,
and the batch gives each example's own values and gradients.

The slide code below is copied exactly from
../shared/seeds/003_0250e6e46337aca4.txt (only the class names' context:
imports and the `batch` name the slides assume).  One change, where
PyTorch itself no longer accepts the slide: `Attention` calls
`.softmax(-1)`; `Tensor.softmax()` without a dim raises in PyTorch.
"""
import math

import pytest
import torch
import torch.nn as nn

from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test

MODES = ("mixed", "one", "equal")


# ---------------------------------------------------------------- the slides
class Attention(nn.Module):
    def __init__(self, dk, drop, causal):
        super().__init__()
        self.scale = math.sqrt(dk)
        self.drop = nn.Dropout(drop)
        self.causal = causal

    def forward(self, q, k, v):
        a = q @ k.transpose(1, 2)
        if self.causal:
            a = a.causal_mask(2, 1)
        return self.drop((a/self.scale)
                           .softmax(-1)) @ v


class MultiHead(nn.Module):
    def __init__(self, attn, dk, dv, N):
        super().__init__()
        self.attn = attn
        self.wq = nn.Linear(dk, dk)
        self.wk = nn.Linear(dk, dk)
        self.wv = nn.Linear(dv, dv)
        self.wo = nn.Linear(dv, dk)
        self.N = N

    def forward(self, q, k, v):
        q = self.wq(q)
        k = self.wk(k)
        v = self.wv(v)
        # B,T,D -> B,T,D/N,N -> B*N,T,D/N
        q, k, v = (x.split_dim(-1, self.N)
                   .join_dims(0, -1)
                   for x in (q, k, v))
        o = self.attn(q, k, v)
        # B*N,T,D/N -> B,N,T,D/N -> B,T,D
        o = (o.split_dim(0, self.N)
             .join_dims(-1, 1))
        return self.wo(o)


class NExpansions(nn.Module):
    def __init__(self, n_expansions_mode, n_relations):
        super().__init__()
        self.n_expansions_mode = n_expansions_mode
        self.n_relations = n_relations

    @batch
    def calc_n_expansions(self, n_leaves):
        if self.n_expansions_mode == 'sparse':
            return n_leaves - 1

        else:
            if self.n_expansions_mode == 'dense':
                parent_conn_usage = 1.0
            else:
                parent_conn_usage = 0.5 # 'medium'

            c_per_parent = 1 + parent_conn_usage * (
                self.n_relations - 1)

            unconnected = n_leaves.float()
            expansions = unconnected.new_zeros(
                unconnected.size(0))
            while unconnected > 1:
                unconnected /= c_per_parent
                expansions += unconnected.ceil()

            expansions = expansions.clamp(1).long()
            return expansions


# ---------------------------------------------------------------- MultiHead
D, N = 8, 4
SEQ = (5, (True, 6), (False, D))     # (1, T, D) per example, T differs
MEMORY = (5, (True, 4), (False, D))  # keys and values of another length


def multihead(causal):
    torch.manual_seed(0)
    return MultiHead(Attention(D // N, 0.0, causal), D, D, N).double()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_multihead_self_attention(mode, causal):
    out = mb_test(multihead(causal), SEQ, 0, 0, lengths=mode, dtype=torch.float64)
    assert out.batch_dim == 0 and out.dims == (True, False)


@pytest.mark.parametrize("mode", MODES)
def test_multihead_attends_over_other_lengths(mode):
    mb_test(multihead(False), SEQ, MEMORY, 1, lengths=mode, dtype=torch.float64)


def test_multihead_heads_are_lanes():
    """Per example, `join_dims(0, -1)` makes one lane of (1, T, D/N) per
    head (the slide's B*N), head h taking features h, h+N, ...; the batch
    holds those lanes example-major and `split_dim(0, N)` gives back the
    per-example (1, N, T, D/N)."""
    x = torch.randn(1, 3, D)
    heads = x.split_dim(-1, N).join_dims(0, -1)
    assert heads.shape == (N, 3, D // N)
    for h in range(N):
        assert torch.equal(heads[h:h + 1], x[:, :, h::N])
    xs = [torch.randn(1, t, D) for t in (2, 5)]
    lanes = MaskedBatch.fromlist(xs, (True, False)).split_dim(-1, N).join_dims(0, -1)
    assert lanes.size(0) == N and lanes.batch_size == 2
    flat = lanes.padded_data.reshape(2 * N, 5, D // N)  # the B*N lanes
    for b, xb in enumerate(xs):
        for h in range(N):
            assert torch.equal(flat[b * N + h, :xb.size(1)], xb[0, :, h::N])
    o = lanes.split_dim(0, N)
    assert o.maxsize() == (1, N, 5, D // N)
    assert [tuple(e.shape) for e in o.join_dims(-1, 1).examples()] == [(1, 2, D), (1, 5, D)]


# ---------------------------------------------------------------- calc_n_expansions
LEAVES = (1, 2, 5, 30, 7, 3)


def expected_expansions(mode, n_relations, k):
    """The snippet's count for one example, in plain Python."""
    if mode == "sparse":
        return k - 1
    c = 1 + (1.0 if mode == "dense" else 0.5) * (n_relations - 1)
    unconnected, expansions = float(k), 0
    while unconnected > 1:
        unconnected /= c
        expansions += math.ceil(unconnected)
    return max(expansions, 1)


@pytest.mark.parametrize("mode", ["sparse", "dense", "medium"])
def test_calc_n_expansions(mode):
    model = NExpansions(mode, n_relations=3)
    n_leaves = MaskedBatch.fromlist([torch.tensor([k]) for k in LEAVES])
    out = mb_test(model.calc_n_expansions, n_leaves)
    assert [e.tolist() for e in out.examples()] == [
        [expected_expansions(mode, 3, k)] for k in LEAVES]


@pytest.mark.parametrize("mode", MODES)
def test_calc_n_expansions_random_counts(mode):
    """The original's `(B, ())` spec: one count of shape (1,) per example."""
    mb_test(NExpansions("medium", n_relations=4).calc_n_expansions, (6, ()), lengths=mode,
            dtype=torch.long)
