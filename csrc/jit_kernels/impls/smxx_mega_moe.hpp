// Host side of deep_gemm/include/deep_gemm/impls/smxx_mega_moe.cuh (Mega MoE stage 1: route, gather, SwiGLU,
// combine): render each kernel, load it once per device and variant, launch on the current stream.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>

#include <deep_gemm/common/mega_moe_types.hpp>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

enum class MegaMoeKernel { kRoute, kGather, kSwiglu, kCombine, kPreDispatch };

constexpr uint32_t kMegaMoeRouteThreads = 512;
constexpr uint32_t kMegaMoeCombineThreads = 256;
constexpr uint32_t kMegaMoeWarps = 8;          // gather and SwiGLU: a warp per unit, 8 a CTA
constexpr uint32_t kMegaMoeMaxCtas = 8192;     // past a few waves the grid-stride loops take over

inline const char* mega_moe_kernel_name(MegaMoeKernel kernel) {
    switch (kernel) {
        case MegaMoeKernel::kRoute: return "smxx_mega_moe_route";
        case MegaMoeKernel::kGather: return "smxx_mega_moe_gather";
        case MegaMoeKernel::kSwiglu: return "smxx_mega_moe_swiglu";
        case MegaMoeKernel::kPreDispatch: return "smxx_mega_moe_pre_dispatch";
        default: return "smxx_mega_moe_combine";
    }
}

// The SwiGLU kernel's input: FP32 for the FP8 x FP8 path (its L1 writes FP32), BF16 otherwise.
inline bool mega_swiglu_fp32_in(deep_gemm::MegaSwigluOut out) {
    return out == deep_gemm::MegaSwigluOut::kFp8;
}

inline const char* mega_swiglu_out_name(deep_gemm::MegaSwigluOut out) {
    switch (out) {
        case deep_gemm::MegaSwigluOut::kBf16: return "MegaSwigluOut::kBf16";
        case deep_gemm::MegaSwigluOut::kFp8: return "MegaSwigluOut::kFp8";
        default: return "MegaSwigluOut::kFp8Ue8m0x32";
    }
}

// swiglu_out, fast_math: the SwiGLU kernel's variant (ignored by the others).
inline jit::KernelSource render_mega_moe_kernel(MegaMoeKernel kernel,
                                                deep_gemm::MegaSwigluOut swiglu_out = deep_gemm::MegaSwigluOut::kFp8,
                                                bool fast_math = true) {
    std::string instance;
    switch (kernel) {
        case MegaMoeKernel::kRoute: instance = fmt::format("mega_moe_route_kernel<{}>", kMegaMoeRouteThreads); break;
        case MegaMoeKernel::kGather: instance = fmt::format("mega_moe_gather_kernel<{}>", kMegaMoeWarps); break;
        case MegaMoeKernel::kSwiglu:
            instance = fmt::format("mega_moe_swiglu_kernel<{}, {}, {}, {}>", kMegaMoeWarps,
                                   mega_swiglu_fp32_in(swiglu_out) ? "true" : "false", mega_swiglu_out_name(swiglu_out),
                                   fast_math ? "true" : "false");
            break;
        case MegaMoeKernel::kPreDispatch:
            instance = fmt::format("mega_moe_pre_dispatch_kernel<{}>", kMegaMoeWarps);
            break;
        case MegaMoeKernel::kCombine: instance = fmt::format("mega_moe_combine_kernel<{}>", kMegaMoeCombineThreads); break;
    }
    return {mega_moe_kernel_name(kernel),
            fmt::format("#include <deep_gemm/impls/smxx_mega_moe.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&{});\n"
                        "}}\n",
                        instance)};
}

inline const jit::Kernel& mega_moe_kernel(int device_index, MegaMoeKernel kernel,
                                          deep_gemm::MegaSwigluOut swiglu_out = deep_gemm::MegaSwigluOut::kFp8,
                                          bool fast_math = true) {
    static jit::KernelCache<std::tuple<int, int, int, bool>> kernels;
    return kernels.get({device_index, static_cast<int>(kernel), static_cast<int>(swiglu_out), fast_math},
                       [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_mega_moe_kernel(kernel, swiglu_out, fast_math), arch, device_index,
                               jit::current_stream(device_index));
    });
}

inline uint32_t mega_moe_grid(uint64_t units, uint32_t per_cta) {
    return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>((units + per_cta - 1) / per_cta, kMegaMoeMaxCtas)));
}

// Steps 1 and 2 of the kernel file's pipeline: route (one CTA per local expert), then gather (a warp per row).
// l1_acts_sf may be null (BF16 dispatch).
inline void launch_mega_moe_dispatch(int device_index, const uint64_t* peers, const deep_gemm::MegaMoeLayout& layout,
                                     uint32_t alignment, uint32_t num_rows, int32_t* src_of_row, int32_t* psum_ends,
                                     int32_t* recv_stats, void* l1_acts, float* l1_acts_sf, uint32_t sf_stride) {
    const auto stream = jit::current_stream(device_index);
    jit::LaunchConfig route;
    route.grid = {layout.num_local_experts, 1, 1};
    route.num_threads = kMegaMoeRouteThreads;
    route.stream = stream;
    mega_moe_kernel(device_index, MegaMoeKernel::kRoute)
        .launch(device_index, route, peers, layout, alignment, num_rows, src_of_row, psum_ends, recv_stats);
    if (num_rows == 0)
        return;
    jit::LaunchConfig gather;
    gather.grid = {mega_moe_grid(num_rows, kMegaMoeWarps), 1, 1};
    gather.num_threads = kMegaMoeWarps * 32;
    gather.stream = stream;
    auto* acts = static_cast<uint8_t*>(l1_acts);
    mega_moe_kernel(device_index, MegaMoeKernel::kGather)
        .launch(device_index, gather, peers, layout, num_rows, src_of_row, acts, l1_acts_sf, sf_stride);
}

// Step 4: l1_out [num_rows, 2I] (interleaved by 8; FP32 for MegaSwigluOut::kFp8, else BF16), l2_acts [num_rows, I]
// (FP8 with l2_acts_sf, or BF16 with l2_acts_sf null) as `out` says.
inline void launch_mega_moe_swiglu(int device_index, const uint64_t* peers, const deep_gemm::MegaMoeLayout& layout,
                                   uint32_t num_rows, uint32_t intermediate, const int32_t* src_of_row,
                                   const void* l1_out, void* l2_acts, float* l2_acts_sf, uint32_t sf_stride,
                                   bool has_clamp, float clamp_value, deep_gemm::MegaSwigluOut out, bool fast_math) {
    if (num_rows == 0)
        return;
    jit::LaunchConfig config;
    config.grid = {mega_moe_grid(static_cast<uint64_t>(num_rows) * (intermediate / 128), kMegaMoeWarps), 1, 1};
    config.num_threads = kMegaMoeWarps * 32;
    config.stream = jit::current_stream(device_index);
    mega_moe_kernel(device_index, MegaMoeKernel::kSwiglu, out, fast_math)
        .launch(device_index, config, peers, layout, num_rows, intermediate, src_of_row, l1_out, l2_acts,
                l2_acts_sf, sf_stride, has_clamp, clamp_value);
}

// Step 6: y BF16 [num_tokens, hidden], row stride y_stride elements.
inline void launch_mega_moe_combine(int device_index, const uint64_t* peers, const deep_gemm::MegaMoeLayout& layout,
                                    uint32_t num_tokens, void* y, uint64_t y_stride) {
    if (num_tokens == 0)
        return;
    jit::LaunchConfig config;
    config.grid = {std::min(num_tokens, kMegaMoeMaxCtas), 1, 1};
    config.num_threads = kMegaMoeCombineThreads;
    config.stream = jit::current_stream(device_index);
    mega_moe_kernel(device_index, MegaMoeKernel::kCombine)
        .launch(device_index, config, peers, layout, num_tokens, y, y_stride);
}

// The inputs of one call (mega_moe_pre_dispatch_sm90): pointers, row and column strides in elements, dtype codes.
struct MegaMoePreDispatchArgs {
    const void* x;  // BF16 [num_tokens, hidden], unit column stride
    uint64_t x_stride;
    const void* topk_idx;  // int64 (idx_is_64) or int32
    uint64_t idx_row_stride, idx_col_stride;
    const void* topk_weights;  // FP32 (0), BF16 (1) or FP16 (2): weights_dtype
    uint64_t w_row_stride, w_col_stride;
    void* buf_x;  // FP8 [>= num_tokens, hidden], unit column stride
    uint64_t buf_x_stride;
    void* buf_x_sf;  // [>= num_tokens, hidden / 128]: FP32 1x128 scales, or packed UE8M0 1x32 words (sf_packed_ue8m0)
    uint64_t sf_row_stride, sf_col_stride;
    int64_t* buf_topk_idx;
    uint64_t buf_idx_row_stride, buf_idx_col_stride;
    float* buf_topk_weights;
    uint64_t buf_w_row_stride, buf_w_col_stride;
    uint32_t num_tokens, hidden, num_topk, idx_is_64, weights_dtype;
    float routed_scaling_factor;
    uint32_t sf_packed_ue8m0;
};

// A warp per (token, 128 columns); the first block's warp of each token also copies its routing.
inline void launch_mega_moe_pre_dispatch(int device_index, const MegaMoePreDispatchArgs& args) {
    if (args.num_tokens == 0)
        return;
    jit::LaunchConfig config;
    config.grid = {mega_moe_grid(static_cast<uint64_t>(args.num_tokens) * (args.hidden / 128), kMegaMoeWarps), 1, 1};
    config.num_threads = kMegaMoeWarps * 32;
    config.stream = jit::current_stream(device_index);
    mega_moe_kernel(device_index, MegaMoeKernel::kPreDispatch)
        .launch(device_index, config, args.x, args.x_stride, args.topk_idx, args.idx_row_stride, args.idx_col_stride,
                args.topk_weights, args.w_row_stride, args.w_col_stride, args.buf_x, args.buf_x_stride,
                args.buf_x_sf, args.sf_row_stride, args.sf_col_stride, args.buf_topk_idx, args.buf_idx_row_stride,
                args.buf_idx_col_stride, args.buf_topk_weights, args.buf_w_row_stride, args.buf_w_col_stride,
                args.num_tokens, args.hidden, args.num_topk, args.idx_is_64, args.weights_dtype,
                args.routed_scaling_factor, args.sf_packed_ue8m0);
}

}  // namespace dg::kernels
