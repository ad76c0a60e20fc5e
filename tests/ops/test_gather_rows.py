"""Row gathers that share one gradient buffer per source (ops/_gather.py):
values and gradients are index_select's, in every way autograd is used."""
import gc
import weakref

import torch

from matchbox import MaskedBatch
from matchbox.ops._gather import select_rows


def _source(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    return w, w.unsqueeze(0).expand(4, 5, 3) * torch.arange(1., 5.).view(4, 1, 1).double() + 0.5


ROWS = [torch.tensor([0, 7, 19]), torch.tensor([7, 7]), torch.tensor([3]), torch.tensor([19, 0])]


def _loss(take):
    return sum((take(r) * (k + 1)).pow(2).sum() for k, r in enumerate(ROWS))


def _both(f):
    """f(take) with the shared buffer and with plain index_select."""
    w, t = _source()
    shared = f(lambda r: select_rows(t, r), w, t)
    assert getattr(t, "_mb_rows", None) is not None  # the shared buffer was used
    w2, t2 = _source()
    plain = f(lambda r: t2.reshape(20, 3).index_select(0, r), w2, t2)
    return shared, plain


def test_values_and_gradients():
    def f(take, w, t):
        y = _loss(take)
        y.backward()
        return y.detach(), w.grad
    (y, g), (y2, g2) = _both(f)
    assert torch.equal(y, y2) and torch.allclose(g, g2)


def test_double_backward_and_retained_graph():
    def f(take, w, t):
        y = _loss(take)
        gw, = torch.autograd.grad(y, w, create_graph=True, retain_graph=True)
        (gw ** 2).sum().backward(retain_graph=True)
        first = w.grad.clone()
        w.grad = None
        y.backward()  # the graph again: the buffer starts anew
        return gw.detach(), first, w.grad
    shared, plain = _both(f)
    assert all(torch.allclose(a, b) for a, b in zip(shared, plain))


def test_source_changed_in_place_between_gathers():
    def f(take, w, t):
        a = take(ROWS[0]).sum()
        t.mul_(2)
        b = take(ROWS[1]).pow(2).sum()
        (a + b).backward()
        return w.grad
    shared, plain = _both(f)
    assert torch.allclose(shared, plain)


def test_leaves_and_no_grad_take_plain_index_select():
    leaf = torch.randn(2, 3, 4, requires_grad=True)
    select_rows(leaf, torch.tensor([1, 4])).sum().backward()
    assert not hasattr(leaf, "_mb_rows") and leaf.grad[0, 1].tolist() == [1.0] * 4
    _, t = _source()
    with torch.no_grad():
        select_rows(t, torch.tensor([1]))
    assert not hasattr(t, "_mb_rows")


def test_the_source_is_freed():
    _, t = _source()
    select_rows(t, torch.tensor([1, 2])).sum()
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


def test_per_example_index_uses_it():
    """x[:, i] on a batch computed with grad gathers through the buffer."""
    xs = [torch.randn(1, n, 3, requires_grad=True) for n in (2, 4)]
    y = MaskedBatch.fromlist(xs, (True, False)) * 2
    i = MaskedBatch(torch.tensor([1, 3]), None, ())
    (y[:, i].sum() + y[:, i - 1].sum()).backward()
    assert hasattr(y.padded_data, "_mb_rows")
    assert xs[0].grad.tolist() == [[[2.0] * 3] * 2]
    assert xs[1].grad.tolist() == [[[0.0] * 3] * 2 + [[2.0] * 3] * 2]
