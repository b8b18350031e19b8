// A math warpgroup's FP32 accumulators after m64nNk wgmmas, as registers: which (row, column) each thread holds,
// and the bounds-checked stores straight from them (D = C + accum) that the GEMM epilogues fall back to.
//
// Layout (PTX ISA, wgmma D fragments): per 64-row slice im, thread (warp w of the warpgroup, lane l) holds, for
// each 8-column group j, the pairs (row, col), (row, col + 1) at accum[im][j * 4 + 2 * half + {0, 1}] with
// row = im * 64 + w * 16 + l / 4 + 8 * half and col = j * 8 + 2 * (l % 4).
#pragma once

#include <cuda_bf16.h>
#include <cuda/std/type_traits>

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/scheduler/gemm_scheduler.cuh>

namespace deep_gemm {

template <typename T>
__device__ __forceinline__ T convert_accum(float value) {
    if constexpr (cuda::std::is_same_v<T, float>)
        return value;
    else
        return __float2bfloat16_rn(value);
}
__device__ __forceinline__ float to_float(float value) { return value; }
__device__ __forceinline__ float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

// The layout above: the row, among the warpgroup's rows, of this thread's pair `half` in 64-row slice `im`, and the
// first of its two columns in each 8-column group.
__device__ __forceinline__ uint32_t accum_fragment_row(uint32_t im, uint32_t half, uint32_t warp_in_wg, uint32_t lane) {
    return im * 64 + warp_in_wg * 16 + lane / 4 + half * 8;
}
__device__ __forceinline__ uint32_t accum_fragment_col(uint32_t lane) { return (lane % 4) * 2; }

// kNumWgmmaM slices of 64 rows, kNumAccum accumulators per thread per slice (BLOCK_N / 2).
template <uint32_t kNumWgmmaM, uint32_t kNumAccum>
struct AccumFragment {
    using Accum = float[kNumWgmmaM][kNumAccum];

    // body(row, col, v0, v1) for this thread's element pairs (row, col), (row, col + 1) of each accumulator pair,
    // skipping rows at or past `row_end` and, with `row_groups` (the per-row grouped layout), rows whose id is not
    // the tile's `row_group` (padding: contiguous_row_in_group). Pairs are numbered p = im * kNumAccum / 2 + i / 2
    // (accumulator i of row block im); with kPairStride > 1 (split-K) only those with p % kPairStride ==
    // pair_owner are visited.
    template <uint32_t kPairStride = 1, typename Body>
    __device__ __forceinline__ static void for_each_pair(Accum& accum, uint32_t m0, uint32_t n0, uint32_t row_end,
                                                         const int32_t* row_groups, uint32_t row_group,
                                                         uint32_t warp_in_wg, uint32_t lane, uint32_t pair_owner,
                                                         Body&& body) {
        #pragma unroll
        for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
            #pragma unroll
            for (uint32_t j = 0; j < kNumAccum / 4; ++j) {
                #pragma unroll
                for (uint32_t half = 0; half < 2; ++half) {
                    const uint32_t pair = im * (kNumAccum / 2) + j * 2 + half;
                    if (kPairStride > 1 && pair % kPairStride != pair_owner)
                        continue;
                    const uint32_t row = m0 + accum_fragment_row(im, half, warp_in_wg, lane);
                    const uint32_t col = n0 + j * 8 + accum_fragment_col(lane);
                    if (row >= row_end || (row_groups != nullptr && !contiguous_row_in_group(row_groups, row, row_group)))
                        continue;
                    body(row, col, accum[im][j * 4 + half * 2], accum[im][j * 4 + half * 2 + 1]);
                }
            }
        }
    }

    // accum += C for this thread's elements inside rows [.., row_end) (and of `row_group`, with `row_groups`) and
    // columns [.., shape_n), of the pairs for_each_pair visits.
    template <uint32_t kPairStride = 1, typename T>
    __device__ __forceinline__ static void add_c(Accum& accum, uint32_t m0, uint32_t n0, uint32_t row_end,
                                                 uint32_t shape_n, const T* c, uint32_t ldc, uint32_t warp_in_wg,
                                                 uint32_t lane, const int32_t* row_groups = nullptr,
                                                 uint32_t row_group = 0, uint32_t pair_owner = 0) {
        for_each_pair<kPairStride>(accum, m0, n0, row_end, row_groups, row_group, warp_in_wg, lane, pair_owner,
                                   [&](uint32_t row, uint32_t col, float& v0, float& v1) {
                                       const T* in = c + static_cast<uint64_t>(row) * ldc + col;
                                       v0 += col < shape_n ? to_float(in[0]) : 0.0f;
                                       v1 += col + 1 < shape_n ? to_float(in[1]) : 0.0f;
                                   });
    }

    // Stores straight from registers, bounds-checked: BF16 into D (rows not 16-byte aligned, or a grouped
    // tile with padding rows), or D = C + accum (FP32 D, or BF16 D with a C; C of D's type; `c` may be D
    // itself: each element is read, then written, by the same thread; null: no C). Rows at or past `row_end`
    // are skipped, and with `row_groups` (the per-row grouped layout) rows whose group id is not `row_group`
    // (padding: ids outside [0, G) included); with kPairStride > 1 (split-K) only the pairs this CTA owns
    // (for_each_pair).
    template <uint32_t kPairStride = 1, typename T>
    __device__ __forceinline__ static void store_direct(Accum& accum, uint32_t m0, uint32_t n0, uint32_t row_end,
                                                        uint32_t shape_n, T* d, uint32_t ldd, const T* c, uint32_t ldc,
                                                        uint32_t warp_in_wg, uint32_t lane,
                                                        const int32_t* row_groups = nullptr, uint32_t row_group = 0,
                                                        uint32_t pair_owner = 0) {
        // NOTES: C is read in full before D is written. C may be D itself (or alias it), so a load may not
        // move past an earlier store: interleaved, every pair would wait out a global-load latency.
        if (c != nullptr)
            add_c<kPairStride>(accum, m0, n0, row_end, shape_n, c, ldc, warp_in_wg, lane, row_groups, row_group,
                               pair_owner);
        for_each_pair<kPairStride>(accum, m0, n0, row_end, row_groups, row_group, warp_in_wg, lane, pair_owner,
                                   [&](uint32_t row, uint32_t col, float& v0, float& v1) {
                                       T* out = d + static_cast<uint64_t>(row) * ldd + col;
                                       if (col < shape_n)
                                           out[0] = convert_accum<T>(v0);
                                       if (col + 1 < shape_n)
                                           out[1] = convert_accum<T>(v1);
                                   });
    }
};

}  // namespace deep_gemm
