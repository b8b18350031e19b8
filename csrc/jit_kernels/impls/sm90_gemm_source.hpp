// The source of the SM90 GEMM kernel for a config (deep_gemm/include/deep_gemm/impls/sm90_gemm.cuh instantiated
// with it), and a config from named integer parameters for the compile-only entry point (compile_kernel).
#pragma once

#include <string>

#include "../../jit/cache.hpp"
#include "../../utils/exception.hpp"
#include "../heuristics/sm90_gemm.hpp"
#include "../params.hpp"
#include "../render_config.hpp"

namespace dg::kernels {

// The kernel's instantiation: its config by field name (designated initializers in declaration order, listed by
// Sm90GemmKernelConfig::visit_fields: a value under another field's name or out of order fails to compile). It also
// asserts that the shared memory the host launches it with covers what the kernel lays out.
inline jit::KernelSource render_sm90_gemm(const GemmConfig& c) {
    return {"sm90_gemm",
            fmt::format("#include <deep_gemm/impls/sm90_gemm.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "struct KernelConfig {{\n"
                        "    static constexpr Sm90GemmKernelConfig kValue{}\n"
                        "}};\n\n"
                        "static_assert(Sm90Gemm<KernelConfig>::SMEM_SIZE <= {}, \"the host launches with less shared memory "
                        "than the kernel lays out\");\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&sm90_gemm_kernel<KernelConfig>);\n"
                        "}}\n",
                        render_designated_init(c.kernel_config(), "    "), c.smem_bytes)};
}

// A config from named integer parameters (the compile-only entry point); unspecified fields keep
// their defaults, and the shared-memory size is derived. Operands: `per_row_sfb` (FP8 recipe (1, 1, 128)), `fp4_b`
// (FP8 x FP4) or `bf16` (with `mn_major_a`, `mn_major_b`, `fp32_out`, `has_c`); FP8 recipe (1, 128, 128) by default.
inline GemmConfig config_from_params(const KernelParams& params) {
    GemmConfig c;
    const auto get = [&](const char* key, uint32_t fallback) { return param_or(params, key, fallback); };
    c.shape_m = get("shape_m", 0), c.shape_n = get("shape_n", 0), c.shape_k = get("shape_k", 0);
    c.block_m = get("block_m", c.block_m), c.block_n = get("block_n", c.block_n);
    c.num_math_warpgroups = get("num_math_warpgroups", gemm_math_warpgroups(c.block_m));
    c.num_stages = get("num_stages", c.num_stages);
    c.num_group_n = get("num_group_n", c.num_group_n);
    c.num_multicast = get("num_multicast", 1);
    c.is_multicast_on_a = get("is_multicast_on_a", 0) != 0;
    c.num_splits = get("num_splits", 1);
    c.stream_k = get("stream_k", 0);
    c.overlap_promotion = get("overlap_promotion", 0) != 0;
    const bool per_row_sfb = get("per_row_sfb", 0) != 0, bf16 = get("bf16", 0) != 0, fp4_b = get("fp4_b", 0) != 0;
    DG_CHECK_INPUT(per_row_sfb + bf16 + fp4_b <= 1, "per_row_sfb (FP8 recipe (1, 1, 128)), bf16 and fp4_b (FP8 x FP4) "
                   "exclude each other");
    c.operands = fp4_b ? fp8_fp4_operands() : fp8_operands(per_row_sfb);
    if (bf16)
        c.operands = {OperandKind::kBf16, get("mn_major_a", 0) != 0, get("mn_major_b", 0) != 0,
                      get("fp32_out", 0) != 0, get("has_c", 0) != 0};
    c.operands.batched = get("batched", 0) != 0;
    c.operands.k_batched = get("k_batched", 0) != 0;
    c.operands.head_left = get("head_left", 0), c.operands.head_mid = get("head_mid", 0);
    c.operands.head_right = get("head_right", 0);
    c.gemm_type = static_cast<GemmType>(get("gemm_type", 0));
    DG_CHECK_INPUT(static_cast<uint32_t>(c.gemm_type) <= 4, "gemm_type must be 0 (normal), 1 (m-grouped contiguous), "
                   "2 (m-grouped contiguous, psum layout), 3 (m-grouped masked) or 4 (k-grouped contiguous)");
    c.max_k_groups = get("max_k_groups", c.gemm_type == GemmType::kKGroupedContiguous ? 8 : 0);
    DG_CHECK_INPUT((c.max_k_groups > 0) == (c.gemm_type == GemmType::kKGroupedContiguous) &&
                   c.max_k_groups <= kMaxKGroups, "max_k_groups must be 1..{} for k-grouped GEMMs (gemm_type 4), 0 "
                   "otherwise", kMaxKGroups);
    c.use_tma_store = get("use_tma_store", c.num_splits == 1 && !c.operands.direct_store() &&
                                           !(c.operands.fp32_out && c.block_n % 32 != 0)) != 0;
    c.store_chunk_n = get("store_chunk_n", gemm_store_chunk(c.block_n));
    c.fp32_buffers = get("fp32_buffers", gemm_min_fp32_buffers(c.block_n, c.use_tma_store, c.operands));
    c.smem_bytes = gemm_smem_bytes(c);
    return c;
}

}  // namespace dg::kernels
