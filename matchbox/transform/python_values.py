"""Rewrite the reads of Python values that differ between examples.

In per-example code a size, a number read off a tensor or a list's length
is one Python value; on a batch each example has its own.  These reads go
to the runtime (runtime/scalars.py, runtime/lists.py), which gives a
per-example value on a MaskedBatch or a per-example list, and the plain
Python value on anything else:

    x.size(d), x.shape         ->  rt.size(x, d), rt.shape(x)
    x.item()                   ->  rt.item(x)
    len(v), int(v), float(v),  ->  rt.len_(v), rt.int_(v), rt.float_(v),
    bool(v), reversed(v),          rt.bool_(v), rt.reversed_(v),
    sum(v), sum(v, start)          rt.sum_(v), rt.sum_(v, start)
    lst.pop(), lst.pop(i)      ->  rt.pop(lst), rt.pop(lst, i)
    v[i], v[a:b:c]             ->  rt.getitem(v, i), rt.getitem(v, slice(a, b, c))
    not v                      ->  rt.not_(v)      (outside if/while tests too)
    isinstance(v, cls)         ->  rt.isinstance_(v, cls)
    torch.is_tensor(v),        ->  rt.tensor_call(torch.is_tensor, v),
    Variable(v, ...)               rt.tensor_call(Variable, v, ...)
                                   (any call so named; the runtime checks which)

A MaskedBatch holds one Tensor per example, so these answer as for a Tensor.

Only the builtins are rewritten (not a local variable named ``len``), and
only a subscript whose index is not a tuple (``x[:, i]`` cannot index a
list; it stays as it is).
"""
import gast

from . import templates
from .analysis import local_names
from .passes import Pass

_METHODS = {"size": "size", "item": "item", "pop": "pop"}
_BUILTINS = {"len": "len_", "int": "int_", "float": "float_", "bool": "bool_",
             "reversed": "reversed_", "sum": "sum_"}
_TENSOR_CALLS = {"is_tensor", "Variable"}


class _Values(Pass):
    # a lambda made by the earlier passes (and/or tests) holds user code
    visit_Lambda = gast.NodeTransformer.generic_visit

    def __init__(self, ctx, names):
        super().__init__(ctx)
        self.names = names

    def _rt(self, name, origin):
        return templates.replace_as_expression(f"rt.{name}", origin, rt=self.ctx.runtime)

    def _runtime(self, node):
        return isinstance(node, gast.Name) and node.id == self.ctx.runtime

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, gast.Attribute) and not self._runtime(func.value) \
                and func.attr in _METHODS and not (func.attr == "item" and node.args):
            obj = self.visit(func.value)
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
            node.func = self._rt(_METHODS[func.attr], func)
            node.args = [obj] + node.args
            return node
        if isinstance(func, gast.Name) and func.id in _BUILTINS and func.id not in self.names \
                and (len(node.args) == 1 or func.id == "sum" and len(node.args) == 2) \
                and not node.keywords and not any(isinstance(a, gast.Starred) for a in node.args):
            node.args = [self.visit(a) for a in node.args]
            node.func = self._rt(_BUILTINS[func.id], func)
            return node
        if isinstance(func, gast.Name) and func.id == "isinstance" and func.id not in self.names \
                and len(node.args) == 2 and not node.keywords:
            node.args = [self.visit(a) for a in node.args]
            node.func = self._rt("isinstance_", func)
            return node
        if isinstance(func, gast.Attribute) and self._runtime(func.value):
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
            return node
        name = func.id if isinstance(func, gast.Name) else getattr(func, "attr", None)
        if name in _TENSOR_CALLS:
            self.generic_visit(node)
            node.args = [node.func] + node.args
            node.func = self._rt("tensor_call", func)
            return node
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr == "shape" and isinstance(node.ctx, gast.Load) \
                and not self._runtime(node.value):
            return templates.replace_as_expression("rt.shape(x)", node, rt=self.ctx.runtime,
                                                   x=node.value)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        key = node.slice
        if not isinstance(node.ctx, gast.Load) or isinstance(key, gast.Tuple) \
                or isinstance(key, gast.Constant) and key.value is Ellipsis:
            return node
        if isinstance(key, gast.Slice):
            parts = [templates.constant(None) if p is None else p
                     for p in (key.lower, key.upper, key.step)]
            key = templates.replace_as_expression("slice(a, b, c)", node, a=parts[0],
                                                  b=parts[1], c=parts[2])
        return templates.replace_as_expression("rt.getitem(x, k)", node, rt=self.ctx.runtime,
                                               x=node.value, k=key)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, gast.Not):
            return templates.replace_as_expression("rt.not_(x)", node, rt=self.ctx.runtime,
                                                   x=node.operand)
        return node


def transform(fdef, ctx):
    return _Values.run(fdef, ctx, local_names(fdef))
