"""Which ``for`` bodies run as a function of their own (a step), so that
torch.compile compiles them once, not every step (runtime/steps.py).

A ``for`` whose body is straight-line code (no branch, loop, jump,
``with``, ``try``, nested def, per-example condition or host read such as
``.item()``: under torch.compile it makes no graph break, which a step
compiled as one graph may not hold) and has no effect outside the
iteration other than ``lst.append(v)`` to lists that it does not
otherwise use, is lowered to

    def loop_step(out, x, c, cell, h):        (the lists it appends to, the
        ...                                    item, the values it reads)
        return (c, h)                          (the variables it sets that are
                                                read after it or in its next step)
    (c, h) = _mb.step_loop(loop_step, lambda: xs.unbind(1), desc, limit,
                           (out,), (c, cell, h), (0, 2))

(``(0, 2)``: where what it returns goes among the values for the next
step).  A target that is not a plain name is bound from a parameter
``item`` first.  runtime/loops.py's ``step_loop`` runs it.

``step_loops(fdef)`` picks the loops, on the function as written (before
any pass); ``lift`` lowers one, in the loops pass (loops.py).
"""
import gast

from . import templates
from .analysis import SCOPES, assigned_names, local_names, walk_scope
from .effects import _Effects, fresh_names

__all__ = ["step_loops", "lift"]

# statements and expressions a step body may not hold: control flow (a
# per-example branch reads the device), jumps, scopes and effects
_NOT_STRAIGHT = (gast.If, gast.IfExp, gast.BoolOp, gast.For, gast.AsyncFor, gast.While,
                 gast.With, gast.AsyncWith, gast.Try, gast.Return, gast.Yield, gast.YieldFrom,
                 gast.Await, gast.Break, gast.Continue, gast.Global, gast.Nonlocal, gast.Delete,
                 gast.Raise, gast.Assert, gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef) \
    + tuple(getattr(gast, n) for n in ("Match", "TryStar") if hasattr(gast, n))
# calls that read a value from the device (a graph break, compiled)
_HOST_READS = {"item", "tolist", "numpy", "int", "float", "bool"}


def step_loops(fdef, free=()):
    """``{id(for node): (lists it appends to, variables it sets that are
    read after it or before it sets them, the function's variables)}`` for
    the loops that run as a step function (see above).  ``free``: the
    function's closure variables, which the step takes as arguments too
    (a compiled step is reused for the calls whose arguments match)."""
    out, names = {}, local_names(fdef) | set(free)
    for loop in walk_scope(fdef.body):
        if isinstance(loop, gast.For) and not loop.orelse:
            lists = _appended_lists(fdef, loop)
            if lists is not None:
                out[id(loop)] = (lists, _carried(fdef, loop), names)
    return out


def _call_name(call):
    f = call.func
    return f.attr if isinstance(f, gast.Attribute) else getattr(f, "id", None)


def _appended_lists(fdef, loop):
    """The lists a straight-line loop body only appends to, or None when
    the body is not straight-line or has another effect."""
    body = loop.body
    nodes = [n for s in body for n in gast.walk(s)]
    if any(isinstance(n, _NOT_STRAIGHT) for n in nodes) or any(
            isinstance(n, gast.Call) and _call_name(n) in _HOST_READS for n in nodes):
        return None
    bound = assigned_names(body) | assigned_names([loop.target])
    appends = {id(n): n.func.value for n in nodes if isinstance(n, gast.Call)
               and _call_name(n) == "append" and isinstance(n.func, gast.Attribute)
               and isinstance(n.func.value, gast.Name) and n.func.value.id not in bound
               and len(n.args) == 1 and not n.keywords}
    lists = {n.id for n in appends.values()}
    receivers = {id(n) for n in appends.values()}
    if any(isinstance(n, gast.Name) and n.id in lists and id(n) not in receivers for n in nodes):
        return None   # a list it appends to and also reads
    if _StepEffects(fdef, body, appends).scan(body):
        return None
    return tuple(sorted(lists))


class _StepEffects(_Effects):
    """The effects that would escape a step run as a compiled region:
    ``_Effects``' but the appends made after it (``appends``: the ids of
    their calls) and ``x += v`` (out of place under the step's lanes)."""

    aug_in_place = False

    def __init__(self, fdef, body, appends):
        super().__init__(fdef, owned=fresh_names(body))
        self.appends = appends

    def _call(self, n):
        if id(n) not in self.appends:
            super()._call(n)


def _loads(node):
    """The names ``node`` reads from its scope (not those a lambda or a
    comprehension in it binds for itself)."""
    names = set()
    for n in walk_scope(node):
        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
            names.add(n.id)
        elif isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Name):
            names.add(n.target.id)
        for inner in gast.iter_child_nodes(n):
            if isinstance(inner, SCOPES):
                own = {m.id for m in gast.walk(inner) if isinstance(m, gast.Name)
                       and isinstance(m.ctx, (gast.Store, gast.Param))}
                names |= {m.id for m in gast.walk(inner) if isinstance(m, gast.Name)
                          and isinstance(m.ctx, gast.Load)} - own
    return names


def _free(body):
    """The names a straight-line ``body`` reads before it binds them."""
    free, bound = set(), set()
    for stmt in body:
        free |= _loads(stmt) - bound
        bound |= assigned_names([stmt])
    return free


def _carried(fdef, loop):
    """The variables the loop's body sets that are read after it (or
    anywhere else in the function) or in its next step."""
    body_ids = {id(n) for s in loop.body for n in gast.walk(s)}
    outside = {n.id for n in gast.walk(fdef) if isinstance(n, gast.Name)
               and isinstance(n.ctx, gast.Load) and id(n) not in body_ids}
    targets = assigned_names([loop.target])
    sets = assigned_names(loop.body) | targets
    return tuple(sorted(sets & outside | (_free(loop.body) - targets) & sets))


def lift(node, ctx, lists, carried, user_locals, desc, limit):
    """The statements that define ``node``'s (lowered) body as a step
    function and run the loop on it (see above).  ``user_locals``: the
    function's variables, as written; ``desc``, ``limit``: the loop's
    description and iteration limit (expressions)."""
    fn = ctx.namer.new("loop_step")
    targets = assigned_names([node.target])
    args = sorted((_free(node.body) & user_locals) - targets - set(lists) | set(carried))
    plain = isinstance(node.target, gast.Name) and node.target.id not in args
    item = node.target.id if plain else ctx.namer.new("item")
    params = list(lists) + [item] + args
    result = gast.Tuple([templates.name(n) for n in carried], gast.Load())
    bind = [] if plain else templates.replace("target = item", node, target=node.target,
                                              item=item)
    fdef = gast.FunctionDef(
        name=fn, args=gast.arguments(
            posonlyargs=[], args=[templates.name(p, gast.Param()) for p in params], vararg=None,
            kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=bind + node.body + [gast.Return(result)], decorator_list=[], returns=None,
        type_comment=None, type_params=[])
    call = templates.replace_as_expression(
        "rt.step_loop(fn, lambda: iterable, desc, limit, lists, args, back)", node,
        rt=ctx.runtime,
        fn=fn, iterable=node.iter, desc=desc, limit=limit,
        lists=gast.Tuple([templates.name(n) for n in lists], gast.Load()),
        args=gast.Tuple([templates.name(n) for n in args], gast.Load()),
        back=templates.constant(tuple(args.index(n) for n in carried)))
    if carried:
        target = gast.Tuple([templates.name(n, gast.Store()) for n in carried], gast.Store())
        stmt = gast.Assign(targets=[target], value=call, type_comment=None)
    else:
        stmt = gast.Expr(value=call)
    return [templates.stamp(fdef, node), templates.stamp(stmt, node)]
