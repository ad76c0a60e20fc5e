"""Attention: ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``
(through ``F.multi_head_attention_forward``), hence also
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``.

Per example, queries are ``(1, [heads,] Lq, E)`` and keys/values
``(1, [heads,] Lk, E)``; ``Lq`` and ``Lk`` may be dynamic.  Each rule makes
ONE call of the torch function on the padded data with one combined mask:

- keys beyond an example's length get zero weight (masked with ``-inf`` /
  ``False``), composed with the user's masks and with causality;
- ``is_causal`` is "query i attends keys j <= i" in each example's own
  coordinates, which for prefix-padded data is the same in the padded frame;
- a plain Tensor mask (``attn_mask``, ``key_padding_mask``) is sized to the
  *padded* lengths (``q.maxsize(-2)``, ``k.maxsize(-2)``) and each example
  uses its top-left block: exactly what per-example code gets from
  ``nn.Transformer.generate_square_subsequent_mask(x.maxsize(1))``;
- a padded query row would have every key masked (NaN in some kernels), so
  it attends key 0 instead, and the output there is masked with ``where``;
  inputs are neutralized with ``where`` first, so garbage in the padding
  never reaches values or (parameter) gradients.

``nn.MultiheadAttention(batch_first=True)`` swaps each input to
``(L, N, E)`` with ``x.transpose(1, 0)`` before calling
``F.multi_head_attention_forward``: for a MaskedBatch, a sequence-first
batch (each example ``(L, 1, E)``, its batch-of-one dimension at 1), which
is what the rule takes, so ``batch_first=False`` runs on sequence-first
examples as given.  Batch-first examples under ``batch_first=False`` would
have their leading 1 read as the sequence, and raise.  Its fast paths are never taken for a MaskedBatch:
they require ``has_torch_function`` to be False.
"""
import torch
import torch.nn.functional as F

from .._lanes import batch_size_hint
from ..core import relabel
from .lanes import Lanes, nested
from ._registry import (canon_mask, check_same_lengths, is_mb, keep, neutralize, new, real_mask,
                        register)

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]

_BATCH_FIRST = (
    "{op}: the MaskedBatch inputs must be sequence-first, (L, 1, E) per example, as "
    "nn.MultiheadAttention hands them over: with batch_first=False (or unbatched (L, E) "
    "input) batch-first examples (1, L, E) would have their leading 1 read as the sequence. "
    "Use nn.MultiheadAttention(..., batch_first=True) (and nn.Transformer*Layer(..., "
    "batch_first=True)) for (1, L, E) examples, or give (L, 1, E) examples.")


# ------------------------------------------------------------------ masks
def _real_positions(x, d):
    """Bool ``(B, n_d)`` (or ``(B, 1)``) of real positions along data dim
    ``d`` of MaskedBatch ``x`` (padding and dormant lanes excluded), or None."""
    m = real_mask(x)
    if m is None:
        return None
    other = [i for i in range(1, m.dim()) if i != d]
    return m.any(dim=other) if other else m


def _check_block(mask, Lq, Lk, op, name):
    """A plain Tensor mask must be sized to the padded lengths (or 1)."""
    got = tuple(mask.shape[-2:]) if mask.dim() >= 2 else (1,) + tuple(mask.shape)
    if got[0] not in (1, Lq) or got[1] not in (1, Lk):
        raise ValueError(
            f"{op}: {name} of shape {tuple(mask.shape)} does not match the padded query/key "
            f"lengths ({Lq}, {Lk}). In a batch, give a plain Tensor mask sized to the padded "
            f"lengths (q.maxsize(-2), k.maxsize(-2)); each example uses its top-left block.")


def _fit(data, sizes):
    """Pad (with zeros) or cut the trailing dims of ``data`` to ``sizes``."""
    for i, n in enumerate(sizes):
        d = data.dim() - len(sizes) + i
        if data.size(d) > n:
            data = data.narrow(d, 0, n)
        elif 1 < data.size(d) < n:
            pad = [0, 0] * (data.dim() - d - 1) + [0, n - data.size(d)]
            data = F.pad(data, pad)
    return data


def _combine(allowed, user, pad_rows):
    """The one mask for the torch call.  ``allowed``: bool, True where a
    query may attend a key (key padding, causality); ``user``: None, a bool
    mask (True = attend) or an additive float mask; ``pad_rows``: bool, True
    on padded query rows, which attend key 0 only.  Bool in, bool out."""
    Lk = allowed.size(-1)
    key0 = torch.arange(Lk, device=allowed.device) == 0
    if user is None or user.dtype == torch.bool:
        m = allowed if user is None else allowed & user
        return m if pad_rows is None else torch.where(pad_rows, key0, m)
    ninf = torch.tensor(float("-inf"), dtype=user.dtype, device=user.device)
    m = torch.where(allowed, user, ninf)
    if pad_rows is None:
        return m
    return torch.where(pad_rows, torch.where(key0, 0.0, ninf), m)


def _allowed(key_real, Lq, Lk, causal, lead, device):
    """Bool ``([B, *lead,] Lq, Lk)``: True where key padding and causality
    (top-left aligned, as torch's ``is_causal``) let a query see a key."""
    m = torch.ones(Lq, Lk, dtype=torch.bool, device=device)
    if causal:
        m = m.tril()
    if key_real is not None:
        m = m & key_real.view((key_real.size(0),) + (1,) * (lead + 1) + (key_real.size(1),))
    return m


def _masked_rows(out, q_real):
    """``out`` with padded query rows set to 0 (``q_real``: (B, Lq) or None)."""
    if q_real is None:
        return out
    view = (q_real.size(0),) + (1,) * (out.dim() - 3) + (q_real.size(1), 1)
    return keep(q_real.view(view), out, 0)


# ------------------------------------------------------------------ sdpa
def _shared(t, B, ndim, op, name):
    """A plain Tensor shared by every example, as a MaskedBatch."""
    if t.dim() != ndim or t.size(0) != 1:
        raise ValueError(
            f"{op}: {name} is a plain Tensor of shape {tuple(t.shape)}; next to MaskedBatch "
            f"operands it must be one example shared by all, shape (1, ...) with {ndim} dims")
    return new(t.expand((B,) + tuple(t.shape[1:])), None, (False,) * (ndim - 1))


def _check_static(x, op, name):
    """Only the sequence dim (-2) of q/k/v may be dynamic."""
    bad = [i + 1 for i, d in enumerate(x.dims) if d and i + 1 != x.padded_data.dim() - 2]
    if bad:
        raise ValueError(
            f"{op}: dimension(s) {bad} of {name} are dynamic; only the sequence dimension "
            f"(-2) may differ between examples (heads and features must be static)")


def _batch_mask(m, q, k, s, op):
    """A MaskedBatch attn_mask ``(1, [H,] Lq, Lk)`` per example, as data that
    broadcasts against the batch's ``(B, [H,] Lq, Lk)`` scores."""
    n = m.padded_data.dim()
    if n < 3 or n > q.padded_data.dim():
        raise ValueError(f"{op}: a MaskedBatch attn_mask must be (1, [heads,] Lq, Lk) per example")
    if m.dims[-2]:
        check_same_lengths(m, n - 2, q, s, f"{op} (attn_mask rows and queries)")
    if m.dims[-1]:
        check_same_lengths(m, n - 1, k, s, f"{op} (attn_mask columns and keys)")
    data = _fit(neutralize(m, 0), (q.padded_data.size(s), k.padded_data.size(s)))
    return data.view((data.size(0),) + (1,) * (q.padded_data.dim() - n) + tuple(data.shape[1:]))


@register(F.scaled_dot_product_attention)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` per example, as one call on the
    padded batch with key padding, causality and ``attn_mask`` combined."""
    op = "scaled_dot_product_attention"
    ref = next((t for t in (query, key, value) if is_mb(t)), None)
    if ref is None:
        raise NotImplementedError(f"{op}: needs query, key or value to be a MaskedBatch")
    B, ndim = ref.padded_data.size(0), ref.padded_data.dim()
    if ndim < 3:
        raise ValueError(f"{op}: examples need a sequence and a feature dimension, (1, L, E)")
    q, k, v = (t if is_mb(t) else _shared(t, B, ndim, op, n)
               for t, n in ((query, "query"), (key, "key"), (value, "value")))
    for t, n in ((q, "query"), (k, "key"), (v, "value")):
        if t.padded_data.size(0) != B:
            raise ValueError(f"{op}: batch sizes differ ({B} vs {t.padded_data.size(0)} in {n})" + batch_size_hint())
        _check_static(t, op, n)
    if is_causal and attn_mask is not None:
        raise RuntimeError(f"{op}: Explicit attn_mask should not be set when is_causal=True")
    s = ndim - 2  # the sequence dim
    check_same_lengths(k, s, v, s, f"{op} (key and value)")
    Lq, Lk = q.padded_data.size(s), k.padded_data.size(s)
    q_real, k_real = _real_positions(q, s), _real_positions(k, s)
    user = attn_mask
    if is_mb(attn_mask):
        user = _batch_mask(attn_mask, q, k, s, op)
    elif attn_mask is not None:
        _check_block(attn_mask, Lq, Lk, op, "attn_mask")
    allowed = _allowed(k_real, Lq, Lk, is_causal, ndim - 3, q.padded_data.device)
    pad_rows = None
    if q_real is not None:
        pad_rows = ~q_real.view((B,) + (1,) * (ndim - 3) + (q_real.size(1), 1))
    mask = _combine(allowed, user, pad_rows)
    out = F.scaled_dot_product_attention(
        neutralize(q, 0), neutralize(k, 0), neutralize(v, 0), attn_mask=mask,
        dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa)
    return new(_masked_rows(out, q_real), q._mask, q.dims, zero=True)


# ------------------------------------------------------------------ mha
def _additive(mask, dtype):
    """A bool mask in MHA's convention (True = do not attend) as an
    additive float mask; a float mask as it is."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))


def _mha_inputs(query, key, value, op):
    """query/key/value as batch-first MaskedBatches (``is`` kept)."""
    outs = {}
    B = next(t.padded_data.size(0) for t in (query, key, value) if is_mb(t))
    for t in (query, key, value):
        if id(t) in outs:
            continue
        if is_mb(t):
            if t.batch_dim != 1 or t.dim() != 3:
                raise ValueError(_BATCH_FIRST.format(op=op))
            outs[id(t)] = relabel(t, 0)
        else:  # a plain (S, 1, E) Tensor that MHA swapped from a shared (1, S, E)
            outs[id(t)] = _shared(t.transpose(0, 1), B, 3, op, "a plain query/key/value")
    return [outs[id(t)] for t in (query, key, value)]


def _mha_kpm(kpm, B, S, dtype, op):
    """A user key_padding_mask (MaskedBatch or plain (B or 1, S)) as an
    additive float ``(B or 1, S)``."""
    if is_mb(kpm):
        return _fit(_additive(neutralize(kpm, 0), dtype).to(dtype), (S,))
    if kpm.dim() != 2 or kpm.size(0) not in (1, B) or kpm.size(1) != S:
        raise ValueError(
            f"{op}: key_padding_mask of shape {tuple(kpm.shape)}; in a batch give a MaskedBatch "
            f"(one (1, S) row per example) or a plain Tensor ({B}, {S}) sized to the padded "
            f"key length")
    return _additive(kpm, dtype).to(dtype)


def _mha_attn_mask(mask, B, H, L, S, dtype, op):
    """A user attn_mask as an additive float broadcasting to ``(B, H, L, S)``."""
    if is_mb(mask):
        raise NotImplementedError(
            f"{op}: a MaskedBatch attn_mask is not supported (per example it is (L, S) or "
            f"(num_heads, L, S), without a leading 1); give a plain Tensor sized to the padded "
            f"lengths, or a key_padding_mask")
    if mask.shape[-2:] != (L, S) or mask.dim() not in (2, 3):
        raise ValueError(
            f"{op}: attn_mask of shape {tuple(mask.shape)} must be (L, S) or (num_heads, L, S) "
            f"sized to the padded lengths ({L}, {S}); each example uses its top-left block")
    mask = _additive(mask, dtype).to(dtype)
    if mask.dim() == 2:
        return mask
    if mask.size(0) == H:
        return mask.unsqueeze(0)
    if mask.size(0) == B * H:
        return mask.view(B, H, L, S)
    raise ValueError(f"{op}: 3-D attn_mask needs num_heads ({H}) or batch*num_heads ({B * H}) rows")


@register(F.multi_head_attention_forward)
def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
                                 in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p,
                                 out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """``F.multi_head_attention_forward`` (``nn.MultiheadAttention``) per
    example, as one torch call on the padded batch with key padding, the
    user's masks and padded query rows folded into one float attn_mask.
    Returns the output sequence-first, ``(L, 1, E)`` per example, as its
    input (MHA swaps it back) and
    the weights, if asked for, as a MaskedBatch ``(1, [H,] L, S)``."""
    op = "multi_head_attention_forward"
    params = (in_proj_weight, in_proj_bias, bias_k, bias_v, out_proj_weight, out_proj_bias,
              q_proj_weight, k_proj_weight, v_proj_weight, static_k, static_v)
    if any(is_mb(p) for p in params):
        raise NotImplementedError(f"{op}: weights and static_k/static_v must be plain Tensors")
    if static_k is not None or static_v is not None:
        raise NotImplementedError(f"{op}: static_k / static_v are not supported on a MaskedBatch")
    ref = next((t for t in (query, key, value) if is_mb(t) and t.dim() == 3 and nested(t, 1)), None)
    if ref is not None:  # (L, k, E) per example: its k items run as lanes (ops/lanes.py)
        items = Lanes(ref, 1, op)
        if attn_mask is not None and attn_mask.dim() != 2:
            raise NotImplementedError(
                f"{op}: with each example's own batch of items, attn_mask must be one (L, S) "
                f"mask for every item; give a key_padding_mask (k, S) per example instead")
        lanes = {}
        for t in (query, key, value):  # (MHA packs the projections where query is key)
            if id(t) not in lanes:
                lanes[id(t)] = items.fold(t, 1) if is_mb(t) else items.plain(t, 1)
        if key_padding_mask is not None:
            key_padding_mask = items.fold(key_padding_mask, 0) if is_mb(key_padding_mask) \
                else items.plain(key_padding_mask, 0)
        return items.run(
            multi_head_attention_forward, lanes[id(query)], lanes[id(key)], lanes[id(value)],
            embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
            add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=use_separate_proj_weight, q_proj_weight=q_proj_weight,
            k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
    if not any(is_mb(t) and t.batch_dim == 1 for t in (query, key, value)):
        raise ValueError(_BATCH_FIRST.format(op=op))
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    q, k, v = _mha_inputs(query, key, value, op)
    for t, n in ((q, "query"), (k, "key"), (v, "value")):
        if t.padded_data.dim() != 3 or t.dims[1]:
            raise ValueError(f"{op}: each {n} example must be (1, L, E) with static E")
    check_same_lengths(k, 1, v, 1, f"{op} (key and value)")
    B, L, S, H = q.padded_data.size(0), q.padded_data.size(1), k.padded_data.size(1), num_heads
    dtype = q.dtype
    q_real, k_real = _real_positions(q, 1), _real_positions(k, 1)

    bias = torch.zeros((), dtype=dtype, device=q.device)
    if attn_mask is not None:
        bias = bias + _mha_attn_mask(attn_mask, B, H, L, S, dtype, op)
    if key_padding_mask is not None:
        if is_mb(key_padding_mask) and key_padding_mask.dims[0]:
            check_same_lengths(key_padding_mask, 1, k, 1, f"{op} (key_padding_mask and keys)")
        bias = bias + _mha_kpm(key_padding_mask, B, S, dtype, op).view(-1, 1, 1, S)
    bias = bias.expand(B, H, L, S)
    pad_rows = None if q_real is None else ~q_real.view(B, 1, q_real.size(1), 1)
    mask = _combine(_allowed(k_real, L, S, False, 1, q.device), bias, pad_rows)

    datas = {}
    for t in (q, k, v):  # neutralize each distinct input once; MHA packs q is k is v
        if id(t) not in datas:
            datas[id(t)] = neutralize(t, 0).transpose(0, 1)
    out, weights = F.multi_head_attention_forward(
        datas[id(q)], datas[id(k)], datas[id(v)], embed_dim_to_check, num_heads, in_proj_weight,
        in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
        training=training, key_padding_mask=None, need_weights=need_weights,
        attn_mask=mask.reshape(B * H, L, S) if B else None, use_separate_proj_weight=use_separate_proj_weight,
        q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight,
        average_attn_weights=average_attn_weights, is_causal=False)
    out = new(_masked_rows(out.transpose(0, 1), q_real), q._mask, q.dims)
    if weights is not None:
        extra = int(bias_k is not None) + int(add_zero_attn)
        weights = _weights(weights, q, k, q_real, S, extra)
    return relabel(out, 1), weights


def _weights(w, q, k, q_real, S, extra):
    """Attention weights ``(B, [H,] L, S + extra)`` per example: the
    ``extra`` keys (bias_k, add_zero_attn) that torch appends after the
    padded keys move to right after each example's own keys."""
    B = w.size(0)
    lead = w.dim() - 3
    k_len = k._lengths(1)
    if extra and k.dims[0]:
        j = torch.arange(S + extra, device=w.device)
        src = torch.where(j < k_len[:, None], j, S + j - k_len[:, None]).clamp(max=S + extra - 1)
        w = w.gather(-1, src.view((B,) + (1,) * (lead + 1) + (S + extra,)).expand_as(w))
    w = _masked_rows(w, q_real)
    if not (q.dims[0] or k.dims[0]):
        return new(w, None, (False,) * (lead + 2))
    col = torch.arange(S + extra, device=w.device) < (k_len + extra)[:, None]
    col = col.view((B,) + (1,) * (lead + 1) + (S + extra,))
    w = torch.where(col, w, torch.zeros((), dtype=w.dtype, device=w.device))
    rows = q.mask.view((B,) + (1,) * lead + (q.mask.size(1), 1))
    dims = (False,) * lead + (q.dims[0], k.dims[0])
    return new(w, canon_mask(rows & col, w.shape, dims), dims)
