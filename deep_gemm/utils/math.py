"""The reference API's ``deep_gemm.utils.math``: integer helpers, UE8M0 scales and the reference casts.

The functions live in :mod:`deep_gemm.utils.arith`, :mod:`deep_gemm.utils.casts` and
:mod:`deep_gemm.utils.fp4_casts`; this module gathers them at the path the reference has.
"""

from deep_gemm.utils.arith import align, ceil_div
from deep_gemm.utils.casts import (
    ceil_to_ue8m0,
    pack_ue8m0_to_int,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_custom_dims_cast_to_fp8,
    per_token_cast_to_fp8,
    unpack_ue8m0_from_int,
)
from deep_gemm.utils.fp4_casts import cast_back_from_fp4, per_token_cast_to_fp4, transpose_packed_fp4

__all__ = [
    "align",
    "cast_back_from_fp4",
    "ceil_div",
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp4",
    "per_token_cast_to_fp8",
    "transpose_packed_fp4",
    "unpack_ue8m0_from_int",
]
