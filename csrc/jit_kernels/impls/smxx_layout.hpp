// Host side of deep_gemm/include/deep_gemm/impls/smxx_layout.cuh: render, load (once), launch.
#pragma once

#include <string>
#include <utility>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

enum class LayoutKernel { kTransposeSf, kPackUe8m0 };

constexpr uint32_t kLayoutThreads = 256;

inline jit::KernelSource render_layout_kernel(LayoutKernel kind) {
    const char* name = kind == LayoutKernel::kTransposeSf ? "transpose_sf_kernel" : "pack_ue8m0_kernel";
    return {kind == LayoutKernel::kTransposeSf ? "smxx_transpose_sf" : "smxx_pack_ue8m0",
            fmt::format("#include <deep_gemm/impls/smxx_layout.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&{}<{}>);\n"
                        "}}\n",
                        name, kLayoutThreads)};
}

// Launch one layout kernel: input FP32 sf viewed as [num_groups, mn, sf_k] with the given element
// strides, output `out` [num_groups, num_k_outputs, aligned_mn] contiguous (FP32 or int32).
inline void launch_layout_kernel(LayoutKernel kind, int device_index, const float* sf, void* out, uint32_t mn,
                                 uint32_t sf_k, uint32_t aligned_mn, uint32_t num_groups, int64_t stride_g,
                                 int64_t stride_mn, int64_t stride_k) {
    const auto stream = jit::current_stream(device_index);
    static jit::KernelCache<std::pair<int, int>> kernels;
    const jit::Kernel& kernel = kernels.get({device_index, static_cast<int>(kind)}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_layout_kernel(kind), arch, device_index, stream);
    });
    const uint32_t num_k_outputs = kind == LayoutKernel::kTransposeSf ? sf_k : (sf_k + 3) / 4;
    DG_CHECK_INPUT(num_k_outputs <= 65535 && num_groups <= 65535,
                   "scaling factors too large for the layout kernel: {} K columns, {} groups", num_k_outputs, num_groups);
    jit::LaunchConfig config;
    config.grid = {(aligned_mn + kLayoutThreads - 1) / kLayoutThreads, num_k_outputs, num_groups};
    config.num_threads = kLayoutThreads;
    config.stream = stream;
    kernel.launch(device_index, config, sf, out, mn, sf_k, aligned_mn, stride_g, stride_mn, stride_k);
}

}  // namespace dg::kernels
