"""In-place ops: ``x.add_(y)``, ``x += y``, ``x.relu_()``, ``x.masked_fill_(m, v)``,
``x.zero_()``, ``x.fill_(v)``, ``x.copy_(src)``, ``x.index_put_(...)``,
``F.relu(x, inplace=True)``, ``nn.Dropout(inplace=True)`` ... (SPEC section 3).

An in-place op changes the batch it is called on and returns that same
MaskedBatch.  Its values are those of the out-of-place rule
(``x.add_(y)`` computes the rule of ``x.add(y)``), kept only in the active
lanes under ``@batch`` (a dormant lane keeps its value), and written into
x's padded storage with ``copy_``: a true in-place write, so

- views of x, and batches that share its storage (under ``@batch``, the
  variable behind the value a branch reads), see the change, as views of
  one example's Tensor would;
- autograd's version counter moves: backward still raises where a Tensor
  saved for it was changed (``y = x.exp(); y.add_(1)``, ``y.mul_(y)``), and
  an in-place op on a leaf that requires grad raises, as per example;
- the caches keyed by the data's version (``_zero_at``, ``_rows``) drop.

When autograd records, the out-of-place value is computed from a clone of
x's data, so the op's own saved Tensors are never the ones it overwrites.
The gradient of a dormant lane passes through unchanged; under ``@batch``
the active lanes compute from x's data with the dormant lanes cut, as a
read in a branch does.  A batch whose data is a view of another's (``x[:,
1:2]`` on a dynamic dim views every later position too) has only its real
entries written: its padding may be the other batch's real entries.

An in-place op never changes an example's shape, so x keeps its mask and
dims; a result that broadcasts to another per-example shape raises, as
PyTorch does for one example.  The ops that do change x's shape in place
(``unsqueeze_``, ``transpose_`` ...) take the rule's data, mask and dims,
outside per-example control flow only.

Which ops: the in-place form of every op with a rule (``T.<name>_``,
``torch.<name>_``, ``F.<name>_``, ``T.__i<op>__``) is derived from the rule
table at import (this module is imported after every family), plus the
hand-written ``zero_``, ``fill_``, ``copy_``, ``index_put_``, ``detach_``
and the random fills (``normal_``, ``uniform_`` ...).  ``inplace=True`` of
the activation and dropout rules routes here (``write_in_place``).
"""
import torch
import torch.nn.functional as F

from .._lanes import active_lanes
from ..core import absent_examples, dispatch
from ._registry import (RULES, align, fail_if, func_name, is_mb, new, register_distinct,
                        tensor_methods)
from .indexing import put

T = torch.Tensor

__all__ = ["write_in_place", "INPLACE"]

# in-place callable -> the out-of-place callable whose rule gives its value
# (the derived ones), for the docs and tests
INPLACE = {}


def _shape(d, dims):
    return "(1, " + ", ".join(f"≤{s}" if dyn else str(s)
                              for s, dyn in zip(d.shape[1:], dims)) + ")" if d.dim() > 1 else "(1,)"


def _shape_error(op, x, out):
    return RuntimeError(
        f"{op}: the result has per-example shape {_shape(out.padded_data, out.dims)} but the "
        f"examples of the batch it writes into have shape {_shape(x._data, x.dims)}; an "
        f"in-place op cannot change an example's shape (PyTorch raises the same for one "
        f"example: the output doesn't match the broadcast shape). Write it out of place, "
        f"x = x.op(...)")


def _fit(x, out, lanes, op):
    """``out``'s data cut to x's padded shape: a dynamic dim may be padded
    further in ``out`` (an operand padded longer), as long as no real entry
    of an active lane lies past x's padded size."""
    d, o = x._data, out.padded_data
    if o.dim() != d.dim():
        raise _shape_error(op, x, out)
    for i in range(1, d.dim()):
        if o.size(i) == d.size(i):
            continue
        if not (out.dims[i - 1] and o.size(i) > d.size(i)):
            raise _shape_error(op, x, out)
        over = out._lengths(i) > d.size(i)
        fail_if(over if lanes is None else over & lanes,
                lambda k: _shape_error(f"{op} (example {k[0]})", x, out),
                f"{op}: the result has another per-example shape than the batch it writes into")
        o = o.narrow(i, 0, d.size(i))
    return o


def _no_absent_operands(x, operands, lanes, op):
    """Raise if a MaskedBatch operand holds no value for an example that x
    holds one for (``h.add_(x_t)`` with ``x_t = x.unbind(1)[t]`` past an
    example's length): out of place the result would hold none either and
    a loss would refuse it; in place x would keep a value made of padding."""
    mine = None
    for a in operands:
        if not is_mb(a) or a._mask is None and a._present is None \
                or a._mask is x._mask and a._present is x._present:
            continue
        gone = absent_examples(a)
        if gone is None:
            continue
        if mine is None:
            mine = absent_examples(x)
        if mine is not None:
            gone = gone & ~mine
        if lanes is not None:
            gone = gone & lanes
        fail_if(gone, lambda k: ValueError(
            f"{op}: an operand holds no value for example {k[0]} (it was computed in a step "
            f"that example does not have, e.g. x.unbind(d)[t] past its length), so the batch "
            f"written in place would keep a value made of padding for it. Put the loop under "
            f"@matchbox.batch, or write it out of place (h = h + x_t)"),
            f"{op}: an operand holds no value for some example")


def _records(values):
    for v in values:
        if isinstance(v, (tuple, list)):
            if _records(v):
                return True
        elif isinstance(v, torch.Tensor) or is_mb(v):
            if v.requires_grad:
                return True
    return False


def _expanded_over_batch(d):
    return d.dim() and d.size(0) > 1 and d.stride(0) == 0


def write_in_place(x, compute, args=(), kwargs=None, op="in-place op", cast=True):
    """The in-place op whose value is ``compute(x', *args, **kwargs)`` (an
    out-of-place rule; ``x'`` stands for x: the same values, mask and dims)
    written into MaskedBatch ``x`` in the active lanes; returns ``x``.
    ``cast``: refuse a result dtype that x's dtype cannot hold (as PyTorch's
    in-place ops do; not ``copy_``/``fill_``, which cast)."""
    if not is_mb(x):
        raise NotImplementedError(
            f"{op}: writing per-example values (a MaskedBatch) into a plain Tensor in place "
            f"would write every example into the same shared Tensor; make the target a "
            f"MaskedBatch (x.new_zeros(1, ...), torch.zeros_like(x)) or write it out of place")
    kwargs = kwargs or {}
    data, lanes = x._data, active_lanes()  # (a read: the storage it reads)
    B = data.size(0)
    if lanes is not None and lanes.size(0) != B:
        raise ValueError(f"{op}: the batch holds {B} examples but {lanes.size(0)} lanes run")
    z = x._zero_at
    was_zero = z is not None and z[0] is data and z[1] == data._version \
        and not torch.compiler.is_compiling()
    base = data.clone() if torch.is_grad_enabled() and (
        data.requires_grad or _records(args) or _records(kwargs.values())) else data
    src = new(base, x._mask, x.dims, was_zero, x._bdim)
    if lanes is not None and base.requires_grad:
        src._cut = lanes  # the active lanes compute; the dormant ones add no gradient
    out = compute(src, *args, **kwargs)
    if not is_mb(out):
        raise TypeError(f"{op}: the out-of-place rule gave a {type(out).__name__}, not a MaskedBatch")
    value = out.padded_data
    if value is base or value is data:  # nothing changed (dropout in eval mode)
        return x
    if out._bdim != x._bdim:
        raise _shape_error(op, x, out)
    _no_absent_operands(x, list(args) + list(kwargs.values()), lanes, op)
    value = _fit(x, out, lanes, op)
    if cast and not torch.can_cast(value.dtype, data.dtype):
        raise RuntimeError(f"{op}: result type {value.dtype} can't be cast to the desired "
                           f"output type {data.dtype} (the dtype of the batch it writes into)")
    zero = out._zero and out._mask is x._mask
    write = None if lanes is None else lanes.view((B,) + (1,) * (data.dim() - 1))
    if data._base is not None and x._mask is not None:
        # a view (y[:, 1:2] on a dynamic dim): its padding may be real
        # entries of the batch it views, so only its own real entries change
        write = x._mask if write is None else write & x._mask
    if write is not None:
        value = torch.where(write, value.to(data.dtype), base)
        zero = zero and was_zero
    if _expanded_over_batch(data):
        # one storage row shared by every example (x.data = t): no example
        # owns it, so x gets storage of its own
        x.padded_data = value.to(data.dtype).clone()
    else:
        data.copy_(value)
    x._rows = x._update_of = None
    x._zero_at = (x._data, x._data._version) if zero else None
    return x


# ------------------------------------------------------------------ derived from the rule table
def _derived(outplace, name):
    """``self.<name>(*args)``: the value of ``outplace``'s rule, in place."""
    def compute(*args, **kwargs):  # the out-of-place op, wherever the batch-of-one dim sits
        return dispatch(outplace, RULES[outplace], args, kwargs)

    def rule(self, *args, **kwargs):
        return write_in_place(self, compute, args, kwargs, name)
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"In place, the value of {func_name(outplace)} (see matchbox.ops.inplace)."
    return rule


def _restrided(outplace, name, short):
    """``self.<name>(*args)`` of an op that changes x's shape in place
    (``unsqueeze_``, ``transpose_`` ...): x takes the rule's data, mask and
    dims."""
    def rule(self, *args, **kwargs):
        if not is_mb(self):
            raise NotImplementedError(f"{name}: the target must be a MaskedBatch")
        if active_lanes() is not None:
            raise NotImplementedError(
                f"{name} inside per-example control flow under @matchbox.batch would give the "
                f"examples that run it another shape than the others hold; write it out of "
                f"place, x = x.{short}(...)")
        out = RULES[outplace](self, *args, **kwargs)
        self.padded_data = out.padded_data
        self._mask, self.dims, self._zero_at = out._mask, out.dims, out._zero_at
        self._rows = self._update_of = None
        return self
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"In place, {func_name(outplace)}: x takes its data, mask and dims."
    return rule


# ops that change the examples' shape in place: x is rebound to the rule's result
_RESTRIDE = {"squeeze", "unsqueeze", "t", "transpose", "swapdims", "swapaxes"}
# not derived: detach_ changes autograd metadata, not values (written below)
_NOT_DERIVED = {"detach"}


def _inplace_forms(f):
    """(in-place callable, its label, the out-of-place name) for each
    in-place form of ``f``: ``T.<n>_``, ``T.__i<op>__``, ``torch.<n>_``, ``F.<n>_``."""
    forms = []
    for n in tensor_methods(f):
        if n.startswith("__") and n.endswith("__"):
            forms.append((getattr(T, f"__i{n[2:]}", None), f"Tensor.__i{n[2:]}", n))
        elif not n.startswith("_") and n not in _NOT_DERIVED:
            forms.append((getattr(T, n + "_", None), f"Tensor.{n}_", n))
    name = getattr(f, "__name__", None)
    if name and not name.startswith("_") and name not in _NOT_DERIVED:
        for label, ns in (("torch", torch), ("F", F)):
            if getattr(ns, name, None) is f:
                forms.append((getattr(ns, name + "_", None), f"{label}.{name}_", name))
    return [form for form in forms if form[0] is not None]


# ------------------------------------------------------------------ written by hand
def _zeros(src):
    return new(torch.zeros_like(src._data), src._mask, src.dims, True)


@register_distinct(T.zero_, getattr(torch, "zero_", None))
def zero_(self):
    """Every entry 0 (in the active lanes)."""
    return write_in_place(self, _zeros, op="zero_")


def _filled(src, value):
    d = src._data
    if is_mb(value):
        v = value.padded_data
        if v.numel() != v.size(0):
            raise ValueError(
                f"fill_: a per-example value must be one number per example; got examples of "
                f"padded shape {_shape(v, value.dims)}")
        v = v.reshape((v.size(0),) + (1,) * (d.dim() - 1))
    elif isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {value.dim()} dimensions")
        v = value.to(d.device)
    else:
        return new(torch.full_like(d, value), src._mask, src.dims, value == 0)
    return new(v.to(d.dtype).expand(d.shape), src._mask, src.dims)


@register_distinct(T.fill_, getattr(torch, "fill_", None))
def fill_(self, value):
    """Every entry ``value``: a number, a 0-dim Tensor (its gradient is the
    sum over the real entries), or a MaskedBatch of one number per example."""
    return write_in_place(self, _filled, (value,), op="fill_", cast=False)


def _copied(src, other, non_blocking=False):
    if is_mb(other):
        other = other.to(src._data.device, non_blocking=non_blocking)
    elif isinstance(other, torch.Tensor):
        other = other.to(src._data.device, non_blocking=non_blocking)
    else:
        raise TypeError(f"copy_(): argument 'src' must be a Tensor or MaskedBatch, not "
                        f"{type(other).__name__}")
    (d, s), mask, dims = align((src, other), "copy_")
    zero = is_mb(other) and other._zero and other._mask is src._mask
    return new(s.to(d.dtype).expand(torch.broadcast_shapes(d.shape, s.shape)), mask, dims, zero)


@register_distinct(T.copy_)
def copy_(self, src, non_blocking=False):
    """Each example takes ``src``'s values: a MaskedBatch (the same
    per-example sizes, or broadcasting to them) or a plain Tensor that
    broadcasts against one example (shared by every example); any dtype."""
    return write_in_place(self, _copied, (src, non_blocking), op="copy_", cast=False)


def _index_items(indices):
    """``index_put_``'s indices (the first for each example's leading 1) as
    an index for ``x[...]``."""
    items = list(indices)
    if not items:
        return ()
    first = items[0]
    if first is None or (isinstance(first, torch.Tensor) and not is_mb(first)
                         and first.numel() == 1 and not first.is_floating_point()
                         and first.dtype != torch.bool and int(first) in (0, -1)):
        lead = slice(None)
    else:
        raise NotImplementedError(
            "index_put_: the first index addresses dimension 0, each example's leading 1; "
            "give None or [0] there (per example: x.index_put_((torch.tensor([0]), i), v)), "
            "or use x[:, i] = v")
    return (lead,) + tuple(slice(None) if i is None else i for i in items[1:])


def _put(src, indices, values, accumulate=False):
    d = src._data
    if not isinstance(values, torch.Tensor) and not is_mb(values):
        values = torch.as_tensor(values, dtype=d.dtype, device=d.device)
    items = list(indices)
    if len(items) == 1 and items[0] is not None and items[0].dtype == torch.bool:
        # x[m] = v with one value: a fill under a mask of x's shape
        m = items[0]
        if is_mb(values) or values.numel() != 1:
            raise NotImplementedError(
                "index_put_ with a boolean mask and more than one value gives each example a "
                "different number of entries; use torch.where(mask, values, x)")
        v = values.reshape(()).to(d.device)
        if accumulate:
            return RULES[torch.where](m, RULES[T.add](src, v), src)
        return RULES[T.masked_fill](src, m, v)
    return new(put(src, _index_items(items), values, "index_put_", accumulate), src._mask, src.dims)


@register_distinct(T.index_put_, torch.index_put_)
def index_put_(self, indices, values, accumulate=False):
    """``x[indices] = values`` per example (``accumulate``: ``+=``, summing
    repeated indices).  The first index addresses each example's leading 1
    (None or [0]); the others are those of ``x[:, ...]`` (one Tensor or
    per-example MaskedBatch index at most); a single boolean mask with one
    value is ``masked_fill_``."""
    return write_in_place(self, _put, (tuple(indices), values, accumulate), op="index_put_")


@register_distinct(T.detach_, getattr(torch, "detach_", None))
def detach_(self):
    """Detach x from the graph that made it (all of its examples)."""
    if not is_mb(self):
        raise NotImplementedError("detach_: the target must be a MaskedBatch")
    if active_lanes() is not None:
        raise NotImplementedError(
            "detach_() inside per-example control flow under @matchbox.batch would detach "
            "every example, active or not; write x = x.detach() there")
    self.padded_data.detach_()
    return self


def _random(name):
    method = getattr(T, name)

    def fresh(src, *args, **kwargs):
        if any(is_mb(a) for a in list(args) + list(kwargs.values())):
            raise NotImplementedError(f"{name} with per-example parameters (a MaskedBatch): "
                                      f"draw out of place instead, e.g. torch.bernoulli(p)")
        return new(method(torch.empty_like(src._data), *args, **kwargs), src._mask, src.dims)

    def rule(self, *args, **kwargs):
        return write_in_place(self, fresh, args, kwargs, name, cast=False)
    rule.__name__ = rule.__qualname__ = name
    rule.__doc__ = f"Fresh random values by Tensor.{name}, per entry (in the active lanes)."
    return rule


for _name in ("uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_",
              "cauchy_", "log_normal_"):
    if hasattr(T, _name):
        register_distinct(getattr(T, _name))(_random(_name))


def _derive_all():
    for f in list(RULES):
        for g, label, n in _inplace_forms(f):
            if g not in RULES:
                register_distinct(g)(_restrided(f, label, n) if n in _RESTRIDE else _derived(f, label))
                INPLACE[g] = f


_derive_all()
