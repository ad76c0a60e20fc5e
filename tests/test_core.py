"""MaskedBatch itself: validation, making and unmaking batches, sizes, moves."""
import pickle

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.test_utils import mb_rand


def ragged(lengths=(2, 4, 1), feat=3, dtype=torch.float64):
    return [torch.randn(1, n, feat, dtype=dtype) for n in lengths]


def test_fromlist_examples_roundtrip():
    xs = ragged()
    b = MaskedBatch.fromlist(xs, (True, False))
    assert b.padded_data.shape == (3, 4, 3)
    assert b.mask.shape == (3, 4, 1)
    assert b.dims == (True, False)
    for x, e in zip(xs, b.examples()):
        assert torch.equal(x, e)


def test_fromlist_infers_dims_and_equal_lengths_need_no_mask():
    b = MaskedBatch.fromlist(ragged((3, 3, 3)), (True, False))
    assert b.dims == (True, False) and b._mask is None
    assert b.mask.shape == (3, 3, 1) and bool(b.mask.all())
    assert MaskedBatch.fromlist(ragged((2, 5))).dims == (True, False)


def test_fromlist_gradient_reaches_examples():
    xs = [x.requires_grad_() for x in ragged()]
    b = MaskedBatch.fromlist(xs, (True, False))
    (b.padded_data * 2).sum().backward()
    for x in xs:
        assert torch.equal(x.grad, torch.full_like(x, 2.0))


@pytest.mark.parametrize("examples, dims, match", [
    ([torch.randn(2, 3)], (False,), "no batch-of-one dimension"),
    ([torch.randn(1, 3), torch.randn(1, 3, 1)], None, "same number of dimensions"),
    ([torch.randn(1, 3), torch.randn(1, 4)], (False,), "declared static"),
    ([torch.randn(1, 3)], (False, True), "dims has 2 entries"),
    ([], None, "at least one example"),
])
def test_fromlist_errors(examples, dims, match):
    with pytest.raises(ValueError, match=match):
        MaskedBatch.fromlist(examples, dims)


@pytest.mark.parametrize("data, mask, dims, match", [
    (torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), (True, False), "dims has 2 entries"),
    (torch.randn(2, 3), torch.ones(2, 3), (True,), "dtype torch.bool"),
    (torch.randn(2, 3), torch.ones(2, 3, 1, dtype=torch.bool), (True,), "mask has 3 dimensions"),
    (torch.randn(2, 3), torch.ones(3, 3, dtype=torch.bool), (True,), "batch size"),
    (torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), (False,), "static dimension 1"),
    (torch.randn(2, 3), torch.ones(2, 2, dtype=torch.bool), (True,), "dynamic dimension 1"),
    (torch.randn(2, 3), torch.tensor([[1, 0, 1], [1, 1, 1]], dtype=torch.bool), (True,), "prefix"),
    (torch.tensor(1.0), None, (), "batch dimension"),
    ([1, 2], None, (), "must be a Tensor"),
])
def test_constructor_validation(data, mask, dims, match):
    with pytest.raises(ValueError, match=match):
        MaskedBatch(data, mask, dims)


def test_sizes():
    b = MaskedBatch.fromlist(ragged((2, 4, 1)), (True, False))
    assert b.size(0) == 1 and b.batch_size == 3 and len(b) == 1  # per example: the leading 1
    assert b.size(2) == 3 and b.size(-1) == 3 and b.size(-3) == 1
    assert b.maxsize(1) == 4 and b.maxsize(0) == 1 and b.maxsize() == (1, 4, 3) and b.dim() == 3
    n = b.size(1)  # a dynamic dim: a per-example int, a plain one nowhere
    assert n.padded_data.tolist() == [2, 4, 1] and b.shape[1] is not None
    assert b.size() == b.shape == (1, n, 3) and b.size() != (1, n, 4)
    assert (b.size() == (1, b.size(1), 3)) is True  # the same sizes in every example
    assert ((b.size() == (1, 2, 3)).padded_data.tolist()) == [True, False, False]
    for read in (lambda: range(b.size(1)), lambda: int(b.shape[1]), lambda: b.size().numel()):
        with pytest.raises((ValueError, TypeError), match="size_as_tensor"):
            read()
    assert b.size_as_tensor(1).padded_data.tolist() == [2, 4, 1]
    assert b.size_as_tensor(2).padded_data.tolist() == [3, 3, 3]
    assert [e.tolist() for e in b.size_as_tensor(1).examples()] == [[2], [4], [1]]


def test_helpers_on_plain_tensor():
    x = torch.randn(1, 5, 3)
    assert x.maxsize(1) == 5
    assert x.size_as_tensor(1).tolist() == [5]
    assert x.batch_zeros(4).shape == (1, 4)
    assert x.batch_ones(2, 2).sum().item() == 4
    b = MaskedBatch.fromlist(ragged(), (True, False))
    z = b.batch_zeros(7)
    assert z.padded_data.shape == (3, 7) and z.dims == (False,)
    assert b.batch_empty(2).dims == (False,)


@pytest.mark.parametrize("op", [bool, int, float, lambda b: b.item(), lambda b: b.tolist()])
def test_no_single_host_value(op):
    b = MaskedBatch.fromlist(ragged(), (True, False)).sum() if False else mb_rand(3, (True, 2))
    with pytest.raises(TypeError, match="@matchbox.batch"):
        op(b)


def test_iteration_is_refused():
    with pytest.raises(TypeError, match="unbind"):
        list(mb_rand(3, (True, 2)))


def test_batch_size_and_device_mismatch():
    a, b = mb_rand(3, (False, 2)), mb_rand(4, (False, 2))
    with pytest.raises(ValueError, match="batch sizes differ"):
        a + b


def test_an_op_the_fallback_refuses_names_op_and_rule_folder():
    b = mb_rand(3, (True, 2))
    with pytest.raises(NotImplementedError, match=r"data_ptr.*matchbox/ops/fallback.py"):
        b.data_ptr()
    with pytest.raises(NotImplementedError, match=r"torch.equal.*matchbox/ops/"):
        torch.equal(b, b)
    with pytest.raises(AttributeError):
        b.not_a_tensor_method


def test_padded_roundtrip():
    data = torch.randn(3, 5, 2)
    b = MaskedBatch.from_padded(data, torch.tensor([5, 2, 3]))
    assert b.dims == (True, False)
    assert [e.shape[1] for e in b.examples()] == [5, 2, 3]
    p = b.to_padded(0.0)
    assert torch.equal(p[1, 2:], torch.zeros(3, 2)) and torch.equal(p[0], data[0])
    t = MaskedBatch.from_padded(data.transpose(0, 1), [5, 2, 3], batch_first=False)
    assert torch.equal(t.to_padded(0.0), p)
    # the padding enters clean: whatever the Tensor held there is 0 in the batch
    assert t._zero and torch.equal(t.padded_data, p)
    with pytest.raises(ValueError, match="lengths must lie"):
        MaskedBatch.from_padded(data, [6, 1, 1])
    with pytest.raises(ValueError, match="3 lengths for a batch of 2"):
        MaskedBatch.from_padded(data[:2], [1, 2, 3])


def test_two_dynamic_dims_from_padded():
    data = torch.randn(2, 4, 3)
    b = MaskedBatch.from_padded(data, ([4, 2], [1, 3]), dim=(1, 2))
    assert [tuple(e.shape) for e in b.examples()] == [(1, 4, 1), (1, 2, 3)]


def test_packed_roundtrip():
    xs = ragged((3, 1, 4), 2, torch.float32)
    b = MaskedBatch.fromlist(xs, (True, False))
    packed = b.to_packed()
    assert isinstance(packed, torch.nn.utils.rnn.PackedSequence)
    back = MaskedBatch.from_packed(packed)
    for x, e in zip(xs, back.examples()):
        assert torch.equal(x, e)


def test_nested_roundtrip():
    xs = ragged((3, 1, 4), 2, torch.float32)
    b = MaskedBatch.fromlist(xs, (True, False))
    nt = b.to_nested()
    assert nt.is_nested
    back = MaskedBatch.from_nested(nt, (True, False))
    for x, e in zip(xs, back.examples()):
        assert torch.equal(x, e)


def test_moves_and_casts():
    b = MaskedBatch.fromlist(ragged(), (True, False))
    assert b.float().dtype == torch.float32
    assert b.to(torch.float16).dtype == torch.float16
    assert b.long().dtype == torch.int64
    assert b.cpu().device.type == "cpu"
    d = b.detach()
    assert d.mask is b.mask and not d.requires_grad
    r = b.requires_grad_()
    assert r.requires_grad and b.requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_roundtrip():
    b = MaskedBatch.fromlist(ragged(), (True, False)).cuda()
    assert b.device.type == "cuda" and b.mask.device.type == "cuda"
    assert (b * 2).tanh().cpu().examples()[0].shape == (1, 2, 3)


def test_pickle_and_save(tmp_path):
    b = MaskedBatch.fromlist(ragged(), (True, False))
    c = pickle.loads(pickle.dumps(b))
    assert torch.equal(c.padded_data, b.padded_data) and torch.equal(c.mask, b.mask) and c.dims == b.dims
    torch.save(b, tmp_path / "b.pt")
    d = torch.load(tmp_path / "b.pt", weights_only=False)
    assert [e.shape for e in d.examples()] == [e.shape for e in b.examples()]


def test_import_replaces_no_torch_function_or_method():
    code = """
import inspect, torch, torch.nn.functional as F
def snap():
    return {(m.__name__, n): id(inspect.getattr_static(m, n)) for m in (torch, torch.Tensor, F)
            for n in dir(m) if not n.startswith('__') or m is torch.Tensor}
before = snap()
import matchbox
after = snap()
changed = [k for k in before if after.get(k) != before[k]]
added = sorted(n for (m, n) in after.keys() - before.keys())
print(changed, added)
"""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    changed, added = out.stdout.strip().split("] [")
    assert changed == "["
    assert set(added.strip("]").replace("'", "").split(", ")) <= {
        "batch_zeros", "batch_ones", "batch_empty", "split_dim", "join_dims",
        "causal_mask", "maxsize", "size_as_tensor"}


def test_examples_of_a_value_some_examples_never_computed_raise():
    """A step of x.unbind(1) that only the longer examples have, used
    without @batch, must not come back as a silently wrong per-example value."""
    x = MaskedBatch.fromlist([torch.randn(1, 3, 2), torch.randn(1, 1, 2)], dims=(True, False))
    last = list(x.unbind(1))[-1]    # the padded last step
    with pytest.raises(ValueError, match=r"examples \[1\] of this batch hold no value"):
        last.examples()
    h = x.batch_zeros(2)
    with pytest.raises(ValueError, match="@matchbox.batch"):
        for x_t in x.unbind(1):     # no @batch: example 1 has no step 2, h + x_t raises
            h = torch.tanh(h + x_t)
    assert len(x[:, -1].examples()) == 2   # per-example indexing is the fix
    for a, b in zip(x.unbind(1)[-1].examples(), x[:, -1].examples()):  # and so is steps[-1]
        assert torch.equal(a, b)
