"""One check for the examples whose inputs are Python objects (trees, word
lists): the batched run equals the per-example loop, values and gradients.

``mb_test`` makes its own tensor inputs; these examples bring their own
data, so the check takes the examples and the batch built from them."""
import torch

import matchbox
from matchbox import MaskedBatch


def _leaves(out):
    return [t for o in out for t in _leaves(o)] if isinstance(out, (tuple, list)) else [out]


def per_example(y, B):
    """The B per-example values of a batched output (a plain value: the
    same for every example, e.g. all of a batch of one)."""
    return y.examples() if isinstance(y, MaskedBatch) else [y] * B


def assert_batch_equals_loop(model, f, examples, batch, rtol=1e-7, atol=1e-9):
    """``f(*example)`` for each example alone against ``f(*batch)``: every
    output of every example, then the gradients of ``model``'s parameters
    of the sum of all floating outputs (the loop's sum over examples against
    ``matchbox.example_sum`` of the batch's).  Returns the batched output."""
    params = dict(model.named_parameters())
    model.zero_grad(set_to_none=True)
    want = [_leaves(f(*ex)) for ex in examples]
    sum(t.sum() for ys in want for t in ys if t.is_floating_point()).backward()
    want_grads = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    out = f(*batch)
    got = _leaves(out)
    assert len(got) == len(want[0]), f"the batch gives {len(got)} outputs, one example {len(want[0])}"
    floating = [y for y in got if y.is_floating_point()]
    sum(matchbox.example_sum(y) for y in floating).backward()
    for k, y in enumerate(got):
        for b, value in enumerate(per_example(y, len(examples))):
            torch.testing.assert_close(value, want[b][k], rtol=rtol, atol=atol, check_device=False,
                                       msg=lambda m: f"output {k} of example {b}: {m}")
    got_grads = {n: p.grad for n, p in params.items() if p.grad is not None}
    assert got_grads.keys() == want_grads.keys(), (
        f"parameters with a gradient differ: batch {sorted(got_grads)}, loop {sorted(want_grads)}")
    for n, g in want_grads.items():
        torch.testing.assert_close(got_grads[n], g, rtol=rtol * 10, atol=atol * 10,
                                   msg=lambda m: f"gradient of {n}: {m}")
    return out
