"""Activations (functional and nn.Module forms): batched vs per-example,
values and gradients."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

LENGTHS = ("mixed", "one", "equal")
SPECS = {
    "dynamic": (4, (True, 5), (False, 3)),
    "static": (3, (False, 2), (False, 3)),
    "two_dynamic": (3, (True, 4), (True, 3)),
}

FUNCTIONAL = {
    "relu": F.relu, "relu6": F.relu6, "elu": F.elu, "selu": F.selu, "celu": F.celu,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "mish": F.mish, "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=1.0), "softsign": F.softsign,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5), "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "logsigmoid": F.logsigmoid, "tanhshrink": F.tanhshrink,
    "softshrink": F.softshrink, "hardshrink": F.hardshrink,
    "threshold": lambda x: F.threshold(x, 0.1, 20.0), "rrelu_eval": lambda x: F.rrelu(x, training=False),
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "F_sigmoid": F.sigmoid, "F_tanh": F.tanh,
    "method_relu": lambda x: x.relu(), "torch_relu": torch.relu,
}

MODULES = {
    "ReLU": lambda: nn.ReLU(), "GELU": lambda: nn.GELU(), "SiLU": lambda: nn.SiLU(),
    "ELU": lambda: nn.ELU(0.5), "LeakyReLU": lambda: nn.LeakyReLU(0.1), "Softplus": lambda: nn.Softplus(),
    "Hardtanh": lambda: nn.Hardtanh(), "Sigmoid": lambda: nn.Sigmoid(), "Tanh": lambda: nn.Tanh(),
    "Mish": lambda: nn.Mish(), "Hardswish": lambda: nn.Hardswish(),
    "PReLU": lambda: nn.PReLU(), "PReLU_channels": lambda: nn.PReLU(2),
    "GLU": lambda: nn.GLU(1),
}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_activation(name, spec, lengths):
    out = mb_test(FUNCTIONAL[name], SPECS[spec], lengths=lengths, dtype=torch.float64)
    assert out.dims == tuple(d for d, _ in SPECS[spec][1:])


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", MODULES)
def test_module_activation(name, lengths):
    m = MODULES[name]().double()
    spec = (4, (False, 2), (True, 5)) if name in ("PReLU_channels", "GLU") else SPECS["dynamic"]
    mb_test(m, spec, lengths=lengths)


def test_activation_keeps_padding_mask():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    y = F.gelu(x)
    assert y._mask is x._mask and y.dims == x.dims


def test_prelu_dynamic_channels_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 4, 3)], (True, False))
    with pytest.raises(ValueError, match="channel dimension"):
        nn.PReLU(4)(x)


def test_prelu_nan_padding_clean_grad():
    data = torch.randn(3, 4, 2, dtype=torch.float64)
    lengths = [1, 4, 2]
    mask = (torch.arange(4)[None] < torch.tensor(lengths)[:, None])[:, :, None]
    data[~mask.expand_as(data)] = float("nan")
    m = nn.PReLU(init=0.3).double()
    y = m(MaskedBatch(data, mask, (True, False)))
    sum(e.sum() for e in y.examples()).backward()
    got = m.weight.grad.clone()
    m.zero_grad()
    sum(m(data[b:b + 1, :n]).sum() for b, n in enumerate(lengths)).backward()
    torch.testing.assert_close(got, m.weight.grad)
