// Zero the padding rows of an m-grouped contiguous GEMM's BF16 D [M, N] (ensure_zero_padding=True), after the
// GEMM on the same stream. The GEMM never writes padding rows; this kernel writes only those.
//
// A row is padding when (per-row layout) its group id lies outside [0, G), or (psum layout, G cumulative end
// rows) it lies in no group's span [align(end[g-1], alignment), end[g]): the gap before a group's aligned start
// and every row at or past end[G-1].
// Launch: grid (min(ceil(M / kNumWarps), cap)), kNumWarps * 32 threads; one warp per row at a time (rows
// stride the grid), its lanes consecutive along N so stores are coalesced: 16-byte stores when `vectorized`
// (N and the row stride multiples of 8 elements, D 16-byte aligned), else 2-byte ones.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

// Whether `row` is padding in the psum layout: the first group whose end lies past `row` (ends are
// non-decreasing), then its aligned start.
__device__ __forceinline__ bool psum_padding_row(const int32_t* __restrict__ ends, uint32_t num_groups,
                                                 uint32_t alignment, uint32_t row) {
    uint32_t lo = 0, hi = num_groups;
    while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (__ldg(ends + mid) <= static_cast<int32_t>(row))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= num_groups)
        return true;
    const uint32_t start = lo == 0 ? 0u : align_up(static_cast<uint32_t>(max(__ldg(ends + lo - 1), 0)), alignment);
    return row < start;
}

template <uint32_t kNumWarps, bool kPsumLayout>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
zero_padding_rows_kernel(uint16_t* __restrict__ d, uint32_t shape_m, uint32_t shape_n, uint64_t ldd,
                         const int32_t* __restrict__ layout, uint32_t num_groups, uint32_t alignment, bool vectorized) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (uint32_t row = blockIdx.x * kNumWarps + warp; row < shape_m; row += gridDim.x * kNumWarps) {
        bool padding;
        if constexpr (kPsumLayout) {
            padding = psum_padding_row(layout, num_groups, alignment, row);
        } else {
            const int32_t group = __ldg(layout + row);
            padding = group < 0 || static_cast<uint32_t>(group) >= num_groups;
        }
        if (!padding)
            continue;
        uint16_t* out = d + row * ldd;
        if (vectorized) {
            for (uint32_t col = lane * 8; col < shape_n; col += 32 * 8)
                *reinterpret_cast<uint4*>(out + col) = make_uint4(0, 0, 0, 0);
        } else {
            for (uint32_t col = lane; col < shape_n; col += 32)
                out[col] = 0;
        }
    }
}

}  // namespace deep_gemm
