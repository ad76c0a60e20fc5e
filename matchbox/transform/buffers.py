"""Which local Tensors are the function's own (for ``buf[i] = v`` and
``buf.add_(v)`` under per-example control flow, runtime/assign.py).

A plain Tensor that code running for some examples only stores into
becomes one copy per example when the function made it: each example,
run alone, would have made its own.  Whether it did is decided here,
from the source.  A local name is *owned* when

- every binding of it is a new Tensor: a constructor (``torch.zeros``,
  ``x.new_zeros``, ``torch.full_like``, ``t.clone()``...), another
  function of torch (a view among them is refused at run time: its
  ``_base`` is set), arithmetic, or a method that may return its receiver
  called on such a value (``torch.zeros(n).to(device)``); a parameter
  counts when the first statement of the function that mentions it
  rebinds it so (``buf = buf.clone()``);
- no reference to it outlives the statement that reads it: it is never
  bound to another name or stored (``a = buf``, ``self.x = buf``,
  ``kept = [buf]``, ``lst.append(buf)``, ``d[buf] = v``), yielded, or
  put in a display, comprehension or iterator that is (``for b in
  [buf]``); the same for the result of a method that may return its
  receiver (``a = buf.add_(1)``, ``buf.to(device)``).  Returning it is
  fine: the examples that return are done with it.  A call that takes
  it (``F.relu(buf)``, ``self.cell(x, buf)``) is assumed not to keep it.
"""
import gast

from .analysis import declared_outer, param_names
from .effects import dotted, owned_names

__all__ = ["owned_buffers"]

# calls that make a new Tensor, whatever their receiver (torch.zeros, x.new_zeros)
_CONSTRUCTORS = {"zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
                 "full_like", "rand", "randn", "randint", "rand_like", "randn_like",
                 "randint_like", "randperm", "tensor", "arange", "linspace", "logspace", "eye",
                 "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "clone"}
# torch functions that may return their argument itself
_ALIASING = {"as_tensor", "asarray", "from_numpy", "frombuffer", "from_dlpack", "atleast_1d",
             "atleast_2d", "atleast_3d"}
_TORCH = {"torch", "F", "nn", "TF"}
# Tensor methods that may return their receiver (besides the in-place ``add_``...)
_MAY_RETURN_SELF = {"to", "type", "type_as", "contiguous", "float", "double", "half", "bfloat16",
                    "long", "int", "short", "char", "byte", "bool", "cpu", "cuda"}
# methods and functions that keep a reference to their argument
_KEEPERS = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft",
            "extendleft", "put", "put_nowait", "push", "register_buffer", "register_parameter",
            "setattr", "heappush"}
# calls whose result holds their argument (an iterator, a partial)
_HOLDERS = {"iter", "zip", "enumerate", "reversed", "map", "filter", "partial"}


def _returns_self(attr):
    return attr in _MAY_RETURN_SELF or attr.endswith("_") and not attr.startswith("_")


def _new_tensor(value):
    """Is ``value`` (an expression) a Tensor no other reference holds?"""
    if isinstance(value, (gast.BinOp, gast.UnaryOp)):
        return True
    if isinstance(value, gast.IfExp):
        return _new_tensor(value.body) and _new_tensor(value.orelse)
    if not isinstance(value, gast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, gast.Attribute) else getattr(func, "id", None)
    if name in _CONSTRUCTORS:
        return True
    if not isinstance(func, gast.Attribute):
        return False
    module = dotted(func.value)
    if module is not None and module.split(".")[0] in _TORCH:
        return name not in _ALIASING
    return _returns_self(name) and _new_tensor(func.value)


def _kept(node, parents, holds=False):
    """Could a reference to the value of ``node`` outlive its statement?
    ``holds``: ``node`` is a container (a display, an iterator) holding it."""
    p = parents.get(id(node))
    if isinstance(p, gast.keyword):
        node, p = p, parents.get(id(p))
    if isinstance(p, (gast.Assign, gast.AnnAssign, gast.NamedExpr)):
        return p.value is node or holds
    if isinstance(p, gast.AugAssign):   # lst += [buf]
        return holds
    if isinstance(p, gast.Return):
        return False
    if isinstance(p, (gast.Tuple, gast.List, gast.Set, gast.Dict, gast.Starred, gast.ListComp,
                      gast.SetComp, gast.DictComp, gast.GeneratorExp)):
        return _kept(p, parents, True)
    if isinstance(p, (gast.For, gast.comprehension)):   # the target binds each item
        return holds
    if isinstance(p, gast.IfExp):
        return p.test is not node and _kept(p, parents, holds)
    if isinstance(p, gast.BoolOp):
        return _kept(p, parents, holds)
    if isinstance(p, gast.Call):
        if p.func is node:
            return holds
        name = dotted(p.func) or getattr(p.func, "attr", "")
        short = name.rpartition(".")[2]
        if short in _KEEPERS:
            return True
        return short in _HOLDERS and _kept(p, parents, True)
    if isinstance(p, gast.Attribute):
        call = parents.get(id(p))
        if holds:
            return True
        return isinstance(call, gast.Call) and call.func is p and _returns_self(p.attr) \
            and _kept(call, parents)
    if isinstance(p, gast.Subscript):
        if p.value is node:
            return holds and _kept(p, parents)   # [buf, h][0] may be buf itself
        return not isinstance(p.ctx, gast.Load)  # d[buf] = v keeps the key
    return not isinstance(p, (gast.Compare, gast.BinOp, gast.UnaryOp, gast.Expr, gast.If,
                              gast.While, gast.Assert, gast.FormattedValue, gast.Slice))


def _first_rebinds(fdef, name):
    """Is the first top-level statement of ``fdef`` that mentions ``name``
    ``name = <a new Tensor>``?"""
    for stmt in fdef.body:
        if any(isinstance(n, gast.Name) and n.id == name for n in gast.walk(stmt)):
            return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], gast.Name) and stmt.targets[0].id == name \
                and _new_tensor(stmt.value)
    return False


def owned_buffers(fdef):
    """The local names of ``fdef`` that hold a Tensor of its own (see above)."""
    rebound = {p for p in param_names(fdef) if _first_rebinds(fdef, p)}
    names = owned_names(fdef, _new_tensor, rebound)
    for scope in gast.walk(fdef):   # a nested function may rebind it (nonlocal)
        if isinstance(scope, (gast.FunctionDef, gast.ClassDef)) and scope is not fdef:
            names -= declared_outer(scope)
    if not names:
        return set()
    parents = {id(c): n for n in gast.walk(fdef) for c in gast.iter_child_nodes(n)}
    loads = [n for n in gast.walk(fdef) if isinstance(n, gast.Name) and n.id in names
             and isinstance(n.ctx, gast.Load)]
    return names - {n.id for n in loads if _kept(n, parents)}
