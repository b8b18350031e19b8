// Host side of deep_gemm/include/deep_gemm/impls/smxx_splitk_reduce.cuh: render, load (once per
// device and variant), launch on the current stream.
#pragma once

#include <string>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

constexpr uint32_t kSplitKReduceThreads = 256;

// vec: 4 (N % 4 == 0) or 1 elements per thread; fp32_out: D (and C) FP32, else BF16; has_c: D = C + sum.
inline jit::KernelSource render_splitk_reduce(uint32_t vec, bool fp32_out = false, bool has_c = false) {
    return {"smxx_splitk_reduce",
            fmt::format("#include <deep_gemm/impls/smxx_splitk_reduce.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&splitk_reduce_kernel<{}, {}, {}, {}>);\n"
                        "}}\n",
                        kSplitKReduceThreads, vec, fp32_out ? "float" : "__nv_bfloat16", has_c ? "true" : "false")};
}

// D [m, n] (BF16 or FP32, row stride ldd elements) = C (D's type, row stride ldc; may be D; or null) + the sum
// over the num_splits FP32 [m, n] slices of `workspace`.
inline void launch_splitk_reduce(int device_index, const float* workspace, void* d, const void* c, uint32_t m,
                                 uint32_t n, uint32_t ldd, uint32_t ldc, uint32_t num_splits, bool fp32_out,
                                 bool enable_pdl) {
    const uint32_t vec = n % 4 == 0 ? 4 : 1;
    const bool has_c = c != nullptr;
    static const jit::Kernel* kernels[2][2][2][64] = {};
    const jit::Kernel*& kernel = kernels[vec == 4][fp32_out][has_c][device_index & 63];
    const auto stream = jit::current_stream(device_index);
    if (kernel == nullptr) [[unlikely]] {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        kernel = &jit::get_kernel(render_splitk_reduce(vec, fp32_out, has_c), arch, device_index, stream);
    }
    const uint64_t threads = (static_cast<uint64_t>(m) * n / vec + kSplitKReduceThreads - 1);
    jit::LaunchConfig config;
    config.grid = {static_cast<uint32_t>(threads / kSplitKReduceThreads), 1, 1};
    config.num_threads = kSplitKReduceThreads;
    config.stream = stream;
    config.enable_pdl = enable_pdl;
    kernel->launch(device_index, config, workspace, d, c, m, n, ldd, ldc, num_splits);
}

}  // namespace dg::kernels
