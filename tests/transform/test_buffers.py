"""Which locals hold a Tensor of the function's own (transform/buffers.py):
decided from the source, so that ``buf[i] = v`` under per-example control
flow gives each example its own copy only where nothing else holds it."""
import ast
import textwrap

import gast
import pytest

from matchbox.transform.buffers import owned_buffers


def owned(src):
    fdef = gast.ast_to_gast(ast.parse(textwrap.dedent(src))).body[0]
    return owned_buffers(fdef)


@pytest.mark.parametrize("bind", [
    "torch.zeros(n, 3)", "x.new_zeros(1, h)", "torch.full_like(x, 0.5)", "x.clone()",
    "torch.zeros(3).to(x.device)", "torch.cat([a, b])", "x * 0", "torch.tensor([1.0, 2.0])",
])
def test_made_here(bind):
    assert owned(f"""
        def f(x, a, b, n, h):
            buf = {bind}
            buf[0] = 1.0
            return buf
        """) == {"buf"}


@pytest.mark.parametrize("bind", ["x", "x[0]", "self.buf", "torch.as_tensor(x)", "make()",
                                  "x.view(-1)"])
def test_not_made_here(bind):
    assert owned(f"""
        def f(self, x):
            buf = {bind}
            buf[0] = 1.0
        """) == set()


@pytest.mark.parametrize("use", [
    "kept = buf", "kept = [buf]", "self.kept = buf", "out.append(buf)", "d[buf] = 1",
    "kept = buf.add_(1)", "kept = buf.float()", "kept = (buf, x)", "lst += [buf]",
    "for b in [buf]: pass", "kept = buf if x else x", "it = iter(buf)", "yield buf",
    "kept = [b for b in (buf,)]",
])
def test_escapes(use):
    assert owned(f"""
        def f(x, out, d, lst):
            buf = torch.zeros(3)
            {use}
            buf[0] = 1.0
        """) == set()


@pytest.mark.parametrize("use", [
    "y = buf[0]", "y = buf.sum()", "y = F.relu(buf) + buf", "y = torch.cat([buf, x])",
    "buf.add_(1)", "for row in buf: pass", "y = self.cell(x, buf)", "if buf.any(): pass",
    "return buf, x", "y = x[buf]", "y = buf * 2",
])
def test_reads_that_keep_no_reference(use):
    assert owned(f"""
        def f(self, x):
            buf = torch.zeros(3)
            {use}
            buf[0] = 1.0
        """) >= {"buf"}


def test_a_parameter_counts_once_rebound_first():
    assert owned("""
        def f(x, buf):
            buf = buf.clone()
            buf[0] = x
        """) == {"buf"}
    assert owned("""
        def f(x, buf):
            y = buf + 1
            buf = buf.clone()
            buf[0] = x
        """) == {"y"}
    assert owned("""
        def f(x, buf):
            buf[0] = x
        """) == set()


def test_a_nested_function_may_rebind_it():
    assert owned("""
        def f(x):
            buf = torch.zeros(3)
            def g():
                nonlocal buf
                buf = x
            g()
            buf[0] = 1.0
        """) == set()
