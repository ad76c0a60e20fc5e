"""Transformer training step (examples/transformer.py): teacher-forced
forward + backward + SGD step on a batch of (source, target) pairs.

Sources have 3..60 tokens (gamma around 20, spread 8, like sentence
lengths); each target is its source's length plus or minus up to 4 tokens
(at least 2), random symbols from a 1000-word vocabulary, ending in
``<eos>``.  The loss of a pair is the sum of its target tokens' cross
entropies; every variant returns the sum over the batch.  Variants:

- ``per_example``: the example-level model on each pair alone;
- ``matchbox``: the same model on MaskedBatches;
- ``hand``: what an expert writes for the same module (same parameters, so
  gradients compare by name): padded ``(B, S)`` / ``(B, T)`` token ids,
  attention with the module's own Linear / LayerNorm / Embedding
  submodules and ``F.scaled_dot_product_attention`` with a boolean mask
  (key padding, and causal in the decoder's self-attention), and a masked
  sum of token losses (SDPA and masked_fill(-inf) + softmax time the same
  here on one CPU thread; SDPA is what one writes today).  No query row is
  fully masked (every source has a token and every decoder query sees
  ``<bos>``), so padding never makes NaN;
- ``compiled`` / ``matchbox_compiled``: ``torch.compile(dynamic=False)``
  of the hand-written / the matchbox loss (compiled during the runner's
  warm-up steps; ``build(..., compiled=False)`` leaves them out).  The
  matchbox loss compiles to one graph: its checks run on the device.  It
  is compiled with dynamo's ``capture_dynamic_output_shape_ops``, so on
  CPU the row-wise rules gather the real rows inside the graph as they do
  eagerly (``nonzero`` has a data-dependent shape); on GPU the setting
  changes nothing (rows are masked there, with no host sync).

Sizes: ``small`` fits a laptop CPU (d_model 64, 2 encoder + 2 decoder
layers, 4 heads, d_ff 128); ``paper`` is half a base Transformer (Vaswani
et al. 2017 use d_model 512, 6 + 6 layers, 8 heads, d_ff 2048): d_model
256, 3 + 3 layers, 8 heads, d_ff 1024.
"""
import torch
import torch.nn.functional as TF

from bench.data import lengths
from bench.harness import Variant, fresh
from examples.transformer import BOS, EOS, FIRST, Transformer, token_losses
from matchbox import MaskedBatch, example_sum

NAME = "transformer"
TRAINS = True
VOCAB = 1000
POSITIONS = 128   # the positional table: longer than any source, target or decode
SIZES = {"small": dict(d_model=64, heads=4, layers=2, d_ff=128),
         "paper": dict(d_model=256, heads=8, layers=3, d_ff=1024)}


def make_model(size, vocab=VOCAB):
    return Transformer(vocab=vocab, max_len=POSITIONS, **SIZES[size])


def source_lengths(batch_size, seed, max_len=None):
    """Sentence-like source lengths, 3..60; ``max_len`` (tests) scales them
    down to 1..max_len, keeping the spread."""
    ns = lengths(batch_size, mean=20, spread=8, low=3, high=60, seed=seed)
    if max_len is None:
        return ns
    return [max(1, round(n * max_len / 60)) for n in ns]


def pad(seqs):
    """(1, n) token tensors -> padded (B, N) ids (padding 0, a valid id) and
    ``real`` (B, N), True on real tokens."""
    ns = torch.tensor([s.size(1) for s in seqs], device=seqs[0].device)
    ids = torch.nn.utils.rnn.pad_sequence([s[0] for s in seqs], batch_first=True)
    return ids, torch.arange(ids.size(1), device=ids.device) < ns[:, None]


# ------------------------------------------------------------------ hand-written padded model
def attend(mha, x, memory, allowed):
    """The module's multi-head attention on padded x (B, n, d) over memory
    (B, m, d); ``allowed`` (B or 1, 1, n or 1, m) is True where a query may
    see a key."""
    B, n, d = x.shape
    split = lambda t: t.view(B, t.size(1), mha.heads, d // mha.heads).transpose(1, 2)
    q, k, v = split(mha.q(x)), split(mha.k(memory)), split(mha.v(memory))
    out = TF.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return mha.o(out.transpose(1, 2).reshape(B, n, d))


def embed(model, ids):
    return model.embed(ids) + model.pos(torch.arange(ids.size(1), device=ids.device))


def hand_encode(model, src, src_real):
    """Encoder output (B, S, d) of padded sources; padded rows are junk."""
    keys = src_real[:, None, None, :]
    x = embed(model, src)
    for layer in model.encoder:
        h = layer.norm1(x)
        x = x + attend(layer.attn, h, h, keys)
        x = x + layer.ff(layer.norm2(x))
    return model.enc_norm(x)


def hand_decode(model, prefix, memory, src_real):
    """Logits (B, T, vocab) of padded prefixes (B, T) over the encoder
    output.  Padded prefix positions need no key mask: the causal mask
    already hides every later position from a real query."""
    T = prefix.size(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=prefix.device).tril()[None, None]
    keys = src_real[:, None, None, :]
    y = embed(model, prefix)
    for layer in model.decoder:
        h = layer.norms[0](y)
        y = y + attend(layer.self_attn, h, h, causal)
        y = y + attend(layer.cross_attn, layer.norms[1](y), memory, keys)
        y = y + layer.ff(layer.norms[2](y))
    return model.out(model.dec_norm(y))


def hand_loss(model, src, src_real, tgt_in, tgt_out, tgt_real):
    """Sum over the batch of each pair's summed token cross entropies."""
    logits = hand_decode(model, tgt_in, hand_encode(model, src, src_real), src_real)
    loss = TF.cross_entropy(logits.transpose(1, 2), tgt_out, reduction="none")
    return loss.masked_fill(~tgt_real, 0).sum()


# ------------------------------------------------------------------ the task
def make_pairs(batch_size, device, seed, max_len=None):
    """(source (1, n), decoder input (1, t), target (1, t)) triples."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in source_lengths(batch_size, seed, max_len):
        t = max(2, n + int(torch.randint(-4, 5, (), generator=g)))
        src = torch.randint(FIRST, VOCAB, (1, n), generator=g)
        tgt = torch.cat([torch.randint(FIRST, VOCAB, (1, t - 1), generator=g),
                         torch.tensor([[EOS]])], 1)
        tgt_in = torch.cat([torch.tensor([[BOS]]), tgt[:, :-1]], 1)
        out.append(tuple(x.to(device) for x in (src, tgt_in, tgt)))
    return out


def matchbox_loss(model, src, tgt_in, tgt_out):
    """The example-level loss, run by matchbox on MaskedBatch inputs: each
    pair's summed token cross entropy, summed over the pairs."""
    return example_sum(TF.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, reduction="sum"))


def build(batch_size=64, device="cpu", size="small", seed=0, max_len=None, compiled=True):
    """The variants; ``max_len`` scales the source lengths down to at most
    that and ``compiled=False`` skips torch.compile (both for quick tests)."""
    torch.manual_seed(seed)
    model = make_model(size).to(device)
    pairs = make_pairs(batch_size, device, seed, max_len)

    per = fresh(model)
    def per_example():
        return sum(token_losses(per, *p).sum() for p in pairs)

    mb = fresh(model)
    src, tgt_in, tgt_out = (MaskedBatch.fromlist(list(xs), dims=(True,)) for xs in zip(*pairs))
    def matchbox():
        return matchbox_loss(mb, src, tgt_in, tgt_out)

    (p_src, src_real), (p_in, tgt_real), (p_out, _) = (pad(list(xs)) for xs in zip(*pairs))
    hand = fresh(model)
    def hand_written():
        return hand_loss(hand, p_src, src_real, p_in, p_out, tgt_real)

    variants = {"per_example": Variant(per_example, per), "hand": Variant(hand_written, hand),
                "matchbox": Variant(matchbox, mb)}
    if compiled:
        comp = fresh(model)
        loss_fn = torch.compile(hand_loss, dynamic=False)
        variants["compiled"] = Variant(
            lambda: loss_fn(comp, p_src, src_real, p_in, p_out, tgt_real), comp,
            note="torch.compile(hand_loss, dynamic=False)")
        mb_comp = fresh(model)
        mb_loss = torch.compile(matchbox_loss, dynamic=False)
        def matchbox_compiled():
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                return mb_loss(mb_comp, src, tgt_in, tgt_out)
        variants["matchbox_compiled"] = Variant(
            matchbox_compiled, mb_comp,
            note="torch.compile(matchbox_loss, dynamic=False), capturing data-dependent "
                 "shapes: one graph, no breaks")
    return variants
