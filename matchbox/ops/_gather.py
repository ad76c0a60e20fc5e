"""Row gathers that share one gradient buffer per source.

Per-example indexing gathers a few rows of the same batch many times in
one forward pass (the parser reads 12 BiLSTM vectors per transition, ~3500
gathers of one ``(B, n, d)`` Tensor per step).  Each ``index_select``'s
backward makes a zero Tensor the size of the whole source, adds its rows,
and autograd sums those full-size gradients: at the parser's paper size
that was two thirds of the training step.

``select_rows(t, rows)`` gathers through a node that adds its rows'
gradient into one buffer kept for ``t`` (``index_add_``), and one node
per source (``_Source``, run after every gather of it) hands that buffer
to ``t`` as its gradient.  The values and gradients are
``t.index_select(0, rows)``'s.  Used for non-leaf sources that require
grad, eagerly (a leaf's gradient node would hold ``t``, a cycle through
the buffer's holder that Python's collector cannot see; torch.compile
traces ``index_select``).  Double backward works: under ``create_graph``
autograd records the adds.
"""
import torch


class _Buffer:
    """The gradient of a source, summed over its gathers' backward."""
    __slots__ = ("grad", "rows")

    def __init__(self, rows):
        self.grad, self.rows = None, rows


class _Source(torch.autograd.Function):
    """``t`` -> a 0-dim token that every gather of ``t`` takes as input,
    so that this backward runs after all of theirs: it gives ``t`` the
    buffer's sum."""

    @staticmethod
    def forward(ctx, t, buffer):
        ctx.buffer, ctx.shape = buffer, t.shape
        return t.new_zeros(())

    @staticmethod
    def backward(ctx, _):
        grad, ctx.buffer.grad = ctx.buffer.grad, None  # (a second backward starts anew)
        return (None if grad is None else grad.view(ctx.shape)), None


class _Rows(torch.autograd.Function):
    """``flat.index_select(0, rows)`` with the rows ``zeros`` of the result
    0; backward adds into the buffer."""

    @staticmethod
    def forward(ctx, token, flat, rows, buffer, zeros):
        ctx.rows, ctx.buffer, ctx.zeros = rows, buffer, zeros
        return _filled(flat.index_select(0, rows), zeros)

    @staticmethod
    def backward(ctx, grad):
        buffer, zeros = ctx.buffer, ctx.zeros
        if buffer.grad is None:
            buffer.grad = grad.new_zeros((buffer.rows, grad.size(1)))
        if zeros is not None:
            grad = grad.index_fill(0, zeros, 0)
        buffer.grad.index_add_(0, ctx.rows, grad)  # (recorded, under create_graph)
        return None, None, None, None, None


def _filled(out, zeros):
    return out if zeros is None else out.index_fill_(0, zeros, 0)


def select_rows(t, rows, zeros=None):
    """The ``rows`` of contiguous ``t`` seen as ``(t.size(0) * t.size(1), -1)``
    (the entries of its dims after the first two make a row); the rows
    ``zeros`` of the result (positions in ``rows``; None: none) are 0 and
    take no gradient (filled in place: a ``masked_fill`` of the result
    costs 3x as much on CPU)."""
    if torch.compiler.is_compiling() or not (  # (dynamo cannot read grad_fn)
            t.requires_grad and torch.is_grad_enabled() and t.grad_fn is not None):
        out = t.reshape(t.size(0) * t.size(1), t.shape[2:].numel()).index_select(0, rows)
        return _filled(out, zeros)
    kept = getattr(t, "_mb_rows", None)
    if kept is None or kept[0] != t._version:
        buffer = _Buffer(t.size(0) * t.size(1))
        kept = (t._version, _Source.apply(t, buffer),
                t.detach().reshape(t.size(0) * t.size(1), t.shape[2:].numel()), buffer)
        t._mb_rows = kept
    return _Rows.apply(kept[1], kept[2], rows, kept[3], zeros)
