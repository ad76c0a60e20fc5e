"""Effects analysis: may a function's sibling recursive calls run as one?

Merging ``a = f(left); b = f(right)`` into one call (sibling_calls.py)
keeps every example's values and gradients; what it changes is the order
of the calls' side effects (all of both calls at once, rather than the
first call's, then the second's) and how many times a per-call effect
runs (once, not twice).  So it is the default only for functions that
have no such effects: ``effects(fdef)`` lists, at decoration time, each
statement that could make merging change what an example computes:

- a write to a ``global`` / ``nonlocal`` name;
- an attribute or subscript store (or ``del``), a mutating method call
  (``append``, ``update``, ``pop``...), an in-place tensor method
  (``x.add_(y)``), an augmented assignment (``x += y``: in place on a
  tensor or a list) or an ``out=`` / ``inplace=True`` argument, on
  anything not created inside the function;
- a call of a function known to act on state outside its arguments
  (``print``, ``setattr``, ``next``, ``random.random``, ``torch.manual_seed``,
  any ``f_(...)`` named as torch's in-place functions).

"Created inside the function" is a local name whose every binding is a
fresh value: a literal, a display or comprehension (``[]``, ``{}``), an
arithmetic result, or a call of a constructor known to copy (``list()``,
``torch.zeros``, ``x.clone()``).  Anything else (a parameter, ``self``, an
attribute, a subscript, a view, another function's result) may be shared
with the caller or the sibling call.  Calls to other functions and modules
(``self.cell(h)``, ``F.linear``) are assumed not to change shared state:
the analysis cannot see into them.  A blocking effect is described as
``line N <what> 'name', <why>`` for the note ``to_source`` prints.
"""
import gast

from .analysis import declared_outer, param_names, walk_scope

__all__ = ["effects", "reads_outside"]

# methods that change their (non-tensor) receiver in place
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
             "discard", "popitem", "reverse", "sort", "add", "appendleft", "popleft",
             "extendleft", "rotate", "put", "put_nowait", "write", "send", "register_buffer",
             "register_parameter", "add_module", "register_module", "load_state_dict",
             "requires_grad_", "zero_grad", "train", "eval", "apply"}
# a tensor method named like this is in place (add_, copy_, zero_...), except these
_NOT_INPLACE = {"__init__"}
# calls that act on state outside their arguments
_IMPURE_CALLS = {"print", "input", "open", "setattr", "delattr", "exec", "eval", "next",
                 "globals", "vars", "breakpoint"}
_IMPURE_MODULES = {"random", "np.random", "numpy.random", "os", "sys", "time"}
_IMPURE_FUNCTIONS = {"torch.manual_seed", "torch.seed", "torch.set_rng_state",
                     "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"}
# calls whose result is a new object (not a view of or alias to an argument)
_FRESH_CALLS = {"list", "dict", "set", "tuple", "frozenset", "len", "int", "float", "bool", "str",
                "range", "sorted", "sum", "min", "max", "abs", "torch.zeros", "torch.ones",
                "torch.empty", "torch.full", "torch.zeros_like", "torch.ones_like",
                "torch.empty_like", "torch.full_like", "torch.tensor", "torch.arange",
                "torch.cat", "torch.stack", "torch.randn", "torch.rand", "torch.randint",
                "collections.deque", "deque", "collections.defaultdict", "defaultdict",
                "collections.OrderedDict", "OrderedDict", "collections.Counter", "Counter"}
_FRESH_METHODS = {"clone", "copy"}
# names taken for modules, whose functions (torch.add) are not methods of a receiver
_MODULES = {"torch", "F", "nn", "TF", "np", "numpy", "math", "matchbox", "mb", "functools",
            "itertools", "operator"}
_OPS = {"Add": "+", "Sub": "-", "Mult": "*", "Div": "/", "FloorDiv": "//", "Mod": "%", "Pow": "**",
        "MatMult": "@", "BitOr": "|", "BitAnd": "&", "BitXor": "^", "LShift": "<<", "RShift": ">>"}
_FRESH_VALUES = (gast.Constant, gast.List, gast.Dict, gast.Set, gast.ListComp, gast.DictComp,
                 gast.SetComp, gast.GeneratorExp, gast.BinOp, gast.UnaryOp, gast.Compare,
                 gast.BoolOp, gast.JoinedStr)


def dotted(node):
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, gast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, gast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def _fresh(value):
    if isinstance(value, _FRESH_VALUES):
        return True
    if isinstance(value, gast.IfExp):
        return _fresh(value.body) and _fresh(value.orelse)
    if isinstance(value, gast.Call):
        name = dotted(value.func)
        return name in _FRESH_CALLS or (
            isinstance(value.func, gast.Attribute) and value.func.attr in _FRESH_METHODS)
    return False


def _pairs(target, value):
    """``(name, value or None)`` for an assignment ``target = value``:
    ``a, b = [], {}`` binds each name to its own part."""
    if isinstance(target, gast.Name):
        yield target.id, value
    elif isinstance(target, (gast.Tuple, gast.List)) and isinstance(value, (gast.Tuple, gast.List)) \
            and len(target.elts) == len(value.elts) \
            and not any(isinstance(e, gast.Starred) for e in target.elts + value.elts):
        for t, v in zip(target.elts, value.elts):
            yield from _pairs(t, v)
    else:
        for m in gast.walk(target):
            if isinstance(m, gast.Name) and isinstance(m.ctx, gast.Store):
                yield m.id, None


def _bindings(nodes):
    """``(name, value or None)`` for every binding of a name in ``nodes``
    (``None``: a binding whose value is not one expression, like a ``for``
    target or a tuple unpacking)."""
    for n in walk_scope(nodes):
        if isinstance(n, (gast.Assign, gast.AnnAssign)):
            targets = n.targets if isinstance(n, gast.Assign) else [n.target]
            for t in targets:
                yield from _pairs(t, n.value)
        elif isinstance(n, gast.NamedExpr):
            yield n.target.id, n.value
        elif isinstance(n, (gast.For, gast.With, gast.AugAssign, gast.comprehension)) \
                or isinstance(n, (gast.FunctionDef, gast.ClassDef, gast.Import, gast.ImportFrom)):
            targets = (n.target,) if hasattr(n, "target") else ()
            if isinstance(n, gast.With):
                targets = [i.optional_vars for i in n.items if i.optional_vars is not None]
            for t in targets:
                for m in gast.walk(t):
                    if isinstance(m, gast.Name) and isinstance(m.ctx, gast.Store):
                        yield m.id, (gast.BinOp() if isinstance(n, gast.AugAssign) else None)
            if isinstance(n, (gast.FunctionDef, gast.ClassDef)):
                yield n.name, gast.Constant(value=None, kind=None)
            elif isinstance(n, (gast.Import, gast.ImportFrom)):
                for a in n.names:
                    yield (a.asname or a.name).split(".")[0], None


def owned_names(fdef, fresh_value=_fresh, rebound=()):
    """The local names of ``fdef`` bound only to values created inside it
    (values for which ``fresh_value`` holds; ``rebound``: parameters that
    count as locals, rebound before any other use)."""
    outer = declared_outer(fdef) | (param_names(fdef) - set(rebound))
    return fresh_names(fdef.body, fresh_value) - outer


def fresh_names(nodes, fresh_value=_fresh):
    """The names that ``nodes`` bind only to values created there."""
    fresh = {}
    for name, value in _bindings(nodes):
        fresh[name] = fresh.get(name, True) and value is not None and fresh_value(value)
    # an augmented assignment keeps the name's object (x += y on a list or a
    # tensor changes it in place): it is fresh iff the name's other bindings are
    return {name for name, ok in fresh.items() if ok}


def _base(node):
    """The name at the root of ``a.b[c].d`` (None for anything else)."""
    while isinstance(node, (gast.Attribute, gast.Subscript)):
        node = node.value
    return node.id if isinstance(node, gast.Name) else None


def _described(node):
    text = dotted(node)
    if text is None:
        base = _base(node)
        return f"'{base}'" if base else "a value"
    return f"'{text}'"


class _Effects:
    """``owned``: the names whose values were made inside the code scanned
    (by default, in the function)."""

    aug_in_place = True   # does ``x += y`` count (in place on a tensor or a list)?

    def __init__(self, fdef, owned=None):
        self.owned = owned_names(fdef) if owned is None else owned
        self.outer = declared_outer(fdef)
        self.found = []
        # the arguments (not self): a store into one's attribute (tree.state = h)
        # is each call's own when the calls' objects differ (runtime/calls.py
        # stacks per-example objects only when they do)
        args = fdef.args.posonlyargs + fdef.args.args
        self.objects = param_names(fdef) - {args[0].id if args and args[0].id == "self" else None}

    def add(self, node, what):
        self.found.append((getattr(node, "lineno", 0) or 0, what))

    def _shared(self, target):
        """Could ``target`` (the object an effect changes) be shared with the caller?"""
        base = _base(target)
        return base is None or base not in self.owned

    def scan(self, nodes):
        for n in walk_scope(nodes, stop=()):
            if isinstance(n, (gast.Global, gast.Nonlocal)):
                continue
            if isinstance(n, gast.Name) and isinstance(n.ctx, (gast.Store, gast.Del)) \
                    and n.id in self.outer:
                self.add(n, f"writes to '{n.id}', a global or nonlocal variable")
            elif isinstance(n, gast.Attribute) and isinstance(n.ctx, gast.Store) \
                    and isinstance(n.value, gast.Name) and n.value.id in self.objects:
                continue   # node.state = h: the call's own object
            elif isinstance(n, (gast.Attribute, gast.Subscript)) \
                    and isinstance(n.ctx, (gast.Store, gast.Del)) and self._shared(n.value):
                kind = "an attribute of" if isinstance(n, gast.Attribute) else "an item of"
                self.add(n, f"stores into {kind} {_described(n.value)}, "
                            f"a value from outside the function")
            elif isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Name) \
                    and self.aug_in_place and self._shared(n.target):
                op = _OPS.get(type(n.op).__name__, "op")
                self.add(n, f"changes '{n.target.id}' in place ({op}=), a value from outside "
                            f"the function")
            elif isinstance(n, gast.Call):
                self._call(n)
        return self.found

    def _call(self, n):
        name, func = dotted(n.func), n.func
        if name in _IMPURE_CALLS or name in _IMPURE_FUNCTIONS or (
                name and name.rpartition(".")[0] in _IMPURE_MODULES):
            self.add(n, f"calls {name}(), which acts on state outside its arguments")
            return
        module = isinstance(func, gast.Attribute) and dotted(func.value) is not None \
            and dotted(func.value).split(".")[0] in _MODULES
        if isinstance(func, gast.Attribute) and not module:
            attr = func.attr
            if (attr in _MUTATORS or attr.endswith("_") and not attr.startswith("_")
                    and attr not in _NOT_INPLACE) and self._shared(func.value):
                self.add(n, f"calls {dotted(func) or attr}(), which changes "
                            f"{_described(func.value)}, a value from outside the function")
                return
        else:
            short = func.attr if module else getattr(func, "id", "")
            if short.endswith("_") and not short.startswith("_") and n.args \
                    and self._shared(n.args[0]):
                self.add(n, f"calls {name}(), an in-place function, on "
                            f"{_described(n.args[0])}, a value from outside the function")
                return
        for k in n.keywords:
            if k.arg == "out" and self._shared(k.value):
                self.add(n, f"writes into {_described(k.value)} (out=), a value from outside "
                            f"the function")
            elif k.arg == "inplace" and not (isinstance(k.value, gast.Constant)
                                             and k.value.value is False) \
                    and n.args and self._shared(n.args[0]):
                self.add(n, f"changes {_described(n.args[0])} in place (inplace=), a value "
                            f"from outside the function")


def effects(fdef):
    """Why merging ``fdef``'s sibling calls could change what an example
    computes: one ``"line N ..."`` text per effect (empty: it cannot)."""
    found = sorted(set(_Effects(fdef).scan(fdef.body)))
    return [f"line {line} {what}" for line, what in found]


def reads_outside(fdef):
    """Does ``fdef`` read a value that is neither an argument nor made in
    it, and may hold the whole batch: an item or attribute of a global or
    of ``self`` that it does not call (``MEMORY["m"]``, ``self.state``;
    not ``self.cell(h)`` nor ``torch.long``)?  A branch run gathered on its
    lanes cannot read such a value, so sibling_calls.py gathers the
    branches of merged calls only in functions that read none."""
    local = (param_names(fdef) - {"self"}) | {n for n, _ in _bindings(fdef.body)}
    called = {id(n.func) for n in walk_scope(fdef.body) if isinstance(n, gast.Call)}
    inner = {id(n.value) for n in walk_scope(fdef.body) if isinstance(n, (gast.Attribute, gast.Subscript))}
    for n in walk_scope(fdef.body):
        if not isinstance(n, (gast.Attribute, gast.Subscript)) or id(n) in called \
                or id(n) in inner or not isinstance(n.ctx, gast.Load):
            continue
        root = n
        while isinstance(root, (gast.Attribute, gast.Subscript)):
            root = root.value
        if isinstance(root, gast.Name) and root.id not in local and root.id not in _MODULES:
            return True
    return False
