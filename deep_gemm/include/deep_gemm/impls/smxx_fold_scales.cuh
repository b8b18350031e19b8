// The A operand of an FP8 x FP4 GEMM given with 1x32 scales, FP8 (e4m3) or FP4 (e2m1, two a byte, low nibble first),
// to e4m3 with one FP32 scale per 1x128 (any SM >= 90): what the SM90 GEMM's FP8 x FP4 mode reads (its promotion applies
// one scale per row and 128-deep K block). The 1x32 scales are folded into the values (common/scale_fold.cuh):
//   out[m, k] = e4m3(in[m, k] * 2^(e[m, k / 32] - e_max[m, k / 128])),  sf[k / 128][m] = 2^(e_max[m, k / 128] - 127)
// with e the UE8M0 exponents and e_max their largest over the block's groups that lie inside K. Memory-bound: a read of
// A and its exponent words, a write of e4m3 A (K bytes a row) and the scales.
//
// Launch: a warp per (row, 128-wide K block), kNumWarps warps a CTA, grid-stride. Lane l takes the block's columns
//   4l .. 4l + 3 (one 4-byte load of e4m3, one 2-byte load of e2m1), all lanes read the block's exponent word (one
//   broadcast load), lane 0 stores the scale. Columns past K are neither read nor written (K % 4 == 0: the host checks).
// Exponent words: int32 at words[m * word_row_stride + block * word_col_stride] (K-major or MN-major, as given).
// Scales out: FP32 sf[block * sf_stride + m], the GEMMs' MN-major TMA-aligned layout.
#pragma once

#include <deep_gemm/common/fp4_conversion.cuh>
#include <deep_gemm/common/scale_fold.cuh>
#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

template <uint32_t kNumWarps, bool kFp4In>
__global__ void __launch_bounds__(kNumWarps * 32)
fold_scales_to_1x128_kernel(const uint8_t* __restrict__ in, uint64_t in_row_bytes, const uint32_t* __restrict__ words,
                            uint64_t word_row_stride, uint64_t word_col_stride, uint8_t* __restrict__ out,
                            uint64_t out_row_bytes, float* __restrict__ sf, uint64_t sf_stride, uint32_t num_rows,
                            uint32_t k) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t num_blocks = ceil_div(k, 128u);
    const uint64_t units = static_cast<uint64_t>(num_rows) * num_blocks;
    for (uint64_t unit = static_cast<uint64_t>(blockIdx.x) * kNumWarps + warp; unit < units;
         unit += static_cast<uint64_t>(gridDim.x) * kNumWarps) {
        const uint32_t row = static_cast<uint32_t>(unit / num_blocks), block = static_cast<uint32_t>(unit % num_blocks);
        uint32_t word = __ldg(words + row * word_row_stride + block * word_col_stride);
        // Groups that start past K carry padding exponents: they take no part in the block's maximum
        const uint32_t groups_in_k = min(4u, ceil_div(k - block * 128, 32u));
        if (groups_in_k < 4)
            word &= (1u << (8 * groups_in_k)) - 1u;
        const uint32_t e_max = scale_fold::max_exponent(word);
        const uint32_t col = block * 128 + lane * 4;
        if (col < k) {
            const uint32_t shift = e_max - ((word >> (8 * (lane / 8))) & 0xFF);
            uint32_t values;
            if constexpr (kFp4In) {
                const uint32_t packed = __ldg(reinterpret_cast<const uint16_t*>(in + row * in_row_bytes + col / 2));
                uint32_t unused;
                e2m1x8_to_e4m3x8(packed, e2m1_magnitude_pool(shift), values, unused);
            } else {
                values = scale_fold::shift_e4m3x4(__ldg(reinterpret_cast<const uint32_t*>(in + row * in_row_bytes + col)),
                                                  shift);
            }
            *reinterpret_cast<uint32_t*>(out + row * out_row_bytes + col) = values;
        }
        if (lane == 0)
            sf[block * sf_stride + row] = __uint_as_float(scale_fold::ue8m0_to_fp32_bits(e_max));
    }
}

}  // namespace deep_gemm
