"""conv, conv_transpose, pooling and F.pad along dynamic dims.

Batched vs per-example (values, input and parameter gradients) with mb_test;
the padding of every batch is poisoned (NaN, or +inf for max pooling, where
-inf is the neutral value) so a rule that lets padding reach a real output
or gradient fails.  Plus output lengths, dims, and the error cases."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from matchbox import MaskedBatch
from matchbox._lanes import lanes
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

LENGTHS = ("mixed", "one", "equal")
D = torch.float64
SEQ = (3, (False, 2), (True, 7))            # examples (1, 2, L), L <= 7
SEQ1 = (1, (False, 2), (True, 7))           # batch size one
IMG = (3, (False, 2), (True, 5), (True, 6))  # examples (1, 2, H, W)


class Poisoned(nn.Module):
    """``fn`` applied to its input with ``value`` in the batch padding; as a
    Module it exposes ``fn``'s parameters to mb_test."""

    def __init__(self, fn, value=float("nan")):
        super().__init__()
        self.fn, self.value = fn, value

    def forward(self, x):
        return self.fn(poison(x, self.value))


def check(fn, spec, lengths, value=float("nan")):
    return mb_test(Poisoned(fn, value), spec, lengths=lengths, dtype=D)


def batch(lengths, channels=2, extra=(), dims=None, seed=0):
    """A MaskedBatch of examples (1, channels, L, *extra) for given L."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn((1, channels, n) + tuple(extra), generator=g, dtype=D) for n in lengths]
    return MaskedBatch.fromlist(xs, dims or (False, True) + (False,) * len(extra))


def seeded(module):
    torch.manual_seed(0)
    return module.double()


# ------------------------------------------------------------------ conv
CONV1D = [
    dict(kernel_size=3),
    dict(kernel_size=3, padding=1),
    dict(kernel_size=2, stride=2, padding=1, bias=False),
    dict(kernel_size=3, dilation=2, padding=2),
    dict(kernel_size=1, groups=2, out_channels=4),
    dict(kernel_size=4, padding="same"),          # even kernel: asymmetric 'same'
    dict(kernel_size=3, padding="same", dilation=2),
    dict(kernel_size=1, padding="valid"),
]


def _conv1d(kw):
    kw = dict(kw)
    out = kw.pop("out_channels", 3)
    return seeded(nn.Conv1d(2, out, **kw))


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("cfg", range(len(CONV1D)))
def test_conv1d_module(cfg, lengths):
    kw = CONV1D[cfg]
    if lengths != "equal" and kw.get("padding", 0) in (0, "valid") and kw["kernel_size"] > 1:
        pytest.skip("length-1 examples are shorter than the kernel (an error, tested below)")
    check(_conv1d(kw), SEQ, lengths)


@pytest.mark.parametrize("cfg", [0, 2, 5])
def test_conv1d_batch_of_one_and_explicit_lengths(cfg):
    kw = CONV1D[cfg]
    mb_test(Poisoned(_conv1d(kw)), batch([6, 4, 7, 5]), dtype=D)
    mb_test(Poisoned(_conv1d(kw)), batch([5]), dtype=D)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_conv1d_padding_garbage_never_leaks(value):
    mb_test(Poisoned(seeded(nn.Conv1d(2, 3, 3, padding=2)), value), batch([1, 7, 3]), dtype=D)


def test_functional_conv1d_shared_weight():
    # weight and bias as shared Tensor arguments (their gradients are compared too)
    mb_test(lambda x, w, b: F.conv1d(poison(x), w, b, stride=2, padding=1), SEQ, (3, 2, 3), (3,),
            lengths="mixed", dtype=D)


CONV2D = [
    dict(kernel_size=(2, 3), padding=(1, 1)),
    dict(kernel_size=3, stride=(1, 2), padding=(1, 2), dilation=(1, 2)),
    dict(kernel_size=2, padding="same", groups=2),
    dict(kernel_size=1, stride=2, bias=False),
]


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("cfg", range(len(CONV2D)))
def test_conv2d_module(cfg, lengths):
    check(seeded(nn.Conv2d(2, 4, **CONV2D[cfg])), IMG, lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", [(3, (False, 2), (True, 5), (False, 4)),
                                  (3, (False, 2), (False, 3), (True, 6)),
                                  (1, (False, 2), (True, 5), (True, 6))])
def test_conv2d_one_dynamic_dim_and_batch_of_one(spec, lengths):
    check(seeded(nn.Conv2d(2, 3, 2, padding=1)), spec, lengths)


def test_conv3d():
    check(seeded(nn.Conv3d(2, 3, 2, padding=1)), (2, (False, 2), (True, 3), (False, 2), (True, 4)),
          "mixed")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes(mode):
    """nn.Conv pads with F.pad first; reflect/circular read each example's own end."""
    mb_test(Poisoned(seeded(nn.Conv1d(2, 3, 3, padding=2, padding_mode=mode))),
            batch([3, 7, 4]), dtype=D)
    imgs = MaskedBatch.fromlist([torch.randn(1, 2, h, w, dtype=D) for h, w in ((2, 5), (4, 3))],
                                (False, True, True))
    mb_test(Poisoned(seeded(nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode))), imgs, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("kw", [dict(stride=2, padding=1, output_padding=1),
                                dict(stride=1, padding=0, dilation=2),
                                dict(stride=3, padding=1, groups=2)])
def test_conv_transpose(kw, lengths):
    check(seeded(nn.ConvTranspose1d(2, 4, 3, **kw)), SEQ, lengths)
    check(seeded(nn.ConvTranspose2d(2, 4, 3, **kw)), IMG, lengths)


def test_conv_output_lengths_follow_each_example():
    x = batch([1, 7, 4])
    y = F.conv1d(x, torch.randn(3, 2, 3, dtype=D), padding=2, stride=2, dilation=1)
    expect = [math.floor((n + 4 - 2 - 1) / 2) + 1 for n in (1, 7, 4)]
    assert y._lengths(2).tolist() == expect
    assert y.dims == (False, True)
    assert y.mask.shape == (3, 1, max(expect))
    # non-real outputs are exactly 0, so nothing downstream can pull a gradient through them
    assert torch.equal(y.padded_data[0, :, expect[0]:], torch.zeros_like(y.padded_data[0, :, expect[0]:]))


@pytest.mark.parametrize("op", [
    lambda x: F.conv1d(x, torch.ones(3, 2, 3, dtype=D), torch.ones(3, dtype=D), padding=1),
    lambda x: F.max_pool1d(x, 2, 1, ceil_mode=True),
    lambda x: F.avg_pool1d(x, 3, 1, 1),
    lambda x: F.adaptive_max_pool1d(x, 2),
    lambda x: F.pad(x, (1, 1), mode="replicate"),
])
def test_output_padding_is_inert(op):
    """Non-real outputs are exactly 0 and a cotangent that reaches them (here
    the sum over the whole padded data) adds nothing to real gradients."""
    xs = [torch.randn(1, 2, n, dtype=D, requires_grad=True) for n in (2, 6, 4)]
    x = MaskedBatch.fromlist(xs, (False, True))
    y = op(poison(x))
    assert not y.padded_data.masked_fill(y.mask, 0).any()
    y.padded_data.sum().backward()
    for xe in xs:
        g = xe.grad
        xe.grad = None
        op(xe).sum().backward()
        torch.testing.assert_close(g, xe.grad)


def test_conv_too_short_example_raises():
    x = batch([1, 7, 4])
    with pytest.raises(ValueError, match="example 0 has size 1 .* empty output"):
        F.conv1d(x, torch.randn(3, 2, 3, dtype=D))
    with pytest.raises(ValueError, match="conv2d: example 0"):
        nn.Conv2d(2, 3, 3).double()(batch([1, 5], extra=(4,)))


def test_conv_dormant_lane_does_not_raise():
    """Inside @batch control flow a dormant lane's example is not checked."""
    x = batch([1, 7, 4])
    w = torch.randn(3, 2, 3, dtype=D)
    with lanes(torch.tensor([False, True, True])):
        y = F.conv1d(poison(x), w)
    for e, xe in zip(y.examples()[1:], x.examples()[1:]):
        torch.testing.assert_close(e, F.conv1d(xe, w))


def test_conv_bad_inputs_raise():
    w = torch.randn(3, 2, 3, dtype=D)
    dyn_channels = MaskedBatch.fromlist([torch.randn(1, 2, 5), torch.randn(1, 3, 5)], (True, False))
    with pytest.raises(ValueError, match="channel dimension .* dynamic"):
        F.conv1d(dyn_channels, torch.randn(3, 2, 3))
    no_channels = MaskedBatch.fromlist([torch.randn(1, n, dtype=D) for n in (5, 3)], (True,))
    with pytest.raises(ValueError, match="conv1d: each example must be"):
        F.conv1d(no_channels, w)
    x = batch([3, 5])
    with pytest.raises(NotImplementedError, match="per-example weights"):
        F.conv1d(x, x)


# ------------------------------------------------------------------ max pool
def _pool_lengths(kw, lengths):
    """"equal" where length-1 examples make the per-example run invalid: an
    unpadded window longer than 1 is an error (tested separately), and a
    dilated window over a length-1 example can hold no real entry, where
    torch returns -inf and routes the gradient to an out-of-range index (on
    a 1x1 image it aborts the process)."""
    short = not kw.get("padding") and not kw.get("ceil_mode") and kw["kernel_size"] > 1
    return "equal" if short or kw.get("dilation", 1) > 1 else lengths


MAXPOOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=2, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=1, dilation=2, padding=1),
]


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("cfg", range(len(MAXPOOL)))
def test_max_pool1d(cfg, lengths):
    kw = MAXPOOL[cfg]
    lengths = _pool_lengths(kw, lengths)
    # +inf in the padding would win every max if it were not replaced by -inf
    check(lambda x: F.max_pool1d(x, **kw), SEQ, lengths, value=float("inf"))
    check(lambda x: F.max_pool1d(x, return_indices=True, **kw), SEQ, lengths, value=float("inf"))
    check(nn.MaxPool1d(**kw), SEQ1, lengths, value=float("nan"))


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("cfg", [3, 4])
@pytest.mark.parametrize("spec", [IMG, (3, (False, 2), (False, 4), (True, 6)),
                                  (1, (True, 5), (True, 6))])
def test_max_pool2d(cfg, spec, lengths):
    """Indices are re-flattened with each example's own width; examples
    without a channel dim (1, H, W) work too."""
    kw = MAXPOOL[cfg]
    lengths = _pool_lengths(kw, lengths)
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), spec, lengths, value=float("inf"))


def test_max_pool_explicit_lengths_and_output_dims():
    x = batch([2, 7, 5])
    y, idx = F.max_pool1d(poison(x, float("inf")), 3, 2, ceil_mode=True, return_indices=True)
    assert y.dims == idx.dims == (False, True)
    for ye, ie, xe in zip(y.examples(), idx.examples(), x.examples()):
        ref, ref_idx = F.max_pool1d(xe, 3, 2, ceil_mode=True, return_indices=True)
        assert torch.equal(ye, ref) and torch.equal(ie, ref_idx)


def test_max_pool_too_short_raises():
    with pytest.raises(ValueError, match="max_pool1d: example 0 has size 2"):
        F.max_pool1d(batch([2, 7]), 3)


# ------------------------------------------------------------------ avg pool
AVGPOOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=3, stride=1, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, stride=3, ceil_mode=True),
]


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("cfg", range(len(AVGPOOL)))
def test_avg_pool1d(cfg, lengths):
    kw = AVGPOOL[cfg]
    lengths = _pool_lengths(kw, lengths)
    check(lambda x: F.avg_pool1d(x, **kw), SEQ, lengths)
    check(nn.AvgPool1d(**kw), SEQ1, lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("cfg", [2, 3, 4])
def test_avg_pool2d(cfg, lengths):
    kw = AVGPOOL[cfg]
    check(lambda x: F.avg_pool2d(x, **kw), IMG, lengths)
    check(nn.AvgPool2d(**kw), (3, (True, 5), (False, 4)), lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_avg_pool2d_divisor_override(lengths):
    check(lambda x: F.avg_pool2d(x, 2, 1, 1, divisor_override=3), IMG, lengths)


def test_avg_pool_examples_without_channels():
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), (3, (True, 7)), "mixed")


# ------------------------------------------------------------------ adaptive pool
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("size", [2, 5])
def test_adaptive_pool1d(size, lengths):
    """Bins follow each example's own length (also when the output is
    larger than an example: bins then overlap)."""
    y = check(lambda x: F.adaptive_avg_pool1d(x, size), SEQ, lengths)
    assert y.dims == (False, False)
    check(lambda x: F.adaptive_max_pool1d(x, size, return_indices=True), SEQ, lengths,
          value=float("inf"))
    check(nn.AdaptiveMaxPool1d(size), SEQ1, lengths)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("size", [(2, 3), (None, 2), 1])
def test_adaptive_pool2d(size, lengths):
    y = check(lambda x: F.adaptive_avg_pool2d(x, size), IMG, lengths)
    sizes = size if isinstance(size, tuple) else (size, size)
    assert y.dims == (False,) + tuple(s is None for s in sizes)  # pooled dims become static
    check(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), IMG, lengths,
          value=float("inf"))
    check(nn.AdaptiveAvgPool2d(size), (3, (False, 2), (False, 3), (True, 6)), lengths)


def test_adaptive_pool_empty_example_raises():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 0), torch.randn(1, 2, 3)], (False, True))
    with pytest.raises(ValueError, match="adaptive_avg_pool1d: example 0 has size 0"):
        F.adaptive_avg_pool1d(x, 2)


# ------------------------------------------------------------------ pad
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("pad,kw", [((1, 2), {}), ((2, 0), dict(value=1.5)), ((0, -1, 1, 1), {}),
                                    ((1, 1, 0, 2), dict(value=-2.0)), ((0, 0, 1, 0), {})])
def test_pad_constant(pad, kw, lengths):
    spec = (3, (False, 2), (True, 5), (True, 6))
    if min(pad) < 0:
        lengths = "equal"  # cropping a length-1 example would leave it empty (an error)
    check(lambda x: F.pad(x, pad, **kw), spec, lengths)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(2, 1, 0, 0), (1, 2, 0, 1), (0, 0, 2, 2)])
def test_pad_modes_use_each_examples_own_boundary(mode, pad):
    imgs = MaskedBatch.fromlist([torch.randn(1, 2, h, w, dtype=D)
                                 for h, w in ((3, 5), (4, 3), (5, 4))],
                                (False, True, True))
    mb_test(Poisoned(lambda x: F.pad(x, pad, mode=mode)), imgs, dtype=D)


def test_pad_errors():
    x = batch([2, 5])
    with pytest.raises(RuntimeError, match="Padding size should be less"):
        F.pad(x, (2, 2), mode="reflect")  # the length-2 example cannot reflect 2
    with pytest.raises(NotImplementedError, match="(?i)padding"):
        F.pad(batch([3, 4], extra=(3,)), (1, 1), mode="reflect")  # torch's own rule, per example
    with pytest.raises(ValueError, match="dimension 0"):
        F.pad(x, (0, 0, 0, 0, 1, 0))
    with pytest.raises(ValueError, match="even"):
        F.pad(x, (1,))
    with pytest.raises(ValueError, match="pad: example 0 has size 2 .* empty"):
        F.pad(x, (0, -2))
