"""``@batch`` and ``to_source``: the pass pipeline in one place.

The rewrite follows AutoGraph: canonicalize first (jumps become per-lane
flags), then lower each construct to runtime calls (runtime.py).  The order:
"""
import functools
import os
import types
import weakref

from . import (asserts, assignments, break_statements, calls, conditionals, continue_statements,
               logical, loops, python_calls, python_values, reads, returns, runtime,
               sibling_calls, unsupported, walrus)
from .analysis import loop_temporaries
from .effects import owned_names
from .buffers import owned_buffers
from .maps import map_loops
from .naming import Namer
from .parser import load_function, parse_function, unparse
from .steps import step_loops

__all__ = ["batch", "to_source", "PASSES"]

#: The passes, in the order they run.  Each is ``transform(fdef, ctx)``.
PASSES = (
    unsupported,          # raise at decoration time for what cannot be batched
    sibling_calls,        # f(a); f(b) recursive siblings -> one call (unless effects forbid)
    returns,              # return            -> do_return / retval flags
    break_statements,     # break             -> break_ flag, guarded rest
    continue_statements,  # continue          -> continue_ flag, guarded rest
    logical,              # and / or / not in tests -> _mb.and_ / or_ / not_
    asserts,              # assert t, msg     -> _mb.assert_(t, lambda: msg)
    reads,                # reads in regions  -> _mb.read(x) (dormant lanes detached)
    calls,                # lst.append, range/enumerate/zip/reversed in for
    python_values,        # x.size(d), len(v), v.item(), int(v), lst.pop(), v[i] -> per-example values
    python_calls,         # builtins, math, str/f-strings/%, in, is, isinstance, comprehensions -> per example
    assignments,          # assignments in regions -> _mb.assign(old, new)
    loops,                # while / for       -> lane-narrowing loops
    conditionals,         # if / elif / else, a if c else b
    walrus,               # (v := e) in a thunk (and_/or_/if_exp) -> a def that binds v nonlocal
)


class Context:
    """What the passes share about the function being converted."""

    def __init__(self, fdef, origin, fn_name, max_iterations, compact=None, merge_calls=None,
                 free=()):
        self.namer = Namer(fdef)
        self.runtime = self.namer.new("_mb")
        self.origin, self.fn_name, self.max_iterations = origin, fn_name, max_iterations
        self.compact, self.merge_calls = compact or None, merge_calls
        self.gather_branches = compact is not False  # compact=False: every branch masked
        # lines for the top of the rewritten source (why a rewrite was not made)
        self.notes = []
        # stores of loop temporaries, found before any pass moves statements
        self.loop_temporaries = loop_temporaries(fdef)
        # locals bound only to values made in the function (a container of its
        # own becomes one per example where examples change it differently)
        self.owned = owned_names(fdef)
        # locals holding a Tensor of the function's own (buffers.py)
        self.owned_buffers = owned_buffers(fdef)
        # for loops whose iterations share no state (maps.py), run as one
        self.map_loops = map_loops(fdef) if compact is None else {}
        # for loops whose straight-line body runs as a function (steps.py)
        self.step_loops = step_loops(fdef, free) if compact is None else {}


#: The code objects of every rewritten function (and the lambdas in it), so
#: an error raised in code they call can tell that code runs inside a @batch
#: call without being rewritten (core's messages for .item(), bool() ...).
CONVERTED_CODES = weakref.WeakSet()


def _function_codes(code):
    """``code`` and the code objects nested in it (its lambdas)."""
    out, todo = set(), [code]
    while todo:
        c = todo.pop()
        out.add(c)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_consts"))
    return out


def _disabled():
    return os.environ.get("MATCHBOX_DISABLE", "").strip() not in ("", "0", "false", "False")


def convert(fn, max_iterations=None, compact=None, merge_calls=None):
    """The rewritten function for ``fn`` and its source."""
    fdef, origin = parse_function(fn)
    ctx = Context(fdef, origin, getattr(fn, "__qualname__", fdef.name), max_iterations, compact,
                  merge_calls, fn.__code__.co_freevars)
    for p in PASSES:
        fdef = p.transform(fdef, ctx)
    source = "".join(f"# {note}\n" for note in ctx.notes) + unparse(fdef)
    new = load_function(fdef, fn, origin, ctx.runtime, runtime.function_runtime())
    new.__matchbox_source__ = source
    CONVERTED_CODES.update(_function_codes(new.__code__))
    new.__matchbox_batched__ = True
    # the code as written, for calls on one example's plain Python values
    # (runtime/perlane.py), where it means what the rewrite means; not with
    # a max_iterations bound, which only the rewrite enforces
    new.__matchbox_plain__ = fn if max_iterations is None else None
    return new


def batch(fn=None, *, max_iterations=None, compact=None, merge_calls=None):
    """Make example-level code with per-example control flow run on a
    :class:`~matchbox.MaskedBatch` (SPEC section 4).

    Use as ``@batch`` or ``@batch(max_iterations=1000)``, on functions,
    methods (in the class body or later, e.g. ``Model.forward =
    batch(Model.forward)``), closures and nested functions.  With the
    environment variable ``MATCHBOX_DISABLE=1`` it returns ``fn`` unchanged.

    ``compact=s`` (a share of lanes in (0, 1], or True for 0.5): once no
    more than that share of a ``while`` loop's lanes are still in it, its
    later iterations run on those lanes only (gathered, then scattered
    back), so finished examples stop costing compute.  It pays when the
    body is heavy and lanes finish at very different times (decoding); it
    costs a gather and a scatter per variable per iteration.  A ``for``
    over ``x.unbind(d)`` (d dynamic) runs its steps on the examples that
    have them the same way, keeping its variables compacted between steps
    (see docs/batch.md).  The share also sets when a branch few examples
    take runs gathered on them (by default a measured rule decides it);
    ``compact=False`` keeps every branch masked.

    Consecutive calls of the function to itself that do not depend on
    each other (``a = f(left)`` then ``b = f(right)`` in a tree recursion)
    run as one call on all the calls' examples, so a recursion runs one
    call per depth instead of one per path.  Each example's values and
    gradients are unchanged; only the order of side effects between the
    calls is, so by default (``merge_calls=None``) the calls are merged
    only when the function has no effect that merging could reorder (a
    write to a global, a store into or a mutation of a value from outside,
    a known-impure call; see transform/effects.py), and ``to_source``
    says why where it does not.  ``merge_calls=True`` merges regardless,
    ``merge_calls=False`` never.
    """
    if compact is True:
        compact = 0.5
    if compact is not None and compact is not False and not (
            isinstance(compact, (int, float)) and 0 < compact <= 1):
        raise ValueError(f"@batch(compact=...) takes a share of lanes in (0, 1] or True, got {compact!r}")
    compact = compact if compact is False else (compact or None)
    if fn is None:
        return functools.partial(batch, max_iterations=max_iterations, compact=compact,
                                 merge_calls=merge_calls)
    if _disabled():
        return fn
    again = functools.partial(batch, max_iterations=max_iterations, compact=compact,
                              merge_calls=merge_calls)
    if isinstance(fn, types.MethodType):
        return types.MethodType(again(fn.__func__), fn.__self__)
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(again(fn.__func__))
    if getattr(fn, "__matchbox_batched__", False):
        return fn
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"@matchbox.batch expects a function or method, got {type(fn).__name__}")
    return convert(fn, max_iterations, compact, None if merge_calls is None else bool(merge_calls))


def to_source(fn):
    """The rewritten source of a ``@batch`` function (or of ``fn`` as
    ``@batch`` would rewrite it), for debugging."""
    f = getattr(fn, "__func__", fn)
    src = getattr(f, "__matchbox_source__", None)
    if src is None:
        f = inspect_unwrap(f)
        src = convert(f).__matchbox_source__
    return src


def inspect_unwrap(f):
    while getattr(f, "__wrapped__", None) is not None and not getattr(f, "__matchbox_batched__", False):
        f = f.__wrapped__
    return f
