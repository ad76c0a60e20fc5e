"""Public per-example PyTorch code over trees and graphs, as its authors
write it, run batched (SPEC 4b; see test_public_models.py):

- a recursive neural network over binary trees (the public PyTorch port of
  Socher et al.): a helper method recursing on ``node.left`` /
  ``node.right`` and appending to ``self.nodeProbList``;
- a gated graph network over adjacency lists (``self.gru(torch.stack(msgs),
  h)``: the cell's batch is each graph's nodes), an edge-list aggregation;
- a binary Tree-LSTM over node objects, a dynamic memory network's
  episodic passes;
- SST lines parsed into trees inside the model (a nested recursive parser
  function reading the enclosing ``tokens``), then a tree RNN;
- a stack-RNN transition parser on oracle actions, a pointer-generator's
  copy distribution, CTC's alpha recursion over Python lists.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

D = torch.float64


# ------------------------------------------------------------------ recursive NN
class Node:
    def __init__(self, label, word=None, left=None, right=None):
        self.label, self.word, self.left, self.right = label, word, left, right
        self.isLeaf = word is not None


class RecursiveNN(nn.Module):
    def __init__(self, V=6, d=4, C=3):
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(V, d)
        self.W = nn.Linear(2 * d, d)
        self.projection = nn.Linear(d, C)
        self.activation = torch.tanh
        self.nodeProbList, self.labelList = [], []

    def traverse(self, node):
        if node.isLeaf:
            currentNode = self.activation(self.embedding(torch.LongTensor([node.word])))
        else:
            currentNode = self.activation(self.W(torch.cat(
                (self.traverse(node.left), self.traverse(node.right)), 1)))
        self.nodeProbList.append(self.projection(currentNode))
        self.labelList.append(torch.LongTensor([node.label]))
        return currentNode

    @matchbox.batch
    def forward(self, x):
        self.nodeProbList = []
        self.labelList = []
        self.traverse(x)
        self.labelList = torch.cat(self.labelList)
        return torch.cat(self.nodeProbList)

    @matchbox.batch
    def getLoss(self, tree):
        nodes = self.forward(tree)
        predictions = nodes.max(dim=1)[1]
        loss = F.cross_entropy(input=nodes, target=self.labelList)
        return predictions, loss


def _leaf(w, y=0):
    return Node(y, word=w)


TREES = [Node(1, left=_leaf(1), right=_leaf(2)), _leaf(3, 2),
         Node(2, left=Node(0, left=_leaf(0), right=_leaf(4)), right=_leaf(5, 1)),
         Node(0, left=_leaf(2), right=Node(1, left=_leaf(1),
                                           right=Node(2, left=_leaf(3), right=_leaf(4))))]


@pytest.mark.parametrize("B", [2, 3, 4])
def test_recursive_nn_over_binary_trees(B):
    """Before: 'bool(x) ... in traverse: @batch did not rewrite it' (the
    helper method's recursive call ran its code as written).  (B = 1, or
    examples that are all equal: the code computes nothing per example and
    returns plain Tensors, which mb_test and matchbox.examples take for one
    value for every example without a batch dimension; left open.)"""
    model = RecursiveNN().double()
    mb_test(model.getLoss, matchbox.objects(TREES[:B]), params=list(model.parameters()))


# ------------------------------------------------------------------ graphs
class GraphNet(nn.Module):
    """Gated graph network over each graph's adjacency list (a dict)."""

    def __init__(self, d=4, steps=2):
        super().__init__()
        torch.manual_seed(0)
        self.msg = nn.Linear(d, d)
        self.gru = nn.GRUCell(d, d)
        self.out = nn.Linear(d, 1)
        self.steps, self.d = steps, d

    @matchbox.batch
    def forward(self, x, adj):     # x: (n, d) node features; adj: {node: [neighbours]}
        h = x
        for _ in range(self.steps):
            msgs = []
            for v in range(x.size(0)):
                if len(adj[v]) > 0:
                    m = torch.stack([self.msg(h[u]) for u in adj[v]]).sum(0)
                else:
                    m = torch.zeros(self.d, dtype=x.dtype)
                msgs.append(m)
            h = self.gru(torch.stack(msgs), h)
        return self.out(h).sum()


ADJ = [{0: [1], 1: [0, 2], 2: [1]}, {0: []}, {0: [1, 2, 3], 1: [0], 2: [0], 3: [0]},
       {0: [1], 1: [0]}]


@pytest.mark.parametrize("B", [1, 2, 4])
def test_gated_graph_net_over_adjacency_lists(B):
    """Before: 'gru_cell: the input needs each example's batch-of-one
    dimension at 0' (the cell's batch is each graph's nodes)."""
    x = MaskedBatch.fromlist([torch.randn(len(a), 4, dtype=D) for a in ADJ[:B]], (True, False),
                             batch_dim=None)
    mb_test(GraphNet().double(), x, matchbox.objects(ADJ[:B]))


@matchbox.batch
def edge_conv(x, edges, W):
    agg = torch.zeros_like(x)
    for u, v in edges:
        agg[v] = agg[v] + x[u] @ W
    return torch.relu(agg + x)


def test_edge_list_aggregation():
    edges = [[(0, 1), (1, 2), (2, 0)], [], [(0, 1)], [(3, 0), (0, 3), (1, 2)]]
    x = MaskedBatch.fromlist([torch.randn(n, 3, dtype=D) for n in (3, 1, 2, 4)], (True, False),
                             batch_dim=None)
    mb_test(edge_conv, x, matchbox.objects(edges), (3, 3), dtype=D)


# ------------------------------------------------------------------ binary Tree-LSTM, DMN
class BTree:
    def __init__(self, word=None, left=None, right=None):
        self.word, self.left, self.right = word, left, right
        self.state = None


class BinaryTreeLSTM(nn.Module):
    """Tai et al.'s N-ary (binary) Tree-LSTM, recursing on the node object."""

    def __init__(self, V=8, d=3, h=4):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, d)
        self.leaf = nn.Linear(d, 3 * h)
        self.U = nn.Linear(2 * h, 5 * h)
        self.h = h

    def node_forward(self, lh, lc, rh, rc):
        i, o, u, fl, fr = torch.split(self.U(torch.cat([lh, rh], 1)), self.h, 1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * lc + torch.sigmoid(fr) * rc
        return torch.sigmoid(o) * torch.tanh(c), c

    @matchbox.batch
    def forward(self, tree):
        if tree.word is not None:
            i, o, u = torch.split(self.leaf(self.emb(torch.tensor([tree.word]))), self.h, 1)
            c = torch.sigmoid(i) * torch.tanh(u)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:
            lh, lc = self.forward(tree.left)
            rh, rc = self.forward(tree.right)
            h, c = self.node_forward(lh, lc, rh, rc)
        tree.state = (h, c)
        return h, c


def _w(w):
    return BTree(word=w)


BTREES = [BTree(left=_w(1), right=_w(2)), _w(3), BTree(left=BTree(left=_w(0), right=_w(4)),
                                                       right=_w(5)),
          BTree(left=_w(2), right=BTree(left=_w(1), right=BTree(left=_w(3), right=_w(7))))]


def test_binary_tree_lstm():
    mb_test(BinaryTreeLSTM().double(), matchbox.objects(BTREES))


class EpisodicMemory(nn.Module):
    """A dynamic memory network's episodic module: attention gates over the
    facts, a gated GRU over them, several passes."""

    def __init__(self, d=4, passes=2):
        super().__init__()
        torch.manual_seed(0)
        self.z1, self.z2 = nn.Linear(4 * d, d), nn.Linear(d, 1)
        self.gru, self.mem = nn.GRUCell(d, d), nn.GRUCell(d, d)
        self.passes = passes

    @matchbox.batch
    def forward(self, facts, q):   # facts: (n, 1, d), sequence first; q: (1, d)
        m = q
        for p in range(self.passes):
            h = torch.zeros_like(q)
            for t in range(facts.size(0)):
                f = facts[t]
                z = torch.cat([f * q, f * m, torch.abs(f - q), torch.abs(f - m)], 1)
                g = torch.sigmoid(self.z2(torch.tanh(self.z1(z))))
                h = g * self.gru(f, h) + (1 - g) * h
            m = self.mem(h, m)
        return m


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_dynamic_memory_network_episodes(lengths):
    mb_test(EpisodicMemory().double(), (4, (True, 4), (False, 1), (False, 4)),
            (4, (False, 1), (False, 4)), batch_dim=None, lengths=lengths)


# ------------------------------------------------------------------ SST lines parsed in the model
class PTBTree:
    def __init__(self, label, word=None, children=None):
        self.label, self.word, self.children = label, word, children or []


def parse_ptb(s):
    tokens = s.replace("(", " ( ").replace(")", " ) ").split()

    def helper(i):
        assert tokens[i] == "("
        label = int(tokens[i + 1])
        i += 2
        if tokens[i] != "(":
            return PTBTree(label, word=tokens[i]), i + 2
        children = []
        while tokens[i] == "(":
            child, i = helper(i)
            children.append(child)
        return PTBTree(label, children=children), i + 1
    tree, _ = helper(0)
    return tree


SST_VOCAB = {w: i for i, w in enumerate("a good bad movie not very".split())}


class SSTModel(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(len(SST_VOCAB), d)
        self.comp = nn.Linear(2 * d, d)
        self.cls = nn.Linear(d, 3)

    def encode(self, node):
        if node.word is not None:
            return torch.tanh(self.emb(torch.tensor([SST_VOCAB[node.word]])))
        hs = [self.encode(c) for c in node.children]
        h = hs[0]
        for other in hs[1:]:
            h = torch.tanh(self.comp(torch.cat([h, other], 1)))
        return h

    @matchbox.batch
    def forward(self, line):
        tree = parse_ptb(line)
        h = self.encode(tree)
        return F.cross_entropy(self.cls(h), torch.tensor([tree.label]))


SST_LINES = ["(2 (1 not) (2 (2 very) (2 good)))", "(0 bad)", "(1 (2 a) (1 (1 bad) (2 movie)))",
             "(2 (2 a) (2 good) (2 movie))"]


@pytest.mark.parametrize("B", [2, 4])
def test_sst_lines_parsed_by_a_nested_recursive_helper(B):
    """The PTB string is parsed inside the model by a function whose nested
    recursive ``helper(i)`` reads the enclosing ``tokens``.  Before: 'int()
    of a per-example value ... needs one value for all' (the nested function
    ran as written on every example's tokens at once)."""
    mb_test(SSTModel().double(), matchbox.objects(SST_LINES[:B]))


# ------------------------------------------------------------------ stack parser, copy, CTC
class StackParser(nn.Module):
    """A stack-RNN transition parser (after Dyer et al. 2015) scoring each
    example's oracle actions: Python lists as buffer and stacks."""

    def __init__(self, V=10, d=4):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(V, d)
        self.stack_rnn = nn.GRUCell(d, d)
        self.compose = nn.Linear(2 * d, d)
        self.empty = nn.Parameter(torch.randn(1, d))
        self.act = nn.Linear(2 * d, 2)

    @matchbox.batch
    def forward(self, words, actions):
        buffer = [self.emb(w.view(1)) for w in reversed(words)]
        stack_states = [self.empty]
        stack_items = []
        loss = 0
        for a in actions:
            top = stack_states[-1]
            nxt = buffer[-1] if buffer else self.empty
            scores = F.log_softmax(self.act(torch.cat([top, nxt], 1)), 1)
            loss = loss - scores[0, 0 if a == "SHIFT" else 1]
            if a == "SHIFT":
                x = buffer.pop()
                stack_items.append(x)
                stack_states.append(self.stack_rnn(x, stack_states[-1]))
            else:
                right = stack_items.pop()
                stack_states.pop()
                left = stack_items.pop()
                stack_states.pop()
                comp = torch.tanh(self.compose(torch.cat([left, right], 1)))
                stack_items.append(comp)
                stack_states.append(self.stack_rnn(comp, stack_states[-1]))
        return loss, stack_states[-1]


def test_stack_rnn_transition_parser():
    model = StackParser().double()
    sents = [torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([5, 6]),
             torch.tensor([7, 8, 9, 1])]
    acts = [["SHIFT", "SHIFT", "REDUCE", "SHIFT", "REDUCE"], ["SHIFT"],
            ["SHIFT", "SHIFT", "REDUCE"],
            ["SHIFT", "SHIFT", "SHIFT", "REDUCE", "SHIFT", "REDUCE", "REDUCE"]]
    mb_test(model, MaskedBatch.fromlist(sents, batch_dim=None), matchbox.objects(acts),
            params=list(model.parameters()))


@matchbox.batch
def copy_dist(p_vocab, attn, src_ids, p_gen):   # (V,), (n,), (n,), (1,)
    final = p_gen * p_vocab
    final = final.scatter_add(0, src_ids, (1 - p_gen) * attn)
    return torch.log(final + 1e-9)


def test_pointer_generator_copy_distribution():
    V, ns = 6, (3, 1, 4)
    pv = MaskedBatch.fromlist([F.softmax(torch.randn(V, dtype=D), 0) for _ in ns], (False,),
                              batch_dim=None)
    at = MaskedBatch.fromlist([F.softmax(torch.randn(n, dtype=D), 0) for n in ns], (True,),
                              batch_dim=None)
    ids = MaskedBatch.fromlist([torch.randint(0, V, (n,)) for n in ns], (True,), batch_dim=None)
    pg = MaskedBatch.fromlist([torch.rand(1, dtype=D) for _ in ns], (False,), batch_dim=None)
    mb_test(copy_dist, pv, at, ids, pg)


@matchbox.batch
def ctc_nll(log_probs, target, blank=0):   # log_probs: (T, C); target: a list of ints
    ext = [blank]
    for t in target:
        ext += [t, blank]
    S, T = len(ext), log_probs.size(0)
    neg_inf = torch.tensor(-1e30, dtype=log_probs.dtype)
    alpha = [log_probs[0, ext[0]], log_probs[0, ext[1]]] + [neg_inf] * (S - 2)
    for t in range(1, T):
        new = []
        for s in range(S):
            a = alpha[s]
            if s > 0:
                a = torch.logaddexp(a, alpha[s - 1])
            if s > 1 and ext[s] != blank and ext[s] != ext[s - 2]:
                a = torch.logaddexp(a, alpha[s - 2])
            new.append(a + log_probs[t, ext[s]])
        alpha = new
    return -torch.logaddexp(alpha[-1], alpha[-2])


def test_ctc_alpha_recursion_over_python_lists():
    targets, Ts = [[1, 2], [3], [1, 1, 2], [2]], [4, 2, 6, 3]
    lp = [F.log_softmax(torch.randn(T, 4, dtype=D), -1) for T in Ts]
    out = mb_test(ctc_nll, MaskedBatch.fromlist(lp, (True, False), batch_dim=None),
                  matchbox.objects(targets))
    for e, x, tg in zip(out.examples(), lp, targets):   # and it is CTC
        torch.testing.assert_close(e, F.ctc_loss(x, torch.tensor(tg), [x.size(0)], [len(tg)],
                                                 reduction="sum"))
