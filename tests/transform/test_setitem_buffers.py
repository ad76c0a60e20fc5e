"""``buf[i] = v`` into a plain Tensor with a per-example value under @batch
(the PyTorch seq2seq tutorial's encoder loop): each example writes into a
buffer of its own, values and gradients equal to the per-example runs."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from matchbox import MaskedBatch, batch, to_source
from matchbox.test_utils import draw_lengths, mb_rand, mb_test

H, V, MAX = 4, 7, 6
LENGTHS = ("random", "mixed", "one", "equal")


def tokens(B, mode, seed):
    """B sequence-first index inputs ``(n, 1)``, as the tutorial feeds them."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randint(0, V, (n, 1), generator=g) for n in draw_lengths(B, MAX, mode, g)]
    return MaskedBatch.fromlist(xs, dims=(True,), batch_dim=1)


class Encoder(nn.Module):
    """The tutorial's EncoderRNN and the encoder loop of its train()."""

    def __init__(self):
        super().__init__()
        self.hidden_size = H
        self.embedding = nn.Embedding(V, H)
        self.gru = nn.GRU(H, H)

    def step(self, input, hidden):
        embedded = self.embedding(input).view(1, 1, -1)
        return self.gru(embedded, hidden)

    @batch
    def forward(self, input_tensor):
        encoder_hidden = torch.zeros(1, 1, self.hidden_size)
        input_length = input_tensor.size(0)
        encoder_outputs = torch.zeros(MAX, self.hidden_size)
        for ei in range(input_length):
            encoder_output, encoder_hidden = self.step(input_tensor[ei], encoder_hidden)
            encoder_outputs[ei] = encoder_output[0, 0]
        return encoder_outputs, encoder_hidden


@pytest.mark.parametrize("mode", LENGTHS)
def test_tutorial_encoder_loop(mode):
    torch.manual_seed(0)
    enc = Encoder()
    out, hidden = mb_test(enc, tokens(5, mode, seed=len(mode)))
    assert out.batch_dim is None and out.dims == (False, False)


class AttnDecoder(nn.Module):
    """The tutorial's AttnDecoderRNN."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, H)
        self.attn = nn.Linear(2 * H, MAX)
        self.attn_combine = nn.Linear(2 * H, H)
        self.gru = nn.GRU(H, H)
        self.out = nn.Linear(H, V)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.embedding(input).view(1, 1, -1)
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = torch.cat((embedded[0], attn_applied[0]), 1)
        output = F.relu(self.attn_combine(output).unsqueeze(0))
        output, hidden = self.gru(output, hidden)
        return F.log_softmax(self.out(output[0]), dim=1), hidden, attn_weights


class Seq2Seq(nn.Module):
    """train()'s forward pass with teacher forcing."""

    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = Encoder(), AttnDecoder()

    @batch
    def forward(self, input_tensor, target_tensor):
        encoder_hidden = torch.zeros(1, 1, H)
        encoder_outputs = torch.zeros(MAX, H)
        for ei in range(input_tensor.size(0)):
            encoder_output, encoder_hidden = self.encoder.step(input_tensor[ei], encoder_hidden)
            encoder_outputs[ei] = encoder_output[0, 0]
        decoder_input = torch.tensor([[0]])
        decoder_hidden = encoder_hidden
        loss = 0
        for di in range(target_tensor.size(0)):
            decoder_output, decoder_hidden, decoder_attention = self.decoder(
                decoder_input, decoder_hidden, encoder_outputs)
            loss += F.nll_loss(decoder_output, target_tensor[di])
            decoder_input = target_tensor[di]
        return loss


@pytest.mark.parametrize("mode", LENGTHS)
def test_attention_decoder_reads_the_buffer(mode):
    torch.manual_seed(1)
    model = Seq2Seq()
    mb_test(model, tokens(4, mode, seed=1), tokens(4, "random", seed=2 + len(mode)))


@batch
def in_a_branch(x):
    buf = torch.zeros(MAX, 3, dtype=x.dtype)
    for i in range(x.size(0)):
        if x[i].sum() > 0:
            buf[i] = x[i] * 2
        else:
            buf[i] = -x[i]
    if buf.sum() > 0:
        buf[MAX - 1] = x[0]
    return buf


@pytest.mark.parametrize("mode", LENGTHS)
def test_store_in_a_branch(mode):
    mb_test(in_a_branch, (6, (True, MAX), (False, 3)), batch_dim=None, lengths=mode,
            dtype=torch.float64)


@batch
def per_example_key(x):
    buf = torch.zeros(MAX, dtype=x.dtype)
    for i in range(x.size(0)):
        buf[i] = 1.0                     # a plain value, a per-example key
    for i in range(x.size(0)):
        buf[i] = buf[i] + x[i].sum()
    return buf


@pytest.mark.parametrize("mode", LENGTHS)
def test_per_example_key_and_reads_of_the_copies(mode):
    mb_test(per_example_key, (5, (True, MAX), (False, 2)), batch_dim=None, lengths=mode,
            dtype=torch.float64)


@batch
def batch_first_value(x):
    buf = torch.zeros(MAX, 1, 3, dtype=x.dtype)
    for i in range(x.size(1)):
        buf[i] = x[:, i]                 # (1, 3) per example, batch-of-one at 0
    return buf


def test_value_with_a_batch_of_one_dimension():
    mb_test(batch_first_value, (5, (True, MAX), (False, 3)), lengths="mixed", dtype=torch.float64)


@batch
def sliced(x):
    buf = torch.zeros(1, MAX, dtype=x.dtype)
    for i in range(x.size(0)):
        buf[:, i] = x[i].sum()
        buf[0, i + 1:] = 0.5             # a plain value under lanes: only the active examples'
    return buf


@pytest.mark.parametrize("mode", LENGTHS)
def test_sliced_keys(mode):
    mb_test(sliced, (5, (True, MAX), (False, 2)), batch_dim=None, lengths=mode,
            dtype=torch.float64)
    assert "buf = _mb.setitem(buf, (slice(None), _mb.read(i)), " in to_source(sliced)


@batch
def ones_up_to(x):
    buf = torch.zeros(MAX)
    for i in range(x.size(0)):
        buf[i] = 1.0
    return buf


def test_uniform_lengths_keep_a_plain_tensor():
    x = mb_rand(3, (False, 4), (False, 2), batch_dim=None)
    assert type(ones_up_to(x)) is torch.Tensor   # no lanes, plain key and value: as written
    x = mb_rand(3, (True, 4), (False, 2), batch_dim=None, lengths="mixed")
    out = ones_up_to(x)
    for e, xe in zip(out.examples(), x.examples()):
        n = xe.size(0)
        assert e.tolist() == [1.0] * n + [0.0] * (MAX - n)


@batch
def accumulated(x):
    buf = torch.zeros(MAX, dtype=x.dtype)
    d = {"n": x.sum() * 0}
    for i in range(x.size(0)):
        buf[i] += 1.0                    # a plain update under lanes
        buf[:i + 1] += x[i].sum()        # a per-example one
        d["n"] += x[i].sum()
    return buf, d["n"]


@pytest.mark.parametrize("mode", LENGTHS)
def test_augmented_item_stores(mode):
    mb_test(accumulated, (5, (True, MAX), (False, 2)), batch_dim=None, lengths=mode,
            dtype=torch.float64)


def test_dict_and_list_targets_keep_plain_semantics():
    @batch
    def f(x):
        d, lst = {}, [0, 0]
        for i in range(x.size(0)):
            d["last"] = x[i]
            lst[1] = x[i]
        return d["last"] + lst[1]
    mb_test(f, (4, (True, 5), (False, 2)), batch_dim=None, lengths="mixed", dtype=torch.float64)


def test_rewritten_source_rebinds_the_name():
    src = to_source(in_a_branch)
    assert "buf = _mb.setitem(buf, _mb.read(i), " in src


@batch
def returned_early(x):
    buf = torch.zeros(MAX, dtype=x.dtype)
    for i in range(x.size(0)):
        if x[i].sum() > 0:
            return buf              # these examples are done with it; the others store on
        buf[i] = 1.0
    return buf


@pytest.mark.parametrize("mode", LENGTHS)
def test_a_buffer_returned_by_some_examples(mode):
    """Before, the returned value held the buffer too, so it counted as
    shared and the later plain stores reached the examples that had left."""
    mb_test(returned_early, (6, (True, MAX), (False, 2)), batch_dim=None, lengths=mode,
            dtype=torch.float64)


# ------------------------------------------------------------------ refusals
class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(MAX, 3))

    @batch
    def forward(self, x):
        for i in range(x.size(0)):
            self.buf[i] = x[i]
        return self.buf


@batch
def into_argument(x, buf):
    for i in range(x.size(0)):
        buf[i] = x[i]
    return buf


@batch
def into_alias(x):
    buf = torch.zeros(MAX, 3)
    kept = [buf]
    for i in range(x.size(0)):
        buf[i] = x[i]
    return buf, kept


@batch
def into_view(x):
    both = torch.zeros(2, MAX, 3)
    buf = both[0]
    for i in range(x.size(0)):
        buf[i] = x[i]
    return both


@batch
def into_own_clone(x, buf):
    buf = buf.clone()
    for i in range(x.size(0)):
        buf[i] = x[i]
    return buf


X = mb_rand(3, (True, MAX), (False, 3), lengths="mixed", batch_dim=None)


@pytest.mark.parametrize("call, why", [
    (lambda: Holder()(X), "that is no local variable"),
    (lambda buf=torch.zeros(MAX, 3): into_argument(X, buf), "that something else holds too"),
    (lambda: into_alias(X), "that something else holds too"),
    (lambda: into_view(X), "that is a view of another Tensor"),
])
def test_shared_targets_are_refused_naming_the_line(call, why):
    with pytest.raises(NotImplementedError, match=why) as e:
        call()
    assert f"{__file__}:" in str(e.value)


def test_an_argument_cloned_first_takes_the_store():
    buf = torch.zeros(MAX, 3)
    out = into_own_clone(X, buf)
    assert not buf.any()
    for e, x in zip(out.examples(), X.examples()):
        assert torch.equal(e[:x.size(0)], x) and not e[x.size(0):].any()


# ------------------------------------------------------------------ placement
def _store(x, i, v):
    y = x.clone()
    y[i] = v
    return y


@pytest.mark.parametrize("bx, bv, vshape", [
    (None, None, (3,)),             # (n, 3) per example, no batch-of-one dims
    (None, 0, (1, 3)),              # a leading 1 in the value is dropped, as torch does
    (1, 0, (1, 3)),                 # (n, 1, 3) sequence-first takes a (1, 3) batch-first row
    (1, None, (3,)),
    (1, None, (1, 3)),
])
def test_setitem_with_placed_operands(bx, bv, vshape):
    B = 4
    xs = [torch.randn(n, *((1,) if bx == 1 else ()), 3, dtype=torch.float64)
          for n in draw_lengths(B, MAX, "mixed")]
    vs = [torch.randn(vshape, dtype=torch.float64) for _ in range(B)]
    x = MaskedBatch.fromlist(xs, dims=(True, False), batch_dim=bx)
    v = MaskedBatch.fromlist(vs, dims=(False,) * (len(vshape) - (bv is not None)), batch_dim=bv)
    mb_test(lambda x, v: _store(x, 0, v), x, v)


def test_setitem_value_placed_elsewhere_is_refused():
    x = mb_rand(3, (True, 4), (False, 1), (False, 3), batch_dim=1, dtype=torch.float64)
    v = mb_rand(3, (False, 3), batch_dim=1)          # (3, 1): its 1 meets x[0]'s dim of size 3
    with pytest.raises(ValueError):
        _store(x, 0, v)


# ------------------------------------------------------------------ in-place methods
@batch
def counted(x):
    """A plain count and sum kept with in-place methods in a per-example loop."""
    count = torch.zeros(1, dtype=x.dtype)
    acc = torch.zeros(3, dtype=x.dtype)
    for i in range(x.size(0)):
        count.add_(1.0)
        acc.add_(x[i] * 2.0)
        if x[i].sum() > 0:
            acc.mul_(0.5)
    return acc * count


@pytest.mark.parametrize("mode", LENGTHS)
def test_in_place_methods_on_a_local_change_each_examples_own(mode):
    """Before, ``count.add_(1.0)`` on a plain Tensor ran once per step for
    the whole batch: every example counted the longest one's steps."""
    mb_test(counted, (5, (True, MAX), (False, 3)), batch_dim=None, lengths=mode,
            dtype=torch.float64)


@batch
def counts_into_argument(x, count):
    for i in range(x.size(0)):
        count.add_(1.0)
    return x.sum(0) * count


def test_in_place_method_on_a_shared_tensor_is_refused():
    count = torch.zeros(1)   # the caller's: each example would add to this one Tensor
    with pytest.raises(NotImplementedError, match=r"count.add_\(\.\.\.\) at .*that something else holds"):
        counts_into_argument(X, count)


def test_in_place_method_source():
    assert "count = _mb.inplace(count, 'add_', 'count', 1.0, own=True)" in to_source(counted)
