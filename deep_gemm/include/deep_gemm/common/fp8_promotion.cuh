// The FP8 GEMMs' promotion (two-level accumulation): the wgmmas of one 128-deep K block sum A * B^T into `partial`
// on the tensor cores (never longer than 128 of K in their reduced-precision accumulators), then the CUDA cores add
// it, scaled, into the FP32 accumulators:
//   recipe (1, 128, 128): accum += partial * sfa[row] * sfb[column block]   (promote, one FFMA per accumulator)
//   recipe (1, 1, 128):   accum += partial * sfa[row] * sfb[column]         (promote_per_row, FMUL + FFMA)
// `accum` and `partial` are a math warpgroup's wgmma fragments (common/accum_fragment.cuh): kNumWgmmaM slices of 64
// rows, kNumAccum accumulators per thread per slice, the tile BLOCK_N columns wide.
#pragma once

#include <deep_gemm/common/accum_fragment.cuh>
#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

// kSfbAhead: how many column-scale pairs promote_per_row keeps in registers ahead of their use.
template <uint32_t kNumWgmmaM, uint32_t kNumAccum, uint32_t BLOCK_N, uint32_t kSfbAhead>
struct Fp8Promotion {
    using Accum = float[kNumWgmmaM][kNumAccum];

    // The scales of one stage, for this thread's rows (r and r + 8 of each 64-row slice) and the tile's two
    // column blocks (recipe (1, 128, 128); unused with per-row sfb).
    struct StageScales {
        float sfa[kNumWgmmaM][2];
        float2 sfb;
    };

    // accum += partial * sfa[row] * sfb[column block], with columns [0, kFirstCols) of the tile in the first
    // scale block and the rest in the second: the split is a compile-time constant, so the promotion is
    // 4 FMUL + one FFMA per accumulator, with no per-column selection.
    template <uint32_t kFirstCols, typename Registers>
    __device__ __forceinline__ static void promote_split(Accum& accum, const Registers& partial,
                                                         const StageScales& scales) {
        #pragma unroll
        for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
            const float scale_00 = scales.sfa[im][0] * scales.sfb.x, scale_01 = scales.sfa[im][0] * scales.sfb.y;
            const float scale_10 = scales.sfa[im][1] * scales.sfb.x, scale_11 = scales.sfa[im][1] * scales.sfb.y;
            #pragma unroll
            for (uint32_t j = 0; j < kNumAccum / 4; ++j) {
                // This thread's columns j * 8 + 2 * (lane % 4) + {0, 1}: the 8-column group is on one side
                const bool in_first = j * 8 < kFirstCols;
                const float scale_top = in_first ? scale_00 : scale_01;
                const float scale_bottom = in_first ? scale_10 : scale_11;
                accum[im][j * 4 + 0] = fmaf(partial[im][j * 4 + 0], scale_top, accum[im][j * 4 + 0]);
                accum[im][j * 4 + 1] = fmaf(partial[im][j * 4 + 1], scale_top, accum[im][j * 4 + 1]);
                accum[im][j * 4 + 2] = fmaf(partial[im][j * 4 + 2], scale_bottom, accum[im][j * 4 + 2]);
                accum[im][j * 4 + 3] = fmaf(partial[im][j * 4 + 3], scale_bottom, accum[im][j * 4 + 3]);
            }
        }
    }

    // The tile's first column n0 is a multiple of BLOCK_N, so n0 % 128 is a multiple of gcd(BLOCK_N, 128) and
    // `boundary` = 128 - n0 % 128 takes one of 128 / gcd values: dispatch (warp-uniform) to the promotion
    // specialized for it, trying kBoundary, kBoundary - gcd, ..., gcd.
    static constexpr uint32_t kBoundaryStep = gcd(BLOCK_N, 128u);

    template <uint32_t kBoundary = 128, typename Registers>
    __device__ __forceinline__ static void promote(Accum& accum, const Registers& partial, const StageScales& scales,
                                                   uint32_t boundary) {
        constexpr uint32_t kFirstCols = kBoundary < BLOCK_N ? kBoundary : BLOCK_N;
        if constexpr (kBoundary <= kBoundaryStep) {
            promote_split<kFirstCols>(accum, partial, scales);  // the last case (also any unexpected value)
        } else {
            if (boundary == kBoundary)
                promote_split<kFirstCols>(accum, partial, scales);
            else
                promote<kBoundary - kBoundaryStep>(accum, partial, scales, boundary);
        }
    }

    // Per-row sfb (recipe (1, 1, 128)): accum += partial * sfa[row] * sfb[column], the column scales read from
    // the stage (so the stage is released after this). This thread's column pair of 8-column group j is
    // sfb_stage[j * 8 + 2 (lane % 4)]; the first kSfbAhead pairs are read before the wgmma wait (`ahead`, see
    // load_sfb_ahead), each later one kSfbAhead groups before its use, so that no FMUL waits on its LDS
    // (ncu: a third of the promotion's stall samples were those waits when each FMUL loaded its own pair).
    __device__ __forceinline__ static const float2* sfb_pairs(const float* sfb_stage, uint32_t lane) {
        return reinterpret_cast<const float2*>(sfb_stage + accum_fragment_col(lane));
    }
    __device__ __forceinline__ static void load_sfb_ahead(float2 (&ahead)[kSfbAhead], const float* sfb_stage,
                                                          uint32_t lane) {
        #pragma unroll
        for (uint32_t j = 0; j < kSfbAhead; ++j)
            ahead[j] = j < kNumAccum / 4 ? sfb_pairs(sfb_stage, lane)[j * 4] : float2{0.0f, 0.0f};
    }
    template <typename Registers>
    __device__ __forceinline__ static void promote_per_row(Accum& accum, const Registers& partial,
                                                           const StageScales& scales, float2 (&ahead)[kSfbAhead],
                                                           const float* sfb_stage, uint32_t lane) {
        #pragma unroll
        for (uint32_t j = 0; j < kNumAccum / 4; ++j) {
            const float2 sfb = ahead[j % kSfbAhead];
            if (j + kSfbAhead < kNumAccum / 4)
                ahead[j % kSfbAhead] = sfb_pairs(sfb_stage, lane)[(j + kSfbAhead) * 4];
            #pragma unroll
            for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
                accum[im][j * 4 + 0] = fmaf(partial[im][j * 4 + 0], scales.sfa[im][0] * sfb.x, accum[im][j * 4 + 0]);
                accum[im][j * 4 + 1] = fmaf(partial[im][j * 4 + 1], scales.sfa[im][0] * sfb.y, accum[im][j * 4 + 1]);
                accum[im][j * 4 + 2] = fmaf(partial[im][j * 4 + 2], scales.sfa[im][1] * sfb.x, accum[im][j * 4 + 2]);
                accum[im][j * 4 + 3] = fmaf(partial[im][j * 4 + 3], scales.sfa[im][1] * sfb.y, accum[im][j * 4 + 3]);
            }
        }
    }
};

}  // namespace deep_gemm
