"""Gate reads inside masked regions: ``x`` -> ``_mb.read(x)``.

A local variable read inside a branch or loop body is fed to the code there
with its dormant lanes detached, so whatever a dormant lane computes (a
``log`` of a negative, an overflow) adds exactly zero gradient.  The reads
of one value under the same lanes share that cut; the target of an
in-place op (``x.add_(v)``, ``torch.relu_(x)``, ``F.relu(x, inplace=True)``,
``out=x``) is read on its own: ``rt.read(x, shared=False)``.

With ``@batch(compact=...)`` every value loaded in a region goes through
``read`` (globals, closure variables, ``obj.attr`` and ``xs[i]`` too), so a
compacted loop sees the live lanes of whatever it reads.
"""
import gast

from . import templates
from .analysis import local_names
from .passes import Pass


class _Reads(Pass):
    # a lambda's reads run where it is called, inside the region
    visit_Lambda = gast.NodeTransformer.generic_visit

    def __init__(self, ctx, names):
        super().__init__(ctx)
        self.names = names

    def _gated(self, node, local=False, own=False):
        """``node``, through ``rt.read`` if it is loaded in a region and is a
        local variable (or anything, when compacting); ``own``: the target
        of an in-place op, which takes a read of its own."""
        if self.depth and isinstance(node.ctx, gast.Load) and (
                local or self.ctx.compact is not None):
            call = "rt.read(x, shared=False)" if own else "rt.read(x)"
            return templates.replace_as_expression(call, node, rt=self.ctx.runtime, x=node)
        return node

    def _target_of(self, node):
        """``node`` as an in-place op's target: a local's own read."""
        if isinstance(node, gast.Name):
            return self._gated(node, node.id in self.names, own=True)
        return self.visit(node)

    def visit_Name(self, node):
        return self._gated(node, node.id in self.names)

    def _global(self, node):
        """A name that is not the function's own (a module, a global)."""
        return isinstance(node, gast.Name) and node.id not in self.names

    def visit_Attribute(self, node):
        if not self._global(node.value):  # torch.float32, F.relu: not gated
            node.value = self.visit(node.value)
        return self._gated(node)

    def visit_Subscript(self, node):
        return self._gated(self.generic_visit(node))

    def visit_Call(self, node):
        func = node.func
        name = func.attr if isinstance(func, gast.Attribute) else getattr(func, "id", "")
        in_place = name.endswith("_") and not name.startswith("_") or any(
            k.arg == "inplace" and not (isinstance(k.value, gast.Constant) and not k.value.value)
            for k in node.keywords)
        targets = False  # are the arguments the in-place op's targets?
        if isinstance(func, gast.Attribute):
            if self._global(func.value):  # torch.relu_(x), F.relu(x, inplace=True)
                targets = in_place
            else:  # a method: gate its object only; x.add_(v) writes x
                func.value = self._target_of(func.value) if in_place else self.visit(func.value)
        elif isinstance(func, gast.Name):
            targets = in_place
        else:
            node.func = self.visit(func)
        node.args = [self._target_of(a) if targets else self.visit(a) for a in node.args]
        for k in node.keywords:
            k.value = self._target_of(k.value) if k.arg == "out" else self.visit(k.value)
        return node

    def _target(self, t):
        """Store targets: the object a subscript or attribute store writes
        into is not gated (the write must reach the variable itself)."""
        if isinstance(t, (gast.Subscript, gast.Attribute)):
            if not isinstance(t.value, gast.Name):
                t.value = self.visit(t.value)
            if isinstance(t, gast.Subscript):
                t.slice = self.visit(t.slice)
            return t
        if isinstance(t, (gast.Tuple, gast.List)):
            t.elts = [self._target(e) for e in t.elts]
            return t
        if isinstance(t, gast.Starred):
            t.value = self._target(t.value)
            return t
        return t

    def visit_Assign(self, node):
        node.value = self.visit(node.value)
        node.targets = [self._target(t) for t in node.targets]
        return node

    def visit_AugAssign(self, node):
        node.value = self.visit(node.value)
        node.target = self._target(node.target)
        return node

    def visit_AnnAssign(self, node):
        if node.value is not None:
            node.value = self.visit(node.value)
        node.target = self._target(node.target)
        return node

    # a conditional expression's branches are regions, as an if statement's
    visit_IfExp = Pass.visit_If


def transform(fdef, ctx):
    return _Reads.run(fdef, ctx, local_names(fdef))
