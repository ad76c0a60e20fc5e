"""The list-based shift-reduce parser: it is the tensor-stack SPINN for one
sentence, and batched (only the batch construction changed) it equals its
per-sentence loop, values and gradients."""
import math
import random

import pytest
import torch

from examples import spinn, spinn_lists as ex
from matchbox import MaskedBatch
from matchbox.test_utils import draw_lengths
from tests.examples._loop import assert_batch_equals_loop, per_example

def expressions(B, mode, seed, max_leaves=5):
    """B random expressions; "one": single words, "equal": the same number
    of words (different trees), "mixed": first one word, last the most."""
    rng = random.Random(seed)
    sizes = draw_lengths(B, max_leaves, mode, torch.Generator().manual_seed(seed))
    return [ex.random_expression(rng, n) for n in sizes]


def models():
    """The list-based model and the tensor-stack one, with the same weights."""
    torch.manual_seed(0)
    lists = ex.SPINN(dim=6, hidden=5).double()
    tensors = spinn.SPINN(dim=6, hidden=5, max_depth=6).double()
    tensors.load_state_dict(lists.state_dict())
    return lists, tensors


def as_tensors(words, transitions):
    return torch.tensor([[ex.W2I[w] for w in words]]), torch.tensor([transitions])


def test_one_sentence_equals_the_tensor_stack_model():
    lists, tensors = models()
    for words, transitions, value in expressions(6, "mixed", seed=3):
        torch.testing.assert_close(lists(words, transitions), tensors(*as_tensors(words, transitions)))


def test_words_mean_their_digits():
    for words, transitions, value in ex.make_data(50, max_leaves=7, seed=3):
        ids, _ = as_tensors(words, transitions)
        stack, buffer = [], [int(w) % spinn.DIGITS for w in ids[0]]
        for t in transitions:
            if t == ex.SHIFT:
                stack.append(buffer.pop(0))
            else:
                b, a = stack.pop(), stack.pop()
                stack.append(ex.combine(a, b))
        assert stack == [value] and buffer == [] and len(transitions) == 2 * len(words) - 1


@pytest.mark.parametrize("B", (1, 5))
@pytest.mark.parametrize("mode", ("mixed", "one", "equal"))
def test_batch_equals_per_sentence_loop(mode, B):
    lists, tensors = models()
    data = expressions(B, mode, seed=B)
    assert_batch_equals_loop(lists, lists.loss, data, ex.make_batch(data))
    scores = assert_batch_equals_loop(lists, lists, [d[:2] for d in data], ex.make_batch(data)[:2])
    words, transitions = (MaskedBatch.fromlist(list(x), dims=(True,))
                          for x in zip(*(as_tensors(w, t) for w, t, _ in data)))
    torch.testing.assert_close(per_example(scores, B), tensors(words, transitions).examples())


def test_a_batch_of_16_equals_the_loop():
    """Enough sentences for gathered branches to kick in."""
    lists, _ = models()
    data = ex.make_data(16, max_leaves=5, seed=7)
    assert_batch_equals_loop(lists, lists.loss, data, ex.make_batch(data))


def test_main_learns():
    m = ex.main(steps=4, batch_size=8, max_leaves=4, eval_size=16)
    assert all(math.isfinite(v) for v in m.values())
    assert m["loss"] < m["start_loss"]
