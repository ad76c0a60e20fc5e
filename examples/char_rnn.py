"""The PyTorch tutorial's character-level RNN name classifier, unchanged.

``CharRNN``, ``letterToIndex`` and ``lineToTensor`` are the code of the
tutorial "NLP From Scratch: Classifying Names with a Character-Level RNN",
written the tutorial's way: a name is a sequence-first ``(n_letters_in_name,
1, n_letters)`` one-hot tensor (the batch of one at dim 1), ``nn.RNN`` runs
with ``batch_first=False``, ``hidden[0]`` is the last state ``(1, hidden)``,
and ``nn.NLLLoss`` scores it against a ``(1,)`` label.

The tutorial trains by looping over the names of a minibatch and summing
their losses.  Here the same model, unchanged, also runs on a whole
minibatch at once: ``MaskedBatch.fromlist(names, batch_dim=1)`` says where
each name's batch-of-one dimension is, and ``matchbox.example_sum`` sums
the per-name losses as the tutorial's loop does.  Both trainings start
from the same weights and see the same minibatches; the final line prints
the largest difference between their losses and the speedup.

The names are made up (the tutorial downloads its data): each "language"
has its own letters and endings.

Run:  python -m examples.char_rnn [--steps 30 --batch-size 64 --seed 0]
"""
import string
import time

import torch
import torch.nn as nn

import matchbox
from matchbox import MaskedBatch
from examples.common import progress, run_main

# ------------------------------------------------------------------ the tutorial's code
allowed_characters = string.ascii_letters + " .,;'" + "_"
n_letters = len(allowed_characters)


def letterToIndex(letter):
    if letter not in allowed_characters:
        return allowed_characters.find("_")
    else:
        return allowed_characters.find(letter)


def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super(CharRNN, self).__init__()

        self.rnn = nn.RNN(input_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, line_tensor):
        rnn_out, hidden = self.rnn(line_tensor)
        output = self.h2o(hidden[0])
        output = self.softmax(output)

        return output


# ------------------------------------------------------------------ data
LANGUAGES = {  # letters a language's names use, and their endings
    "Ardish": ("ardnlkeo", ["son", "ard", "el"]),
    "Belvan": ("bvaiumrs", ["ov", "ski", "a"]),
    "Corrin": ("coryiqut", ["i", "ini", "etto"]),
    "Dastek": ("dstehgwz", ["tz", "er", "ek"]),
}


def make_names(count, seed=0, max_len=12):
    """``(label_tensor (1,), text_tensor (n, 1, n_letters))`` pairs, as the
    tutorial's dataset yields them."""
    g = torch.Generator().manual_seed(seed)
    names = list(LANGUAGES)
    data = []
    for _ in range(count):
        label = int(torch.randint(len(names), (), generator=g))
        letters, ends = LANGUAGES[names[label]]
        n = int(torch.randint(1, max_len - 3, (), generator=g))
        stem = "".join(letters[int(i)] for i in torch.randint(len(letters), (n,), generator=g))
        name = stem.capitalize() + ends[int(torch.randint(len(ends), (), generator=g))]
        data.append((torch.tensor([label], dtype=torch.long), lineToTensor(name)))
    return data


def batched(chunk):
    """A minibatch as matchbox inputs: the labels ``(1,)`` and the names,
    sequence-first ``(n, 1, n_letters)`` each."""
    labels = MaskedBatch.fromlist([y for y, _ in chunk])
    names = MaskedBatch.fromlist([x for _, x in chunk], batch_dim=1)
    return labels, names


def main(steps=30, batch_size=64, hidden=64, lr=0.15, seed=0, every=10):
    torch.manual_seed(seed)
    loop_rnn = CharRNN(n_letters, hidden, len(LANGUAGES))
    batch_rnn = CharRNN(n_letters, hidden, len(LANGUAGES))
    batch_rnn.load_state_dict(loop_rnn.state_dict())  # the same initial weights
    opts = [torch.optim.SGD(m.parameters(), lr=lr) for m in (loop_rnn, batch_rnn)]
    criterion = nn.NLLLoss()
    data = make_names(steps * batch_size, seed=seed)
    worst, times = 0.0, [0.0, 0.0]
    bar = progress(range(steps), "train")
    for step in bar:
        chunk = data[step * batch_size:(step + 1) * batch_size]
        start = time.perf_counter()
        batch_loss = 0  # the tutorial's loop over the minibatch
        for label_tensor, text_tensor in chunk:
            output = loop_rnn(text_tensor)
            loss = criterion(output, label_tensor)
            batch_loss += loss
        batch_loss.backward()
        mid = time.perf_counter()
        labels, names = batched(chunk)  # the same model on the whole minibatch
        loss_b = matchbox.example_sum(criterion(batch_rnn(names), labels))
        loss_b.backward()
        times[0] += mid - start
        times[1] += time.perf_counter() - mid
        for opt, model in zip(opts, (loop_rnn, batch_rnn)):
            nn.utils.clip_grad_norm_(model.parameters(), 3)
            opt.step()
            opt.zero_grad()
        lp, lb = batch_loss.item() / len(chunk), loss_b.item() / len(chunk)
        worst = max(worst, abs(lp - lb))
        bar.note(f"loss {lb:.3f}")
        if step % every == 0 or step == steps - 1:
            print(f"step {step:3d}: loss per name, loop {lp:.6f}, batch {lb:.6f}")
    test = make_names(512, seed=seed + 1)
    with torch.no_grad():
        labels, names = batched(test)
        guess = torch.stack([o.argmax(1) for o in batch_rnn(names).examples()])
    acc = (guess == torch.stack(labels.examples())).double().mean().item()
    print(f"final: loss per name {lb:.4f}, max |loop - batch| {worst:.1e}, held-out accuracy "
          f"{100 * acc:.1f}% (chance {100 / len(LANGUAGES):.0f}%), forward+backward per "
          f"minibatch: loop {1000 * times[0] / steps:.1f} ms, batch {1000 * times[1] / steps:.1f} ms "
          f"({times[0] / times[1]:.1f}x faster)")
    return {"loss": lb, "max_difference": worst, "accuracy": acc,
            "speedup": times[0] / times[1]}


if __name__ == "__main__":
    run_main(main, __doc__, steps=30, batch_size=64, hidden=64, lr=0.15, seed=0)
