"""Per-example Python numbers under @batch (issue 29, SPEC 4b): builtins,
``math``, ``.tolist()``, constructors and slices take each example's own
number, written the way per-example code writes them.  Each batched run
equals the per-example runs, values and gradients."""
import math

import pytest
import torch
import torch.nn as nn

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

LENGTHS = ["mixed", "equal", "one"]
D = torch.float64


@matchbox.batch
def clipped_prefix(x):                                # x: (1, n, 3)
    n = min(x.size(1), 3)
    return x[:, :n].sum(1) + max(n, 2) * abs(-1)


@matchbox.batch
def scaled_by_sqrt(x):                                # x: (1, n, 3)
    n = x.size(1)
    return x.sum(1) / math.sqrt(n) + math.floor(math.log(n + 1))


@matchbox.batch
def rounded(x):                                       # x: (1, n, 3)
    v = x.sum().item()
    k = round(abs(v))
    return x.sum(1) * (k % 3) + int(v > 0)


@matchbox.batch
def first_half(x):                                    # x: (1, n, 3)
    n = x.size(1)
    return x[:, :n // 2 + 1].sum(1) + x[:, n // 2:].sum(1) * 2.0


@matchbox.batch
def new_buffers(x):                                   # x: (1, n, 3)
    n = x.size(1)
    z = x.new_zeros(n) + 1.0
    m = torch.ones(n, n)
    return x.sum(1) * z.sum() + m.sum()


@matchbox.batch
def causal_sum(x):                                    # x: (1, n, 3)
    n = x.size(1)
    mask = nn.Transformer.generate_square_subsequent_mask(n)
    scores = (x @ x.transpose(1, 2)) + mask
    return torch.softmax(scores, -1) @ x


@matchbox.batch
def repeated_list(x):                                 # x: (1, n, 3)
    n = x.size(1)
    weights = [0.5] * n
    return x.sum(1) * sum(weights) + len(weights)


@matchbox.batch
def sorted_steps(x):                                  # x: (1, n, 3)
    steps = list(x.unbind(1))
    ranked = sorted(steps, key=lambda t: t.sum().item())
    best = max(steps, key=lambda t: t.sum().item())
    return ranked[0] * 2.0 + best


@matchbox.batch
def host_lists(x):                                    # x: (1, n, 3)
    totals = x.sum(-1).tolist()[0]
    arr = x.sum(-1).detach().numpy()
    return x.sum(1) * len(totals) + float(arr.shape[1]) + sum(totals)


@matchbox.batch
def index_tensor(x, tok):                             # x: (1, n, 3), tok: (1,) long
    i = tok.item() % 2
    ids = torch.tensor([i, i + 1])
    return x[:, ids].sum(1) + torch.LongTensor([[i]]).float()


@matchbox.batch
def divmods(x):                                       # x: (1, n, 3)
    q, r = divmod(x.size(1), 2)
    return x.sum(1) * q + pow(r, 2) + sum([q, r])


CASES = [clipped_prefix, scaled_by_sqrt, rounded, first_half, new_buffers, causal_sum,
         repeated_list, sorted_steps, host_lists, divmods]


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_builtins_per_example(f, lengths):
    mb_test(f, (4, (True, 5), (False, 3)), lengths=lengths, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_tensor_of_per_example_numbers(lengths):
    toks = MaskedBatch.fromlist([torch.tensor([t]) for t in (3, 0, 1, 2)], ())
    mb_test(index_tensor, (4, (False, 3), (False, 3)), toks, lengths=lengths, dtype=D)


def test_plain_values_stay_plain():
    """Builtins with no per-example argument give the plain Python value
    (``n`` of a static size is an int)."""
    @matchbox.batch
    def f(x):
        n = min(x.size(1), 2)
        assert type(n) is int and isinstance(x, torch.Tensor)
        return x * n
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 3)], (False,))
    assert torch.equal(f(x).padded_data, x.padded_data * 2)


def test_equal_numbers_collapse():
    """A per-example number the same in every example is one plain value."""
    @matchbox.batch
    def f(x):
        k = min(x.size(1), 1)
        n = len(str(k))
        return x.sum(1) * n, k, n
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    _, k, n = f(x)
    assert k == 1 and n == 1
