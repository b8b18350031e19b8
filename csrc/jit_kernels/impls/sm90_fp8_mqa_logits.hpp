// Host side of deep_gemm/include/deep_gemm/impls/sm90_fp8_mqa_logits.cuh: render the kernel for a
// config, build the TMA descriptors of q and kv, launch on the current stream (with the signed sums by wgmma,
// after the pre-pass that writes every query's pieces: smxx_mqa_logits_pieces.hpp). The loaded kernel is
// memoized per config; the descriptors are encoded per call (a few microseconds of host time).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../../jit/tma.hpp"
#include "../../utils/env.hpp"
#include "../heuristics/sm90_mqa_logits.hpp"
#include "../params.hpp"
#include "../render_config.hpp"
#include "smxx_mqa_logits_pieces.hpp"

namespace dg::kernels {

// The kernel's instantiation: its config by field name (designated initializers in Sm90MqaLogitsKernelConfig's
// visit_fields order), and a check that the host launches it with the shared memory it lays out.
inline jit::KernelSource render_sm90_fp8_mqa_logits(const MqaLogitsConfig& c) {
    return {"sm90_fp8_mqa_logits",
            fmt::format("#include <deep_gemm/impls/sm90_fp8_mqa_logits.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "struct KernelConfig {{\n"
                        "    static constexpr Sm90MqaLogitsKernelConfig kValue{}\n"
                        "}};\n\n"
                        "static_assert(Sm90Fp8MqaLogits<KernelConfig>::SMEM_SIZE <= {}, \"the host launches with less "
                        "shared memory than the kernel lays out\");\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&sm90_fp8_mqa_logits_kernel<KernelConfig>);\n"
                        "}}\n",
                        render_designated_init(c.kernel_config(), "    "), c.smem_bytes)};
}

// A config from named integer parameters (the compile-only entry point).
inline MqaLogitsConfig mqa_logits_config_from_params(const KernelParams& params) {
    MqaLogitsConfig c;
    const auto get = [&](const char* key, uint32_t fallback) { return param_or(params, key, fallback); };
    c.num_heads = get("num_heads", c.num_heads);
    c.head_dim = get("head_dim", c.head_dim);
    c.num_stages = get("num_stages", c.head_dim == 128 ? 8 : 12);
    c.is_compressed = get("is_compressed", 0) != 0;
    c.clean_logits = get("clean_logits", 1) != 0;
    c.out_bf16 = get("out_bf16", 0) != 0;
    c.relu_by_abs = get("relu_by_abs", 0) != 0;
    c.signed_sum_wgmma = get("signed_sum_wgmma", 0) != 0;
    c.split_halves = get("split_halves", 0) != 0;
    c.fp4_operands = get("fp4_operands", 0) != 0;
    DG_CHECK_INPUT(!c.split_halves || mqa_logits_split_halves_fit(c),
                   "split_halves needs num_heads 64, or 32 without signed_sum_wgmma");
    DG_CHECK_INPUT(!c.signed_sum_wgmma || (c.relu_by_abs && c.num_heads >= 32 && c.head_dim >= 64),
                   "signed_sum_wgmma needs relu_by_abs=1, num_heads 32 or 64 and head_dim 64 or 128");
    DG_CHECK_INPUT(!c.fp4_operands || (!c.signed_sum_wgmma && (c.head_dim == 64 || c.head_dim == 128)),
                   "fp4_operands needs head_dim 64 or 128 and signed_sum_wgmma=0");
    c.smem_bytes = mqa_logits_smem_bytes(c.num_heads, c.head_dim, c.num_stages, c.signed_sum_wgmma, c.fp4_operands);
    return c;
}

// The config a launch plans for these logits: the heuristic's, then DG_TUNE's mqa_logits section (shared with the
// ahead-of-time builds, _C.render_mqa_logits_kernels, so that they render what a launch renders).
inline MqaLogitsConfig plan_mqa_logits_config(uint32_t num_heads, uint32_t head_dim, uint64_t seq_len,
                                              uint64_t seq_len_kv, uint64_t width, bool is_compressed,
                                              bool clean_logits, bool out_bf16, uint32_t num_sms,
                                              bool fp4_operands = false) {
    MqaLogitsConfig c = get_mqa_logits_config(num_heads, head_dim, seq_len, seq_len_kv, width, is_compressed,
                                              clean_logits, out_bf16, num_sms, fp4_operands);
    apply_mqa_logits_tune(c, tune_settings(TuneFamily::kMqaLogits));
    return c;
}

// Arguments of one call, already validated by the API layer. FP4 (q_exponents given): q [S, H, D / 2] and kv
// [S_kv, D / 2] packed e2m1, kv_scales int32 [S_kv] and q_exponents int32 [S, H] (contiguous) UE8M0 words.
struct MqaLogitsArgs {
    const at::Tensor& q;          // [S, H, D] e4m3, D contiguous, heads stacked (stride 0 = H * stride 1)
    const at::Tensor& kv;         // [S_kv, D] e4m3, D contiguous
    const at::Tensor& kv_scales;  // [S_kv] FP32, contiguous
    const at::Tensor& weights;    // [S, H] FP32, stride 1 along H
    const at::Tensor& ks;         // [S] int32, contiguous
    const at::Tensor& ke;         // [S] int32, contiguous
    const at::Tensor& logits;     // [S, W] FP32 or BF16, stride 1 along W
    bool is_compressed, clean_logits;
    const at::Tensor* q_exponents = nullptr;  // FP4 only
};

inline void launch_sm90_fp8_mqa_logits(const MqaLogitsArgs& args) {
    const int device = args.q.device().index();
    const bool fp4 = args.q_exponents != nullptr;
    const uint32_t seq_len = args.q.size(0), num_heads = args.q.size(1);
    const uint32_t head_dim = args.q.size(2) * (fp4 ? 2 : 1);
    const uint32_t seq_len_kv = args.kv.size(0), width = args.logits.size(1);
    const bool out_bf16 = args.logits.scalar_type() == at::kBFloat16;
    const int num_sms = jit::DeviceRuntime::instance().num_sms(device);
    const MqaLogitsConfig c = plan_mqa_logits_config(num_heads, head_dim, seq_len, seq_len_kv, width,
                                                     args.is_compressed, args.clean_logits, out_bf16, num_sms, fp4);

    const auto stream = jit::current_stream(device);
    static jit::KernelCache<std::tuple<int, uint32_t, uint32_t, bool, bool, bool, bool, bool, bool, bool>> kernels;
    const jit::Kernel* kernel = &kernels.get(
        {device, num_heads, head_dim, c.is_compressed, c.clean_logits, c.out_bf16, c.relu_by_abs,
         c.signed_sum_wgmma, c.split_halves, c.fp4_operands},
        [&]() -> const jit::Kernel& {
            const auto& props = jit::DeviceRuntime::instance().properties(device);
            DG_CHECK(c.smem_bytes <= static_cast<uint32_t>(props.smem_optin_bytes),
                     "MQA logits needs {} bytes of shared memory, device {} allows {}", c.smem_bytes, device,
                     props.smem_optin_bytes);
            return jit::get_kernel(render_sm90_fp8_mqa_logits(c), props.arch(), device, stream);
        });

    // q as [S * H, D]: boxes of 256 rows (one math warpgroup's queries); kv as [S_kv, D]: 64-key boxes. FP4: rows of
    // D / 2 bytes, unswizzled (the math warpgroups read them to convert)
    const uint32_t row_bytes = fp4 ? head_dim / 2 : head_dim;
    const auto swizzle = fp4 ? driver::CU_TENSOR_MAP_SWIZZLE_NONE : jit::swizzle_for_bytes(head_dim);
    const auto tma_q = jit::make_tma_2d(args.q.data_ptr(), driver::CU_TENSOR_MAP_DATA_TYPE_UINT8, row_bytes,
                                        static_cast<uint64_t>(seq_len) * num_heads, args.q.stride(1), row_bytes, 256,
                                        swizzle);
    const auto tma_kv = jit::make_tma_2d(args.kv.data_ptr(), driver::CU_TENSOR_MAP_DATA_TYPE_UINT8, row_bytes,
                                         seq_len_kv, args.kv.stride(0), row_bytes, 64, swizzle);

    // The signed sums by wgmma: every query's pieces, once, by the pre-pass, into buffers of the padded query count
    // (each CTA loads whole warpgroup blocks of them: 4 rows of D per query, by TMA with its Q tile)
    const uint32_t block_q = mqa_logits_block_q(num_heads);
    const uint64_t num_padded = (static_cast<uint64_t>(seq_len) + block_q - 1) / block_q * block_q;
    at::Tensor pieces, piece_scales;
    auto tma_pieces = tma_q;  // any valid descriptor when the kernel has no pieces
    const float* piece_scales_ptr = nullptr;
    if (c.signed_sum_wgmma) {
        DG_CHECK(num_padded * 4 < (1ull << 31), "MQA logits: {} queries exceed the pieces' TMA rows", seq_len);
        pieces = at::empty({static_cast<int64_t>(num_padded * 4), static_cast<int64_t>(head_dim)},
                           args.q.options().dtype(at::kByte));
        piece_scales = at::empty({static_cast<int64_t>(num_padded * 4)}, args.q.options().dtype(at::kFloat));
        launch_mqa_logits_pieces(device, num_heads, head_dim, args.q.data_ptr(), static_cast<uint64_t>(args.q.stride(1)),
                                 args.weights.data_ptr<float>(), static_cast<uint64_t>(args.weights.stride(0)),
                                 seq_len, static_cast<uint32_t>(num_padded), pieces.data_ptr(),
                                 piece_scales.data_ptr<float>());
        tma_pieces = jit::make_tma_2d(pieces.data_ptr(), driver::CU_TENSOR_MAP_DATA_TYPE_UINT8, head_dim,
                                      num_padded * 4, head_dim, head_dim, 4 * (256 / num_heads), swizzle);
        piece_scales_ptr = piece_scales.data_ptr<float>();
    }

    jit::LaunchConfig launch;
    const uint64_t num_splits = (std::max(seq_len_kv, width) + c.num_kv_per_split - 1) / c.num_kv_per_split;
    DG_CHECK(num_splits <= 65535, "MQA logits: {} key chunks exceed the grid's y limit", num_splits);
    launch.grid = {(seq_len + block_q - 1) / block_q, static_cast<unsigned>(num_splits), 1};
    launch.num_threads = 384;
    launch.smem_bytes = c.smem_bytes;
    launch.stream = stream;
    launch.enable_pdl = jit::DeviceRuntime::instance().pdl();
    if (get_env_flag("DG_PRINT_CONFIGS"))
        fmt::print(stderr, "[deep_gemm] {}_mqa_logits S={} S_kv={} W={}: {} grid={}x{}\n", fp4 ? "fp4" : "fp8", seq_len, seq_len_kv, width,
                   c.describe(), launch.grid[0], launch.grid[1]);

    uint32_t out_width = width, num_kv_per_split = c.num_kv_per_split;
    uint32_t ld_weights = static_cast<uint32_t>(args.weights.stride(0));
    uint64_t ld_logits = static_cast<uint64_t>(args.logits.stride(0));
    // (FP4: the kv exponent words, which the kernel reads as such)
    const float* kv_scales = static_cast<const float*>(args.kv_scales.data_ptr());
    const uint32_t* q_exponents = fp4 ? static_cast<const uint32_t*>(args.q_exponents->data_ptr()) : nullptr;
    const float* weights = args.weights.data_ptr<float>();
    const int32_t* ks = args.ks.data_ptr<int32_t>();
    const int32_t* ke = args.ke.data_ptr<int32_t>();
    void* logits = args.logits.data_ptr();
    uint32_t s = seq_len, s_kv = seq_len_kv;
    kernel->launch(device, launch, s, s_kv, out_width, num_kv_per_split, kv_scales, weights, ld_weights,
                   piece_scales_ptr, ks, ke, logits, ld_logits, tma_q, tma_kv, tma_pieces, q_exponents);
}

}  // namespace dg::kernels
