"""Nested batches (ops/lanes.py): a module whose batch dimension is a
per-example dim of its own, ``k`` items that differ from example to
example (a char LSTM over each sentence's rare words, ``(L, k, C)``).
nn.LSTM / GRU / RNN, nn.MultiheadAttention, conv, pooling and norm layers
run every item of every example together and equal the per-example runs,
values and gradients (inputs and parameters), padding poisoned; examples
with no item get results with no item, as torch gives."""
import pytest
import torch
import torch.nn as nn

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

D = torch.float64
MODES = ("mixed", "one", "equal")
IN, HID = 3, 2


def items(B, k, rest, batch_first=False, k_dynamic=True):
    """The spec of B examples holding k items (at most; dynamic or not) of
    ``rest`` (a list of (dynamic, size)) each, the items at dim 0 of each
    example (batch-first) or at dim 1 (sequence-first)."""
    dim = (k_dynamic, k)
    return (B, dim, *rest) if batch_first else (B, rest[0], dim, *rest[1:])


def check(module, *specs, lengths="mixed", fn=None):
    module = module.double()
    fn = fn or (lambda *xs: module(*map(poison, xs)))
    return mb_test(fn, *specs, lengths=lengths, dtype=D, batch_dim=None,
                   params=list(module.parameters()))


def ragged(shapes, dims, seed=0):
    """A batch of examples of the given shapes, with no batch-of-one dim."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=g, dtype=D) for s in shapes]
    return MaskedBatch.fromlist(xs, dims, batch_dim=None)


# ------------------------------------------------------------------ RNN layers
RNNS = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first", (False, True))
@pytest.mark.parametrize("kind", RNNS)
def test_rnn_over_items(kind, batch_first, mode):
    """(L, k, C) per example (or (k, L, C)): output and final states hold
    every item's own; k and L differ between examples."""
    m = RNNS[kind](IN, HID, num_layers=2, bidirectional=True, batch_first=batch_first)
    out = check(m, items(4, 3, [(True, 5), (False, IN)], batch_first), lengths=mode)[0]
    assert out.dims == ((True, True, False))


@pytest.mark.parametrize("kind", RNNS)
def test_rnn_over_a_static_number_of_items(kind):
    m = RNNS[kind](IN, HID, bidirectional=True)
    check(m, items(4, 3, [(True, 5), (False, IN)], k_dynamic=False))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", RNNS)
def test_rnn_over_items_from_given_states(kind, mode):
    """h0 (and c0) per example (L * D, k, H): each item starts from its own."""
    m = RNNS[kind](IN, HID, bidirectional=True, batch_first=True).double()
    state = (3, (False, 2), (True, 3), (False, HID))  # (L * D, k, H), k as the input's

    def f(x, h, c):
        return m(poison(x), (poison(h), poison(c)) if kind == "lstm" else poison(h))
    mb_test(f, items(3, 3, [(True, 4), (False, IN)], True), state, state, lengths=mode, dtype=D,
            batch_dim=None, params=list(m.parameters()))


@pytest.mark.parametrize("kind", RNNS)
def test_rnn_examples_with_no_item(kind):
    """An example with k = 0 gets an output and states with no item, as
    torch gives for one (L, 0, C) input; the others their own."""
    m = RNNS[kind](IN, HID, bidirectional=True).double()
    x = ragged([(4, 2, IN), (3, 0, IN), (5, 3, IN)], (True, True, False))
    out = check(m, x)[0]
    assert [tuple(e.shape) for e in out.examples()] == [(4, 2, 4), (3, 0, 4), (5, 3, 4)]
    check(m, ragged([(4, 0, IN), (2, 0, IN)], (True, True, False)))  # no example has an item


# ------------------------------------------------------------------ attention
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first", (False, True))
def test_mha_over_items(batch_first, mode):
    """Self- and cross-attention of each example's k query sequences, with
    and without averaged weights, and a key_padding_mask per example."""
    m = nn.MultiheadAttention(4, 2, batch_first=batch_first).double().eval()
    q = items(3, 3, [(True, 5), (False, 4)], batch_first)
    kv = items(3, 3, [(True, 6), (False, 4)], batch_first)
    check(m, q, lengths=mode, fn=lambda x: m(poison(x), poison(x), poison(x)))
    check(m, q, kv, lengths=mode, fn=lambda x, y: m(poison(x), poison(y), poison(y),
                                                     average_attn_weights=False))

    def masked(x, y):
        kpm = y.sum(-1) > 1 if batch_first else y.sum(-1).transpose(0, 1) > 1  # (k, S)
        kpm[..., 0] = False  # (every query sees a key)
        return m(poison(x), poison(y), poison(y), key_padding_mask=kpm)
    check(m, q, kv, lengths=mode, fn=masked)


def test_mha_examples_with_no_item():
    m = nn.MultiheadAttention(4, 2).double().eval()
    x = ragged([(4, 2, 4), (3, 0, 4), (5, 3, 4)], (True, True, False))
    check(m, x, fn=lambda x: m(x, x, x))


# ------------------------------------------------------------------ conv, pooling
CONVS = [
    (lambda: nn.Conv1d(IN, 4, 3, padding=1), 1),
    (lambda: nn.Conv1d(IN, 4, 3, padding=1, padding_mode="replicate"), 1),
    (lambda: nn.ConvTranspose1d(IN, 2, 3, stride=2), 1),
    (lambda: nn.MaxPool1d(2, ceil_mode=True), 1),
    (lambda: nn.AvgPool1d(2, ceil_mode=True), 1),
    (lambda: nn.AdaptiveAvgPool1d(2), 1),
    (lambda: nn.Conv2d(IN, 2, 3, padding=1), 2),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make, nsp", CONVS)
def test_conv_and_pool_over_items(make, nsp, mode):
    """(k, C, *spatial) per example; k and the spatial sizes differ."""
    spatial = [(True, 6), (False, 4)][:nsp]
    check(make(), items(4, 3, [(False, IN), *spatial], batch_first=True), lengths=mode)
    check(make(), items(4, 3, [(False, IN), *spatial], batch_first=True, k_dynamic=False),
          lengths=mode)


def test_conv_over_unbatched_examples():
    """(C, L) per example, no batch-of-one dim: the unbatched form."""
    conv = nn.Conv1d(IN, 4, 3, padding=1)
    out = check(conv, (3, (False, IN), (True, 6)))
    assert out.batch_dim is None and out.dims == (False, True)


def test_conv_examples_with_no_item():
    conv = nn.Conv1d(IN, 4, 3, padding=1)
    check(conv, ragged([(2, IN, 4), (0, IN, 5), (3, IN, 2)], (True, False, True)))


# ------------------------------------------------------------------ norm layers
NORMS = [lambda: nn.BatchNorm1d(IN).eval(), lambda: nn.InstanceNorm1d(IN, affine=True),
         lambda: nn.GroupNorm(1, IN)]  # (nn.LayerNorm is row-wise: items are rows already)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make", NORMS)
def test_norm_over_items(make, mode):
    check(make(), items(4, 3, [(False, IN), (False, 5)], batch_first=True), lengths=mode)
    check(make(), items(4, 3, [(False, IN), (True, 5)], batch_first=True), lengths="equal")


def test_batch_norm_training_normalizes_over_every_item():
    """SPEC section 3: in training, batch norm's statistics are over the
    real entries of the whole batch, here every item of every example."""
    bn = nn.BatchNorm1d(IN).double()
    ref = nn.BatchNorm1d(IN).double()
    x = ragged([(2, IN, 4), (1, IN, 4), (3, IN, 4)], (True, False, False))
    out = bn(poison(x))
    every = torch.cat(x.examples(), 0)  # (6, C, 4): all items
    torch.testing.assert_close(torch.cat(out.examples(), 0), ref(every))
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)


# ------------------------------------------------------------------ under @batch
def test_items_in_dormant_lanes():
    """A call under a per-example `if`: the examples that do not take it
    run no item and get no gradient."""
    lstm = nn.LSTM(IN, HID).double()

    @matchbox.batch
    def f(x):
        h = x.sum() * 0.0
        if x.sum() > 0:
            h = lstm(x)[1][0].sum()
        return h
    for seed in range(3):
        mb_test(f, items(4, 3, [(True, 4), (False, IN)]), dtype=D, batch_dim=None, seed=seed,
                params=list(lstm.parameters()))


# ------------------------------------------------------------------ the DyNet char tagger
BLANK, FREQUENT = 0, 6


class DynetCharTagger(nn.Module):
    """The "BiLSTM w/ char" tagger as the DyNet benchmark's PyTorch version
    writes it, for ONE sentence: word ids (n,) (``>= FREQUENT``: a rare
    word) and their letters (n, c), blank-padded.  The rare words' letters
    are gathered into (c, k) and spelled by char nn.LSTMs; the spellings
    are added into the word embeddings, which a word BiLSTM tags.

    ``own_ends``: as the benchmark, a forward and a backward char LSTM,
    each read at the word's own last letter (the backward one runs over
    the word reversed); else one bidirectional char LSTM whose final
    states (after the blanks too) spell the word."""

    def __init__(self, own_ends, letters=8, embed=4, hidden=3, tags=5):
        super().__init__()
        self.own_ends = own_ends
        self.words = nn.Embedding(FREQUENT + 1, embed, padding_idx=FREQUENT)
        self.chars = nn.Embedding(letters, embed)
        self.char_fwd, self.char_bwd = nn.LSTM(embed, embed // 2), nn.LSTM(embed, embed // 2)
        self.char_bi = nn.LSTM(embed, embed // 2, bidirectional=True)
        self.lstm = nn.LSTM(embed, hidden, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def spell(self, ids):
        """Letter ids (k, c) -> (k, E)."""
        if not self.own_ends:
            _, (h, _) = self.char_bi(self.chars(ids.t()))       # h: (2, k, E / 2)
            return torch.cat([h[0], h[1]], 1)
        lens = (ids != BLANK).sum(1)                            # (k,) letters per word
        step = torch.ones_like(ids).cumsum(1) - 1               # (k, c): 0, 1, ...
        rev = ids.gather(1, (lens.view(-1, 1) - 1 - step).clamp(min=0))  # each word reversed
        last = (step == (lens.view(-1, 1) - 1)).t().unsqueeze(2)  # (c, k, 1): own last letter
        fwd, _ = self.char_fwd(self.chars(ids.t()))             # (c, k, E / 2)
        bwd, _ = self.char_bwd(self.chars(rev.t()))
        return torch.cat([(fwd * last).sum(0), (bwd * last).sum(0)], 1)

    def forward(self, words, letters):
        embeddings = self.words(words.clamp(max=FREQUENT))     # (n, E)
        rare = (words >= FREQUENT).nonzero().squeeze(1)         # (k,) the rare words
        spelled = self.spell(letters.index_select(0, rare))
        embeddings = embeddings.index_add(0, rare, spelled)
        return self.out(self.lstm(embeddings.unsqueeze(1))[0].squeeze(1))


def sentence(n, rare, g):
    """Word ids (n,) and blank-padded letters (n, c) of a sentence whose
    words ``rare`` (indices) are rare."""
    ids = torch.randint(0, FREQUENT, (n,), generator=g)
    ids[rare] = FREQUENT + 1
    spellings = [torch.randint(1, 8, (int(torch.randint(1, 5, (), generator=g)),), generator=g)
                 for _ in range(n)]
    c = max(len(s) for s in spellings)
    return ids, torch.stack([torch.cat([s, s.new_zeros(c - len(s))]) for s in spellings])


@pytest.mark.parametrize("own_ends, rares", [
    (True, [[1], [0, 2], [1, 2, 3]]), (True, [[0]] * 3), (False, [[1], [0, 2], [1, 2, 3]]),
    (False, [[], [0, 1], [2]])])
def test_dynet_char_tagger(own_ends, rares):
    """Sentences with different numbers of rare words (none, for the final
    states) and different word lengths; values and gradients equal per
    sentence."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = DynetCharTagger(own_ends).double()
    sents = [sentence(n, rare, g) for n, rare in zip((3, 5, 4), rares)]
    words = MaskedBatch.fromlist([w for w, _ in sents], (True,), batch_dim=None)
    letters = MaskedBatch.fromlist([c for _, c in sents], (True, True), batch_dim=None)
    out = mb_test(model, words, letters, dtype=D)
    assert [e.shape[0] for e in out.examples()] == [3, 5, 4]
