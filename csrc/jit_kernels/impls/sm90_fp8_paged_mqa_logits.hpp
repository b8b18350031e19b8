// Host side of deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh: render the kernel for a
// config, build the TMA descriptors of q, of the kv cache's FP8 rows and of its scales, launch one CTA per
// schedule row on the current stream. The loaded kernel is memoized per config.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include <deep_gemm/common/host_device_types.hpp>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../../jit/tma.hpp"
#include "../../utils/env.hpp"
#include "../heuristics/sm90_mqa_logits.hpp"
#include "../params.hpp"
#include "../render_config.hpp"

namespace dg::kernels {

// The kernel's instantiation: its config by field name (designated initializers in
// Sm90PagedMqaLogitsKernelConfig's visit_fields order).
inline jit::KernelSource render_sm90_fp8_paged_mqa_logits(const PagedMqaLogitsConfig& c) {
    return {"sm90_fp8_paged_mqa_logits",
            fmt::format("#include <deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "struct KernelConfig {{\n"
                        "    static constexpr Sm90PagedMqaLogitsKernelConfig kValue{}\n"
                        "}};\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&sm90_fp8_paged_mqa_logits_kernel<KernelConfig>);\n"
                        "}}\n",
                        render_designated_init(c.kernel_config(), "    "))};
}

// A config from named integer parameters (the compile-only entry point).
inline PagedMqaLogitsConfig paged_mqa_logits_config_from_params(const KernelParams& params) {
    const auto get = [&](const char* key, uint32_t fallback) { return param_or(params, key, fallback); };
    PagedMqaLogitsConfig c = get_paged_mqa_logits_config(get("next_n", 1), get("num_heads", 64), get("head_dim", 128),
                                                         get("block_kv", 64), get("is_2d_context_lens", 0) != 0,
                                                         get("clean_logits", 0) != 0);
    c.num_math_wgs = get("num_math_wgs", c.num_math_wgs);
    c.out_bf16 = get("out_bf16", 0) != 0;
    c.has_indices = get("has_indices", 0) != 0;
    c.relu_by_abs = get("relu_by_abs", c.relu_by_abs) != 0;
    c.signed_sum_wgmma = get("signed_sum_wgmma", c.signed_sum_wgmma) != 0;
    c.fp4_operands = get("fp4_operands", 0) != 0;
    DG_CHECK_INPUT(!c.signed_sum_wgmma || c.relu_by_abs, "signed_sum_wgmma needs relu_by_abs=1");
    DG_CHECK_INPUT(!c.signed_sum_wgmma || c.head_dim >= 64, "signed_sum_wgmma needs head_dim 64 or 128");
    DG_CHECK_INPUT(!c.fp4_operands || (!c.signed_sum_wgmma && (c.head_dim == 64 || c.head_dim == 128)),
                   "fp4_operands needs head_dim 64 or 128 and signed_sum_wgmma=0");
    c.num_stages = get("num_stages", paged_mqa_logits_stages(c.next_n, c.num_heads, c.head_dim, c.num_math_wgs,
                                                             c.signed_sum_wgmma, c.fp4_operands));
    c.smem_bytes = paged_mqa_logits_smem_bytes(c.next_n, c.num_heads, c.head_dim, c.num_stages, c.signed_sum_wgmma,
                                               c.num_math_wgs, c.fp4_operands);
    return c;
}

// The config a launch plans for these logits: the heuristic's, D's type, the indices' form, then DG_TUNE's
// paged_mqa_logits section (shared with the ahead-of-time builds, _C.render_paged_mqa_logits_kernels).
inline PagedMqaLogitsConfig plan_paged_mqa_logits_config(uint32_t next_n, uint32_t num_heads, uint32_t head_dim,
                                                         uint32_t block_kv, bool is_2d_context_lens,
                                                         bool clean_logits, uint32_t max_context_len, bool out_bf16,
                                                         bool has_indices, bool fp4_operands = false) {
    PagedMqaLogitsConfig c = get_paged_mqa_logits_config(next_n, num_heads, head_dim, block_kv, is_2d_context_lens,
                                                         clean_logits, max_context_len);
    c.out_bf16 = out_bf16;
    c.has_indices = has_indices;
    if (fp4_operands)
        set_paged_fp4(c);
    apply_paged_mqa_logits_tune(c, tune_settings(TuneFamily::kPagedMqaLogits));
    return c;
}

// Arguments of one call, already validated by the API layer.
struct PagedMqaLogitsArgs {
    const at::Tensor& q;             // [B, T, H, D] e4m3, contiguous
    const at::Tensor& kv_cache;      // uint8 [num_blocks, BLOCK_KV, 1, D + 4], each block packed, blocks 16 B-aligned
    const at::Tensor& weights;       // [B * T, H] FP32, stride 1 along H
    const at::Tensor& context_lens;  // int32 [B] or [B, T], contiguous
    const at::Tensor& block_table;   // int32 [R, max_blocks], stride 1 along max_blocks (R = B without indices)
    const std::optional<at::Tensor>& indices;  // int32 [B] (T = 1): the block-table row of each token, contiguous
    const at::Tensor& schedule;      // int32 [num_ctas + 1, 2], contiguous
    const at::Tensor& logits;        // FP32 or BF16 [B * T, W], stride 1 along W
    bool clean_logits;
    // FP4 only: q [B, T, H, D / 2] packed e2m1, kv_cache [num_blocks, BLOCK_KV, 1, D / 2 + 4] (per block the packed
    // values, then BLOCK_KV int32 exponent words), and these int32 [B * T * H] words of q's head rows, contiguous
    const at::Tensor* q_exponents = nullptr;
};

inline void launch_sm90_fp8_paged_mqa_logits(const PagedMqaLogitsArgs& args) {
    const int device = args.q.device().index();
    const bool fp4 = args.q_exponents != nullptr;
    const uint32_t batch = args.q.size(0), next_n = args.q.size(1), num_heads = args.q.size(2);
    const uint32_t head_dim = args.q.size(3) * (fp4 ? 2 : 1), row_bytes = fp4 ? head_dim / 2 : head_dim;
    const uint32_t block_kv = args.kv_cache.size(1), num_kv_blocks = args.kv_cache.size(0);
    const PagedMqaLogitsConfig c = plan_paged_mqa_logits_config(
        next_n, num_heads, head_dim, block_kv, args.context_lens.dim() == 2, args.clean_logits,
        static_cast<uint32_t>(args.logits.size(1)), args.logits.scalar_type() == at::kBFloat16,
        args.indices.has_value(), fp4);

    const auto stream = jit::current_stream(device);
    static jit::KernelCache<
        std::tuple<int, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, bool, bool, bool, bool, bool, bool,
                   bool>>
        kernels;
    const jit::Kernel* kernel = &kernels.get(
        {device, next_n, num_heads, head_dim, block_kv, c.num_stages, c.num_math_wgs, c.is_2d_context_lens,
         c.clean_logits, c.relu_by_abs, c.signed_sum_wgmma, c.out_bf16, c.has_indices, c.fp4_operands},
        [&]() -> const jit::Kernel& {
            const auto& props = jit::DeviceRuntime::instance().properties(device);
            DG_CHECK(c.smem_bytes <= static_cast<uint32_t>(props.smem_optin_bytes),
                     "paged MQA logits needs {} bytes of shared memory, device {} allows {}", c.smem_bytes, device,
                     props.smem_optin_bytes);
            return jit::get_kernel(render_sm90_fp8_paged_mqa_logits(c), props.arch(), device, stream);
        });

    // q as [B * T * H, D]: one request's T * H rows per box; the cache's FP8 values as [num_blocks][BLOCK_KV][D]
    // (blocks kv_cache.stride(0) bytes apart), one block per box
    // (FP4: rows of D / 2 packed bytes, unswizzled: the math warpgroups read them to convert)
    const auto swizzle = fp4 ? driver::CU_TENSOR_MAP_SWIZZLE_NONE : jit::swizzle_for_bytes(head_dim);
    const uint64_t block_stride = static_cast<uint64_t>(args.kv_cache.stride(0));
    const auto tma_q = jit::make_tma_2d(args.q.data_ptr(), driver::CU_TENSOR_MAP_DATA_TYPE_UINT8, row_bytes,
                                        static_cast<uint64_t>(batch) * next_n * num_heads, row_bytes, row_bytes,
                                        next_n * num_heads, swizzle);
    const auto tma_kv = jit::make_tma_3d(args.kv_cache.data_ptr(), driver::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                         {row_bytes, block_kv, num_kv_blocks}, {row_bytes, block_stride},
                                         {row_bytes, block_kv, 1}, swizzle);
    // The scales: one row of BLOCK_KV FP32 per block (FP4: int32 exponent words, copied as such), a block stride
    // apart, after the block's values
    const auto tma_scales = jit::make_tma_2d(static_cast<uint8_t*>(args.kv_cache.data_ptr()) + block_kv * row_bytes,
                                             driver::CU_TENSOR_MAP_DATA_TYPE_FLOAT32, block_kv, num_kv_blocks,
                                             block_stride, block_kv, 1, driver::CU_TENSOR_MAP_SWIZZLE_NONE);

    jit::LaunchConfig launch;
    launch.grid = {static_cast<unsigned>(args.schedule.size(0) - 1), 1, 1};
    launch.num_threads = (c.num_math_wgs + 1) * 128;
    launch.smem_bytes = c.smem_bytes;
    launch.stream = stream;
    launch.enable_pdl = jit::DeviceRuntime::instance().pdl();
    if (get_env_flag("DG_PRINT_CONFIGS"))
        fmt::print(stderr, "[deep_gemm] {}_paged_mqa_logits B={} W={}: {} grid={}\n", fp4 ? "fp4" : "fp8", batch,
                   args.logits.size(1),
                   c.describe(), launch.grid[0]);

    const deep_gemm::PagedMqaProblem problem{
        .batch_size = batch,
        .max_blocks = static_cast<uint32_t>(args.block_table.size(1)),
        .num_kv_blocks = num_kv_blocks,
        .out_width = static_cast<uint32_t>(args.logits.size(1)),
        .context_lens = args.context_lens.data_ptr<int32_t>(),
        .block_table = args.block_table.data_ptr<int32_t>(),
        .ld_block_table = static_cast<uint64_t>(args.block_table.stride(0)),
        .indices = args.indices.has_value() ? args.indices->data_ptr<int32_t>() : nullptr,
        .num_table_rows = static_cast<uint32_t>(args.block_table.size(0)),
        .schedule = args.schedule.data_ptr<int32_t>(),
        .weights = args.weights.data_ptr<float>(),
        .ld_weights = static_cast<uint32_t>(args.weights.stride(0)),
        .logits = args.logits.data_ptr(),
        .ld_logits = static_cast<uint64_t>(args.logits.stride(0)),
        .q_exponents = fp4 ? static_cast<const uint32_t*>(args.q_exponents->data_ptr()) : nullptr};
    kernel->launch(device, launch, problem, tma_q, tma_kv, tma_scales);
}

}  // namespace dg::kernels
