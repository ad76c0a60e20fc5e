"""Python objects as inputs of a @batch function (issue 29, SPEC 4b):
``matchbox.objects(items)`` beside MaskedBatches; attribute reads, items,
``len``, iteration, method calls and ``in`` per example; tensors stored on
an object are that example's own and read back per example, also from
recursive calls, which merge across examples and depths.  Every batched
run equals the per-example runs, values and gradients."""
import random

import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

D = torch.float64


class Node:
    def __init__(self, word, children=()):
        self.word, self.children = word, list(children)
        self.state = None

    def is_leaf(self):
        return not self.children

    def size(self):
        return 1 + sum(c.size() for c in self.children)


def random_tree(rng, depth=0):
    if depth > 2 or rng.random() < 0.35:
        return Node(rng.randrange(5))
    return Node(rng.randrange(5), [random_tree(rng, depth + 1) for _ in range(rng.randint(1, 3))])


def trees(B, seed):
    rng = random.Random(seed)
    return [random_tree(rng) for _ in range(B)] + [Node(2)]   # a single node too


class NAry(nn.Module):
    """An n-ary tree encoder written over objects: recursion over
    ``tree.children``, each node's state written on it and read back."""

    def __init__(self, dim=4):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(5, dim)
        self.cell = nn.Linear(2 * dim, dim)

    @matchbox.batch
    def encode(self, tree):
        for child in tree.children:
            self.encode(child)
        x = self.embed(torch.tensor([tree.word]))
        if tree.is_leaf():
            tree.state = torch.tanh(x)
        else:
            kids = torch.cat([c.state for c in tree.children], 0)
            tree.state = torch.tanh(self.cell(torch.cat([x, kids.sum(0, keepdim=True)], 1)))
        return tree.state

    @matchbox.batch
    def forward(self, tree):
        root = self.encode(tree)
        nodes = [tree] + tree.children
        total = sum(n.state for n in nodes)
        return root * len(tree.children) + total + tree.size()


@pytest.mark.parametrize("seed", range(3))
def test_object_trees(seed):
    mb_test(NAry().double(), matchbox.objects(trees(4, seed)), dtype=D)


def test_recursion_over_objects_merges_depths():
    """The children's calls of every example run as one call per depth."""
    model = NAry().double()
    batch = trees(6, 1)
    depth = max(_depth(t) for t in batch)
    calls = []
    model.cell.register_forward_hook(lambda *_: calls.append(1))
    model(matchbox.objects(batch))
    assert len(calls) < depth, (len(calls), depth)   # one per depth of inner nodes


def _depth(t):
    return 1 + max((_depth(c) for c in t.children), default=0)


class Sentence:
    def __init__(self, words):
        self.words = words

    def first(self):
        return self.words[0]


VOCAB = {"a": 1.0, "bb": 2.0, "ccc": 3.0}


@matchbox.batch
def word_scores(x, sent):                            # x: (1, 3); sent: Sentence objects
    vocab = VOCAB
    total = x * 0
    for w in sent.words:
        if w in vocab:
            total = total + x * vocab[w]
        else:
            total = total - x * len(w)
    return total + len(sent.words) + (2.0 if sent.first().startswith("a") else 0.0)


def test_objects_with_strings_and_a_shared_dict():
    sents = [Sentence(["a"]), Sentence(["zz", "bb", "a"]), Sentence(["ccc", "q"]),
             Sentence(["abc", "bb", "bb", "x"])]
    mb_test(word_scores, (4, (False, 3)), matchbox.objects(sents), dtype=D)


@matchbox.batch
def numbers_and_objects(x, n, s):                    # n: numbers; s: strings
    return x * n + len(s) + float(s.count("a"))


def test_numbers_objects_are_per_example_scalars():
    n = matchbox.objects([1, 2, 3])
    assert isinstance(n, MaskedBatch) and n.padded_data.tolist() == [1, 2, 3]
    mb_test(numbers_and_objects, (3, (False, 2)), n, matchbox.objects(["a", "banana", ""]),
            dtype=D)


def test_objects_refuses_tensors():
    with pytest.raises(TypeError, match="MaskedBatch.fromlist"):
        matchbox.objects([torch.zeros(1, 2)])


def test_a_store_into_an_object_two_examples_share_raises():
    @matchbox.batch
    def f(x, node):
        node.state = x * 2
        return node.state
    shared = Node(0)
    x = MaskedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 2)], (False,))
    with pytest.raises(ValueError, match="same object"):
        f(x, matchbox.objects([shared, shared]))


W2I = {"aa": 1, "bb": 2, "ccc": 3}
EMB = nn.Embedding(7, 3).double()


@matchbox.batch
def embed_words(sentence):                           # sentence: a list of word strings
    ids = torch.tensor([W2I.get(w, 0) for w in sentence])       # (n,) of each sentence's own
    return EMB(ids).sum(0) + len(W2I)


@matchbox.batch
def embed_words_loop(sentence):
    ids = []
    for w in sentence:
        ids.append(W2I.get(w, 0) + W2I.get(w[0] * 2, 0))
    return EMB(torch.LongTensor(ids)).sum(0)


@pytest.mark.parametrize("f", [embed_words, embed_words_loop], ids=lambda f: f.__name__)
def test_a_global_dicts_get_with_a_per_example_key(f):
    """``w2i.get(w, UNK)`` on a module-level dict, in a comprehension and in
    a loop, with sentences of different lengths: each sentence's own ids
    (before, hash() of a per-example value; and torch.tensor of the
    comprehension's per-example list took every example's list as long as
    the longest, marked held by the longest only)."""
    sents = [["aa", "x"], ["bb"], ["ccc", "aa", "bb", "bb"], ["q", "q", "aa"]]
    mb_test(f, matchbox.objects(sents), params=list(EMB.parameters()), dtype=D)


def prepare_sequence(seq, to_ix):
    """The PyTorch tutorial's helper, undecorated."""
    idxs = [to_ix[w] for w in seq]
    return torch.tensor(idxs, dtype=torch.long)


def lookup_or_zero(seq, to_ix):
    """A helper @batch cannot rewrite (try/except): run for each example."""
    out = []
    for w in seq:
        try:
            out.append(to_ix[w])
        except KeyError:
            out.append(0)
    return torch.tensor(out, dtype=torch.long)


@matchbox.batch
def tutorial_embed(sentence):
    return EMB(prepare_sequence(sentence, W2I)).sum(0) + EMB(lookup_or_zero(sentence, W2I)).sum(0)


def test_a_module_helper_given_per_example_objects():
    """``prepare_sequence(sentence, to_ix)``, a function of the module that
    @batch code calls with a word list per example, runs on each example's
    own list (F19: before, it ran once, as written, on the PerExample)."""
    sents = [["aa", "bb"], ["ccc"], ["ccc", "aa", "bb", "bb"], ["bb", "aa", "aa"]]
    mb_test(tutorial_embed, matchbox.objects(sents), params=list(EMB.parameters()), dtype=D)
