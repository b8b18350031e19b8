// Zero the padding rows of an m-grouped contiguous GEMM's BF16 D [M, N] (ensure_zero_padding=True), after the
// GEMM on the same stream (which rows are padding: common/zero_padding.cuh). The GEMM never writes padding rows;
// this kernel writes only those.
// Launch: grid (min(ceil(M / kNumWarps), cap)), kNumWarps * 32 threads; one warp per row at a time (rows
// stride the grid), its lanes consecutive along N so stores are coalesced: 16-byte stores when `vectorized`
// (N and the row stride multiples of 8 elements, D 16-byte aligned), else 2-byte ones.
#pragma once

#include <deep_gemm/common/zero_padding.cuh>

namespace deep_gemm {

template <uint32_t kNumWarps, bool kPsumLayout, bool kGroupSegmentsOnly>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
zero_padding_rows_kernel(uint16_t* __restrict__ d, uint32_t shape_m, uint32_t shape_n, uint64_t ldd,
                         const int32_t* __restrict__ layout, uint32_t num_groups, uint32_t alignment, bool vectorized) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    zero_padding_rows<kPsumLayout, kGroupSegmentsOnly>(d, shape_m, shape_n, ldd, layout, num_groups, alignment, vectorized,
                                   blockIdx.x * kNumWarps + warp, gridDim.x * kNumWarps, lane);
}

}  // namespace deep_gemm
