"""The ``n_expansions`` while-loop kernel (examples/n_expansions.py): a
per-example ``while unconnected > 1`` whose trip count is the example's
node count, forward + backward + SGD step."""
import types

import torch
import torch.nn.functional as TF

from bench.data import lengths
from bench.harness import Variant, fresh
from examples.n_expansions import Config, NExpansions
from matchbox import MaskedBatch, example_sum
from matchbox import batch as matchbox_batch

NAME = "n_expansions"
TRAINS = True
SIZES = {"small": dict(features=8, hidden=32), "paper": dict(features=32, hidden=128)}


def hand_forward(model, nodes, k):
    """What an expert writes: padded nodes (B, K, F), counts k (B,); the
    loop runs until every example is down to one component, with explicit
    masks for the finished ones and for the padding nodes."""
    cfg = model.config
    real = torch.arange(nodes.size(1), device=nodes.device) < k[:, None]        # (B, K)
    x = torch.tanh(model.embed(nodes))                                           # (B, K, H)
    mean = x.masked_fill(~real[..., None], 0).sum(1) / k[:, None].to(x.dtype)
    state, h = mean, mean
    unconnected = k.clone()
    active = unconnected > 1
    while bool(active.any()):
        if cfg.attend:
            scores = (x @ model.query(state).unsqueeze(2)).squeeze(2).masked_fill(~real, float("-inf"))
            read = (TF.softmax(scores, 1).unsqueeze(2) * x).sum(1)
        else:
            read = mean
        both = torch.cat([state, read], 1)
        p = torch.sigmoid(model.scorer(state)).squeeze(1)
        new = torch.tanh(model.update(both))
        if cfg.use_gate:
            gate = torch.sigmoid(model.gate(both))
            new = gate * new + (1 - gate) * state
        a = active[:, None]
        h = torch.where(a, h + (1 + p[:, None]) * new / 4, h)
        state = torch.where(a, new, state)
        step = 1 + ((p > 0.5) & (unconnected > 2)).long()
        unconnected = torch.where(active, unconnected - step, unconnected)
        active = unconnected > 1
    return model.readout(h)


def build(batch_size=64, device="cpu", size="small", seed=0):
    torch.manual_seed(seed)
    cfg = Config(**SIZES[size])
    model = NExpansions(cfg).to(device)
    ks = lengths(batch_size, mean=8, spread=4, low=1, high=24, seed=seed)
    nodes = [torch.randn(1, k, cfg.features, device=device) for k in ks]
    targets = [n[:, :, 0].sum(1, keepdim=True) / 4 for n in nodes]

    per = fresh(model)
    def per_example():
        return sum(TF.mse_loss(per(n)[0], t, reduction="sum") for n, t in zip(nodes, targets))

    mb = fresh(model)
    mb_nodes = MaskedBatch.fromlist(nodes, dims=(True, False))
    mb_target = MaskedBatch.fromlist(targets, dims=(False,))
    def matchbox():
        return example_sum(TF.mse_loss(mb(mb_nodes)[0], mb_target, reduction="sum"))

    hand = fresh(model)
    padded, k = mb_nodes.to_padded(), torch.tensor(ks, device=device)
    target = torch.cat(targets)
    def hand_written():
        return TF.mse_loss(hand_forward(hand, padded, k), target, reduction="sum")

    compact = fresh(model)  # the same loop under @batch(compact=0.5)
    compact.n_expansions = types.MethodType(
        matchbox_batch(NExpansions.n_expansions.__wrapped__, compact=0.5), compact)
    def matchbox_compact():
        return example_sum(TF.mse_loss(compact(mb_nodes)[0], mb_target, reduction="sum"))

    return {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
            "matchbox": Variant(matchbox, mb), "matchbox_compact": Variant(matchbox_compact, compact)}

