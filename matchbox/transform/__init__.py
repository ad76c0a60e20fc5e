"""``@matchbox.batch``: run example-level code with per-example control flow
on a MaskedBatch, SIMT style.

A source-to-source rewrite in the style of TensorFlow AutoGraph.  The pass
order is written out in :mod:`.api` (``PASSES``); each construct has its own
module; :mod:`.runtime` is what the generated code calls; :mod:`.parser`,
:mod:`.templates`, :mod:`.naming` and :mod:`.analysis` are the toolkit.
"""
from .api import PASSES, batch, to_source
from .errors import BatchSyntaxError, LoopLimitError, SourceUnavailableError

__all__ = ["batch", "to_source", "PASSES", "BatchSyntaxError", "LoopLimitError",
           "SourceUnavailableError"]
