"""Functions and methods that @batch code calls, rewritten on their first
call (as AutoGraph's ``converted_call``).

Per-example code calls helper methods of its own (``self.node_forward(inputs,
child_c, child_h)``) that were written for one example too: ``len(child_h)``
there is each example's own length.  So a call of ``self.<method>(...)`` in
rewritten code goes through :func:`converted`, which gives the method as
``@batch`` rewrites
it (once per function, kept on it), or the function itself where it is
not user code (torch, the standard library, installed packages,
matchbox), is ``@batch`` already, or cannot be rewritten (no source; a
construct ``@batch`` refuses, such as ``try``/``except``: it then runs as
written).  Anything else that is called (modules, tensor methods,
builtins) is returned as it is.
"""
import os
import sysconfig
import types

import torch

_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SKIP = tuple(os.path.join(os.path.abspath(p), "") for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"], _HERE, os.path.dirname(torch.__file__)})


def converted(f):
    """``f`` as @batch code calls it: its rewritten version if it is a
    function or method of user code (see the module doc)."""
    t = type(f)
    if t is types.MethodType:
        func = f.__func__
        if type(func) is not types.FunctionType:
            return f
        conv = func.__dict__.get("__matchbox_auto__")
        if conv is None:
            conv = _convert(func)
        return f if conv is False else types.MethodType(conv, f.__self__)
    if t is types.FunctionType:
        conv = f.__dict__.get("__matchbox_auto__")
        if conv is None:
            conv = _convert(f)
        return f if conv is False else conv
    return f


def _convert(func):
    """The rewritten ``func``, or False (kept on ``func``)."""
    conv = False
    code = func.__code__
    if not getattr(func, "__matchbox_batched__", False) \
            and not code.co_flags & (0x20 | 0x80 | 0x100 | 0x200) \
            and not os.path.abspath(code.co_filename).startswith(_SKIP):
        from ..api import convert
        try:
            conv = convert(func)
        except Exception:   # no source, a construct @batch refuses: it runs as written
            conv = False
    func.__dict__["__matchbox_auto__"] = conv
    return conv
