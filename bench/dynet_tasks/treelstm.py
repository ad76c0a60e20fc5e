"""The binary Tree-LSTM in DyNet (as dynet-benchmark's treenn.py: Python
recursion over one tree, a loss at every node), built from
``examples.tree_lstm.TreeLSTM``: its gates come from one affine transform
each, cut with ``pick_range`` as ``chunk`` cuts them.  A tree is Python lists
(left, right, word, label) indexed by node, preorder, -1 = no child."""
from bench.dynet_tasks import Linear, dy, lookup


def gates(x, n, size):
    return [dy.pick_range(x, k * size, (k + 1) * size) for k in range(n)]


class TreeLSTM:
    def __init__(self, pc, model):
        self.embed = lookup(pc, model.embed)
        self.leaf, self.compose, self.out = (Linear(pc, m) for m in (model.leaf, model.compose, model.out))
        self.hidden = model.out.in_features

    def encode(self, tree, i, losses):
        """States (h, c) of node i; appends the loss of every node under it."""
        left, right, word, label = tree
        if left[i] < 0:
            gi, go, gu = gates(self.leaf(self.embed[word[i]]), 3, self.hidden)
            c = dy.cmult(dy.logistic(gi), dy.tanh(gu))
        else:
            hl, cl = self.encode(tree, left[i], losses)
            hr, cr = self.encode(tree, right[i], losses)
            gi, gfl, gfr, go, gu = gates(self.compose(dy.concatenate([hl, hr])), 5, self.hidden)
            c = (dy.cmult(dy.logistic(gi), dy.tanh(gu)) + dy.cmult(dy.logistic(gfl), cl)
                 + dy.cmult(dy.logistic(gfr), cr))
        h = dy.cmult(dy.logistic(go), dy.tanh(c))
        losses.append(dy.pickneglogsoftmax(self.out(h), label[i]))
        return h, c

    def losses(self, trees):
        out = []
        for tree in trees:
            nodes = []
            self.encode(tree, 0, nodes)
            out.append(dy.esum(nodes))
        return out
