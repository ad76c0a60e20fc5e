"""torch.compile of a @batch function gives the numbers of the eager one
(graph breaks where control flow needs a host decision).  A ``for`` over
the steps of ``x.unbind(d)`` with a straight-line body runs outside the
graph, each step masked and compiled once for all steps
(test_compiled_loops.py).  The ``aot_eager`` backend traces forward and backward through
dynamo and AOTAutograd without generating kernels, so the tests stay fast."""
import copy

import pytest
import torch

import matchbox
from examples import bilstm_tagger as ex
from matchbox import MaskedBatch, example_sum
from matchbox.transform.runtime import Undefined


def test_undefined_answers_probes_of_its_attributes():
    u = Undefined("h")
    assert not hasattr(u, "__len_hint__") and copy.copy(u) is not None


@pytest.mark.parametrize("gather", [False, True], ids=["masked", "gathered"])
def test_compiled_batch_function_matches_eager(gather):
    """Compiled, the cell and the linear layer mask every row, or gather the
    live ones (``capture_dynamic_output_shape_ops``) as they do eagerly."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3).double()
    cell = torch.nn.GRUCell(3, 3).double()

    @matchbox.batch
    def f(x):
        h = x.sum(1) * 0
        for x_t in x.unbind(1):
            h = cell(lin(x_t), h)
            if h.sum() > 0:
                h = h * 0.5
        return h

    compiled = torch.compile(f, backend="aot_eager")
    for lengths in ((2, 4, 1), (3, 3), (2,)):
        xs = [torch.randn(1, n, 3, dtype=torch.float64, requires_grad=True) for n in lengths]
        grads = []
        for fn in (f, compiled):
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=gather):
                out = fn(MaskedBatch.fromlist(xs, dims=(True, False)))
            total = sum((e * torch.arange(3.0, dtype=torch.float64)).sum() for e in out.examples())
            grads.append(torch.autograd.grad(total, xs + [lin.weight, cell.weight_hh]))
            if fn is f:
                want = [e.detach() for e in out.examples()]
            else:
                for a, b in zip(want, out.examples()):
                    torch.testing.assert_close(b.detach(), a)
        for a, b in zip(*grads):
            assert torch.allclose(a, b)


def _tagger_loss(model, words, tags):
    return example_sum(model.loss(words, tags, reduction="sum"))


@pytest.mark.parametrize("lengths", [(3, 1, 5, 2), (4, 4, 4), (1,)], ids=["random", "equal", "one"])
def test_bilstm_tagger_compiled_matches_eager(lengths):
    """The tagger's loops over ``xs.unbind(1)`` and ``reversed(xs.unbind(1))``
    with ``out.append(h)``, compiled (each step one compiled graph, the
    first of each shape eager): the loss and its gradients are the eager
    ones and the per-example loop's, at the first call and the next."""
    grammar = ex.Grammar(vocab=20)
    model = ex.Tagger(grammar.vocab, grammar.tags, embed=5, hidden=4).double()
    data = [(w[None], grammar.tag(w)[None])
            for w in (torch.randint(0, grammar.vocab, (n,)) for n in lengths)]
    words, tags = ex.make_batch(data)
    params = list(model.parameters())
    torch._dynamo.reset()
    compiled = torch.compile(_tagger_loss, backend="aot_eager", dynamic=False)
    losses = [compiled(model, words, tags), compiled(model, words, tags),
              _tagger_loss(model, words, tags),
              sum(model.loss(w, t, reduction="sum") for w, t in data)]
    grads = [torch.autograd.grad(loss, params) for loss in losses]
    for loss, grad in zip(losses[1:], grads[1:]):
        torch.testing.assert_close(losses[0], loss)
        for a, b in zip(grads[0], grad):
            torch.testing.assert_close(a, b)
