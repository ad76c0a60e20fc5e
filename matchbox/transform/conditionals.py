"""Lower ``if``/``elif``/``else`` and conditional expressions.

    if test:                    cond = _mb.cond(test)          (evaluated once)
        body                    with _mb.if_true(cond) as run:
    else:               ->          if run:
        orelse                          body
                                with _mb.if_false(cond) as run:
                                    if run:
                                        orelse

A Python-valued condition keeps Python semantics (``run`` is the bool); a
per-example one narrows the active lanes for each branch and skips a branch
no lane takes.  ``a if c else b`` -> ``_mb.if_exp(c, lambda: a, lambda: b)``.

A branch that may run gathered on the lanes that take it (when few do:
runtime/branch_compaction.py decides at run time) names itself and the
function's ``compact=`` share:

    with _mb.if_true(cond, 'if branch at f.py:12 (in f)', None) as run:

That is every branch whose body stores into no subscript (the store would
reach a copy of the gathered rows) and calls no in-place method
(``x.add_(v)``, ``inplace=True``); with the default ``compact=None`` only
bodies heavy enough to pay for the gather: one that holds a loop, or calls
something other than a tensor method or a ``torch``/``F`` function (a
module, a method of ``self``, a function) and reads at most
``BRANCH_MAX_READS`` variables.  ``compact=False``: none.
A branch that holds merged sibling calls (sibling_calls.py) runs gathered
whenever some lanes skip it (share 1.0): the stacked call runs on its lanes
only anyway, so gathering saves scattering the calls' results back and
running the rest of the branch on the lanes that skip it.
"""
import gast

from . import templates
from .analysis import runtime_call, walk_scope
from .passes import Pass

# module-level names whose functions are single ops, not heavy bodies
_OP_MODULES = {"torch", "F", "TF", "nn", "math", "np", "matchbox"}
_BUILTINS = {"len", "int", "float", "bool", "abs", "min", "max", "range", "sum", "tuple", "list",
             "zip", "enumerate", "reversed", "isinstance", "print", "round"}


class _Conditionals(Pass):
    # a conditional expression inside a lambda is per example too
    visit_Lambda = gast.NodeTransformer.generic_visit

    def __init__(self, ctx, lists=frozenset(), holder=None):
        super().__init__(ctx)
        self.lists, self.holder = lists, holder

    def visit_If(self, node):
        self.generic_visit(node)
        rt = self.ctx.runtime
        cond, run = self.ctx.namer.new("cond"), self.ctx.namer.new("run")
        out = templates.replace(
            """
            cond = rt.cond(test)
            with rt.if_true(cond, gather) as run:
                if run:
                    body
            """, node, rt=rt, cond=cond, run=run, test=node.test, body=node.body)
        self._gather(out[1], node.body, node, "if")
        if node.orelse:
            out += templates.replace(
                """
                with rt.if_false(cond, gather) as run:
                    if run:
                        orelse
                """, node.orelse[0], rt=rt, cond=cond, run=run, orelse=node.orelse)
            self._gather(out[-1], node.orelse, node, "else")
        return out

    def _gather(self, with_node, body, node, kind):
        """Fill in the ``gather`` arguments of a branch's ``with`` (none for
        a branch that must stay masked)."""
        call = with_node.items[0].context_expr
        call.args = call.args[:1]
        merged = getattr(self.ctx, "gather_merged", False) and any(
            runtime_call(n, self.ctx.runtime) and n.func.attr == "sibling_calls"
            for n in walk_scope(body))
        if not self.ctx.gather_branches or not _gatherable(body, self.ctx.runtime, self.lists) \
                or self.ctx.compact is None and not merged and not _heavy(body, self.ctx.runtime):
            return
        where = f"{kind} branch at {self.ctx.origin.filename}:{node.lineno} (in {self.ctx.fn_name})"
        share = self.ctx.compact
        if share is None and merged:
            share = 1.0  # merged recursive calls gather their lanes anyway: always gather the branch
        call.args += [templates.constant(where), templates.constant(share)]
        if self.holder is not None:  # a method: its self's attributes are gathered too,
            # and those of the parts of self it calls (self.speller(w): a submodule's cache)
            call.args.append(templates.name(self.holder))
            call.args += [templates.constant(a) for a in _called_parts(body, self.holder,
                                                                        self.ctx.runtime)]

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return templates.replace_as_expression(
            "rt.if_exp(test, lambda: body, lambda: orelse)", node, rt=self.ctx.runtime,
            test=node.test, body=node.body, orelse=node.orelse)


def transform(fdef, ctx):
    lists = {t.id for n in gast.walk(fdef) if isinstance(n, gast.Assign)
             and _makes_list(n.value, ctx.runtime)
             for t in n.targets if isinstance(t, gast.Name)}
    args = fdef.args.posonlyargs + fdef.args.args
    holder = "self" if args and args[0].id == "self" else None
    return _Conditionals.run(fdef, ctx, frozenset(lists), holder)


def _makes_list(value, rt):
    """``[...]``, a list comprehension, or either as the new value of the
    assignments pass's ``_mb.assign(old, new)``."""
    if runtime_call(value, rt) and value.func.attr == "assign" and len(value.args) == 2:
        value = value.args[1]
    return isinstance(value, (gast.List, gast.ListComp))


# the runtime's per-example list operations: a list read for them stays whole
_LIST_OPS = {"append", "extend", "insert", "pop", "getitem", "len_", "aug_assign", "cond"}


def _gatherable(body, rt, lists):
    """Can ``body`` run on a gathered copy of its lanes?  Not if it stores
    into a subscript, changes a value in place, or hands a per-example list
    to anything but the runtime's list operations (``F.stack(out, 1)``
    would stack every lane's items)."""
    for n in walk_scope(body):
        if isinstance(n, gast.Call) and not (runtime_call(n, rt) and n.func.attr in _LIST_OPS):
            for a in n.args + [k.value for k in n.keywords]:
                if runtime_call(a, rt) and a.func.attr == "read" and a.args:
                    a = a.args[0]
                if isinstance(a, gast.Name) and a.id in lists and not (
                        runtime_call(n, rt) and n.func.attr == "read"):
                    return False
        if isinstance(n, gast.Subscript) and not isinstance(n.ctx, gast.Load):
            return False
        if not isinstance(n, gast.Call):
            continue
        if runtime_call(n, rt):
            if n.func.attr in ("setitem", "inplace", "mutate"):  # x[k] = v, x.add_(v), s.add(v)
                return False
            continue
        if isinstance(n.func, gast.Attribute) and n.func.attr.endswith("_") \
                and not n.func.attr.endswith("__"):
            return False  # x.add_(v), x.copy_(v)
        if any(k.arg == "inplace" and not (isinstance(k.value, gast.Constant) and not k.value.value)
               for k in n.keywords):
            return False
    return True


def _called_parts(body, holder, rt):
    """The names ``X`` of the calls ``holder.X(...)`` in ``body``, in order."""
    parts = []
    for n in walk_scope(body):
        if not isinstance(n, gast.Call):
            continue
        func = n.func
        if runtime_call(func, rt, ("converted",)) and func.args:
            func = func.args[0]   # rt.converted(self.speller)(w)
        if isinstance(func, gast.Attribute) and func.attr not in parts:
            obj = func.value
            if runtime_call(obj, rt, ("read",)) and obj.args:
                obj = obj.args[0]
            if isinstance(obj, gast.Name) and obj.id == holder:
                parts.append(func.attr)
    return parts


def _root(expr, rt):
    """The name an attribute chain starts from, through ``rt.read(...)``."""
    while True:
        if isinstance(expr, gast.Attribute):
            expr = expr.value
        elif runtime_call(expr, rt) and expr.func.attr == "read" and expr.args:
            expr = expr.args[0]
        else:
            return expr.id if isinstance(expr, gast.Name) else None


# A body without a loop that reads more variables than this (``self`` aside)
# pays more for gathering them than running it on the branch's lanes saves
# (the parser's ``if sp > j: f = self.item(vecs, lmost, rmost, ...)``, 6
# reads: 9% slower gathered; the char tagger's ``e = self.spell(letters)``,
# 1 read: 3-8x faster; branch_compaction.py has the per-read cost).
BRANCH_MAX_READS = 3


def _heavy(body, rt):
    """Does ``body`` hold a loop, or call something heavier than one op
    while reading at most ``BRANCH_MAX_READS`` variables?"""
    if any(isinstance(n, gast.With) and runtime_call(n.items[0].context_expr, rt)
           and n.items[0].context_expr.func.attr in ("for_loop", "while_loop", "map_loop")
           for n in walk_scope(body)):
        return True
    reads = {n.args[0].id for n in walk_scope(body) if runtime_call(n, rt) and n.func.attr == "read"
             and n.args and isinstance(n.args[0], gast.Name) and n.args[0].id != "self"}
    if len(reads) > BRANCH_MAX_READS:
        return False
    for n in walk_scope(body):
        if runtime_call(n, rt, ("helper",)):
            return True       # rt.helper(helper, h): a call of a function of the module
        if not isinstance(n, gast.Call) or runtime_call(n, rt):
            continue
        func = n.func
        if runtime_call(func, rt, ("converted",)) and func.args:
            func = func.args[0]   # rt.converted(self.spell)(...): a call of self.spell
        if isinstance(func, gast.Name):
            if func.id not in _BUILTINS:
                return True   # helper(h), a module or function held in a variable
        elif isinstance(func, gast.Attribute):
            root = _root(func.value, rt)
            if root == "self" or root is not None and root not in _OP_MODULES \
                    and isinstance(func.value, gast.Attribute):
                return True   # self.cell(x), model.encoder(x)
        elif runtime_call(func, rt) and func.func.attr == "read":
            return True       # a callable local: cell(x, h)
    return False
