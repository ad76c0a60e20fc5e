"""Branches run gathered: a per-example ``if`` whose body few lanes take
runs on those lanes only (:class:`BranchCompaction`, a :class:`Compaction`
of compaction.py whose rows are the branch's lanes); what it assigns is
scattered back into the full-batch values (or kept gathered inside a map
loop's compaction, its parent)."""
import types

import torch

from ..._lanes import _COMPACT
from ...core import MaskedBatch
from .compaction import Compaction, MapCompaction
from .select import ShapeMismatch, rebuilt, select
from .update import _assign, _mixed_assign
from .values import Mixed, Undefined

_new = MaskedBatch._new
# what a branch never holds attributes of: functions, methods, modules, values
_NOT_HOLDERS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                types.ModuleType, type, torch.Tensor, MaskedBatch)


# ------------------------------------------------------------------ branches
# A per-example ``if`` whose body few lanes take runs gathered on those
# lanes (:class:`BranchCompaction`) when its share of the lanes is at most
# ``BRANCH_SHARE`` and the batch holds at least ``BRANCH_MIN_BATCH`` lanes
# (``@batch(compact=s)`` sets the share to ``s`` and drops the minimum;
# ``compact=False`` keeps every branch masked).  Measured on a 2-core CPU
# (bench/branch_cost.py-style micro benchmark, forward + backward, float32,
# torch threads 1; see docs/batch.md): gathering costs a fixed ~40-60 us per
# branch (the ``nonzero`` and the rows bookkeeping) plus ~15 us per variable
# read (``index_select``) and ~20 us per variable assigned (``index_copy``),
# whatever the batch size; running a body masked instead costs its ops on
# all B lanes plus the per-lane select of each assignment.  A body of one or
# two pointwise ops never pays for it; a body that calls a module or a
# function (the rare-word char LSTM, a Linear layer) breaks even at a share
# near 0.5 at B = 16 and near 0.7 at B = 64; its saving at a share of 0.1
# is 3-8x.  The rule gathers only bodies that hold a loop, or call something
# and read at most ``conditionals.BRANCH_MAX_READS`` variables (decided when
# the function is rewritten: the parser's feature branch, one call reading 6
# values, ran 9% slower gathered), at a share of 0.3 or less, so a mistaken
# guess costs little.
BRANCH_SHARE = 0.3
BRANCH_MIN_BATCH = 8

def branch_compaction(lanes, n, share, owner, description):
    """The :class:`BranchCompaction` to run a branch with (its full-batch
    ``lanes``, ``n`` of them), or None to run it masked: ``share`` is the
    function's ``compact=`` (None: the measured rule above)."""
    B = lanes.numel()
    if share is None:
        if n > BRANCH_SHARE * B or B < BRANCH_MIN_BATCH:
            return None
    elif n > share * B:
        return None
    parent = _COMPACT.get()
    if parent is not None:  # never inside another compaction, but for a map's
        if type(parent) is not MapCompaction or owner is not parent.owner or n == parent.B:
            return None
    return BranchCompaction(lanes, owner, description, parent)


class BranchCompaction(Compaction):
    """A branch run on the ``n`` lanes that take it (``alive``): what the
    branch's function reads is gathered to those rows, what it assigns is
    written back into the full-batch value at once (``assign``), so after
    the branch every variable holds all of its lanes.  In a map loop's
    body (``parent``, a :class:`MapCompaction`) the full batch is the map's
    lanes, and a value from outside the loop is gathered to them first."""

    def __init__(self, alive, owner, description, parent=None):
        super().__init__(alive, owner, description)
        self.parent, self.held = parent, None

    def hold_attributes(self, holder, parts=()):
        """For the branch, ``holder``'s (a method's ``self``) full-batch
        attributes (``self.memory``, ``self.cache``) hold their branch rows,
        and so do those of its ``parts`` the branch calls (``self.speller``,
        a submodule keeping a cache): code called in the branch reads them
        at the branch's batch size and may set them (``release_attributes``
        scatters them back).  Not in a map loop's body, whose lanes are
        (example, step) pairs."""
        if self.parent is not None or holder is None:
            return
        objs = [holder] + [getattr(holder, name, None) for name in parts]
        self.held = []
        for obj in objs:
            attrs = getattr(obj, "__dict__", None)
            if attrs is None or isinstance(obj, _NOT_HOLDERS) or \
                    any(attrs is h[0] for h in self.held):
                continue
            before = dict(attrs)
            gathered = {name: self.rows_of(v) for name, v in before.items() if self.full(v)}
            attrs.update(gathered)
            self.held.append((attrs, before, gathered))

    def holds(self, obj):
        """Does the branch hold ``obj``'s attributes at its rows?"""
        attrs = getattr(obj, "__dict__", None)
        return self.held is not None and any(attrs is h[0] for h in self.held)

    def release_attributes(self, done=True):
        """After the branch (``done``: it ran to its end): each attribute of
        a holder set in it to a value of the branch's rows holds that value
        in those lanes and its old one in the others; the others are back
        as they were."""
        held, self.held = self.held or (), None
        for attrs, before, gathered in held:
            for name, v in list(attrs.items()):
                old = before.get(name)
                if name in gathered and (v is gathered[name] or not done):
                    attrs[name] = old  # read only (or the branch raised): as it was
                elif done and (self.compacted(v) or v is not old and self.full(old)):
                    attrs[name] = self._write(old, v, self.alive)

    def _take(self, x):
        if self.parent is not None:
            x = self.parent._take(x)
        if type(x) is Mixed:  # the part that the branch's lanes hold (or raise, as masked)
            x = x.resolve(self.alive)
        return super()._take(x)

    def assign(self, old, new, keep=True):
        """``old = new`` in the branch: ``new`` (computed on the branch's
        rows) written into ``old``'s rows of the branch."""
        if isinstance(new, tuple) and (isinstance(old, Undefined)
                                       or isinstance(old, tuple) and len(old) == len(new)):
            olds = old if isinstance(old, tuple) else (old,) * len(new)
            return rebuilt(new, [self.assign(o, v) for o, v in zip(olds, new)])
        new = _assign(self.take(old), new)  # (masked by a loop or branch inside this one)
        if type(new) is Mixed:
            out = old
            for lanes, v in new.parts:
                full = self.alive if lanes is None else self.lanes(lanes)
                out = self._write(out, v, full)
            return out
        return self._write(old, new, self.alive)

    @torch.enable_grad()   # each lane keeps its history, as in select
    def _write(self, old, new, lanes):
        if isinstance(old, Undefined) or old is None:
            return self.expand(new) if self.compacted(new) else new
        if self.compacted(old):
            return new  # a loop temporary, bound (compacted) earlier in the branch
        if type(old) is Mixed:
            return _mixed_assign(lanes, old, self.expand(new) if self.compacted(new) else new)
        if lanes is self.alive and type(new) is MaskedBatch and self.compacted(new) \
                and type(old) is MaskedBatch and _plain(old) and _plain(new) \
                and old.dims == new.dims and old._bdim == new._bdim \
                and old.padded_data.shape[1:] == new.padded_data.shape[1:] \
                and old.padded_data.dtype == new.padded_data.dtype:
            return _new(old.padded_data.index_copy(0, self.rows, new.padded_data), None, old.dims,
                        bdim=old._bdim)
        if self.compacted(new):
            new = self.expand(new)
        try:
            return select(lanes, new, old)
        except ShapeMismatch:  # another shape in these lanes: each example keeps its own
            return _mixed_assign(lanes, old, new)


def _plain(x):
    return x._mask is None and x._present is None and x._sizes is None
