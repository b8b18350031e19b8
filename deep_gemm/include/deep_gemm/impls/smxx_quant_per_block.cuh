// Per-block FP8 cast (any SM >= 90): one FP32 scale per 128 x 128 block, the weight (RHS) recipe.
//
//   out[b, n, k] = e4m3(x[b, n, k] / sf[b, n / 128, k / 128]), sf from the block's amax as in common/fp8_cast.cuh
//   (bit-exact with deep_gemm.utils.casts.per_block_cast_to_fp8 at gran_k = 128; partial blocks at the N and K edges
//   count only their real elements, as the reference's zero padding does).
//
// Launch: grid (K blocks, N blocks, batches), 256 threads, one CTA per block.
// Thread t holds columns 8 (t % 16) .. +8 of the block's rows t / 16 + 16 j, j < 8: 64 values in registers, loaded
//   with 16-byte __ldg (element-wise at the edges or for rows that are not 16-byte aligned), all issued before any
//   is used.
// amax: per thread, xor-shuffle over the warp, then the 8 warps' maxima through shared memory (one barrier).
// Store: the 64 values scaled and rounded (cvt.rn.satfinite.e4m3x2), 8-byte stores; thread 0 stores the scale.
#pragma once

#include <deep_gemm/common/fp8_cast.cuh>
#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

template <bool kFp32Input, bool kUe8m0, bool kAligned>
__global__ void __launch_bounds__(256)
per_block_quant_kernel(const __grid_constant__ PerBlockQuantParams p) {
    constexpr uint32_t kBlock = 128, kNumWarps = 8, kRowsPerPass = 16, kPasses = kBlock / kRowsPerPass;
    constexpr uint32_t kElemBytes = kFp32Input ? 4 : 2;
    __shared__ float warp_amax[kNumWarps];

    const uint32_t batch = blockIdx.z;
    const uint32_t col = blockIdx.x * kBlock + (threadIdx.x % 16) * 8;
    const uint32_t row0 = blockIdx.y * kBlock + threadIdx.x / 16;
    // Real elements of this thread's 8 columns (0 past K)
    const uint32_t count = col < p.num_cols ? min(8u, p.num_cols - col) : 0;
    const auto* x_batch = static_cast<const uint8_t*>(p.x) + static_cast<int64_t>(batch) * p.x_stride_batch * kElemBytes;

    // Load: 8 rows x 8 columns
    float v[kPasses][8];
    #pragma unroll
    for (uint32_t j = 0; j < kPasses; ++j) {
        const uint32_t row = row0 + j * kRowsPerPass;
        const uint32_t row_count = row < p.num_rows ? count : 0;
        const uint8_t* ptr = x_batch + (static_cast<int64_t>(row) * p.x_stride_row + col) * kElemBytes;
        if (kAligned && row_count == 8)
            fp8_cast::load8<kFp32Input>(ptr, v[j]);
        else
            fp8_cast::load8_partial<kFp32Input>(ptr, row_count, v[j]);
    }

    // amax of the block: thread, warp, CTA
    float amax = 0.0f;
    #pragma unroll
    for (uint32_t j = 0; j < kPasses; ++j) {
        #pragma unroll
        for (uint32_t i = 0; i < 8; ++i)
            amax = fp8_cast::max_nan(amax, fabsf(v[j][i]));
    }
    #pragma unroll
    for (uint32_t mask = 16; mask >= 1; mask /= 2)
        amax = fp8_cast::max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
    if (threadIdx.x % 32 == 0)
        warp_amax[threadIdx.x / 32] = amax;
    __syncthreads();
    #pragma unroll
    for (uint32_t w = 0; w < kNumWarps; ++w)
        amax = fp8_cast::max_nan(amax, warp_amax[w]);

    const float sf = fp8_cast::scale_from_amax<kUe8m0>(amax);
    const fp8_cast::Divisor divisor = fp8_cast::divisor_of(sf);
    if (threadIdx.x == 0) {
        const uint32_t sf_rows = ceil_div(p.num_rows, kBlock), sf_cols = ceil_div(p.num_cols, kBlock);
        p.sf[(static_cast<int64_t>(batch) * sf_rows + blockIdx.y) * sf_cols + blockIdx.x] = sf;
    }

    // Scale, round and store (out is contiguous: row stride num_cols)
    uint8_t* out_batch = p.out + static_cast<int64_t>(batch) * p.num_rows * p.num_cols;
    #pragma unroll
    for (uint32_t j = 0; j < kPasses; ++j) {
        const uint32_t row = row0 + j * kRowsPerPass;
        const uint32_t row_count = row < p.num_rows ? count : 0;
        #pragma unroll
        for (uint32_t i = 0; i < 8; ++i)
            v[j][i] = fp8_cast::scaled<kUe8m0>(v[j][i], divisor);
        const uint2 packed = fp8_cast::to_e4m3x8(v[j]);
        uint8_t* out_ptr = out_batch + static_cast<int64_t>(row) * p.num_cols + col;
        if (kAligned && row_count == 8) {
            *reinterpret_cast<uint2*>(out_ptr) = packed;
        } else {
            #pragma unroll
            for (uint32_t i = 0; i < 8; ++i) {
                if (i < row_count)
                    out_ptr[i] = static_cast<uint8_t>((i < 4 ? packed.x : packed.y) >> (8 * (i % 4)));
            }
        }
    }
}

}  // namespace deep_gemm
