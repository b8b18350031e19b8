"""Pure-Python helpers, as the reference API's ``deep_gemm.utils``: integer math, reference FP8/FP4 casts,
scale-factor layouts (with the extension's layout functions re-exported) and ``torch.distributed``
helpers. ``deep_gemm`` re-exports everything here at the top level, as the reference does.

Submodules: ``math`` and ``layout`` (the reference's paths), ``dist``, and ours: ``arith``, ``casts``,
``fp4_casts``.
"""

from deep_gemm.utils import dist, layout, math
from deep_gemm.utils.dist import dist_print, init_dist, uneven_all_gather
from deep_gemm.utils.layout import (
    get_k_alignment_for_contiguous_layout,
    get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_m_alignment_for_contiguous_layout,
    get_mk_alignment_for_contiguous_layout,
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    get_theoretical_mk_alignment_for_contiguous_layout,
    get_tma_aligned_size,
    mn_major_tma_aligned_reference,
    packed_ue8m0_reference,
    set_mk_alignment_for_contiguous_layout,
)
from deep_gemm.utils.math import (
    align,
    cast_back_from_fp4,
    ceil_div,
    ceil_to_ue8m0,
    pack_ue8m0_to_int,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_custom_dims_cast_to_fp8,
    per_token_cast_to_fp4,
    per_token_cast_to_fp8,
    transpose_packed_fp4,
    unpack_ue8m0_from_int,
)

__all__ = [
    "align",
    "cast_back_from_fp4",
    "ceil_div",
    "ceil_to_ue8m0",
    "dist_print",
    "get_k_alignment_for_contiguous_layout",
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_m_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_tma_aligned_size",
    "init_dist",
    "mn_major_tma_aligned_reference",
    "pack_ue8m0_to_int",
    "packed_ue8m0_reference",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp4",
    "per_token_cast_to_fp8",
    "set_mk_alignment_for_contiguous_layout",
    "transpose_packed_fp4",
    "uneven_all_gather",
    "unpack_ue8m0_from_int",
]
