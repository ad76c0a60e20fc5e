"""Realistic length spreads for the benchmark tasks."""
import torch


def lengths(count, mean, spread, low, high, seed=0):
    """``count`` ints drawn from a gamma distribution with this mean and
    standard deviation, clipped to ``low..high`` (sentence lengths in
    treebanks look like this: a long right tail)."""
    g = torch.Generator().manual_seed(seed)
    shape = (mean / spread) ** 2
    gamma = torch.distributions.Gamma(torch.tensor(shape), torch.tensor(shape / mean))
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=g)))
    return gamma.sample((count,)).round().clamp(low, high).long().tolist()
