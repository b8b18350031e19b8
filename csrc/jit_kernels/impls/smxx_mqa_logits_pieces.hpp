// Host side of deep_gemm/include/deep_gemm/impls/smxx_mqa_logits_pieces.cuh: render (per H, D), load (once per
// device and config), launch on the current stream.
#pragma once

#include <tuple>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

// One warp per query, 4 queries per CTA (the kernel's template argument)
constexpr uint32_t kMqaLogitsPiecesThreads = 128;

inline jit::KernelSource render_mqa_logits_pieces(uint32_t num_heads, uint32_t head_dim) {
    return {"smxx_mqa_logits_pieces",
            fmt::format("#include <deep_gemm/impls/smxx_mqa_logits_pieces.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&mqa_logits_pieces_kernel<{}, {}, {}>);\n"
                        "}}\n",
                        num_heads, head_dim, kMqaLogitsPiecesThreads)};
}

// The pieces of queries [0, num_padded) (num_padded a multiple of 256 / H; those >= seq_len zero): q bytes with row
// (i, h) at q + (i * H + h) * ld_q_row, FP32 weights with row stride ld_weights; pieces uint8 [num_padded * 4, D]
// and piece_scales FP32 [num_padded * 4], both contiguous. H in {32, 64}, D in {64, 128}.
inline void launch_mqa_logits_pieces(int device, uint32_t num_heads, uint32_t head_dim, const void* q,
                                     uint64_t ld_q_row, const float* weights, uint64_t ld_weights, uint32_t seq_len,
                                     uint32_t num_padded, void* pieces, float* piece_scales) {
    static jit::KernelCache<std::tuple<int, uint32_t, uint32_t>> kernels;
    const auto stream = jit::current_stream(device);
    const jit::Kernel* kernel = &kernels.get({device, num_heads, head_dim}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device).arch();
        return jit::get_kernel(render_mqa_logits_pieces(num_heads, head_dim), arch, device, stream);
    });
    constexpr uint32_t kQueriesPerCta = kMqaLogitsPiecesThreads / 32;
    jit::LaunchConfig launch;
    launch.grid = {(num_padded + kQueriesPerCta - 1) / kQueriesPerCta, 1, 1};
    launch.num_threads = kMqaLogitsPiecesThreads;
    launch.stream = stream;
    const auto* q_bytes = static_cast<const uint8_t*>(q);
    auto* pieces_bytes = static_cast<uint8_t*>(pieces);
    kernel->launch(device, launch, q_bytes, ld_q_row, weights, ld_weights, seq_len, num_padded, pieces_bytes,
                   piece_scales);
}

}  // namespace dg::kernels
