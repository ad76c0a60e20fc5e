"""Per-example Python values under @batch (issue 20 items 2 and 3): lists
used as stacks and queues, sizes, len(), .item(), int(), float(), bool(),
and `for word in words` over an example's first dimension.  Each batched
run equals the per-example runs, values and gradients."""
import pytest
import torch
import torch.nn as nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

BATCHES = [(4, "mixed"), (4, "equal"), (1, "random"), (5, "one")]
D = torch.float64
EOS = 2


@matchbox.batch
def stack_machine(x):                                 # x: (1, n, 2)
    stack = []
    for t in x.unbind(1):
        if t.sum() > 0:
            stack.append(t)
        elif len(stack) > 0:
            a = stack.pop()
            stack.append(a * 2 + t)
    out = x.sum(1)
    while len(stack) > 1:
        out = out + stack.pop(0) * stack[-1]
    if stack:
        out = out + stack.pop()
    return out


@matchbox.batch
def reversed_items(x):                                # x: (1, n, 2)
    hs = []
    for t in x.unbind(1):
        if t.sum() > -0.5:
            hs.append(torch.tanh(t))
    hs.append(x.sum(1))
    rev = hs[::-1]
    first = hs[0] + rev[0] * 2 + hs[len(hs) - 1] + hs[len(hs) // 2]
    return F.stack(rev, 1), first


@matchbox.batch
def queue(x):                                         # x: (1, n, 2)
    q = list(x.unbind(1))
    while len(q) > 1:
        a = q.pop(0)
        b = q.pop(0)
        q.append(a * 0.5 + b)
    return q.pop()


@matchbox.batch
def shift_reduce(x):                                  # x: (1, n, 2)
    buffer = list(range(x.size(1)))                   # word positions, as a parser's
    stack = []
    out = x.sum(1) * 0
    while buffer or len(stack) > 1:
        if buffer and (len(stack) < 2 or x[:, buffer[0]].sum() > 0):
            stack.append(buffer.pop(0))
        else:
            s0 = stack.pop()
            out = out + x[:, s0] * x[:, stack[-1]] + s0
            if s0 % 2 == 0:
                stack.append(s0)                      # a stack of different depths again
                out = out + x[:, stack.pop()] * 0.5
    for s in stack:
        out = out + x[:, s] * len(stack)
    return out + x[:, stack.pop()]


@matchbox.batch
def sizes(x):                                         # x: (1, n, 3)
    n = x.size(1)
    total = x[:, n - 1] * n + x[:, x.shape[1] - 1]
    for i in range(n - 1, -1, -1):
        total = total + x[:, i] * (i + 1)
    for i in range(x.size(1)):
        total = total * 0.5 + x[:, i]
    return total / float(n) + len(x)


torch.manual_seed(0)
CELL = nn.Linear(3, 3).double()


@matchbox.batch
def rnn_over_words(words):                            # words: (n, 3), no batch dim
    h = words.new_zeros(3)
    for word in words:
        h = torch.tanh(CELL(word) + h)
    return h * len(words)


@matchbox.batch
def decode(x):                                        # x: (1, n, 4): logits per step
    out = x.sum(1) * 0
    tok = x[:, 0].argmax(-1)
    for t in x.unbind(1):
        tok = t.argmax(-1)
        out = out + t
        if tok.item() == EOS:
            break
    k = int(out.sum() > 0)
    return out * (1 + k) + float(tok) + bool(tok == 1)


@pytest.mark.parametrize("B,lengths", BATCHES)
@pytest.mark.parametrize("f", [stack_machine, reversed_items, queue, shift_reduce, sizes, decode])
def test_per_example_values(f, B, lengths):
    dims = (B, (True, 6), (False, 4 if f is decode else 3 if f is sizes else 2))
    mb_test(f, dims, lengths=lengths, dtype=D)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_for_word_in_words(B, lengths):
    mb_test(rnn_over_words, (B, (True, 5), (False, 3)), lengths=lengths, dtype=D, batch_dim=None)


def _batch(n_list, d=2):
    return MaskedBatch.fromlist([torch.randn(1, n, d) for n in n_list], (True, False))


def test_pop_from_an_examples_empty_list_raises():
    @matchbox.batch
    def f(x):
        stack = []
        for t in x.unbind(1):
            stack.append(t)
        stack.pop()
        stack.pop()
        return x
    with pytest.raises(IndexError, match=r"pop from empty list in examples \[1\]"):
        f(_batch([2, 1, 3]))


def test_index_past_an_examples_list_raises():
    @matchbox.batch
    def f(x):
        hs = list(x.unbind(1))
        return hs[1]
    with pytest.raises(IndexError, match=r"list index out of range in examples \[0\]"):
        f(_batch([1, 2]))


def test_list_ops_only_in_active_lanes():
    @matchbox.batch
    def f(x, c):
        stack = list(x.unbind(1))
        if c > 0:
            stack.pop()
        return F.stack(stack, 1), len(stack) * 1.0 + x.sum()
    x, c = _batch([3, 3, 2]), MaskedBatch.fromlist(
        [torch.tensor(v) for v in (1.0, -1.0, 1.0)], (), batch_dim=None)
    out, n = f(x, c)
    assert [e.size(1) for e in out.examples()] == [2, 3, 1]


def test_outside_batch_sizes_and_values_still_raise():
    x = _batch([1, 3])
    with pytest.raises(TypeError, match="size_as_tensor"):
        range(x.size(1))  # (a per-example int, where one Python int is needed)
    with pytest.raises(TypeError, match="@matchbox.batch"):
        x.sum().item()
    with pytest.raises(TypeError, match="@matchbox.batch"):
        iter(MaskedBatch.fromlist([torch.randn(n, 2) for n in (1, 3)], (True, False),
                                  batch_dim=None))


def helper_reading_item(t):
    return t.sum().item()


@matchbox.batch
def calls_an_undecorated_helper(x):
    return helper_reading_item(x)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_item_in_undecorated_helper_reads_each_examples(lengths):
    """A function of the module that @batch code calls with a batch and
    that reads a value per example (``.item()``, an ``if``) is rewritten on
    its first call, as one given per-example Python values is; before, it
    ran as written and raised an error telling the user to decorate it."""
    mb_test(calls_an_undecorated_helper, (4, (True, 3)), lengths=lengths, dtype=torch.float64)


def clip(h):
    if h.sum() > 1.0:
        h = h / h.sum()
    return h


@matchbox.batch
def clipped_steps(x):                            # x: (1, 3)
    h = torch.tanh(x)
    for i in range(2):
        h = clip(h * 2)
    return h


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_an_undecorated_helper_with_an_if_takes_each_examples_branch(lengths):
    mb_test(clipped_steps, (6, (False, 3)), lengths=lengths, dtype=torch.float64)


@matchbox.batch
def _reversed_lists(x):
    out = []
    for t in reversed(x.unbind(1)):
        out.append(t * 2)
    r = out[::-1]
    first = r[0]
    last = r.pop()
    return F.stack(out[::-1], 1), last, first, F.stack(list(reversed(out)), 1)


@pytest.mark.parametrize("lengths", ["mixed", "one", "equal"])
def test_reversed_per_example_lists(lengths):
    """lst[::-1] and reversed(lst) of lists whose examples hold different
    items: each example's own list reversed (items in reverse order, each
    still held by its lanes), then read per lane and stacked."""
    mb_test(_reversed_lists, (4, (True, 5), (False, 3)), lengths=lengths, dtype=torch.float64)


TABLE = torch.randn(6, 3, dtype=D, requires_grad=True)


@matchbox.batch
def table_rows(x):                                    # x: (1, n, 6) scores per step
    h = TABLE[0] * 0                                  # (3,)
    for t in x.unbind(1):
        tok = t.argmax(-1)
        h = torch.tanh(TABLE[tok.item()] + h)         # a row, (3,) per example
        h = h + TABLE[int(tok), 1:].sum() + TABLE[tok.item(), :2].sum(0)
    return h, TABLE[tok]                              # tok is (1,): TABLE[tok] is (1, 3)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_table_row_at_a_per_example_int(B, lengths):
    """table[tok.item()] is the row, (d,) per example (issue 27 item 4;
    before, (1, d)), and a (1,) index still gives (1, d)."""
    mb_test(table_rows, (B, (True, 5), (False, 6)), lengths=lengths, dtype=D, params=[TABLE])


# ------------------------------------------------------------------ issue 27 items 3 and 11
from torch.autograd import Variable  # noqa: E402  (the old tutorials' import)


@matchbox.batch
def checks_for_a_tensor(x, extra=None):              # x: (1, n, 3), extra: a list or None
    if isinstance(x, torch.Tensor) and x.dim() == 3:
        x = x * 2
    if torch.is_tensor(x.sum()) and not isinstance(x, (list, tuple)):
        x = x + 1
    if isinstance(extra, list) or torch.is_tensor(extra):
        x = x * 3
    h = Variable(x.data.new(1, 3).zero_()) + Variable(x).sum(1)   # detached, as in torch
    return x.sum(1) + h, isinstance(x, MaskedBatch) or isinstance(x, torch.Tensor)


@pytest.mark.parametrize("B,lengths", BATCHES)
def test_isinstance_is_tensor_and_variable_answer_as_per_example(B, lengths):
    """Per example x is a Tensor: `isinstance(x, torch.Tensor)` and
    `torch.is_tensor(x)` take that path under @batch (before, the batch
    took the other one, a silently different result), and `Variable(x)` is
    x.detach() as in torch (before, TypeError)."""
    mb_test(checks_for_a_tensor, (B, (True, 5), (False, 3)), lengths=lengths, dtype=D)
    mb_test(lambda x: checks_for_a_tensor(x, [1]), (B, (True, 5), (False, 3)), lengths=lengths,
            dtype=D)
    src = matchbox.to_source(checks_for_a_tensor)
    assert "isinstance_(x, torch.Tensor)" in src and "tensor_call(Variable, x)" in src


def test_outside_batch_a_masked_batch_is_no_tensor_to_isinstance():
    """What docs/porting.md tells the user: outside @batch Python's
    isinstance and torch's Variable cannot be reached."""
    x = _batch([1, 3])
    assert not isinstance(x, torch.Tensor) and not torch.is_tensor(x)
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        Variable(x)
