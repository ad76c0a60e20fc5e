"""Greedy decoding with a per-example stop (examples/transformer.py's
``greedy_decode``): each example decodes until it emits ``<eos>`` or reaches
``MAX_DECODE`` tokens.  Forward only; every variant returns the list of
per-example token tensors (1-D, ``<eos>`` included).

The model is the ``transformer`` task's (same sizes and 1000-word
vocabulary), untrained, so the decode lengths are made to differ by hand:
the weight matrices are scaled up (as tests/examples/test_transformer.py
does) so the decodes depend on the source (unscaled, most sources decode
to one of a few sequences), and the ``<eos>`` output bias is set so that
the batch's decodes stop after ``MEAN_DECODE`` tokens on average (some at
once, some at the limit) -- see ``calibrate_eos``.
Sources are the transformer task's (3..60 tokens, gamma around 20).

Variants:

- ``per_example``: ``greedy_decode`` on each source alone;
- ``matchbox``: ``greedy_decode`` on the MaskedBatch of sources, split with
  ``.examples()``;
- ``matchbox_compact``: the same with ``@batch(compact=0.5)``: once half
  the examples have stopped, each step runs on the ones still decoding;
- ``hand``: an expert's padded greedy decoder (bench.tasks.transformer's
  ``hand_encode`` / ``hand_decode`` on the same module): one batch loop with
  a ``done`` mask that stops when every example is done, re-running the
  decoder on the whole prefix each step as the example does (no key/value
  cache, and logits for every prefix position, for a fair comparison).
  Finished examples keep being computed (no compaction).
"""
import torch

from bench.harness import Variant, fresh
from bench.tasks.transformer import hand_decode, hand_encode, make_model, make_pairs, pad
from examples.transformer import BOS, EOS, greedy_decode
from matchbox import MaskedBatch
from matchbox import batch as matchbox_batch

NAME = "decode"
TRAINS = False
MAX_DECODE = 60
MEAN_DECODE = 20
SCALE = 3.0


def hand_greedy(model, src, src_real, max_len, avoid_eos=False):
    """Padded greedy decoding: tokens (B, k) and each example's length
    (its first ``<eos>`` included, at most ``max_len``).  ``avoid_eos``
    never picks ``<eos>`` and also returns each step's margin of the best
    other token over ``<eos>`` (B, max_len), for ``calibrate_eos``."""
    memory = hand_encode(model, src, src_real)
    B = src.size(0)
    prefix = torch.full((B, 1), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    lengths = torch.zeros(B, dtype=torch.long, device=src.device)
    margins = []
    for _ in range(max_len):
        if bool(done.all()):
            break
        logits = hand_decode(model, prefix, memory, src_real)[:, -1]
        if avoid_eos:
            eos = logits[:, EOS]
            logits = logits.index_fill(1, torch.tensor([EOS], device=src.device), float("-inf"))
            margins.append(logits.max(1).values - eos)
        tok = logits.argmax(1)
        lengths += ~done
        done = done | (tok == EOS)
        prefix = torch.cat([prefix, tok[:, None]], 1)
    return prefix[:, 1:], lengths, (torch.stack(margins, 1) if avoid_eos else None)


def calibrate_eos(model, src, src_real, max_len, mean):
    """Raise the ``<eos>`` output bias so that greedy decodes of this batch
    stop after about ``mean`` tokens.  The bias moves only the ``<eos>``
    logit, so a decode with bias c follows the ``<eos>``-free greedy path
    until the first step whose margin (best other logit - ``<eos>`` logit)
    is below c; c is put halfway between two observed margins, far from
    any tie."""
    with torch.no_grad():
        _, _, margins = hand_greedy(model, src, src_real, max_len, avoid_eos=True)
        values = margins.flatten().sort().values

        def mean_length(c):
            below = margins < c
            first = torch.where(below.any(1), below.float().argmax(1) + 1, max_len)
            return first.float().mean()

        lo, hi = 0, values.numel() - 2   # c between values[k] and values[k + 1]
        while lo < hi:
            k = (lo + hi) // 2
            if mean_length((values[k] + values[k + 1]) / 2) > mean:
                lo = k + 1
            else:
                hi = k
        model.out.bias[EOS] += (values[lo] + values[lo + 1]) / 2


def build(batch_size=64, device="cpu", size="small", seed=0, max_len=None):
    """The variants; ``max_len`` (tests) caps source and decode lengths."""
    torch.manual_seed(seed)
    limit = MAX_DECODE if max_len is None else max_len
    model = make_model(size).to(device).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(SCALE)
    sources = [src for src, _, _ in make_pairs(batch_size, device, seed, max_len)]
    p_src, src_real = pad(sources)
    calibrate_eos(model, p_src, src_real, limit, min(MEAN_DECODE, limit / 2))

    per, mb, hand = fresh(model), fresh(model), fresh(model)
    def per_example():
        return [greedy_decode(per, s, limit).reshape(-1) for s in sources]

    batch = MaskedBatch.fromlist(sources, dims=(True,))
    def matchbox():
        return [t.reshape(-1) for t in greedy_decode(mb, batch, limit).examples()]

    def hand_written():
        tokens, lengths, _ = hand_greedy(hand, p_src, src_real, limit)
        return [t[:n] for t, n in zip(tokens, lengths.tolist())]

    compact = fresh(model)
    compacted = matchbox_batch(greedy_decode.__wrapped__, compact=0.5)
    def matchbox_compact():
        return [t.reshape(-1) for t in compacted(compact, batch, limit).examples()]

    return {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
            "matchbox": Variant(matchbox, mb), "matchbox_compact": Variant(matchbox_compact, compact)}
