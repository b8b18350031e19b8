// Split-K reduction (any SM >= 90): D[m, n] = out( C[m, n] + sum_{s = 0 .. S-1} workspace[s][m][n] ), with D BF16
// or FP32, and C (of D's type) optional; C may be D itself (each element is read, then written, by one thread).
//
// The partials are added in the fixed order s = 0, 1, ..., S-1 in FP32, then C, so the result does not depend
// on which split finished first (deterministic, bitwise repeatable).
// Launch: grid ceil(M * N / (kVec * kNumThreads)), kNumThreads threads; thread t owns kVec consecutive
// elements of the row-major [M, N] workspace slice (kVec = 4 needs N % 4 == 0, so that a group never
// crosses a row: one 16-byte load per split), D and C addressed with their row strides `ldd` and `ldc`.
// With programmatic dependent launch, the kernel starts while the GEMM finishes and waits for its
// memory at griddepcontrol.wait (a no-op without PDL).
#pragma once

#include <cuda_bf16.h>
#include <cuda/std/type_traits>

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/sync.cuh>

namespace deep_gemm {

template <uint32_t kNumThreads, uint32_t kVec, typename Out, bool kHasC>
__global__ void __launch_bounds__(kNumThreads, 1)
splitk_reduce_kernel(const float* __restrict__ workspace, Out* d, const Out* c, uint32_t shape_m, uint32_t shape_n,
                     uint32_t ldd, uint32_t ldc, uint32_t num_splits) {
    static_assert(kVec == 1 || kVec == 4, "one element or four");
    constexpr bool kFp32 = cuda::std::is_same_v<Out, float>;
    static_assert(kFp32 || cuda::std::is_same_v<Out, __nv_bfloat16>, "D is FP32 or BF16");
    ptx::grid_dependency_wait();
    const uint64_t slice = static_cast<uint64_t>(shape_m) * shape_n;
    const uint64_t first = (static_cast<uint64_t>(blockIdx.x) * kNumThreads + threadIdx.x) * kVec;
    if (first >= slice)
        return;
    float sum[kVec];
    #pragma unroll
    for (uint32_t i = 0; i < kVec; ++i)
        sum[i] = 0.0f;
    for (uint32_t s = 0; s < num_splits; ++s) {
        const float* src = workspace + s * slice + first;
        if constexpr (kVec == 4) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(src));
            sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
        } else {
            sum[0] += __ldg(src);
        }
    }
    const uint32_t row = static_cast<uint32_t>(first / shape_n), col = static_cast<uint32_t>(first % shape_n);
    Out* out = d + static_cast<uint64_t>(row) * ldd + col;
    if constexpr (kHasC) {
        const Out* in = c + static_cast<uint64_t>(row) * ldc + col;
        #pragma unroll
        for (uint32_t i = 0; i < kVec; ++i) {
            if constexpr (kFp32)
                sum[i] += in[i];
            else
                sum[i] += __bfloat162float(in[i]);
        }
    }
    #pragma unroll
    for (uint32_t i = 0; i < kVec; ++i) {
        if constexpr (kFp32)
            out[i] = sum[i];
        else
            out[i] = __float2bfloat16_rn(sum[i]);
    }
}

}  // namespace deep_gemm
