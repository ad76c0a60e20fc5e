"""Route the Python operations that may meet per-example values through
the runtime (``runtime/pycalls.py``), so each example computes its own
(SPEC 4b):

    min(a, b), str(n), sorted(v, key=k)  ->  rt.call(min, a, b), ...
    math.sqrt(n), operator.add(a, b)     ->  rt.call(math.sqrt, n), ...
    torch.tensor([i]), torch.ones(n, n)  ->  rt.call(torch.tensor, [i]), ...
    "{}-{}".format(a, b), ", ".join(ws)  ->  rt.call("{}-{}".format, a, b), ...
    f"len{n:>3}"                         ->  rt.call(lambda v0: f"len{v0:>3}", n)
    "%.1f" % v, [0.0] * n, "-" * n       ->  rt.call(operator.mod, "%.1f", v), ...
    a in b, a not in b                   ->  rt.contains(a, b), rt.contains(a, b, True)
    a is b, a is not b                   ->  rt.is_(a, b), rt.is_(a, b, True)
    a and b, a or b (making a value)     ->  rt.and_value(a, lambda: b), rt.or_value(...)
    [f(c) for c in w if p(c)]            ->  rt.comprehension(lambda w: [...], 1, w)
    x.tolist(), x.numpy()                ->  rt.host(x, 'tolist'), ...
    x[:, :n]                             ->  rt.getitem(x, (slice(None), slice(None, n)))

``f(*xs)`` in a routed call passes ``rt.Star(xs)``.  Only builtins and
module functions the function does not shadow with a local name are
routed; calls of other functions, methods and modules are left alone
(a method of a per-example value runs per example by itself).
"""
import builtins

import gast
import torch

from . import templates
from .analysis import local_names, runtime_call, walk_scope
from .passes import Pass
from .runtime.containers import METHODS, MUTATORS

_BUILTINS = {"abs", "all", "any", "ascii", "bin", "chr", "dict", "divmod", "enumerate",
             "filter", "format", "frozenset", "getattr", "hasattr", "hash", "hex", "len",
             "list", "map", "max", "min", "oct", "ord", "pow", "range", "repr", "round", "set",
             "sorted", "str", "sum", "tuple", "zip", "int", "float", "bool", "reversed",
             "complex", "bytes"}
_MODULES = {"math", "operator", "statistics", "string", "cmath"}
_TORCH = {"torch.tensor", "torch.as_tensor", "torch.LongTensor", "torch.FloatTensor",
          "torch.DoubleTensor", "torch.BoolTensor", "torch.ones", "torch.zeros", "torch.empty",
          "torch.full"}
_PY_BUILTINS = set(dir(builtins))
_COMPS = (gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp)


def _dotted(node):
    parts = []
    while isinstance(node, gast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id] + parts[::-1]) if isinstance(node, gast.Name) else None


def _literal(node, kinds=(str,)):
    return isinstance(node, gast.Constant) and isinstance(node.value, kinds) \
        or str in kinds and isinstance(node, gast.JoinedStr)


class _Calls(Pass):
    visit_Lambda = gast.NodeTransformer.generic_visit   # (the earlier passes' lambdas)

    def __init__(self, ctx, names, self_name, objects=frozenset()):
        super().__init__(ctx)
        self.names, self.self_name, self.objects = names, self_name, objects
        self.nested = set()   # (the functions defined in this one)

    def _rt(self, attr, origin):
        return templates.replace_as_expression(f"rt.{attr}", origin, rt=self.ctx.runtime)

    def _call(self, origin, func, args, keywords=()):
        """``rt.call(func, *args, **keywords)``."""
        args = [gast.Call(self._rt("Star", a), [a.value], []) if isinstance(a, gast.Starred)
                else a for a in args]
        return templates.stamp(gast.Call(self._rt("call", origin), [func] + args,
                                         list(keywords)), origin)

    def _routed(self, func):
        name = _dotted(func)
        if name is None:
            return isinstance(func, gast.Attribute) and _literal(func.value)
        root = name.split(".")[0]
        if root in self.names or root == self.ctx.runtime:
            return False
        return name in _BUILTINS or name in _TORCH or (
            "." in name and root in _MODULES)

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, gast.Attribute) and func.attr in ("tolist", "numpy") \
                and not node.args and not node.keywords and _dotted(func.value) != "torch":
            return templates.stamp(gast.Call(self._rt("host", node), [
                func.value, templates.constant(func.attr)], []), node)
        if self._routed(func):
            return self._call(node, func, node.args, node.keywords)
        if isinstance(func, gast.Attribute) and func.attr in METHODS and func.attr != "pop":
            # d.get(k): a plain container read with a per-example key reads per example
            # (a global's too, w2i.get(w); a module's function runs as it is)
            return templates.stamp(gast.Call(self._rt("method", node), [
                func.value, templates.constant(func.attr)] + node.args, node.keywords), node)
        if self._helper(func):   # self.node_forward(...): rewritten too (runtime/converted.py)
            node.func = templates.stamp(gast.Call(self._rt("converted", node), [func], []), func)
        elif isinstance(func, gast.Name) and (func.id not in self.names or func.id in self.nested) \
                and func.id not in _PY_BUILTINS and func.id != self.ctx.fn_name.split(".")[-1]:
            # prepare_sequence(words, w2i): a function of the module (or one defined in
            # this one), rewritten where it gets per-example Python values
            # (runtime/converted.helper)
            node.args = [func] + node.args
            node.func = self._rt("helper", node)
        return node

    def _helper(self, func):
        """Is ``func`` a method of ``self`` or of a local variable (a helper
        object's, ``meter.update(v)``; a tensor's method passes through)?"""
        if isinstance(func, gast.Attribute):
            obj = func.value
            if runtime_call(obj, self.ctx.runtime, ("read",)) and obj.args:
                obj = obj.args[0]   # (rt.read(self) in a branch or loop)
            # (h.sum(): a tensor's method; child_calls.defer: the rewrite's own object;
            # t = Tally() then t.log(v): an object's, whatever its method's name)
            return isinstance(obj, gast.Name) and (obj.id == self.self_name or obj.id in self.objects
                                                   or obj.id in self.names
                                                   and obj.id not in self.ctx.namer.generated
                                                   and not hasattr(torch.Tensor, func.attr))
        return False

    def visit_Expr(self, node):
        """``seen.add(w)`` on a local stays as it is: assignments.py makes it
        ``seen = rt.mutate(seen, 'add', own, w)``."""
        call = node.value
        if isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute) \
                and call.func.attr in MUTATORS:
            target = call.func.value
            if runtime_call(target, self.ctx.runtime, ("read",)) and target.args:
                target = target.args[0]
            if isinstance(target, gast.Name) and target.id in self.names:
                call.args = [self.visit(a) for a in call.args]
                for k in call.keywords:
                    k.value = self.visit(k.value)
                return node
        return self.generic_visit(node)

    def visit_JoinedStr(self, node):
        """``f"a{x}b{y:>{w}}"`` -> ``rt.call(lambda v0, v1, v2: f"a{v0}b{v1:>{v2}}", x, y, w)``."""
        values, params = [], []
        for n in gast.walk(node):
            if isinstance(n, gast.FormattedValue):
                values.append(self.visit(n.value))
                params.append(self.ctx.namer.new("v"))
                n.value = templates.name(params[-1])
        if not values:
            return node
        fn = gast.Lambda(gast.arguments(
            args=[templates.name(p, gast.Param()) for p in params], posonlyargs=[],
            vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]), node)
        return self._call(node, templates.stamp(fn, node), values)

    def visit_BinOp(self, node):
        self.generic_visit(node)
        op = node.op
        if isinstance(op, gast.Mod) and _literal(node.left) or isinstance(op, gast.Mult) and (
                any(isinstance(s, (gast.List, gast.ListComp, gast.Tuple)) or _literal(s)
                    for s in (node.left, node.right))):
            fn = self._rt(f"operator.{'mod' if isinstance(op, gast.Mod) else 'mul'}", node)
            return self._call(node, fn, [node.left, node.right])
        return node

    def visit_BoolOp(self, node):
        """``a and b`` / ``a or b`` where a value is made (the tests of ``if``
        and ``while`` were lowered by logical.py): per example."""
        self.generic_visit(node)
        fn = "and_value" if isinstance(node.op, gast.And) else "or_value"
        out = node.values[-1]
        for v in reversed(node.values[:-1]):
            out = templates.replace_as_expression(f"rt.{fn}(a, lambda: b)", node,
                                                  rt=self.ctx.runtime, a=v, b=out)
        return out

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1:
            return node
        op, a, b = node.ops[0], node.left, node.comparators[0]
        if isinstance(op, (gast.In, gast.NotIn)):
            args = [a, b] + ([templates.constant(True)] if isinstance(op, gast.NotIn) else [])
            return templates.stamp(gast.Call(self._rt("contains", node), args, []), node)
        if isinstance(op, (gast.Is, gast.IsNot)):
            args = [a, b] + ([templates.constant(True)] if isinstance(op, gast.IsNot) else [])
            return templates.stamp(gast.Call(self._rt("is_", node), args, []), node)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        key = node.slice
        if not isinstance(node.ctx, gast.Load) or not isinstance(key, gast.Tuple) or not any(
                isinstance(e, gast.Slice) and any(
                    p is not None and not isinstance(p, gast.Constant)
                    for p in (e.lower, e.upper, e.step)) for e in key.elts):
            return node
        elts = [templates.replace_as_expression(
            "slice(a, b, c)", node, a=e.lower or templates.constant(None),
            b=e.upper or templates.constant(None), c=e.step or templates.constant(None))
            if isinstance(e, gast.Slice) else e for e in key.elts]
        return templates.stamp(gast.Call(self._rt("getitem", node), [
            node.value, gast.Tuple(elts=elts, ctx=gast.Load())], []), node)

    def _mapped(self, node):
        """``[f(w) for w in ws if c]`` -> ``rt.mapped(ws, lambda w: f(w), lambda w: c)``:
        a list comprehension with one ``for`` over a name, whose element
        calls something other than a builtin (a per-example iterable then
        runs it batched, step by step)."""
        if not isinstance(node, gast.ListComp) or len(node.generators) != 1:
            return None
        gen = node.generators[0]
        if gen.is_async or len(gen.ifs) > 1 or not isinstance(gen.target, gast.Name) or not any(
                isinstance(n, gast.Call) and not runtime_call(n, self.ctx.runtime)
                and not (isinstance(n.func, gast.Name) and n.func.id in _PY_BUILTINS)
                for n in gast.walk(node.elt)):
            return None
        node = self.generic_visit(node)
        gen = node.generators[0]

        def fn(body):
            return templates.stamp(gast.Lambda(gast.arguments(
                args=[templates.name(gen.target.id, gast.Param())], posonlyargs=[],
                vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]), body), node)
        args = [gen.iter, fn(node.elt)] + [fn(c) for c in gen.ifs]
        return templates.stamp(gast.Call(self._rt("mapped", node), args, []), node)

    def _comprehension(self, node):
        if any(isinstance(n, (gast.NamedExpr, gast.Yield, gast.YieldFrom, gast.Await))
               for n in gast.walk(node)):
            return self.generic_visit(node)
        mapped = self._mapped(node)
        if mapped is not None:
            return mapped
        bound = {n.id for n in gast.walk(node) if isinstance(n, gast.Name)
                 and isinstance(n.ctx, gast.Store)}
        free = [n.id for n in gast.walk(node) if isinstance(n, gast.Name)
                and isinstance(n.ctx, gast.Load) and n.id in self.names and n.id not in bound]
        iters = {n.id for g in node.generators for n in gast.walk(g.iter)
                 if isinstance(n, gast.Name)}
        names = sorted(set(free) & iters) + sorted(set(free) - iters)
        node = self.generic_visit(node)
        if not names:
            return node
        fn = gast.Lambda(gast.arguments(
            args=[templates.name(p, gast.Param()) for p in names], posonlyargs=[], vararg=None,
            kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]), node)
        n_iter = templates.constant(len(set(free) & iters))
        # (in a branch or loop, read as any read there is: the gathered rows)
        values = [templates.replace_as_expression("rt.read(x)", node, rt=self.ctx.runtime, x=p)
                  if self.depth else templates.name(p) for p in names]
        return templates.stamp(gast.Call(self._rt("comprehension", node), [
            templates.stamp(fn, node), n_iter] + values, []), node)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def _objects(fdef):
    """The local names bound only to instances of a class the function
    calls by name (``t = Tally()``: a capitalised name, by convention)."""
    made, targets = set(), set()
    for n in gast.walk(fdef):
        if isinstance(n, gast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], gast.Name) \
                and isinstance(n.value, gast.Call) and isinstance(n.value.func, gast.Name) \
                and n.value.func.id[:1].isupper() and n.value.func.id not in _PY_BUILTINS:
            made.add(n.targets[0].id)
            targets.add(id(n.targets[0]))
    other = {n.id for n in gast.walk(fdef) if isinstance(n, gast.Name)
             and isinstance(n.ctx, gast.Store) and id(n) not in targets}
    return frozenset(made - other)


def transform(fdef, ctx):
    args = fdef.args.posonlyargs + fdef.args.args
    self_name = args[0].id if args and args[0].id == "self" else None
    calls = _Calls(ctx, local_names(fdef), self_name, _objects(fdef))
    calls.nested = {n.name for n in walk_scope(fdef.body) if isinstance(n, gast.FunctionDef)}
    fdef.body = calls.statements(fdef.body)
    return fdef
