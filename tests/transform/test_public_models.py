"""Public per-example PyTorch code, as its authors write it, run batched
(SPEC 4b): only the batch construction differs (``MaskedBatch.fromlist``,
``matchbox.objects``) and ``@matchbox.batch`` sits on the entry point.

- the classic Levenshtein DP over two strings (a row list rebuilt per char);
- soft-DTW's DP table ``R[i, j]`` filled in two per-example loops, with a
  module helper ``softmin3`` that takes ``max(max(a, b), c)`` of tensors;
- a pointer network's greedy decode (``.item()``, a mask written at it);
- a greedy decoder with a Python list KV cache, ``.item()`` and ``break``;
  a ``while True`` greedy decode; char-LSTM word vectors from strings;
- the minimal span parser's CKY (Stern et al. 2017): a dict chart keyed by
  ``(left, right)``, ``max(range(...), key=lambda split: chart[...])``,
  tree node objects built from the chart's lists;
- the inside algorithm over span scores, with a chart of Python lists and
  with a Tensor chart read by slices
  (trees and graphs: test_public_structured_models.py)
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

D = torch.float64


# ------------------------------------------------------------------ edit distance
@matchbox.batch
def levenshtein(s1, s2, x):
    if len(s1) < len(s2):
        return levenshtein(s2, s1, x)
    if len(s2) == 0:
        return x * len(s1)
    previous_row = range(len(s2) + 1)
    for i, c1 in enumerate(s1):
        current_row = [i + 1]
        for j, c2 in enumerate(s2):
            insertions = previous_row[j + 1] + 1
            deletions = current_row[j] + 1
            substitutions = previous_row[j] + (c1 != c2)
            current_row.append(min(insertions, deletions, substitutions))
        previous_row = current_row
    return x * previous_row[-1]


def test_levenshtein_on_string_pairs():
    a = ["kitten", "flaw", "", "abc", "intention"]
    b = ["sitting", "lawn", "ab", "abc", "execution"]
    x = MaskedBatch.fromlist([torch.ones(1, dtype=D) for _ in a], ())
    assert [int(v) for v in levenshtein(matchbox.objects(a), matchbox.objects(b), x).examples()] \
        == [3, 2, 2, 0, 5]
    mb_test(levenshtein, matchbox.objects(a), matchbox.objects(b), (5, ()), dtype=D)


# ------------------------------------------------------------------ soft-DTW
def softmin3(a, b, c, gamma):
    a, b, c = -a / gamma, -b / gamma, -c / gamma
    max_val = max(max(a, b), c)
    tmp = torch.exp(a - max_val) + torch.exp(b - max_val) + torch.exp(c - max_val)
    return -gamma * (torch.log(tmp) + max_val)


@matchbox.batch
def soft_dtw(x, y, gamma=1.0):
    D_ = torch.cdist(x, y) ** 2
    n, m = D_.shape
    R = torch.full((n + 1, m + 1), float("inf"), dtype=x.dtype)
    R[0, 0] = 0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            R[i, j] = D_[i - 1, j - 1] + softmin3(R[i - 1, j], R[i - 1, j - 1], R[i, j - 1], gamma)
    return R[n, m]


@pytest.mark.filterwarnings("ignore::matchbox.PerExampleFallbackWarning")   # (torch.cdist)
@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_soft_dtw(lengths):
    """Before: 'bool(x) ... in softmin3: @batch did not rewrite it' (a
    helper whose only per-example read is the builtin max of tensors), then
    'indexing a MaskedBatch with more than one Tensor/MaskedBatch index is
    not supported' at R[i, j] with a per-example int at each."""
    mb_test(soft_dtw, (4, (True, 4), (False, 2)), (4, (True, 3), (False, 2)), batch_dim=None,
            dtype=D, lengths=lengths)


# ------------------------------------------------------------------ pointer network
class PtrNet(nn.Module):
    def __init__(self, d=2, h=5):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.LSTM(d, h)
        self.dec = nn.LSTMCell(d, h)
        self.W1 = nn.Linear(h, h, bias=False)
        self.W2 = nn.Linear(h, h, bias=False)
        self.v = nn.Linear(h, 1, bias=False)
        self.first = nn.Parameter(torch.randn(d))

    @matchbox.batch
    def forward(self, inputs):          # inputs: (n, 1, d), sequence first
        n = inputs.size(0)
        enc_out, (h, c) = self.enc(inputs)
        enc_out = enc_out.squeeze(1)
        hx, cx = h[0], c[0]
        dec_in = self.first.unsqueeze(0)
        mask = torch.zeros(n, dtype=torch.bool)
        pointers, logp = [], 0
        for step in range(n):
            hx, cx = self.dec(dec_in, (hx, cx))
            u = self.v(torch.tanh(self.W1(enc_out) + self.W2(hx))).squeeze(-1)
            u = u.masked_fill(mask, float("-inf"))
            log_probs = F.log_softmax(u, dim=0)
            idx = log_probs.argmax().item()
            logp = logp + log_probs[idx]
            pointers.append(idx)
            mask = mask.clone()
            mask[idx] = True
            dec_in = inputs[idx]
        return logp, pointers


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_pointer_network_greedy_decode(lengths):
    mb_test(PtrNet().double(), (4, (True, 5), (False, 1), (False, 2)), batch_dim=None,
            lengths=lengths)


# ------------------------------------------------------------------ KV cache decoder
class CachedDecoder(nn.Module):
    def __init__(self, V=7, d=6):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, V)
        self.d = d

    @matchbox.batch
    def forward(self, memory, bos=0, eos=3, max_len=6):   # memory: (m, d)
        k_cache, v_cache = [], []
        for t in range(memory.size(0)):
            k_cache.append(self.k(memory[t]))
            v_cache.append(self.v(memory[t]))
        tok = bos
        out, scores = [], []
        for step in range(max_len):
            x = self.emb(torch.tensor([tok]))[0]
            k_cache.append(self.k(x))
            v_cache.append(self.v(x))
            K, V = torch.stack(k_cache), torch.stack(v_cache)
            att = torch.softmax(K @ self.q(x) / math.sqrt(self.d), dim=0)
            logits = self.out(att @ V + x)
            tok = logits.argmax().item()
            scores.append(logits.log_softmax(-1)[tok])
            if tok == eos:
                break
            out.append(tok)
        return out, torch.stack(scores).sum()


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_decoder_with_list_kv_cache(lengths):
    mb_test(CachedDecoder().double(), (5, (True, 4), (False, 6)), batch_dim=None,
            lengths=lengths)


# ------------------------------------------------------------------ char-level words, while True
class CharWordTagger(nn.Module):
    def __init__(self, d=3, h=4):
        super().__init__()
        torch.manual_seed(0)
        self.cemb = nn.Embedding(128, d)
        self.clstm, self.wlstm = nn.LSTM(d, h), nn.LSTM(h, h)
        self.out = nn.Linear(h, 2)

    @matchbox.batch
    def forward(self, sentence):
        word_vecs = []
        for word in sentence.split():
            chars = torch.tensor([ord(c) for c in word])
            _, (h, _) = self.clstm(self.cemb(chars).unsqueeze(1))
            word_vecs.append(h[-1])
        out, _ = self.wlstm(torch.stack(word_vecs))
        return self.out(out[-1]).log_softmax(-1)


def test_char_lstm_word_vectors_from_sentence_strings():
    mb_test(CharWordTagger().double(), matchbox.objects(["hi there you", "ok", "a bb ccc dddd"]))


class GreedyDecoder(nn.Module):
    def __init__(self, V=6, h=4):
        super().__init__()
        torch.manual_seed(2)
        self.emb = nn.Embedding(V, h)
        self.cell = nn.GRUCell(h, h)
        self.out = nn.Linear(h, V)

    @matchbox.batch
    def forward(self, h, max_steps=6, eos=0):
        tok = torch.tensor([1])
        logp, words, steps = 0.0, [], 0
        while True:
            h = self.cell(self.emb(tok), h)
            lp = F.log_softmax(self.out(h), dim=-1)
            tok = lp.argmax(dim=-1)
            logp = logp + lp[0, tok.item()]
            steps += 1
            if tok.item() == eos or steps >= max_steps:
                break
            words.append(tok.item())
        return logp, words, steps


def test_while_true_greedy_decode():
    mb_test(GreedyDecoder().double(), (6, (False, 4)))


# ------------------------------------------------------------------ CKY chart parser
class LeafParseNode:
    def __init__(self, index, tag, word):
        self.left, self.right, self.tag, self.word = index, index + 1, tag, word

    def convert(self):
        return "({} {})".format(self.tag, self.word)


class InternalParseNode:
    def __init__(self, label, children):
        self.label, self.children = label, children
        self.left, self.right = children[0].left, children[-1].right

    def convert(self):
        return "({} {})".format(self.label, " ".join(c.convert() for c in self.children))


LABELS = [(), ("S",), ("NP",), ("VP",)]


class ChartParser(nn.Module):
    def __init__(self, V, d=4, h=3, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(V, d)
        self.lstm = nn.LSTM(d, h, bidirectional=True)
        self.f_label = nn.Sequential(nn.Linear(2 * h, 5), nn.ReLU(), nn.Linear(5, len(LABELS)))
        self.h = h

    @matchbox.batch
    def parse(self, sentence, words):   # sentence: (n + 2,) ids with <s> </s>; words: strs
        embeddings = self.emb(sentence).unsqueeze(1)
        lstm_outputs, _ = self.lstm(embeddings)
        lstm_outputs = lstm_outputs.squeeze(1)

        def get_span_encoding(left, right):
            forward = lstm_outputs[right][:self.h] - lstm_outputs[left][:self.h]
            backward = lstm_outputs[left + 1][self.h:] - lstm_outputs[right + 1][self.h:]
            return torch.cat([forward, backward])

        def get_label_scores(left, right):
            return self.f_label(get_span_encoding(left, right))

        chart = {}
        for length in range(1, len(words) + 1):
            for left in range(0, len(words) + 1 - length):
                right = left + length
                label_scores = get_label_scores(left, right)
                label_scores_np = label_scores.detach().numpy()
                argmax_label_index = int(
                    label_scores_np.argmax() if length < len(words) else
                    label_scores_np[1:].argmax() + 1)
                label = LABELS[argmax_label_index]
                label_score = label_scores[argmax_label_index]
                if length == 1:
                    tree = LeafParseNode(left, "XX", words[left])
                    if label:
                        tree = InternalParseNode(label[0], [tree])
                    chart[left, right] = [tree], label_score
                    continue
                best_split = max(
                    range(left + 1, right),
                    key=lambda split: chart[left, split][1].item() + chart[split, right][1].item())
                left_trees, left_score = chart[left, best_split]
                right_trees, right_score = chart[best_split, right]
                children = left_trees + right_trees
                if label:
                    children = [InternalParseNode(label[0], children)]
                chart[left, right] = (children, label_score + left_score + right_score)
        children, score = chart[0, len(words)]
        return children[0].convert(), score


SENTS = ["the dog barks", "a cat", "dogs chase the big cat", "run", "the cat sat"]
VOCAB = {w: i + 2 for i, w in enumerate(sorted({w for s in SENTS for w in s.split()}))}


@pytest.mark.parametrize("B", [1, 2, 5])
def test_cky_chart_parser(B):
    """Before: KeyError (1, 1) (the key lambda of max(...) saw another
    example's left/right), then '_Gap' object is not iterable (a node class
    built once for the batch with per-example children), then a chart item
    stored while the examples agreed ([tree], score) read back as the
    whole batch's tree in each example's list."""
    parser = ChartParser(len(VOCAB) + 2, seed=3).double()
    sents = SENTS[:B]
    ids = [torch.tensor([0] + [VOCAB[w] for w in s.split()] + [1]) for s in sents]
    words = [s.split() for s in sents]
    alone = [parser.parse(i, w) for i, w in zip(ids, words)]
    trees, _ = parser.parse(MaskedBatch.fromlist(ids, batch_dim=None), matchbox.objects(words))
    assert matchbox.examples(trees) == [t for t, _ in alone]
    mb_test(parser.parse, MaskedBatch.fromlist(ids, batch_dim=None), matchbox.objects(words),
            params=list(parser.parameters()))


# ------------------------------------------------------------------ inside algorithm
@matchbox.batch
def inside(span_scores):      # span_scores: (n, n + 1), the score of span (i, j)
    n = span_scores.size(0)
    beta = [[None] * (n + 1) for _ in range(n + 1)]
    for i in range(n):
        beta[i][i + 1] = span_scores[i, i + 1]
    for w in range(2, n + 1):
        for i in range(0, n - w + 1):
            j = i + w
            splits = torch.stack([beta[i][k] + beta[k][j] for k in range(i + 1, j)])
            beta[i][j] = span_scores[i, j] + torch.logsumexp(splits, 0)
    return beta[0][n]


@matchbox.batch
def inside_chart(span_scores):
    n = span_scores.size(0)
    chart = span_scores.new_full((n + 1, n + 1), -1e9)
    for i in range(n):
        chart[i, i + 1] = span_scores[i, i + 1]
    for w in range(2, n + 1):
        for i in range(0, n - w + 1):
            j = i + w
            chart[i, j] = span_scores[i, j] + torch.logsumexp(
                chart[i, i + 1:j] + chart[i + 1:j, j], 0)
    return chart[0, n]


@pytest.mark.parametrize("f", [inside, inside_chart])
@pytest.mark.parametrize("ns", [(1, 3, 4, 2), (1,), (3, 3)])
def test_inside_algorithm_over_spans(f, ns):
    """A chart of Python lists, and a Tensor chart read by slices with
    per-example bounds.  Before (the Tensor chart): 'add: per-example
    lengths differ' from the slices of an example that had left the loop
    (its value is dropped)."""
    spans = MaskedBatch.fromlist([torch.randn(n, n + 1, dtype=D) for n in ns], (True, True),
                                 batch_dim=None)
    mb_test(f, spans, dtype=D)


# ------------------------------------------------------------------ the pieces, small
class _N:
    def __init__(self, label, children):
        self.label, self.children = label, children


@matchbox.batch
def _chart_lists(words, x):
    chart = {}
    for i in range(len(words)):
        chart[i, i + 1] = [_N("L", [words[i]])], x * i
    left, s = chart[0, 1]
    right, s2 = chart[len(words) - 1, len(words)]
    return " ".join([n.children[0] for n in left + right]), s + s2


def test_dict_item_stored_while_examples_agree_is_each_examples_own():
    """chart[0, 1] is stored at a step every example takes (a plain dict
    then) and the dict becomes one per example later: each example reads
    back its own list of its own node.  Before: each example's list held
    the whole batch's node (a PerExample)."""
    words = [["a", "b"], ["c"], ["d", "e", "f"]]
    out, _ = _chart_lists(matchbox.objects(words), mb_rand_scalars(3))
    assert matchbox.examples(out) == ["a b", "c c", "d f"]
    mb_test(_chart_lists, matchbox.objects(words), (3, ()), dtype=D)


def mb_rand_scalars(B):
    return MaskedBatch.fromlist([torch.randn(1, dtype=D) for _ in range(B)], ())


@matchbox.batch
def _best_of_shared(x):
    scores = {k: x * k - k * k for k in range(4)}   # (per example: x*k - k^2)
    best = max(range(4), key=lambda k: scores[k].item())
    ranked = sorted(["a", "b", "c", "d"], key=lambda s: -scores["abcd".index(s)].item())
    return best, "".join(ranked)


def test_max_and_sorted_with_per_example_keys_over_shared_items():
    """The items are the same for every example, the key's values are each
    example's own.  Before: bool(x) ... needs one value for the whole batch."""
    x = MaskedBatch.fromlist([torch.tensor([v], dtype=D) for v in (0.0, 2.0, 5.9, 3.1)], ())
    best, ranked = _best_of_shared(x)
    assert matchbox.examples(best) == [0, 1, 3, 2]
    assert matchbox.examples(ranked)[1] == "bacd"
    mb_test(_best_of_shared, (4, ()), dtype=D, grad=False)
