"""Debugging aids and errors: to_source, tracebacks into user source,
MATCHBOX_DISABLE, methods/closures, decoration-time errors."""
import subprocess
import sys
import traceback

import pytest
import torch

import matchbox
from matchbox import MaskedBatch, batch, to_source
from matchbox.test_utils import mb_test
from matchbox.transform import BatchSyntaxError, SourceUnavailableError


@batch
def branchy(x):
    if x > 0:
        x = x * 2
    return x


def test_to_source_is_readable_python():
    src = to_source(branchy)
    assert src.startswith("def branchy(x):")
    assert "_mb.if_true" in src and "_mb.assign(x" in src
    compile(src, "<check>", "exec")


def test_traceback_points_into_user_source():
    @batch
    def fails(x):
        if x > 0:
            y = x.no_such_method()
        return x

    line = fails.__wrapped__.__code__.co_firstlineno + 3
    with pytest.raises(Exception) as info:
        fails(MaskedBatch.fromlist([torch.ones(1, 1)], (False,)))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(f.filename == __file__ and f.lineno == line and "no_such_method" in f.line
               for f in frames)


def test_disable_with_environment_variable():
    code = ("import matchbox, inspect\n"
            "def f(x):\n    return x\n"
            "g = matchbox.batch(f)\nprint(g is f)\n")
    env = {"MATCHBOX_DISABLE": "1", "PATH": ""}
    import os
    env.update({k: v for k, v in os.environ.items() if k not in env})
    path = __file__.replace("test_debugging.py", "_disable_probe.py")
    with open(path, "w") as fh:
        fh.write(code)
    try:
        out = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True)
    finally:
        import os as _os
        _os.remove(path)
    assert out.stdout.strip() == "True", out.stderr


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.5, dtype=torch.float64))

    @batch
    def forward(self, x):
        if x > 0:
            x = x * self.scale
        else:
            x = x - self.scale
        return x


class Later(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64))

    def forward(self, x):
        while x < 2:
            x = x + self.w + 0.5
        return x


Later.forward = batch(Later.forward)


@pytest.mark.parametrize("module", [Model, Later])
def test_methods(module):
    mb_test(module(), (5, (False, 1)), dtype=torch.float64)


def test_bound_method_and_closure():
    m = Later()
    m.forward = batch(Later.forward.__wrapped__.__get__(m))
    mb_test(m.forward, (4, (False, 1)), dtype=torch.float64, params=list(m.parameters()))
    k = 2.0

    def outer():
        @batch
        def inner(x):
            if x > 0:
                x = x * k
            return x
        return inner

    mb_test(outer(), (4, (False, 1)), dtype=torch.float64)


def test_no_source_gives_clear_error():
    ns = {}
    exec("def f(x):\n    return x\n", ns)
    with pytest.raises(SourceUnavailableError, match="cannot find it.*MATCHBOX_DISABLE"):
        batch(ns["f"])


def _raises(fn, match):
    with pytest.raises(BatchSyntaxError, match=match) as info:
        batch(fn)
    assert info.value.filename == __file__ and info.value.lineno > 0
    assert isinstance(info.value, SyntaxError)


def test_unsupported_constructs_raise_at_decoration():
    def gen(x):
        yield x

    def writes_global(x):
        global GLOBAL_STATE
        if x > 0:
            GLOBAL_STATE = x
        return x

    def matcher(x):
        match x:
            case _:
                return x

    def finally_return(x):
        try:
            pass
        finally:
            return x

    _raises(gen, r"generator \(yield\).*test_debugging.py:\d+")
    _raises(writes_global, "global/nonlocal variable 'GLOBAL_STATE'")
    _raises(matcher, "match statement")
    _raises(finally_return, "'return' inside a finally")


GLOBAL_LIST = []


def test_constructs_that_would_act_for_every_example_raise_at_decoration():
    """try/except, nested functions that change the enclosing function's
    state, and changes to a global list's contents under per-example control
    flow would run for the whole batch: refused where they are written."""
    def handles(x):
        try:
            if x.sum() > 0:
                raise ValueError("positive")
            y = x * 2
        except ValueError:
            y = x
        return y

    def closure_appends(x):
        out = []

        def keep(v):
            out.append(v)
        if x.sum() > 0:
            keep(x)
        return out

    def lambda_stores(x):
        acc = {}
        put = lambda v: acc.__setitem__("y", v) or acc.update(y=v)  # noqa: E731
        if x.sum() > 0:
            put(x)
        return acc

    def appends_to_global(x):
        if x.sum() > 0:
            GLOBAL_LIST.append(x)
        return x

    _raises(handles, r"try/except .*test_debugging.py:\d+.*every example to the handler")
    _raises(closure_appends, "nested function 'keep' that changes 'out'")
    _raises(lambda_stores, "a lambda that changes 'acc'")
    _raises(appends_to_global, "contents of global/enclosing 'GLOBAL_LIST' under a condition")

    @batch
    def batched_closure(x):
        out = []

        @batch
        def keep(v):
            out.append(v)   # rewritten: appends for the active examples only
        if x.sum() > 0:
            keep(x * 1.0)
        return out

    x = MaskedBatch.fromlist([torch.ones(1, 2), -torch.ones(1, 2)], (False,))
    assert len(batched_closure(x)) == 1


def test_a_nested_function_that_only_reads_enclosing_tensors_is_not_refused():
    @batch
    def f(x):
        h = x * 2

        def shifted(u):
            return u + h.add(1).sort(-1).values   # Tensor.add / sort make new Tensors
        if x.sum() > 0:
            x = shifted(x)
        return x

    mb_test(f, (5, (False, 3)))
