"""Small static analyses over a function's gast tree (scope-aware walks)."""
import gast

__all__ = ["SCOPES", "LOOPS", "walk_scope", "contains", "assigned_names", "param_names",
           "local_names", "jumps_of_loop", "loop_temporaries"]

SCOPES = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef,
          gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp)
LOOPS = (gast.For, gast.While, gast.AsyncFor)


def walk_scope(nodes, stop=SCOPES):
    """Every node under ``nodes`` without entering nodes of type ``stop``
    (a test's thunk that logical.py made, ``mb_thunk``, is entered: it is
    the function's own code, and walrus.py makes its walrus bind there)."""
    todo = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        yield node
        for child in gast.iter_child_nodes(node):
            if not isinstance(child, stop) or getattr(child, "mb_thunk", False):
                todo.append(child)


def contains(nodes, types, stop=SCOPES):
    return any(isinstance(n, types) for n in walk_scope(nodes, stop))


def jumps_of_loop(nodes, kind):
    """Does this code hold a ``kind`` (Break/Continue) that belongs to the
    enclosing loop (not to a loop nested in it; a nested loop's ``else``
    still belongs to the enclosing one)?"""
    todo = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        if isinstance(node, kind):
            return True
        if isinstance(node, SCOPES):
            continue
        if isinstance(node, LOOPS):
            todo.extend(node.orelse)
            continue
        todo.extend(gast.iter_child_nodes(node))
    return False


def assigned_names(nodes):
    names = set()
    for n in walk_scope(nodes):
        if isinstance(n, gast.Name) and isinstance(n.ctx, (gast.Store, gast.Del)):
            names.add(n.id)
        elif isinstance(n, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (gast.Import, gast.ImportFrom)):
            for a in n.names:
                names.add((a.asname or a.name).split(".")[0])
    return names


def param_names(fdef):
    a = fdef.args
    names = a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]
    return {x.id for x in names}  # gast: parameters are Names with ctx Param


def declared_outer(fdef):
    out = set()
    for n in walk_scope(fdef.body):
        if isinstance(n, (gast.Global, gast.Nonlocal)):
            out |= set(n.names)
    return out


def local_names(fdef):
    return (param_names(fdef) | assigned_names(fdef.body)) - declared_outer(fdef)


def _names(node):
    return {n.id for n in walk_scope(node) if isinstance(n, gast.Name)}


def _target_names(target):
    """The names a plain target binds, or None for anything else (attributes,
    subscripts, starred)."""
    if isinstance(target, gast.Name):
        return {target.id}
    if isinstance(target, (gast.Tuple, gast.List)):
        parts = [_target_names(t) for t in target.elts]
        return None if None in parts else set().union(*parts)
    return None


def _first_binds(block):
    """``[(node, name, ids of block's nodes)]`` for the assignments at the
    top level of ``block`` that are the first mention of ``name`` in it
    and do not read it, and the same within the branches of the ``if``
    statements at its top level (each branch a block of its own)."""
    ids = {id(n) for s in block for n in walk_scope(s)}
    binds, seen = [], set()
    for stmt in block:
        if isinstance(stmt, gast.Assign):
            bound = [_target_names(t) for t in stmt.targets]
            if None not in bound:
                fresh = set().union(*bound) - seen - _names(stmt.value)
                binds += [(stmt, name, ids) for name in fresh]
        elif isinstance(stmt, gast.If):
            binds += _first_binds(stmt.body) + _first_binds(stmt.orelse)
        seen |= _names(stmt)
    return binds


def loop_temporaries(fdef):
    """``{(id(node), name)}``: stores that need no masking because ``name``
    is a loop (or branch) temporary.  ``node`` is a ``for`` (its target) or
    an assignment at the top level of a block, the block being a loop body
    or a branch of an ``if``, that is
    the first mention of ``name`` in that block and does not read it; and
    every read of ``name`` in the function lies in a block that binds it
    that way (not in a loop test, an ``if`` test or a loop's ``else``, not
    after the loop, not in nested functions).  Every run of the block then
    binds ``name`` before reading it, and only lanes that were active at
    the binding read it afterwards (lanes only leave during a block), so
    what its dormant lanes hold is never seen.  A binding inside another
    block that binds ``name`` too is left out: after the inner block the
    outer one may read ``name`` in lanes the inner one skipped."""
    loads = {}
    for n in walk_scope(fdef.body):
        if isinstance(n, gast.Name) and not isinstance(n.ctx, gast.Store):
            loads.setdefault(n.id, []).append(id(n))
    excluded = param_names(fdef) | declared_outer(fdef)
    for n in walk_scope(fdef.body):
        if isinstance(n, SCOPES):
            excluded |= {m.id for m in gast.walk(n) if isinstance(m, gast.Name)}

    binds = []   # (node, name, ids of the nodes of the block it binds in)
    for loop in walk_scope(fdef.body):
        if not isinstance(loop, LOOPS):
            continue
        if isinstance(loop, (gast.For, gast.AsyncFor)):
            body = {id(n) for s in loop.body for n in walk_scope(s)}
            binds += [(loop, name, body) for name in _target_names(loop.target) or ()]
        binds += _first_binds(loop.body)
    for branch in walk_scope(fdef.body):  # and the branches of every ``if``
        if isinstance(branch, gast.If):
            binds += _first_binds(branch.body) + _first_binds(branch.orelse)
    where = {}
    for _, name, body in binds:
        where.setdefault(name, set()).update(body)
    # a binding inside another block that binds the same name is masked: the
    # outer block may read the name after it, in lanes the inner one skipped
    nested = {(id(node), name) for node, name, _ in binds
              for other, name2, body in binds
              if name2 == name and other is not node and id(node) in body}
    return {(id(node), name) for node, name, _ in binds if name not in excluded
            and (id(node), name) not in nested
            and all(i in where[name] for i in loads.get(name, ()))}


def runtime_call(n, rt, names=None):
    """Is ``n`` a call ``rt.<name>(...)`` of the @batch runtime (with a
    name in ``names``, when given)?"""
    return isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) \
        and isinstance(n.func.value, gast.Name) and n.func.value.id == rt \
        and (names is None or n.func.attr in names)
