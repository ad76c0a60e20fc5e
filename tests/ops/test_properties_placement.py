"""Property tests: random chains of ops on examples whose batch-of-one
dimension sits first, elsewhere or nowhere (and which the ops move, drop
and bring back) equal the per-example runs, values and gradients."""
import random

import torch
from hypothesis import given, settings, strategies as st

from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
D = torch.float64


@st.composite
def batches(draw):
    """Examples with a dynamic n and a static d, in a random layout:
    (1, n, d), (n, 1, d), (n, d, 1) or (n, d)."""
    B = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, 5), min_size=B, max_size=B))
    d = draw(st.integers(1, 3))
    bdim = draw(st.sampled_from([0, 1, 2, None]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
    xs = [torch.randn(n, d, dtype=D, generator=g) for n in lengths]
    if bdim is not None:
        xs = [x.unsqueeze(bdim) for x in xs]
    return MaskedBatch.fromlist(xs, batch_dim=bdim)


def _dim(x, rng):
    return rng.randint(-x.dim(), x.dim() - 1)


# each step: (name, applies to x?, op(x, rng) drawing its own arguments)
STEPS = [
    ("tanh", lambda x: True, lambda x, rng: torch.tanh(x)),
    ("scale", lambda x: True, lambda x, rng: x * 1.5 + 0.25),
    ("sum", lambda x: x.dim() > 0, lambda x, rng: x.sum(_dim(x, rng), keepdim=rng.random() < 0.5)),
    ("softmax", lambda x: x.dim() > 0, lambda x, rng: torch.softmax(x, _dim(x, rng))),
    ("transpose", lambda x: x.dim() > 1, lambda x, rng: x.transpose(_dim(x, rng), _dim(x, rng))),
    ("unsqueeze", lambda x: x.dim() < 4,
     lambda x, rng: x.unsqueeze(rng.randint(-x.dim() - 1, x.dim()))),
    ("squeeze", lambda x: x.dim() > 0, lambda x, rng: x.squeeze(_dim(x, rng))),
    ("flatten_last", lambda x: x.dim() > 1, lambda x, rng: x.flatten(-2)),
    ("index_first", lambda x: x.dim() > 0, lambda x, rng: x[rng.choice([0, -1])]),
    ("cat_self", lambda x: x.dim() > 0, lambda x, rng: torch.cat([x, x.exp()], _dim(x, rng))),
    ("stack_self", lambda x: True,
     lambda x, rng: torch.stack([x, -x], rng.randint(-x.dim() - 1, x.dim()))),
]


def _chain(data, x):
    """Draw a chain of steps that torch accepts on ``x``'s first example,
    each with its arguments fixed (drawn from its own seed every run)."""
    probe = x.examples()[0].detach()
    chain = []
    for _ in range(data.draw(st.integers(1, 4))):
        name, ok, op = data.draw(st.sampled_from(STEPS))
        if not ok(probe):
            continue
        seed = data.draw(st.integers(0, 2 ** 16))

        def fixed(v, op=op, seed=seed):
            return op(v, random.Random(seed))
        try:
            probe = fixed(probe)
        except (IndexError, RuntimeError):
            continue  # not valid for one example (e.g. an index out of range)
        chain.append((name, fixed))
    return chain


@SETTINGS
@given(batches(), st.data())
def test_random_chains_per_example(x, data):
    chain = _chain(data, x)

    def f(v):
        for _, op in chain:
            v = op(v)
        return v
    try:
        mb_test(f, x, dtype=D)
    except ValueError as e:
        # a result whose shape differs between examples (squeeze of a dim
        # that is 1 in some examples only, a dynamic dim meeting a static
        # one...) must be a clear refusal, never a wrong number
        assert any(x.dims) and ("dynamic" in str(e) or "size" in str(e)), (e, [n for n, _ in chain])
