"""Checking batched code against per-example runs (SPEC section 5).

``mb_test(f, *specs)`` builds random inputs from argument specs, runs ``f``
on each example alone and on the batch, and asserts that outputs agree and
that gradients of the inputs and of an ``nn.Module``'s parameters agree.

An argument spec is one of:

- ``(B, (dynamic, size), ...)``: B random examples, each ``(1, s_1, ...)``
  (with ``batch_dim=k``, the 1 at position k; with ``batch_dim=None``, no
  1: ``(s_1, ...)``, as for ``torch.func.vmap``);
  along a dynamic dim ``s_i`` is drawn from ``1..size``.  Within one call,
  dynamic dims with the same ``size`` get the same length in each example,
  so ``(4, (True, 3), (True, 3))`` makes square examples.
- a shape tuple of ints: one Tensor shared by every example;
- an int ``k``: the same input as argument ``k``;
- a ready ``MaskedBatch`` or ``Tensor``: used as given (a MaskedBatch is
  split with ``.examples()``; a Tensor is shared);
- ``matchbox.objects(items)``: one Python object per example (each run
  gets its own deep copies, so code may store into them).
"""
import torch

import copy

from .core import MaskedBatch, absent_examples, example_to_storage, storage_to_example
from .objects import PerExample

__all__ = ["mb_rand", "mb_test", "mb_assert", "mb_assert_allclose", "LENGTH_MODES",
           "draw_lengths"]

LENGTH_MODES = ("random", "mixed", "one", "equal")


SPEC_FORMS = ("an argument spec is (B, (dynamic, size), ...) for B random examples, e.g. "
              "(4, (True, 3), (False, 2)), with (4, ()) for one value per example; a shape "
              "tuple of ints for one Tensor shared by every example; an int k to reuse "
              "argument k; or a ready MaskedBatch or Tensor")


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_batch_spec(spec):
    """``(B, (dynamic, size), ...)``; ``(B, ())`` (the original Matchbox's
    spelling) is B examples with no dims after the leading 1, and ``()``
    entries among the dims are skipped.  A spec meant as one (a tuple with
    a tuple after its first item) that is malformed raises ValueError."""
    if not (isinstance(spec, (tuple, list)) and len(spec) > 1
            and any(isinstance(d, (tuple, list)) for d in spec[1:])):
        return False
    problem = None
    if not _is_int(spec[0]) or spec[0] < 0:
        problem = f"its first item, the number of examples, must be an int >= 0, not {spec[0]!r}"
    for d in spec[1:]:
        if problem:
            break
        if not isinstance(d, (tuple, list)) or len(d) not in (0, 2):
            problem = f"each dim must be (dynamic, size) or (), not {d!r}"
        elif len(d) == 2 and not (isinstance(d[0], bool) or d[0] in (0, 1)):
            problem = f"in {d!r}, dynamic must be True or False"
        elif len(d) == 2 and (not _is_int(d[1]) or d[1] < (1 if d[0] else 0)):
            problem = (f"in {d!r}, size must be an int >= 1 (the largest size, for a dynamic "
                       f"dim) or >= 0 (a static one)")
    if problem:
        raise ValueError(f"cannot read the spec {spec!r}: {problem}; {SPEC_FORMS}")
    return True


def draw_lengths(B, size, mode, generator=None):
    """B per-example sizes in 1..size for a length ``mode`` (LENGTH_MODES):
    random, "mixed" (first 1, last ``size``), "one" or "equal" (all ``size``).
    mb_test draws dynamic sizes with it; example generators can too."""
    if mode == "one":
        return [1] * B
    if mode == "equal":
        return [size] * B
    lengths = torch.randint(1, size + 1, (B,), generator=generator).tolist()
    if mode == "mixed" and B >= 2:
        lengths[0], lengths[-1] = 1, size
    elif mode != "random" and mode != "mixed":
        raise ValueError(f"lengths mode must be one of {LENGTH_MODES}, got {mode!r}")
    return lengths


def _rand(shape, dtype, device, generator=None):
    if dtype is not None and not dtype.is_floating_point:
        return torch.randint(0, 4, shape, dtype=dtype, device=device, generator=generator)
    return torch.randn(shape, dtype=dtype, device=device, generator=generator)


def _rand_examples(spec, lengths="random", dtype=None, device=None, table=None, generator=None,
                   batch_dim=0):
    B, dims = spec[0], [d for d in spec[1:] if len(d)]
    table = {} if table is None else table
    sizes = []
    for dyn, size in dims:
        if dyn:
            if size not in table:
                table[size] = draw_lengths(B, size, lengths, generator)
            sizes.append(table[size])
        else:
            sizes.append([size] * B)
    examples = [storage_to_example(_rand((1,) + tuple(s[b] for s in sizes), dtype, device,
                                         generator), batch_dim) for b in range(B)]
    return examples, tuple(bool(d) for d, _ in dims)


def mb_rand(*spec, lengths="random", dtype=None, device=None, generator=None, batch_dim=0):
    """A random MaskedBatch for ``mb_rand(B, (dynamic, size), ...)`` or a
    random Tensor for ``mb_rand(*shape)``; ``batch_dim`` places each
    example's batch-of-one dimension (None: the examples have none)."""
    if len(spec) == 1 and isinstance(spec[0], (tuple, list)):
        spec = tuple(spec[0])
    if _is_batch_spec(spec):
        examples, dims = _rand_examples(spec, lengths, dtype, device, generator=generator,
                                        batch_dim=batch_dim)
        return MaskedBatch.fromlist(examples, dims, batch_dim)
    if not all(_is_int(s) and s >= 0 for s in spec):
        raise ValueError(f"mb_rand: cannot read the spec {spec!r}; {SPEC_FORMS}")
    return _rand(tuple(spec), dtype, device, generator)


# ------------------------------------------------------------------ outputs
def _flatten(obj, path="output"):
    if isinstance(obj, (tuple, list)):
        out = []
        for i, o in enumerate(obj):
            out += _flatten(o, f"{path}[{i}]")
        return out
    if isinstance(obj, dict):
        out = []
        for k in obj:
            out += _flatten(obj[k], f"{path}[{k!r}]")
        return out
    return [(path, obj)]


def _held(obj, j, path="output", bpath="output"):
    """``[(path, batched path, leaf)]`` of the batched output ``obj`` as
    example ``j`` holds it: a tuple or list of batches is a per-example
    list (the pieces of ``x.split(2, d)`` along a dynamic ``d``, a list
    appended under ``@batch``), whose items that hold no value for ``j``
    example ``j``'s list does not have.  A PerExample holding a container
    (each example's own list of token ids) is example ``j``'s container."""
    if isinstance(obj, PerExample) and isinstance(obj._mb_values[j], (tuple, list, dict)):
        obj = obj._mb_values[j]
    if isinstance(obj, (tuple, list)):
        out, k = [], 0
        for i, o in enumerate(obj):
            if isinstance(o, MaskedBatch):
                gone = absent_examples(o)
                if gone is not None and bool(gone[j]):
                    continue
            elif isinstance(o, PerExample) and o._listed is not None and not bool(o._listed[0][j]):
                continue   # a Python item (a word) appended by some examples only
            out += _held(o, j, f"{path}[{k}]", f"{bpath}[{i}]")
            k += 1
        return out
    if isinstance(obj, dict):
        return [h for key in obj
                for h in _held(obj[key], j, f"{path}[{key!r}]", f"{bpath}[{key!r}]")]
    return [(path, bpath, obj)]


def _per_example(y, B, path, j):
    """Example ``j``'s value of one batched output leaf."""
    if isinstance(y, MaskedBatch):  # as y.examples()[j], whatever the other examples hold
        gone = absent_examples(y) if y._present is not None or not any(y.dims) else None
        if gone is not None and bool(gone[j]):
            raise AssertionError(f"mb_test: {path} holds no value for example {j}, where the "
                                 f"per-example run returns one")
        x = y.padded_data[j:j + 1]
        for d in (d + 1 for d, dyn in enumerate(y.dims) if dyn and y._mask is not None):
            x = x.narrow(d, 0, int(y._lengths(d)[j]))
        return storage_to_example(x, y.batch_dim)
    if isinstance(y, PerExample):
        return y._mb_values[j]
    if isinstance(y, torch.Tensor):
        if y.dim() == 0 or y.size(0) not in (1, B):
            raise AssertionError(
                f"mb_test: {path} of the batched run is a plain Tensor of shape {tuple(y.shape)}, "
                f"which has no per-example rows: a value combined over the batch (e.g. "
                f"matchbox.example_mean(loss)) cannot be compared per example; check the "
                f"per-example values (a loss reduces per example) and combine them outside f")
        return y.expand((B,) + tuple(y.shape[1:]))[j:j + 1]
    return y


def _tolerances(dtype, rtol, atol):
    if rtol is not None and atol is not None:
        return rtol, atol
    if dtype == torch.float64:
        r, a = 1e-7, 1e-9
    elif dtype in (torch.float16, torch.bfloat16):
        r, a = 1e-2, 1e-2
    else:
        r, a = 1e-4, 1e-5
    return (r if rtol is None else rtol), (a if atol is None else atol)


def _compare(what, expected, got, rtol=None, atol=None):
    """None if the tensors agree, else a message."""
    if expected is None and got is None:
        return None
    if expected is None:
        expected = torch.zeros_like(got)
    if got is None:
        got = torch.zeros_like(expected)
    if isinstance(expected, MaskedBatch) or isinstance(got, MaskedBatch):
        return f"{what}: a per-example run returned a MaskedBatch"
    if type(expected) is float and (type(got) is float or isinstance(got, torch.Tensor)
                                    and got.numel() == 1):
        # a Python float (a score summed from .item()s) within the tolerances: the
        # batched run's rows may round in another order
        got = torch.as_tensor(got, dtype=torch.float64).reshape(())
        expected = torch.tensor(expected, dtype=torch.float64)
    if not isinstance(expected, torch.Tensor) or not isinstance(got, torch.Tensor):
        return None if expected == got else f"{what}: expected {expected!r}, got {got!r}"
    if expected.dim() == 0 and tuple(got.shape) == (1,):
        got = got.reshape(())  # a full reduction: per example 0-dim, batched one per example
    if tuple(expected.shape) != tuple(got.shape):
        return f"{what}: shape {tuple(got.shape)} in the batched run, {tuple(expected.shape)} per example"
    if expected.dtype != got.dtype:
        return f"{what}: dtype {got.dtype} in the batched run, {expected.dtype} per example"
    if expected.numel() == 0:
        return None
    e, g = expected.detach(), got.detach().to(expected.device)
    if not e.is_floating_point() and not e.is_complex():
        if torch.equal(e, g):
            return None
        idx = (e != g).nonzero()[0].tolist()
        return f"{what}: differs at index {idx} (batched {g[tuple(idx)].item()}, per-example {e[tuple(idx)].item()})"
    r, a = _tolerances(e.dtype, rtol, atol)
    if torch.allclose(g, e, rtol=r, atol=a, equal_nan=True):
        return None
    err = (g - e).abs()
    err = torch.where(torch.isnan(e) & torch.isnan(g), torch.zeros_like(err), err)
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    flat = int(err.reshape(-1).argmax())
    idx = list(torch.unravel_index(torch.tensor(flat), e.shape)) if e.dim() else []
    idx = [int(i) for i in idx]
    return (f"{what}: worst error {err.reshape(-1)[flat].item():.3g} at index {idx} "
            f"(batched {g[tuple(idx)].item():.6g}, per-example {e[tuple(idx)].item():.6g}; "
            f"rtol={r}, atol={a})")


def mb_assert_allclose(ys, ybs, rtol=None, atol=None):
    """Assert that per-example outputs ``ys`` (a list, one per example) match
    the batched output ``ybs``."""
    B = len(ys)
    errors = []
    for i, y in enumerate(ys):
        flat, flat_b = _flatten(y), _held(ybs, i)
        if len(flat) != len(flat_b):
            raise AssertionError(
                f"mb_test: example {i} returned {len(flat)} outputs, the batch {len(flat_b)}")
        for (path, ye), (_, _, yb) in zip(flat, flat_b):
            got = _per_example(yb, B, path, i)
            msg = _compare(f"{path}, example {i}", ye, got, rtol, atol)
            if msg:
                errors.append(msg)
    if errors:
        raise AssertionError("mb_test: batched and per-example outputs differ:\n  " + "\n  ".join(errors[:10]))


def mb_assert(f, xsarr, xbarr, bs, rtol=None, atol=None):
    """Original-Matchbox form: ``xsarr[k][j]`` is argument k of example j,
    ``xbarr[k]`` the batched argument k; asserts f agrees per example.  An
    ``xsarr[k]`` that is not a list (or tuple) is shared: every example
    gets it unchanged, as in the original."""
    ys = [f(*(xs[j] if isinstance(xs, (list, tuple)) else xs for xs in xsarr))
          for j in range(bs)]
    ybs = f(*xbarr)
    mb_assert_allclose(ys, ybs, rtol, atol)


# ------------------------------------------------------------------ mb_test
def _leaf(t, grad):
    t = t.detach().clone()
    if grad and (t.is_floating_point() or t.is_complex()):
        t.requires_grad_(True)
    return t


def _module_params(f, params):
    if params is not None:
        return [(f"param{i}", p) for i, p in enumerate(params)]
    owner = f if isinstance(f, torch.nn.Module) else getattr(f, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        return [(n, p) for n, p in owner.named_parameters() if p.requires_grad]
    return []


def _cotangent_like(y, generator=None):
    return torch.randn(y.shape, dtype=y.dtype, device=y.device, generator=generator)


def _float_leaves(out):
    return [(p, y) for p, y in _flatten(out)
            if isinstance(y, (torch.Tensor, MaskedBatch)) and y.requires_grad
            and y.dtype.is_floating_point]


def mb_test(f, *specs, grad=True, lengths="random", dtype=None, device=None,
            rtol=None, atol=None, params=None, seed=None, batch_dim=0):
    """Run ``f`` per example and on the batch; assert values (and, unless
    ``grad=False``, gradients of inputs and parameters) agree.

    ``lengths`` picks the dynamic sizes: ``"random"``, ``"mixed"`` (first
    example length 1, last the maximum), ``"one"`` or ``"equal"``.
    ``batch_dim`` places the batch-of-one dimension of the examples that
    specs make (None: they have none).
    ``dtype`` defaults to the dtype of ``f``'s parameters when ``f`` is an
    ``nn.Module``, else torch's default dtype.  Returns the batched output.
    """
    gen = None
    if seed is not None:
        gen = torch.Generator().manual_seed(seed)
    named = _module_params(f, params)
    if dtype is None:
        fp = [p for _, p in named if p.is_floating_point()]
        dtype = fp[0].dtype if fp else torch.get_default_dtype()
    if device is None:
        device = named[0][1].device if named else None

    # build inputs: per-example lists and batched values
    table, per_ex, batched, kinds = {}, [], [], []
    B = None
    for k, spec in enumerate(specs):
        if isinstance(spec, int) and not isinstance(spec, bool):
            per_ex.append(per_ex[spec]), batched.append(batched[spec]), kinds.append(kinds[spec])
            continue
        bdim = batch_dim
        if isinstance(spec, PerExample):   # matchbox.objects(...): one object per example
            if B is not None and len(spec._mb_values) != B:
                raise ValueError(f"mb_test: argument {k} has {len(spec._mb_values)} examples, an "
                                 f"earlier one {B}")
            B = len(spec._mb_values)
            # each run gets its own copies: the code may store into them
            per_ex.append(copy.deepcopy(spec._mb_values))
            batched.append((PerExample(copy.deepcopy(spec._mb_values)), []))
            kinds.append("objects")
            continue
        if isinstance(spec, MaskedBatch):
            examples, dims, bdim = spec.examples(), spec.dims, spec.batch_dim
            kind = "batch"
        elif isinstance(spec, torch.Tensor):
            examples, dims, kind = spec, None, "shared"
        elif _is_batch_spec(spec):
            examples, dims = _rand_examples(spec, lengths, dtype, device, table, gen, batch_dim)
            kind = "batch"
        elif isinstance(spec, (tuple, list)) and all(_is_int(s) and s >= 0 for s in spec):
            examples, dims, kind = _rand(tuple(spec), dtype, device, gen), None, "shared"
        else:
            raise ValueError(f"mb_test: cannot read argument spec {k}: {spec!r}; {SPEC_FORMS}")
        if kind == "batch":
            if B is not None and len(examples) != B:
                raise ValueError(f"mb_test: argument {k} has {len(examples)} examples, an earlier one {B}")
            B = len(examples)
            ex_leaves = [_leaf(e, grad) for e in examples]
            b_leaves = [_leaf(e, grad) for e in examples]
            per_ex.append(ex_leaves)
            batched.append((MaskedBatch.fromlist(b_leaves, dims, bdim), b_leaves))
        else:
            shared_e, shared_b = _leaf(examples, grad), _leaf(examples, grad)
            per_ex.append(shared_e)
            batched.append((shared_b, shared_b))
        kinds.append(kind)
    if B is None:
        raise ValueError("mb_test needs at least one batch argument spec (B, (dynamic, size), ...)")

    # per-example runs
    for _, p in named:
        p.grad = None
    ys, cots = [], []
    for j in range(B):
        args = [x[j] if kind in ("batch", "objects") else x for x, kind in zip(per_ex, kinds)]
        y = f(*args)
        ys.append(y)
        if grad:
            leaves = _float_leaves(y)
            cot = {path: _cotangent_like(t, gen) for path, t in leaves}
            cots.append(cot)
            if leaves:
                # clones: autograd may keep a cotangent (or a view of it) as
                # a leaf's .grad and accumulate into it in place later
                torch.autograd.backward([t for _, t in leaves], [cot[p].clone() for p, _ in leaves])
    param_grads = [None if p.grad is None else p.grad.clone() for _, p in named]

    # batched run
    for _, p in named:
        p.grad = None
    yb = f(*[b[0] for b in batched])
    mb_assert_allclose(ys, yb, rtol, atol)
    if not grad:
        return yb

    leaves = _float_leaves(yb)
    if leaves:
        # each example's path of a batched output (per-example lists renumber)
        names = [{bp: p for p, bp, _ in _held(yb, j)} for j in range(B)]
        outs, grads = [], []
        for path, t in leaves:
            data = t.padded_data if isinstance(t, MaskedBatch) else t
            g = torch.zeros_like(data)
            with torch.no_grad():
                for j in range(B):
                    c = cots[j].get(names[j].get(path))
                    if c is None:  # this example's output does not need a gradient
                        continue
                    if isinstance(t, MaskedBatch):
                        c = example_to_storage(c, t.batch_dim)
                    if isinstance(t, MaskedBatch) or data.size(0) == B:
                        region = g[j:j + 1]
                        for d in range(1, c.dim()):
                            region = region.narrow(d, 0, c.size(d))
                        region.copy_(c)
                    else:
                        g += c
            outs.append(data)
            grads.append(g)
        torch.autograd.backward(outs, grads)

    errors = []
    seen = set()
    for k, (x, kind) in enumerate(zip(per_ex, kinds)):
        if id(batched[k][1]) in seen:
            continue
        seen.add(id(batched[k][1]))
        if kind == "objects":
            continue
        if kind == "batch":
            for j, (xe, xb) in enumerate(zip(x, batched[k][1])):
                if xe.requires_grad:
                    msg = _compare(f"gradient of argument {k}, example {j}", xe.grad, xb.grad, rtol, atol)
                    if msg:
                        errors.append(msg)
        elif x.requires_grad:
            msg = _compare(f"gradient of shared argument {k}", x.grad, batched[k][1].grad, rtol, atol)
            if msg:
                errors.append(msg)
    for (name, p), ge in zip(named, param_grads):
        msg = _compare(f"gradient of parameter {name}", ge, p.grad, rtol, atol)
        if msg:
            errors.append(msg)
    if errors:
        raise AssertionError("mb_test: batched and per-example gradients differ:\n  " + "\n  ".join(errors[:10]))
    return yb
