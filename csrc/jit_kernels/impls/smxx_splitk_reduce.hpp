// Host side of deep_gemm/include/deep_gemm/impls/smxx_splitk_reduce.cuh: render, load (once per
// device and variant), launch on the current stream.
#pragma once

#include <string>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../../utils/env.hpp"

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

// Whether the reduction is launched as a programmatic dependent of the GEMM before it on the stream, whatever
// set_pdl says: the GEMM signals griddepcontrol.launch_dependents as it starts, so the reduction's launch is
// done while the GEMM runs and its blocks wait at griddepcontrol.wait for the GEMM's partials (which that
// wait makes visible: it returns when the GEMM grid has completed and flushed its memory). Without it the
// second launch costs 2-4 us of a 10-20 us decode GEMM (docs/perf/h200.md, run 34). DG_SPLITK_REDUCE_PDL=0
// launches it as an ordinary stream successor (for A/B measurements).
inline bool splitk_reduce_uses_pdl() {
    static const bool enabled = get_env_flag("DG_SPLITK_REDUCE_PDL", true);
    return enabled;
}

// D [m, n] (BF16 or FP32, row stride ldd elements) = C (D's type, row stride ldc; may be D; or null) + the sum
// over the num_splits FP32 [m, n] slices of `workspace`, launched right after the GEMM that wrote them, on the
// current stream (see splitk_reduce_uses_pdl).
inline void launch_splitk_reduce(int device_index, const float* workspace, void* d, const void* c, uint32_t m,
                                 uint32_t n, uint32_t ldd, uint32_t ldc, uint32_t num_splits, bool fp32_out) {
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
    config.enable_pdl = splitk_reduce_uses_pdl();
    kernel->launch(device_index, config, workspace, d, c, m, n, ldd, ldc, num_splits);
}

}  // namespace dg::kernels
