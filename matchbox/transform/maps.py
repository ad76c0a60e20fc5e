"""Which ``for`` loops are maps: loops whose iterations share no state.

A ``for`` over the steps of a dynamic dim whose body only computes from
the loop's own item, from values bound earlier in the same iteration and
from values it never changes, and whose only effect outside the iteration
is ``lst.append(v)`` to lists it does not otherwise read, computes the same
whatever order its iterations run in.  Under ``@batch`` such a loop runs
its body once, on every (example, step) pair as a lane of its own
(``runtime/maps.py``), instead of once per step on the batch: a branch in it
that few pairs take then runs gathered on all of them at once (the rare
words of every sentence spelled by one character LSTM call).

``map_loops(fdef)`` gives the ids of those ``for`` nodes, with the names of
the lists each appends to and of the function's other variables its body
reads (the runtime weighs what gathering those would copy), on the
function as written (before any pass).
"""
import gast

from .analysis import SCOPES, assigned_names, declared_outer, jumps_of_loop, local_names, walk_scope
from .effects import _IMPURE_CALLS, _MUTATORS

__all__ = ["map_loops"]


def map_loops(fdef):
    """``{id(for node): (names of the lists it appends to, names of the
    function's variables from outside the loop that it reads)}``."""
    outer, names = declared_outer(fdef), local_names(fdef)
    out = {}
    for loop in walk_scope(fdef.body):
        if isinstance(loop, gast.For) and not loop.orelse:
            appended = _map_appends(fdef, loop, outer)
            if appended is not None:
                local = assigned_names(loop.body) | _target_names(loop.target)
                reads = set().union(*(_reads(s) for s in loop.body))
                out[id(loop)] = (appended, sorted(reads & names - local - appended))
    return out


def _target_names(t):
    if isinstance(t, gast.Name):
        return {t.id}
    if isinstance(t, (gast.Tuple, gast.List)) and t.elts:
        parts = [_target_names(e) for e in t.elts]
        return None if None in parts else set().union(*parts)
    return None


def _map_appends(fdef, loop, outer):
    """The lists ``loop`` appends to, if it is a map; else None."""
    targets = _target_names(loop.target)
    body = loop.body
    if targets is None or jumps_of_loop(body, (gast.Break, gast.Continue)):
        return None
    nodes = [n for s in body for n in walk_scope(s)]
    if any(isinstance(n, SCOPES + (gast.Return, gast.Yield, gast.YieldFrom, gast.Await,
                                   gast.Global, gast.Nonlocal, gast.Delete, gast.Try))
           for s in body for n in gast.walk(s)):
        return None
    local = assigned_names(body) | targets
    if local & outer:
        return None
    # every name the loop binds is read inside it only
    inside = {id(n) for n in nodes}
    for n in walk_scope(fdef.body):
        if isinstance(n, gast.Name) and n.id in local and not isinstance(n.ctx, gast.Store) \
                and id(n) not in inside:
            return None
    appended, receivers = set(), set()
    for n in nodes:
        if isinstance(n, (gast.Attribute, gast.Subscript)) and not isinstance(n.ctx, gast.Load):
            return None   # x.a = v, x[i] = v: a change outside the iteration
        if not isinstance(n, gast.Call):
            continue
        f = n.func
        if isinstance(f, gast.Name) and f.id in _IMPURE_CALLS:
            return None
        if any(k.arg in ("out", "inplace") for k in n.keywords):
            return None
        if isinstance(f, gast.Attribute):
            if f.attr.endswith("_") and not f.attr.endswith("__"):
                return None   # x.add_(v)
            if f.attr == "append" and isinstance(f.value, gast.Name) and f.value.id not in local \
                    and len(n.args) == 1 and not n.keywords:
                appended.add(f.value.id)
                receivers.add(id(f.value))
            elif f.attr in _MUTATORS:
                return None
    for n in nodes:   # an appended list is only appended to
        if isinstance(n, gast.Name) and n.id in appended and id(n) not in receivers:
            return None
    # an attribute the function sets (self.memory = ...) may hold the whole
    # batch, which the body's lanes (the steps) cannot read
    stored = {(n.value.id, n.attr) for n in walk_scope(fdef.body) if isinstance(n, gast.Attribute)
              and isinstance(n.value, gast.Name) and isinstance(n.ctx, gast.Store)}
    if any(isinstance(n, gast.Attribute) and isinstance(n.value, gast.Name)
           and (n.value.id, n.attr) in stored for n in nodes):
        return None
    if not _defined_before_read(body, local, set(targets)):
        return None
    return frozenset(appended)


def _reads(node):
    return {n.id for n in walk_scope(node) if isinstance(n, gast.Name)
            and isinstance(n.ctx, gast.Load)}


def _defined_before_read(stmts, local, defined):
    """Does every read of a name in ``local`` follow a binding of it in the
    same iteration (on every path)?  ``defined`` grows with the bindings."""
    return _block(stmts, local, defined) is not None


def _block(stmts, local, defined):
    """``defined`` after ``stmts`` (None: a read of a name not yet bound)."""
    defined = set(defined)
    for s in stmts:
        if isinstance(s, gast.If):
            if _reads(s.test) & local - defined:
                return None
            a, b = _block(s.body, local, defined), _block(s.orelse, local, defined)
            if a is None or b is None:
                return None
            defined |= a & b
        elif isinstance(s, (gast.For, gast.While)):
            head = s.iter if isinstance(s, gast.For) else s.test
            if _reads(head) & local - defined:
                return None
            inner = set(defined)
            if isinstance(s, gast.For):
                inner |= _target_names(s.target) or set()
            if _block(s.body, local, inner) is None or _block(s.orelse, local, defined) is None:
                return None
            if isinstance(s, gast.While) and _reads(s.test) & local - defined:
                return None
        elif isinstance(s, gast.With):
            if any(_reads(i) & local - defined for i in s.items):
                return None
            after = _block(s.body, local, defined)
            if after is None:
                return None
            defined = after
        elif isinstance(s, (gast.Assign, gast.AnnAssign)):
            value = s.value
            if value is not None and _reads(value) & local - defined:
                return None
            targets = s.targets if isinstance(s, gast.Assign) else [s.target]
            if value is not None:
                for t in targets:
                    defined |= assigned_names([t])
        elif isinstance(s, gast.AugAssign):
            if _reads(s) & local - defined or assigned_names([s.target]) - defined:
                return None
        elif _reads(s) & local - defined:
            return None
    return defined
