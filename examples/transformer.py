"""Transformer encoder-decoder learning to reverse token sequences.

What it shows: a full Transformer (encoder and decoder stacks, multi-head
self- and cross-attention, learned positional embeddings, feed-forward
blocks, layer norm) written for ONE (source, target) pair, trained with
teacher forcing on batches whose sources and targets all have different
lengths, then decoded greedily with a loop that stops for each example when
it emits ``<eos>``.  The model contains no padding, mask or batch logic.

matchbox features exercised:

- ``x.split_dim(2, d // heads)`` (a dim of size ``d`` becomes ``(heads, d //
  heads)``) / ``x.join_dims(2, 3)`` to make and merge heads;
- ``F.scaled_dot_product_attention`` (``is_causal=True`` in the decoder's
  self-attention): one call for the whole batch, each example attending to
  its own keys only.  Written out, ``F.softmax(q @ k.transpose(2, 3) /
  math.sqrt(d), dim=3)`` with ``scores.causal_mask(3, 2)`` gives the same
  numbers (matmul contracts real keys only, softmax normalises over them);
  the fused call is faster;
- ``nn.Embedding``, ``nn.Linear``, ``nn.LayerNorm`` and ``F.cross_entropy``
  (mean over the real target tokens of the batch) on MaskedBatch;
- ``@matchbox.batch`` greedy decoding: ``while tok != EOS and steps <
  max_len`` runs a different number of steps per example, ``out.append(tok)``
  records which examples were still decoding, and ``F.stack(out, 1)`` gives
  each example its own output length; ``F.cat`` grows each example's prefix;
  ``logits[:, -1]`` takes each example's own last position.  Each step
  re-runs the decoder on the whole prefix (simple; no key/value cache).

Run: ``python -m examples.transformer [--steps N] [--batch-size B] [--seed S]
[--device cuda] [--threads T]`` (about 15-20 s on 2 CPU cores with the defaults).
"""
import time

import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from examples.common import run_main, train_loop

BOS, EOS = 0, 1   # special tokens; ordinary symbols are 2 .. vocab - 1
FIRST = 2


# ------------------------------------------------------------------ the model (one example)
class MultiHeadAttention(nn.Module):
    """Attention of queries ``x`` (1, n, d) over ``memory`` (1, m, d)."""

    def __init__(self, d_model, heads):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def split_heads(self, x):                         # (1, n, d) -> (1, heads, n, d / heads)
        return x.split_dim(2, self.head_dim).transpose(1, 2)

    def forward(self, x, memory, causal=False):
        q = self.split_heads(self.q(x))
        k, v = self.split_heads(self.k(memory)), self.split_heads(self.v(memory))
        # causal: query i sees keys 0..i only
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)   # (1, heads, n, d / heads)
        return self.o(out.transpose(1, 2).join_dims(2, 3))               # (1, n, d)


class FeedForward(nn.Sequential):
    def __init__(self, d_model, d_ff):
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class EncoderLayer(nn.Module):
    """Pre-norm: ``x + attn(norm(x))``, then ``x + ff(norm(x))``."""

    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn, self.ff = MultiHeadAttention(d_model, heads), FeedForward(d_model, d_ff)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h)
        return x + self.ff(self.norm2(x))


class DecoderLayer(nn.Module):
    """Pre-norm: masked self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.self_attn = MultiHeadAttention(d_model, heads)
        self.cross_attn = MultiHeadAttention(d_model, heads)
        self.ff = FeedForward(d_model, d_ff)

    def forward(self, y, memory):
        h = self.norms[0](y)
        y = y + self.self_attn(h, h, causal=True)
        y = y + self.cross_attn(self.norms[1](y), memory)
        return y + self.ff(self.norms[2](y))


class Transformer(nn.Module):
    """Encoder-decoder over token ids: source (1, n), target prefix (1, t)."""

    def __init__(self, vocab=12, d_model=64, heads=4, layers=2, d_ff=128, max_len=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, heads, d_ff) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, heads, d_ff) for _ in range(layers))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab)

    def embed_tokens(self, tokens):                   # (1, n) -> (1, n, d)
        positions = torch.arange(tokens.maxsize(1), device=tokens.device)
        return self.embed(tokens) + self.pos(positions)

    def encode(self, src):                            # (1, n) -> (1, n, d)
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x)
        return self.enc_norm(x)

    def decode(self, prefix, memory):                 # (1, t), (1, n, d) -> (1, t, vocab)
        y = self.embed_tokens(prefix)
        for layer in self.decoder:
            y = layer(y, memory)
        return self.out(self.dec_norm(y))

    def forward(self, src, tgt_in):
        """Teacher forcing: logits (1, t, vocab) for every target position."""
        return self.decode(tgt_in, self.encode(src))


def token_losses(model, src, tgt_in, tgt_out):
    """Per-token cross entropy (1, t) of the teacher-forced target."""
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.transpose(1, 2), tgt_out, reduction="none")


@matchbox.batch
def greedy_decode(model, src, max_len=16):
    """Tokens (1, k) up to and including the first ``<eos>`` (at most
    ``max_len``), choosing the most likely next token at each step."""
    memory = model.encode(src)
    prefix = src.batch_zeros(1, dtype=torch.long) + BOS   # (1, 1): the start token
    tok = prefix[:, -1]                               # (1,): the last token so far
    out = []
    steps = 0
    while tok != EOS and steps < max_len:
        logits = model.decode(prefix, memory)         # (1, t, vocab)
        tok = logits[:, -1].argmax(-1)                # (1,): the next token
        out.append(tok)
        prefix = F.cat([prefix, tok.unsqueeze(1)], 1)
        steps += 1
    return F.stack(out, 1)


# ------------------------------------------------------------------ data
def make_data(count, vocab=12, min_len=3, max_len=10, seed=0):
    """``count`` (source, target) pairs: a source of ``min_len..max_len``
    random symbols (1, n) and its reverse followed by ``<eos>`` (1, n + 1)."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(count):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        src = torch.randint(FIRST, vocab, (1, n), generator=g)
        tgt = torch.cat([src.flip(1), torch.tensor([[EOS]])], 1)
        pairs.append((src, tgt))
    return pairs


def make_batch(pairs, device=None):
    """MaskedBatches (source, decoder input ``<bos> + target[:-1]``, target)."""
    bos = torch.tensor([[BOS]])
    src = MaskedBatch.fromlist([s for s, _ in pairs], (True,))
    tgt_in = MaskedBatch.fromlist([torch.cat([bos, t[:, :-1]], 1) for _, t in pairs], (True,))
    tgt_out = MaskedBatch.fromlist([t for _, t in pairs], (True,))
    return src.to(device), tgt_in.to(device), tgt_out.to(device)


def accuracy(decoded, pairs):
    """(sequence accuracy, token accuracy): exact matches, and target
    tokens matched at their position (a decode of the wrong length loses
    the positions it lacks)."""
    seq_ok = tok_ok = tok_all = 0
    for d, (_, t) in zip(decoded, pairs):
        d, t = d.reshape(-1), t.reshape(-1)
        n = min(len(d), len(t))
        seq_ok += int(len(d) == len(t) and bool((d == t).all()))
        tok_ok += int((d[:n] == t[:n]).sum())
        tok_all += len(t)
    return seq_ok / len(pairs), tok_ok / tok_all


# ------------------------------------------------------------------ train and decode
def main(steps=150, batch_size=64, d_model=64, heads=4, layers=2, vocab=12, min_len=3,
         max_len=10, lr=3e-3, test_size=200, seed=0, device=None):
    """Train on fresh random pairs each step, then greedy-decode ``test_size``
    held-out sources in one batch; print and return the metrics."""
    torch.manual_seed(seed)
    start = time.perf_counter()
    model = Transformer(vocab, d_model, heads, layers, 2 * d_model, 2 * max_len + 4).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
    train = make_data(steps * batch_size, vocab, min_len, max_len, seed=seed + 1)

    def loss_of(step):
        src, tgt_in, tgt_out = make_batch(train[step * batch_size:(step + 1) * batch_size], device)
        # the mean over every real target token of the batch
        return matchbox.token_mean(token_losses(model, src, tgt_in, tgt_out))
    losses, _ = train_loop(opt, range(steps), loss_of, after_step=warmup.step)
    train_secs = time.perf_counter() - start

    test = make_data(test_size, vocab, min_len, max_len, seed=seed + 2)
    model.eval()
    with torch.no_grad():
        src, tgt_in, tgt_out = make_batch(test, device)
        test_loss = matchbox.token_mean(token_losses(model, src, tgt_in, tgt_out)).item()
        decoded = greedy_decode(model, src, max_len + 2).examples()
    seq_acc, tok_acc = accuracy([d.cpu() for d in decoded], test)
    secs = time.perf_counter() - start
    print(f"final: loss {losses[-1]:.3f} (start {losses[0]:.3f}), held-out loss {test_loss:.3f}, "
          f"greedy decodes {100 * seq_acc:.1f}% sequences / {100 * tok_acc:.1f}% tokens right, "
          f"{batch_size} pairs/batch, train {train_secs:.1f} s, decode {secs - train_secs:.1f} s")
    return {"loss": losses[-1], "start_loss": losses[0], "test_loss": test_loss,
            "seq_acc": seq_acc, "tok_acc": tok_acc, "seconds": secs}


if __name__ == "__main__":
    run_main(main, __doc__, steps=150, batch_size=64, seed=0, device=None)
