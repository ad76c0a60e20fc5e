"""A compiled step on the live rows only (runtime/steps.py): the step's
values cut to the rows of its active lanes before the step, and what it
returns put back among the other rows after it, outside the graph.

Masked, a step computes every lane and keeps the active ones' results; on
the live rows it computes those alone (the eager rules do the same, by
gathering rows inside each op), and its graph is compiled once for every
number of rows (their dimension is dynamic).  A MaskedBatch holds one row
per example in every part (data, mask, presence, sizes); a plain Tensor,
a module or a constant is every example's, and stays as it is."""
from ...core import MaskedBatch

_new = MaskedBatch._new


class NoRows(Exception):
    """A value whose rows cannot be taken or put back."""


def _parts(x):
    sizes = tuple(sorted(x._sizes)) if x._sizes else ()
    return [x.padded_data, x._mask, x._present] + [x._sizes[k] for k in sizes], sizes


def _made(x, parts, sizes):
    data, mask, present, *lengths = parts
    return _new(data, mask, x.dims, bdim=x._bdim, present=present,
                sizes=dict(zip(sizes, lengths)) if sizes else None)


def take(x, rows):
    """``x`` with the examples ``rows`` only (a tuple: each of its items)."""
    if type(x) is tuple:
        return tuple(take(v, rows) for v in x)
    if type(x) is not MaskedBatch:
        return x
    if getattr(x, "_listed", None) is not None or getattr(x, "_kept", None) is not None:
        raise NoRows
    parts, sizes = _parts(x)
    return _made(x, [None if p is None else p.index_select(0, rows) for p in parts], sizes)


def put(old, new, rows):
    """``old`` with its examples ``rows`` replaced by ``new``'s (what a
    step on those rows made of it)."""
    if new is old or type(new) is not MaskedBatch:
        return new
    if type(old) is not MaskedBatch or (old.dims, old._bdim) != (new.dims, new._bdim):
        raise NoRows
    (was, sizes), (now, sizes2) = _parts(old), _parts(new)
    if sizes != sizes2 or any((a is None) != (b is None) or (a is not None and (
            a.shape[1:] != b.shape[1:] or a.dtype != b.dtype)) for a, b in zip(was, now)):
        raise NoRows
    return _made(old, [None if a is None else a.index_copy(0, rows, b)
                       for a, b in zip(was, now)], sizes)


def spread(x, rows, n):
    """``x`` (made on the examples ``rows``) among ``n`` examples, zeros in
    the others (an appended value: the list keeps the lanes that made it)."""
    if type(x) is not MaskedBatch:
        return x
    parts, sizes = _parts(x)
    return _made(x, [None if p is None else p.new_zeros((n,) + p.shape[1:]).index_copy(0, rows, p)
                     for p in parts], sizes)
