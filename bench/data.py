"""Realistic sizes for the benchmark tasks' synthetic data.

At the ``paper`` size the data looks like the DyNet benchmark's
(github.com/neulab/dynet-benchmark, data/): tagged sentences with WikiNER's
lengths (its dev set: mean 23.0, standard deviation 13.1, 1..144 words;
quantiles 10/25/50/75/90/99% at 10, 14, 20, 29, 40, 67 words, which the gamma
below gives within a word), and binary trees like the Stanford Sentiment
Treebank's (its train set: mean 19.1 leaves, s.d. 9.3, 2..52; mean depth
9.8, s.d. 3.9, at most 29).  The ``small`` size keeps the earlier, shorter
spread so that a laptop run and the tests stay quick.  No data file is read.
"""
import torch

# keyword arguments of ``lengths`` per bench size
SENTENCES = {"small": dict(mean=24, spread=11, low=2, high=80),
             "paper": dict(mean=23, spread=13.1, low=1, high=144)}
TREE_LEAVES = {"small": dict(mean=20, spread=9, low=2, high=50),
               "paper": dict(mean=19.1, spread=9.3, low=2, high=52)}


def lengths(count, mean, spread, low, high, seed=0):
    """``count`` ints drawn from a gamma distribution with this mean and
    standard deviation, clipped to ``low..high`` (sentence lengths in
    treebanks look like this: a long right tail)."""
    g = torch.Generator().manual_seed(seed)
    shape = (mean / spread) ** 2
    gamma = torch.distributions.Gamma(torch.tensor(shape), torch.tensor(shape / mean))
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=g)))
    return gamma.sample((count,)).round().clamp(low, high).long().tolist()


def sentence_lengths(count, size="small", seed=0):
    """Words per sentence for ``count`` sentences at bench ``size``."""
    return lengths(count, seed=seed, **SENTENCES[size])


def tree_leaves(count, size="small", seed=0):
    """Leaves per tree for ``count`` trees at bench ``size``."""
    return lengths(count, seed=seed, **TREE_LEAVES[size])


def sst_split(rng, n):
    """How many of a node's ``n`` leaves go to its left child in a
    Sentiment-Treebank-like bracketing: English parses branch mostly to the
    right, so in SST a node of 3+ leaves has a one-word left child 56% of
    the time and a one-word right child 19%.  Half / 15% / otherwise uniform
    gives SST's depths (mean 9.8, s.d. 3.9 at its leaf counts)."""
    r = rng.random()
    if n <= 3 or r >= 0.65:
        return rng.randint(1, n - 1) if n <= 3 else rng.randint(2, n - 2)
    return 1 if r < 0.5 else n - 1
