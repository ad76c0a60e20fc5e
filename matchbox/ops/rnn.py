"""Recurrent cells: the functions ``nn.RNNCell`` / ``nn.LSTMCell`` /
``nn.GRUCell`` call (``torch._VF.rnn_tanh_cell``, ``rnn_relu_cell``,
``lstm_cell``, ``gru_cell``; the same objects as ``torch.rnn_tanh_cell`` ...).

Each example is ``(1, features)``: input and hidden state(s) are MaskedBatch
with static dims, or plain Tensors with leading size 1 (shared by every
example) or ``B`` (e.g. the zero state the cell modules build themselves
from ``input.size(0)``).  The result mask is the conjunction of the operands'
(lane) masks.  Non-real lanes (a False mask, or dormant SIMT lanes) are fed
zeros and their outputs zeroed with ``where``, so they never leak NaN and add
nothing to the weight gradients.
"""
import torch

from ._registry import is_mb, new, real_mask, register

__all__ = ["rnn_tanh_cell", "rnn_relu_cell", "lstm_cell", "gru_cell"]


def _operands(opname, tensors):
    """Line up input and hidden states: returns their datas (B, F), the
    result mask (or None), and the mask of lanes to neutralize (or None)."""
    batches = [t for t in tensors if is_mb(t)]
    B = batches[0].data.size(0)
    datas, mask, real = [], None, None
    names = ["input"] + [f"hidden state {i}" for i in range(len(tensors) - 1)]
    for name, t in zip(names, tensors):
        if is_mb(t):
            if t.data.dim() != 2:
                raise ValueError(
                    f"{opname}: the {name} must be (1, features) per example; got a MaskedBatch "
                    f"with {t.data.dim() - 1} dimensions after the leading 1")
            if any(t.dims):
                raise ValueError(
                    f"{opname}: the {name} has a dynamic feature dimension; RNN cells need "
                    f"static feature sizes (loop over a dynamic time dimension with "
                    f"x.unbind(1) and feed each (1, features) step)")
            if t.data.size(0) != B:
                raise ValueError(f"{opname}: batch sizes differ ({B} vs {t.data.size(0)})")
            if t._mask is not None:
                mask = t._mask if mask is None else mask & t._mask
            r = real_mask(t)
            if r is not None:
                real = r if real is None else real & r
            datas.append(t.data)
        elif isinstance(t, torch.Tensor):
            if t.dim() != 2 or t.size(0) not in (1, B):
                raise ValueError(
                    f"{opname}: a plain Tensor {name} of shape {tuple(t.shape)} must be "
                    f"(1, features) (shared by every example) or ({B}, features)")
            datas.append(t.expand(B, t.size(1)) if t.size(0) != B else t)
        else:
            raise TypeError(f"{opname}: the {name} must be a Tensor or MaskedBatch, got {type(t).__name__}")
    if real is None:
        from .._lanes import active_lanes
        lanes = active_lanes()
        if lanes is not None:
            real = lanes.view(-1, 1)
    if real is not None:
        zero = torch.zeros((), dtype=datas[0].dtype, device=datas[0].device)
        datas = [torch.where(real, d, zero) for d in datas]
    return datas, mask, real


def _finish(out, mask, real):
    if real is not None:
        out = torch.where(real, out, torch.zeros((), dtype=out.dtype, device=out.device))
    return new(out, mask, (False,))


def _check_params(opname, params):
    if any(is_mb(p) for p in params):
        raise NotImplementedError(f"{opname}: per-example weights (a MaskedBatch weight) are not supported")


def _simple_cell(f, opname):
    def rule(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        _check_params(opname, (w_ih, w_hh, b_ih, b_hh))
        (x, h), mask, real = _operands(opname, [input, hx])
        return _finish(f(x, h, w_ih, w_hh, b_ih, b_hh), mask, real)
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
    (x, h, c), mask, real = _operands("lstm_cell", [input, hx[0], hx[1]])
    h2, c2 = torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)
    return _finish(h2, mask, real), _finish(c2, mask, real)
