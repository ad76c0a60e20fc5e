"""Run sibling recursive calls as one call (by default, when the
function's effects allow it; ``@batch(merge_calls=True/False)`` forces it
on or off).

A recursion over trees calls itself once per child:

    a = f(x, left)                tmp = _mb.sibling_calls(f, (x, left), (x, right))
    b = f(x, right)       ->      a = tmp[0]
                                  b = tmp[1]

Run one after the other, each call recurses for the lanes active at it, so
the calls follow paths from the root: one call per path that some example
has.  ``sibling_calls`` runs both as ONE call on the active lanes of the
two, stacked (runtime/calls.py), so a recursion runs one call per depth.
The examples' own values and gradients are the same; what changes is the
order of side effects between the calls (all of them at once, not the
first's then the second's) and how often a per-call effect runs.  So with
the default ``merge_calls=None`` the calls are merged only when
effects.py finds no effect of the function that merging could change
(writes to globals, stores into or mutations of values from outside,
known-impure calls); otherwise they stay plain calls and the rewritten
source starts with a note saying why (``ctx.notes``, printed by
``to_source``).

Merged: two or more consecutive assignments ``target = f(args)`` whose
``f`` is the function itself (``name(...)`` or ``self.name(...)``), with
positional arguments only, where no call's arguments or function read
what an earlier one of them assigns.  And a loop over a node's children
whose body is only ``lst.append(f(args))`` (n-ary trees), ``lst`` not read
by the loop's iterable, target or call:

    for c in kids:                calls = _mb.SiblingLoop(f, auto)
        hs.append(f(c))   ->      for c in kids:
                                      calls.defer(hs, c)
                                  calls.run()

``defer`` records each iteration's arguments and active lanes; ``run``
makes every iteration's call one stacked call and appends each part to
``hs`` with the lanes it had, so ``hs`` ends as the loop would leave it.

A branch that holds merged calls runs gathered on its lanes (see
conditionals.py) unless the function reads values from outside
(``effects.reads_outside``).  The function's own calls that stay plain
become ``_mb.recursive(f)(args)``: the callee runs outside a compaction
that its caller gathers for (the same code would take it for its own).
"""
import gast

from . import templates
from .analysis import walk_scope
from .effects import effects, reads_outside


def _names(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


class _Merger:
    def __init__(self, fdef, ctx, auto):
        self.ctx, self.name, self.auto = ctx, fdef.name, auto
        args = fdef.args.posonlyargs + fdef.args.args
        self.self_name = args[0].id if args else None  # gast: parameters are Names

    def _recursive_call(self, stmt):
        """The call of ``stmt`` if it is ``target = f(args)`` with ``f`` the function itself."""
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.value, gast.Call)):
            return None
        call = stmt.value
        if call.keywords or any(isinstance(a, gast.Starred) for a in call.args):
            return None
        if not all(isinstance(n, (gast.Name, gast.Tuple, gast.List))
                   for n in gast.walk(stmt.targets[0]) if isinstance(n, gast.expr)):
            return None
        return call if self._itself(call.func) else None

    def _itself(self, func):
        """Is ``func`` the function itself (``name`` or ``self.name``)?"""
        return (isinstance(func, gast.Name) and func.id == self.name) or (
            isinstance(func, gast.Attribute) and func.attr == self.name
            and isinstance(func.value, gast.Name) and func.value.id == self.self_name)

    def _run(self, stmts, i):
        """The consecutive independent recursive calls starting at ``stmts[i]``."""
        first = self._recursive_call(stmts[i])
        if not first:
            return []
        run, assigned = [stmts[i]], _names(stmts[i].targets[0])
        for s in stmts[i + 1:]:
            call = self._recursive_call(s)
            if not call or gast.dump(call.func) != gast.dump(first.func) \
                    or assigned & _names(call):
                break
            run.append(s)
            assigned |= _names(s.targets[0])
        return run if len(run) > 1 else []

    def _child_loop(self, stmt):
        """The list and the call of ``for c in kids: lst.append(f(args))``."""
        if not (isinstance(stmt, gast.For) and not stmt.orelse and len(stmt.body) == 1
                and isinstance(stmt.body[0], gast.Expr)):
            return None
        append = stmt.body[0].value
        if not (isinstance(append, gast.Call) and isinstance(append.func, gast.Attribute)
                and append.func.attr == "append" and isinstance(append.func.value, gast.Name)
                and len(append.args) == 1 and not append.keywords):
            return None
        lst, call = append.func.value.id, append.args[0]
        if not (isinstance(call, gast.Call) and self._recursive_call(
                gast.Assign(targets=[gast.Name(id="_", ctx=gast.Store(), annotation=None,
                                               type_comment=None)], value=call))):
            return None
        if lst in _names(stmt.iter) | _names(call) | _names(stmt.target):
            return None
        return append.func.value, call

    def _merged_loop(self, loop, lst, call):
        """``for c in kids: lst.append(f(args))`` -> the calls recorded in
        the loop, run as one after it (runtime ``SiblingLoop``)."""
        calls = self.ctx.namer.new("child_calls")
        start, end = templates.replace(
            """
            calls = rt.SiblingLoop(f, auto)
            calls.run()
            """, loop, calls=calls, rt=self.ctx.runtime, f=call.func,
            auto=gast.Constant(value=self.auto, kind=None))
        defer = templates.replace_as_expression("calls.defer(lst)", loop.body[0], calls=calls,
                                                lst=lst)
        defer.args += call.args
        loop.body[0].value = defer
        return [start, loop, end]

    def statements(self, stmts, merge):
        """``stmts`` with each run of sibling calls merged (``merge``), and
        whether there was one."""
        out, i, found = [], 0, False
        while i < len(stmts):
            loop = self._child_loop(stmts[i])
            if loop:
                found = True
                out += self._merged_loop(stmts[i], *loop) if merge else [stmts[i]]
                i += 1
                continue
            run = self._run(stmts, i)
            found |= bool(run)
            if run and merge:
                out += self._merged(run)
                i += len(run)
            else:
                out.append(stmts[i])
                i += 1
        return out, found

    def _merged(self, run):
        """The first call becomes the merged call and each call a store of
        its part, in place: nodes keep their identity, which
        ``ctx.loop_temporaries`` is keyed by."""
        tmp = self.ctx.namer.new("calls")
        first = run[0]
        call, unpack = templates.replace(
            """
            tmp = rt.sibling_calls(f, calls)
            target = tmp[0]
            """, first, tmp=tmp, rt=self.ctx.runtime, f=first.value.func, calls=gast.Constant(
                value=None, kind=None), target=first.targets[0])
        call.value.args[1:] = [gast.Tuple(elts=s.value.args, ctx=gast.Load()) for s in run]
        if self.auto:
            call.value.keywords = [gast.keyword(arg="auto", value=gast.Constant(
                value=True, kind=None))]
        templates.stamp(call.value, first)
        # ``tmp`` is read only by the stores right after it: it needs no
        # masking; the first call's targets are now stored by ``unpack``
        temps = self.ctx.loop_temporaries
        temps |= {(id(unpack), name) for i, name in temps if i == id(first)} | {(id(first), tmp)}
        out = [first, unpack]
        first.targets, first.value = call.targets, call.value
        for k, s in enumerate(run[1:], 1):
            s.value = templates.replace_as_expression(f"tmp[{k}]", s.value, tmp=tmp)
            out.append(s)
        return out


def _blocks(fdef):
    for node in [fdef, *walk_scope(fdef.body)]:
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], gast.stmt):
                yield node, field, stmts


class _Plain(gast.NodeTransformer):
    """``f(args)`` -> ``rt.recursive(f)(args)`` for the function's own
    calls that stay plain: in a branch or loop that runs gathered, the
    callee (the same code) must not take the caller's compaction for its own."""

    def __init__(self, merger, rt):
        self.merger, self.rt = merger, rt

    def visit_Call(self, node):
        self.generic_visit(node)
        if self.merger._itself(node.func):
            node.func = templates.replace_as_expression("rt.recursive(f)", node.func,
                                                        rt=self.rt, f=node.func)
        return node


def transform(fdef, ctx):
    # a branch holding merged calls runs gathered (conditionals.py) unless
    # the function reads values from outside that may hold the whole batch
    ctx.gather_merged = not reads_outside(fdef)
    if ctx.merge_calls is not False:
        _merge(fdef, ctx)
    for stmt in fdef.body:
        _Plain(_Merger(fdef, ctx, False), ctx.runtime).visit(stmt)
    return fdef


def _merge(fdef, ctx):
    auto = ctx.merge_calls is None
    merge = not (auto and effects(fdef))
    merger, found = _Merger(fdef, ctx, auto), False
    for node, field, stmts in list(_blocks(fdef)):
        stmts, here = merger.statements(stmts, merge)
        setattr(node, field, stmts)
        found |= here
    if found and not merge:
        ctx.notes += [f"sibling calls not merged: {why}" for why in effects(fdef)]
