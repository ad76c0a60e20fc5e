"""Lower ``while`` and ``for`` to loops whose lanes leave one by one.

    while test:                 with _mb.while_loop(desc, max_iterations) as loop:
        body            ->          while loop.test(test):
    else:                               body
        orelse                  if not break_:        (lowered by conditionals.py)
                                    orelse

``loop.test`` evaluates the test once per iteration for the lanes still in
the loop; a lane whose test is false leaves for good; the loop ends when no
lane is left.  A ``for`` runs an iteration for the lanes that have the item
(elements of a dynamic dimension, a per-example ``range``):

    for x in xs:                with _mb.for_loop(xs, extra, desc, max) as loop:
        body            ->          for x in loop:
                                        body

``extra`` tests the loop's exit flags (break, return) at each iteration.
A ``for`` whose body is straight-line code runs it as a function of its
own, once per step, which torch.compile traces once (steps.py).

With ``@batch(compact=...)`` a ``for`` without exit flags may run
compacted (see compaction.py); the variables it assigns are then put back
together after it:

    with _mb.for_loop(xs, None, desc, max, compact=share) as loop:
        for x in loop:
            body
    h = loop.settle(h)          (one line per variable the body assigns)
"""
import copy

import gast

from . import steps, templates
from .analysis import assigned_names, runtime_call, walk_scope
from .passes import Pass


class _Loops(Pass):
    def _description(self, kind, node):
        return templates.constant(f"{kind} loop at {self.ctx.origin.filename}:{node.lineno} "
                            f"(in {self.ctx.fn_name})")

    def _alive(self, flags, node, test=None):
        """An expression that is true while no exit flag is set (and ``test``)."""
        rt = self.ctx.runtime
        out = test
        # a compacted loop must read its flags' live lanes, as any read
        gate = "rt.not_(rt.read(f))" if self.ctx.compact is not None else "rt.not_(f)"
        for flag in reversed(flags):
            term = templates.replace_as_expression(gate, node, rt=rt, f=flag)
            if out is not None:
                out = templates.replace_as_expression("rt.and_(a, lambda: b)", node, rt=rt,
                                                      a=term, b=out)
                out.args[1].mb_thunk = True  # the function's own code (analysis.walk_scope)
            else:
                out = term
        return out

    def _orelse(self, node, flags):
        if not node.orelse:
            return []
        test = self._alive(flags, node)
        if test is None:
            return node.orelse
        return templates.replace("if test:\n    body", node.orelse[0], test=test, body=node.orelse)

    def visit_While(self, node):
        self.generic_visit(node)
        flags = getattr(node, "mb_exit_flags", [])
        loop = self.ctx.namer.new("loop")
        template = """
            with rt.while_loop(desc, limit) as loop:
                while loop.test(test):
                    body
            """
        if self.ctx.compact is not None and not _stores_into_subscripts(node.body, self.ctx.runtime):
            # see compaction.py; x[i] = v would write into a copy of the live lanes
            template = template.replace("(desc, limit)", "(desc, limit, compact=share)")
        out = templates.replace(
            template, node, rt=self.ctx.runtime, desc=self._description("while", node),
            limit=templates.constant(self.ctx.max_iterations), share=templates.constant(self.ctx.compact),
            loop=loop, test=self._alive(flags, node, node.test), body=node.body)
        return out + self._orelse(node, flags)

    def visit_For(self, node):
        self.generic_visit(node)
        flags = getattr(node, "mb_exit_flags", [])
        loop = self.ctx.namer.new("loop")
        alive = self._alive(flags, node)
        extra = templates.constant(None) if alive is None else templates.replace_as_expression(
            "lambda: alive", node, alive=alive)
        template = """
            with rt.for_loop(iterable, extra, desc, limit) as loop:
                for target in loop:
                    body
            """
        found = self.ctx.map_loops.get(id(node))
        if found is not None and not flags:
            return self._map(node, loop, *found)
        desc = self._description("for", node)
        limit = templates.constant(self.ctx.max_iterations)
        step = self.ctx.step_loops.get(id(node))
        if step is not None and not flags:
            return steps.lift(node, self.ctx, *step, desc, limit)
        settle = []
        if self.ctx.compact is not None and not flags \
                and not _stores_into_subscripts(node.body, self.ctx.runtime):
            template = template.replace("limit)", "limit, compact=share)")
            for name in _assigned_through_runtime(node.body, self.ctx.runtime):
                settle += templates.replace("x = loop.settle(x)", node, x=name, loop=loop)
        out = templates.replace(
            template, node, rt=self.ctx.runtime, iterable=node.iter, extra=extra,
            desc=desc, limit=limit, share=templates.constant(self.ctx.compact), loop=loop,
            target=node.target, body=node.body)
        return out + settle + self._orelse(node, flags)

    def _map(self, node, loop, appends, reads):
        """A loop whose iterations share no state (maps.py): run once on
        every step; its ``lst.append(v)`` become ``loop.append(lst, v)``;
        ``lambda: (reads...)`` gives the values it reads from before it."""
        rt = self.ctx.runtime
        it = node.iter
        zipped = runtime_call(it, rt, ("zip_",)) and not it.keywords \
            and not any(isinstance(a, gast.Starred) for a in it.args)
        args = it.args if zipped else [it]
        for n in walk_scope(node.body):
            if runtime_call(n, rt, ("append",)) and len(n.args) == 2:
                lst = n.args[0]
                if runtime_call(lst, rt, ("read",)):
                    lst = lst.args[0]
                if isinstance(lst, gast.Name) and lst.id in appends:
                    n.func = gast.Attribute(gast.Name(loop, gast.Load(), None, None), "append",
                                            gast.Load())
                    n.args[0] = lst
        # the helpers it calls (self.spell, meter.update): one that changes state
        # makes it run step by step (runtime/maps.py)
        local = assigned_names(node.body) | assigned_names([node.target])
        helpers = [copy.deepcopy(n.args[0]) for n in walk_scope(node.body)
                   if runtime_call(n, rt, ("converted",)) and n.args
                   and not {m.id for m in gast.walk(n.args[0]) if isinstance(m, gast.Name)} & local]
        out = templates.replace(
            """
            with rt.map_loop(desc, limit, zipped, lambda: reads, lambda: helpers) as loop:
                for target in loop:
                    body
            """, node, rt=rt, desc=self._description("for", node),
            limit=templates.constant(self.ctx.max_iterations), zipped=templates.constant(zipped),
            reads=gast.Tuple([gast.Name(r, gast.Load(), None, None) for r in reads], gast.Load()),
            helpers=gast.Tuple(helpers, gast.Load()),
            loop=loop, target=node.target, body=node.body)
        out[0].items[0].context_expr.args += args
        return out


def transform(fdef, ctx):
    return _Loops.run(fdef, ctx)


def _stores_into_subscripts(body, rt):
    """Does ``body`` store into a subscript (``x[i] = v``, or ``d[k] = v``
    that the assignments pass made ``rt.setitem(d, k, v)``) or change a
    local in place (``rt.inplace(x, 'add_', ...)``)?"""
    return any(isinstance(n, gast.Subscript) and not isinstance(n.ctx, gast.Load)
               or runtime_call(n, rt, ("setitem", "inplace")) for n in walk_scope(body))



def _assigned_through_runtime(body, rt):
    """The variables that ``body`` assigns with ``rt.assign`` or
    ``rt.aug_assign``, walrus included (a compacted loop may keep their
    values compacted)."""
    names = set()
    for n in walk_scope(body):
        if isinstance(n, gast.Assign) and runtime_call(n.value, rt, ("assign", "aug_assign")):
            names.add(n.targets[0].id)
        elif isinstance(n, gast.NamedExpr) and runtime_call(n.value, rt, ("assign",)):
            names.add(n.target.id)   # (x := rt.assign(x, v))
    return sorted(names)
