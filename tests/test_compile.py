"""torch.compile of straight-line code on MaskedBatch: one graph, no breaks
(``fullgraph=True`` fails on any break), and the eager numbers, values and
gradients.  Op rules keep no host decision out of the graph: the lane state
is plain per-thread storage, row gathering (unless dynamo captures
data-dependent shapes) and known-zero padding step aside, and the
per-example checks run on the device (``_registry.fail_if``).  The
``aot_eager`` backend traces forward and backward without generating
kernels, so the tests stay fast.  The control-flow side is in
tests/transform/test_compile.py.

The same property on GPU, eagerly: a training step makes no host-device
sync (``torch.cuda.set_sync_debug_mode("error")`` raises on one)."""
import pytest
import torch
import torch.nn.functional as F

from examples.transformer import Transformer
from matchbox import MaskedBatch, example_sum


def _loss(model, src, tgt_in, tgt_out):
    """Each pair's summed token loss, summed over the pairs (in the graph)."""
    return example_sum(F.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, reduction="sum"))


def _pairs(lengths, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for n in lengths:
        t = max(1, n + int(torch.randint(-1, 2, (), generator=g)))
        pairs.append((torch.randint(0, vocab, (1, n), generator=g),
                      torch.randint(0, vocab, (1, t), generator=g),
                      torch.randint(0, vocab, (1, t), generator=g)))
    return pairs


def _traced(ops):
    """``aot_eager``, noting the ops of each graph that dynamo captures."""
    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    def backend(gm, inputs):
        ops.update(str(n.target) for n in gm.graph.nodes)
        return aot_eager(gm, inputs)
    return backend


@pytest.mark.parametrize("gather", [False, True], ids=["masked", "gathered"])
@pytest.mark.parametrize("lengths", [(3, 1, 5), (4, 4), (2,)], ids=["random", "equal", "one"])
def test_transformer_compiles_to_one_graph_with_eager_numbers(lengths, gather):
    """With dynamo's ``capture_dynamic_output_shape_ops``, row-wise rules
    gather the real rows inside the graph (``nonzero``) as they do eagerly
    on CPU; without it they mask every row."""
    torch.manual_seed(0)
    model = Transformer(vocab=11, d_model=8, heads=2, layers=1, d_ff=16, max_len=8).double()
    pairs = _pairs(lengths, 11, seed=len(lengths))
    batches = [MaskedBatch.fromlist(list(xs), dims=(True,)) for xs in zip(*pairs)]
    params = list(model.parameters())

    eager = _loss(model, *batches)
    want = torch.autograd.grad(eager, params)
    ops = set()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=gather):
        compiled = torch.compile(_loss, backend=_traced(ops), fullgraph=True)(model, *batches)
    got = torch.autograd.grad(compiled, params)
    # one example has no padding: there are no rows to pick
    assert any("nonzero" in op for op in ops) == (gather and len(lengths) > 1)
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    per_example = sum(_loss(model, *p) for p in pairs)
    torch.testing.assert_close(eager, per_example)


def test_compiled_checks_still_refuse_bad_input():
    """An out-of-range index is still refused inside the graph: the check
    is an async assert, with a summary instead of the example."""
    emb = torch.nn.Embedding(5, 3)
    f = torch.compile(lambda x: emb(x).sum().padded_data, backend="aot_eager", fullgraph=True)
    good = MaskedBatch.fromlist([torch.tensor([[1, 2, 4]]), torch.tensor([[0]])], dims=(True,))
    torch.testing.assert_close(f(good), emb(good).sum().padded_data)
    bad = MaskedBatch.fromlist([torch.tensor([[1, 2, 5]]), torch.tensor([[0]])], dims=(True,))
    with pytest.raises(RuntimeError, match="embedding: an index is out of range .* 5 rows"):
        f(bad)
    with pytest.raises(IndexError, match="index 5 out of range .*example 0"):
        emb(bad)  # eagerly on CPU the error names the example


def test_compiled_length_check_still_refuses_mismatched_examples():
    f = torch.compile(lambda a, b: (a * b).sum().padded_data, backend="aot_eager", fullgraph=True)
    a = MaskedBatch.fromlist([torch.ones(1, 3), torch.ones(1, 2)], dims=(True,))
    b = MaskedBatch.fromlist([torch.ones(1, 3), torch.ones(1, 1)], dims=(True,))
    torch.testing.assert_close(f(a, a), torch.tensor([3.0, 2.0]))  # per example
    with pytest.raises(RuntimeError, match="lengths differ"):
        f(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_transformer_step_on_gpu_never_waits_for_the_device():
    torch.manual_seed(0)
    model = Transformer(vocab=11, d_model=8, heads=2, layers=1, d_ff=16, max_len=8).cuda()
    pairs = [tuple(x.cuda() for x in p) for p in _pairs((3, 1, 5), 11, seed=0)]
    batches = [MaskedBatch.fromlist(list(xs), dims=(True,)) for xs in zip(*pairs)]
    _loss(model, *batches).backward()  # warm-up (lazy CUDA init may sync)
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = _loss(model, *batches)
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(loss, sum(_loss(model, *p) for p in pairs))
