"""The autobatching paper's four tasks written with DyNet's Python API, to
time DyNet's autobatching beside the PyTorch variants (``pip install -e
".[dynet]"``; import this package only where ``dynet`` is installed).

Written the way the DyNet benchmark's dynet-py/ scripts write them
(github.com/neulab/dynet-benchmark): a fresh graph per minibatch, one loss
expression per sentence from plain Python over its words or its tree, the
minibatch loss ``dy.esum`` of them, ``backward()``, ``trainer.update()``.
Layers and sizes are the PyTorch model's: every DyNet model here is built
FROM the task's torch module and starts from its weights (so the runner's
check can compare DyNet's loss with the per-example loop's).

Autobatching on or off: DyNet picks its execution engine per computation
graph (``dy.renew_cg(autobatching=...)`` makes a ``ComputationGraph(batched)``,
dynet/dynet.cc; the process-wide ``--dynet-autobatch 1`` only sets the
default), and ``autobatching=True`` runs ``--dynet-autobatch 1``'s strategy
(by agenda).  So both DyNet variants run in the runner's own process,
interleaved with the PyTorch ones step by step, and the runner's wall clock
(``harness.time_interleaved``) times a DyNet step as it times a torch one:
building the graph in Python, forward, backward and update.  The DyNet
wheel's CPU kernels (Eigen, no OpenMP or MKL) run on one thread, as torch
does under the runner's default ``--threads 1``.
"""
import importlib.metadata

import dynet_config

# at dynet's first import only; its memory pools grow past ``mem`` (MB) as needed
dynet_config.set(mem="512", random_seed=1)

import dynet as dy  # noqa: E402
import torch  # noqa: E402

from bench.harness import LR, Variant  # noqa: E402

KINDS = {"dynet_noauto": False, "dynet_auto": True}
VERSION = importlib.metadata.version("dynet38")


def variants(make_model, data):
    """``dynet_noauto`` and ``dynet_auto`` (a :class:`Training` each, with
    its own model ``make_model(parameter_collection)``) as Variants."""
    out = {}
    for kind, auto in KINDS.items():
        t = Training(make_model, data, auto)
        out[kind] = Variant(t.run, step=t.step,
                            note=f"DyNet {VERSION}, renew_cg(autobatching={auto})")
    return out


class Training:
    """A DyNet model (with ``losses(data)``: one loss expression per
    example) and its SGD trainer at the harness's learning rate, dense
    updates and no gradient clipping, as torch's SGD.  Holds the parameter
    collection: DyNet frees the parameters with it."""

    def __init__(self, make_model, data, autobatching):
        self.pc = dy.ParameterCollection()
        self.model, self.data, self.autobatching = make_model(self.pc), data, autobatching
        self.trainer = dy.SimpleSGDTrainer(self.pc, learning_rate=LR)
        self.trainer.set_clip_threshold(-1.0)
        self.trainer.set_sparse_updates(False)

    def loss(self):
        """A new graph with the minibatch's loss: the sum of the examples'."""
        dy.renew_cg(autobatching=self.autobatching)
        return dy.esum(self.model.losses(self.data))

    def run(self):
        """The forward: the minibatch loss as a 0-dim tensor."""
        return torch.tensor(self.loss().value())

    def step(self):
        """Forward, backward, update; the loss (a float)."""
        loss = self.loss()
        value = loss.value()
        loss.backward()
        self.trainer.update()
        return value


# ------------------------------------------------------------------ layers
def _np(t):
    return t.detach().cpu().float().numpy()


def lookup(pc, embedding):
    """LookupParameters holding an ``nn.Embedding``'s table."""
    return pc.lookup_parameters_from_numpy(_np(embedding.weight))


def parameter(pc, tensor):
    return pc.parameters_from_numpy(_np(tensor))


class Linear:
    """An ``nn.Linear``: ``affine_transform([b, W, x])`` on a column vector."""

    def __init__(self, pc, linear):
        self.W, self.b = parameter(pc, linear.weight), parameter(pc, linear.bias)

    def __call__(self, x):
        return dy.affine_transform([self.b, self.W, x])


def lstm(pc, cell):
    """A one-layer ``VanillaLSTMBuilder`` computing an ``nn.LSTMCell``: no
    forget-gate bias of its own (DyNet's default adds 1), torch's gate rows
    (i, f, g, o) reordered to DyNet's (i, f, o, g), torch's two biases summed
    into DyNet's one (so an SGD step moves it half as far as torch moves
    their sum: the losses drift apart by about a percent of a step's
    change)."""
    builder = dy.VanillaLSTMBuilder(1, cell.input_size, cell.hidden_size, pc, forget_bias=0.0)
    i, f, g, o = torch.arange(4 * cell.hidden_size).view(4, -1)
    order = torch.cat([i, f, o, g])
    wx, wh, b = builder.get_parameters()[0]
    wx.set_value(_np(cell.weight_ih[order]))
    wh.set_value(_np(cell.weight_hh[order]))
    b.set_value(_np((cell.bias_ih + cell.bias_hh)[order]))
    return builder


class BiLSTM:
    """``examples.bilstm_tagger.BiLSTM``: stacked layers of a forward and a
    backward LSTM, their outputs concatenated per word (a list of vectors)."""

    def __init__(self, pc, bilstm):
        self.layers = [(lstm(pc, f), lstm(pc, b)) for f, b in zip(bilstm.fwd, bilstm.bwd)]

    def __call__(self, xs):
        for fwd, bwd in self.layers:
            ahead = fwd.initial_state().transduce(xs)
            back = bwd.initial_state().transduce(xs[::-1])[::-1]
            xs = [dy.concatenate([a, b]) for a, b in zip(ahead, back)]
        return xs
