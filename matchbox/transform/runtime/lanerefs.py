"""One example's tensor inside a batch, for per-example Python code.

When ``@batch`` runs Python code for each example on its own (a method of a
per-example object, a builtin, a string method: ``pyvalues.py``), a
MaskedBatch argument is given to each example as a :class:`LaneRef`: the
batch and the example's row, no copy.  Stored on an object (``node.state =
h``) or in a container it stays a reference; read back from the examples
(``nodes.state``) the references are gathered into a MaskedBatch again
(:func:`gather`: one ``index_select`` per source batch, differentiable), so
tensors stay batched.  Only code that computes with a reference itself
(``torch`` functions, operators, tensor methods on it) makes the example's
own Tensor (:meth:`LaneRef.tensor`, a slice of the batch cut to its sizes).
"""
import torch

from ...core import MaskedBatch, unlabeled, storage_to_example

_new = MaskedBatch._new


class LaneRef:
    """Row ``row`` of MaskedBatch ``batch``: one example's value, which acts
    as that example's Tensor where it is computed with."""

    __slots__ = ("batch", "row", "_tensor")

    def __init__(self, batch, row):
        self.batch, self.row, self._tensor = batch, row, None

    def tensor(self):
        """The example's own Tensor (made once; it keeps the gradient)."""
        if self._tensor is None:
            x, b = self.batch, self.row
            t = x.padded_data[b:b + 1]
            if x._mask is not None:
                for d, dyn in enumerate(x.dims, 1):
                    if dyn:
                        t = t.narrow(d, 0, int(x._lengths(d)[b]))
            self._tensor = storage_to_example(t, x._bdim)
        return self._tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*materialized(args), **{k: materialized(v) for k, v in (kwargs or {}).items()})

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.tensor(), name)

    def __repr__(self):
        return f"<example {self.row} of a batch: {self.tensor()!r}>"

    def __bool__(self):
        return bool(self.tensor())

    def __len__(self):
        return len(self.tensor())

    def __iter__(self):
        return iter(self.tensor())

    def __float__(self):
        return float(self.tensor())

    def __int__(self):
        return int(self.tensor())

    def __index__(self):
        return self.tensor().__index__()

    def __format__(self, spec):
        return format(self.tensor(), spec)

    def __getitem__(self, key):
        return self.tensor()[materialized(key)]

    __hash__ = object.__hash__


def _operator(name):
    def op(self, *args):
        return getattr(self.tensor(), name)(*materialized(args))
    op.__name__ = name
    return op


for _name in ("add sub mul truediv floordiv mod pow matmul and or xor lshift rshift "
              "radd rsub rmul rtruediv rfloordiv rmod rpow rmatmul rand ror rxor "
              "eq ne lt le gt ge neg pos abs invert").split():
    setattr(LaneRef, f"__{_name}__", _operator(f"__{_name}__"))


def materialized(x):
    """``x`` with every LaneRef (also inside lists, tuples, dicts) as its Tensor."""
    t = type(x)
    if t is LaneRef:
        return x.tensor()
    if t in (list, tuple):
        return t(materialized(v) for v in x)
    if t is dict:
        return {k: materialized(v) for k, v in x.items()}
    return x


# ------------------------------------------------------------------ gathering
def _rows_of(x, idx):
    """Rows ``idx`` (a LongTensor) of MaskedBatch ``x``, with their masks
    (a mask of static dims only said which rows hold a value: these do)."""
    mask, present, sizes = x._mask, x._present, x._sizes
    n = x._data.size(0)
    if mask is not None and not any(x.dims):
        mask = None
    elif mask is not None and mask.size(0) == n:
        mask = mask.index_select(0, idx)
    if present is not None:
        present = present.index_select(0, idx)
    if sizes is not None:
        sizes = {d: s.index_select(0, idx) for d, s in sizes.items()}
    return _new(x.padded_data.index_select(0, idx), mask, x.dims, x._zero, x._bdim,
                present, sizes)


def common(sources):
    """The sources as one MaskedBatch, concatenated along the batch (padded
    to the larger size along each dimension, which is then dynamic)."""
    if len({s._bdim for s in sources}) > 1:   # (1, d) per example with and without one in front
        sources = [unlabeled(s) for s in sources]
    first = sources[0]
    if any(s.dim() != first.dim() for s in sources):
        raise ValueError(
            "the examples hold tensors of different per-example ranks here (read back from "
            "their objects or containers); a batch holds one rank per value")
    datas = [s.padded_data for s in sources]
    n = datas[0].dim() - 1
    sizes = [max(d.size(i + 1) for d in datas) for i in range(n)]
    dims = tuple(any(s.dims[i] for s in sources) or len({d.size(i + 1) for d in datas}) > 1
                 for i in range(n))
    masked = any(s._mask is not None for s in sources) or dims != first.dims
    padded = []
    for d in datas:
        pad = []
        for i in reversed(range(n)):
            pad += [0, sizes[i] - d.size(i + 1)]
        padded.append(torch.nn.functional.pad(d, pad) if any(pad) else d)
    mask = torch.cat([_mask_in(s, sizes, dims) for s in sources]) if masked else None
    return _new(torch.cat(padded), mask, dims, bdim=first._bdim)


def _mask_in(s, sizes, dims):
    """The mask of ``s`` in the layout ``sizes`` / ``dims`` (a dimension
    dynamic there holds ``s``'s real entries, False beyond them)."""
    m = s.mask
    for i, (n, dy) in enumerate(zip(sizes, dims)):
        if not dy:
            continue
        d, size = i + 1, s.padded_data.size(i + 1)
        if s.dims[i]:
            if m.size(d) < n:
                shape = list(m.shape)
                shape[d] = n - m.size(d)
                m = torch.cat([m, m.new_zeros(shape)], d)
        else:
            view = [1] * m.dim()
            view[d] = n
            m = m & (torch.arange(n, device=m.device) < size).view(view)
    shape = (m.size(0),) + tuple(n if dy else 1 for n, dy in zip(sizes, dims))
    return m.expand(shape)


def gather(refs, B, device=None):
    """The MaskedBatch of ``B`` examples whose example ``b`` is ``refs[b]``
    (a LaneRef, or anything else where lane ``b`` holds no value: that lane
    reads some other row, as a dormant lane does)."""
    srcs, order = {}, []
    for r in refs:
        if type(r) is LaneRef and id(r.batch) not in srcs:
            srcs[id(r.batch)] = len(order)
            order.append(r.batch)
    if all(s._data.size(0) == B for s in order) and all(
            r.row == b for b, r in enumerate(refs) if type(r) is LaneRef):
        # each lane's own row (values made at this batch size): no gather
        return order[0] if len(order) == 1 else _by_lanes(order, srcs, refs)
    if len(order) == 1:
        src = order[0]
        rows = [r.row if type(r) is LaneRef else 0 for r in refs]
        return _rows_of(src, torch.tensor(rows, device=src._data.device))
    offsets, start = [], 0
    for s in order:
        offsets.append(start)
        start += s._data.size(0)
    rows = [offsets[srcs[id(r.batch)]] + r.row if type(r) is LaneRef else 0 for r in refs]
    both = common(order)
    return _rows_of(both, torch.tensor(rows, device=both._data.device))


def _by_lanes(order, srcs, refs):
    """Sources of one layout at the batch size, each lane reading its own
    row of one of them: a ``where`` per source after the first."""
    a = order[0]
    if any(s.dims != a.dims or s._bdim != a._bdim or s._data.shape != a._data.shape
           or s._data.dtype != a._data.dtype or (s._mask is None) != (a._mask is None)
           or s._mask is not None and s._mask.shape != a._mask.shape for s in order):
        both = common(order)
        offsets = [0]
        for s in order[:-1]:
            offsets.append(offsets[-1] + s._data.size(0))
        rows = [offsets[srcs[id(r.batch)]] + r.row if type(r) is LaneRef else 0 for r in refs]
        return _rows_of(both, torch.tensor(rows, device=both._data.device))
    which = torch.tensor([srcs[id(r.batch)] if type(r) is LaneRef else 0 for r in refs],
                         device=a._data.device)
    data, mask = a.padded_data, a._mask
    for k, src in enumerate(order[1:], 1):
        lanes = which == k
        data = torch.where(lanes.view((-1,) + (1,) * (data.dim() - 1)), src.padded_data, data)
        if mask is not None and src._mask is not mask:
            mask = torch.where(lanes.view((-1,) + (1,) * (mask.dim() - 1)), src._mask, mask)
    return _new(data, mask, a.dims, bdim=a._bdim)


def stack(tensors, B):
    """The MaskedBatch of ``B`` examples whose example ``b`` is Tensor (or
    LaneRef) ``tensors[b]`` (anything else: no value, a dormant lane's)."""
    ts = [t.tensor() if type(t) is LaneRef else t for t in tensors]
    real = [t for t in ts if isinstance(t, torch.Tensor)]
    if len({t.dim() for t in real}) > 1:
        raise ValueError(
            f"the examples hold tensors of different per-example ranks here "
            f"({sorted({tuple(t.shape) for t in real}, key=len)}); a batch holds one rank "
            f"per value")
    fill = real[0].detach()
    ts = [t if isinstance(t, torch.Tensor) else fill for t in ts]
    if all(t.shape == fill.shape and t.dtype == fill.dtype and t.device == fill.device
           for t in ts):  # (what fromlist makes of them, without its per-example work)
        return MaskedBatch._new(torch.stack(ts), None, (False,) * fill.dim(), zero=True, bdim=None)
    # no batch-of-one dimension: whether a leading size is 1 in every example
    # depends on the batch, and the layout must not
    dims = tuple(len({t.size(i) for t in ts}) > 1 for i in range(fill.dim()))
    return MaskedBatch.fromlist(ts, dims, None)


def gather_grid(values, lens, n):
    """``k -> item k`` of the lanes' lists ``values`` (``lens``: their
    lengths, ``n`` the longest) of LaneRefs, gathered in one
    ``index_select`` for all of them (None: not all LaneRefs)."""
    if not all(type(r) is LaneRef for v, m in zip(values, lens) if m for r in v):
        return None
    B = len(values)
    srcs, order = {}, []
    for v, m in zip(values, lens):
        for r in (v if m else ()):
            if id(r.batch) not in srcs:
                srcs[id(r.batch)] = len(order)
                order.append(r.batch)
    offsets = [0]
    for src in order[:-1]:
        offsets.append(offsets[-1] + src._data.size(0))
    both = order[0] if len(order) == 1 else common(order)
    idx = [offsets[srcs[id(v[k].batch)]] + v[k].row if k < m else 0
           for v, m in zip(values, lens) for k in range(n)]
    rows = both.padded_data.index_select(0, torch.tensor(idx, device=both._data.device))
    rows = rows.view((B, n) + rows.shape[1:]).unbind(1)   # (one backward node for all)
    mask = both._mask if any(both.dims) else None
    if mask is not None:
        mask = mask.expand((both._data.size(0),) + mask.shape[1:]).index_select(
            0, torch.tensor(idx, device=mask.device)).view((B, n) + mask.shape[1:]).unbind(1)
    return lambda k: _new(rows[k], None if mask is None else mask[k], both.dims,
                          bdim=both._bdim)
