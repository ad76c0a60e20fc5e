"""The SPINN example: the per-sentence shift-reduce stack machine gives, on a
batch of sentences with different lengths and tree shapes, each sentence's
own scores and gradients; its data and its errors are right."""
import math
import random

import pytest
import torch

from examples import spinn
from matchbox.test_utils import draw_lengths, mb_test


def expressions(B, mode, seed, max_leaves=5):
    """B random expressions; "one": single digits, "equal": the same number of
    digits (different trees), "mixed": first one digit, last the most."""
    rng = random.Random(seed)
    sizes = draw_lengths(B, max_leaves, mode, torch.Generator().manual_seed(seed))
    return [spinn.random_expression(rng, n) for n in sizes]


@pytest.mark.parametrize("B", (1, 5))
@pytest.mark.parametrize("mode", ("mixed", "one", "equal"))
def test_forward_matches_per_sentence(mode, B):
    model = spinn.SPINN(dim=6, hidden=5, max_depth=5).double()
    words, transitions, _ = spinn.make_batch(expressions(B, mode, seed=B))
    mb_test(model, words, transitions, seed=0)


def test_transitions_encode_the_value():
    """Running the transitions with the true digits and `combine` on a plain
    stack gives the label: shifts take the words in order, reduces pop two."""
    for words, transitions, value in spinn.make_data(50, max_leaves=7, seed=3):
        stack, buffer = [], [int(w) % spinn.DIGITS for w in words[0]]
        assert transitions.size(1) == 2 * len(buffer) - 1
        for t in transitions[0].tolist():
            if t == spinn.SHIFT:
                stack.append(buffer.pop(0))
            else:
                b, a = stack.pop(), stack.pop()
                stack.append(spinn.combine(a, b))
        assert stack == [int(value)] and buffer == []


def test_stack_overflow_raises():
    """A tree deeper than max_depth cannot be pushed: IndexError, in a batch
    as for one example, never a silently wrong stack."""
    model = spinn.SPINN(dim=4, hidden=3, max_depth=2)
    deep = (torch.tensor([[1, 2, 3]]), torch.tensor([[0, 0, 0, 1, 1]]), torch.tensor([1]))
    shallow = spinn.random_expression(random.Random(0), 1)
    with pytest.raises(IndexError):
        model(deep[0], deep[1])
    words, transitions, _ = spinn.make_batch([shallow, deep])
    with pytest.raises(IndexError, match="out of range"):
        model(words, transitions)


def test_main_learns():
    m = spinn.main(steps=4, batch_size=8, max_leaves=4, eval_size=16)
    assert all(math.isfinite(v) for v in m.values())
    assert m["loss"] < m["start_loss"]
