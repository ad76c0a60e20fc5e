"""BiLSTM tagger training step (examples/bilstm_tagger.py), the autobatching
paper's task: forward + backward + SGD step on a batch of sentences.

``compiled`` / ``matchbox_compiled`` are ``torch.compile(dynamic=False)``
of the hand-written / the matchbox loss, compiled during the runner's
check (``build(..., compiled=False)`` leaves them out).  The matchbox
loss compiles to one graph: compiled, its step loops run every step
masked and make no host read.

Sizes: ``paper`` is the autobatching paper's (2 layers, 256 hidden, 128-dim
embeddings); ``small`` fits a laptop CPU (1 layer, 64 hidden)."""
import torch
import torch.nn as nn
import torch.nn.functional as TF

import matchbox.functional as F
from bench.data import sentence_lengths
from bench.harness import Variant, fresh
from examples.bilstm_tagger import Grammar, Tagger, run_backward, run_forward
from matchbox import MaskedBatch, batch, example_sum

NAME = "bilstm"
TRAINS = True
SIZES = {"small": dict(embed=32, hidden=64, layers=1), "paper": dict(embed=128, hidden=256, layers=2)}


def _direction(cell, xs, real, reverse):
    """One LSTMCell direction over padded xs (B, T, d), real (B, T): a
    finished (or not yet started) sentence keeps its state."""
    B, T = real.shape
    h = c = xs.new_zeros(B, cell.hidden_size)
    out = [None] * T
    for t in (reversed(range(T)) if reverse else range(T)):
        h2, c2 = cell(xs[:, t], (h, c))
        keep = real[:, t, None]
        h, c = torch.where(keep, h2, h), torch.where(keep, c2, c)
        out[t] = h
    return torch.stack(out, 1)


def hand_loss(model, words, tags, real):
    """What an expert writes for the same Tagger: padded words/tags (B, T),
    real (B, T); the sum of the per-word losses of the real words."""
    xs = model.embed(words)
    for fwd, bwd in zip(model.bilstm.fwd, model.bilstm.bwd):
        xs = torch.cat([_direction(fwd, xs, real, False), _direction(bwd, xs, real, True)], 2)
    scores = model.mlp(xs)
    loss = TF.cross_entropy(scores.transpose(1, 2), tags, reduction="none")
    return loss.masked_fill(~real, 0).sum()


# the tagger's step loops under @batch(compact=1.0): every step runs on the
# sentences that have that word only, the examples sorted by length once
COMPACTED = tuple(batch(f.__wrapped__, compact=1.0) for f in (run_forward, run_backward))


def compacted_loss(model, words, tags):
    """``Tagger.loss(words, tags, reduction="sum")`` with COMPACTED loops
    (one value per sentence)."""
    xs = model.embed(words)
    for fwd, bwd in zip(model.bilstm.fwd, model.bilstm.bwd):
        xs = F.cat([COMPACTED[0](fwd, xs), COMPACTED[1](bwd, xs)], 2)
    return F.cross_entropy(model.mlp(xs).transpose(1, 2), tags, reduction="sum")


class WholeTagger(nn.Module):
    """The same tagger with one bidirectional ``nn.LSTM`` instead of cell
    loops, written for one sentence; matchbox runs nn.LSTM packed."""

    def __init__(self, tagger):
        super().__init__()
        cells = tagger.bilstm
        self.embed, self.mlp = tagger.embed, tagger.mlp
        self.lstm = nn.LSTM(cells.fwd[0].input_size, cells.fwd[0].hidden_size,
                            num_layers=len(cells.fwd), bidirectional=True, batch_first=True)
        with torch.no_grad():
            for layer, (f, b) in enumerate(zip(cells.fwd, cells.bwd)):
                for cell, suffix in ((f, ""), (b, "_reverse")):
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                        getattr(self.lstm, f"{name}_l{layer}{suffix}").copy_(getattr(cell, name))

    def loss(self, words, tags):
        out, _ = self.lstm(self.embed(words))
        return TF.cross_entropy(self.mlp(out).transpose(1, 2), tags, reduction="sum")

    def cell_grads(self):
        """Gradients under the cell tagger's parameter names."""
        grads = {n: p.grad for n, p in self.named_parameters() if p.grad is not None
                 and not n.startswith("lstm.")}
        for layer in range(self.lstm.num_layers):
            for direction, suffix in (("fwd", ""), ("bwd", "_reverse")):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    g = getattr(self.lstm, f"{name}_l{layer}{suffix}").grad
                    if g is not None:
                        grads[f"bilstm.{direction}.{layer}.{name}"] = g
        return grads


def matchbox_loss(model, words, tags):
    return example_sum(model.loss(words, tags, reduction="sum"))


def setup(batch_size, size="small", seed=0):
    """The tagger (seeded initial weights) and ``batch_size`` sentences
    (words, tags), each (1, n), with ``bench.data``'s lengths for ``size``."""
    torch.manual_seed(seed)
    grammar = Grammar(vocab=1000, seed=seed)
    model = Tagger(grammar.vocab, grammar.tags, **SIZES[size])
    g = torch.Generator().manual_seed(seed)
    words = [torch.randint(0, grammar.vocab, (n,), generator=g)
             for n in sentence_lengths(batch_size, size, seed)]
    return model, [(w[None], grammar.tag(w)[None]) for w in words]


def build_dynet(batch_size=64, size="small", seed=0):
    """DyNet's autobatching off and on (``bench/dynet_tasks``), same
    sentences and initial weights."""
    from bench.dynet_tasks import taggers, variants
    model, examples = setup(batch_size, size, seed)
    data = [(w[0].tolist(), t[0].tolist()) for w, t in examples]
    return variants(lambda pc: taggers.Tagger(pc, model), data)


def build(batch_size=64, device="cpu", size="small", seed=0, compiled=True):
    model, examples = setup(batch_size, size, seed)
    model = model.to(device)
    examples = [(w.to(device), t.to(device)) for w, t in examples]

    per = fresh(model)
    def per_example():
        return sum(per.loss(w, t, reduction="sum") for w, t in examples)

    mb = fresh(model)
    mb_words = MaskedBatch.fromlist([w for w, _ in examples], dims=(True,))
    mb_tags = MaskedBatch.fromlist([t for _, t in examples], dims=(True,))
    def matchbox():
        return matchbox_loss(mb, mb_words, mb_tags)

    hand = fresh(model)
    p_words, p_tags = mb_words.to_padded(), mb_tags.to_padded()
    real = mb_words.mask
    def hand_written():
        return hand_loss(hand, p_words, p_tags, real)

    compact = fresh(model)
    def matchbox_compact():
        return example_sum(compacted_loss(compact, mb_words, mb_tags))

    whole = WholeTagger(fresh(model)).to(device)
    def matchbox_whole():
        return example_sum(whole.loss(mb_words, mb_tags))

    variants = {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
                "matchbox": Variant(matchbox, mb),
                "matchbox_compact": Variant(matchbox_compact, compact, note="@batch(compact=1.0)"),
                "matchbox_whole": Variant(matchbox_whole, whole, grads=whole.cell_grads,
                                          note="nn.LSTM(bidirectional) on a MaskedBatch")}
    if compiled:
        comp = fresh(model)
        hand_fn = torch.compile(hand_loss, dynamic=False)
        variants["compiled"] = Variant(lambda: hand_fn(comp, p_words, p_tags, real), comp,
                                       note="torch.compile(hand_loss, dynamic=False)")
        mb_comp = fresh(model)
        mb_fn = torch.compile(matchbox_loss, dynamic=False)
        variants["matchbox_compiled"] = Variant(
            lambda: mb_fn(mb_comp, mb_words, mb_tags), mb_comp,
            note="torch.compile(matchbox_loss, dynamic=False): one graph, every step masked")
    return variants
