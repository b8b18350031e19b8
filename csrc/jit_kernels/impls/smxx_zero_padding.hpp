// Host side of deep_gemm/include/deep_gemm/impls/smxx_zero_padding.cuh (ensure_zero_padding of the m-grouped
// contiguous GEMMs): render, load (once per device and layout), launch on the current stream.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

constexpr uint32_t kZeroPaddingWarps = 8;
// (a row per warp; more CTAs than rows / warps are pointless, and past a few waves the loop strides)
constexpr uint32_t kZeroPaddingMaxCtas = 4096;

inline jit::KernelSource render_zero_padding_kernel(bool psum_layout) {
    return {psum_layout ? "smxx_zero_padding_rows_psum" : "smxx_zero_padding_rows",
            fmt::format("#include <deep_gemm/impls/smxx_zero_padding.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&zero_padding_rows_kernel<{}, {}>);\n"
                        "}}\n",
                        kZeroPaddingWarps, psum_layout ? "true" : "false")};
}

// Zero D's padding rows (see the kernel's comment): d BF16 [m, n] with row stride `ldd` elements, `layout` the
// int32 grouped layout on the device (per-row ids, or G cumulative ends with `psum_layout`).
inline void launch_zero_padding_rows(int device_index, void* d, uint32_t m, uint32_t n, uint64_t ldd,
                                     const int32_t* layout, uint32_t num_groups, uint32_t alignment, bool psum_layout) {
    if (m == 0 || n == 0)
        return;
    const auto stream = jit::current_stream(device_index);
    static jit::KernelCache<std::pair<int, int>> kernels;
    const jit::Kernel& kernel = kernels.get({device_index, psum_layout ? 1 : 0}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_zero_padding_kernel(psum_layout), arch, device_index, stream);
    });
    bool vectorized = n % 8 == 0 && ldd % 8 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0;
    jit::LaunchConfig config;
    config.grid = {std::min((m + kZeroPaddingWarps - 1) / kZeroPaddingWarps, kZeroPaddingMaxCtas), 1, 1};
    config.num_threads = kZeroPaddingWarps * 32;
    config.stream = stream;
    kernel.launch(device_index, config, d, m, n, ldd, layout, num_groups, alignment, vectorized);
}

}  // namespace dg::kernels
