"""The ops coverage table, generated from the rule registry.

``python -m matchbox ops > docs/ops.md`` writes the page; a test checks the
committed page equals this output, so the docs cannot drift from the code.
Every name below is read off the registry and off torch itself: a rule
listed here exists, and a public torch callable not listed under a family
runs through the general fallback (ops/fallback.py) as its ``plan`` says.
"""
import functools
import inspect
import types

import torch
import torch.nn.functional as TF

from .ops._registry import RULES
from .ops.fallback import plan

#: the torch release docs/ops.md and docs/opinfo.md are generated with (the
#: one CI pins, README): another release lists other ops, so the tests that
#: check those pages are current run with this one only
DOCS_TORCH = "2.13.0"


def docs_torch():
    """Is the running torch the release the pages are generated with?"""
    return torch.__version__.split("+")[0] == DOCS_TORCH

HEADER = """# Ops coverage

Generated from matchbox's rule registry by `python -m matchbox ops`; do not
edit by hand (a test checks this page is current). Each family's rules live
in `matchbox/ops/<family>.py`. A callable listed here has a rule: on a
MaskedBatch it gives per example what it gives on one example (SPEC section 3).
An op without a rule runs through the general fallback, or raises
`NotImplementedError` naming the op: see
[Without a rule](#without-a-rule-the-general-fallback) at the end.
"""


def _namespaces():
    """(label, namespace) pairs in the order names are looked up."""
    return [("torch", torch), ("Tensor", torch.Tensor), ("F", TF), ("torch._VF", torch._VF),
            ("nn.init", torch.nn.init)]


def _is_op(ns, name, obj):
    """Skip what is not an op: classes, typing helpers, torch utilities
    written in Python outside torch.functional, F's private-ish helpers."""
    if not callable(obj) or isinstance(obj, type) or name.startswith("__"):
        return False
    try:
        if obj in _ignored():  # factories and utilities: never see a MaskedBatch
            return False
    except TypeError:
        return False
    if ns is torch:
        return inspect.isbuiltin(obj) or getattr(obj, "__module__", "") == "torch.functional"
    if ns is TF:
        return (getattr(obj, "__module__", "") or "").startswith(("torch", "builtins")) \
            and name not in ("assert_int_or_pair", "boolean_dispatch", "handle_torch_function",
                             "has_torch_function", "has_torch_function_unary",
                             "has_torch_function_variadic")
    return True


@functools.lru_cache(maxsize=None)
def _ignored():
    return frozenset(torch.overrides.get_ignored_functions())


def _public(namespace):
    for name in sorted(dir(namespace)):
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        try:
            obj = getattr(namespace, name)
        except Exception:
            continue
        if _is_op(namespace, name, obj):
            yield name, obj


def _maskedbatch_defines(name):
    """MaskedBatch methods written on the class itself (size, to, ...)."""
    from .core import MaskedBatch
    return any(name in k.__dict__ for k in MaskedBatch.__mro__[:-1])


def names_by_func():
    """{callable: ["torch.tanh", "Tensor.tanh", ...]} for every public name."""
    names = {}
    for label, ns in _namespaces():
        for name, obj in _public(ns):
            try:
                names.setdefault(obj, []).append(f"{label}.{name}")
            except TypeError:  # unhashable
                continue
    return names


def _family(rule):
    return getattr(rule, "__module__", "").rsplit(".", 1)[-1]


def _has_own_dispatch(func):
    """Whether a Python-level torch.nn.functional function hands
    MaskedBatch arguments to ``__torch_function__`` itself."""
    try:
        return "has_torch_function" in inspect.getsource(func)
    except (OSError, TypeError):
        return True  # builtins dispatch in C++


def table():
    """The coverage page as markdown."""
    names = names_by_func()
    families = {}
    for func, rule in RULES.items():
        families.setdefault(_family(rule), []).extend(names.get(func, []))
    lines = [HEADER, "| family | rule module | callables with a rule |", "|---|---|---|"]
    for fam in sorted(families):
        listed = ", ".join(f"`{n}`" for n in sorted(set(families[fam]), key=str.lower))
        lines.append(f"| {fam} | `matchbox/ops/{fam}.py` | {listed} |")

    lines += ["", "## Without a rule: the general fallback", "",
              "These public callables have no rule of their own. On a MaskedBatch the general "
              "fallback (`matchbox/ops/fallback.py`) runs them: through `torch.func.vmap` over "
              "the examples where their dims are static (or every example has the same size), "
              "else once per example, padding the results back (correct, slower: a "
              "`PerExampleFallbackWarning`, once per op). The *per-example fallback* ones "
              "always run once per example (vmap cannot batch them: the size of their result "
              "depends on the values); *in place* ones write their out-of-place op's value "
              "into the batch; the *refused* ones raise `NotImplementedError` naming the op "
              "and why. A rule (docs/internals.md) is faster than any of these.", ""]
    for label, ns in _namespaces()[:3]:
        groups, composite = {}, []
        for name, obj in _public(ns):
            try:
                if obj in RULES:
                    continue
            except TypeError:
                continue
            if label == "Tensor" and _maskedbatch_defines(name):
                continue
            if (label == "F" and isinstance(obj, types.FunctionType)
                    and not _has_own_dispatch(obj)):
                composite.append(name)
                continue
            groups.setdefault(plan(obj)[0], []).append(name)
        for way, title in (("vmap", "vmap, or per example on dynamic dims"),
                           ("per-example", "per-example fallback"), ("in place", "in place"),
                           ("dtype", "the dtype's answer, one for every example"),
                           ("refused", "refused")):
            names = groups.get(way, [])
            if names:
                lines.append(f"**{label}, {title}** ({len(names)}): "
                             + ", ".join(f"`{n}`" for n in names) + "\n")
        if composite:
            lines.append(f"**F, without a rule of their own** ({len(composite)}): these "
                         "run the torch ops they are made of, so they work exactly when "
                         "those ops have rules: " + ", ".join(f"`{n}`" for n in composite) + "\n")
    return "\n".join(lines)
