"""Masked assignment inside branches and loop bodies.

    x = v          ->  x = _mb.assign(x, v)           (active lanes get v; x = _mb.assign(x, v, 'x')
                                                       where a loop may run compacted)
    x += v         ->  x = _mb.aug_assign(x, '+=', v)
    (x := v)       ->  _mb.read((x := _mb.assign(x, v)))
    d[k] = v       ->  d = _mb.setitem(d, k, v, 'd')  (see below)
    x[:, i] = v    ->  x = _mb.setitem(x, (slice(None), i), v, 'x')
    buf[i] = v     ->  buf = _mb.setitem(buf, i, v, 'buf', own=True)   (buffers.py)
    buf[i][0] = v  ->  buf = _mb.setitem(buf, _mb.path(i, 0), v, 'buf', own=True)
    buf[i][0] += v ->  key = _mb.path(i, 0)
                       buf = _mb.setitem(buf, key, _mb.aug_assign(_mb.getitem(buf, key), '+=', v,
                                                                  in_place=False), 'buf', own=True)
    d[k] += v      ->  key = k
                       d = _mb.setitem(d, key, _mb.aug_assign(d[key], '+=', v, in_place=False), 'd')
    o.d[k] = v     ->  _mb.setitem(o.d, k, v)
    for x in xs    ->  for item in xs: x = _mb.assign(x, item)
    a, b = v       ->  tmp_a, tmp_b = v; a = _mb.assign(a, tmp_a); ...
    o.attr = v     ->  _mb.setattr_(o, 'attr', v)
    o.x[:, i] = v  ->  unchanged (MaskedBatch.__setitem__ honours the lanes)

A store into an item of a local variable rebinds it: a dict or list keeps
its old item in dormant lanes, a MaskedBatch honours the lanes itself, and
a plain Tensor of the function's own (``own=True``: see buffers.py)
becomes one copy per example (each example writes its own buffer, as it
would alone; ``runtime/assign.py``).

A loop's temporaries (``analysis.loop_temporaries``: bound first thing in
the loop body or in a branch in it, read only inside that block) keep
plain assignments: what their dormant lanes hold is never read, so masking
it would be wasted work.

Outside any branch or loop assignments stay plain: a function called for
some lanes only may compute anything in its dormant lanes, since its
caller keeps only the active lanes of what it returns.  Variables first
assigned inside a branch start as ``_mb.Undefined('x')``.
"""
import gast

from . import templates
from .analysis import declared_outer, local_names, param_names, runtime_call
from .runtime.containers import MUTATORS
from .passes import Pass
from .walrus import thunks

_OPS = {gast.Add: "+=", gast.Sub: "-=", gast.Mult: "*=", gast.Div: "/=", gast.FloorDiv: "//=",
        gast.Mod: "%=", gast.Pow: "**=", gast.MatMult: "@=", gast.BitAnd: "&=", gast.BitOr: "|=",
        gast.BitXor: "^=", gast.LShift: "<<=", gast.RShift: ">>="}


class _Slices(gast.NodeTransformer):
    """A subscript's key as an expression: ``a:b`` as ``slice(a, b)``."""

    def visit_Slice(self, node):
        self.generic_visit(node)
        parts = [node.lower, node.upper] + ([node.step] if node.step else [])
        if not any(parts):
            parts = [None]
        return gast.Call(templates.name("slice"), [p or templates.constant(None) for p in parts], [])


class _Assignments(Pass):
    def __init__(self, ctx, local, owned):
        super().__init__(ctx)
        self.assigned = set()
        self.local, self.owned = local, owned

    def visit_For(self, node):
        # bind the target through a masked assignment, so that after the loop
        # each example holds its own last item, not the longest example's
        item = self.ctx.namer.new("item")
        bind, = templates.replace("target = item", node, target=node.target, item=item)
        node.target = templates.name(item, gast.Store())
        node.body = [bind] + node.body
        temps = self.ctx.loop_temporaries
        temps |= {(id(bind), name) for i, name in temps if i == id(node)}
        return super().visit_For(node)

    # ---------------------------------------------------------------- targets
    def _store(self, target, value, origin):
        """Statements that store ``value`` (an expression) into ``target``."""
        rt = self.ctx.runtime
        if isinstance(target, gast.Name):
            self.assigned.add(target.id)
            if (id(origin), target.id) in self.ctx.loop_temporaries:
                return templates.replace("x = value", origin, x=target, value=value)
            if self.ctx.compact is not None:   # names the variable if a compacted loop fails
                return templates.replace("x = rt.assign(x, value, name)", origin, x=target.id, rt=rt,
                                         value=value, name=templates.constant(target.id))
            return templates.replace("x = rt.assign(x, value)", origin, x=target.id, rt=rt, value=value)
        if isinstance(target, gast.Attribute):
            return templates.replace("rt.setattr_(obj, name, value)", origin, rt=rt,
                                     obj=target.value, name=templates.constant(target.attr), value=value)
        if isinstance(target, (gast.Tuple, gast.List)):
            temps, stores = [], []
            for elt in target.elts:
                star = isinstance(elt, gast.Starred)
                inner = elt.value if star else elt
                tmp = self.ctx.namer.new("tmp")
                temps.append(f"*{tmp}" if star else tmp)
                stores += self._store(inner, templates.name(tmp), origin)
            return templates.replace(f"({', '.join(temps)},) = value", origin, value=value) + stores
        if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name):
            # d[k] = v: a Python container keeps its old item in dormant lanes;
            # buf[i] = v into a plain Tensor rebinds buf to one copy per example
            return self._own(templates.replace(
                "x = rt.setitem(x, key, value, name)", origin, rt=rt, x=target.value.id,
                key=_Slices().visit(target.slice), value=value,
                name=templates.constant(target.value.id)))
        path = self._path(target)
        if path is not None:
            # buf[li][0][k] = 1: one store, so that it honours the lanes (and a
            # Tensor the function made gives each example its own copy)
            name, key = path
            return self._own(templates.replace(
                "x = rt.setitem(x, key, value, name)", origin, rt=rt, x=name,
                key=key, value=value, name=templates.constant(name)))
        if isinstance(target, gast.Subscript) and not any(
                isinstance(n, gast.Slice) for n in gast.walk(target.slice)):
            return templates.replace("rt.setitem(obj, key, value)", origin, rt=rt,
                                     obj=target.value, key=target.slice, value=value)
        # o.x[:, i] = v (and anything else) keeps its own semantics: a
        # MaskedBatch's __setitem__ honours the active lanes
        return templates.replace("x = value", origin, x=target, value=value)

    def _path(self, target):
        """``(name, rt.path(k1, ..., kn))`` for a store ``name[k1][k2]...[kn]
        = v`` into a local variable's item, else None."""
        rt, keys, node = self.ctx.runtime, [], target
        while True:
            if isinstance(node, gast.Subscript):
                keys.append(_Slices().visit(node.slice))
                node = node.value
            elif runtime_call(node, rt, ("getitem",)) and len(node.args) == 2:
                keys.append(node.args[1])
                node = node.args[0]
            elif runtime_call(node, rt, ("read",)) and node.args:
                node = node.args[0]
            else:
                break
        if len(keys) < 2 or not isinstance(node, gast.Name) or node.id not in self.local:
            return None
        return node.id, templates.stamp(gast.Call(templates.replace_as_expression(
            "rt.path", target, rt=rt), keys[::-1], []), target)

    def _keyed(self, target):
        """A store that outlives the function or may take a per-example key,
        so it goes through the runtime outside branches and loops too:
        ``name[key]`` on a local, and ``obj.attr`` (in a function called for
        some examples only, ``self.last = h`` changes theirs only)."""
        return isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name) \
            and target.value.id in self.local or isinstance(target, gast.Attribute) \
            or self._path(target) is not None

    def visit_Assign(self, node):
        node.value = self.visit(node.value)  # (a walrus in it, a conditional expression)
        if not self.depth:   # (a store into a local's item may meet a per-example key)
            if len(node.targets) == 1 and self._keyed(node.targets[0]):
                return self._store(node.targets[0], node.value, node)
            return node
        if len(node.targets) == 1:
            return self._store(node.targets[0], node.value, node)
        tmp = self.ctx.namer.new("tmp")
        out = templates.replace("tmp = value", node, tmp=tmp, value=node.value)
        for t in node.targets:
            out += self._store(t, templates.name(tmp), node)
        return out

    # a conditional expression's branches are regions, as an if statement's
    visit_IfExp = Pass.visit_If

    def visit_Call(self, node):
        """The thunks of ``rt.and_`` / ``rt.or_`` (a test's right operands)
        run for the lanes their left operand lets through: regions, so a
        walrus there binds only those lanes (walrus.py makes it bind the
        function's variable)."""
        self.generic_visit(node)
        for lam in thunks(node, self.ctx.runtime):
            lam.body = self.region(lam.body)
        return node

    def visit_NamedExpr(self, node):
        """``(x := v)`` in a region (a ``while`` test): a masked assignment,
        whose value is read as any variable is there."""
        self.generic_visit(node)
        if not self.depth:
            return node
        self.assigned.add(node.target.id)
        node.value = templates.replace_as_expression("rt.assign(x, value)", node,
                                                     rt=self.ctx.runtime, x=node.target.id,
                                                     value=node.value)
        return templates.replace_as_expression("rt.read(walrus)", node, rt=self.ctx.runtime,
                                               walrus=node)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            node.value = self.visit(node.value)
        if not self.depth or node.value is None:
            return node
        return self._store(node.target, node.value, node)

    def visit_AugAssign(self, node):
        node.value = self.visit(node.value)
        if not self.depth and not self._keyed(node.target):
            return node
        rt, op = self.ctx.runtime, templates.constant(_OPS[type(node.op)])
        t = node.target
        if isinstance(t, gast.Name):
            self.assigned.add(t.id)
            return templates.replace("x = rt.aug_assign(x, op, value)", node,
                                     x=t.id, rt=rt, op=op, value=node.value)
        if isinstance(t, gast.Attribute):
            return templates.replace(
                "rt.setattr_(obj, name, rt.aug_assign(obj.attr_name, op, value))", node, rt=rt,
                obj=t.value, name=templates.constant(t.attr), attr_name=t.attr, op=op, value=node.value)
        # d[k] += v, buf[i][j] += v (one read and one store of the same item)
        item = (t.value.id, _Slices().visit(t.slice)) if isinstance(t, gast.Subscript) \
            and isinstance(t.value, gast.Name) else self._path(t)
        if item is not None:
            name, index = item
            return self._own(templates.replace(
                "key = index\nx = rt.setitem(x, key, rt.aug_assign(rt.getitem(x, key), op, value, "
                "in_place=False), name)", node,
                key=self.ctx.namer.new("key"), index=index, x=name, rt=rt, op=op, value=node.value,
                name=templates.constant(name)))
        return node


    def visit_Expr(self, node):
        """``buf.add_(v)`` as a statement on a local in a region rebinds it:
        ``buf = rt.inplace(buf, 'add_', 'buf', v)`` (a plain Tensor of the
        function's own becomes one copy per example, as for ``buf[i] = v``;
        a MaskedBatch's in-place rules honour the active lanes)."""
        call = node.value = self.visit(node.value)
        if not isinstance(call, gast.Call) or not isinstance(call.func, gast.Attribute):
            return node
        method, target = call.func.attr, call.func.value
        if runtime_call(target, self.ctx.runtime, ("read",)) and target.args:
            target = target.args[0]
        if method in MUTATORS and isinstance(target, gast.Name) and target.id in self.local:
            # seen.add(w): a container of the function's own, changed per example,
            # becomes one copy per example (runtime/containers.py)
            call.func = templates.replace_as_expression("rt.mutate", call, rt=self.ctx.runtime)
            call.args = [templates.name(target.id), templates.constant(method),
                         templates.constant(target.id in self.owned)] + call.args
            return templates.replace("x = value", node, x=target.id, value=call)
        if not self.depth:
            return node
        if not method.endswith("_") or method.startswith("_"):
            return node
        local = target
        rt = self.ctx.runtime
        if runtime_call(target, rt, ("read",)) and target.args:
            local = target.args[0]  # rt.read(buf, shared=False): the reads pass's (the
            # in-place rules honour the lanes themselves: no read's cut needed)
        if not isinstance(local, gast.Name) or local.id not in self.local:
            return node  # torch.neg_(x), a global's or attribute's method
        inplace = gast.Call(gast.Attribute(templates.name(rt), "inplace", gast.Load()),
                            [templates.name(local.id), templates.constant(method),
                             templates.constant(local.id)]
                            + call.args, call.keywords)
        return self._own(templates.replace("x = value", node, x=local.id, value=inplace))

    def _own(self, stmts):
        """``stmts`` (ending in ``x = rt.setitem(x, ...)`` or ``x =
        rt.inplace(x, ...)``) with ``own=True`` on that call where ``x``
        holds a Tensor of the function's own."""
        call = stmts[-1].value
        name = stmts[-1].targets[0].id
        if name in self.ctx.owned_buffers:
            call.keywords.append(gast.keyword("own", templates.constant(True)))
        if name in self.owned and call.func.attr == "setitem":
            # a container the function made (d = {}): one per example at a per-example key
            call.keywords.append(gast.keyword("fresh", templates.constant(True)))
        return stmts


def transform(fdef, ctx):
    tr = _Assignments(ctx, local_names(fdef), ctx.owned)
    body = tr.statements(fdef.body)
    init = sorted(tr.assigned - param_names(fdef) - declared_outer(fdef))
    pre = []
    for name in init:
        pre += templates.replace("x = rt.Undefined(label)", fdef.body[0], x=name,
                                 rt=ctx.runtime, label=templates.constant(name))
    fdef.body = pre + body
    return fdef
