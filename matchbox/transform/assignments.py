"""Masked assignment inside branches and loop bodies.

    x = v          ->  x = _mb.assign(x, v)           (active lanes get v; x = _mb.assign(x, v, 'x')
                                                       where a loop may run compacted)
    x += v         ->  x = _mb.aug_assign(x, '+=', v)
    (x := v)       ->  _mb.read((x := _mb.assign(x, v)))
    d[k] = v       ->  d = _mb.setitem(d, k, v, 'd')  (see below)
    x[:, i] = v    ->  x = _mb.setitem(x, (slice(None), i), v, 'x')
    buf[i] = v     ->  buf = _mb.setitem(buf, i, v, 'buf', own=True)   (buffers.py)
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
    def __init__(self, ctx, local):
        super().__init__(ctx)
        self.assigned = set()
        self.local = local

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
        if isinstance(target, gast.Subscript) and not any(
                isinstance(n, gast.Slice) for n in gast.walk(target.slice)):
            return templates.replace("rt.setitem(obj, key, value)", origin, rt=rt,
                                     obj=target.value, key=target.slice, value=value)
        # o.x[:, i] = v (and anything else) keeps its own semantics: a
        # MaskedBatch's __setitem__ honours the active lanes
        return templates.replace("x = value", origin, x=target, value=value)

    def visit_Assign(self, node):
        node.value = self.visit(node.value)  # (a walrus in it, a conditional expression)
        if not self.depth:
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
        if not self.depth:
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
        if isinstance(t, gast.Subscript) and isinstance(t.value, gast.Name):
            return self._own(templates.replace(
                "key = index\nx = rt.setitem(x, key, rt.aug_assign(x[key], op, value, in_place=False), "
                "name)", node,
                key=self.ctx.namer.new("key"), index=_Slices().visit(t.slice), x=t.value.id, rt=rt,
                op=op, value=node.value, name=templates.constant(t.value.id)))
        return node


    def visit_Expr(self, node):
        """``buf.add_(v)`` as a statement on a local in a region rebinds it:
        ``buf = rt.inplace(buf, 'add_', 'buf', v)`` (a plain Tensor of the
        function's own becomes one copy per example, as for ``buf[i] = v``;
        a MaskedBatch's in-place rules honour the active lanes)."""
        call = node.value = self.visit(node.value)
        if not self.depth or not isinstance(call, gast.Call) or not isinstance(call.func, gast.Attribute):
            return node
        method, target = call.func.attr, call.func.value
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
        if stmts[-1].targets[0].id in self.ctx.owned_buffers:
            call.keywords.append(gast.keyword("own", templates.constant(True)))
        return stmts


def transform(fdef, ctx):
    tr = _Assignments(ctx, local_names(fdef))
    body = tr.statements(fdef.body)
    init = sorted(tr.assigned - param_names(fdef) - declared_outer(fdef))
    pre = []
    for name in init:
        pre += templates.replace("x = rt.Undefined(label)", fdef.body[0], x=name,
                                 rt=ctx.runtime, label=templates.constant(name))
    fdef.body = pre + body
    return fdef
