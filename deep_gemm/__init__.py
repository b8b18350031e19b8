"""deep_gemm: JIT-compiled tensor-core GEMMs for NVIDIA Hopper: FP8 with fine-grained scaling, BF16, MQA logits.

The public API re-exports the C++ extension (`deep_gemm._C`) and the pure-Python helpers
(`deep_gemm.utils`, `deep_gemm.testing`). Kernels are compiled at run time, per shape, and cached
on disk (`$DG_JIT_CACHE_DIR`, default `~/.deep_gemm`).
"""

import torch  # noqa: F401  (loads libc10/libtorch before the extension)

from deep_gemm._extension_check import require_built_extension

require_built_extension()

from deep_gemm import testing, utils
from deep_gemm._C import (
    InputError,
    compile_kernel,
    get_block_size_multiple_of,
    get_deterministic,
    get_ignore_compile_dims,
    get_mk_alignment_for_contiguous_layout,
    get_num_sms,
    get_pdl,
    get_tc_util,
    get_tma_aligned_size,
    kernel_families,
    set_block_size_multiple_of,
    set_deterministic,
    set_ignore_compile_dims,
    set_mk_alignment_for_contiguous_layout,
    set_num_sms,
    set_pdl,
    set_tc_util,
)
# The kernel entry points: each calls its torch.library op while torch.compile traces, the _C binding otherwise
from deep_gemm.ops import (
    bf16_gemm_nn,
    bf16_gemm_nt,
    bf16_gemm_tn,
    bf16_gemm_tt,
    cublaslt_gemm_nn,
    cublaslt_gemm_nt,
    cublaslt_gemm_tn,
    cublaslt_gemm_tt,
    einsum,
    fp8_einsum,
    fp8_fp4_gemm_nn,
    fp8_fp4_gemm_tn,
    fp8_fp4_gemm_tt,
    fp8_fp4_mqa_logits,
    fp8_fp4_paged_mqa_logits,
    fp8_gemm_nn,
    fp8_gemm_nt,
    fp8_gemm_nt_skip_head_mid,
    fp8_gemm_tn,
    fp8_gemm_tt,
    fp8_mqa_logits,
    fp8_paged_mqa_logits,
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    get_paged_mqa_logits_metadata,
    k_grouped_bf16_gemm_tn_contiguous,
    k_grouped_fp8_gemm_nt_contiguous,
    k_grouped_fp8_gemm_tn_contiguous,
    m_grouped_bf16_gemm_nn_contiguous,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
    m_grouped_fp8_fp4_gemm_nn_contiguous,
    m_grouped_fp8_gemm_nn_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
    per_block_quant_fp8,
    per_token_quant_fp4,
    per_token_quant_fp8,
    silu_and_mul_quant_fp8,
    tf32_hc_prenorm_gemm,
    transform_sf_into_required_layout,
)

# Everything in deep_gemm.utils at the top level, as the reference does (`from .utils import *`); the names it
# shares with the extension (get_mn_major_tma_aligned_tensor, get_tma_aligned_size, ...) are the same objects.
from deep_gemm.utils import *  # noqa: F403

# Ahead-of-time builds: deep_gemm.precompile(shapes, jobs=...) (the function; `python -m deep_gemm.precompile` runs
# the module's command line, and `from deep_gemm.precompile import GemmShape` reaches the module)
from deep_gemm.precompile import precompile  # noqa: E402

# The reference's deep_gemm.legacy (its Triton functions), served by the kernels above
from deep_gemm import legacy  # noqa: E402

# Mega MoE (the reference's deep_gemm.mega names and the SGLang fork's SM90 ones), also at the top level
from deep_gemm import mega  # noqa: E402
from deep_gemm.mega import (  # noqa: E402
    SymmBuffer,
    bf16_mega_moe,
    fp8_fp4_mega_moe,
    fp8_mega_moe,
    get_symm_buffer_for_mega_moe,
    get_symm_buffer_for_sm90_mega_moe,
    mega_moe_pre_dispatch_sm90,
    transform_weights_for_mega_moe,
    transform_weights_for_mega_moe_sm90,
)

# Aliases engines call
fp8_fp4_gemm_nt = fp8_gemm_nt
m_grouped_fp8_fp4_gemm_nt_contiguous = m_grouped_fp8_gemm_nt_contiguous
m_grouped_fp8_fp4_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout

__version__ = "0.1.0"

__all__ = [
    "InputError",
    "bf16_gemm_nn",
    "bf16_gemm_nt",
    "bf16_gemm_tn",
    "bf16_gemm_tt",
    "bf16_m_grouped_gemm_nt_masked",
    "compile_kernel",
    "cublaslt_gemm_nn",
    "cublaslt_gemm_nt",
    "cublaslt_gemm_tn",
    "cublaslt_gemm_tt",
    "einsum",
    "fp8_einsum",
    "fp8_fp4_gemm_nt",
    "fp8_gemm_nn",
    "fp8_gemm_nt",
    "fp8_gemm_nt_skip_head_mid",
    "fp8_gemm_tn",
    "fp8_gemm_tt",
    "fp8_fp4_mqa_logits",
    "fp8_mqa_logits",
    "fp8_fp4_paged_mqa_logits",
    "fp8_paged_mqa_logits",
    "get_k_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor",
    "get_num_sms",
    "get_paged_mqa_logits_metadata",
    "get_pdl",
    "get_tc_util",
    "get_tma_aligned_size",
    "kernel_families",
    "legacy",
    "k_grouped_bf16_gemm_tn_contiguous",
    "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_fp8_gemm_tn_contiguous",
    "m_grouped_bf16_gemm_nn_contiguous",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "per_block_quant_fp8",
    "per_token_quant_fp4",
    "per_token_quant_fp8",
    "precompile",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked",
    "set_mk_alignment_for_contiguous_layout",
    "set_num_sms",
    "set_pdl",
    "set_tc_util",
    "silu_and_mul_quant_fp8",
    "testing",
    "tf32_hc_prenorm_gemm",
    "transform_sf_into_required_layout",
    "utils",
    "fp8_fp4_gemm_nn",
    "fp8_fp4_gemm_tn",
    "fp8_fp4_gemm_tt",
    "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_fp4_gemm_nn_contiguous",
    "set_ignore_compile_dims",
    "get_ignore_compile_dims",
    "set_block_size_multiple_of",
    "get_block_size_multiple_of",
    "set_deterministic",
    "get_deterministic",
    "mega",
    "SymmBuffer",
    "bf16_mega_moe",
    "fp8_fp4_mega_moe",
    "fp8_mega_moe",
    "get_symm_buffer_for_mega_moe",
    "get_symm_buffer_for_sm90_mega_moe",
    "mega_moe_pre_dispatch_sm90",
    "transform_weights_for_mega_moe",
    "transform_weights_for_mega_moe_sm90",
]
__all__ += sorted(set(utils.__all__) - set(__all__))
