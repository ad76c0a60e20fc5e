"""``torch.autograd.grad`` and ``torch.autograd.backward`` with MaskedBatch
outputs and inputs (gradient penalties, meta-learning).

Per example, ``torch.autograd.grad(y, x)`` is that example's gradient of
its own ``y``.  On a batch:

- a MaskedBatch input gets one backward pass: examples do not mix, so the
  gradient of the sum over examples, taken with respect to the padded
  storage, holds each example's own gradient in its rows (padding gets none);
- a plain Tensor input (weights every example shares) gets each example's
  own gradient, a MaskedBatch of one per example: one backward pass under
  vmap over one-hot cotangents (``is_grads_batched``), or, where vmap
  cannot run a backward, one pass per example;
- ``grad_outputs`` default to 1 where each example's output is one number;
  a MaskedBatch or a Tensor (one example's, every example takes it)
  otherwise, as for one example; padding and dormant lanes get 0;
- ``create_graph=True`` keeps the graph of the gradients, so a penalty on
  them backpropagates per example too.

A plain Tensor output (already combined over examples, e.g.
``matchbox.example_mean(loss)``) is what it is: its gradient with respect
to a MaskedBatch input is each example's share.  ``backward`` accumulates
the sum over examples, as a loop over them does (``MaskedBatch.backward``).
"""
import torch

from ..core import example_to_storage, real_mask, refuse_absent
from ._registry import is_mb, keep, new, register

__all__ = ["grad", "backward"]


def _seq(v):
    if v is None:
        return None
    if is_mb(v) or isinstance(v, torch.Tensor):
        return [v]
    return list(v.values()) if type(v) is dict else list(v)


def _cotangent(y, g, implicit):
    """The padded cotangent of MaskedBatch output ``y`` for ``grad_outputs``
    entry ``g``: 0 wherever ``y`` is not real."""
    data = y.padded_data
    if g is None:
        if implicit and (any(y.dims) or data.shape[1:].numel() != 1):
            raise RuntimeError(
                "grad can be implicitly created only for scalar outputs: each example's output "
                "has more than one element; give grad_outputs (or reduce it per example first, "
                "e.g. y.sum())")
        g = torch.ones_like(data)
    elif is_mb(g):
        g = g.padded_data
        if g.shape != data.shape:
            raise ValueError(f"grad_outputs: a MaskedBatch of padded shape {tuple(g.shape)} for "
                             f"an output of padded shape {tuple(data.shape)}")
    else:
        g = example_to_storage(torch.as_tensor(g, dtype=data.dtype, device=data.device),
                               y._bdim, "grad_outputs").expand(data.shape)
    m = real_mask(y)
    return g if m is None else keep(m, g, 0)


def _outputs(outputs, grad_outputs, implicit):
    outs = _seq(outputs)
    gos = _seq(grad_outputs) or [None] * len(outs)
    if len(gos) != len(outs):
        raise RuntimeError(f"grad_outputs has {len(gos)} entries for {len(outs)} outputs")
    datas, cots = [], []
    for y, g in zip(outs, gos):
        if is_mb(y):
            datas.append(y.padded_data)
            cots.append(_cotangent(y, g, implicit))
        else:
            datas.append(y)
            cots.append(g.padded_data if is_mb(g) else g)
    return outs, datas, cots


@register(torch.autograd.grad)
def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Each example's gradients of its outputs (see the module docstring)."""
    if is_grads_batched:
        raise NotImplementedError(
            "torch.autograd.grad(..., is_grads_batched=True) with MaskedBatch operands: the "
            "examples are already the batch; give one cotangent per example as a MaskedBatch")
    outs, datas, cots = _outputs(outputs, grad_outputs, True)
    ins = _seq(inputs)
    per = any(is_mb(y) for y in outs)
    shared = [i for i, x in enumerate(ins) if not is_mb(x)] if per else []
    if shared and not all(is_mb(y) for y in outs):
        raise NotImplementedError(
            "torch.autograd.grad: a plain Tensor input with both per-example (MaskedBatch) and "
            "plain Tensor outputs: its gradient would be per example for some outputs and "
            "combined over examples for others; take them in two calls")
    mine = [i for i in range(len(ins)) if i not in shared]
    out = [None] * len(ins)
    retain = create_graph if retain_graph is None else retain_graph
    kw = dict(create_graph=create_graph, allow_unused=allow_unused)
    if materialize_grads:  # (torch >= 2.2)
        kw["materialize_grads"] = True
    if mine:
        gs = torch.autograd.grad(datas, [ins[i].padded_data if is_mb(ins[i]) else ins[i]
                                         for i in mine], cots,
                                 retain_graph=retain or bool(shared), **kw)
        for i, g in zip(mine, gs):
            x = ins[i]
            out[i] = g if g is None or not is_mb(x) else new(
                g, x._mask, x.dims, bdim=x._bdim, present=x._present, sizes=x._sizes)
    if shared:
        for i, g in zip(shared, _per_example_grads(datas, cots, [ins[i] for i in shared],
                                                   retain, kw)):
            out[i] = None if g is None else new(g, None, (False,) * (g.dim() - 1), bdim=None)
    return tuple(out)


def _per_example_grads(datas, cots, params, retain, kw):
    """``(B, *p.shape)`` per shared input ``p``: each example's own gradient."""
    B = datas[0].size(0)
    eye = torch.eye(B, dtype=torch.bool, device=datas[0].device)
    one_hot = [torch.where(eye.view((B, B) + (1,) * (c.dim() - 1)), c.unsqueeze(0), 0)
               for c in cots]
    try:  # (the graph kept: a failed try must leave it for the passes below)
        return torch.autograd.grad(datas, params, one_hot, retain_graph=True,
                                   is_grads_batched=True, **kw)
    except RuntimeError:  # a backward vmap cannot run: one pass per example
        rows = [torch.autograd.grad(datas, params, [c[b] for c in one_hot],
                                    retain_graph=retain or b < B - 1, **kw) for b in range(B)]
        return [None if r[0] is None else torch.stack(r) for r in zip(*rows)]


@register(torch.autograd.backward)
def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None,
             inputs=None):
    """Accumulate into ``.grad`` the sum over examples of each example's
    gradients, as a loop over the examples calling ``backward`` does."""
    for y in _seq(tensors):
        if is_mb(y):
            refuse_absent(y, "torch.autograd.backward")
    _, datas, cots = _outputs(tensors, grad_tensors, False)
    ins = _seq(inputs)
    torch.autograd.backward(datas, cots, retain_graph=retain_graph, create_graph=create_graph,
                            inputs=None if ins is None else [
                                x.padded_data if is_mb(x) else x for x in ins])
