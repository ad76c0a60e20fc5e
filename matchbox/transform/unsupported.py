"""Decoration-time checks for constructs ``@batch`` cannot run per lane.

Each raises :class:`BatchSyntaxError` (a SyntaxError) naming the construct,
the file and the line.
"""
import gast

from .analysis import assigned_names, local_names, param_names, walk_scope
from .errors import BatchSyntaxError

_CONTROL = (gast.If, gast.While, gast.For, gast.IfExp)
# methods that change a Python container in place (not add or sort: on a
# Tensor they make a new one)
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
             "discard", "popitem", "reverse"}


def _changed_containers(nodes):
    """``(node, name)`` for each change, in ``nodes``, of the contents of a
    container named ``name``: a mutating method call or a subscript store."""
    for n in walk_scope(nodes):
        if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) \
                and n.func.attr in _MUTATORS and isinstance(n.func.value, gast.Name):
            yield n, n.func.value.id
        elif isinstance(n, gast.Subscript) and isinstance(n.ctx, (gast.Store, gast.Del)) \
                and isinstance(n.value, gast.Name):
            yield n, n.value.id


def _is_batched(fn):
    """Is the nested def decorated with ``@batch`` / ``@matchbox.batch``?"""
    for d in fn.decorator_list:
        d = d.func if isinstance(d, gast.Call) else d
        if getattr(d, "id", None) == "batch" or getattr(d, "attr", None) == "batch":
            return True
    return False


def _nested_functions(fdef, ctx):
    """A nested def or lambda is not rewritten: it runs for every example.
    Refuse one that changes what the enclosing function holds."""
    for n in walk_scope(fdef.body, stop=()):
        if not isinstance(n, (gast.FunctionDef, gast.Lambda)) or n is fdef:
            continue
        if isinstance(n, gast.FunctionDef) and _is_batched(n):
            continue  # rewritten on its own: its changes follow the active lanes
        own = local_names(n) if isinstance(n, gast.FunctionDef) else param_names(n)
        body = n.body if isinstance(n.body, list) else [n.body]
        for m in walk_scope(body):
            if isinstance(m, gast.Nonlocal):
                name = m.names[0]
                break
        else:
            name = next((name for _, name in _changed_containers(body) if name not in own), None)
        if name is not None:
            what = "a lambda" if isinstance(n, gast.Lambda) else f"nested function {n.name!r}"
            raise BatchSyntaxError(
                f"{what} that changes {name!r} of the enclosing function", n, ctx.origin,
                "a nested function is not rewritten, so it would make the change for every "
                "example, also those whose control flow does not call it; return the value "
                "instead, or decorate the nested function with @matchbox.batch")


def transform(fdef, ctx):
    _nested_functions(fdef, ctx)
    local = local_names(fdef)
    for n in walk_scope(fdef.body):
        if isinstance(n, _CONTROL[:3]):
            for part in (n.body, n.orelse):
                for m, name in _changed_containers(part or []):
                    if name not in local:
                        raise BatchSyntaxError(
                            f"a change to the contents of global/enclosing {name!r} under a "
                            f"condition or in a loop", m, ctx.origin,
                            "per-example control flow would make it once for the whole batch, "
                            "or for some examples only; keep the values in a local list and "
                            "return it")
    outer = set()
    for n in walk_scope(fdef.body):
        if isinstance(n, (gast.Yield, gast.YieldFrom)):
            raise BatchSyntaxError("a generator (yield)", n, ctx.origin,
                                   "a generator's lanes would yield at different times")
        if isinstance(n, gast.Await):
            raise BatchSyntaxError("await", n, ctx.origin)
        if isinstance(n, (gast.AsyncFor, gast.AsyncWith)):
            raise BatchSyntaxError("async for/with", n, ctx.origin)
        if isinstance(n, gast.Match):
            raise BatchSyntaxError("a match statement", n, ctx.origin,
                                   "rewrite it as if/elif/else")
        if isinstance(n, (gast.Global, gast.Nonlocal)):
            outer |= set(n.names)
        if isinstance(n, gast.Try) and n.handlers:
            raise BatchSyntaxError(
                "try/except", n, ctx.origin,
                "an exception raised by one example's data (or in a branch some examples "
                "take) would send every example to the handler; test the condition per "
                "example with an if instead, or put the try around the call of the "
                "@batch function")
        if isinstance(n, gast.Try):
            for s in n.finalbody:
                for m in walk_scope(s):
                    if isinstance(m, (gast.Return, gast.Break, gast.Continue)):
                        raise BatchSyntaxError(
                            f"'{type(m).__name__.lower()}' inside a finally block", m, ctx.origin)
        if isinstance(n, gast.Delete) and any(isinstance(t, gast.Name) for t in n.targets):
            raise BatchSyntaxError("'del' of a variable", n, ctx.origin,
                                   "a variable cannot be deleted for some examples only")
    if outer:
        for n in walk_scope(fdef.body):
            if isinstance(n, _CONTROL[:3]):
                for part in (n.body, n.orelse):
                    written = assigned_names(part) & outer if part else set()
                    if written:
                        name = sorted(written)[0]
                        raise BatchSyntaxError(
                            f"a write to global/nonlocal variable {name!r} under a condition or "
                            f"in a loop", n, ctx.origin,
                            "per-example control flow may run it for some examples only; "
                            "return the value instead")
    return fdef
