"""Values whose masks are equal without being one object (a batch of trees
as four ``fromlist`` batches) share one mask after a gathered branch or a
stacked recursive call (runtime/compaction.py ``shared_rows``), so the
caches that rules keep on a mask serve them all; per-example results do
not change."""
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test
from matchbox.transform.runtime import calls
from matchbox.transform.runtime.branch_compaction import BranchCompaction
from matchbox.transform.runtime.compaction import shared_rows


def _pair(lengths):
    a = MaskedBatch.fromlist([torch.randn(1, n) for n in lengths], (True,))
    b = MaskedBatch.fromlist([torch.randn(1, n) for n in lengths], (True,))
    return a, b


def test_equal_masks_share_their_gathered_rows():
    a, b = _pair([2, 5, 3, 1])
    c = MaskedBatch.fromlist([torch.randn(1, n) for n in [5, 5, 3, 1]], (True,))
    assert a._mask is not b._mask
    comp = BranchCompaction(torch.tensor([True, False, True, True]), frozenset(), "branch")
    ga, gb, gc = comp.rows_of(a), comp.rows_of(b), comp.rows_of(c)
    assert ga._mask is gb._mask and gc._mask is not ga._mask  # (c's differs)
    assert torch.equal(ga._mask, a._mask[[0, 2, 3]]) and torch.equal(gc._mask, c._mask[[0, 2, 3]])
    comp.rows = torch.tensor([1, 2])  # other rows: made anew
    assert torch.equal(comp.rows_of(b)._mask, b._mask[[1, 2]])


def test_shared_rows_keeps_identity_and_content_apart():
    made = {}
    m = torch.tensor([[True, False], [True, True]])
    first = shared_rows(made, m, lambda: m[:1])
    assert shared_rows(made, m.clone(), lambda: None) is first
    other = torch.tensor([[True, True], [True, True]])
    assert torch.equal(shared_rows(made, other, lambda: other[:1]), other[:1])


def test_stacked_calls_share_equal_masks():
    a, b = _pair([2, 5, 3, 1])
    rows = calls._Rows([None, None], 4)
    sa = calls._stacked([a, a], rows.parts, rows)
    sb = calls._stacked([b, b], rows.parts, rows)
    assert sa._mask is sb._mask and torch.equal(sa._mask, torch.cat([a._mask, a._mask]))


class Tree(torch.nn.Module):
    """The Tree-LSTM's recursion shape: a gathered branch, sibling calls,
    per-example indexing of four batches with equal masks."""

    def __init__(self):
        super().__init__()
        self.leaf = torch.nn.Linear(1, 3)
        self.node = torch.nn.Linear(6, 3)

    @matchbox.batch
    def encode(self, left, right, word, i):
        if left[:, i][:, 0] < 0:
            h = torch.tanh(self.leaf(word[:, i].to(torch.float64)))
        else:
            hl = self.encode(left, right, word, left[:, i][:, 0])
            hr = self.encode(left, right, word, right[:, i][:, 0])
            h = torch.tanh(self.node(torch.cat([hl, hr], -1)))
        return h

    def forward(self, left, right, word):
        return self.encode(left, right, word, left.batch_zeros())


def test_tree_recursion_is_per_example():
    from examples.tree_lstm import random_tree
    import random
    rng = random.Random(3)
    trees = [random_tree(rng, n) for n in (1, 4, 7, 2, 9, 3, 5, 6, 8, 1)]
    batch = [MaskedBatch.fromlist([t[k] for t in trees], (True,)) for k in range(3)]
    mb_test(Tree().double(), *batch, dtype=torch.float64)


def test_list_items_appended_under_the_same_lanes_share_a_mask():
    from matchbox._lanes import lanes
    from matchbox.ops.shape import _items_differ, lanes_present
    from matchbox.transform.runtime import lists
    x = MaskedBatch.fromlist([torch.randn(1, 2) for _ in range(3)], (False,))
    lst = []
    with lanes(torch.tensor([True, False, True])):
        lists.append(None, lst, x * 1)  # (no compaction owner)
        lists.append(None, lst, x * 2)  # (no compaction owner)
        assert lst[0]._mask is lst[1]._mask
        pres = [lanes_present(v) for v in lst]
        assert pres[0] is pres[1] and _items_differ(pres, x.padded_data) == (False, False, None)


@matchbox.batch
def _features(x, k):
    feats = []
    for j in range(3):
        if k.sum() > j:  # per example: the first k features, the others from x * 0
            f = x * (j + 1)
        else:
            f = x * 0
        feats.append(f)
    if k.sum() > 1:
        feats.append(x)  # an item only some examples hold: the cat's size differs
    return torch.tanh(torch.cat(feats, 1))


def test_cat_of_list_items_held_alike_or_not():
    k = MaskedBatch.fromlist([torch.tensor([[float(n)]]) for n in (0, 1, 2, 3, 2, 0)], (False,))
    mb_test(_features, (6, (False, 2)), k, dtype=torch.float64)
