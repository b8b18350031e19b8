"""Pure-Python helpers: integer math, reference FP8 casts and scale-factor layouts."""

from deep_gemm.utils.casts import (
    ceil_to_ue8m0,
    pack_ue8m0_to_int,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_token_cast_to_fp8,
    unpack_ue8m0_from_int,
)
from deep_gemm.utils.layout import mn_major_tma_aligned_reference, packed_ue8m0_reference
from deep_gemm.utils.math import align, ceil_div, get_tma_aligned_size

__all__ = [
    "align",
    "ceil_div",
    "ceil_to_ue8m0",
    "get_tma_aligned_size",
    "mn_major_tma_aligned_reference",
    "pack_ue8m0_to_int",
    "packed_ue8m0_reference",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_token_cast_to_fp8",
    "unpack_ue8m0_from_int",
]
