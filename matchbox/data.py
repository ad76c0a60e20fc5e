"""Data loading: collate examples into MaskedBatches, bucket them by length.

``collate`` is a ``collate_fn`` for ``torch.utils.data.DataLoader``::

    DataLoader(ds, batch_size=32, collate_fn=matchbox.data.collate)
    DataLoader(ds, batch_size=32, collate_fn=matchbox.data.collate(dims=((True,), ())))

An example (one dataset item) is a Tensor, a tuple/list of fields or a dict
of fields (nested as deep as you like).  Every field whose values are Tensors
becomes a :class:`~matchbox.MaskedBatch`, built as
``MaskedBatch.fromlist(values, dims)``; any other field (ints, floats,
strings, ...) is collated by ``torch.utils.data.default_collate`` (ints to a
Tensor ``(B,)``, strings to a list).  The result has the example's structure:
a tuple example gives a tuple of batches, a dict example a dict.

**The leading 1.**  By default a Tensor field already has the example-level
layout of SPEC section 2: a leading dimension of size 1 (a sentence is
``(1, n)``), the same tensor the model takes when run on one example.  For
datasets that yield plain items (a sentence ``(n,)``, a label ``tensor(3)``)
pass ``leading_one=False`` and collate adds the leading 1.  It never guesses:
a ``(1, n)`` item could be either.

**dims.**  ``dims`` gives the dynamic/static flags of each Tensor field, with
the structure of the example: for a Tensor example a tuple of bools (or one
bool for all its dims); for a tuple/list example a sequence with one entry
per field; for a dict example a dict from field name to entry (missing names
are inferred).  ``None`` anywhere means "infer": a dimension is dynamic when
its sizes differ within this batch.  Inference sees only one batch, so a
dimension that happens to have equal sizes in some batch comes out static
there and dynamic elsewhere (code that reads ``x.size(d)`` then works on one
batch and fails on the next); give ``dims`` explicitly in training pipelines.

``BucketBatchSampler`` groups examples of similar length into batches (less
padding, less wasted work) and is passed as ``DataLoader(batch_sampler=...)``.
"""
import functools
import math

import torch
from torch.utils.data import Sampler, default_collate

from .core import MaskedBatch

__all__ = ["collate", "BucketBatchSampler"]


def collate(examples=None, *, dims=None, leading_one=True):
    """Collate a list of examples into MaskedBatches (see the module
    docstring).  Called without ``examples`` it returns a collate function
    with the given ``dims`` and ``leading_one``."""
    if examples is None:
        return functools.partial(collate, dims=dims, leading_one=leading_one)
    examples = list(examples)
    if not examples:
        raise ValueError("collate needs at least one example")
    return _collate(examples, dims, leading_one, "")


def _collate(values, dims, leading_one, path):
    """Collate ``values`` (one per example) of the field at ``path`` (a
    subscript such as ``['x'][0]``; empty for whole examples)."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return _tensors(values, dims, leading_one, path)
    if isinstance(first, dict):
        _same_structure(values, path, lambda v: isinstance(v, dict) and v.keys() == first.keys(),
                        f"a dict with keys {sorted(first)}")
        if dims is not None and not isinstance(dims, dict):
            raise ValueError(f"dims for {_field(path)} (a dict) must be a dict from field name to dims, "
                             f"got {dims!r}")
        unknown = set(dims or ()) - set(first)
        if unknown:
            raise ValueError(f"dims names fields {sorted(unknown)} that {_field(path)} does not have "
                             f"(its fields: {sorted(first)})")
        return type(first)((k, _collate([v[k] for v in values], (dims or {}).get(k),
                                        leading_one, f"{path}[{k!r}]")) for k in first)
    if isinstance(first, (tuple, list)):
        n = len(first)
        _same_structure(values, path, lambda v: isinstance(v, (tuple, list)) and len(v) == n,
                        f"a sequence of {n} fields")
        if dims is not None and (not isinstance(dims, (tuple, list)) or len(dims) != n):
            raise ValueError(f"dims for {_field(path)} (a sequence of {n} fields) must be a sequence "
                             f"of {n} entries, one per field, got {dims!r}")
        fields = [_collate([v[i] for v in values], None if dims is None else dims[i],
                           leading_one, f"{path}[{i}]") for i in range(n)]
        if hasattr(first, "_fields"):  # a namedtuple
            return type(first)(*fields)
        return tuple(fields) if isinstance(first, tuple) else fields
    if dims is not None:
        raise ValueError(f"dims given for {_field(path)}, but its values are {type(first).__name__}s, "
                         f"not Tensors")
    return default_collate(values)


def _same_structure(values, path, ok, what):
    for i, v in enumerate(values):
        if not ok(v):
            raise ValueError(f"example {i}{path} is a {type(v).__name__}, but example 0{path} "
                             f"is {what}; every example needs the same structure")


def _tensors(values, dims, leading_one, path):
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"example {i}{path} is a {type(v).__name__}, but example 0{path} "
                             f"is a Tensor")
        if leading_one and (v.dim() == 0 or v.size(0) != 1):
            raise ValueError(
                f"example {i}{path} has shape {tuple(v.shape)}, without the leading "
                f"dimension of size 1 of an example-level tensor; pass leading_one=False to "
                f"collate items that do not have it (it is then added)")
    if not leading_one:
        values = [v.unsqueeze(0) for v in values]
    try:
        return MaskedBatch.fromlist(values, dims)
    except ValueError as e:
        raise ValueError(f"cannot collate {_field(path)}: {e}") from None


def _field(path):
    return f"field {path}" if path else "the examples"


class BucketBatchSampler(Sampler):
    """Batches of indices of examples with similar lengths.

    Each epoch the indices are shuffled, cut into pools of ``pool_size``
    examples (default ``50 * batch_size``), sorted by length within each
    pool and cut into batches; the batches are shuffled again, so the model
    does not see lengths in order.  With ``shuffle=False`` the whole dataset
    is sorted by length (ties in index order) and batches come shortest
    first.  Every index appears in exactly one batch; only the last batch
    may be smaller, and ``drop_last=True`` drops it.

    With ``seed`` the order is a function of ``seed`` and the epoch, set by
    :meth:`set_epoch` (as for ``DistributedSampler``); without it each
    iteration draws a fresh order from torch's global generator.
    """

    def __init__(self, lengths, batch_size, shuffle=True, drop_last=False, seed=None,
                 pool_size=None):
        self.lengths = torch.as_tensor(lengths).reshape(-1)
        if self.lengths.dtype.is_floating_point or self.lengths.dtype == torch.bool:
            raise ValueError(f"lengths must be integers, got dtype {self.lengths.dtype}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size, self.shuffle, self.drop_last, self.seed = batch_size, shuffle, drop_last, seed
        pool_size = 50 * batch_size if pool_size is None else pool_size
        # a whole number of batches per pool, so only the very last batch is short
        self.pool_size = max(1, math.ceil(pool_size / batch_size)) * batch_size
        self.epoch = 0

    def set_epoch(self, epoch):
        """Use the order of ``epoch`` (with a ``seed``) on the next iteration."""
        self.epoch = epoch

    def __len__(self):
        n = self.lengths.numel()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = self.lengths.numel()
        if not self.shuffle:
            order = torch.sort(self.lengths, stable=True).indices
        else:
            g = torch.Generator()
            if self.seed is None:
                g.manual_seed(int(torch.empty((), dtype=torch.int64).random_()))
            else:
                g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g)
            pools = [p[torch.sort(self.lengths[p], stable=True).indices]
                     for p in order.split(self.pool_size)]
            order = torch.cat(pools) if pools else order
        batches = list(order.split(self.batch_size))
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g)]
        for b in batches:
            yield b.tolist()
