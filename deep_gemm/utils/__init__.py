"""Pure-Python helpers, as the reference API's ``deep_gemm.utils``: integer math, reference FP8/FP4 casts,
scale-factor layouts (with the extension's layout functions re-exported) and ``torch.distributed``
helpers. ``deep_gemm`` re-exports everything here at the top level, as the reference does.

Submodules: ``math`` and ``layout`` (the reference's paths), ``dist``, and ours: ``arith``, ``casts``,
``fp4_casts``.
"""

from deep_gemm.utils import dist, layout, math
from deep_gemm.utils.dist import *  # noqa: F403
from deep_gemm.utils.layout import *  # noqa: F403
from deep_gemm.utils.math import *  # noqa: F403

# Each submodule's __all__ names its public functions once; this package exports their union
__all__ = sorted({*dist.__all__, *layout.__all__, *math.__all__})
