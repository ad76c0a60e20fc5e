"""torch.compile of a @batch ``for`` over per-example steps whose body is
straight-line code (transform/steps.py): the loop runs outside the graph
and its body is compiled once, not unrolled step by step
(runtime/steps.py).  Values and gradients are the eager ones and the
per-example loop's, and the graphs compiled do not grow with the number of
steps.  The ``aot_eager`` backend traces forward and backward without
generating kernels, so the tests stay fast."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch

LENGTHS = {"mixed": (1, 4, 2, 6), "one": (3,), "equal": (4, 4, 4)}


def _run(cell, xs):
    """A GRU over the steps of ``xs`` (1, n, d), the ordinary way: the
    outputs (1, n, h) and the last state."""
    h = xs.new_zeros(1, cell.hidden_size)
    out = []
    for x in xs.unbind(1):
        h = cell(x, h)
        out.append(torch.tanh(h) * 2)
    return torch.stack(out, 1), h


def _run_enumerate(cell, xs):
    """The same with each output scaled by its position (an int that
    changes every step: such a step runs inline, compiled or not)."""
    h = xs.new_zeros(1, cell.hidden_size)
    out = []
    for i, x in enumerate(xs.unbind(1)):
        h = cell(x, h)
        out.append(h * (i + 1))
    return torch.stack(out, 1), h


def _run_last(cell, xs):
    """The last state and each example's own last step, doubled: ``last``
    has no value before the loop, so a compiled step cannot put its live
    rows back among the others and runs masked."""
    h = xs.new_zeros(1, cell.hidden_size)
    for x in xs.unbind(1):
        h = cell(x, h)
        last = x * 2
    return h, last


def _counting(ops):
    """``aot_eager``, counting the ops of every graph dynamo compiles."""
    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    def backend(gm, inputs):
        ops.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return aot_eager(gm, inputs)
    return backend


def _examples(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, n, 3, generator=g, dtype=torch.float64).requires_grad_()
            for n in lengths]


def _grads(outputs, inputs):
    total = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum()
                for o in outputs)
    return torch.autograd.grad(total, inputs)


@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("run", [_run, _run_enumerate, _run_last],
                         ids=["plain", "enumerate", "masked"])
def test_step_loop_matches_per_example(run, lengths, compiled):
    """The batched loop, eager and compiled (twice: the first call of a
    step's shapes runs eagerly, the next ones compiled), gives each
    example's outputs and gradients."""
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(3, 4).double()
    f = matchbox.batch(run)
    if compiled:
        torch._dynamo.reset()
        f = torch.compile(f, backend="aot_eager", dynamic=False)
    xs = _examples(lengths)
    params = list(cell.parameters())
    want = [run(cell, x) for x in xs]
    want_grads = _grads([o for pair in want for o in pair], xs + params)
    for _ in range(2):
        out, h = f(cell, MaskedBatch.fromlist(xs, dims=(True, False)))
        got = list(zip(out.examples(), h.examples()))
        for (a, b), (c, d) in zip(got, want):
            torch.testing.assert_close(a, c)
            torch.testing.assert_close(b, d)
        grads = _grads([o for pair in got for o in pair], xs + params)
        for a, b in zip(grads, want_grads):
            torch.testing.assert_close(a, b)


def test_compiled_step_loop_does_not_retrace_per_step():
    """Compiled, the body of a loop over 12 steps is traced as often as that
    of a loop over 3 (once per shape of its inputs: its first step, the
    others), where unrolled it was traced at every step: the graphs hold
    as many ``tanh`` ops (one per step traced) for either length."""
    cell = torch.nn.GRUCell(3, 4).double()
    tanhs = []
    for lengths in ((2, 3, 1), (2, 12, 1)):
        torch._dynamo.reset()
        ops = []
        f = torch.compile(matchbox.batch(_run), backend=_counting(ops), dynamic=False)
        batch = MaskedBatch.fromlist(_examples(lengths), dims=(True, False))
        for _ in range(3):
            out, h = f(cell, batch)
            _grads([out.padded_data, h.padded_data], list(cell.parameters()))
        tanhs.append(sum("tanh" in op for op in ops))
    assert 0 < tanhs[0] == tanhs[1] < 3


def test_loop_over_modules_stays_in_the_graph():
    """A straight-line loop over a ModuleList is traced into the graph as
    before (``fullgraph=True`` fails on a graph break)."""
    layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(2)).double()

    def f(x):
        for layer in layers:
            x = torch.tanh(layer(x))
        return x

    xs = _examples((2, 5))
    got = torch.compile(matchbox.batch(f), backend="aot_eager", fullgraph=True)(
        MaskedBatch.fromlist(xs, dims=(True, False)))
    for a, x in zip(got.examples(), xs):
        torch.testing.assert_close(a, f(x))
