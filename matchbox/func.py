"""``matchbox.vmap`` (also ``matchbox.func.vmap``): the ``torch.func.vmap``
way in, for ragged examples.

A function written for one example with no batch dimension, as for
``torch.func.vmap``, runs on examples of different sizes, which ``vmap``
itself cannot batch, and may hold per-example control flow (it runs under
``@matchbox.batch``)::

    def score(sentence):                  # (n, d): one example, no batch dim
        h = torch.zeros(d)
        for word in sentence.unbind(0):
            h = torch.tanh(W @ word + U @ h)
            if h.sum() > 5:
                break
        return h

    hs = matchbox.vmap(score)([torch.randn(n, d) for n in (3, 7, 1)])
    # == [score(s) for s in sentences], computed as one batch
"""
import functools

import torch
import torch.utils._pytree as pytree

from .core import MaskedBatch

__all__ = ["vmap"]


def vmap(func, in_dims=0, *, lengths=None):
    """``func`` (written for one example, with no batch dimension) made to
    run on a batch of examples of different sizes.

    Each argument whose ``in_dims`` entry is 0 holds the examples: a list
    (or tuple) of Tensors, one per example, of any sizes; a MaskedBatch; or
    a padded Tensor ``(B, n, ...)`` when ``lengths`` (a sequence or
    LongTensor of B sizes along dim 1) is given.  An argument whose entry is
    None is shared by every example, as in ``torch.func.vmap``.  ``func``
    runs under ``@matchbox.batch``, so its per-example ``if``/``while``/
    ``for`` work.

    Returns what ``func`` returns with each per-example value replaced by
    the list of the examples' values (list inputs), or by a padded Tensor
    (padded inputs; padding 0).  Gradients flow to the inputs and to
    ``func``'s parameters as for a loop over the examples.
    """
    from .transform import batch
    from .transform.errors import SourceUnavailableError
    try:
        body = batch(func)
    except (SourceUnavailableError, TypeError):  # a lambda or builtin: no statements to rewrite
        body = func

    @functools.wraps(func)
    def run(*args):
        dims = in_dims if isinstance(in_dims, (tuple, list)) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"matchbox.vmap: in_dims has {len(dims)} entries for {len(args)} arguments")
        padded = lengths is not None
        batched = [_examples(a, d, lengths, i) for i, (a, d) in enumerate(zip(args, dims))]
        sizes = {b.batch_size for b in batched if isinstance(b, MaskedBatch)}
        if len(sizes) > 1:
            raise ValueError(f"matchbox.vmap: the arguments hold different numbers of examples "
                             f"({sorted(sizes)})")
        out = body(*batched)
        return pytree.tree_map(lambda y: _unbatched(y, padded), out,
                               is_leaf=lambda y: isinstance(y, MaskedBatch))
    return run


def _examples(arg, in_dim, lengths, i):
    if in_dim is None:
        return arg
    if in_dim != 0:
        raise ValueError(f"matchbox.vmap: in_dims entries must be 0 (the examples) or None "
                         f"(shared), got {in_dim!r} for argument {i}")
    if isinstance(arg, MaskedBatch):
        return arg
    if isinstance(arg, (list, tuple)):
        return MaskedBatch.fromlist(list(arg), batch_dim=None)
    if isinstance(arg, torch.Tensor) and lengths is not None:
        return MaskedBatch.from_padded(arg, torch.as_tensor(lengths, device=arg.device)).squeeze(0)
    raise TypeError(
        f"matchbox.vmap: argument {i} holds the examples (in_dims 0), so it must be a list of "
        f"Tensors (one per example), a MaskedBatch, or a padded Tensor with lengths=...; got "
        f"{type(arg).__name__} (give in_dims=None for an argument every example shares)")


def _unbatched(y, padded):
    if not isinstance(y, MaskedBatch):
        return y
    return y.to_padded(0) if padded else y.examples()
