"""Recurrent ops: the cells and the whole-sequence layers.

Cells: the functions ``nn.RNNCell`` / ``nn.LSTMCell`` / ``nn.GRUCell`` call
(``torch._VF.rnn_tanh_cell``, ``rnn_relu_cell``, ``lstm_cell``, ``gru_cell``;
the same objects as ``torch.rnn_tanh_cell`` ...).  Each example is
``(1, features)``: input and hidden state(s) are MaskedBatch with static dims,
or plain Tensors with leading size 1 (shared by every example) or ``B`` (e.g.
the zero state the cell modules build themselves from ``input.size(0)``).
The result mask is the conjunction of the operands' (lane) masks.  Non-real
lanes (a False mask, or dormant SIMT lanes) never reach the cell: on CPU only
the real rows are gathered, run and scattered back (the others get zeros,
or, when only dormant lanes are left out, the old state's rows); on GPU
(where finding the rows would wait for the device) every row runs,
non-real ones fed zeros and their outputs zeroed with ``where``.  Either
way they never leak NaN and add nothing to the weight gradients.

Whole sequences: ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` end in
``torch._VF.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (the same objects
as ``torch.lstm`` ...); everything their ``forward`` does before that
(``input.dim()``, ``input.size(0)``, the zero states) already works on a
MaskedBatch.  The rules run the real steps of every example as ONE packed
call (see :func:`lstm`).
"""
import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .._lanes import active_lanes, batch_size_hint
from ..core import adopt
from . import _registry
from .lanes import Lanes, nested
from ._registry import (is_mb, keep, new, real_mask, register, scatter_rows, true_rows, uncut,
                        with_lanes)

__all__ = ["rnn_tanh_cell", "rnn_relu_cell", "lstm_cell", "gru_cell",
           "lstm", "gru", "rnn_tanh", "rnn_relu"]


def _operands(opname, tensors):
    """Line up input and hidden states: returns their datas (B, F), the
    result mask (or None), and the (B, 1) mask of real lanes (or None).
    Non-real lanes never reach the cell (``_run``): ``uncut`` data."""
    batches = [t for t in tensors if is_mb(t)]
    B = batches[0]._data.size(0)
    datas, mask = [], None
    for i, t in enumerate(tensors):
        name = "input" if i == 0 else f"hidden state {i - 1}"
        if is_mb(t):
            t = adopt(t, 0, f"{opname}: the {name}") if t._bdim != 0 and t.dim() == 2 else t
            if t._data.dim() != 2 or t._bdim != 0:
                raise ValueError(
                    f"{opname}: the {name} must be (1, features) per example; got a MaskedBatch "
                    f"with {t._data.dim() - 1} dimensions after the leading 1")
            if any(t.dims):
                raise ValueError(
                    f"{opname}: the {name} has a dynamic feature dimension; RNN cells need "
                    f"static feature sizes (loop over a dynamic time dimension with "
                    f"x.unbind(1) and feed each (1, features) step)")
            if t._data.size(0) != B:
                raise ValueError(f"{opname}: batch sizes differ ({B} vs {t._data.size(0)})" + batch_size_hint())
            if t._mask is not None and t._mask is not mask:
                mask = t._mask if mask is None else mask & t._mask
            datas.append(uncut(t))
        elif isinstance(t, torch.Tensor):
            if t.dim() != 2 or t.size(0) not in (1, B):
                raise ValueError(
                    f"{opname}: a plain Tensor {name} of shape {tuple(t.shape)} must be "
                    f"(1, features) (shared by every example) or ({B}, features)")
            datas.append(t.expand(B, t.size(1)) if t.size(0) != B else t)
        else:
            raise TypeError(f"{opname}: the {name} must be a Tensor or MaskedBatch, got {type(t).__name__}")
    return datas, mask, with_lanes(mask, 2)


def _run(cell, datas, mask, real):
    """``cell(*datas)`` (a tuple of (B, H) results, the i-th the new value
    of the state ``datas[i + 1]``) on the real lanes only; MaskedBatch
    results with ``mask``, 0 in the other lanes.  Where only the active
    lanes limit the real ones, a gathered run writes its rows into the old
    states instead: @batch's masked update of a state by its new value
    then has nothing left to do (``_update_of``)."""
    if real is None:
        outs = cell(*datas)
    elif _registry.gathers_rows(datas[0]):
        rows = true_rows(real)
        if rows.numel() == real.size(0):  # every lane real after all: nothing to gather
            return tuple(new(o, mask, (False,)) for o in cell(*datas))
        outs = cell(*(d.index_select(0, rows) for d in datas))
        if mask is None:
            return tuple(_written_into(state, rows, o) for state, o in zip(datas[1:], outs))
        outs = tuple(scatter_rows(o, rows, real.size(0)) for o in outs)
    else:
        outs = cell(*(keep(real, d, 0) for d in datas))
        outs = tuple(keep(real, o, 0) for o in outs)
    return tuple(new(o, mask, (False,), zero=True) for o in outs)


def _written_into(state, rows, out):
    """The (unmasked) MaskedBatch that is ``state`` with ``rows`` replaced
    by ``out``: equal to ``state`` outside the active lanes."""
    x = new(state.index_copy(0, rows, out), None, (False,))
    x._update_of = (state, state._version, active_lanes())
    return x


def _on_rows(tensors, cell):
    """A cell run on each row of per-example ``(n, features)`` operands with
    no batch-of-one dimension (``self.gru(torch.stack(msgs), h)`` over a
    graph's ``n`` nodes: the cell's own batch is the nodes): the ``B * n``
    rows as one cell call, the real rows of the active examples only.  None
    where the operands are not all such."""
    if not all(is_mb(t) and t._bdim is None and t._data.dim() == 3 and not t.dims[1]
               and t._present is None and t._sizes is None for t in tensors):
        return None
    B, n = tensors[0]._data.shape[:2]
    if any(t._data.shape[:2] != (B, n) for t in tensors):
        return None
    mask = None
    for t in tensors:
        if t._mask is not None:
            mask = t._mask if mask is None else mask & t._mask
    real = with_lanes(mask, 3)
    flat = None if real is None else real.expand(B, n, 1).reshape(B * n, 1)
    outs = _run(cell, [uncut(t).reshape(B * n, -1) for t in tensors], flat, flat)
    dims = (any(t.dims[0] for t in tensors), False)
    return tuple(new(o._data.view(B, n, -1), mask, dims, zero=flat is not None, bdim=None)
                 for o in outs)


def _check_params(opname, params):
    if any(is_mb(p) for p in params):
        raise NotImplementedError(f"{opname}: per-example weights (a MaskedBatch weight) are not supported")


def _simple_cell(f, opname):
    def rule(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        _check_params(opname, (w_ih, w_hh, b_ih, b_hh))
        cell = lambda x, h: (f(x, h, w_ih, w_hh, b_ih, b_hh),)   # noqa: E731
        rows = _on_rows([input, hx], cell)
        if rows is not None:
            return rows[0]
        datas, mask, real = _operands(opname, [input, hx])
        return _run(cell, datas, mask, real)[0]
    rule.__name__ = opname
    rule.__doc__ = f"``torch.{opname}`` for MaskedBatch input and/or hidden state."
    return rule


rnn_tanh_cell = register(torch.rnn_tanh_cell)(_simple_cell(torch.rnn_tanh_cell, "rnn_tanh_cell"))
rnn_relu_cell = register(torch.rnn_relu_cell)(_simple_cell(torch.rnn_relu_cell, "rnn_relu_cell"))
gru_cell = register(torch.gru_cell)(_simple_cell(torch.gru_cell, "gru_cell"))


@register(torch.lstm_cell)
def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``torch.lstm_cell`` (``nn.LSTMCell``): ``hx`` is the pair ``(h, c)``;
    returns ``(h', c')``, both with the conjunction of the operands' masks."""
    _check_params("lstm_cell", (w_ih, w_hh, b_ih, b_hh))
    hx = tuple(hx)
    if len(hx) != 2:
        raise ValueError(f"lstm_cell: hx must be a pair (h, c), got {len(hx)} tensors")
    cell = lambda x, h, c: torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)   # noqa: E731
    rows = _on_rows([input, hx[0], hx[1]], cell)
    if rows is not None:
        return rows
    datas, mask, real = _operands("lstm_cell", [input, hx[0], hx[1]])
    return _run(cell, datas, mask, real)


# ------------------------------------------------------------------ whole sequences
def _check_layer(opname, input, hx, params, has_biases, batch_first):
    """Refuse, with the reason, what the packed call cannot run per example."""
    if not isinstance(has_biases, bool):  # the (data, batch_sizes, hx, ...) overload
        raise NotImplementedError(
            f"{opname}: a PackedSequence built from MaskedBatch data is not supported; pass "
            f"the MaskedBatch itself to the module (matchbox packs it for you)")
    if not is_mb(input):
        raise NotImplementedError(
            f"{opname}: the input must be the MaskedBatch (each example one sequence); "
            f"give weights as plain Tensors")
    if input.padded_data.dim() != 3:
        raise ValueError(
            f"{opname}: each example must be one sequence, (1, n, features) with "
            f"batch_first=True or (n, 1, features) without; got per-example shape "
            f"{tuple(input.maxsize())}")
    if input.dims[1]:
        raise ValueError(
            f"{opname}: the feature dimension is dynamic; the layer needs a static "
            f"number of input features")
    _check_params(opname, params)


def _packed(f, input, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    """Run ``f`` over the real steps of each example; returns the padded
    output (B, n, D*H) and the final states in torch layout (L*D, B, H)."""
    x, B, n = input.padded_data, input.padded_data.size(0), input.padded_data.size(1)
    real = real_mask(input)
    if real is None or B == 0:  # every step of every example is real (or no example): one plain call
        res = f(x, hx if len(hx) > 1 else hx[0], params, has_biases, num_layers, dropout,
                train, bidirectional, True)
        return res[0], list(res[1:])
    steps = real.any(-1).expand(B, n)  # (B, n): real (and active) time steps
    lengths = steps.sum(1)
    host = lengths.cpu()
    empty = bool((host == 0).any())  # no real step: dormant lane or empty example
    # zeros where not real: a lane with no step reads its position 0 (packing needs >= 1)
    x = keep(real, x, 0)
    packed = pack_padded_sequence(x, host.clamp(min=1), batch_first=True, enforce_sorted=False)
    order, back = packed.sorted_indices, packed.unsorted_indices
    hs = [h.index_select(1, order) for h in hx]
    res = f(packed.data, packed.batch_sizes, hs if len(hs) > 1 else hs[0], params, has_biases,
            num_layers, dropout, train, bidirectional)
    out, _ = pad_packed_sequence(PackedSequence(res[0], packed.batch_sizes, order, back),
                                 batch_first=True, total_length=n)
    states = [s.index_select(1, back) for s in res[1:]]
    if empty:  # such a lane ran one zero step: keep its state and gradients out
        none = (lengths == 0).view(1, B, 1)
        states = [torch.where(none, h, s) for h, s in zip(hx, states)]
        out = torch.where(steps.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out, states


def _state(h, B, opname):
    """An initial state, per example ``(L * D, 1, hidden)`` (a MaskedBatch,
    or a plain Tensor shared by every example), in torch's padded layout
    ``(L * D, B, hidden)``."""
    if is_mb(h):
        h = adopt(h, 1, f"{opname}: the initial state").padded_data
        if h.dim() != 3 or h.size(0) != B:
            raise ValueError(f"{opname}: the initial state must be (num_layers * num_directions, "
                             f"1, hidden) per example")
        return h.transpose(0, 1)
    if h.dim() != 3 or h.size(1) != 1:
        raise ValueError(
            f"{opname}: a plain Tensor initial state of shape {tuple(h.shape)} is shared by "
            f"every example, so it must be (num_layers * num_directions, 1, hidden), as for one "
            f"example; per-example states are MaskedBatch values")
    return h.expand(h.size(0), B, *h.shape[2:])


def _layer(f, opname):
    def rule(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        hx = tuple(hx) if isinstance(hx, (tuple, list)) else (hx,)
        m = 0 if batch_first else 1  # each example's own batch: its items (ops/lanes.py)
        if is_mb(input) and input.dim() == 3 and nested(input, m):
            items = Lanes(input, m, opname)
            hx = tuple(items.fold(h, 1) if is_mb(h) else items.plain(h, 1) for h in hx)
            return items.run(rule, items.fold(input, m), hx if len(hx) > 1 else hx[0], params,
                             has_biases, num_layers, dropout, train, bidirectional, batch_first)
        if is_mb(input):
            try:
                input = adopt(input, m, f"{opname} (batch_first={batch_first}): the input")
            except ValueError as e:
                raise ValueError(
                    f"{e}: build the layer with batch_first={not batch_first} for such "
                    f"examples (examples with no batch-of-one dimension run their dimension {m} "
                    f"as a batch of sequences each, as torch does)") from None
        _check_layer(opname, input, hx, params, has_biases, batch_first)
        B = input.padded_data.size(0)
        hx = tuple(_state(h, B, opname) for h in hx)
        out, states = _packed(f, input, hx, params, has_biases, num_layers, dropout, train,
                              bidirectional)
        # states per example (L * D, 1, hidden): batch-first storage, the
        # batch-of-one dimension at 1
        states = [new(s.transpose(0, 1), None, (False, False), bdim=1) for s in states]
        return (new(out, input._mask, input.dims, bdim=input.batch_dim), *states)
    rule.__name__ = opname
    rule.__doc__ = f"``torch.{opname}`` (what ``nn.{_MODULE[opname]}`` calls); see :func:`lstm`."
    return rule


_MODULE = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
gru = register(torch.gru)(_layer(torch.gru, "gru"))
rnn_tanh = register(torch.rnn_tanh)(_layer(torch.rnn_tanh, "rnn_tanh"))
rnn_relu = register(torch.rnn_relu)(_layer(torch.rnn_relu, "rnn_relu"))
lstm = register(torch.lstm)(_layer(torch.lstm, "lstm"))
lstm.__doc__ = """``torch.lstm``, what ``nn.LSTM(..., batch_first=True)(x, hx)`` calls; the
GRU and RNN rules work the same way.

Per example, ``x`` is ``(1, n, features)`` (``n`` may be dynamic) and the
layer runs as on that one sequence: every direction and layer sees only the
example's own ``n`` steps (the backward direction starts at its own last
step), so ``output`` is a MaskedBatch ``(1, n, D * hidden)`` per example
with the input's mask, and ``h_n`` (and ``c_n``) hold each example's state
after its own last step (backward direction: after its first token).

States are what one example has: ``h0`` / ``c0`` and ``h_n`` / ``c_n`` are
``(L * D, 1, hidden)`` per example, MaskedBatch values whose batch-of-one
dimension sits at 1 (or, for ``h0``, a plain Tensor of that shape shared by
every example, such as the zero state the module builds).  So ``h_n[-1]``
is ``(1, hidden)`` per example and ``h_n`` can start another layer.

With ``batch_first=False`` each example is sequence-first, ``(n, 1,
features)`` (its batch-of-one dimension at 1, e.g. from
``MaskedBatch.fromlist(xs, batch_dim=1)``), as in the PyTorch tutorials;
output follows the input's layout.  Dropout
between layers (``dropout > 0`` in training) is drawn over the real steps
only, so it is distributed as for each example alone, though its random
numbers differ from a per-example run; in eval mode results are exact.

Implementation: the real steps are packed (``pack_padded_sequence`` with
each example's length) and run in one ``torch.lstm`` call over the
``PackedSequence``, then unpacked, so padding never enters the recurrence
or any gradient.  Without padding it is one plain call.  An example with no
real step (a dormant lane) keeps its initial state and gets no gradient."""
