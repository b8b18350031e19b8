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

// Which padding rows a contiguous call zeroes (common/zero_padding.cuh)
enum class ZeroPadding { kNone, kAll, kGroupSegments };

inline jit::KernelSource render_zero_padding_kernel(bool psum_layout, bool group_segments_only = false) {
    // (one family name for every variant, the registry's, so that a cache deep_gemm.precompile builds serves the
    // run: the template arguments make the sources, and so the cache keys, differ)
    return {"smxx_zero_padding_rows",
            fmt::format("#include <deep_gemm/impls/smxx_zero_padding.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&zero_padding_rows_kernel<{}, {}, {}>);\n"
                        "}}\n",
                        kZeroPaddingWarps, psum_layout ? "true" : "false", group_segments_only ? "true" : "false")};
}

// Whether the zeroing of BF16 [*, n] rows with row stride `ldd` elements at `d` may use 16-byte stores.
inline bool zero_padding_vectorized(const void* d, uint64_t n, uint64_t ldd) {
    return n % 8 == 0 && ldd % 8 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0;
}

// Zero D's padding rows (see the kernel's comment): d BF16 [m, n] with row stride `ldd` elements, `layout` the
// int32 grouped layout on the device (per-row ids, or G cumulative ends with `psum_layout`); with
// group_segments_only (per-row) only those of segments that start with a group's row.
inline void launch_zero_padding_rows(int device_index, void* d, uint32_t m, uint32_t n, uint64_t ldd,
                                     const int32_t* layout, uint32_t num_groups, uint32_t alignment, bool psum_layout,
                                     bool group_segments_only) {
    if (m == 0 || n == 0)
        return;
    const auto stream = jit::current_stream(device_index);
    static jit::KernelCache<std::pair<int, int>> kernels;
    const int mode = psum_layout ? 1 : group_segments_only ? 2 : 0;
    const jit::Kernel& kernel = kernels.get({device_index, mode}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_zero_padding_kernel(psum_layout, group_segments_only), arch, device_index,
                               stream);
    });
    const bool vectorized = zero_padding_vectorized(d, n, ldd);
    jit::LaunchConfig config;
    config.grid = {std::min((m + kZeroPaddingWarps - 1) / kZeroPaddingWarps, kZeroPaddingMaxCtas), 1, 1};
    config.num_threads = kZeroPaddingWarps * 32;
    config.stream = stream;
    kernel.launch(device_index, config, d, m, n, ldd, layout, num_groups, alignment, vectorized);
}

}  // namespace dg::kernels
