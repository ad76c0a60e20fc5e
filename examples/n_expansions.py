"""The research snippet from the Matchbox talk: `n_expansions`.

A graph-building process written for ONE example.  The example is a set of
``k`` node feature vectors, shape ``(1, k, dim)``, and ``k`` differs between
examples.  Every node starts unconnected.  Each step a learned scorer reads
the nodes (attention from the current hidden state), decides whether this
step connects one node or two, and the hidden state accumulates what was
read.  The loop runs until a single component is left; it counts its steps
(``n``, the number of expansions).  A readout of the final state predicts a
target, so the whole process trains end to end.

The point is the shape of the code: static configuration ``if``\\ s (plain
Python flags on ``self.config``) around a per-example ``while unconnected > 1:``
loop with augmented assignments.  ``@matchbox.batch`` runs it on a batch of
examples with different ``k``: each example leaves the loop after its own
number of steps, and values and gradients equal per-example runs.

``calc_n_expansions`` is the talk's own snippet, verbatim: the number of
expansions a heuristic predicts from each example's node count, with
``unconnected.new_zeros(unconnected.size(0))`` and then
``expansions += unconnected.ceil()`` inside a per-example ``while``.

Run: ``python -m examples.n_expansions [--steps N] [--batch-size B] [--seed S]``.
"""
import itertools
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

import matchbox
import matchbox.functional as F
from examples.common import run_main, train_loop
from matchbox.data import BucketBatchSampler, collate


@dataclass
class Config:
    """Static model configuration: plain Python values, the same for every
    example, so the ``if``\\ s on them stay plain Python under @batch."""

    features: int = 8
    hidden: int = 32
    attend: bool = True       # read the nodes by attention (else their mean)
    use_gate: bool = True     # gated update of the hidden state (else plain add)
    n_expansions_mode: str = "medium"  # the talk's heuristic: 'sparse', 'dense' or 'medium'
    n_relations: int = 3


class NExpansions(nn.Module):
    """Connect the nodes of one example step by step; predict a target from
    the final state.  ``forward(nodes)`` returns ``(prediction, n)``."""

    def __init__(self, config=None):
        super().__init__()
        self.config = config = config or Config()
        self.n_expansions_mode, self.n_relations = config.n_expansions_mode, config.n_relations
        H = config.hidden
        self.embed = nn.Linear(config.features, H)
        self.query = nn.Linear(H, H)
        self.update = nn.Linear(2 * H, H)
        if config.use_gate:
            self.gate = nn.Linear(2 * H, H)
        self.scorer = nn.Linear(H, 1)
        self.readout = nn.Linear(H, 1)

    @matchbox.batch
    def n_expansions(self, nodes):
        """``nodes``: (1, k, features).  Returns the accumulated hidden state
        (1, hidden) and the number of expansions n (a per-example count)."""
        x = torch.tanh(self.embed(nodes))          # (1, k, H)
        state = x.mean(1)                          # (1, H): what the scorer sees
        h = x.mean(1)                              # (1, H): accumulated over expansions
        unconnected = nodes.size_as_tensor(1)      # k, per example
        n = 0
        while unconnected > 1:
            if self.config.attend:
                scores = x @ self.query(state).unsqueeze(2)  # (1, k, 1)
                read = (F.softmax(scores, 1) * x).sum(1)     # (1, H)
            else:
                read = x.mean(1)
            both = torch.cat([state, read], 1)               # (1, 2H)
            p = torch.sigmoid(self.scorer(state)).squeeze(1) # (1,): chance of a double merge
            new = torch.tanh(self.update(both))
            if self.config.use_gate:
                gate = torch.sigmoid(self.gate(both))
                state = gate * new + (1 - gate) * state
            else:
                state = new
            h += (1 + p.unsqueeze(1)) * state / 4            # weighted by the expected merges
            # connect one node, or two when the scorer says so and two are left
            unconnected -= 1 + ((p > 0.5) & (unconnected > 2)).long()
            n += 1
        return h, n

    def forward(self, nodes):
        h, n = self.n_expansions(nodes)
        return self.readout(h), n

    # The snippet on the Matchbox talk's slide, verbatim: the number of
    # expansions a graph over ``n_leaves`` nodes needs when each parent
    # connects ``c_per_parent`` children.  ``n_leaves``: (1,), one count.
    @matchbox.batch
    def calc_n_expansions(self, n_leaves):
        if self.n_expansions_mode == 'sparse':
            return n_leaves - 1

        else:
            if self.n_expansions_mode == 'dense':
                parent_conn_usage = 1.0
            else:
                parent_conn_usage = 0.5 # 'medium'

            c_per_parent = 1 + parent_conn_usage * (
                self.n_relations - 1)

            unconnected = n_leaves.float()
            expansions = unconnected.new_zeros(
                unconnected.size(0))
            while unconnected > 1:
                unconnected /= c_per_parent
                expansions += unconnected.ceil()

            expansions = expansions.clamp(1).long()
            return expansions


def make_data(count=256, features=8, max_nodes=12, seed=0):
    """``count`` examples ``(nodes, target)``: nodes (1, k, features) with k
    in 1..max_nodes, target (1, 1) = the sum over nodes of feature 0 divided
    by 4 (it grows with k, so the model must use how many nodes there are)."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(count):
        k = int(torch.randint(1, max_nodes + 1, (), generator=g))
        nodes = torch.randn(1, k, features, generator=g)
        data.append((nodes, nodes[:, :, 0].sum(1, keepdim=True) / 4))
    return data


def mean_expansions(n):
    """The mean of the per-example counts ``n`` (a Python int when every
    example took the same number of steps, else a MaskedBatch)."""
    return float(n.padded_data.double().mean()) if isinstance(n, matchbox.MaskedBatch) else float(n)


#: collate (nodes, target) pairs: nodes dynamic in k, static in features
batch_examples = collate(dims=((True, False), (False,)))


def _batches(data, batch_size, seed):
    """Endless training batches, epoch after epoch; each batch holds
    examples with similar numbers of nodes (less padding, and the examples
    of a batch leave the loop at similar steps)."""
    sampler = BucketBatchSampler([nodes.size(1) for nodes, _ in data], batch_size, seed=seed)
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=batch_examples)
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        yield from loader


def main(steps=80, batch_size=32, seed=0, lr=3e-3, config=None):
    """Train on synthetic data; print and return the final metrics."""
    torch.manual_seed(seed)
    model = NExpansions(config)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = make_data(count=512, features=model.config.features, seed=seed)
    batches = _batches(data, batch_size, seed)
    expansions, heuristic = [], []

    def loss_of(step):
        nodes, target = next(batches)
        pred, n = model(nodes)
        expansions.append(mean_expansions(n))
        heuristic.append(mean_expansions(model.calc_n_expansions(nodes.size_as_tensor(1))))
        return matchbox.example_mean(F.mse_loss(pred, target))  # each example's error, averaged
    losses, seconds = train_loop(opt, range(steps), loss_of)
    window = max(1, min(10, steps // 4))
    start, final = sum(losses[:window]) / window, sum(losses[-window:]) / window
    mean_n = sum(expansions) / len(expansions)
    mean_h = sum(heuristic) / len(heuristic)
    print(f"final: loss {final:.3f} (start {start:.3f}), {mean_n:.2f} expansions/example on "
          f"average ({mean_h:.2f} by the talk's calc_n_expansions), {batch_size} examples/batch, "
          f"{seconds:.1f} s")
    return {"loss": final, "start_loss": start, "mean_expansions": mean_n,
            "heuristic_expansions": mean_h, "seconds": seconds}


if __name__ == "__main__":
    run_main(main, __doc__, steps=80, batch_size=32, seed=0)
