"""batch_norm, instance_norm, group_norm over dynamic dims.

Batch norm in training mode is a batch-level statistic: its per-example
meaning is the statistic over the concatenated examples (SPEC section 3), so
it is checked against ``F.batch_norm`` on the concatenation (values, input
and parameter gradients, running stats).  Eval-mode batch norm, instance norm
and group norm are per example: mb_test.  Padding is poisoned with NaN."""
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


class Poisoned(nn.Module):
    """``fn`` on its input with NaN in the batch padding (exposes fn's parameters)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(poison(x))


def examples(sizes, channels=3, seed=0):
    """Random examples (1, channels, *size) for each size tuple in ``sizes``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((1, channels) + tuple(s), generator=g, dtype=D) for s in sizes]


def randomize(module):
    """Non-trivial affine parameters and running stats."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(0.5, 1.5)
        if getattr(module, "running_mean", None) is not None:
            module.running_mean.normal_()
            module.running_var.uniform_(0.5, 2.0)
    return module


def bn_reference(make, xs, dims, steps=1):
    """Run batch norm module ``make()`` batched and on the concatenation of
    the examples (spatial dims flattened), ``steps`` times with the same
    input, and compare outputs, input and parameter gradients and buffers."""
    ref, bat = randomize(make()), randomize(make())
    C = xs[0].size(1)
    for step in range(steps):
        xr = [x.clone().requires_grad_() for x in xs]
        xb = [x.clone().requires_grad_() for x in xs]
        cat = torch.cat([x.reshape(1, C, -1) for x in xr], 2)
        if cat.size(2) == len(xs) and all(x.dim() == 2 for x in xs):
            cat = torch.cat(xr, 0)  # examples (1, C): the concatenation is a plain batch
        yr = F.batch_norm(cat, ref.running_mean, ref.running_var, ref.weight, ref.bias,
                          ref.training or ref.running_mean is None, _momentum(ref), ref.eps)
        if ref.training and ref.num_batches_tracked is not None:
            ref.num_batches_tracked.add_(1)
        yb = bat(poison(MaskedBatch.fromlist(xb, dims)))
        assert yb.dims == dims
        outs = yb.examples()
        sizes = [x[0, 0].numel() for x in xs]
        refs = [y.reshape(x.shape) for y, x in zip(yr.reshape(1, C, -1).split(sizes, 2), xs)] \
            if yr.dim() > 2 else list(yr.split(1, 0))
        g = torch.Generator().manual_seed(step)
        cots = [torch.randn(y.shape, generator=g, dtype=D) for y in refs]
        for o, r in zip(outs, refs):
            torch.testing.assert_close(o, r, rtol=1e-9, atol=1e-10)
        sum((y * c).sum() for y, c in zip(refs, cots)).backward()
        sum((y * c).sum() for y, c in zip(outs, cots)).backward()
        for a, b in zip(xr, xb):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-9, atol=1e-10)
    for (name, p), q in zip(ref.named_parameters(), bat.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-9, atol=1e-10, msg=name)
    for (name, p), q in zip(ref.named_buffers(), bat.buffers()):
        torch.testing.assert_close(q, p, rtol=1e-12, atol=1e-12, msg=name)


def _momentum(m):
    if m.momentum is not None:
        return m.momentum
    return 1.0 / float(m.num_batches_tracked + 1)  # cumulative moving average


# ------------------------------------------------------------------ batch norm: training
SEQ_SIZES = {"mixed": [(1,), (5,), (3,)], "one": [(1,), (1,), (1,)], "equal": [(4,), (4,), (4,)],
             "single": [(6,)]}


@pytest.mark.parametrize("lengths", SEQ_SIZES)
@pytest.mark.parametrize("kw", [{}, dict(affine=False), dict(momentum=None),
                                dict(track_running_stats=False)])
def test_batch_norm1d_training_equals_concatenation(kw, lengths):
    bn_reference(lambda: nn.BatchNorm1d(3, **kw).double(), examples(SEQ_SIZES[lengths]),
                 (False, True), steps=2)


@pytest.mark.parametrize("sizes", [[(1, 2), (3, 4), (2, 1)], [(2, 3)], [(3, 3), (3, 3)]])
def test_batch_norm2d_training_equals_concatenation(sizes):
    bn_reference(lambda: nn.BatchNorm2d(3).double(), examples(sizes), (False, True, True))
    bn_reference(lambda: nn.BatchNorm2d(3, affine=False).double(), examples(sizes),
                 (False, True, True))


def test_batch_norm2d_one_dynamic_dim():
    bn_reference(lambda: nn.BatchNorm2d(3).double(), examples([(1, 4), (3, 4)]),
                 (False, True, False))


def test_batch_norm_features_only():
    """Examples (1, C): the batch itself is the concatenation."""
    bn_reference(lambda: nn.BatchNorm1d(3).double(), examples([(), (), ()]), (False,))


def test_batch_norm_training_one_value_raises():
    x = MaskedBatch.fromlist(examples([(1,)]), (False, True))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3).double()(x)


def test_batch_norm_dormant_lanes_are_left_out():
    """Inside @batch control flow, statistics cover the active lanes only."""
    xs = examples([(2,), (5,), (3,)])
    bn, ref = nn.BatchNorm1d(3).double(), nn.BatchNorm1d(3).double()
    with lanes(torch.tensor([True, False, True])):
        y = bn(poison(MaskedBatch.fromlist(xs, (False, True))))
    r = ref(torch.cat([xs[0], xs[2]], 2))
    torch.testing.assert_close(y.examples()[0], r[:, :, :2])
    torch.testing.assert_close(y.examples()[2], r[:, :, 2:])
    torch.testing.assert_close(bn.running_var, ref.running_var)


# ------------------------------------------------------------------ batch norm: eval
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", [(3, (False, 3), (True, 6)), (1, (False, 3), (True, 6)),
                                  (3, (False, 3), (True, 4), (True, 5))])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_eval_per_example(spec, lengths, affine):
    bn = nn.BatchNorm1d(3, affine=affine) if len(spec) == 3 else nn.BatchNorm2d(3, affine=affine)
    bn = randomize(bn.double()).eval()
    mb_test(Poisoned(bn), spec, lengths=lengths, dtype=D)


def test_batch_norm_checks_inputs():
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 3, 3)], (True, False))
    with pytest.raises(ValueError, match="channel dimension .* dynamic"):
        F.batch_norm(x, None, None, training=True)
    xs = MaskedBatch.fromlist(examples([(2,), (4,)]), (False, True))
    with pytest.raises(NotImplementedError, match="per-example"):
        F.batch_norm(xs, None, None, weight=xs, training=True)


# ------------------------------------------------------------------ instance norm
INSTANCE = {"mixed": [(2,), (6,), (3,)], "two": [(2,), (2,), (2,)], "equal": [(5,), (5,), (5,)],
            "single": [(4,)]}


@pytest.mark.parametrize("lengths", INSTANCE)
@pytest.mark.parametrize("kw", [{}, dict(affine=True), dict(track_running_stats=True),
                                dict(affine=True, track_running_stats=True)])
def test_instance_norm1d(kw, lengths):
    norm = randomize(nn.InstanceNorm1d(3, **kw).double())
    x = MaskedBatch.fromlist(examples(INSTANCE[lengths]), (False, True))
    mb_test(Poisoned(norm), x, dtype=D)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("spec", [(3, (False, 3), (True, 5), (False, 2)),
                                  (1, (False, 3), (True, 5), (False, 2)),
                                  MaskedBatch.fromlist(examples([(1, 3), (4, 2), (2, 5)]),
                                                       (False, True, True))])
def test_instance_norm2d(spec, lengths):
    """(A ready batch is used as given: a 1x1 example would be an error.)"""
    mb_test(Poisoned(randomize(nn.InstanceNorm2d(3, affine=True).double())), spec,
            lengths=lengths, dtype=D)


def test_instance_norm_running_stats_average_the_examples():
    """Running stats move towards the mean over examples of each example's
    own statistics (what F.instance_norm does for an equal-length batch)."""
    xs = examples([(2,), (6,), (3,)])
    norm = randomize(nn.InstanceNorm1d(3, track_running_stats=True).double())
    singles = []
    for x in xs:
        one = randomize(nn.InstanceNorm1d(3, track_running_stats=True).double())
        one(x)
        singles.append((one.running_mean, one.running_var))
    norm(poison(MaskedBatch.fromlist(xs, (False, True))))
    torch.testing.assert_close(norm.running_mean, torch.stack([m for m, _ in singles]).mean(0))
    torch.testing.assert_close(norm.running_var, torch.stack([v for _, v in singles]).mean(0))


def test_instance_norm_running_stats_leave_out_dormant_lanes():
    xs = examples([(2,), (6,), (3,)])
    norm = randomize(nn.InstanceNorm1d(3, track_running_stats=True).double())
    ref = randomize(nn.InstanceNorm1d(3, track_running_stats=True).double())
    with lanes(torch.tensor([True, False, True])):
        norm(poison(MaskedBatch.fromlist(xs, (False, True))))
    ref(poison(MaskedBatch.fromlist([xs[0], xs[2]], (False, True))))
    torch.testing.assert_close(norm.running_mean, ref.running_mean)
    torch.testing.assert_close(norm.running_var, ref.running_var)


@pytest.mark.parametrize("lengths", LENGTHS)
def test_instance_norm_eval_uses_running_stats(lengths):
    norm = randomize(nn.InstanceNorm1d(3, affine=True, track_running_stats=True).double()).eval()
    mb_test(Poisoned(norm), (3, (False, 3), (True, 6)), lengths=lengths, dtype=D)


def test_instance_norm_one_spatial_element_raises():
    x = MaskedBatch.fromlist(examples([(1,), (4,)]), (False, True))
    with pytest.raises(ValueError, match="example 0 has 1 spatial element"):
        F.instance_norm(x)


# ------------------------------------------------------------------ group norm
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("groups,spec", [(2, (3, (False, 4), (True, 6))),
                                         (1, (1, (False, 4), (True, 6))),
                                         (4, (3, (False, 4), (True, 6), (False, 2))),
                                         (2, (3, (False, 4), (True, 4), (True, 5)))])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(groups, spec, lengths, affine):
    mb_test(Poisoned(randomize(nn.GroupNorm(groups, 4, affine=affine).double())), spec,
            lengths=lengths, dtype=D)


def test_group_norm_bad_groups_raises():
    x = MaskedBatch.fromlist(examples([(2,), (4,)]), (False, True))
    with pytest.raises(ValueError, match="3 channels are not divisible into 2 groups"):
        F.group_norm(x, 2)
