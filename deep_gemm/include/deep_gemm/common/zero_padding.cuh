// The padding rows of an m-grouped contiguous GEMM's D, and their zeroing (ensure_zero_padding): shared by the
// standalone kernel (impls/smxx_zero_padding.cuh) and the GEMM's producer warpgroup (impls/sm90_gemm.cuh), which
// zeroes them itself when the host asks (GroupedLayout::zero_padding).
//
// A row is padding when (per-row layout) its group id lies outside [0, G), or (psum layout, G cumulative end
// rows) it lies in no group's span [align(end[g-1], alignment), end[g]): the gap before a group's aligned start
// and every row at or past end[G-1]. No GEMM tile writes a padding row of a valid layout (a segment's padding rows
// follow its group's rows), so zeroing them races with nothing. (A per-row layout with padding between a group's rows
// is no valid input: a tile whose last row is the group's is stored whole by TMA, over those rows too.)
// kGroupSegmentsOnly (per-row layout, ensure_zero_padding=False): only the padding rows of a segment (`alignment`
// rows from a multiple of it) whose first row is a group's, which a kernel storing whole segment-sized blocks (the
// reference's) writes; segments that start with padding are left as they are.
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

// Zero the padding rows among rows first_row, first_row + row_step, ... below shape_m of D viewed as BF16
// [M, shape_n] with row stride `ldd` elements (an FP32 row is twice as many BF16 elements): a warp per row, its
// lanes consecutive along N so stores are coalesced, 16-byte stores when `vectorized` (shape_n and ldd multiples
// of 8, D 16-byte aligned), else 2-byte ones. Each lane's stores depend on no other lane: a diverged warp may run it.
template <bool kPsumLayout, bool kGroupSegmentsOnly = false>
__device__ __forceinline__ void zero_padding_rows(uint16_t* __restrict__ d, uint32_t shape_m, uint32_t shape_n,
                                                  uint64_t ldd, const int32_t* __restrict__ layout,
                                                  uint32_t num_groups, uint32_t alignment, bool vectorized,
                                                  uint32_t first_row, uint32_t row_step, uint32_t lane) {
    for (uint32_t row = first_row; row < shape_m; row += row_step) {
        bool padding;
        if constexpr (kPsumLayout) {
            padding = psum_padding_row(layout, num_groups, alignment, row);
        } else {
            const int32_t group = __ldg(layout + row);
            padding = group < 0 || static_cast<uint32_t>(group) >= num_groups;
            if (kGroupSegmentsOnly && padding) {
                const int32_t first = __ldg(layout + row - row % alignment);
                padding = first >= 0 && static_cast<uint32_t>(first) < num_groups;
            }
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
