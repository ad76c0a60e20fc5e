"""Every torch callable the SPEC's op table names has a rule, or an explicit,
commented exclusion here.  Fails when a rule disappears or a family grows a
member without one."""
import pytest
import torch
import torch.nn.functional as F

from matchbox.ops._registry import RULES

T = torch.Tensor


def both(*names):
    return [f for n in names for f in (getattr(torch, n, None), getattr(T, n, None)) if f is not None]


FAMILIES = {
    "pointwise": both("tanh", "exp", "log", "sqrt", "sigmoid", "relu", "abs", "neg", "add", "sub",
                      "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge", "where",
                      "masked_fill", "clamp", "maximum", "minimum")
    + [T.__add__, T.__radd__, T.__sub__, T.__rsub__, T.__mul__, T.__rmul__, T.__truediv__,
       T.__rtruediv__, T.__pow__, T.__rpow__, T.__neg__, T.__invert__, T.__and__, T.__or__],
    "reduction": both("sum", "mean", "std", "var", "max", "min", "prod", "logsumexp", "argmax",
                      "argmin", "any", "all", "norm"),
    "softmax": both("softmax", "log_softmax") + [F.softmax, F.log_softmax],
    "matmul": both("matmul", "bmm", "mm", "einsum", "tensordot", "outer", "addmm", "addmv",
                   "addr", "baddbmm") + [T.__matmul__, T.__rmatmul__, F.bilinear],
    "shape": both("view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "flatten",
                  "expand", "split", "chunk", "cat", "stack", "unbind", "flip", "cumsum", "roll",
                  "tile", "repeat_interleave", "diff", "diagonal", "cummax", "cummin",
                  "logcumsumexp", "tril", "triu"),
    "indexing": [T.__getitem__, T.__setitem__] + both("select", "narrow"),
    "gather_scatter": both("gather", "index_select", "take_along_dim", "scatter", "scatter_add",
                           "index_add", "nonzero", "argwhere"),
    "nn": [F.linear, F.embedding, F.dropout, F.layer_norm, F.gelu, F.relu, F.silu, F.elu,
           F.leaky_relu, F.softplus, F.hardtanh],
    "rnn": [torch._VF.rnn_tanh_cell, torch._VF.rnn_relu_cell, torch._VF.lstm_cell,
            torch._VF.gru_cell, torch._VF.lstm, torch._VF.gru, torch._VF.rnn_tanh,
            torch._VF.rnn_relu],
    "loss": [F.cross_entropy, F.nll_loss, F.mse_loss],
}

# Deliberately without a rule (the general fallback runs it once per example):
EXCLUDED = {
    torch.unique,         # result size depends on values and sorts them: no per-example rule yet
}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_has_rules(family):
    missing = [getattr(f, "__qualname__", repr(f)) for f in FAMILIES[family]
               if f not in RULES and f not in EXCLUDED]
    assert not missing, f"{family}: no rule for {missing}"


def test_exclusions_have_no_rule():
    assert not [f for f in EXCLUDED if f in RULES]


def test_an_excluded_op_runs_per_example():
    from matchbox.test_utils import mb_rand
    x = mb_rand(3, (True, 4))
    with pytest.warns(UserWarning, match="once per example"):
        out = torch.unique(x.round())
    for u, e in zip(out.examples(), x.examples()):
        assert torch.equal(u, torch.unique(e.round()))
