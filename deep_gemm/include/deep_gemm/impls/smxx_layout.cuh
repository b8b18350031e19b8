// Scaling-factor layout kernels (any SM >= 90).
//
// transpose_sf_kernel:  FP32 sf [G, MN, SF_K] with any strides  ->  FP32 [G, SF_K, aligned_mn]
//                       (MN-major, rows padded to a 16-byte multiple with zeros: TMA-ready).
// pack_ue8m0_kernel:    FP32 powers of two [G, MN, SF_K], any strides  ->  int32 [G, ceil(SF_K/4), aligned_mn],
//                       byte i of word j = biased exponent of sf[.., 4j+i] (0 past SF_K).
// Launch: grid (ceil(aligned_mn / kNumThreads), num_k_outputs, G), kNumThreads threads; one thread per
// output element, threads of a block consecutive along MN, so stores are coalesced. The inputs are
// tiny (one float per 128 values of the GEMM operand): reads are left uncoalesced for K-major inputs.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

template <uint32_t kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1)
transpose_sf_kernel(const float* __restrict__ sf, float* __restrict__ out, uint32_t mn, uint32_t sf_k,
                    uint32_t aligned_mn, int64_t stride_g, int64_t stride_mn, int64_t stride_k) {
    const uint32_t mn_idx = blockIdx.x * kNumThreads + threadIdx.x;
    const uint32_t k_idx = blockIdx.y;
    const uint32_t g_idx = blockIdx.z;
    if (mn_idx >= aligned_mn)
        return;
    const float value = mn_idx < mn ? sf[g_idx * stride_g + mn_idx * stride_mn + k_idx * stride_k] : 0.0f;
    out[(static_cast<int64_t>(g_idx) * sf_k + k_idx) * aligned_mn + mn_idx] = value;
}

template <uint32_t kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1)
pack_ue8m0_kernel(const float* __restrict__ sf, int32_t* __restrict__ out, uint32_t mn, uint32_t sf_k,
                  uint32_t aligned_mn, int64_t stride_g, int64_t stride_mn, int64_t stride_k) {
    const uint32_t mn_idx = blockIdx.x * kNumThreads + threadIdx.x;
    const uint32_t word_idx = blockIdx.y;
    const uint32_t g_idx = blockIdx.z;
    if (mn_idx >= aligned_mn)
        return;
    uint32_t word = 0;
    if (mn_idx < mn) {
        #pragma unroll
        for (uint32_t i = 0; i < 4; ++i) {
            const uint32_t k_idx = word_idx * 4 + i;
            if (k_idx < sf_k) {
                const float value = sf[g_idx * stride_g + mn_idx * stride_mn + k_idx * stride_k];
                word |= ((__float_as_uint(value) >> 23) & 0xffu) << (8 * i);
            }
        }
    }
    out[(static_cast<int64_t>(g_idx) * gridDim.y + word_idx) * aligned_mn + mn_idx] = static_cast<int32_t>(word);
}

}  // namespace deep_gemm
