"""Type stubs of the deep_gemm._C extension (checked against the module by tests/test_api_surface.py)."""

import builtins
from collections.abc import Sequence
from typing import Any

import torch

class NotImplementedError(builtins.NotImplementedError): ...
class InputError(builtins.ValueError, builtins.RuntimeError): ...

def set_num_sms(new_num_sms: int) -> None: ...
def get_num_sms() -> int: ...
def set_tc_util(new_tc_util: int) -> None: ...
def get_tc_util() -> int: ...
def set_pdl(new_enable_pdl: bool) -> None: ...
def get_pdl() -> bool: ...
def set_mk_alignment_for_contiguous_layout(alignment: int) -> None: ...
def get_mk_alignment_for_contiguous_layout() -> int: ...
def set_ignore_compile_dims(new_value: bool) -> None: ...
def get_ignore_compile_dims() -> bool: ...
def set_block_size_multiple_of(new_value: int | tuple[int, int]) -> None: ...
def get_block_size_multiple_of() -> tuple[int, int]: ...
def set_deterministic(new_value: bool) -> None: ...
def get_deterministic() -> bool: ...
def get_tma_aligned_size(x: int, element_size: int) -> int: ...
def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor: ...
def get_mn_major_tma_aligned_packed_ue8m0_tensor(
    sf: torch.Tensor, psum_layout: torch.Tensor | None = None
) -> torch.Tensor: ...
def per_token_quant_fp8(
    x: torch.Tensor,
    use_ue8m0: bool = False,
    gran_k: int = 128,
    use_packed_ue8m0: bool = False,
    sf_mn_major: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def silu_and_mul_quant_fp8(
    x: torch.Tensor,
    use_ue8m0: bool = False,
    gran_k: int = 128,
    use_packed_ue8m0: bool = False,
    row_weights: torch.Tensor | None = None,
    activation_clamp: float | None = None,
    masked_m: torch.Tensor | None = None,
    sf_mn_major: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def per_token_quant_fp4(
    x: torch.Tensor,
    use_ue8m0: bool = False,
    gran_k: int = 128,
    use_packed_ue8m0: bool = False,
    sf_mn_major: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def per_block_quant_fp8(x: torch.Tensor, use_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]: ...
def transform_sf_into_required_layout(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: Sequence[int],
    num_groups: int | None = None,
    is_sfa: bool | None = None,
    disable_ue8m0_cast: bool = False,
    psum_layout: torch.Tensor | None = None,
) -> torch.Tensor: ...
def cublaslt_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None: ...
def cublaslt_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None: ...
def cublaslt_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None: ...
def cublaslt_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None: ...
def fp8_gemm_nt(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    recipe: Sequence[int] | None = None,
    recipe_a: Sequence[int] | None = None,
    recipe_b: Sequence[int] | None = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def m_grouped_fp8_gemm_nt_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    recipe: Sequence[int] | None = None,
    recipe_a: Sequence[int] | None = None,
    recipe_b: Sequence[int] | None = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: int | None = None,
) -> None: ...
def m_grouped_fp8_gemm_nt_masked(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    recipe: Sequence[int] | None = None,
    recipe_a: Sequence[int] | None = None,
    recipe_b: Sequence[int] | None = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def k_grouped_fp8_gemm_nt_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    ks_cpu: Sequence[int] | None,
    grouped_layout: torch.Tensor,
    c: torch.Tensor | None = None,
    recipe: Sequence[int] | None = (1, 1, 128),
    compiled_dims: str = "mn",
    use_psum_layout: bool = False,
) -> None: ...
def k_grouped_fp8_gemm_tn_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    ks_cpu: Sequence[int] | None,
    grouped_layout: torch.Tensor,
    c: torch.Tensor | None = None,
    recipe: Sequence[int] | None = (1, 1, 128),
    compiled_dims: str = "mn",
    use_psum_layout: bool = False,
) -> None: ...
def fp8_gemm_nn(
    a: Any,
    b: Any,
    d: Any,
    c: Any = None,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def fp8_gemm_tn(
    a: Any,
    b: Any,
    d: Any,
    c: Any = None,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "mn",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def fp8_gemm_tt(
    a: Any,
    b: Any,
    d: Any,
    c: Any = None,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "mn",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def fp8_fp4_gemm_nn(
    a: Any,
    b: Any,
    d: Any,
    c: Any = None,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def fp8_fp4_gemm_tn(
    a: Any,
    b: Any,
    d: Any,
    c: Any = None,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "mn",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def fp8_fp4_gemm_tt(
    a: Any,
    b: Any,
    d: Any,
    c: Any = None,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "mn",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def m_grouped_fp8_gemm_nn_contiguous(
    a: Any,
    b: Any,
    d: Any,
    grouped_layout: Any,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
) -> None: ...
def m_grouped_fp8_fp4_gemm_nn_contiguous(
    a: Any,
    b: Any,
    d: Any,
    grouped_layout: Any,
    recipe: Any = None,
    recipe_a: Any = None,
    recipe_b: Any = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
) -> None: ...
def get_gemm_config(
    m: int,
    n: int,
    k: int,
    num_sms: int = 132,
    use_tma_store: bool = True,
    block_m: int = 0,
    block_n: int = 0,
    num_splits: int = 0,
    per_row_sfb: bool = False,
    gemm_type: int = 0,
    grouped_alignment: int = 128,
    bf16: bool = False,
    mn_major_a: bool = False,
    mn_major_b: bool = False,
    fp32_out: bool = False,
    has_c: bool = False,
    overlap: int = -1,
    cluster_ctas: list[int] = ...,
    num_groups: int = 1,
    stream_k: int = -1,
    multicast_on_a: bool = False,
    allow_multicast: bool | None = None,
    tune: str = "",
    block_size_multiple_of: tuple[int, int] = (0, 0),
    deterministic: bool = False,
    fp4_b: bool = False,
) -> dict[str, Any]: ...
def get_hc_prenorm_plan(m: int, n: int, k: int, num_sms: int = 132, deterministic: bool = False) -> dict[str, Any]: ...
def bf16_gemm_nt(
    a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None, compiled_dims: str = "nk"
) -> None: ...
def bf16_gemm_nn(
    a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None, compiled_dims: str = "nk"
) -> None: ...
def bf16_gemm_tn(
    a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None, compiled_dims: str = "mn"
) -> None: ...
def bf16_gemm_tt(
    a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None, compiled_dims: str = "mn"
) -> None: ...
def m_grouped_bf16_gemm_nt_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    compiled_dims: str = "nk",
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: int | None = None,
) -> None: ...
def m_grouped_bf16_gemm_nn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    compiled_dims: str = "nk",
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
) -> None: ...
def m_grouped_bf16_gemm_nt_masked(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    compiled_dims: str = "nk",
) -> None: ...
def k_grouped_bf16_gemm_tn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    ks_cpu: Sequence[int] | None,
    grouped_layout: torch.Tensor,
    c: torch.Tensor | None = None,
    compiled_dims: str = "mn",
    use_psum_layout: bool = False,
) -> None: ...
def einsum(
    expr: str,
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    use_cublaslt: bool = False,
) -> None: ...
def fp8_einsum(
    expr: str,
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    recipe: Sequence[int] = (1, 128, 128),
) -> None: ...
def fp8_gemm_nt_skip_head_mid(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    head_splits: Sequence[int],
    recipe: Sequence[int] | None = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None: ...
def fp8_mqa_logits(
    q: torch.Tensor,
    kv: tuple[torch.Tensor, torch.Tensor],
    weights: torch.Tensor,
    cu_seq_len_k_start: torch.Tensor,
    cu_seq_len_k_end: torch.Tensor,
    clean_logits: bool = True,
    max_seqlen_k: int = 0,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor: ...
def fp8_fp4_mqa_logits(
    q: tuple[torch.Tensor, torch.Tensor | None],
    kv: tuple[torch.Tensor, torch.Tensor],
    weights: torch.Tensor,
    cu_seq_len_k_start: torch.Tensor,
    cu_seq_len_k_end: torch.Tensor,
    clean_logits: bool = True,
    max_seqlen_k: int = 0,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor: ...
def fp8_paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor,
    max_context_len: int,
    clean_logits: bool = False,
    indices: torch.Tensor | None = None,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor: ...
def fp8_fp4_paged_mqa_logits(
    q: tuple[torch.Tensor, torch.Tensor | None],
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor,
    max_context_len: int,
    clean_logits: bool = False,
    logits_dtype: torch.dtype = torch.float32,
    indices: torch.Tensor | None = None,
) -> torch.Tensor: ...
def get_paged_mqa_logits_metadata(
    context_lens: torch.Tensor, block_kv: int, num_sms: int, indices: torch.Tensor | None = None
) -> torch.Tensor: ...
def tf32_hc_prenorm_gemm(
    a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor, num_splits: int | None = None
) -> None: ...
def compile_kernel(
    family: str,
    params: dict[str, int] = ...,
    arch: str = "sm_90a",
    use_nvrtc: bool | None = None,
    source: str | None = None,
) -> dict[str, Any]: ...
def parse_tune(spec: str) -> dict[str, dict[str, int]]: ...
def kernel_families() -> list[str]: ...
def render_gemm_kernels(
    m_values: list[int],
    n: int,
    k: int,
    num_sms: int = 132,
    cluster_ctas: list[int] = ...,
    per_row_sfb: bool = False,
    bf16: bool = False,
    mn_major_a: bool = False,
    mn_major_b: bool = False,
    fp32_out: bool = False,
    has_c: bool = False,
    gemm_type: int = 0,
    num_groups: int = 1,
    max_m: int = 0,
    compiled_dims: str = "nk",
) -> list[dict[str, Any]]: ...
def render_mqa_logits_kernels(
    num_heads: int,
    head_dim: int,
    is_compressed: bool = False,
    clean_logits: bool = True,
    out_bf16: bool = False,
) -> list[dict[str, Any]]: ...
def render_paged_mqa_logits_kernels(
    next_n: int,
    num_heads: int,
    head_dim: int,
    block_kv: int = 64,
    is_2d_context_lens: bool = False,
    clean_logits: bool = False,
    max_context_lens: list[int] = ...,
    out_bf16: bool = False,
    has_indices: bool = False,
    max_batch: int = 1,
) -> list[dict[str, Any]]: ...
def render_kernel(family: str, params: dict[str, int] = ...) -> str: ...
def kernel_cache_entry(
    family: str, source: str, arch: str = "sm_90a", use_nvrtc: bool | None = None
) -> dict[str, Any]: ...
