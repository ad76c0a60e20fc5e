"""matchbox: write PyTorch code for one example, run it on a batch of
examples of different sizes."""
from .core import MaskedBatch
from . import ops  # noqa: F401  (fills the rule table)
from . import functional
from . import data
from .ops.loss import example_sum, example_mean, token_mean
from .ops.fallback import PerExampleFallbackWarning
from .transform import batch, to_source
from .func import vmap
from .objects import objects, examples, PerExample

__all__ = ["MaskedBatch", "functional", "data", "batch", "to_source",
           "example_sum", "example_mean", "token_mean", "vmap", "PerExampleFallbackWarning",
           "objects", "examples", "PerExample"]
__version__ = "0.1.0"
