// Host side of deep_gemm/include/deep_gemm/impls/smxx_fold_scales.cuh (an FP8 x FP4 GEMM's A with 1x32 scales, FP8 or
// FP4, to e4m3 with 1x128 FP32 scales): render, load once per device and input kind, launch on the current stream.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

constexpr uint32_t kFoldScalesWarps = 8;
constexpr uint32_t kFoldScalesMaxCtas = 8192;  // (past a few waves the grid-stride loop takes over)

inline jit::KernelSource render_fold_scales_kernel(bool fp4_in) {
    return {"smxx_fold_scales",  // (the registry's name for both: precompiled entries serve the run)
            fmt::format("#include <deep_gemm/impls/smxx_fold_scales.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&fold_scales_to_1x128_kernel<{}, {}>);\n"
                        "}}\n",
                        kFoldScalesWarps, fp4_in ? "true" : "false")};
}

// The operand and its folded copy (see the kernel's comment): `in` [num_rows, K] e4m3 or [num_rows, K / 2] e2m1 with
// row stride in_row_bytes; `words` the int32 exponent words with their strides (in words); `out` e4m3 [num_rows, K]
// with row stride out_row_bytes; `sf` FP32 [ceil(K / 128)][sf_stride].
struct FoldScalesArgs {
    const void* in;
    uint64_t in_row_bytes;
    const int32_t* words;
    uint64_t word_row_stride, word_col_stride;
    void* out;
    uint64_t out_row_bytes;
    float* sf;
    uint64_t sf_stride;
    uint32_t num_rows, k;
    bool fp4_in;
};

inline void launch_fold_scales(int device_index, const FoldScalesArgs& args) {
    if (args.num_rows == 0 || args.k == 0)
        return;
    const auto stream = jit::current_stream(device_index);
    static jit::KernelCache<std::pair<int, bool>> kernels;
    const jit::Kernel& kernel = kernels.get({device_index, args.fp4_in}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_fold_scales_kernel(args.fp4_in), arch, device_index, stream);
    });
    const uint64_t units = static_cast<uint64_t>(args.num_rows) * ((args.k + 127) / 128);
    jit::LaunchConfig config;
    config.grid = {static_cast<uint32_t>(std::min<uint64_t>((units + kFoldScalesWarps - 1) / kFoldScalesWarps,
                                                            kFoldScalesMaxCtas)), 1, 1};
    config.num_threads = kFoldScalesWarps * 32;
    config.stream = stream;
    // (Kernel::launch takes its arguments as lvalues)
    const auto* in = static_cast<const uint8_t*>(args.in);
    const auto* words = reinterpret_cast<const uint32_t*>(args.words);
    auto* out = static_cast<uint8_t*>(args.out);
    uint64_t in_row_bytes = args.in_row_bytes, word_row_stride = args.word_row_stride;
    uint64_t word_col_stride = args.word_col_stride, out_row_bytes = args.out_row_bytes, sf_stride = args.sf_stride;
    float* sf = args.sf;
    uint32_t num_rows = args.num_rows, k = args.k;
    kernel.launch(device_index, config, in, in_row_bytes, words, word_row_stride, word_col_stride, out, out_row_bytes,
                  sf, sf_stride, num_rows, k);
}

}  // namespace dg::kernels
