"""What every benchmark task gives the runner, and how the runner times it.

A task module (``bench/tasks/<name>.py``) has ``NAME``, ``TRAINS`` (True when a
step is forward + backward + optimizer step) and ``build(batch_size, device,
size, seed) -> dict[str, Variant]`` with variants keyed by the ``KINDS``
below, all built from the same data and the same initial weights; the four
tasks of the autobatching paper also have ``build_dynet(batch_size, size,
seed)``, the ``dynet_*`` variants (CPU only, where DyNet is installed).

Before timing, the runner checks that every variant computes the same
numbers as the per-example loop: the value of ``run()`` and, for training
tasks, the gradients ``grads()`` names (a dict, compared where names meet).
"""
import copy
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

LR = 1e-4  # every variant's SGD learning rate

KINDS = {
    "per_example": "per-example loop (the example-level code on each example)",
    "hand": "hand-written padding and masks",
    "matchbox": "matchbox on the example-level code",
    "matchbox_whole": "matchbox with whole-sequence modules",
    "matchbox_compact": "matchbox with @batch(compact=...): loop iterations on the live lanes only",
    "matchbox_merged": "matchbox with @batch(merge_calls=True): sibling recursive calls as one call",
    "per_example_objects": "per-example loop of the same model over Python tree objects",
    "matchbox_objects": "matchbox on the model over Python tree objects (matchbox.objects)",
    "per_example_list": "per-example loop of the same model with its state in Python lists",
    "matchbox_list": "matchbox on the model with its state in Python lists",
    "compiled": "torch.compile of the hand-written variant",
    "matchbox_compiled": "torch.compile of the matchbox variant",
    "dynet_noauto": "DyNet, one graph per minibatch, autobatching off",
    "dynet_auto": "DyNet, one graph per minibatch, autobatching on",
}


@dataclass
class Variant:
    """One way of computing a task's step.

    ``run()`` is the forward: a scalar loss for training tasks (the SUM of
    per-example losses, so every variant means the same number), else a list
    of per-example outputs.  ``model`` owns the parameters the optimizer
    steps; ``grads()`` maps logical parameter names to gradients after
    ``run().backward()`` (default: the model's named parameters).

    A variant in another framework (``bench/dynet_tasks``) has no ``model``:
    ``run()`` gives its loss as a tensor (checked by value only) and
    ``step()`` is its own whole training step (forward, backward, SGD update
    at ``LR``).
    """
    run: Callable
    model: Optional[torch.nn.Module] = None
    grads: Optional[Callable[[], dict]] = None
    note: str = ""
    optimizer: object = field(default=None, repr=False)
    step: Optional[Callable] = None

    def named_grads(self):
        if self.grads is not None:
            return self.grads()
        return {n: p.grad for n, p in self.model.named_parameters() if p.grad is not None}


def fresh(model):
    """An independent copy of ``model`` (same weights) for one variant."""
    return copy.deepcopy(model)


def sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def step(variant, trains):
    """One timed unit: forward (+ backward + SGD step when training)."""
    if variant.step is not None:
        return variant.step()
    if not trains:
        with torch.no_grad():
            return variant.run()
    if variant.optimizer is None:
        variant.optimizer = torch.optim.SGD(variant.model.parameters(), lr=LR)
    variant.optimizer.zero_grad(set_to_none=True)
    loss = variant.run()
    loss.backward()
    variant.optimizer.step()
    return loss


def _close(a, b, rtol, atol):
    a, b = torch.as_tensor(a).double().cpu(), torch.as_tensor(b).double().cpu()
    return a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol)


def check(variants, trains, rtol=1e-4, atol=1e-5):
    """Raise AssertionError unless every variant agrees with the per-example
    one (loss and gradients when training, outputs otherwise; the loss
    only for a variant with no torch ``model``).  Returns the
    seconds each variant's first run took (with its backward): for a
    compiled variant, mostly the time to compile it."""
    ref_name = "per_example" if "per_example" in variants else next(iter(variants))
    results, first = {}, {}
    for name, v in variants.items():
        start = time.perf_counter()
        if trains and v.model is not None:
            v.model.zero_grad(set_to_none=True)
            loss = v.run()
            loss.backward()
            results[name] = (loss.detach(), {k: g.detach().clone() for k, g in v.named_grads().items()})
            v.model.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                results[name] = (v.run(), {})
        first[name] = time.perf_counter() - start
    ref_out, ref_grads = results[ref_name]
    for name, (out, grads) in results.items():
        outs = out if isinstance(out, (list, tuple)) else [out]
        refs = ref_out if isinstance(ref_out, (list, tuple)) else [ref_out]
        if len(outs) != len(refs) or not all(_close(a, b, rtol, atol) for a, b in zip(outs, refs)):
            raise AssertionError(f"{name} computes different outputs than {ref_name}")
        for k in grads.keys() & ref_grads.keys():
            if not _close(grads[k], ref_grads[k], rtol * 10, atol * 10):
                worst = (grads[k].double().cpu() - ref_grads[k].double().cpu()).abs().max()
                raise AssertionError(f"{name}: gradient of {k} differs from {ref_name} "
                                     f"(worst {worst:.2e})")
    return first


def time_interleaved(variants, trains, device, repeats=5, warmup=2, budget=None):
    """Seconds per step for each variant: the median of ``repeats`` steps,
    taken round-robin (variant A, B, C, A, B, C, ...) so that machine noise
    hits every variant alike.  A variant slower than ``budget`` seconds
    per step is timed fewer times (never less than once)."""
    for v in variants.values():
        for _ in range(warmup):
            step(v, trains)
    sync(device)
    times = {name: [] for name in variants}
    for r in range(repeats):
        for name, v in variants.items():
            if r and budget and times[name] and min(times[name]) * (r + 1) > budget:
                continue
            start = time.perf_counter()
            step(v, trains)
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}
