"""Functions and methods that @batch code calls, rewritten on their first
call (as AutoGraph's ``converted_call``).

Per-example code calls helper methods of its own (``self.node_forward(inputs,
child_c, child_h)``) that were written for one example too: ``len(child_h)``
there is each example's own length.  So a call of ``self.<method>(...)`` in
rewritten code goes through :func:`converted`, which gives the method as
``@batch`` rewrites
it (once per function, kept on it), or the function itself where it is
not user code (torch, the standard library, installed packages,
matchbox), is ``@batch`` already, or cannot be rewritten (no source; a
construct ``@batch`` refuses, such as ``try``/``except``: it then runs as
written).  Anything else that is called (modules, tensor methods,
builtins) is returned as it is.
"""
import os
import sysconfig
import types

import gast
import torch

from ..._lanes import _ACTIVE, _COMPACT
from ...core import MaskedBatch
from .perlane import _contents, per_lane
from .pyvalues import PerExample

_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SKIP = tuple(os.path.join(os.path.abspath(p), "") for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"], _HERE, os.path.dirname(torch.__file__)})


def converted(f):
    """``f`` as @batch code calls it: its rewritten version if it is a
    function or method of user code (see the module doc)."""
    t = type(f)
    if t is types.MethodType:
        func = f.__func__
        if type(func) is not types.FunctionType:
            return f
        conv = func.__dict__.get("__matchbox_auto__")
        if conv is None:
            conv = _convert(func)
        return f if conv is False else _in_compaction(types.MethodType(conv, f.__self__), func,
                                                      f.__self__)
    if t is types.FunctionType:
        conv = f.__dict__.get("__matchbox_auto__")
        if conv is None:
            conv = _convert(f)
        return f if conv is False else _in_compaction(conv, f)
    return f


def helper(f, *args, **kwargs):
    """``f(*args, **kwargs)`` for a function of the module that @batch code
    calls by name (``prepare_sequence(seq, to_ix)``, ``clip(h)``): as
    written, unless an argument holds per-example Python values (a word
    list per example), which the code as written would take for one value,
    or a batch meets code that reads a value per example (an ``if`` on
    it, ``.item()``: ``needs_lanes``): then rewritten as ``converted``
    gives it, or, where it cannot be, run for each example on its own
    values.  A nested function that reads per-example Python values of the
    code around it (``tokens`` of ``def helper(i)`` in a parser) is
    rewritten too."""
    if not any(_objects(a) for a in args) and not any(_objects(v) for v in kwargs.values()) \
            and not (type(f) is types.FunctionType and f.__closure__
                     and any(_objects(_contents(c)) for c in f.__closure__)):
        if not (type(f) is types.FunctionType and needs_lanes(f) and (
                any(type(a) is MaskedBatch for a in args)
                or any(type(v) is MaskedBatch for v in kwargs.values()))):
            return f(*args, **kwargs)
        conv = converted(f)
        return conv(*args, **kwargs)
    conv = converted(f)
    if conv is f and (type(f) is types.FunctionType or isinstance(f, type)):
        # (a class: each example gets its own object, InternalParseNode(label, children))
        return per_lane(f, args, kwargs)
    return conv(*args, **kwargs)


# what in a function's code reads one value per example: control flow, and
# the reads that give a Python value (h.item(), int(n), len(xs))
_FLOW = (gast.If, gast.While, gast.For, gast.IfExp, gast.BoolOp, gast.Break, gast.Continue)
_READS = {"item", "tolist", "numpy", "int", "float", "bool", "len"}
# builtins that compare their arguments (max(a, b) reads bool(b > a))
_COMPARING = {"max", "min", "sorted", "any", "all"}


def needs_lanes(f):
    """Does ``f``'s code (a user function), or a function of its module it
    calls by name (``log_sum_exp`` calling ``argmax``), read a value per
    example?  Kept on ``f``."""
    found = f.__dict__.get("__matchbox_lanes__")
    if found is not None:
        return found
    f.__dict__["__matchbox_lanes__"] = False   # (while its callees are looked at: recursion)
    fdef = None
    if not getattr(f, "__matchbox_batched__", False) \
            and not os.path.abspath(f.__code__.co_filename).startswith(_SKIP):
        from ..parser import parse_function
        try:
            fdef = parse_function(f)[0]
        except Exception:   # no source: it runs as written
            pass
    found = False
    for n in gast.walk(fdef) if fdef is not None else ():
        if isinstance(n, _FLOW):
            found = True
        elif isinstance(n, gast.Call):
            func = n.func
            name = func.attr if isinstance(func, gast.Attribute) else getattr(func, "id", None)
            callee = f.__globals__.get(name) if isinstance(func, gast.Name) else None
            found = (name in _READS or isinstance(func, gast.Name) and name in _COMPARING
                     and name not in f.__globals__
                     or type(callee) is types.FunctionType and needs_lanes(callee))
        if found:
            break
    f.__dict__["__matchbox_lanes__"] = found
    return found


def _objects(x):
    t = type(x)
    return t is PerExample or (t is list or t is tuple) and any(type(v) is PerExample for v in x)


def _in_compaction(conv, func, obj=None):
    """``conv`` as called in a compacted loop or gathered branch of the
    calling function: one that may change state (``meter.update(v)``,
    ``self.count += 1``) runs at the full batch under the live lanes (its
    compacted arguments expanded, its result taken back), so what it keeps
    on an object is every example's, as it is where no lanes were gathered;
    but a method of the object whose attributes the branch holds at its
    rows (a method's ``self``, compaction.hold_attributes) runs there."""
    comp = _COMPACT.get()
    if comp is None or not may_change_state(func):
        return conv
    if obj is not None and getattr(comp, "holds", None) is not None and comp.holds(obj):
        return conv

    def at_full_batch(*args, **kwargs):
        copies = []
        args = [_expanded(comp, a, copies) for a in args]
        kwargs = {k: _expanded(comp, v, copies) for k, v in kwargs.items()}
        active, compact = _ACTIVE.set(comp.lanes(_ACTIVE.get())), _COMPACT.set(None)
        try:
            out = conv(*args, **kwargs)
        finally:
            _COMPACT.reset(compact)
            _ACTIVE.reset(active)
        if any(x.padded_data._version != v for x, v in copies):
            raise RuntimeError(
                f"{getattr(func, '__qualname__', func)}, called in {comp.description}, which "
                f"runs compacted, changed an argument in place (an in-place op, x[...] = v); "
                f"the change would only reach a copy of the live lanes. Return the new value "
                f"instead (x = f(x)), or leave compaction off for the calling function")
        return comp.take(out)
    return at_full_batch


def _expanded(comp, x, copies):
    """``x`` at the full batch (``copies`` collects the batches expanded,
    with their data versions, to catch a change in place)."""
    if type(x) is tuple:
        return tuple(_expanded(comp, v, copies) for v in x)
    if not comp.compacted(x):
        return x
    x = comp.expand(x)
    if type(x) is not PerExample:
        copies.append((x, x.padded_data._version))
    return x


def _convert(func):
    """The rewritten ``func``, or False (kept on ``func``)."""
    conv = False
    code = func.__code__
    if not getattr(func, "__matchbox_batched__", False) \
            and not code.co_flags & (0x20 | 0x80 | 0x100 | 0x200) \
            and not os.path.abspath(code.co_filename).startswith(_SKIP):
        from ..api import convert
        try:
            conv = convert(func)
        except Exception:   # no source, a construct @batch refuses: it runs as written
            conv = False
    func.__dict__["__matchbox_auto__"] = conv
    return conv


def may_change_state(f):
    """Could calling ``f`` change state outside its arguments' values (a
    store into ``self`` or into an object it gets, a global...)?  Read from
    the source of a user function, method or module ``forward`` (kept on the
    function); torch's own and builtins cannot, for this purpose."""
    if isinstance(f, torch.nn.Module):
        f = type(f).forward
    f = getattr(f, "__func__", f)
    if type(f) is not types.FunctionType:
        return False
    f = getattr(f, "__wrapped__", f) if getattr(f, "__matchbox_batched__", False) else f
    found = f.__dict__.get("__matchbox_effects__")
    if found is None:
        found = False
        if not os.path.abspath(f.__code__.co_filename).startswith(_SKIP):
            from ..effects import effects
            from ..parser import parse_function
            try:
                found = bool(effects(parse_function(f)[0]))
            except Exception:   # no source: it may
                found = True
        f.__dict__["__matchbox_effects__"] = found
    return found
