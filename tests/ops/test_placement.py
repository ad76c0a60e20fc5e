"""Each example's batch-of-one dimension first ``(1, n, d)``, second
``(n, 1, d)`` (sequence-first) or absent ``(n, d)`` (the vmap convention):
every op family runs batched == per example (values and gradients) on all
three, with mixed, length-1 and all-equal batches; ops that drop or bring
back the batch-of-one dimension give exactly the per-example shapes."""
import pytest
import torch
import torch.nn as nn

import matchbox.functional as F
from matchbox import MaskedBatch, batch
from matchbox.test_utils import mb_test
from tests.ops._padding import poison

D = torch.float64
PLACES = {"first": 0, "second": 1, "none": None}
LENGTHS = ("mixed", "one", "equal")
SPEC = (4, (True, 5), (False, 3))  # each example: a dynamic n, a static 3


class Place:
    """Where the batch-of-one dimension sits, and the per-example dim of
    each other dim: ``dim(0)`` is n, ``dim(1)`` is d."""

    def __init__(self, bdim):
        self.bdim = bdim

    def dim(self, k):
        return k if self.bdim is None or k < self.bdim else k + 1


@pytest.fixture(params=list(PLACES))
def place(request):
    return Place(PLACES[request.param])


def check(f, place, lengths="mixed", *specs, params=None):
    return mb_test(f, SPEC, *specs, batch_dim=place.bdim, lengths=lengths, dtype=D, params=params)


torch.manual_seed(0)
LIN = nn.Linear(3, 4).double()
EMB = nn.Embedding(6, 3).double()

# name -> f(x, place): one op family each, written as per-example code
OPS = {
    "pointwise": lambda x, p: torch.tanh(poison(x)) * 2 + x.exp(),
    "shared_operand": lambda x, p: x * torch.arange(3, dtype=D) - 1,
    "sum_n": lambda x, p: poison(x).sum(p.dim(0)),
    "mean_n_keepdim": lambda x, p: poison(x).mean(p.dim(0), keepdim=True),
    "max_d": lambda x, p: x.max(p.dim(1))[0],
    "sum_all": lambda x, p: poison(x).sum(),
    "softmax_n": lambda x, p: torch.softmax(poison(x), p.dim(0)),
    "log_softmax_last": lambda x, p: F.log_softmax(x, dim=-1),
    "transpose": lambda x, p: x.transpose(p.dim(0), p.dim(1)) * 1.5,
    "unsqueeze_last": lambda x, p: x.unsqueeze(-1).sum(p.dim(0)),
    "flip_n": lambda x, p: x.flip(p.dim(0)) + 0,
    "cumsum_n": lambda x, p: x.cumsum(p.dim(0)),
    "linear": lambda x, p: LIN(poison(x)).relu(),
    "matmul": lambda x, p: x @ torch.ones(3, 2, dtype=D),
    "stack_new_first": lambda x, p: torch.stack([x, x * 2], 0),
    "cat_d": lambda x, p: torch.cat([x, x.sin()], p.dim(1)),
    "first_row": lambda x, p: x[0] * 1,
    "last_step": lambda x, p: x.select(p.dim(0), -1) * 1 if p.bdim is None else x[:, -1] * 1
    if p.bdim == 0 else x[-1] * 1,
    "view_flat": lambda x, p: x.reshape(-1, 3).sum(0),
    "lm_loss": lambda x, p: torch.nn.functional.cross_entropy(
        LIN(x).view(-1, 4), LIN(x).detach().argmax(-1).view(-1)),
    "mse_loss": lambda x, p: torch.nn.functional.mse_loss(x, torch.zeros_like(x)),
    "diff_n": lambda x, p: torch.diff(poison(x), dim=p.dim(0)),
    "cummax_n": lambda x, p: x.cummax(p.dim(0))[0],
    "roll_d": lambda x, p: x.roll(1, p.dim(1)),
    "cosine_d": lambda x, p: torch.cosine_similarity(x, x.exp(), dim=p.dim(1)),
    "bilinear": lambda x, p: torch.nn.functional.bilinear(x, x, torch.ones(2, 3, 3, dtype=D)),
}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("name", OPS)
def test_op_on_each_placement(name, lengths, place):
    check(lambda x: OPS[name](x, place), place, lengths, params=list(LIN.parameters()))


def test_embedding_then_sum_per_placement(place):
    """Indices in each layout; embeddings keep it; a reduction drops n."""
    xs = [torch.randint(0, 6, (n,)) for n in (1, 4, 2)]
    if place.bdim is not None:
        xs = [x.unsqueeze(place.bdim) for x in xs]
    idx = MaskedBatch.fromlist(xs, batch_dim=place.bdim)
    mb_test(lambda i: EMB(i).sum(place.dim(0)), idx, dtype=D, params=list(EMB.parameters()))


def test_shapes_follow_the_per_example_code():
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4)])
    assert x[0].batch_dim is None and x[0].maxsize() == (4, 3) and x[0].dim() == 2
    assert x.squeeze(0).batch_dim is None and x.view(-1, 3).batch_dim is None
    assert x.sum().dim() == 0 and x.sum(1).shape == (1, 3)
    back = x.view(-1, 3).unsqueeze(0)
    assert back.batch_dim == 0 and all(torch.equal(a, b) for a, b in zip(back.examples(), x.examples()))
    seq = x.transpose(0, 1)
    assert seq.batch_dim == 1 and [e.shape for e in seq.examples()] == [(2, 1, 3), (4, 1, 3)]
    assert seq[:, 0].batch_dim is None and seq.permute(1, 0, 2).batch_dim == 0


def test_conversions_keep_each_layout():
    xs = [torch.randn(n, 1, 3) for n in (2, 5)]
    x = MaskedBatch.fromlist(xs, batch_dim=1)
    assert [t.shape for t in x.to_nested().unbind()] == [(2, 3), (5, 3)]
    back = MaskedBatch.from_padded(x.to_padded().transpose(0, 1), x.size_as_tensor(0).padded_data,
                                   batch_first=False)
    assert back.batch_dim == 1 and all(torch.equal(a, b) for a, b in zip(back.examples(), xs))
    assert torch.equal(x.to_packed().data, torch.nn.utils.rnn.pack_sequence(
        [e[:, 0] for e in xs], enforce_sorted=False).data)


def test_sequence_first_examples_and_errors():
    xs = [torch.randn(n, 1, 3) for n in (2, 5)]
    x = MaskedBatch.fromlist(xs, batch_dim=1)
    assert [e.shape for e in x.examples()] == [e.shape for e in xs] and len(x.dims) == 2
    with pytest.raises(ValueError, match="batch_dim=1 for sequence-first"):
        MaskedBatch.fromlist(xs)
    with pytest.raises(ValueError, match="different places"):
        x + x.transpose(0, 1)
    with pytest.raises(ValueError, match="batch-of-one dimension"):
        x.cumsum(1)


# ------------------------------------------------------------------ recurrent layers
GRU = nn.GRU(3, 4).double()  # batch_first=False: the tutorials' sequence-first layout


@pytest.mark.parametrize("lengths", LENGTHS)
def test_sequence_first_gru_whole(lengths):
    """nn.GRU over (n, 1, d) sentences; h_n is (1, 1, H) per example."""
    def encode(x):
        out, h = GRU(x)
        return out, h, h[0]
    mb_test(encode, SPEC, batch_dim=1, lengths=lengths, dtype=D, params=list(GRU.parameters()))


@batch
def step_by_token(gru, sentence):
    """The tutorial encoder: a (1, 1, H) state, one token at a time."""
    hidden = torch.zeros(1, 1, 4, dtype=D)
    outputs = []
    for word in sentence.unbind(0):
        output, hidden = gru(word.view(1, 1, -1), hidden)
        outputs.append(output[0])
    return F.stack(outputs, 0), hidden


@pytest.mark.parametrize("lengths", LENGTHS)
def test_sequence_first_gru_stepped_in_batch_loop(lengths):
    mb_test(lambda s: step_by_token(GRU, s), SPEC, batch_dim=1, lengths=lengths, dtype=D,
            params=list(GRU.parameters()))


@pytest.mark.parametrize("lengths", LENGTHS)
def test_unbatched_gru_and_cell_on_vmap_style_examples(lengths):
    """(n, d) examples with no batch dimension: nn.GRU's own unbatched mode."""
    cell = nn.GRUCell(3, 4).double()

    @batch
    def run(x):
        out, h = GRU(x)
        hc = torch.zeros(4, dtype=D)
        for t in x.unbind(0):
            hc = cell(t, hc)
        return out, h, hc
    mb_test(run, SPEC, batch_dim=None, lengths=lengths, dtype=D,
            params=list(GRU.parameters()) + list(cell.parameters()))


# ------------------------------------------------------------------ channels
PRELU = nn.PReLU(3).double()
CHANNELS = {0: (4, (False, 3), (True, 5)),   # (1, 3, n): channels at 1
            None: SPEC,                      # (n, 3)
            2: SPEC}                         # (n, 3, 1)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("bdim", list(CHANNELS))
def test_prelu_weights_follow_each_examples_dimension_1(bdim, lengths):
    """nn.PReLU(C) weighs dimension 1 of each example, wherever the
    batch-of-one dimension sits (on (n, 3) examples it weighed n)."""
    mb_test(PRELU, CHANNELS[bdim], batch_dim=bdim, lengths=lengths, dtype=D,
            params=list(PRELU.parameters()))
    static = (4, (False, 3), (False, 3))     # (3, 3) examples: the wrong dim fits too
    mb_test(PRELU, static, batch_dim=None, dtype=D, params=list(PRELU.parameters()))


def test_prelu_with_one_channel_per_example_raises_as_torch():
    x = MaskedBatch.fromlist([torch.randn(n, 1, 3, dtype=D) for n in (2, 4)], batch_dim=1)
    with pytest.raises(RuntimeError, match="channel size = 1"):
        PRELU(torch.randn(2, 1, 3, dtype=D))
    with pytest.raises(RuntimeError, match="channel size = 1"):
        PRELU(x)
    one = nn.PReLU().double()
    mb_test(one, SPEC, batch_dim=1, dtype=D, params=list(one.parameters()))


# ------------------------------------------------------------------ labels (issue 27 item 5)
TREE_D = 3
TREE_W = nn.Linear(2 * TREE_D, TREE_D).double()


@batch
def encode_tree(feats, kids, node):           # feats (1, N, d), kids (1, N, 2), node (1,)
    h = feats.gather(1, node.view(-1, 1, 1).expand(-1, 1, TREE_D)).squeeze(1)
    pair = kids.gather(1, node.view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1)
    if pair[0, 0] >= 0:
        left = encode_tree(feats, kids, pair[:, 0])
        right = encode_tree(feats, kids, pair[:, 1])
        h = torch.tanh(TREE_W(torch.cat([left, right], 1)) + h)
    return h


def _tree(leaves, gen):
    """A random binary tree as a (1, N, 2) table of child indices (-1: a leaf), root 0."""
    kids = [[-1, -1]]

    def build(i, n):
        if n > 1:
            k = int(torch.randint(1, n, (), generator=gen))
            kids[i] = [len(kids), len(kids) + 1]
            kids.extend([[-1, -1], [-1, -1]])
            build(kids[i][0], k)
            build(kids[i][1], n - k)
    build(0, leaves)
    return torch.tensor(kids).unsqueeze(0)


@pytest.mark.parametrize("leaves", [(1, 3, 4, 2), (1,), (3, 3)])
def test_recursive_tree_encoder_gathers_rows_with_view_expand(leaves):
    """node.view(-1, 1, 1) of a (1,) node keeps the batch-of-one dimension
    at 0 (the -1 stands for 1), so gather(1, ...) meets a (1, 1, d) index."""
    gen = torch.Generator().manual_seed(len(leaves))
    ks = [_tree(n, gen) for n in leaves]
    kids = MaskedBatch.fromlist(ks, (True, False))
    feats = MaskedBatch.fromlist([torch.randn(1, k.size(1), TREE_D, dtype=D, generator=gen) for k in ks],
                                 (True, False))
    root = MaskedBatch.fromlist([torch.zeros(1, dtype=torch.long)] * len(ks))
    mb_test(encode_tree, feats, kids, root, params=list(TREE_W.parameters()))


def test_a_view_that_leaves_the_label_ambiguous_keeps_it():
    node = MaskedBatch.fromlist([torch.tensor([i]) for i in (1, 3)])
    assert node.view(-1, 1, 1).batch_dim == 0 and node.view(1, -1).batch_dim == 0
    seq = MaskedBatch.fromlist([torch.randn(3, 1, 2) for _ in range(2)], batch_dim=1)
    assert seq.view(3, -1, 2).batch_dim == 1 and seq.view(-1, 2).batch_dim is None
    x = MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (2, 4)])
    assert x.view(-1, 3).batch_dim is None            # -1 stands for n, not 1


LABELS = {"first": 0, "second": 1, "none": None}
SAME_SHAPE = {  # f(a, b): a is (1, n, 3) batch-first, b a (1, 1, 3) value labelled otherwise
    "gather": lambda a, b: a.gather(1, b.long().abs().clamp(max=0)),
    "scatter_add": lambda a, b: a.scatter_add(1, b.long().abs().clamp(max=0), b * 2),
    "take_along_dim": lambda a, b: torch.take_along_dim(a, b.long().abs().clamp(max=0), 1),
    "add": lambda a, b: a[:, :1] + b,
    "mse_loss": lambda a, b: torch.nn.functional.mse_loss(a[:, :1], b, reduction="sum"),
    "bilinear": lambda a, b: torch.nn.functional.bilinear(a[:, :1], b, torch.ones(2, 3, 3, dtype=D)),
}


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("name", SAME_SHAPE)
def test_operands_whose_examples_have_one_shape_work_together_whatever_their_labels(name, label):
    b = MaskedBatch.fromlist([torch.randn(1, 1, 3, dtype=D) for _ in range(3)], batch_dim=LABELS[label])
    mb_test(SAME_SHAPE[name], (3, (True, 4), (False, 3)), b, lengths="mixed", dtype=D)
