"""RNN cells (nn.RNNCell / LSTMCell / GRUCell and the torch._VF functions
they call): batched vs per-example values and gradients, masks, errors."""
import pytest
import torch
import torch.nn as nn

from matchbox import MaskedBatch, batch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test
from matchbox.transform.runtime import select

# every test runs with real rows gathered (CPU) and with all rows masked (GPU)
pytestmark = pytest.mark.usefixtures("row_strategy")

CELLS = {
    "rnn_tanh": lambda i, h: nn.RNNCell(i, h),
    "rnn_relu": lambda i, h: nn.RNNCell(i, h, nonlinearity="relu"),
    "gru": lambda i, h: nn.GRUCell(i, h),
    "lstm": lambda i, h: nn.LSTMCell(i, h),
}
BATCH = (1, 2, 5)


@pytest.mark.parametrize("B", BATCH)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", CELLS)
def test_cell_with_hidden(kind, bias, B):
    torch.manual_seed(0)
    cell = CELLS[kind](3, 2)
    if not bias:
        cell = type(cell)(3, 2, bias=False) if kind != "rnn_relu" else nn.RNNCell(3, 2, bias=False, nonlinearity="relu")
    cell = cell.double()
    if kind == "lstm":
        out = mb_test(lambda x, h, c: cell(x, (h, c)), (B, (False, 3)), (B, (False, 2)),
                      (B, (False, 2)), params=list(cell.parameters()), dtype=torch.float64)
        assert isinstance(out, tuple) and all(isinstance(o, MaskedBatch) for o in out)
    else:
        out = mb_test(cell, (B, (False, 3)), (B, (False, 2)))
        assert isinstance(out, MaskedBatch) and out.dims == (False,)


@pytest.mark.parametrize("B", BATCH)
@pytest.mark.parametrize("kind", CELLS)
def test_cell_without_hidden(kind, B):
    cell = CELLS[kind](3, 4).double()
    mb_test(cell, (B, (False, 3)))


def test_spec_example_rnncell():
    mb_test(nn.RNNCell(2, 2).double(), (4, (False, 2)), (4, (False, 2)))


@pytest.mark.parametrize("kind", CELLS)
def test_plain_input_batched_hidden(kind):
    """A plain (1, F) input shared by every example, batched hidden state."""
    cell = CELLS[kind](3, 2).double()
    x = (1, 3)
    if kind == "lstm":
        mb_test(lambda x, h, c: cell(x, (h, c)), x, (3, (False, 2)), (3, (False, 2)),
                params=list(cell.parameters()), dtype=torch.float64)
        mb_test(lambda x, h, c: cell(x, (h, c)), (3, (False, 3)), (3, (False, 2)), (1, 2),
                params=list(cell.parameters()), dtype=torch.float64)
    else:
        mb_test(cell, x, (3, (False, 2)))
        mb_test(cell, (3, (False, 3)), (1, 2))


@pytest.mark.parametrize("kind", CELLS)
def test_unrolled_over_steps(kind):
    """Three steps of a cell, hidden state carried along."""
    cell = CELLS[kind](3, 2).double()

    def run(x1, x2, x3):
        h = None
        for x in (x1, x2, x3):
            h = cell(x) if h is None else cell(x, h)
        return h
    spec = (4, (False, 3))
    mb_test(run, spec, spec, spec, params=list(cell.parameters()), dtype=torch.float64)


@pytest.mark.parametrize("kind", CELLS)
def test_result_mask_is_conjunction_and_bad_lanes_are_clean(kind):
    """A lane that is not real (mask False) holding NaN must not poison the
    weight gradients or the other lanes; the result mask is the conjunction."""
    torch.manual_seed(0)
    cell = CELLS[kind](3, 2).double()
    x = torch.randn(3, 3, dtype=torch.float64)
    h = torch.randn(3, 2, dtype=torch.float64)
    x[1] = float("nan")
    h[2] = float("inf")
    mx = torch.tensor([[True], [False], [True]])
    mh = torch.tensor([[True], [True], [False]])
    xb = MaskedBatch(x, mx, (False,))
    hb = MaskedBatch(h, mh, (False,))
    if kind == "lstm":
        c = torch.randn(3, 2, dtype=torch.float64)
        out = cell(xb, (hb, MaskedBatch(c, None, (False,))))
        ref = cell(x[:1], (h[:1], c[:1]))
        outs = list(out)
    else:
        out = cell(xb, hb)
        ref = (cell(x[:1], h[:1]),)
        outs = [out]
    for o, r in zip(outs, ref):
        assert torch.equal(o.mask, mx & mh)
        assert torch.isfinite(o.padded_data).all()
        torch.testing.assert_close(o.padded_data[:1], r)
    cell.zero_grad()
    sum(o.padded_data[0].sum() for o in outs).backward()
    got = [p.grad.clone() for p in cell.parameters()]
    cell.zero_grad()
    sum(r.sum() for r in ref).backward()
    for g, p in zip(got, cell.parameters()):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, p.grad)


def test_dormant_lane_is_zero_and_finite():
    cell = nn.GRUCell(2, 2).double()
    x = torch.randn(2, 2, dtype=torch.float64)
    x[1] = float("nan")
    xb = MaskedBatch(x, None, (False,))
    with lanes(torch.tensor([True, False])):
        out = cell(xb)
    assert torch.isfinite(out.padded_data).all()
    torch.testing.assert_close(out.padded_data[:1], cell(x[:1]))


@pytest.mark.usefixtures("row_strategy")
def test_cut_of_a_read_made_under_other_lanes_is_kept():
    """The cells skip @batch's gradient cut of a read only when it was made
    under the lanes active now (they never read those lanes then).  A value
    read under other lanes keeps its cut: the lane it cut gets no gradient."""
    cell = nn.GRUCell(2, 2).double()
    x = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    cut = torch.tensor([True, False])
    for active in (None, torch.tensor([True, True])):
        read = MaskedBatch._read(MaskedBatch(x, None, (False,)), cut)
        with lanes(active):
            out = cell(read)
        g, = torch.autograd.grad(out.padded_data.sum(), x)
        assert torch.equal(g[1], torch.zeros(2)) and bool((g[0] != 0).all())
    read = MaskedBatch._read(MaskedBatch(x, None, (False,)), cut)
    with lanes(cut):  # the same lanes: the cell leaves lane 1 out by itself
        out = cell(read)
    assert read._cut is cut  # no where was made
    g, = torch.autograd.grad(out.padded_data.sum(), x)
    assert torch.equal(g[1], torch.zeros(2)) and bool((g[0] != 0).all())


def _in_a_loop(kind, cell, narrowed):
    """A @batch loop over a sequence's steps carrying the cell's state;
    with ``narrowed``, the new state is kept only by the examples whose
    step sums above 0 (lanes narrower than those the cell ran under)."""
    if kind == "lstm":
        @batch
        def run(xs):
            h = c = xs.batch_zeros(2)
            for x in xs.unbind(1):
                if narrowed:
                    h2, c2 = cell(x, (h, c))
                    if x.sum() > 0:
                        h, c = h2, c2
                else:
                    h, c = cell(x, (h, c))
            return h * c
    else:
        @batch
        def run(xs):
            h = xs.batch_zeros(2)
            for x in xs.unbind(1):
                if narrowed:
                    h2 = cell(x, h)
                    if x.sum() > 0:
                        h = h2
                else:
                    h = cell(x, h)
            return h
    return run


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("narrowed", [False, True], ids=["updated", "narrowed"])
@pytest.mark.parametrize("kind", CELLS)
def test_state_carried_by_a_batch_loop(kind, narrowed, lengths):
    """On CPU a cell writes its new rows into the old state, so the loop's
    masked update has nothing to do; kept by fewer lanes, it still must.
    (Without gradients too: then @batch's reads pass the values on as
    they are.)"""
    torch.manual_seed(0)
    cell = CELLS[kind](3, 2).double()
    run, spec = _in_a_loop(kind, cell, narrowed), (5, (True, 4), (False, 3))
    mb_test(run, spec, lengths=lengths, params=list(cell.parameters()), dtype=torch.float64)
    with torch.no_grad():
        mb_test(run, spec, lengths=lengths, grad=False, dtype=torch.float64)


def test_state_changed_in_place_after_the_cell_is_not_taken_as_kept(row_strategy):
    """The masked update skips its ``where`` only while the old state is
    the one the cell wrote into, unchanged since."""
    cell = nn.GRUCell(3, 2).double()
    x, h = MaskedBatch(torch.randn(3, 3, dtype=torch.float64)), MaskedBatch(torch.randn(3, 2, dtype=torch.float64))
    active = torch.tensor([True, False, True])
    with torch.no_grad(), lanes(active):
        new = cell(x, h)
        assert (select(active, new, h) is new) == (row_strategy == "gather")
        h.padded_data.mul_(2)
        got = select(active, new, h)
    torch.testing.assert_close(got.padded_data, torch.where(active[:, None], new.padded_data, h.padded_data))


def test_errors():
    cell = nn.RNNCell(2, 2)
    dyn = MaskedBatch.fromlist([torch.randn(1, 2, 2), torch.randn(1, 3, 2)], (True, False))
    with pytest.raises(ValueError, match=r"\(1, features\)"):
        torch.rnn_tanh_cell(dyn, torch.zeros(2, 2), cell.weight_ih, cell.weight_hh)
    dynf = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 3)], (True,))
    with pytest.raises(ValueError, match="dynamic feature dimension"):
        cell(dynf)
    x = MaskedBatch.fromlist([torch.randn(1, 2)] * 3, (False,))
    with pytest.raises(ValueError, match="must be"):
        cell(x, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="batch sizes differ"):
        cell(x, MaskedBatch.fromlist([torch.randn(1, 2)] * 2, (False,)))


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
@pytest.mark.parametrize("kind", CELLS)
def test_cell_over_rows_of_each_example(kind, lengths):
    """Per-example (n, features) operands with no batch-of-one dimension:
    the cell's own batch is each example's n rows (a graph's nodes:
    ``h = self.gru(torch.stack(msgs), h)``).
    Before: 'the input needs each example's batch-of-one dimension at 0'."""
    torch.manual_seed(0)
    cell = CELLS[kind](3, 2).double()
    if kind == "lstm":
        mb_test(lambda x, h, c: cell(x, (h, c)), (4, (True, 4), (False, 3)),
                (4, (True, 4), (False, 2)), (4, (True, 4), (False, 2)),
                params=list(cell.parameters()), batch_dim=None, lengths=lengths)
    else:
        mb_test(cell, (4, (True, 4), (False, 3)), (4, (True, 4), (False, 2)),
                batch_dim=None, lengths=lengths)


@batch
def _rows_in_a_branch(x, h, flag):
    if flag.sum() > 0:
        h = torch.tanh(_ROWS_CELL(x, h))
    return h


_ROWS_CELL = nn.GRUCell(3, 2).double()


def test_cell_over_rows_under_lanes():
    """Only the examples that take the branch change their rows."""
    mb_test(_rows_in_a_branch, (5, (True, 4), (False, 3)), (5, (True, 4), (False, 2)), (5, ()),
            batch_dim=None, params=list(_ROWS_CELL.parameters()), dtype=torch.float64)
