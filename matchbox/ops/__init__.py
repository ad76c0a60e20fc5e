"""Op rules for MaskedBatch, one module per family.

Importing this package fills the rule table in ``_registry``.  To find the
rule for an op, look in the module of its family:

- ``pointwise``  unary and binary elementwise ops, comparisons, where, clamp,
                 activations
- ``reduction``  sum, mean, std, var, max, min, prod, logsumexp, argmax, ...
- ``softmax``    softmax, log_softmax
- ``matmul``     matmul, @, bmm, mm, mv, dot
- ``shape``      view, reshape, transpose, permute, squeeze, cat, stack, ...
- ``indexing``   x[...], gather, index_select, setitem
- ``nn``         linear, embedding, dropout, layer_norm
- ``rnn``        RNN / LSTM / GRU cells
- ``loss``       cross_entropy, nll_loss, mse_loss
- ``helpers``    example-level helpers shared with torch.Tensor
"""
from . import pointwise, reduction, softmax, matmul, shape, indexing, nn, rnn, loss, helpers  # noqa: F401

helpers.install()
