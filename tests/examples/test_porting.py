"""The porting example: the matchbox model equals per-example runs, and the
padded and matchbox versions give the same loss and gradients."""
import math

import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.test_utils import mb_test
from examples import porting

LENGTHS = {"mixed": [1, 4, 2, 7], "one": [1, 1, 1], "equal": [5, 5, 5], "single": [6]}


def sentences(lengths, vocab=40):
    return [torch.randint(vocab, (1, n)) for n in lengths]


@pytest.mark.parametrize("mode", LENGTHS)
def test_model_equals_per_example(mode):
    model = porting.GRUClassifier(dim=6, hidden=5).double()
    tokens = MaskedBatch.fromlist(sentences(LENGTHS[mode]), dims=(True,))
    out = mb_test(model, tokens)
    assert out.dims == (False,)


def test_padded_and_matchbox_versions_agree():
    torch.manual_seed(0)
    padded = porting.PaddedGRUClassifier(dim=6, hidden=5).double()
    masked = porting.GRUClassifier(dim=6, hidden=5).double()
    masked.load_state_dict(padded.state_dict())
    examples = [(t, torch.tensor([i % 4])) for i, t in enumerate(sentences([3, 1, 8, 5, 2]))]
    tokens, lengths, labels = porting.batch_padded(examples)
    loss_p = F.cross_entropy(padded(tokens, lengths), labels)
    mtokens, mlabels = porting.batch_masked(examples)
    assert torch.equal(mtokens.to_padded(), tokens)
    assert torch.equal(torch.cat(mlabels.examples()), labels)
    loss_m = matchbox.example_mean(F.cross_entropy(masked(mtokens), mlabels))
    torch.testing.assert_close(loss_m, loss_p)
    loss_p.backward()
    loss_m.backward()
    for (name, p), q in zip(padded.named_parameters(), masked.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_from_padded_input_gives_the_same_batch():
    """The one-line port of an existing padded pipeline."""
    model = porting.GRUClassifier(dim=6, hidden=5)
    examples = [(t, torch.tensor([0])) for t in sentences([2, 6, 3])]
    tokens, lengths, _ = porting.batch_padded(examples)
    a = model(MaskedBatch.from_padded(tokens, lengths))
    b = model(porting.batch_masked(examples)[0])
    torch.testing.assert_close(a.padded_data, b.padded_data)


def test_main_runs():
    metrics = porting.main(steps=4, batch_size=8, every=2)
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["max_difference"] < 1e-5
    assert metrics["matchbox_loss"] < metrics["start_loss"]
