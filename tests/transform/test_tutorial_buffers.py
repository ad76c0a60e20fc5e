"""Tensors the per-example code builds item by item (issue 29 / SPEC 4b),
as the PyTorch tutorials write them: the char-RNN tutorials'
``categoryTensor`` / ``lineToTensor`` make a zero Tensor and write a 1 at
``tensor[li][0][all_letters.find(letter)]`` (chained subscripts, a
per-example index from a shared string's method) for each example's own
strings; the name generator's ``sample`` picks letters by a per-example
index into a shared string and stops at its own end.  Each example then
gets its own Tensor, as it does run alone; values and gradients equal the
per-example runs."""
import string

import pytest
import torch
import torch.nn as nn

import matchbox
from matchbox.test_utils import mb_test

D = torch.float64
all_letters = string.ascii_letters + " .,;'-"
n_letters = len(all_letters) + 1
all_categories = ["English", "French", "German"]


def categoryTensor(category):
    li = all_categories.index(category)
    tensor = torch.zeros(1, len(all_categories), dtype=D)
    tensor[0][li] = 1
    return tensor


def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters, dtype=D)
    for li, letter in enumerate(line):
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor


class RNN(nn.Module):
    def __init__(self, hidden_size=8):
        super().__init__()
        torch.manual_seed(0)
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(len(all_categories) + n_letters + hidden_size, hidden_size)
        self.i2o = nn.Linear(len(all_categories) + n_letters + hidden_size, n_letters)
        self.softmax = nn.LogSoftmax(dim=1)

    def step(self, category, input, hidden):
        combined = torch.cat((category, input, hidden), 1)
        return self.softmax(self.i2o(combined)), torch.tanh(self.i2h(combined))

    @matchbox.batch
    def forward(self, category, line, x):            # category, line: strings; x: (1, 1)
        category_tensor = categoryTensor(category)
        line_tensor = lineToTensor(line)
        hidden = x.new_zeros(1, self.hidden_size) + x
        for i in range(line_tensor.size(0)):
            output, hidden = self.step(category_tensor, line_tensor[i], hidden)
        return output, line_tensor.sum(0)


LINES = ["Abe", "Zo", "Quinn-Lee", "B", "Oda", "Jean;"]
CATS = ["English", "French", "German", "French", "English", "German"]


@pytest.mark.parametrize("B", [1, 3, 6])
def test_one_hot_tensors_built_per_example(B):
    """Before: 'assigning per-example values (a MaskedBatch) into a plain
    Tensor would write every example into the same shared Tensor', then
    'must be str, not PerExample' from all_letters.find(letter)."""
    mb_test(RNN().double(), matchbox.objects(CATS[:B]), matchbox.objects(LINES[:B]),
            (B, (False, 1)), dtype=D)


def test_equal_lines():
    mb_test(RNN().double(), matchbox.objects(["German"] * 3), matchbox.objects(["Ann"] * 3),
            (3, (False, 1)), dtype=D)


torch.manual_seed(1)
_GEN = RNN(hidden_size=6).double()


@matchbox.batch
def sample(category, start_letter, max_length=6):
    with torch.no_grad():
        category_tensor = categoryTensor(category)
        input = lineToTensor(start_letter)
        hidden = torch.zeros(1, _GEN.hidden_size, dtype=D)
        output_name = start_letter
        for i in range(max_length):
            output, hidden = _GEN.step(category_tensor, input[0], hidden)
            topv, topi = output.topk(1)
            topi = topi[0][0]
            if topi == n_letters - 1 or topi % 3 == 1:   # (stops early for some)
                break
            else:
                letter = all_letters[topi]
                output_name += letter
            input = lineToTensor(letter)
        return output_name


def test_sampling_names_per_example():
    cats, starts = ["English", "French", "German", "French"], ["A", "B", "C", "Q"]
    alone = [sample.__wrapped__(c, s) for c, s in zip(cats, starts)]
    names = sample(matchbox.objects(cats), matchbox.objects(starts))
    assert matchbox.examples(names) == alone, (names, alone)
    mb_test(sample, matchbox.objects(cats), matchbox.objects(starts))
