"""Porting a hand-padded model to matchbox, side by side.

``PaddedGRUClassifier`` is the usual padded PyTorch text classifier: it
takes a padded batch of token ids plus their lengths, packs the embeddings
with ``pack_padded_sequence`` so the bidirectional GRU skips the padding,
unpacks, builds a mask from the lengths and mean-pools over the real words
only.  ``GRUClassifier`` is the same module with the padding code deleted:
its ``forward`` reads ONE sentence ``(1, n)``; ``nn.GRU`` runs on the
MaskedBatch (matchbox packs it) and ``.mean(1)`` averages over each
sentence's own words.

Both start from the same weights and train on the same synthetic batches;
their losses agree at every step (the final line prints the largest
difference).  docs/porting.md walks through the port.

Run:  python -m examples.porting [--steps 40 --batch-size 32 --seed 0]
"""
import time

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from examples.common import progress, run_main


class TextClassifier(nn.Module):
    """The layers both versions share: embedding, bidirectional GRU, output."""

    def __init__(self, vocab=40, dim=16, hidden=16, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, classes)


class PaddedGRUClassifier(TextClassifier):
    """Before: a padded batch, with the length bookkeeping done by hand."""

    def forward(self, tokens, lengths):              # (B, T) padded ids, (B,) lengths
        h = self.embed(tokens)                        # (B, T, dim)
        packed = pack_padded_sequence(h, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        mask = torch.arange(tokens.size(1), device=tokens.device) < lengths[:, None]
        out = out.masked_fill(~mask[..., None], 0.0)  # (B, T, 2*hidden), padding zeroed
        pooled = out.sum(1) / lengths[:, None].to(out.dtype)
        return self.out(pooled)                       # (B, classes)


class GRUClassifier(TextClassifier):
    """After: written for one sentence; matchbox runs it on a batch."""

    def forward(self, tokens):                        # (1, n) ids of ONE sentence
        out, _ = self.gru(self.embed(tokens))         # (1, n, 2*hidden)
        return self.out(out.mean(1))                  # (1, classes)


def make_data(count=512, vocab=40, classes=4, max_len=20, seed=0):
    """Sentences ``(1, n)`` with labels ``(1,)``.  Each class owns a band of
    the vocabulary; a sentence mixes words of its class's band with random
    ones, so the class shows in the word counts, more clearly in longer
    sentences."""
    g = torch.Generator().manual_seed(seed)
    band = vocab // classes
    data = []
    for _ in range(count):
        label = int(torch.randint(classes, (), generator=g))
        n = int(torch.randint(2, max_len + 1, (), generator=g))
        own = label * band + torch.randint(band, (n,), generator=g)
        other = torch.randint(vocab, (n,), generator=g)
        tokens = torch.where(torch.rand(n, generator=g) < 0.5, own, other)
        data.append((tokens.unsqueeze(0), torch.tensor([label])))
    return data


def batch_padded(examples):
    """The padded inputs: ``(tokens (B, T), lengths (B,), labels (B,))``."""
    tokens = [t[0] for t, _ in examples]
    lengths = torch.tensor([len(t) for t in tokens])
    return pad_sequence(tokens, batch_first=True), lengths, torch.cat([y for _, y in examples])


def batch_masked(examples):
    """The matchbox inputs: MaskedBatches of tokens ``(1, n)`` and labels ``(1,)``."""
    tokens = MaskedBatch.fromlist([t for t, _ in examples], dims=(True,))
    return tokens, MaskedBatch.fromlist([y for _, y in examples], dims=())


def main(steps=40, batch_size=32, lr=0.02, seed=0, every=10):
    torch.manual_seed(seed)
    padded = PaddedGRUClassifier()
    masked = GRUClassifier()
    masked.load_state_dict(padded.state_dict())       # the same initial weights
    opts = [torch.optim.Adam(m.parameters(), lr=lr) for m in (padded, masked)]
    data = make_data(count=steps * batch_size, seed=seed)
    start, worst, first = time.perf_counter(), 0.0, None
    bar = progress(range(steps), "train")
    for step in bar:
        chunk = data[step * batch_size:(step + 1) * batch_size]
        tokens, lengths, labels = batch_padded(chunk)
        loss_p = F.cross_entropy(padded(tokens, lengths), labels)
        mtokens, mlabels = batch_masked(chunk)
        loss_m = matchbox.example_mean(F.cross_entropy(masked(mtokens), mlabels))
        for opt, loss in zip(opts, (loss_p, loss_m)):
            opt.zero_grad()
            loss.backward()
            opt.step()
        lp, lm = loss_p.item(), loss_m.item()
        first = (lp, lm) if first is None else first
        worst = max(worst, abs(lp - lm))
        bar.note(f"loss padded {lp:.4f} matchbox {lm:.4f}")
        if step % every == 0 or step == steps - 1:
            print(f"step {step:3d}: padded loss {lp:.6f}, matchbox loss {lm:.6f}")
    secs = time.perf_counter() - start
    test = make_data(count=256, seed=seed + 1)
    with torch.no_grad():
        tokens, labels = batch_masked(test)
        guess = torch.cat([s.argmax(-1) for s in masked(tokens).examples()])
    acc = (guess == torch.cat(labels.examples())).double().mean().item()
    print(f"final: padded loss {lp:.6f}, matchbox loss {lm:.6f} (start {first[1]:.3f}), "
          f"max |difference| {worst:.1e}, held-out accuracy {100 * acc:.1f}% (chance 25%), "
          f"{batch_size} sentences/batch, {secs:.1f} s")
    return {"padded_loss": lp, "matchbox_loss": lm, "start_loss": first[1],
            "max_difference": worst, "accuracy": acc, "seconds": secs}


if __name__ == "__main__":
    run_main(main, __doc__, steps=40, batch_size=32, lr=0.02, seed=0)
