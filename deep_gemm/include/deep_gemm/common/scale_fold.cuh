// Folding 1x32 power-of-two scales into one scale per 128 of K, for the operands the SM90 FP8 pipeline reads with a
// single scale per 128-deep K block (its promotion applies one FP32 factor per row and block).
//
// A 128-wide block of a row holds four groups of 32 values, group g with the UE8M0 exponent e_g (the byte g of one
// packed int32 word: 2^(e_g - 127)). The block becomes e4m3 values v * 2^(e_g - e_max), e_max the largest of the four,
// and the FP32 scale 2^(e_max - 127). Multiplying by a power of two is exact while the product stays an e4m3 normal
// (>= 2^-6) or an exact subnormal; below that it rounds to nearest even. So e2m1 inputs are exact for shifts up to 8
// (common/fp4_conversion.cuh), e4m3 inputs for every value at least 2^(e_g - e_max - 6) times its group's scale;
// the error is at most 2^-10 times the block's scale, 2^-19 of its largest representable value (docs/design.md).
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/sync.cuh>

namespace deep_gemm::scale_fold {

// The largest of the four UE8M0 exponents of a packed word.
__device__ __forceinline__ uint32_t max_exponent(uint32_t word) {
    return max(max(word & 0xFF, (word >> 8) & 0xFF), max((word >> 16) & 0xFF, word >> 24));
}

// The FP32 bits of 2^(e - 127) for a UE8M0 byte e (0 is 2^-127, an FP32 subnormal; 255 gives inf).
__device__ __forceinline__ uint32_t ue8m0_to_fp32_bits(uint32_t e) {
    return e == 0 ? 0x00400000u : e << 23;
}

// Four e4m3 bytes (value i in byte i) times 2^-shift, each rounded to nearest even and saturated (NaN stays NaN).
__device__ __forceinline__ uint32_t shift_e4m3x4(uint32_t bytes, uint32_t shift) {
    if (shift == 0)
        return bytes;
    // (past 2^-126 every product rounds to zero: an e4m3 value is at most 448 < 2^9, and e4m3's smallest half-step is
    // 2^-10)
    const float factor = __uint_as_float(shift > 126 ? 0u : (127u - shift) << 23);
    const float2 lo = ptx::unpack_e4m3x2(static_cast<uint16_t>(bytes & 0xFFFF));
    const float2 hi = ptx::unpack_e4m3x2(static_cast<uint16_t>(bytes >> 16));
    return ptx::pack_e4m3x2(lo.x * factor, lo.y * factor) |
           (static_cast<uint32_t>(ptx::pack_e4m3x2(hi.x * factor, hi.y * factor)) << 16);
}

}  // namespace deep_gemm::scale_fold
