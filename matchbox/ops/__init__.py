"""Op rules for MaskedBatch, one module per family.

Importing this package fills the rule table in ``_registry``.  To find the
rule for an op, look in the module of its family:

- ``pointwise``  unary and binary elementwise ops, comparisons, where, clamp,
                 activations
- ``reduction``  sum, mean, std, var, max, min, prod, logsumexp, argmax, ...
- ``softmax``    softmax, log_softmax
- ``matmul``     matmul, @, bmm, mm, mv, dot
- ``shape``      view, reshape, transpose, permute, squeeze, cat, stack, ...
- ``indexing``   x[...], x[...] = v, select, narrow (the gather core they share: ``index_core``)
- ``gather_scatter``  gather, index_select, take_along_dim, scatter, index_add, nonzero
- ``boolean_index``  x[mask] with a bool mask, masked_select (a dynamic count per example)
- ``nn``         linear, embedding, dropout, layer_norm
- ``rnn``        RNN / LSTM / GRU cells and whole-sequence nn.LSTM / GRU / RNN
- ``loss``       cross_entropy, nll_loss, mse_loss
- ``attention``  scaled_dot_product_attention, multi_head_attention_forward (nn.MultiheadAttention)
- ``sorting``    sort, argsort, topk, kthvalue, median
- ``conv``       conv1d/2d/3d, conv_transpose, max/avg/adaptive pooling, pad
- ``norm``       batch_norm, instance_norm, group_norm
- ``autograd``   torch.autograd.grad / backward with MaskedBatch outputs and inputs
- ``helpers``    example-level helpers shared with torch.Tensor
- ``inplace``    in-place forms (add_, relu_, zero_, copy_, index_put_, inplace=True ...),
                 derived from the rules above: imported last
- ``placement``  where each op puts each example's batch-of-one dimension
                 (for values that hold it elsewhere than at 0, or not at all)
- ``fallback``   ops with no rule: torch.func.vmap over the examples, or one
                 call per example where sizes differ
"""
from . import pointwise, reduction, softmax, matmul, shape, indexing, nn, rnn, loss, helpers  # noqa: F401
from . import gather_scatter  # noqa: F401
from . import sorting, boolean_index  # noqa: F401
from . import attention  # noqa: F401
from . import conv, norm  # noqa: F401
from . import autograd  # noqa: F401
from . import inplace  # noqa: F401  (last: derives the in-place forms of every rule above)
from . import placement  # noqa: F401  (last: it reads the rule table)

helpers.install()
