"""Pointwise ops: unary, binary, comparisons, where, masked_fill, clamp.

data = f(x, y, ...); mask = the conjunction of the operands' masks; dims =
the disjunction of their dims (operands broadcast per example, see
``_registry.align``).  Padding is left alone, except where a non-real entry
could produce a non-finite derivative (``log(0)``, a division by a padding
zero): there the operand is first set to a safe value with ``where``, so
the padding's gradient stays exactly zero.

Known-zero padding (``MaskedBatch._zero``, which lets later rules skip
re-masking) is kept by the functions that map 0 to 0 (``ZERO_AT_ZERO``) and
by ``+ - *`` of operands with zero padding under one mask, or scaled by a
finite number.
"""
import math

import torch
import torch.nn.functional as F

from ..core import MaskedBatch
from ._registry import RULES, align, is_mb, neutralize, new, register, register_distinct

T = torch.Tensor


def _torch_fns(name):
    """``torch.<name>`` and ``torch.Tensor.<name>``, where they exist."""
    return [f for f in (getattr(torch, name, None), getattr(T, name, None)) if f is not None]


def _unary(f, safe=None, keeps_zero=False):
    """A rule for ``f(x, *params)``: data = f(data), mask and dims kept.
    ``safe`` is the value non-real entries get first, for functions whose
    derivative is not finite everywhere; ``keeps_zero``: f(0) = 0 whatever
    the params."""
    def rule(x, *args, **kwargs):
        if kwargs and kwargs.pop("inplace", False):  # F.relu(x, inplace=True), nn.ReLU(inplace=True)
            from .inplace import write_in_place
            return write_in_place(x, rule, args, kwargs, f"{rule.__name__}(inplace=True)")
        if type(x) is not MaskedBatch or args and any(is_mb(a) for a in args):
            return _nary(f)(x, *args, **kwargs)
        data = x.padded_data if safe is None else neutralize(x, safe)
        return new(f(data, *args, **kwargs), x._mask, x.dims,
                   keeps_zero and x._mask is not None and x._zero)  # (0s matter only as padding)
    rule.__name__ = getattr(f, "__name__", "unary")
    return rule


def _zero_operands(args, number_ok=None):
    """Whether the padding of ``f(*args)`` stays 0 because the MaskedBatch
    operands (at least one) have zero padding under one mask and every
    other operand passes ``number_ok`` (None: there may be none)."""
    first = None
    for a in args:
        if type(a) is MaskedBatch:
            if first is None:
                if not a._zero:
                    return False
                first = a
            elif not (a is first or a._mask is first._mask and a._zero):
                return False
        elif number_ok is None or not number_ok(a):
            return False
    return first is not None


def _finite_number(a):
    return type(a) in (int, float) and math.isfinite(a)


def _zero_sum(args):
    """``x + y`` / ``x - y``: padding stays 0 when every operand is a
    MaskedBatch with zero padding under the same mask."""
    return _zero_operands(args)


def _zero_product(args):
    """``x * y``: padding stays 0 when the MaskedBatch operands have zero
    padding under one mask and the others are finite numbers."""
    return _zero_operands(args, _finite_number)


def _zero_quotient(args):
    """``x / c``: padding stays 0 for a finite non-zero number c."""
    return (len(args) == 2 and _zero_operands(args[:1]) and _finite_number(args[1])
            and args[1] != 0)


def _finite_padding(args, safe=()):
    """``args`` with 0 in the padding of every MaskedBatch operand (but those
    in ``safe``, set to safe values already) when a plain Tensor operand
    requires grad.  Such a parameter broadcasts over the padding, so its
    gradient sums over it: ``x * w`` gives ``w`` the gradient ``sum(g * x)``,
    where ``0 * NaN`` is NaN, and ``tanh(x + b)`` backpropagates NaN from
    NaN padding.  Padding that is known to be 0 costs nothing."""
    if not torch.is_grad_enabled() or not any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return args
    return tuple(new(neutralize(a, 0), a._mask, a.dims, True)
                 if i not in safe and is_mb(a) and a._mask is not None and not a._zero else a
                 for i, a in enumerate(args))


def _beside_static(a, b):
    """For MaskedBatches ``a`` and ``b`` with as many dims, one of them all
    real and static (no mask, size 1 wherever the other is dynamic: a
    per-example number ``bp[:, None]`` beside a sentence ``position``),
    the other one: it gives the result its mask and dims, as ``align``
    would, without lining anything up.  None otherwise."""
    if type(a) is not MaskedBatch or type(b) is not MaskedBatch:
        return None
    da, db = a._data, b._data
    if da.dim() != db.dim() or da.size(0) != db.size(0) or da.device != db.device:
        return None
    for held, other in ((a, b), (b, a)):
        if other._mask is None and not any(other.dims):
            d = other._data
            if all(not dyn or d.size(i) == 1 for i, dyn in enumerate(held.dims, 1)):
                return held
    return None


def _nary(f, zero=None, safe=()):
    """A rule for a broadcasting op over several operands; ``zero(args)``
    says whether zero padding survives; the operands in ``safe`` already
    hold safe values in their padding."""
    def rule(*args, **kwargs):
        if len(args) == 2 and not kwargs:  # the common case, without align's generality
            a, b = args
            if type(a) is MaskedBatch and (type(b) in (int, float) or b is a or type(b) is MaskedBatch
                                           and b._mask is a._mask and b.dims == a.dims
                                           and b._data.shape == a._data.shape):
                db = b.padded_data if type(b) is MaskedBatch else b
                # (zero padding matters only where there is padding)
                return new(f(a.padded_data, db), a._mask, a.dims,
                           a._mask is not None and zero is not None and zero(args))
            held = _beside_static(a, b)
            if held is not None:
                return new(f(a.padded_data, b.padded_data), held._mask, held.dims,
                           zero is not None and zero(args))
        args = _finite_padding(args, safe)
        datas, mask, dims = align(args, getattr(f, "__name__", "op"))
        return new(f(*datas, **kwargs), mask, dims, zero is not None and zero(args))
    rule.__name__ = getattr(f, "__name__", "nary")
    return rule


def _safe_nary(f, safe_args, zero=None):
    """Like ``_nary`` but sets the listed operands to safe values at their
    non-real entries first."""
    plain = _nary(f, safe=safe_args)

    def rule(*args, **kwargs):
        fixed = []
        for i, a in enumerate(args):
            if i in safe_args and is_mb(a):
                a = new(neutralize(a, safe_args[i]), a._mask, a.dims)
            fixed.append(a)
        out = plain(*fixed, **kwargs)
        if zero is not None and zero(args):
            out._zero = True
        return out
    rule.__name__ = plain.__name__
    return rule


def _reflected(rule):
    def rrule(self, other, *args, **kwargs):
        return rule(other, self, *args, **kwargs)
    rrule.__name__ = "r" + rule.__name__
    return rrule


def _register_all(fns, rule):
    register_distinct(*fns)(rule)


# ------------------------------------------------------------------ unary
UNARY = """abs absolute neg negative positive exp exp2 expm1 tanh sigmoid sin cos tan sinh
cosh asinh atan arctan floor ceil round trunc fix frac sign sgn erf erfc square
logical_not bitwise_not isnan isinf isfinite isposinf isneginf isreal nan_to_num relu
signbit conj deg2rad rad2deg i0 sinc clone detach""".split()

# functions with a non-finite derivative somewhere: the safe value for non-real entries
UNARY_SAFE = {
    "log": 1.0, "log2": 1.0, "log10": 1.0, "log1p": 0.0, "sqrt": 1.0, "rsqrt": 1.0,
    "reciprocal": 1.0, "acos": 0.0, "arccos": 0.0, "asin": 0.0, "arcsin": 0.0,
    "atanh": 0.0, "arctanh": 0.0, "acosh": 2.0, "arccosh": 2.0, "lgamma": 1.0,
    "digamma": 1.0, "erfinv": 0.0, "logit": 0.5, "mvlgamma": 3.0, "polygamma": 1.0,
}

# f(0) = 0 for every value of the function's parameters: zero padding survives
ZERO_AT_ZERO = set("""abs absolute neg negative positive tanh sin tan sinh asinh atan arctan
floor ceil round trunc fix frac sign sgn erf square expm1 deg2rad rad2deg clone detach
nan_to_num relu relu6 elu selu celu gelu silu mish leaky_relu softsign tanhshrink softshrink
hardshrink hardswish rrelu""".split())

for _name in UNARY:
    _fns = _torch_fns(_name)
    if _fns:
        _register_all(_fns, _unary(getattr(torch, _name, None) or getattr(T, _name),
                                   keeps_zero=_name in ZERO_AT_ZERO))
_register_all([T.__invert__], _unary(torch.bitwise_not))
for _name, _safe in UNARY_SAFE.items():
    _fns = [f for f in _torch_fns(_name) if f is not T.polygamma]  # (its own rule, below)
    if _fns:
        _register_all(_fns, _unary(getattr(torch, _name, None) or getattr(T, _name), _safe))


@register_distinct(T.polygamma)
def polygamma(x, n):
    """``x.polygamma(n)`` is ``torch.polygamma(n, x)``."""
    return RULES[torch.polygamma](n, x)



def _last_two(f):
    """``f`` over each example's last two dims (tril/triu): a 2-D example
    (1, n) is the matrix (1, n), not the batch's (B, n).  The kept entries
    depend only on their indices, which a real prefix shares with its
    example, so dynamic dims need nothing more."""
    def g(data, *args, **kwargs):
        if data.dim() < 2:
            raise RuntimeError(f"{f.__name__}: input tensor must have at least 2 dimensions "
                               f"per example (a MaskedBatch example counts its leading 1)")
        return f(data.unsqueeze(1), *args, **kwargs).squeeze(1)
    g.__name__ = f.__name__
    return g


for _name in ("tril", "triu"):
    _register_all(_torch_fns(_name), _unary(_last_two(getattr(torch, _name))))

# torch.nn.functional activations (F.relu(x, inplace=False), F.gelu, ...)
ACTIVATIONS = """relu relu6 elu selu celu gelu silu mish leaky_relu softplus softsign
hardtanh hardswish hardsigmoid logsigmoid tanhshrink softshrink hardshrink threshold
rrelu""".split()
for _name in ACTIVATIONS:
    _fn = getattr(F, _name)
    _fns = [_fn] + [f for f in _torch_fns(_name) if _name not in UNARY]
    _register_all(_fns, _unary(_fn, keeps_zero=_name in ZERO_AT_ZERO))


# ------------------------------------------------------------------ binary
_ZERO_RULES = {"add": _zero_sum, "sub": _zero_sum, "subtract": _zero_sum, "mul": _zero_product,
               "multiply": _zero_product, "div": _zero_quotient, "divide": _zero_quotient,
               "true_divide": _zero_quotient}


def _binary(name, safe_args=None):
    f, zero = getattr(torch, name), _ZERO_RULES.get(name)
    return _safe_nary(f, safe_args, zero) if safe_args else _nary(f, zero)


BINARY = """add sub subtract mul multiply eq ne not_equal lt less le less_equal gt greater ge
greater_equal maximum minimum fmax fmin logical_and logical_or logical_xor bitwise_and
bitwise_or bitwise_xor atan2 arctan2 hypot copysign lerp addcmul heaviside nextafter
logaddexp logaddexp2 rsub""".split()
# divisors and bases get 1 at non-real entries
BINARY_SAFE = {"div": {1: 1.0}, "divide": {1: 1.0}, "true_divide": {1: 1.0},
               "floor_divide": {1: 1.0}, "remainder": {1: 1.0}, "fmod": {1: 1.0},
               "pow": {0: 1.0}, "float_power": {0: 1.0}, "xlogy": {1: 1.0},
               "addcdiv": {2: 1.0}}

_BINARY_RULES = {}
for _name in BINARY:
    _BINARY_RULES[_name] = _binary(_name)
    _register_all(_torch_fns(_name), _BINARY_RULES[_name])
for _name, _safe in BINARY_SAFE.items():
    _BINARY_RULES[_name] = _binary(_name, _safe)
    _register_all(_torch_fns(_name), _BINARY_RULES[_name])

_DUNDERS = {
    "add": "__add__", "sub": "__sub__", "mul": "__mul__", "div": "__truediv__",
    "floor_divide": "__floordiv__", "remainder": "__mod__", "pow": "__pow__",
    "eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
    "ge": "__ge__", "bitwise_and": "__and__", "bitwise_or": "__or__", "bitwise_xor": "__xor__",
}
_REFLECTED = {"add": "__radd__", "sub": "__rsub__", "mul": "__rmul__", "div": "__rtruediv__",
              "floor_divide": "__rfloordiv__", "remainder": "__rmod__", "pow": "__rpow__",
              "bitwise_and": "__rand__", "bitwise_or": "__ror__", "bitwise_xor": "__rxor__"}
for _name, _dunder in _DUNDERS.items():
    _f = getattr(T, _dunder, None)
    if _f is not None:
        _register_all([_f], _BINARY_RULES[_name])
for _name, _dunder in _REFLECTED.items():
    _f = getattr(T, _dunder, None)
    if _f is not None:
        _register_all([_f], _reflected(_BINARY_RULES[_name]))


# ------------------------------------------------------------------ where / masked_fill / clamp
@register(torch.where, T.where)
def where(condition, input=None, other=None):
    """``torch.where(c, x, y)``: every operand may be a MaskedBatch."""
    if input is None:
        raise NotImplementedError(
            "torch.where(condition) with one argument returns indices, which differ per "
            "example; matchbox has no rule for it. Use the three-argument form.")
    datas, mask, dims = align((condition, input, other), "where")
    return new(torch.where(*datas), mask, dims)


@register(torch.masked_fill, T.masked_fill)
def masked_fill(input, mask, value):
    if is_mb(value):
        raise NotImplementedError("masked_fill with a per-example value: use torch.where(mask, value, x)")
    datas, m, dims = align((input, mask), "masked_fill")
    return new(datas[0].masked_fill(datas[1], value), m, dims)


@register(torch.clamp, T.clamp, torch.clip, T.clip)
def clamp(input, min=None, max=None):
    datas, mask, dims = align((input, min, max), "clamp")
    return new(torch.clamp(*datas), mask, dims)


for _name in ("clamp_min", "clamp_max"):
    _register_all(_torch_fns(_name), _nary(getattr(torch, _name)))
