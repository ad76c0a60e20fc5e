"""Losses reduced inside per-example code (issue 17, item 1): every loss and
its nn module, every reduction, called on one step's output directly and
accumulated over the steps of a @batch loop written the ordinary PyTorch
way (``loss = 0; for x_t, y_t in zip(...): loss += criterion(...)``).
Each is checked by mb_test against a loop over single examples, values and
gradients of the inputs and of the model, over mixed, all-equal and
length-1 batches and a static step dimension."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

DT = torch.float64
C, D = 4, 3
W = torch.tensor([0.5, 1.0, 2.0, 1.5], dtype=DT)

# name -> (criterion(out (1, C), target, reduction), target kind)
LOSSES = {
    "cross_entropy": (lambda o, t, r: F.cross_entropy(o, t, reduction=r), "class"),
    "cross_entropy_weight_ignore_smooth": (lambda o, t, r: F.cross_entropy(
        o, t, W, ignore_index=2, reduction=r, label_smoothing=0.1), "class"),
    "CrossEntropyLoss": (lambda o, t, r: nn.CrossEntropyLoss(reduction=r)(o, t), "class"),
    "nll_loss": (lambda o, t, r: F.nll_loss(F.log_softmax(o, 1), t, reduction=r), "class"),
    "NLLLoss_weight_ignore": (lambda o, t, r: nn.NLLLoss(W, ignore_index=2, reduction=r)(
        F.log_softmax(o, 1), t), "class"),
    "mse_loss": (lambda o, t, r: F.mse_loss(o, t, reduction=r), "real"),
    "MSELoss": (lambda o, t, r: nn.MSELoss(reduction=r)(o, t), "real"),
    "l1_loss": (lambda o, t, r: F.l1_loss(o, t, reduction=r), "real"),
    "L1Loss": (lambda o, t, r: nn.L1Loss(reduction=r)(o, t), "real"),
    "smooth_l1_loss": (lambda o, t, r: F.smooth_l1_loss(o, t, reduction=r, beta=0.5), "real"),
    "SmoothL1Loss": (lambda o, t, r: nn.SmoothL1Loss(reduction=r)(o, t), "real"),
    "huber_loss": (lambda o, t, r: F.huber_loss(o, t, reduction=r, delta=0.7), "real"),
    "HuberLoss": (lambda o, t, r: nn.HuberLoss(reduction=r)(o, t), "real"),
    "binary_cross_entropy": (lambda o, t, r: F.binary_cross_entropy(torch.sigmoid(o), t, reduction=r),
                             "prob"),
    "BCELoss": (lambda o, t, r: nn.BCELoss(W, reduction=r)(torch.sigmoid(o), t), "prob"),
    "binary_cross_entropy_with_logits": (lambda o, t, r: F.binary_cross_entropy_with_logits(
        o, t, reduction=r), "prob"),
    "BCEWithLogitsLoss": (lambda o, t, r: nn.BCEWithLogitsLoss(pos_weight=W, reduction=r)(o, t), "prob"),
    "kl_div": (lambda o, t, r: F.kl_div(F.log_softmax(o, 1), t, reduction=r), "prob"),
    "KLDivLoss_log_target": (lambda o, t, r: nn.KLDivLoss(reduction=r, log_target=True)(
        F.log_softmax(o, 1), t.log()), "prob"),
}
CASES = [(n, r) for n in LOSSES for r in ("none", "mean", "sum")] + [
    (n, "batchmean") for n in ("kl_div", "KLDivLoss_log_target")]
# lengths of the step dim (dynamic), or None: static, all 3
LENGTHS = {"mixed": [1, 4, 2, 3], "equal": [3, 3, 3], "one": [1, 1, 1], "single": [2],
           "static": None}


def _examples(kind, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    ns = lengths or [3, 3, 3]
    xs = [torch.randn(1, n, D, generator=g, dtype=DT) for n in ns]
    if kind == "class":
        ys = [torch.randint(0, C, (1, n), generator=g) for n in ns]
    elif kind == "real":
        ys = [torch.randn(1, n, C, generator=g, dtype=DT) for n in ns]
    else:
        ys = [torch.rand(1, n, C, generator=g, dtype=DT) * 0.9 + 0.05 for n in ns]
    dyn = lengths is not None
    x = MaskedBatch.fromlist(xs, (dyn, False))
    y = MaskedBatch.fromlist(ys, (dyn,) if kind == "class" else (dyn, False))
    return x, y


@matchbox.batch
def step_loop(model, criterion, reduction, x, y):
    loss = 0
    for x_t, y_t in zip(x.unbind(1), y.unbind(1)):
        loss += criterion(model(x_t), y_t, reduction)
    return loss


@matchbox.batch
def step_loop_first(model, criterion, reduction, x, y):
    """The accumulator starts as the first step's loss, not a number."""
    loss = None
    for t, (x_t, y_t) in enumerate(zip(x.unbind(1), y.unbind(1))):
        step = criterion(model(x_t), y_t, reduction)
        if t == 0:
            loss = step
        else:
            loss = loss + step
    return loss


def _model():
    torch.manual_seed(0)
    return nn.Linear(D, C).double()


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name,reduction", CASES)
def test_loss_on_one_step(name, reduction, lengths):
    """The criterion called directly on one step's output, e.g. the last
    step (per example) or step 0."""
    crit, kind = LOSSES[name]
    model = _model()
    x, y = _examples(kind, LENGTHS[lengths])
    out = mb_test(lambda x, y: crit(model(x[:, -1]), y[:, -1], reduction), x, y, dtype=DT)
    if reduction != "none":
        assert isinstance(out, MaskedBatch) and out.dims == ()


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name,reduction", CASES)
def test_loss_accumulated_in_batch_loop(name, reduction, lengths):
    crit, kind = LOSSES[name]
    model = _model()
    x, y = _examples(kind, LENGTHS[lengths])
    out = mb_test(lambda x, y: step_loop(model, crit, reduction, x, y), x, y, dtype=DT)
    if reduction != "none":
        assert isinstance(out, MaskedBatch) and out.dims == ()


@pytest.mark.parametrize("lengths", ["mixed", "static"])
@pytest.mark.parametrize("name", ["cross_entropy", "mse_loss", "binary_cross_entropy_with_logits"])
def test_loss_accumulated_from_first_step(name, lengths):
    crit, kind = LOSSES[name]
    model = _model()
    x, y = _examples(kind, LENGTHS[lengths])
    mb_test(lambda x, y: step_loop_first(model, crit, "sum", x, y), x, y, dtype=DT)


def test_summed_step_losses_train_like_the_loop():
    """The issue's case: summing 'sum' step losses used to add the batch's
    total to every example (about 3x the right total for 4 examples)."""
    model = _model()
    x, y = _examples("class", LENGTHS["mixed"])
    crit = LOSSES["cross_entropy"][0]
    total = matchbox.example_sum(step_loop(model, crit, "sum", x, y))
    want = sum(step_loop(model, crit, "sum", xe, ye) for xe, ye in zip(x.examples(), y.examples()))
    torch.testing.assert_close(total, want)
