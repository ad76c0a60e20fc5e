"""nn ops: linear, embedding, embedding_bag, dropout, layer_norm / rms_norm, glu, prelu.

These act on the trailing *static* dimensions of each example (features),
so data = f(data) and the mask and dims of the input are kept (embedding
adds one static feature dimension).

Gradient hygiene: linear, embedding and the norms sum over positions into
their parameters in the backward pass.  When the input has non-real entries
(padding, dormant lanes), those entries are first replaced with ``where``
(so NaN/inf garbage cannot reach the arithmetic) and the output is masked
with ``where`` too (so any cotangent arriving at a padding position is
dropped): padding contributes exactly zero to parameter gradients.
"""
import torch
import torch.nn.functional as F

from . import _registry
from .._lanes import batch_size_hint
from ..core import unlabeled, with_lanes
from ._registry import (canon_mask, is_mb, keep, neutralize, new, on_real_rows, real_mask,
                        register)

__all__ = ["linear", "embedding", "embedding_bag", "dropout", "layer_norm", "rms_norm", "glu", "prelu"]


def _mask_out(out, m):
    """``out`` with entries under a False of ``m`` (broadcast) set to 0."""
    if m is None:
        return out
    return keep(m, out, 0)


def _per_row(input, m, fn, k=1, small=True):
    """``fn`` over the rows (last ``k`` dims) of ``input.padded_data``; non-real rows
    of the result are 0 and pass no gradient.  On CPU only the real rows are
    computed (see ``gathers_rows``; with ``small=False``, not for a small
    ``input``); elsewhere all rows are, with masking (of zeroed rows, which
    ``fn`` must map to finite values with finite gradients)."""
    if _registry.gathers_rows(input._data, small):
        return on_real_rows(input, m, fn, k)
    out = fn(neutralize(input, 0))
    if out.dim() != m.dim():  # (m is 1 along the last k dims already)
        lead = m.dim() - k
        m = m.reshape(m.shape[:lead] + (1,) * (out.dim() - lead))
    return _mask_out(out, m)


def _need_mb(x, opname, argname="input"):
    if not is_mb(x):
        raise NotImplementedError(
            f"{opname}: matchbox supports a MaskedBatch only as the {argname}; got a "
            f"MaskedBatch among the other arguments (per-example parameters are not supported)")


# ------------------------------------------------------------------ linear
@register(F.linear)
def linear(input, weight, bias=None):
    """``F.linear`` / ``nn.Linear`` on the last (static) dimension."""
    _need_mb(input, "linear")
    if is_mb(weight) or is_mb(bias):
        _need_mb(None, "linear")
    if input.dim() < 2:
        raise ValueError(
            "linear: each example is only its leading 1 (a MaskedBatch with no per-example "
            "dimensions); per example the leading 1 would be the feature dimension. "
            "Give each example a feature dimension, e.g. x.unsqueeze(-1)")
    if input.dims[-1]:
        raise ValueError(
            "linear: the last dimension (features) is dynamic, so its size differs between "
            "examples and cannot match the weight; linear needs a static last dimension")
    m = real_mask(input)
    if m is None:
        return new(F.linear(input.padded_data, weight, bias), input._mask, input.dims)
    out = _per_row(input, m, lambda rows: F.linear(rows, weight, bias), small=False)
    return new(out, input._mask, input.dims, zero=True)


# ------------------------------------------------------------------ embedding
@register(F.embedding)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """``F.embedding`` / ``nn.Embedding``: ``input`` a MaskedBatch of indices
    (or, with a MaskedBatch ``weight``, each example's own table, plain
    indices too: ``_own_tables``); the result gains a last dimension.  Indices at non-real entries
    (padding, dormant lanes) may be anything: they are replaced by a valid
    index before the lookup and their rows get no gradient.  Out-of-range
    indices at real entries raise ``IndexError``."""
    if scale_grad_by_freq:
        raise NotImplementedError(
            "embedding with scale_grad_by_freq=True on a MaskedBatch: the frequencies would be "
            "counted over the whole batch instead of per example; matchbox does not support it")
    if is_mb(weight):
        return _own_tables(input, weight, padding_idx, max_norm, sparse)
    _need_mb(input, "embedding")
    idx = input.padded_data
    if idx.dtype not in (torch.long, torch.int, torch.int32, torch.int64):
        raise TypeError(f"embedding: indices must be an integer MaskedBatch, got dtype {idx.dtype}")
    num = weight.size(0)
    m = real_mask(input)
    if m is not None:
        idx = torch.where(m, idx, torch.zeros((), dtype=idx.dtype, device=idx.device))
    _registry.fail_outside(idx, 0, num - 1, lambda first: IndexError(
        f"embedding: index {int(idx[first])} out of range for an embedding with "
        f"{num} rows (example {first[0]}, position {list(first[1:])})"),
        f"embedding: an index is out of range for an embedding with {num} rows")
    if max_norm is not None:
        with torch.no_grad():
            real_idx = idx if m is None else idx[m.expand_as(idx)]
            torch.embedding_renorm_(weight, real_idx.reshape(-1).contiguous(), max_norm, norm_type)

    def lookup(i):
        return F.embedding(i, weight, padding_idx, None, norm_type, False, sparse)
    out = lookup(idx) if m is None else _per_row(input, m, lookup, k=0, small=False)
    mask = input._mask
    if mask is not None:
        mask = mask.unsqueeze(-1)
    return new(out, mask, tuple(input.dims) + (False,), zero=m is not None, present=input._present,
               sizes=input._sizes)


def _own_tables(input, weight, padding_idx, max_norm, sparse):
    """``F.embedding`` with each example's own table: ``weight`` a MaskedBatch
    of ``(V, D)`` tables (either size may vary), ``input`` the example's
    indices (a MaskedBatch) or indices every example looks up in its own
    table (a plain Tensor).  One lookup in the ``(B * V, D)`` stack of the
    tables, each example's indices offset to its table; a table's padding
    rows are never read."""
    if max_norm is not None or sparse:
        raise NotImplementedError(
            "embedding: max_norm and sparse=True need one shared table, and the weight is a "
            "MaskedBatch (one table per example); renormalize the tables (or take dense "
            "gradients) yourself, or give a plain Tensor weight")
    w = unlabeled(weight)  # a (1, D) table with a batch-of-one dimension has 1 row
    if w.dim() != 2:
        raise ValueError(
            f"embedding: each example's weight must be 2-D (num_embeddings, embedding_dim); "
            f"got tables of shape {tuple(weight.maxsize())}")
    table = w.padded_data
    B, V, D = table.shape
    if is_mb(input):
        if input.padded_data.size(0) != B:
            raise ValueError(f"embedding: batch sizes differ ({input.padded_data.size(0)} indices, "
                             f"{B} tables)" + batch_size_hint())
        idx, m, bdim, dims = input.padded_data, real_mask(input), input._bdim, tuple(input.dims)
    else:
        idx = input.unsqueeze(0).expand((B,) + input.shape)
        m, bdim, dims = with_lanes(None, idx.dim()), None, (False,) * input.dim()
    if idx.dtype not in (torch.long, torch.int, torch.int32, torch.int64):
        raise TypeError(f"embedding: indices must be integers, got dtype {idx.dtype}")
    if m is not None:
        idx = torch.where(m, idx, torch.zeros((), dtype=idx.dtype, device=idx.device))
    at = (B,) + (1,) * (idx.dim() - 1)
    rows = w._lengths(1).view(at)
    _registry.fail_if((idx < 0) | (idx >= rows), lambda first: IndexError(
        f"embedding: index {int(idx[first])} out of range for example {first[0]}'s table of "
        f"{int(rows.view(-1)[first[0]])} rows (position {list(first[1:])})"),
        "embedding: an index is out of range for its example's table")
    offset = torch.arange(B, device=idx.device).view(at) * V
    out = F.embedding(idx + offset, table.reshape(B * V, D))
    if padding_idx is not None:  # its rows pass no gradient; negative: from each table's end
        pad = rows + padding_idx if padding_idx < 0 else torch.full_like(rows, padding_idx)
        _registry.fail_if((pad < 0) | (pad >= rows), lambda first: ValueError(
            f"embedding: padding_idx={padding_idx} is outside example {first[0]}'s table"),
            "embedding: padding_idx is outside an example's table")
        out = torch.where((idx == pad).unsqueeze(-1), out.detach(), out)
    mask = input._mask if is_mb(input) else None
    if w.dims[1]:  # each example's own embedding_dim
        cols = torch.arange(D, device=idx.device) < w._lengths(2).view(at + (1,))
        mask = cols if mask is None else mask.unsqueeze(-1) & cols
    elif mask is not None:
        mask = mask.unsqueeze(-1)
    if m is not None:
        out = keep(m.unsqueeze(-1), out, 0)
    out_dims = dims + (w.dims[1],)
    return new(out, canon_mask(mask, out.shape, out_dims), out_dims, bdim=bdim,
               present=getattr(input, "_present", None), sizes=getattr(input, "_sizes", None))


@register(F.embedding_bag)
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """``F.embedding_bag`` / ``nn.EmbeddingBag`` on 2-D examples ``(1, n)``:
    each example is one bag of its real indices (``n`` may be dynamic),
    giving ``(1, dim)``.  Composed of ``embedding`` and a reduction over
    dim 1 (which sees real entries only); entries equal to ``padding_idx``
    are left out of the bag, as torch does."""
    _need_mb(input, "embedding_bag")
    if offsets is not None or input.dim() != 2:
        raise ValueError(
            "embedding_bag on a MaskedBatch takes 2-D examples (1, n), one bag per example "
            f"(its n indices), and no offsets; got {input.dim()}-dim examples"
            f"{' and offsets' if offsets is not None else ''}. Put each bag in its own example")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights is only supported for "
                                  f"mode='sum' (got mode='{mode}'), as in torch")
    e = F.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    if per_sample_weights is not None:
        e = e * per_sample_weights.unsqueeze(-1)
    kept = torch.ones_like(input, dtype=torch.bool) if padding_idx is None else input != padding_idx
    if mode == "max":
        return torch.where(kept.unsqueeze(-1), e, float("-inf")).amax(1)
    if padding_idx is not None:
        e = torch.where(kept.unsqueeze(-1), e, 0.0)
    if mode == "sum":
        return e.sum(1)
    if mode == "mean":  # an empty bag gives 0, as torch
        return e.sum(1) / kept.sum(1, keepdim=True).clamp_min(1)
    raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode!r}")


# ------------------------------------------------------------------ dropout
def _data_only(f):
    def rule(input, *args, **kwargs):
        if kwargs.pop("inplace", False):  # nn.Dropout(inplace=True): see ops/inplace.py
            from .inplace import write_in_place
            return write_in_place(input, rule, args, kwargs, f"{f.__name__}(inplace=True)")
        _need_mb(input, f.__name__)  # each entry is scaled or zeroed: 0 stays 0
        return new(f(input.padded_data, *args, **kwargs), input._mask, input.dims, input._zero)
    rule.__name__ = f.__name__
    rule.__doc__ = (f"``F.{f.__name__}`` on the data (each entry independently, as for "
                    f"one example); mask and dims kept; ``training`` honoured.")
    return rule


dropout = _data_only(F.dropout)
register(F.dropout)(dropout)
for _name in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
    _f = getattr(F, _name, None)
    if _f is not None:
        register(_f)(_data_only(_f))
for _name in ("dropout", "alpha_dropout", "feature_alpha_dropout"):
    _f = getattr(torch, _name, None)
    if _f is not None and _f not in (F.dropout,):
        register(_f)(_data_only(_f))


# ------------------------------------------------------------------ norms
def _check_norm_dims(input, normalized_shape, opname):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    k = len(tuple(normalized_shape))
    nd = input.dim() - 1
    if k > nd:
        raise ValueError(
            f"{opname}: normalized_shape {tuple(normalized_shape)} covers the example's leading "
            f"batch dimension (each example has {nd} dimensions after its leading 1); "
            f"matchbox cannot normalize across examples")
    dyn = [nd - k + i + 1 for i in range(k) if input.dims[nd - k + i]]
    if dyn:
        raise ValueError(
            f"{opname}: normalized_shape {tuple(normalized_shape)} covers dynamic dimension(s) "
            f"{dyn} (sizes differ between examples); the normalized dimensions must be static")


def _norm_rule(f, opname):
    def rule(input, normalized_shape, *args, **kwargs):
        _need_mb(input, opname)
        if any(is_mb(a) for a in args) or any(is_mb(v) for v in kwargs.values()):
            _need_mb(None, opname)
        _check_norm_dims(input, normalized_shape, opname)
        m = real_mask(input)
        if m is None:
            return new(f(input.padded_data, normalized_shape, *args, **kwargs), input._mask, input.dims)
        k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
        out = _per_row(input, m, lambda rows: f(rows, normalized_shape, *args, **kwargs), k)
        return new(out, input._mask, input.dims, zero=True)
    rule.__name__ = opname
    rule.__doc__ = (f"``F.{opname}`` over trailing static dimensions; padding is neutralized so "
                    f"it adds nothing to weight/bias gradients.")
    return rule


layer_norm = register(F.layer_norm)(_norm_rule(F.layer_norm, "layer_norm"))
rms_norm = None
if hasattr(F, "rms_norm"):
    rms_norm = register(F.rms_norm)(_norm_rule(F.rms_norm, "rms_norm"))


# ------------------------------------------------------------------ glu
@register(F.glu)
def glu(input, dim=-1):
    """``F.glu`` over a static dimension (halves it)."""
    _need_mb(input, "glu")
    n = input.padded_data.dim()
    d = dim + n if dim < 0 else dim
    if not 0 <= d < n:
        raise IndexError(f"glu: dimension {dim} out of range for a MaskedBatch with {n} dims")
    if d == 0:
        raise ValueError("glu over dimension 0 would mix examples: dimension 0 is the batch")
    if input.dims[d - 1]:
        raise ValueError(
            f"glu: dimension {dim} is dynamic; glu splits its dimension in half, which needs "
            f"a static dimension")
    return new(F.glu(input.padded_data, d), input._mask, input.dims)


# ------------------------------------------------------------------ prelu
@register(*{f: None for f in (F.prelu, torch.prelu, getattr(torch.Tensor, "prelu", None)) if f is not None})
def prelu(input, weight):
    """``F.prelu`` / ``nn.PReLU``: the weight applies along dimension 1 (the
    channels of a ``(1, C, ...)`` example), which must be static when the
    weight has more than one entry."""
    _need_mb(input, "prelu")
    if is_mb(weight):
        _need_mb(None, "prelu")
    if weight.numel() != 1:
        if input.padded_data.dim() < 2:
            raise ValueError("prelu with several weights needs a channel dimension (dimension 1)")
        if input.dims[0]:
            raise ValueError(
                "prelu: the channel dimension (dimension 1) is dynamic; with one weight per "
                "channel it must be static")
    m = real_mask(input)
    if m is None:
        return new(F.prelu(input.padded_data, weight), input._mask, input.dims)
    out = _mask_out(F.prelu(neutralize(input, 0), weight), m)
    return new(out, input._mask, input.dims, zero=True)


@register(F.one_hot)
def one_hot(tensor, num_classes=-1):
    """A trailing static class dim; padding entries become class 0 first so
    garbage there cannot raise.  ``num_classes`` must be given: inferred
    from each example's own maximum it would differ between examples."""
    _need_mb(tensor, "one_hot")
    if num_classes < 0:
        raise ValueError(
            "one_hot on a MaskedBatch needs num_classes=...: inferred from the values it "
            "would differ between examples")
    out = F.one_hot(neutralize(tensor, 0), num_classes)
    mask = None if tensor._mask is None else tensor._mask.unsqueeze(-1)
    return new(out, mask, tensor.dims + (False,))
