"""Small static analyses over a function's AST (scope-aware walks)."""
import ast

__all__ = ["SCOPES", "LOOPS", "walk_scope", "contains", "assigned_names", "param_names",
           "local_names", "jumps_of_loop"]

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
          ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
LOOPS = (ast.For, ast.While, ast.AsyncFor)


def walk_scope(nodes, stop=SCOPES):
    """Every node under ``nodes`` without entering nodes of type ``stop``."""
    todo = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, stop):
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
        todo.extend(ast.iter_child_nodes(node))
    return False


def assigned_names(nodes):
    names = set()
    for n in walk_scope(nodes):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                names.add((a.asname or a.name).split(".")[0])
    return names


def param_names(fdef):
    a = fdef.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg:
        names.append(a.vararg.arg)
    if a.kwarg:
        names.append(a.kwarg.arg)
    return set(names)


def declared_outer(fdef):
    out = set()
    for n in walk_scope(fdef.body):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            out |= set(n.names)
    return out


def local_names(fdef):
    return (param_names(fdef) | assigned_names(fdef.body)) - declared_outer(fdef)
