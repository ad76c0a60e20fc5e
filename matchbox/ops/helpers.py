"""Example-level helpers that exist on both MaskedBatch and torch.Tensor.

SPEC section 2: ``batch_zeros / batch_ones / batch_empty``, ``split_dim``,
``join_dims``, ``causal_mask``, ``maxsize``, ``size_as_tensor``.  On a plain
Tensor they have the meaning they have for one example (batch dim first);
they are added to ``torch.Tensor`` only under these names, which PyTorch
does not define (checked at import).
"""
import torch

from ..core import MaskedBatch, mask_from_lengths, storage_dim
from ._registry import is_mb, new, register_distinct

HELPERS = {}


def helper(fn):
    HELPERS[fn.__name__] = fn
    return fn


def _batch_new(fill, name):
    def make(x, *size, dtype=None, device=None, requires_grad=False):
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        data = x.padded_data if is_mb(x) else x
        out = fill((data.size(0),) + tuple(size), dtype=dtype or data.dtype,
                   device=device or data.device, requires_grad=requires_grad)
        return new(out, None, (False,) * len(size)) if is_mb(x) else out
    make.__name__ = make.__qualname__ = name
    make.__doc__ = (f"A batch shaped like x's with per-example shape ``size``, filled by "
                    f"torch.{fill.__name__} (static dims, every entry real).")
    return helper(make)


batch_zeros = _batch_new(torch.zeros, "batch_zeros")
batch_ones = _batch_new(torch.ones, "batch_ones")
batch_empty = _batch_new(torch.empty, "batch_empty")


@helper
def maxsize(x, dim=None):
    """The padded size along ``dim`` (for a Tensor, its size)."""
    return x.maxsize(dim) if is_mb(x) else (x.size() if dim is None else x.size(dim))


@helper
def size_as_tensor(x, dim):
    """Per-example sizes along ``dim`` as a long Tensor ``(B,)`` (for a
    MaskedBatch, a MaskedBatch of one long per example)."""
    if is_mb(x):
        return x.size_as_tensor(dim)
    return torch.full((x.size(0),), x.size(dim), dtype=torch.long, device=x.device)


@helper
def causal_mask(x, in_dim, out_dim):
    """Set ``x[..., i, ..., j, ...]`` to ``-inf`` where the index ``i`` along
    ``in_dim`` is greater than the index ``j`` along ``out_dim``, so that a
    softmax over ``in_dim`` gives those entries zero weight.  For attention
    scores ``(1, T_query, T_key)``, ``scores.causal_mask(2, 1)`` hides future
    keys."""
    data = x.padded_data if is_mb(x) else x
    n = data.dim()
    if is_mb(x):  # the dims of the data that per-example dims in_dim / out_dim are
        i, j = storage_dim(x, in_dim, "causal_mask"), storage_dim(x, out_dim, "causal_mask")
    else:
        i = in_dim + n if in_dim < 0 else in_dim
        j = out_dim + n if out_dim < 0 else out_dim
    if i == 0 or j == 0 or i == j:
        raise ValueError("causal_mask needs two different per-example dimensions")
    ii = torch.arange(data.size(i), device=data.device)
    jj = torch.arange(data.size(j), device=data.device)
    shape_i, shape_j = [1] * n, [1] * n
    shape_i[i], shape_j[j] = -1, -1
    hide = ii.view(shape_i) > jj.view(shape_j)
    out = data.masked_fill(hide, float("-inf"))
    return new(out, x._mask, x.dims, bdim=x._bdim) if is_mb(x) else out


@register_distinct(torch.is_floating_point, torch.Tensor.is_floating_point)
def is_floating_point(input):
    """Whether the examples' dtype is floating point (nn.MultiheadAttention
    asks it of a key_padding_mask)."""
    return input.dtype.is_floating_point


def _like(fn):
    """``torch.zeros_like(x)`` and kin: a fresh value per entry, x's mask and dims."""
    def rule(input, *args, **kwargs):
        return new(fn(input.padded_data, *args, **kwargs), input._mask, input.dims)
    rule.__name__ = rule.__qualname__ = fn.__name__
    return rule


for _fn in (torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like,
            torch.rand_like, torch.randn_like, torch.randint_like):
    register_distinct(_fn)(_like(_fn))


def install():
    """Attach the helpers to MaskedBatch and torch.Tensor (new names only)."""
    for name, fn in HELPERS.items():
        if name not in MaskedBatch.__dict__:
            setattr(MaskedBatch, name, fn)
        existing = getattr(torch.Tensor, name, None)
        if existing is None:
            setattr(torch.Tensor, name, fn)
        elif existing is not fn and getattr(existing, "__module__", "").split(".")[0] != "matchbox":
            raise RuntimeError(
                f"torch.Tensor already defines {name!r}; matchbox will not replace it")


def _new_ctor(name):
    """``x.new_zeros(1, h)`` and kin, in per-example code: with a leading 1
    (each example's own batch of one, ``x.size(0)``) a fresh value per
    example (a batch of every example's, static dims, all real); with any
    other leading size one plain Tensor, shared by every example."""
    method = getattr(torch.Tensor, name)

    def rule(input, *args, **kwargs):
        data = input.padded_data
        if name == "new_full":
            size, rest = args[0] if args else kwargs.pop("size"), args[1:]
        elif len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
            size, rest = args[0], ()
        else:
            size, rest = (args or kwargs.pop("size", ())), ()
        size = tuple(int(s) for s in size)
        if size and size[0] == 1:
            out = method(data, (data.size(0),) + size[1:], *rest, **kwargs)
            return new(out, None, (False,) * (len(size) - 1))
        return method(data, size, *rest, **kwargs)
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = _new_ctor.__doc__
    return rule


for _name in ("new_zeros", "new_ones", "new_empty", "new_full"):
    register_distinct(getattr(torch.Tensor, _name))(_new_ctor(_name))


@register_distinct(torch.Tensor.new_tensor)
def new_tensor(input, data, **kwargs):
    """``x.new_tensor(values)``: the same values in every example; with a
    leading 1, a value per example (as ``new_zeros``), else one plain
    Tensor shared by every example."""
    t = input.padded_data.new_tensor(data, **kwargs)
    if t.dim() and t.size(0) == 1:
        return new(t.expand((input.batch_size,) + t.shape[1:]).clone(), None,
                   (False,) * (t.dim() - 1))
    return t


@register_distinct(torch.Tensor.new)
def legacy_new(input, *args, **kwargs):
    """The legacy ``x.new(...)``: ``x.new(1, h)`` is ``new_empty`` (a value
    per example), ``x.new(values)`` is ``new_tensor``, ``x.new()`` empty."""
    if args and all(isinstance(a, int) for a in args):
        return input.new_empty(args, **kwargs)
    if len(args) == 1 and isinstance(args[0], torch.Size):
        return input.new_empty(args[0], **kwargs)
    if len(args) == 1:
        return new_tensor(input, args[0], **kwargs)
    return input.padded_data.new(*args, **kwargs)


# ------------------------------------------------------------------ sizes that differ per example
def _sized(fill, name):
    """``torch.<name>(*size)`` where some sizes are per-example ints (a
    MaskedBatch of one int per example, as ``x.size(1)`` gives under
    @batch): each example gets its own shape, the dims with per-example
    sizes dynamic.  A leading size of 1 is each example's batch-of-one
    dimension, as ``x.view(1, -1)`` makes it."""
    def rule(*size, fill_value=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False, pin_memory=False, memory_format=None):
        if name == "full":  # torch.full(size, fill_value)
            size, fill_value = (size[0], size[1]) if len(size) == 2 else (size[0], fill_value)
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        if out is not None:
            raise NotImplementedError(f"torch.{name}: out= is not supported with per-example sizes")
        per = [s for s in size if is_mb(s)]
        B = per[0].padded_data.size(0)
        if any(s.dim() != 0 or s.padded_data.dim() != 1 for s in per):
            raise ValueError(f"torch.{name}: a per-example size must be one int per example")
        bdim = 0 if type(size[0]) is int and size[0] == 1 else None
        dims, lengths, shape = [], {}, [B]
        for i, s in enumerate(size):
            if bdim == 0 and i == 0:
                continue
            if is_mb(s):
                n = s.padded_data.long()
                lengths[len(shape)] = n
                shape.append(int(n.max()) if n.numel() else 0)
            else:
                shape.append(int(s))
            dims.append(is_mb(s))
        device = device or per[0].padded_data.device
        if dtype is None and name != "full":
            dtype = torch.get_default_dtype()
        value = (0 if fill_value is None else fill_value) if fill is None else fill
        data = torch.full(shape, value, dtype=dtype, device=device)
        if name == "empty":
            data = torch.empty(shape, dtype=dtype, device=device)
        data.requires_grad_(requires_grad)
        mask = mask_from_lengths(lengths, data.shape, tuple(dims))
        # an example of size 0 holds a value (empty), which its mask cannot say
        empty = any(bool((n == 0).any()) for n in lengths.values())
        present = torch.ones(B, dtype=torch.bool, device=device) if empty else None
        return new(data, mask, tuple(dims), zero=value == 0 and name != "empty", bdim=bdim,
                   present=present)
    rule.__name__ = rule.__qualname__ = name
    return rule


for _name, _fill in (("zeros", 0), ("ones", 1), ("empty", None), ("full", None)):
    register_distinct(getattr(torch, _name))(_sized(_fill, _name))
