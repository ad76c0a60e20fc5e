"""The MaskedBatch type: a batch of examples that differ in size.

``padded_data`` is ``(B, n_1, ..., n_k)``; ``dims[i]`` says whether dimension ``i+1``
is dynamic (sizes differ between examples) or static; ``mask`` is a bool
Tensor ``(B, m_1, ..., m_k)`` with ``m_i = n_i`` for a dynamic dimension and
``1`` for a static one.  Each example's real data is a prefix along every
dynamic dimension.  Values under ``False`` are arbitrary.

``data`` is PyTorch's ``.data``: the batch detached (per-example code reads
it, so it must not be the padded Tensor of all the examples).

Internally the mask may be ``None``, meaning "every entry is real": such a
batch pays for no mask work at all.  ``batch.mask`` always returns a Tensor.

Ops reach MaskedBatch through ``__torch_function__`` and the rule table in
:mod:`matchbox.ops._registry`; this module holds only the type itself,
its validation, conversions and sizes.
"""
import dataclasses
import sys

import torch
import torch.utils._pytree

from . import _lanes
from ._sizes import ExampleShape, per_example

__all__ = ["MaskedBatch", "mask_from_lengths"]

# torch callable -> rule; filled by matchbox.ops (see ops/_registry.py)
RULES = {}

_NO_HOST_VALUE = (
    "cannot turn a MaskedBatch into a single Python value: each example has "
    "its own. Put per-example control flow under @matchbox.batch, or reduce "
    "explicitly with .any() / .all() (a size of a dynamic dimension, x.size(d), is such a "
    "value: x.size_as_tensor(d) gives the sizes as a Tensor, x.maxsize(d) the padded size)."
)


def _unconverted_caller():
    """``(where, batch_fn)`` when the code that reads a Python value off a
    MaskedBatch runs inside a ``@batch`` call but was not rewritten by it
    (a helper function, library code): ``where`` names that code, and
    ``batch_fn`` the @batch function that called it; else None."""
    api = sys.modules.get("matchbox.transform.api")
    if api is None:
        return None
    frame = sys._getframe(2)
    user = None
    while frame is not None:
        code = frame.f_code
        if code in api.CONVERTED_CODES:
            if user is None:
                return None  # the rewritten code itself (e.g. x.tolist())
            return f"{user.co_name} ({user.co_filename}:{user_line})", code.co_name
        if user is None and not code.co_filename.startswith(_PACKAGE_DIR):
            user, user_line = code, frame.f_lineno
        frame = frame.f_back
    return None


_PACKAGE_DIR = __file__.rsplit("/", 1)[0]


def _host_value_error(what):
    """The message for ``what`` (a read of one Python value) on a MaskedBatch."""
    where = _unconverted_caller()
    if where is None:
        return f"{what}: " + _NO_HOST_VALUE
    return (f"{what} in {where[0]}: that code runs inside @batch function {where[1]} but "
            f"@batch did not rewrite it, so it cannot read each example's own value; "
            f"decorate it with @matchbox.batch too (then .item(), int(), float(), bool(), "
            f"len() and x.size(d) give a value per example), or reduce explicitly with "
            f".any() / .all()")


def _as_dims(dims, n):
    if isinstance(dims, bool):
        dims = (dims,) * n
    try:
        dims = tuple(dims)
    except TypeError:
        raise ValueError(f"dims must be a tuple of bools, got {dims!r}") from None
    if not all(isinstance(d, (bool, int)) and d in (0, 1) for d in dims):
        raise ValueError(f"dims must be a tuple of bools, got {dims!r}")
    return tuple(bool(d) for d in dims)


def mask_from_lengths(lengths, shape, dims, device=None):
    """The prefix mask for ``shape = (B, n_1, ...)`` given ``lengths``, a dict
    mapping each dynamic dimension index (1-based, as in ``padded_data``) to a
    LongTensor ``(B,)`` of per-example sizes.  Static dims get size 1.

    An example of length 0 along some dimension gets no real entry, as an
    example that holds no value: say it is present with ``empty_present``."""
    mask = None
    ndim = len(shape)
    for d, length in lengths.items():
        length = torch.as_tensor(length, device=device).reshape(-1)
        view = [1] * ndim
        view[0], view[d] = shape[0], shape[d]
        m = (torch.arange(shape[d], device=length.device) < length[:, None]).view(view)
        mask = m if mask is None else mask & m
    if mask is None:
        return None
    full = [shape[0]] + [shape[i] if dims[i - 1] else 1 for i in range(1, ndim)]
    return mask.expand(full)


def empty_present(lengths, present=None):
    """The presence (``MaskedBatch._present``) of a batch whose mask was made
    from ``lengths`` (see ``mask_from_lengths``) and whose examples hold a
    value where ``present`` (bool ``(B,)``, None: all) says: None (the mask
    decides) unless some example has length 0 along a dimension, which
    the mask alone would show as holding no value.  Reads the lengths on
    the host (as validation does), so only where they are made."""
    zero = [n for n in lengths.values() if n.numel() and bool((n == 0).any())]
    if not zero:
        return None
    if present is not None:
        return present
    n = zero[0]
    return torch.ones(n.numel(), dtype=torch.bool, device=n.device)


def empty_sizes(lengths, present):
    """The sizes to record (``MaskedBatch._sizes``) for a batch with
    several dynamic dims whose mask was made from ``lengths``: only when an
    example present (``present``) is empty along one dim but not along
    another, whose size its mask cannot show; else None."""
    if present is None or len(lengths) < 2:
        return None
    ls = list(lengths.values())
    empty = torch.stack([n == 0 for n in ls]).any(0)
    hidden = torch.stack([n > 0 for n in ls]).any(0) & empty & present
    return dict(lengths) if bool(hidden.any()) else None




def _check_mask_examples(mask, dims):
    """Raise unless every example of ``mask`` is a box: real wherever its
    index along each dynamic dimension is below its size there (two dynamic
    dimensions of sizes 2 and 2 make all 4 entries real, never 3)."""
    B = mask.size(0)
    dyn = [i + 1 for i, d in enumerate(dims) if d and mask.size(i + 1) > 1]
    if len(dyn) < 2:
        return
    lengths = {}
    for d in dyn:
        other = [i for i in range(1, mask.dim()) if i != d]
        lengths[d] = mask.any(dim=other).sum(-1)
    box = mask_from_lengths(lengths, mask.shape, dims, device=mask.device)
    bad = (box != mask).reshape(B, mask.shape[1:].numel()).any(1)
    if bool(bad.any()):
        raise ValueError(
            f"the mask of examples {bad.nonzero().flatten().tolist()} is not rectangular: "
            f"with several dynamic dimensions each example's real entries must be every "
            f"index below its size along each of them (e.g. a 2 x 2 example is 4 real "
            f"entries, not 3); an example cannot have rows of different lengths")


def absent_examples(x):
    """The bool ``(B,)`` of examples of MaskedBatch ``x`` that hold no value
    (the result of a step those examples do not have, such as
    ``x.unbind(1)[t]`` past their length), or None when all hold one.

    ``x._present`` says which examples hold a value; when it is None (no
    example is empty), the mask does: an example with no real entry holds
    none.  An example of length 0 along a dynamic dimension is present."""
    if x._present is not None:
        return ~x._present
    mask = x._mask
    if mask is None:
        return None
    B = mask.size(0)
    return ~mask.reshape(B, mask.shape[1:].numel()).any(1)


_NO_VALUE_WHY = (
    "it was computed in a step those examples do not have (e.g. the padded steps of "
    "x.unbind(d) walked outside @matchbox.batch, where the last step is not every "
    "example's last), or MaskedBatch(data, mask, dims) was given a mask that marks "
    "none of their entries real with only static dims (with a dynamic dim, such an example "
    "is one of length 0, which holds a value)")


def refuse_absent(x, what):
    """Raise when some example of MaskedBatch ``x`` holds no value: ``what``
    (a loss combined over examples, a backward pass) would silently leave it
    out, where the per-example code gives it a value."""
    absent = absent_examples(x)
    if absent is None:
        return
    if absent.device.type != "cpu" or torch.compiler.is_compiling():
        # no host-device sync, no graph break (as ops/_registry.fail_if)
        torch._assert_async(~absent.any(), f"{what}: some examples of this batch hold no value "
                                           f"(run eagerly on CPU to see which and why)")
        return
    if bool(absent.any()):
        raise ValueError(
            f"{what}: examples {absent.nonzero().flatten().tolist()} of this batch hold no "
            f"value, so they would be left out silently: {_NO_VALUE_WHY}. Put the per-example "
            f"loop under @matchbox.batch, or index per example: x[:, -1] is each example's "
            f"own last step")


class _CutDormant(torch.autograd.Function):
    """``x``'s values, but no gradient through the rows of dormant lanes
    (``lanes`` False): what they compute adds none, not even NaN.  The
    forward is a copy (not a view: an op may save it for its backward, and
    an in-place update of ``x`` later, which per example may be fine where
    that op's result is never used, must not change what it saved); the
    backward zeroes those rows."""

    @staticmethod
    def forward(ctx, x, lanes):
        ctx.save_for_backward(lanes)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        from .ops._registry import keep
        lanes, = ctx.saved_tensors
        return keep(lanes, grad, 0), None


class MaskedBatch:
    """A batch of ``B`` examples with the same number of dimensions and
    per-example sizes along the dynamic ones.  See SPEC section 2."""

    # _zero_at: (data, its version) when every entry outside _mask was known
    # to be exactly 0 (set by rules that zero their padding, kept by ops that
    # map 0 to 0), so rules that need zero padding skip re-masking; None means
    # "unknown".  Read it as the property _zero.
    # _listed: set by @batch's list append on the items it stores, as
    # (lanes that hold the item, per-lane list length up to the item or None)
    # _rows: the real rows gathered by ops.on_real_rows, kept for the next op
    # _cut: lanes whose gradient @batch's read cuts (see the padded_data
    # property); _data stays the value read (its storage), and _cutd caches
    # the cut as (the value's version, the cut Tensor)
    # _kept: set by a compacted @batch for loop on the values it keeps
    # compacted between iterations (see transform/compaction.py)
    # _update_of: (base data, its version, lanes), set by a rule whose result
    # equals ``base`` outside the active ``lanes`` (an RNN cell writes its
    # new state rows into the old state), so @batch's masked update of that
    # state by this result is the result itself (runtime.select)
    # _bdim: where each example's batch-of-one dimension sits in the shape
    # the per-example code sees (0, another position, or None: it has none);
    # the storage is batch-first whatever it is (see ``storage_dim``)
    # _present: None (the mask says which examples hold a value: those with
    # a real entry), or a bool (B,) saying it, set where some example is
    # empty (length 0 along a dynamic dim: a real example with no real
    # entry); see ``absent_examples``.  Rules keep it (ops/_registry.py,
    # ``keep_presence``), and a None one costs them nothing.
    # _sizes: None, or {data dim: (B,) lengths} of the dynamic dims, where
    # an example is empty along one and not along another (its mask cannot
    # show that other size); read by ``_lengths``
    __slots__ = ("_data", "_cut", "_cutd", "_mask", "dims", "_bdim", "_zero_at", "_rows",
                 "_listed", "_kept", "_update_of", "_present", "_sizes", "__weakref__")

    def __init__(self, data, mask=None, dims=None, batch_dim=0):
        if not isinstance(data, torch.Tensor):
            raise ValueError(f"MaskedBatch data must be a Tensor, got {type(data).__name__}")
        if data.dim() < 1:
            raise ValueError("MaskedBatch data needs a batch dimension; got a 0-dim Tensor")
        n = data.dim() - 1
        if dims is None:
            dims = (False,) * n if mask is None else tuple(mask.size(i + 1) != 1 for i in range(n))
        dims = _as_dims(dims, n)
        if len(dims) != n:
            raise ValueError(
                f"dims has {len(dims)} entries but data of shape {tuple(data.shape)} has "
                f"{n} non-batch dimensions; give one bool per dimension after the batch one")
        if mask is not None:
            if not isinstance(mask, torch.Tensor):
                raise ValueError(f"mask must be a bool Tensor or None, got {type(mask).__name__}")
            if mask.dtype != torch.bool:
                raise ValueError(f"mask must have dtype torch.bool, got {mask.dtype}")
            if mask.device != data.device:
                raise ValueError(f"mask is on {mask.device} but data is on {data.device}")
            if mask.dim() != data.dim():
                raise ValueError(
                    f"mask has {mask.dim()} dimensions but data has {data.dim()}; "
                    f"mask must be (B, m_1, ..., m_k) with m_i = n_i (dynamic) or 1 (static)")
            if mask.size(0) != data.size(0):
                raise ValueError(f"mask batch size {mask.size(0)} != data batch size {data.size(0)}")
            for i, dyn in enumerate(dims):
                want = data.size(i + 1) if dyn else 1
                if mask.size(i + 1) != want:
                    kind = "dynamic" if dyn else "static"
                    raise ValueError(
                        f"mask size {mask.size(i + 1)} along {kind} dimension {i + 1} should be "
                        f"{want} (data shape {tuple(data.shape)}, mask shape {tuple(mask.shape)})")
                if dyn and mask.size(i + 1) > 1:
                    m = mask.movedim(i + 1, -1)
                    if bool((m[..., 1:] & ~m[..., :-1]).any()):
                        raise ValueError(
                            f"mask along dynamic dimension {i + 1} is not a prefix: each "
                            f"example's real data must start at index 0 with no gaps")
            _check_mask_examples(mask, dims)
        if batch_dim is not None and not (isinstance(batch_dim, int) and 0 <= batch_dim <= n):
            raise ValueError(
                f"batch_dim must be None (the examples have no batch-of-one dimension) or a "
                f"position 0..{n} in each example's shape, got {batch_dim!r}")
        self._data, self._cut, self._mask, self.dims = data, None, mask, dims
        self._zero_at = self._rows = self._sizes = self._cutd = None
        self._bdim = batch_dim
        # with a dynamic dim, an example whose mask marks no entry real is
        # one of length 0 (present); with only static dims it holds no value
        self._present = None
        if mask is not None and any(dims) and mask.numel():
            some = mask.reshape(mask.size(0), -1).any(1)
            if not bool(some.all()):
                self._present = torch.ones_like(some)

    @classmethod
    def _new(cls, data, mask, dims, zero=False, bdim=0, present=None, sizes=None):
        """Unchecked constructor used by op rules on their hot paths; ``zero``
        promises that ``data`` is 0 wherever ``mask`` is False; ``bdim`` is
        the place of the batch-of-one dimension (see ``batch_dim``);
        ``present`` and ``sizes`` are ``_present`` and ``_sizes``."""
        self = object.__new__(cls)
        self._data, self._cut, self._mask, self.dims, self._rows = data, None, mask, dims, None
        self._cutd = None
        self._zero_at = (data, data._version) if zero else None
        self._bdim, self._present, self._sizes = bdim, present, sizes
        return self

    @property
    def batch_dim(self):
        """Where each example's batch-of-one dimension sits in the shape the
        per-example code sees: 0 (``(1, n, d)``, the default), another
        position (``(n, 1, d)``, sequence-first), or None (``(n, d)``: no
        batch dimension, the ``torch.func.vmap`` convention).  The padded
        data is batch-first whatever it is."""
        return self._bdim

    @classmethod
    def _read(cls, x, lanes):
        """``x`` as @batch's ``read`` gives it inside a masked region: the
        gradient of its dormant lanes (False in ``lanes``) is cut, so what
        they compute there adds none.  The cut is made when the data is
        first used; rules that never read dormant lanes take ``uncut(x)``
        and skip it.  The read shares ``x``'s storage: an in-place op on it
        writes ``x``, and a change of ``x`` in place shows in it."""
        self = cls._new(x._data, x._mask, x.dims, bdim=x._bdim, present=x._present,
                        sizes=x._sizes)
        c = x._cut  # a read of a read: cut the lanes dormant in either
        self._cut = lanes if c is None or c is lanes or getattr(lanes, "_mb_within", None) is c \
            else c & lanes
        return self

    @property
    def padded_data(self):
        """The padded data Tensor ``(B, n_1, ..., n_k)``: every example's
        values, padding included (see ``mask``).  Rules and code that leaves
        matchbox read this; per-example code reads ``data``, as in PyTorch."""
        lanes = self._cut
        if lanes is None:
            return self._data
        d = self._data
        if not (d.requires_grad and torch.is_grad_enabled()):
            return d
        # the cut is a copy, made again once the value changes in place
        version = None if torch.compiler.is_compiling() else d._version
        c = self._cutd
        if c is None or c[0] != version:
            cut = _CutDormant.apply(d, lanes.view((-1,) + (1,) * (d.dim() - 1)))
            c = self._cutd = (version, cut)
        return c[1]

    @padded_data.setter
    def padded_data(self, value):
        self._data, self._cut, self._cutd = value, None, None

    @property
    def data(self):
        """PyTorch's ``.data``: this batch detached from autograd (same mask
        and dims, sharing storage), so per-example code that reads
        ``out.data.topk(1)`` gets each example's own answer.  The padded
        Tensor is ``padded_data``."""
        return self.detach()

    @data.setter
    def data(self, value):
        """``x.data = y.data`` as in PyTorch: ``x`` takes ``y``'s values (and
        its per-example sizes) in place, outside autograd; ``x`` stays the
        same batch and keeps ``requires_grad``.  ``value`` is a MaskedBatch
        of the same batch size, or a Tensor holding one example (in this
        batch's layout) that every example takes."""
        if _lanes.active_lanes() is not None:
            raise NotImplementedError(
                "x.data = ... inside per-example control flow under @matchbox.batch would "
                "replace the values of every example, active or not; assign the variable "
                "instead (x = ...)")
        if isinstance(value, MaskedBatch):
            if value.batch_size != self.batch_size:
                raise ValueError(
                    f"x.data = y: y holds {value.batch_size} examples, x holds {self.batch_size}")
            data, mask, dims = value.padded_data.detach(), value._mask, value.dims
            bdim, present, sizes = value._bdim, value._present, value._sizes
        elif isinstance(value, torch.Tensor):
            one = example_to_storage(value, self._bdim, "x.data = t: the plain Tensor")
            data = one.detach().expand((self.batch_size,) + tuple(one.shape[1:]))
            mask, dims, bdim = None, (False,) * (one.dim() - 1), self._bdim
            present = sizes = None
        else:
            raise TypeError(f"x.data = value needs a MaskedBatch or a Tensor, got {type(value).__name__}")
        if mask is not None and mask.device != data.device:
            mask = mask.to(data.device)
        old = self._data
        old.data = data.to(old.device) if data.device != old.device else data
        self._mask, self.dims, self._zero_at, self._rows = mask, dims, None, None
        self._bdim, self._present, self._sizes = bdim, present, sizes

    @property
    def _zero(self):
        """True when every entry outside the mask is known to be exactly 0:
        promised when the data was made, and the data is the same tensor,
        not changed in place since (``x.padded_data.add_(1)`` voids the promise).
        Never under torch.compile, which cannot follow tensor versions."""
        z = self._zero_at  # None while a gradient cut is pending (see _read)
        return z is not None and not torch.compiler.is_compiling() and z[0] is self._data \
            and z[1] == self._data._version

    @_zero.setter
    def _zero(self, flag):
        self._zero_at = (self.padded_data, self.padded_data._version) if flag else None

    # ------------------------------------------------------------ dispatch
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        rule = RULES.get(func)
        if rule is None:  # the general fallback (ops/fallback.py)
            from .ops.fallback import fallback
            return fallback(func, args, kwargs or {})
        return dispatch(func, rule, args, kwargs or {})

    def __getattr__(self, name):
        # Only reached for names the class does not define: Tensor methods
        # that have no rule, which the general fallback serves (ops/fallback.py).
        if not name.startswith("_") and hasattr(torch.Tensor, name):
            from .ops.fallback import method
            return method(self, name)
        raise AttributeError(f"'MaskedBatch' object has no attribute '{name}'")

    # ------------------------------------------------------------ masks
    @property
    def mask(self):
        if self._mask is not None:
            return self._mask
        shape = [self._data.size(0)] + [
            s if d else 1 for s, d in zip(self._data.shape[1:], self.dims)]
        return torch.ones(shape, dtype=torch.bool, device=self._data.device)

    @property
    def padded(self):
        """True if some entry is not real (the mask is not known all-true)."""
        return self._mask is not None

    def _lengths(self, d):
        """LongTensor ``(B,)`` of per-example sizes along data dimension d."""
        B = self._data.size(0)
        if self._mask is None or not self.dims[d - 1]:
            return torch.full((B,), self._data.size(d), dtype=torch.long, device=self._data.device)
        sizes = self._sizes
        if sizes is not None and d in sizes:
            return sizes[d]
        m = self._mask
        other = [i for i in range(1, m.dim()) if i != d]
        if other:
            m = m.any(dim=other) if len(other) > 1 else m.any(dim=other[0])
        return m.sum(-1)

    # ------------------------------------------------------------ sizes
    @property
    def batch_size(self):
        return self._data.size(0)

    @property
    def device(self):
        return self._data.device

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def is_cuda(self):
        return self._data.is_cuda

    @property
    def requires_grad(self):
        return self._data.requires_grad

    @property
    def is_nested(self):
        """False: not a ``torch.nested`` tensor (nn.MultiheadAttention and the
        Transformer modules read this to pick their code path)."""
        return False

    # Tensor attributes that torch code reads (hasattr(x, "grad_fn"), x.is_leaf,
    # x.layout ...): what the padded data, which every example shares, says
    for _name in ("grad_fn", "is_leaf", "layout", "output_nr", "retains_grad", "itemsize",
                  "is_cpu", "is_ipu", "is_maia", "is_meta", "is_mkldnn", "is_mps", "is_mtia",
                  "is_quantized", "is_sparse", "is_sparse_csr", "is_vulkan", "is_xla", "is_xpu"):
        locals()[_name] = property(lambda self, _n=_name: getattr(self.padded_data, _n),
                                   doc=f"``{_name}`` of the padded data.")
    del _name

    @property
    def names(self):
        """No named dimensions: ``None`` per dimension, as an unnamed Tensor."""
        return (None,) * self._data.dim()

    def __format__(self, spec):
        if not spec:
            return repr(self)
        raise TypeError(
            f"cannot format a MaskedBatch with {spec!r}: it holds one value per example, not "
            f"one number. Combine the examples first, e.g. "
            f"f\"{{matchbox.example_mean(loss).item():{spec}}}\", or format each example: "
            f"[f\"{{e.item():{spec}}}\" for e in loss.examples()]")

    def requires_grad_(self, flag=True):
        self.padded_data.requires_grad_(flag)
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Backpropagate the sum over examples of their real entries: what a
        loop over single examples that calls ``backward()`` on each
        accumulates (e.g. on per-example losses, the sum of the examples'
        losses; combine them otherwise with ``matchbox.example_mean`` /
        ``token_mean``).  ``gradient`` (a MaskedBatch, or a Tensor or number
        that broadcasts against the padded data) weights the real entries;
        padding gets none.  The other arguments are ``Tensor.backward``'s."""
        data = self.padded_data
        refuse_absent(self, "backward")
        if gradient is None:
            if not (data.is_floating_point() or data.is_complex()):
                raise RuntimeError("backward: a MaskedBatch of integers has no gradient")
            g = torch.ones_like(data) if self._mask is None else self._mask.expand(data.shape).to(data.dtype)
        else:
            if isinstance(gradient, MaskedBatch):
                mask = gradient._mask if self._mask is None else (
                    self._mask if gradient._mask is None else self._mask & gradient._mask)
                gradient = gradient.padded_data
            else:
                mask = self._mask
            g = torch.as_tensor(gradient, dtype=data.dtype, device=data.device).expand(data.shape)
            if mask is not None:
                g = torch.where(mask, g, torch.zeros((), dtype=data.dtype, device=data.device))
        torch.autograd.backward(data, g, retain_graph=retain_graph, create_graph=create_graph,
                                inputs=inputs)

    @property
    def grad(self):
        g = self.padded_data.grad
        return None if g is None else MaskedBatch._new(g, self._mask, self.dims, bdim=self._bdim,
                                                       present=self._present, sizes=self._sizes)

    def dim(self):
        """The number of dimensions of one example (its batch-of-one
        dimension included, if it has one)."""
        return self._data.dim() - (self._bdim is None)

    def is_floating_point(self):
        return self._data.is_floating_point()

    def is_complex(self):
        return self._data.is_complex()

    def element_size(self):
        return self._data.element_size()

    def get_device(self):
        return self._data.get_device()

    @property
    def ndim(self):
        return self.dim()

    def _norm_dim(self, d):
        return storage_dim(self, d)

    def size(self, dim=None):
        """The per-example size (SPEC section 2): the leading dimension, each
        example's batch of one, has size 1 (``batch_size`` is the number of
        examples); a static dimension has its size; a dynamic one has a
        per-example int, and ``size()`` then an ``ExampleShape`` (see
        ``matchbox/_sizes.py``: where one Python int is needed they raise,
        naming ``size_as_tensor``, except under @batch)."""
        if dim is None:
            if any(self.dims):
                return ExampleShape(self.size(d) for d in range(self.dim()))
            return self.maxsize()
        d = storage_dim(self, dim)
        if d == 0:
            return 1
        if self.dims[d - 1]:
            return per_example(self._lengths(d))
        return self._data.size(d)

    @property
    def shape(self):
        return self.size()

    def numel(self):
        """The number of entries of one example: static sizes only (a
        dynamic dimension has no single size; ``size_as_tensor`` gives the
        per-example sizes)."""
        dyn = [i + 1 for i, d in enumerate(self.dims) if d]
        if dyn:
            raise ValueError(
                f"numel(): dimensions {dyn} are dynamic (their size differs between examples), "
                f"so the examples have different numbers of entries; use size_as_tensor(d) "
                f"for per-example sizes, or x.sum()-style reductions, which count real entries")
        return self.size().numel()

    nelement = numel

    def maxsize(self, dim=None):
        """The padded size: of a dynamic dimension, the largest example's
        (at least); otherwise as ``size``, leading with each example's 1."""
        if dim is None:
            shape = list(self._data.shape[1:])
            if self._bdim is not None:
                shape.insert(self._bdim, 1)
            return torch.Size(shape)
        d = storage_dim(self, dim)
        return 1 if d == 0 else self._data.size(d)

    def size_as_tensor(self, dim):
        """Per-example sizes along ``dim`` as a MaskedBatch of longs (one
        scalar per example, batch shape ``(B,)``)."""
        d = storage_dim(self, dim)
        if d == 0:
            sizes = torch.ones(self._data.size(0), dtype=torch.long, device=self._data.device)
        else:
            sizes = self._lengths(d)
        return MaskedBatch._new(sizes, None, ())

    def __len__(self):
        """The size of each example's dimension 0: 1 where that is its
        batch-of-one dimension (``batch_size`` counts the examples).

        A batch of integers or bools may be an index, and torch's indexing
        (``table[idx]``, ``table[idx] = v`` with ``table`` a plain Tensor)
        takes the len() of an index that is no Tensor to ask whether it is a
        sequence of indices; a per-example index is one index.  So len() of
        such a batch raises TypeError, which tells torch so (as a 0-dim
        tensor's does); its size is ``x.size(0)``.  (Under @batch, len(x)
        is rewritten and gives each example's own size.)"""
        if self.dim() == 0:
            raise TypeError("len() of a 0-d tensor")
        if not (self._data.is_floating_point() or self._data.is_complex()):
            raise TypeError(
                "len() of a MaskedBatch of integers or bools: it may be an index, which "
                "torch's indexing takes as one index (table[idx]) only if len() fails; read "
                "its size with x.size(0)")
        n = self.size(0)
        if type(n) is not int:
            raise ValueError(
                "len(x): dimension 0 is dynamic (its size differs between examples), so it has "
                "no single int size; use size_as_tensor(0) for per-example sizes or maxsize(0) "
                "for the padded size (under @matchbox.batch, len(x) is each example's own)")
        return n

    # ------------------------------------------------------------ no host values
    def __bool__(self):
        raise TypeError(_host_value_error("bool(x) (or an if/while on x)"))

    def _no_host(self, *args, **kwargs):
        raise TypeError(_NO_HOST_VALUE)

    __complex__ = tolist = numpy = _no_host

    def item(self):
        raise TypeError(_host_value_error("x.item()"))

    def __int__(self):
        raise TypeError(_host_value_error("int(x)"))

    def __float__(self):
        raise TypeError(_host_value_error("float(x)"))

    def __index__(self):
        raise TypeError(_host_value_error("using x as a Python int (range(x), an index, a size)"))

    def __iter__(self):
        where = _unconverted_caller()
        if where is not None:
            raise TypeError(
                f"iterating over a MaskedBatch in {where[0]}, which @batch function {where[1]} "
                f"calls but which @batch did not rewrite; decorate it with @matchbox.batch too "
                f"(a for loop under @batch walks each example's own items)")
        raise TypeError(
            "iterating over a MaskedBatch (`for word in words`) walks each example's own "
            "items only under @matchbox.batch: decorate the function that holds the loop, or "
            "iterate over a per-example dimension explicitly, e.g. `for x_t in x.unbind(1)`")

    # ------------------------------------------------------------ moves and casts
    def _with_data(self, data):
        mask = self._mask
        if mask is not None and mask.device != data.device:
            mask = mask.to(data.device)
        present = self._present
        if present is not None and present.device != data.device:
            present = present.to(data.device)
        sizes = self._sizes
        if sizes is not None and next(iter(sizes.values())).device != data.device:
            sizes = {d: n.to(data.device) for d, n in sizes.items()}
        return MaskedBatch._new(data, mask, self.dims, self._zero, self._bdim, present, sizes)

    def to(self, *args, **kwargs):
        return self._with_data(self.padded_data.to(*args, **kwargs))

    def cuda(self, *args, **kwargs):
        return self._with_data(self.padded_data.cuda(*args, **kwargs))

    def cpu(self):
        return self._with_data(self.padded_data.cpu())

    def detach(self):
        return self._with_data(self._data.detach())  # (a read's storage: no cut needed)

    def type_as(self, other):
        other = other.padded_data if isinstance(other, MaskedBatch) else other
        return self._with_data(self.padded_data.type_as(other))

    def float(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.float(memory_format=memory_format))

    def double(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.double(memory_format=memory_format))

    def half(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.half(memory_format=memory_format))

    def bfloat16(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.bfloat16(memory_format=memory_format))

    def long(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.long(memory_format=memory_format))

    def int(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.int(memory_format=memory_format))

    def bool(self, memory_format=torch.preserve_format):
        return self._with_data(self.padded_data.bool(memory_format=memory_format))

    def contiguous(self, *args, **kwargs):
        return self._with_data(self.padded_data.contiguous(*args, **kwargs))

    def pin_memory(self):
        return self._with_data(self.padded_data.pin_memory())

    # ------------------------------------------------------------ making and unmaking
    @classmethod
    def fromlist(cls, examples, dims=None, batch_dim=0):
        """Batch a list of Tensors.  By default each has a leading dimension
        of size 1, its batch of one; ``batch_dim`` says where that dimension
        sits instead (``1`` for sequence-first ``(n, 1, d)`` examples), or
        ``None`` for examples that have none (``(n, d)``, as for
        ``torch.func.vmap``).  ``dims`` gives one bool per other dimension
        (dynamic or static); when omitted, a dimension is dynamic where the
        examples' sizes differ."""
        examples = list(examples)
        if not examples:
            raise ValueError("fromlist needs at least one example")
        first = examples[0]
        for i, e in enumerate(examples):
            if not isinstance(e, torch.Tensor):
                raise ValueError(f"example {i} is a {type(e).__name__}, not a Tensor")
            if e.dim() != first.dim():
                raise ValueError(
                    f"example {i} has {e.dim()} dims but example 0 has {first.dim()}; "
                    f"all examples need the same number of dimensions")
        examples = [example_to_storage(e, batch_dim, f"fromlist: example {i}")
                    for i, e in enumerate(examples)]
        first = examples[0]
        for i, e in enumerate(examples):
            if e.device != first.device:
                raise ValueError(f"example {i} is on {e.device} but example 0 is on {first.device}")
            if e.dtype != first.dtype:
                raise ValueError(
                    f"example {i} has dtype {e.dtype} but example 0 has {first.dtype}; all "
                    f"examples need the same dtype (batching would convert them silently, e.g. "
                    f"losing integer precision): cast them first, e.g. e.float() or e.long()")
        n = first.dim() - 1
        sizes = torch.tensor([list(e.shape[1:]) for e in examples], dtype=torch.long).reshape(len(examples), n)
        if dims is None:
            dims = tuple(bool((sizes[:, i] != sizes[0, i]).any()) for i in range(n))
        dims = _as_dims(dims, n)
        if len(dims) != n:
            raise ValueError(f"dims has {len(dims)} entries but the examples have {n} dims besides "
                             f"their batch-of-one dimension")
        maxes = sizes.max(0).values.tolist() if len(examples) else []
        for i, dyn in enumerate(dims):
            if not dyn and bool((sizes[:, i] != maxes[i]).any()):
                raise ValueError(
                    f"dimension {i + 1} is declared static but the examples' sizes differ "
                    f"there ({sorted(set(sizes[:, i].tolist()))}); declare it dynamic")
        padded = []
        for e, s in zip(examples, sizes.tolist()):
            pad = []
            for i in reversed(range(n)):
                pad += [0, maxes[i] - s[i]]
            padded.append(torch.nn.functional.pad(e, pad) if any(pad) else e)
        data = torch.cat(padded, 0)
        shape = data.shape
        # (a dim of size 0 in every example hides the others' sizes from the mask)
        lengths = {i + 1: sizes[:, i].to(data.device) for i, dyn in enumerate(dims)
                   if dyn and (maxes[i] == 0 or bool((sizes[:, i] != maxes[i]).any()))}
        present = empty_present(lengths)
        return cls._new(data, mask_from_lengths(lengths, shape, dims), dims, zero=True,
                        bdim=batch_dim, present=present, sizes=empty_sizes(lengths, present))

    def examples(self):
        """The per-example Tensors, cut to size, in the shape the per-example
        code sees (the batch-of-one dimension where ``batch_dim`` says)."""
        dyn = [i + 1 for i, d in enumerate(self.dims) if d]
        # with dynamic dims and no example known to be empty, an example with
        # no real entry reads as empty (a dormant lane's, kept for callers
        # that read the other examples)
        missing = absent_examples(self) if self._present is not None or not dyn else None
        if missing is not None and bool(missing.any()):
            raise ValueError(
                f"examples {missing.nonzero().flatten().tolist()} of this batch hold no "
                f"value: {_NO_VALUE_WHY}. Put the per-example loop under @matchbox.batch, or "
                f"index per example: x[:, i] (negative i counts from each example's own end)")
        if self._mask is None or not dyn:  # (split of no rows gives one empty part)
            rows = self.padded_data.split(1, 0) if self.batch_size else ()
            return [storage_to_example(e, self._bdim) for e in rows]
        lengths = torch.stack([self._lengths(d) for d in dyn], 1).tolist()
        out = []
        for b, ls in enumerate(lengths):
            x = self.padded_data[b:b + 1]
            for d, n in zip(dyn, ls):
                x = x.narrow(d, 0, n)
            out.append(storage_to_example(x, self._bdim))
        return out

    @classmethod
    def from_padded(cls, data, lengths=None, dim=1, batch_first=True, key_padding_mask=None):
        """Wrap a padded Tensor.  ``lengths`` gives the per-example sizes along
        ``dim`` (an int dimension of the batch-first layout); pass a tuple of
        dims and a matching tuple of lengths for several dynamic dims.  With
        ``batch_first=False`` the input is ``(T, B, ...)`` as in ``nn.LSTM``
        and each example is sequence-first, ``(T_i, 1, ...)`` (``batch_dim``
        1).
        Instead of ``lengths``, ``key_padding_mask`` may give a bool ``(B, T)``
        in nn.MultiheadAttention's convention (True = padding, at the end).
        The batch holds a copy whose padding is 0, whatever the Tensor held
        there (NaN, inf): garbage padding can reach no value or gradient."""
        bdim = 0 if batch_first else 1
        if not batch_first:
            data = data.transpose(0, 1)
        if key_padding_mask is not None:
            if lengths is not None or not isinstance(dim, int):
                raise ValueError("from_padded: give lengths or key_padding_mask (one int dim), not both")
            lengths = _lengths_from_kpm(key_padding_mask, data, dim)
        n = data.dim() - 1
        dlist = (dim,) if isinstance(dim, int) else tuple(dim)
        if lengths is None:
            return cls._new(data, None, (False,) * n, bdim=bdim)
        llist = (lengths,) if isinstance(dim, int) else tuple(lengths)
        if len(llist) != len(dlist):
            raise ValueError(f"from_padded got {len(dlist)} dims but {len(llist)} length vectors")
        norm = []
        for d in dlist:
            d = d + data.dim() if d < 0 else d
            if not 1 <= d <= n:
                raise ValueError(f"from_padded: dim {d} is not a non-batch dimension of shape {tuple(data.shape)}")
            norm.append(d)
        lens = {}
        for d, ln in zip(norm, llist):
            ln = torch.as_tensor(ln, device=data.device).long().reshape(-1)
            if ln.numel() != data.size(0):
                raise ValueError(f"from_padded: {ln.numel()} lengths for a batch of {data.size(0)}")
            if bool((ln < 0).any()) or bool((ln > data.size(d)).any()):
                raise ValueError(f"from_padded: lengths must lie in [0, {data.size(d)}] along dim {d}")
            lens[d] = ln
        dims = tuple(i + 1 in lens for i in range(n))
        mask = mask_from_lengths(lens, data.shape, dims)
        if mask is None:
            return cls._new(data, None, dims, bdim=bdim)
        present = empty_present(lens)
        # padding enters clean: whatever the padded Tensor held there (NaN,
        # inf) can never reach a value or a gradient, and rules that know the
        # padding is 0 skip their masking
        return cls._new(data.masked_fill(~mask, 0), mask, dims, zero=True, bdim=bdim,
                        present=present, sizes=empty_sizes(lens, present))

    def key_padding_mask(self, dim=1):
        """The bool ``(B, n)`` mask of dimension ``dim`` in the convention of
        nn.MultiheadAttention's ``key_padding_mask`` (True = padding), for
        handing this batch to padded PyTorch code; all False if ``dim`` is
        static.  ``from_padded(data, key_padding_mask=kpm)`` goes back."""
        d = storage_dim(self, dim)
        if d == 0:
            raise ValueError(f"key_padding_mask: dimension {dim} is each example's batch of one; "
                             f"give another dimension")
        positions = torch.arange(self._data.size(d), device=self._data.device)
        return positions >= self._lengths(d)[:, None]

    def to_padded(self, value=0):
        """The data as a plain padded Tensor with ``value`` everywhere that is
        not real."""
        if self._mask is None:
            return self.padded_data
        return self.padded_data.masked_fill(~self._mask, value)

    @classmethod
    def from_packed(cls, packed):
        """From a ``torch.nn.utils.rnn.PackedSequence`` (examples ``(T_i, *)``
        become ``(1, T_i, *)``)."""
        from torch.nn.utils.rnn import pad_packed_sequence
        data, lengths = pad_packed_sequence(packed, batch_first=True)
        return cls.from_padded(data, lengths.to(data.device), 1)

    def to_packed(self, enforce_sorted=False):
        """To a PackedSequence over dimension 1, which must be the only
        dynamic dimension."""
        from torch.nn.utils.rnn import pack_padded_sequence
        if self._data.dim() < 2 or any(self.dims[1:]):
            raise ValueError(
                f"to_packed needs dimension 1 to be the only dynamic one; dims are {self.dims}")
        lengths = self._lengths(1).cpu()
        return pack_padded_sequence(self.padded_data, lengths, batch_first=True, enforce_sorted=enforce_sorted)

    @classmethod
    def from_nested(cls, nt, dims=None):
        """From a ``torch.nested`` tensor; its components gain a leading 1."""
        return cls.fromlist([t.unsqueeze(0) for t in nt.unbind()], dims)

    def to_nested(self, layout=torch.jagged):
        """To a ``torch.nested`` tensor of the examples (without their
        batch-of-one dimension).  The jagged layout allows one dynamic
        dimension."""
        return torch.nested.as_nested_tensor(
            [example_to_storage(e, self._bdim).squeeze(0) for e in self.examples()], layout=layout)

    # ------------------------------------------------------------ display
    def __repr__(self):
        sizes = [(f"≤{s}" if d else str(s)) for s, d in zip(self._data.shape[1:], self.dims)]
        if self._bdim is not None:
            sizes.insert(self._bdim, "1")
        return (f"MaskedBatch(batch_size={self._data.size(0)}, sizes=({', '.join(sizes)}), "
                f"dtype={self._data.dtype}, device={self._data.device})")

    def __reduce__(self):
        # the mask and dims go in as state, unchecked: any batch an op made
        # (a step some examples lack, examples of length 0) loads back as it was
        return (MaskedBatch, (self.padded_data,),
                (self._mask, self.dims, self._bdim, self._present, self._sizes))

    def __setstate__(self, state):
        self._mask, self.dims = state[:2]
        self._bdim = state[2] if len(state) > 2 else 0
        self._present = state[3] if len(state) > 3 else None
        self._sizes = state[4] if len(state) > 4 else None

    def __deepcopy__(self, memo):
        import copy
        return MaskedBatch._new(copy.deepcopy(self.padded_data, memo),
                                copy.deepcopy(self._mask, memo), self.dims, bdim=self._bdim,
                                present=copy.deepcopy(self._present, memo),
                                sizes=copy.deepcopy(self._sizes, memo))


def _lengths_from_kpm(kpm, data, dim):
    """Per-example lengths from a key_padding_mask (True = padding), which
    must be ``(B, data.size(dim))`` and pad a suffix of each row."""
    kpm = torch.as_tensor(kpm, device=data.device)
    d = dim + data.dim() if dim < 0 else dim
    if kpm.dtype != torch.bool or tuple(kpm.shape) != (data.size(0), data.size(d)):
        raise ValueError(
            f"from_padded: key_padding_mask must be a bool Tensor of shape "
            f"{(data.size(0), data.size(d))} (True = padding), got {kpm.dtype} {tuple(kpm.shape)}")
    lengths = (~kpm).sum(1)
    if not torch.equal(kpm, torch.arange(kpm.size(1), device=kpm.device) >= lengths[:, None]):
        raise ValueError(
            "from_padded: key_padding_mask must mark padding at the end of each row (real "
            "entries first, then True for padding); matchbox keeps each example as a prefix")
    return lengths


# ------------------------------------------------------------ the batch-of-one dimension
def storage_dim(x, d, op=None):
    """The dimension of ``x.padded_data`` (batch-first) that dimension ``d``
    of each example (negative counts from the end) is: 0 for the
    batch-of-one dimension.  The one place that maps the shape per-example
    code sees to the storage (see ``MaskedBatch.batch_dim``)."""
    n, p = x.dim(), x._bdim
    if not -n <= d < n:
        if op is not None and not isinstance(op, str):
            from .ops._registry import func_name
            op = func_name(op)
        raise IndexError(f"{op + ': ' if op else ''}dimension {d} out of range for examples "
                         f"with {n} dimensions (shape {tuple(x.maxsize())})")
    d = d + n if d < 0 else d
    if p is None:
        return d + 1
    return 0 if d == p else d + (d < p)


def example_to_storage(t, bdim, what="the example"):
    """One example ``t`` (its batch-of-one dimension at ``bdim``, or none)
    as a ``(1, ...)`` slice of batch-first storage."""
    if bdim is None:
        return t.unsqueeze(0)
    if t.dim() <= bdim or t.size(bdim) != 1:
        raise ValueError(
            f"{what} has shape {tuple(t.shape)}, with no batch-of-one dimension (size 1) at "
            f"position {bdim}. Say where it is with batch_dim=k (batch_dim=1 for "
            f"sequence-first (n, 1, d) examples), or batch_dim=None for examples that have "
            f"none (e.g. (n, d), as for torch.func.vmap)")
    return t if bdim == 0 else t.movedim(bdim, 0)


def storage_to_example(t, bdim):
    """The inverse of ``example_to_storage``."""
    if bdim is None:
        return t.squeeze(0)
    return t if bdim == 0 else t.movedim(0, bdim)


def relabel(x, bdim):
    """``x`` (the same storage, gradient cut and caches) read with its
    batch-of-one dimension at ``bdim``."""
    y = object.__new__(MaskedBatch)
    y._data, y._cut, y._cutd, y._mask, y.dims = x._data, x._cut, x._cutd, x._mask, x.dims
    y._zero_at, y._rows, y._bdim = x._zero_at, x._rows, bdim
    y._present, y._sizes = x._present, x._sizes
    return y


def adopt(x, q, what):
    """MaskedBatch ``x`` read with its batch-of-one dimension at ``q``:
    where it sits elsewhere (or nowhere) and dimension ``q`` of each example
    is a static 1, that 1 becomes it (per example nothing changes: a
    ``(1, 1, d)`` value is both batch-first and sequence-first)."""
    p = x._bdim
    if p == q:
        return x
    s = storage_dim(x, q) if q < x.dim() else None
    if s is None or x.dims[s - 1] or x.padded_data.size(s) != 1:
        raise ValueError(
            f"{what} needs each example's batch-of-one dimension at {q}; this value has it "
            f"{'nowhere' if p is None else f'at {p}'} (per-example shape {tuple(x.maxsize())})")
    y = squeezed(x, s)
    if p is not None:  # the old batch-of-one dim is now a plain size-1 dim
        t = p + 1 if p < q else p
        mask = None if y._mask is None else y._mask.unsqueeze(t)
        sizes = None if y._sizes is None else {d + (d >= t): n for d, n in y._sizes.items()}
        y = MaskedBatch._new(y.padded_data.unsqueeze(t), mask, y.dims[:t - 1] + (False,) + y.dims[t - 1:],
                             y._zero, present=y._present, sizes=sizes)
    return relabel(y, q)


def unlabeled(x):
    """MaskedBatch ``x`` (the same values per example) with its batch-of-one
    dimension read as a plain static dimension of size 1: it has none.
    Anything else as it is."""
    if not isinstance(x, MaskedBatch) or x._bdim is None:
        return x
    p = x._bdim
    mask = None if x._mask is None else x._mask.unsqueeze(p + 1)
    sizes = None if x._sizes is None else {d + (d > p): n for d, n in x._sizes.items()}
    return MaskedBatch._new(x.padded_data.unsqueeze(p + 1), mask, x.dims[:p] + (False,) + x.dims[p:],
                            x._zero, None, x._present, sizes)


def squeezed(x, s):
    """MaskedBatch ``x`` without its static size-1 storage dim ``s``."""
    mask = None if x._mask is None else x._mask.squeeze(s)
    sizes = None if x._sizes is None else {d - (d > s): n for d, n in x._sizes.items()}
    return MaskedBatch._new(x.padded_data.squeeze(s), mask, x.dims[:s - 1] + x.dims[s:],
                            x._zero, x._bdim, x._present, sizes)


# torch callable -> placement adapter: how the op moves the batch-of-one
# dimension (filled by matchbox.ops.placement)
PLACEMENTS = {}


def _placed(args):
    for a in args:
        t = type(a)
        if t is MaskedBatch:
            if a._bdim != 0:
                return True
        elif t is list or t is tuple:
            for b in a:
                if type(b) is MaskedBatch and b._bdim != 0:
                    return True
    return False


def _flagged(args):
    """Whether an operand needs the slow path of ``dispatch``: its
    batch-of-one dimension is not at 0, or some example is empty."""
    for a in args:
        t = type(a)
        if t is MaskedBatch:
            if a._bdim != 0 or a._present is not None:
                return True
        elif t is list or t is tuple:
            for b in a:
                if type(b) is MaskedBatch and (b._bdim != 0 or b._present is not None):
                    return True
    return False


def dispatch(func, rule, args, kwargs):
    """Call ``rule``, the rule for torch callable ``func``.  Rules are
    written for examples whose batch-of-one dimension is at 0; operands
    whose batch-of-one dimension sits elsewhere (or nowhere), and ops that
    move it, go through the op's placement adapter (ops/placement.py).
    Where an operand has an empty example, its results say which examples
    hold a value (``keep_presence`` in ops/_registry.py)."""
    if kwargs and kwargs.get("out") is not None:
        name = getattr(func, "__name__", str(func))
        raise NotImplementedError(
            f"{name}(..., out=...) is not supported with MaskedBatch operands: a per-example "
            f"result cannot be written into a given Tensor. Bind the result instead "
            f"(y = torch.{name}(...)), or use the in-place method (y.{name}_(...))")
    place = PLACEMENTS.get(func)
    if _flagged(args) or (kwargs and _flagged(kwargs.values())):
        return _dispatch_flagged(func, place, rule, args, kwargs)
    if place is not None and place.always:
        return place(func, rule, args, kwargs)
    return rule(*args, **kwargs)


class Unplaced(NotImplementedError):
    """A rule does not serve values whose batch-of-one dimension sits where
    these operands hold it (ops/placement.py raises it): dispatch runs the
    general fallback (ops/fallback.py) instead, which raises it where it
    does not run the op either."""


def _dispatch_flagged(func, place, rule, args, kwargs):
    placed = _placed(args) or (kwargs and _placed(kwargs.values()))
    try:
        if place is not None and (place.always or placed):
            out = place(func, rule, args, kwargs)
        elif placed:
            from .ops.placement import unplaced
            raise unplaced(func, args)
        else:
            out = rule(*args, **kwargs)
    except Unplaced as e:  # no rule for this placement: the general fallback
        from .ops.fallback import fallback
        return fallback(func, args, kwargs, unplaced=e)
    from .ops._registry import keep_presence
    return keep_presence(out, args, kwargs, func)


def real_mask(x):
    """``x``'s mask combined with the active lanes, or None when every entry
    of ``x`` is real and every lane is active.  Op rules that must neutralize
    non-real entries (padding or dormant lanes) use this."""
    return with_lanes(x._mask, x._data.dim())


def with_lanes(mask, ndim):
    """A bool ``mask`` (or None: all real) for ``ndim``-dim data, combined
    with the active lanes (or None when all is real and all lanes active).
    The combination is kept on the mask (on the lanes when there is none)
    while both are unchanged, so the ops of one branch share one Tensor
    (caches keyed by mask identity, such as ``on_real_rows``'s, then hit)."""
    lanes = _lanes.active_lanes()
    if lanes is None:
        return mask
    if torch.compiler.is_compiling():  # (no tensor versions in a graph)
        return _with_lanes(mask, lanes, ndim)
    owner = lanes if mask is None else mask
    key = (ndim, lanes._version, owner._version)
    hit = getattr(owner, "_mb_with_lanes", None)
    if hit is not None and (hit[0] is None or hit[0] is lanes) and hit[1] == key:
        return hit[2]
    out = _with_lanes(mask, lanes, ndim)
    owner._mb_with_lanes = (None if mask is None else lanes, key, out)
    return out


def _with_lanes(mask, lanes, ndim):
    view = lanes.view((-1,) + (1,) * (ndim - 1))
    # kept on ``lanes``: a view of it would hold it from C++, a cycle that
    # Python's collector cannot see (every @batch call's lanes would leak)
    return view.clone() if mask is None else mask & view


def derived(mask, key, make, *args):
    """``make(mask, *args)``, a value that depends on bool Tensor ``mask``
    alone (a select of it, a reduction, a check of it), kept on ``mask``
    under ``key`` (a tuple of ints and strings) while it is unchanged:
    masks are shared by identity between the values of a batch, so each
    derivation is made once per mask, not once per op.  Not under
    torch.compile, which traces the derivation into its graph instead."""
    if torch.compiler.is_compiling():
        return make(mask, *args)
    cache = getattr(mask, "_mb_derived", None)
    if cache is None or cache[0] != mask._version:
        cache = mask._mb_derived = (mask._version, {})
    value = cache[1].get(key, _MISSING)
    if value is _MISSING:
        value = make(mask, *args)
        if isinstance(value, torch.Tensor) and value._base is not None:
            value = value.clone()  # (a view of ``mask`` kept on it: an uncollectable cycle)
        cache[1][key] = value
    return value


_MISSING = object()


def uncut(x):
    """``x.padded_data`` for a rule that reads only the entries ``real_mask(x)``
    marks real (gathering them, or zeroing the others with ``where``): the
    dormant lanes of @batch's read are not real to it, so the gradient cut
    the read left pending is not needed when it was made under the lanes
    active now."""
    if x._cut is not None and x._cut is _lanes.active_lanes():
        return x._data
    return x.padded_data


# Tools that look for the tensors inside a model's outputs must find those of
# a MaskedBatch.  DistributedDataParallel walks outputs with torch's pytree
# (static_graph=True: without this the gradients come out wrong) and with
# dataclass fields (find_unused_parameters=True: else it raises).
@dataclasses.dataclass
class _TensorFields:
    padded_data: torch.Tensor
    _mask: torch.Tensor


MaskedBatch.__dataclass_fields__ = _TensorFields.__dataclass_fields__
torch.utils._pytree.register_pytree_node(
    MaskedBatch,
    lambda x: ([x.padded_data, x._mask] + ([] if x._present is None else [x._present]),
               (x.dims, x._bdim)),
    lambda leaves, ctx: MaskedBatch._new(leaves[0], leaves[1], ctx[0], bdim=ctx[1],
                                         present=leaves[2] if len(leaves) > 2 else None),
    serialized_type_name="matchbox.MaskedBatch")
