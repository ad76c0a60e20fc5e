"""A MaskedBatch model under DistributedDataParallel: two CPU processes
(gloo, localhost), each with half of a batch of variable-length sequences,
end with the gradients of one process that sees the whole batch.

DDP averages gradients over processes, so each process's loss is the sum
of its examples' losses divided by the per-process share of the global
batch (``B / world_size``): the average of the two then equals the
single-process loss ``sum / B``.
"""
import os
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import matchbox
from matchbox import MaskedBatch

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available")

WORLD = 2
LENGTHS = [3, 1, 5, 2, 4, 4]  # rank 0 gets the first half, rank 1 the second


class Encoder(nn.Module):
    """An LSTMCell over one sequence (1, n, 3) with per-example control flow;
    a linear readout of the last state (and of a step-dependent branch)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(3, 5)
        self.out = nn.Linear(5, 1)

    @matchbox.batch
    def forward(self, x):
        h = c = x.batch_zeros(5)
        for x_t in x.unbind(1):
            h, c = self.cell(x_t, (h, c))
            if x_t.sum() > 0:
                h = h * 0.5
        return self.out(h)


def data():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(1, n, 3, generator=g, dtype=torch.float64) for n in LENGTHS]
    ys = [torch.randn(1, 1, generator=g, dtype=torch.float64) for _ in LENGTHS]
    return xs, ys


def make_model():
    torch.manual_seed(0)
    return Encoder().double()


def loss_of(model, xs, ys, scale):
    x = MaskedBatch.fromlist(xs, (True, False))
    y = MaskedBatch.fromlist(ys, (False,))
    pred = model(x)
    assert isinstance(pred, MaskedBatch)
    return nn.functional.mse_loss(pred, y, reduction="sum") / scale


#: DDP configurations checked; static_graph and find_unused_parameters make
#: DDP look for the tensors inside the model's MaskedBatch output
MODES = {"default": {}, "static_graph": {"static_graph": True},
         "find_unused_parameters": {"find_unused_parameters": True}}
STEPS = 2  # static_graph takes a different path in its first iteration


def worker(rank, port, out_dir):
    torch.set_num_threads(1)  # two processes share this machine's few cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=60))
    try:
        xs, ys = data()
        share = len(xs) // WORLD
        mine = slice(rank * share, (rank + 1) * share)
        grads = {}
        for mode, options in MODES.items():
            model = nn.parallel.DistributedDataParallel(make_model(), **options)
            for step in range(STEPS):
                model.zero_grad()
                loss_of(model, xs[mine], ys[mine], share).backward()
                grads[mode, step] = {n: p.grad.clone() for n, p in model.module.named_parameters()}
        torch.save(grads, os.path.join(out_dir, f"grads{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_gradients_equal_single_process(tmp_path):
    model = make_model()
    xs, ys = data()
    loss_of(model, xs, ys, len(xs)).backward()
    expected = {n: p.grad for n, p in model.named_parameters()}

    try:
        mp.spawn(worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    except mp.ProcessExitedException:
        # gloo's threads now and then abort a worker at process exit, after
        # its work is done ("terminate called without an active exception");
        # what is checked is what every worker saved before that
        if not all((tmp_path / f"grads{rank}.pt").exists() for rank in range(WORLD)):
            raise
    for rank in range(WORLD):
        grads = torch.load(tmp_path / f"grads{rank}.pt")
        for (mode, step), got in grads.items():
            assert got.keys() == expected.keys()
            for name, g in expected.items():
                torch.testing.assert_close(
                    got[name], g, rtol=1e-9, atol=1e-12,
                    msg=lambda m: f"{mode}, step {step}, rank {rank}, gradient of {name}: {m}")


def test_tools_find_the_tensors_in_a_masked_batch():
    """What DDP relies on (no processes needed): pytree flattens a
    MaskedBatch to its data and mask and rebuilds it; DDP's output scan
    (dataclass fields) finds its data."""
    from torch.nn.parallel.distributed import _find_tensors
    from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
    xs, _ = data()
    x = MaskedBatch.fromlist(xs, (True, False))
    leaves, spec = tree_flatten({"out": x, "n": 3})
    assert any(t is x.padded_data for t in leaves) and any(t is x._mask for t in leaves)
    back = tree_unflatten(leaves, spec)["out"]
    assert isinstance(back, MaskedBatch) and back.dims == x.dims
    assert all(torch.equal(a, b) for a, b in zip(back.examples(), xs))
    doubled = tree_map(lambda t: t * 2 if t.is_floating_point() else t, x)
    assert all(torch.equal(a, 2 * b) for a, b in zip(doubled.examples(), xs))
    found = list(_find_tensors((x, [x.sum(1)])))
    assert any(t is x.padded_data for t in found) and len(found) >= 3
    full = MaskedBatch.fromlist([xs[0], xs[0]])  # every entry real: no mask tensor
    assert tree_unflatten(*tree_flatten(full))._mask is None
