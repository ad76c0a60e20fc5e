"""Per-example strings and Python values under @batch (issue 29, SPEC 4b):
f-strings, ``str``, ``%``, ``format``, string methods, ``in``, ``is``,
``isinstance``, a dict keyed by a per-example string, and dicts counting
per-example tokens.  Each example gets its own string (before, one string
was made for the whole batch and every example took the same branch)."""
import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test

LENGTHS = ["mixed", "equal", "one"]
D = torch.float64
SCALE = {"len1": 1.0, "len2": -2.0, "len3": 3.0, "len4": 0.5, "len5": 4.0}


@matchbox.batch
def fstring_branch(x):                                # x: (1, n, 2)
    name = f"len{x.size(1)}"
    if name.endswith("3") or name.endswith("5"):
        return x.sum(1) * 2
    return x.sum(1) * SCALE[name]


@matchbox.batch
def str_of_size(x):                                   # x: (1, n, 2)
    s = str(x.size(1))
    label = "%s-%d" % (s, x.size(1)) + "{}!".format(s)
    key = "long" if s in ("4", "5") else "short"
    return x.sum(1) * len(label) + (1.0 if key == "long" else -1.0), label, key


@matchbox.batch
def formatted_value(x):                               # x: (1, n, 2)
    v = x.sum().item()
    text = "%.1f" % v
    return x.sum(1) * len(text) + float(text), text, f"{v:.2f}"


@matchbox.batch
def string_methods(x):                                # x: (1, n, 2)
    word = "abcdef"[:x.size(1)]
    up = word.upper()
    total = x.sum(1)
    if up.startswith("ABC"):
        total = total + len(up.replace("A", "xx"))
    if "d" in word and word.find("c") >= 0:
        total = total * 2.0
    return total, up, "|".join(word.split("c"))


@matchbox.batch
def counts_tokens(x, toks):                           # x: (1, n, 2), toks: (1, m) long
    counts = {}
    for t in toks.unbind(1):
        k = t.item()
        counts[k] = counts.get(k, 0) + 1
    best = max(counts.values())
    total = x.sum(1) * best
    if 2 in counts:
        total = total + counts[2]
    return total, len(counts)


@matchbox.batch
def seen_words(x, toks):                              # x: (1, n, 2), toks: (1, m) long
    seen = set()
    repeats = 0
    for t in toks.unbind(1):
        w = "w" + str(t.item())
        if w in seen:
            repeats += 1
        seen.add(w)
    return x.sum(1) + repeats, ",".join(sorted(seen))


@matchbox.batch
def types_of(x):                                      # x: (1, n, 2)
    n = x.size(1)
    v = None if n > 2 else n
    total = x.sum(1)
    if v is None:
        total = total * 3.0
    if isinstance(n, int) and isinstance(x, torch.Tensor) and v is not None:
        total = total + v
    return total


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", [fstring_branch, str_of_size, formatted_value, string_methods,
                               types_of], ids=lambda f: f.__name__)
def test_strings_per_example(f, lengths):
    mb_test(f, (5, (True, 5), (False, 2)), lengths=lengths, dtype=D)


def _tokens(seed):
    g = torch.Generator().manual_seed(seed)
    return MaskedBatch.fromlist([torch.randint(0, 4, (1, n), generator=g) for n in (1, 5, 3, 4)],
                                (True,))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("f", [counts_tokens, seen_words], ids=lambda f: f.__name__)
def test_containers_made_in_the_function(f, seed):
    mb_test(f, (4, (True, 3), (False, 2)), _tokens(seed), dtype=D)


def test_fstring_without_per_example_values_is_plain():
    @matchbox.batch
    def f(x):
        tag = f"d{x.size(-1)}"
        assert type(tag) is str
        return x * len(tag)
    x = MaskedBatch.fromlist([torch.randn(1, 3), torch.randn(1, 3)], (False,))
    assert torch.equal(f(x).padded_data, x.padded_data * 2)


def test_a_plain_value_used_as_one_value_names_the_problem():
    """A per-example string passed where Python needs one value raises a
    clear error that does not ask for @batch (the function has it)."""
    @matchbox.batch
    def f(x):
        s = str(x.size(1))
        table = {s: 1.0}
        return x.sum(1) * table[s]
    x = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (1, 2)], (True, False))
    with pytest.raises(TypeError, match="per-example value") as e:
        f(x)
    assert "@matchbox.batch" not in str(e.value) and "under @batch" not in str(e.value)
