"""matchbox quickstart: a model written for ONE example, run on a batch.

The model below never mentions padding, masks or a batch: it reads one
sentence of token ids, shape (1, n), and returns its class scores.
matchbox runs the same code on a batch of sentences of different lengths;
we check that the batch gives each sentence's own result and time both.
"""
import time

import torch
import torch.nn as nn

import matchbox.functional as F
from matchbox import MaskedBatch


class AttentionPooler(nn.Module):
    """Embed, project, attention-pool over the words, classify."""

    def __init__(self, vocab=1000, dim=64, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.score = nn.Linear(dim, 1)
        self.out = nn.Linear(dim, classes)

    def forward(self, tokens):                      # (1, n) token ids
        h = torch.tanh(self.proj(self.embed(tokens)))  # (1, n, dim)
        a = F.softmax(self.score(h), dim=1)          # (1, n, 1): weights over the n words
        pooled = (a * h).sum(1)                      # (1, dim)
        return F.log_softmax(self.out(pooled), -1)   # (1, classes)


def timed(fn, repeat=5):
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main(batch_size=64, max_len=60, seed=0):
    torch.manual_seed(seed)
    model = AttentionPooler()
    lengths = torch.randint(5, max_len + 1, (batch_size,)).tolist()
    sentences = [torch.randint(0, 1000, (1, n)) for n in lengths]
    batch = MaskedBatch.fromlist(sentences, dims=(True,))

    one_by_one = torch.cat([model(s) for s in sentences])
    batched = torch.cat(model(batch).examples())
    worst = (one_by_one - batched).abs().max().item()
    print(f"{batch_size} sentences of {min(lengths)}..{max(lengths)} words")
    print(f"batched == per-example: {torch.allclose(one_by_one, batched, atol=1e-5)} "
          f"(worst difference {worst:.1e})")

    def loop_step():
        model.zero_grad()
        sum(model(s).sum() for s in sentences).backward()

    def batch_step():
        model.zero_grad()
        model(batch).padded_data.sum().backward()

    t_loop, t_batch = timed(loop_step), timed(batch_step)
    print(f"forward+backward: per-example loop {t_loop * 1e3:.1f} ms, "
          f"matchbox batch {t_batch * 1e3:.1f} ms ({t_loop / t_batch:.1f}x faster)")


if __name__ == "__main__":
    main()
