"""Per-lane selection of values: ``select(lanes, a, b)`` is ``a`` in the
given lanes and ``b`` in the others, for every kind of per-example value
(MaskedBatch, Tensor at batch size one, numbers, tuples of them), padding
and widening dynamic dimensions where the two differ."""
import torch

from ...core import MaskedBatch, example_to_storage
from ...ops._registry import presence

_new = MaskedBatch._new


def _lane_view(lanes, ndim):
    return lanes.view((-1,) + (1,) * (ndim - 1))


def _canonical(x, B, like):
    """``(data, mask, dims, batch_dim)`` of a per-example value at batch
    size ``B`` (a plain Tensor is laid out as ``like``, if that is a batch)."""
    if isinstance(x, MaskedBatch):
        return x.padded_data, x._mask, x.dims, x._bdim
    if isinstance(x, torch.Tensor):
        if x.dim() == 0:
            return x.reshape(1).expand(B), None, (), None
        p = like._bdim if isinstance(like, MaskedBatch) else 0
        if p is not None and (x.dim() <= p or x.size(p) != 1):
            raise ValueError(
                f"cannot give a Tensor of shape {tuple(x.shape)} different values per example: a "
                f"per-example value needs its batch-of-one dimension (size 1) at {p}, as the "
                f"other value has")
        one = example_to_storage(x, p)
        return one.expand((B,) + tuple(one.shape[1:])), None, (False,) * (one.dim() - 1), p
    if isinstance(x, (bool, int, float)):
        ld = like.padded_data if isinstance(like, MaskedBatch) else like
        if isinstance(x, bool):
            dtype = torch.bool
        elif isinstance(x, int):
            dtype = ld.dtype if isinstance(ld, torch.Tensor) and not ld.dtype.is_floating_point \
                and ld.dtype != torch.bool else torch.long
            if isinstance(ld, torch.Tensor) and ld.dtype.is_floating_point:
                dtype = ld.dtype
        else:
            dtype = ld.dtype if isinstance(ld, torch.Tensor) and ld.dtype.is_floating_point \
                else torch.get_default_dtype()
        device = ld.device if isinstance(ld, torch.Tensor) else None
        return torch.full((B,), x, dtype=dtype, device=device), None, (), None
    raise TypeError(f"cannot give a {type(x).__name__} different values per example")


def _is_number(x):
    return isinstance(x, (bool, int, float)) or type(x) is torch.Tensor and x.dim() == 0


def example_shape(x):
    """The per-example shape of ``x`` as text (a dynamic dimension shows
    as ``n``)."""
    if isinstance(x, MaskedBatch):
        sizes = ["n" if d else str(s) for s, d in zip(x.padded_data.shape[1:], x.dims)]
        if x.batch_dim is not None:
            sizes.insert(x.batch_dim, "1")
        return "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


class ShapeMismatch(ValueError):
    """Values of different per-example ranks would be held by different
    examples of one variable: no one batch can hold both."""

    def __init__(self, new, old, name=None):
        self.new, self.old, self.name = new, old, name
        what = "a variable" if name is None else f"variable {name!r}"
        super().__init__(
            f"{what} would hold a value of per-example shape {example_shape(new)} in the "
            f"active examples and one of shape {example_shape(old)} in the others (they "
            f"left a loop or took another branch before this assignment). A batch cannot "
            f"hold values of different ranks in one variable: bind the new value to a new "
            f"name, or give both values the same number of dimensions")


def _full_mask(data, mask, dims, sizes_dyn):
    """A canonical mask for ``data`` where the result dims are ``sizes_dyn``."""
    B = data.size(0)
    shape = [B] + [s if d else 1 for s, d in zip(data.shape[1:], sizes_dyn)]
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=data.device)
    return mask.expand(shape)


def _update_of(a, b, lanes):
    """Whether MaskedBatch ``a`` is known to equal ``b`` outside ``lanes``
    (made from ``b``'s data by a rule that wrote only these lanes' rows)."""
    made = getattr(a, "_update_of", None)
    return made is not None and made[0] is b.padded_data and made[1] == made[0]._version \
        and made[2] is lanes


def _same_layout(a, b):
    """Whether MaskedBatches ``a`` and ``b`` have one data shape, dtype,
    dims and batch-of-one place, and masks of one shape (or the same mask):
    a per-lane selection of them needs no padding or widening."""
    ma, mb = a._mask, b._mask
    return a.dims == b.dims and a._bdim == b._bdim and a._data.shape == b._data.shape \
        and a._data.dtype == b._data.dtype \
        and (ma is mb or ma is not None and mb is not None and ma.shape == mb.shape)


def rebuilt(like, items):
    """A tuple or list of ``like``'s type holding ``items`` (a namedtuple
    such as ``State(h, c)`` takes them as its fields)."""
    return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)


def _requires_grad(x):
    if isinstance(x, (tuple, list)):
        return any(_requires_grad(v) for v in x)
    return isinstance(x, (torch.Tensor, MaskedBatch)) and x.requires_grad


def select(lanes, a, b):
    """Per lane: ``a`` where ``lanes`` else ``b`` (values of any per-example
    kind: MaskedBatch, Tensor at batch size one, numbers, tuples of them).

    Each lane keeps its value's autograd history whatever the grad mode
    (an assignment under ``with torch.no_grad():`` in a branch must not cut
    the gradients of the lanes that did not take it)."""
    if not torch.is_grad_enabled() and (_requires_grad(a) or _requires_grad(b)):
        with torch.enable_grad():
            return _select(lanes, a, b)
    return _select(lanes, a, b)


def _select(lanes, a, b):
    if a is b:
        return a
    if type(a) is MaskedBatch and type(b) is MaskedBatch and _same_layout(a, b):
        # the common case (loop state of one shape): one where, and one on
        # the masks unless they are the same Tensor
        if _update_of(a, b, lanes):
            return a
        ma, mb = a._mask, b._mask
        mask = ma if ma is mb else torch.where(_lane_view(lanes, ma.dim()), ma, mb)
        return _new(torch.where(_lane_view(lanes, a.padded_data.dim()), a.padded_data,
                                b.padded_data), mask, a.dims, bdim=a._bdim,
                    present=_present(lanes, a, b), sizes=a._sizes if a._sizes is b._sizes else None)
    if isinstance(a, (tuple, list)) and type(a) is type(b) and len(a) == len(b) \
            and any(isinstance(v, (torch.Tensor, MaskedBatch)) for v in a):
        return rebuilt(a, [select(lanes, x, y) for x, y in zip(a, b)])
    tensors = (torch.Tensor, MaskedBatch)
    if not isinstance(a, tensors) and not isinstance(b, tensors):
        if isinstance(a, (bool, int, float)) and isinstance(b, (bool, int, float)):
            if a == b and type(a) is type(b):
                return a
        else:
            try:
                if a == b:
                    return a
            except Exception:
                pass
            raise TypeError(
                f"a value of type {type(a).__name__} and one of type {type(b).__name__} "
                f"would have to be held by different examples of one variable; @batch can "
                f"only do that for tensors and numbers")
    B = lanes.size(0)
    da, ma, dimsa, pa = _canonical(a, B, b)
    db, mb, dimsb, pb = _canonical(b, B, a)
    if da.dim() != db.dim() or pa != pb:
        # a number is the same in every shape: it broadcasts to the other value's
        if da.dim() == 1 and _is_number(a):
            da = da.reshape((B,) + (1,) * (db.dim() - 1))
            dimsa, pa = (False,) * (db.dim() - 1), pb
        elif db.dim() == 1 and _is_number(b):
            db = db.reshape((B,) + (1,) * (da.dim() - 1))
            dimsb, pb = (False,) * (da.dim() - 1), pa
        else:
            raise ShapeMismatch(a, b)
    dtype = torch.promote_types(da.dtype, db.dtype)
    da, db = da.to(dtype), db.to(dtype)
    dims, masked = [], ma is not None or mb is not None
    for i in range(1, da.dim()):
        sa, sb = da.size(i), db.size(i)
        dyn = dimsa[i - 1] or dimsb[i - 1]
        if sa != sb and (dyn or (sa != 1 and sb != 1)):
            dyn, masked = True, True
        elif sa != sb:
            # a size-1 static dim meets a larger one: broadcast it
            if sa == 1:
                da = da.expand(*[-1] * i, sb, *[-1] * (da.dim() - i - 1))
            else:
                db = db.expand(*[-1] * i, sa, *[-1] * (db.dim() - i - 1))
        dims.append(dyn)
    mask = None
    if masked:
        ma2 = _pad_to(da, ma, dimsa, dims, db)
        mb2 = _pad_to(db, mb, dimsb, dims, da)
        da, db = _pad_data(da, db), _pad_data(db, da)
        mask = torch.where(_lane_view(lanes, ma2.dim()), ma2, mb2)
    data = torch.where(_lane_view(lanes, da.dim()), da, db)
    return _new(data, mask, tuple(dims), bdim=pa, present=_present(lanes, a, b))


def _present(lanes, a, b):
    """``_present`` of the per-lane selection of ``a`` and ``b``: None
    unless one has an empty example (see core.absent_examples)."""
    pa = a._present if isinstance(a, MaskedBatch) else None
    pb = b._present if isinstance(b, MaskedBatch) else None
    if pa is None and pb is None:
        return None
    ones = torch.ones_like(lanes)
    qa = presence(a) if isinstance(a, MaskedBatch) else None
    qb = presence(b) if isinstance(b, MaskedBatch) else None
    return torch.where(lanes, ones if qa is None else qa, ones if qb is None else qb)


def _pad_data(x, other):
    pads = []
    for i in reversed(range(1, x.dim())):
        pads += [0, max(0, other.size(i) - x.size(i))]
    return torch.nn.functional.pad(x, pads) if any(pads) else x


def _pad_to(x, mask, xdims, dims, other):
    """The canonical mask of ``x`` in the result's layout (padded to the
    larger size along each dimension, lengths for newly dynamic dims)."""
    B = x.size(0)
    m = _full_mask(x, mask, xdims, xdims)
    out_shape = [B]
    for i in range(1, x.dim()):
        n = max(x.size(i), other.size(i))
        if dims[i - 1]:
            if not xdims[i - 1]:
                # static in x: every entry up to its size is real
                real = torch.arange(n, device=x.device) < x.size(i)
                view = [1] * x.dim()
                view[i] = n
                m = m.expand(*[-1] * i, 1, *[-1] * (x.dim() - i - 1)) & real.view(view)
            elif m.size(i) < n:
                pad = [0, 0] * (x.dim() - 1 - i) + [0, n - m.size(i)]
                m = torch.nn.functional.pad(m, pad, value=False)
            out_shape.append(n)
        else:
            out_shape.append(1)
    return m.expand(out_shape)
