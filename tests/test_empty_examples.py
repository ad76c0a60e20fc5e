"""Issue 18 item 2: an example of length 0 along a dynamic dim is a real
example (it holds a value: the sum of an empty sentence is 0), unlike an
example that holds no value (a step it does not have), which losses,
backward and examples() refuse.  Batched results are checked against
per-example runs, values and gradients."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

F = torch.nn.functional


def _sentences(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, (1, n), generator=g) for n in lengths]


@pytest.mark.parametrize("lengths", [[0, 2, 3], [4, 0], [0], [0, 0, 0], [1, 0, 1]])
def test_empty_sentence_embedding_sum_linear_cross_entropy(lengths):
    """The issue's case end to end: an empty sentence's logits are the
    bias, and its loss counts."""
    torch.manual_seed(0)
    emb, lin = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)
    params = list(emb.parameters()) + list(lin.parameters())
    xs = _sentences(lengths)
    target = torch.tensor([1])

    def loss(x):
        return F.cross_entropy(lin(emb(x).sum(1)), target)

    want = [loss(x) for x in xs]
    want_grads = torch.autograd.grad(sum(want), params)
    b = MaskedBatch.fromlist(xs, (True,))
    got = loss(b)
    torch.testing.assert_close(torch.stack([e.reshape(()) for e in got.examples()]),
                               torch.stack(want))
    total = matchbox.example_sum(got)
    torch.testing.assert_close(total, sum(want))
    for g, w in zip(torch.autograd.grad(total, params), want_grads):
        torch.testing.assert_close(g, w)
    # backward() on the batch accumulates the same
    for p in params:
        p.grad = None
    loss(b).backward()
    for p, w in zip(params, want_grads):
        torch.testing.assert_close(p.grad, w)
    # and through from_padded
    fp = MaskedBatch.from_padded(b.padded_data, torch.tensor(lengths))
    torch.testing.assert_close(matchbox.example_mean(loss(fp)), sum(want) / len(want))


def test_mb_test_on_the_issue_case():
    torch.manual_seed(1)
    emb, lin = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)
    b = MaskedBatch.fromlist(_sentences([2, 0, 5]), (True,))
    mb_test(lambda x: F.cross_entropy(lin(emb(x).sum(1)), torch.tensor([2])), b,
            params=list(emb.parameters()) + list(lin.parameters()))


@pytest.mark.parametrize("lengths", [[0, 2, 3], [0], [3, 3]])
def test_reductions_of_empty_examples(lengths):
    torch.manual_seed(2)
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in lengths]
    b = MaskedBatch.fromlist(xs, (True, False))
    for f in (lambda x: x.sum(1), lambda x: x.prod(1), lambda x: x.sum(), lambda x: x.prod(),
              lambda x: x.sum(1) * 2 + x.prod(1), lambda x: torch.logsumexp(x, 1).exp(),
              lambda x: x.any(1), lambda x: x.norm(dim=1)):
        got, want = f(b).examples(), [f(x) for x in xs]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    mb_test(lambda x: (x.sum(1) * 3 + x.prod(1)).tanh(), b)
    for f in (lambda x: x.mean(1), lambda x: x.var(1), lambda x: x.mean()):
        for g, w in zip(f(b).examples(), [f(x) for x in xs]):
            torch.testing.assert_close(g, w, equal_nan=True)
    if 0 in lengths:
        with pytest.raises((ValueError, IndexError, RuntimeError), match="length 0|non-zero size"):
            b.max(1)
        with pytest.raises((ValueError, IndexError, RuntimeError), match="length 0|non-zero size"):
            b.amax(1)
        with pytest.raises((ValueError, IndexError, RuntimeError), match="length 0|non-zero size"):
            b.argmax()


def test_the_empty_dims_size_is_zero_and_the_others_keep_theirs():
    xs = [torch.randn(1, 0, 4), torch.randn(1, 3, 4)]
    b = MaskedBatch.fromlist(xs, (True, False))
    assert b.size_as_tensor(1).padded_data.tolist() == [0, 3]
    assert [tuple(e.shape) for e in b.examples()] == [(1, 0, 4), (1, 3, 4)]
    y = torch.tanh(b * 2 + 1)
    assert [tuple(e.shape) for e in y.examples()] == [(1, 0, 4), (1, 3, 4)]
    assert y.size_as_tensor(1).padded_data.tolist() == [0, 3]
    assert [tuple(e.shape) for e in y.sum(1).examples()] == [(1, 4), (1, 4)]
    assert [tuple(e.shape) for e in y.sum(2).examples()] == [(1, 0), (1, 3)]
    # two dynamic dims: an example empty along one keeps its size along the other
    zs = [torch.randn(1, 0, 2), torch.randn(1, 2, 3)]
    z = MaskedBatch.fromlist(zs, (True, True))
    assert [tuple(e.shape) for e in z.examples()] == [(1, 0, 2), (1, 2, 3)]
    assert [tuple(e.shape) for e in (z * 2).sum(1).examples()] == [(1, 2), (1, 3)]
    assert z.size_as_tensor(2).padded_data.tolist() == [2, 3]


def test_a_slice_that_leaves_an_example_empty_keeps_it():
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in (1, 3, 2)]
    b = MaskedBatch.fromlist(xs, (True, False))
    f = lambda x: x[:, 1:].sum(1) + x[:, :-1].sum(1)  # noqa: E731
    mb_test(f, b)
    torch.testing.assert_close(matchbox.example_sum(f(b).sum(1)), sum(f(x).sum() for x in xs))


def test_a_loss_over_an_empty_sequence():
    """Per-token losses over an empty sentence: sum 0, mean NaN (torch's
    answer); 'none' gives an empty example."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(4, 5)
    xs = [torch.randn(1, n, 4) for n in (0, 3)]
    ts = [torch.randint(5, (1, n)) for n in (0, 3)]
    b, t = MaskedBatch.fromlist(xs, (True, False)), MaskedBatch.fromlist(ts, (True,))
    for reduction in ("sum", "mean", "none"):
        def f(x, y):
            return F.cross_entropy(lin(x).transpose(1, 2), y, reduction=reduction)
        for g, w in zip(f(b, t).examples(), [f(x, y) for x, y in zip(xs, ts)]):
            torch.testing.assert_close(g.reshape(w.shape), w, equal_nan=True)
    s = F.cross_entropy(lin(b).transpose(1, 2), t, reduction="sum")
    want = sum(F.cross_entropy(lin(x).transpose(1, 2), y, reduction="sum") for x, y in zip(xs, ts))
    torch.testing.assert_close(matchbox.example_sum(s), want)
    mse = F.mse_loss(b, torch.zeros(1, 1, 4), reduction="sum")
    torch.testing.assert_close(matchbox.example_sum(mse), sum((x ** 2).sum() for x in xs))


@pytest.mark.parametrize("lengths", [[0, 3, 1], [0], [2, 2]])
def test_batch_loops_over_batches_with_empty_examples(lengths):
    torch.manual_seed(4)
    cell = torch.nn.RNNCell(3, 3)
    xs = [torch.randn(1, n, 3) for n in lengths]

    @matchbox.batch
    def encode(x):
        h = x.batch_zeros(3)
        for x_t in x.unbind(1):
            h = cell(x_t, h)
        return h

    @matchbox.batch
    def count_steps(x):
        n = x.sum(2).sum(1) * 0
        i = 0
        while i < x.size(1):
            n = n + 1
            i = i + 1
        return n

    b = MaskedBatch.fromlist(xs, (True, False))
    mb_test(encode, b, params=list(cell.parameters()))
    loss = F.mse_loss(encode(b), torch.ones(1, 3))
    want = sum(F.mse_loss(encode(x), torch.ones(1, 3)) for x in xs)
    torch.testing.assert_close(matchbox.example_sum(loss), want)
    assert [float(e) for e in count_steps(b).examples()] == [float(n) for n in lengths]


def test_absent_lanes_still_refuse():
    xs = [torch.randn(1, n, 2) for n in (0, 3, 1)]
    b = MaskedBatch.fromlist(xs, (True, False))
    last = list(b.unbind(1))[2]  # the padded steps: only example 1 has a third
    with pytest.raises(IndexError, match="example 0"):
        b.unbind(1)[2]  # indexed, the steps are each example's own (issue 27)
    with pytest.raises(ValueError, match=r"examples \[0, 2\] of this batch hold no value"):
        matchbox.example_sum(F.mse_loss(last, torch.zeros(1, 2)))
    with pytest.raises(ValueError, match=r"examples \[0, 2\] of this batch hold no value"):
        (last * 2).sum(1).backward()
    with pytest.raises(ValueError, match=r"examples \[0, 2\] of this batch hold no value"):
        last.examples()
    first = list(b.unbind(1))[0]  # the empty example has no first step either
    with pytest.raises(ValueError, match=r"examples \[0\] of this batch hold no value"):
        matchbox.example_sum(first.sum(1))
    # a step some example lacks, combined with a present value, raises there
    with pytest.raises(ValueError, match=r"holds no value for example 0"):
        b.sum(1) + last
    # indexing an example past its length raises, as torch does per example
    with pytest.raises(IndexError, match="example 0"):
        b[:, 0]


def test_masked_batch_constructor_with_an_all_false_example():
    data = torch.randn(2, 3, 2)
    mask = torch.tensor([[False] * 3, [True, True, False]]).unsqueeze(-1)
    b = MaskedBatch(data, mask, (True, False))  # dynamic dim: a length-0 example
    assert [tuple(e.shape) for e in b.examples()] == [(1, 0, 2), (1, 2, 2)]
    torch.testing.assert_close(b.sum(1).padded_data[0], torch.zeros(2))
    matchbox.example_sum(b.sum(1))  # counts both
    s = MaskedBatch(data[:, 0], torch.tensor([[False], [True]]), (False,))  # static: no value
    with pytest.raises(ValueError, match=r"examples \[0\] .*hold no value.*only static dims"):
        s.examples()
    with pytest.raises(ValueError, match=r"examples \[0\] .*only static dims"):
        matchbox.example_sum(s)


def test_presence_survives_copies():
    import copy
    import pickle
    b = MaskedBatch.fromlist([torch.randn(1, 0, 2), torch.randn(1, 2, 2)], (True, False))
    for c in (b.detach(), b.float(), copy.deepcopy(b), pickle.loads(pickle.dumps(b)), b.data):
        assert [tuple(e.shape) for e in c.sum(1).examples()] == [(1, 2), (1, 2)]
    s = MaskedBatch.fromlist([torch.randn(0, 1, 2), torch.randn(2, 1, 2)], (True, False), batch_dim=1)
    assert [tuple(e.shape) for e in s.sum(0).examples()] == [(1, 2), (1, 2)]
    matchbox.example_sum(s.sum(0).sum(1))


def test_no_empty_example_costs_nothing():
    b = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 3)], (True, False))
    assert b._present is None
    for y in (b * 2, b.sum(1), b[:, :1], torch.tanh(b).unbind(1)[0]):
        assert y._present is None
