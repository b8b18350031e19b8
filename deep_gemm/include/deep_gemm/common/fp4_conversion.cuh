// FP4 (e2m1) to FP8 (e4m3) in shared memory, for the FP8 x FP4 mode of the SM90 GEMM (impls/sm90_gemm.cuh).
//
// A packed B tile of one 128-deep K block arrives by TMA without swizzle: BLOCK_N rows x 64 bytes, two e2m1 values a
// byte (the even-K one in the low nibble), with one 32-bit word of scales per row: the four UE8M0 exponents e_0..e_3
// of its 1x32 groups (the first group in the low byte). Each group g becomes e4m3(v * 2^(e_g - e_max)), e_max the
// row's largest exponent, written as the 128B-swizzled K-major e4m3 tile wgmma's B descriptor reads (row r at r * 128
// bytes, its 16-byte chunk c at chunk c ^ (r % 8)); the row's word is replaced by the FP32 2^(e_max - 127), which the
// promotion applies as a per-row sfb. Every e2m1 magnitude {0, 0.5, 1, 1.5, 2, 3, 4, 6} times 2^-s is an e4m3 value for
// shifts s <= 8 (subnormals reach 2^-9); larger shifts round to nearest even (docs/design.md has how rarely and how
// little).
// Work item: one group of one row (16 packed bytes in, 32 e4m3 bytes out: 9 instructions per 8 values); four
// consecutive threads take a row, so
// a warp reads 512 consecutive bytes (conflict-free 16-byte loads) and its stores land in 8 distinct chunks a phase.
#pragma once

#include <deep_gemm/common/scale_fold.cuh>
#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/sync.cuh>

namespace deep_gemm {

// The 8 e4m3 magnitudes of the e2m1 codes 0..7 times 2^-shift, as a byte pool for prmt (code i: byte i).
__device__ __forceinline__ uint2 e2m1_magnitude_pool(uint32_t shift) {
    if (shift <= 5) {
        // e4m3 of {0, 0.5, 1, 1.5} and {2, 3, 4, 6}; 2^-shift lowers each nonzero exponent field by `shift`, which
        // stays normal (0.5's field is 6)
        return {0x3C383000u - shift * 0x08080800u, 0x4C484440u - shift * 0x08080808u};
    }
    // Subnormal results (exact up to shift 8, rounded beyond): the hardware's round-to-nearest-even conversion
    const float unit = __uint_as_float((127u - min(shift, 126u)) << 23);
    const uint32_t lo = ptx::pack_e4m3x2(0.0f, 0.5f * unit) | (uint32_t(ptx::pack_e4m3x2(1.0f * unit, 1.5f * unit)) << 16);
    const uint32_t hi = ptx::pack_e4m3x2(2.0f * unit, 3.0f * unit) | (uint32_t(ptx::pack_e4m3x2(4.0f * unit, 6.0f * unit)) << 16);
    return {lo, hi};
}

// Eight e2m1 values (nibbles of `x`, value i in nibble i) -> eight e4m3 bytes (values 0..3 in `lo`, 4..7 in `hi`).
// Magnitudes: a byte permute of the pool by each nibble's low three bits. Signs: nibble 2j + 1's sign is the top
// bit of byte j of x, nibble 2j's that of byte j of x << 4; a byte permute in sign-replicating mode (selector bit
// 3) spreads each into its output byte.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t x, uint2 pool, uint32_t& lo, uint32_t& hi) {
    const uint32_t magnitudes = x & 0x77777777u, shifted = x << 4;
    uint32_t mag_lo, mag_hi, sign_lo, sign_hi;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(mag_lo) : "r"(pool.x), "r"(pool.y), "r"(magnitudes));
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(mag_hi) : "r"(pool.x), "r"(pool.y), "r"(magnitudes >> 16));
    // (bytes 0..3 of the pair: x << 4, bytes 4..7: x; values 0..3 from bytes 0, 4, 1, 5, values 4..7 from 2, 6, 3, 7)
    asm("prmt.b32 %0, %1, %2, 0xD9C8;" : "=r"(sign_lo) : "r"(shifted), "r"(x));
    asm("prmt.b32 %0, %1, %2, 0xFBEA;" : "=r"(sign_hi) : "r"(shifted), "r"(x));
    lo = mag_lo | (sign_lo & 0x80808080u);
    hi = mag_hi | (sign_hi & 0x80808080u);
}

template <uint32_t BLOCK_N, uint32_t kNumThreads>
struct Fp4ToE4m3 {
    static constexpr uint32_t kPackedRowBytes = 64;  // 128 e2m1 values
    static constexpr uint32_t kNumItems = BLOCK_N * 4;
    static_assert(BLOCK_N % 8 == 0 && kNumThreads % 32 == 0,
                  "whole warps over whole 8-row groups: every lane of a warp runs the same number of items");

    // Converts one stage: `packed` [BLOCK_N][64 bytes] -> `out` (1024-byte aligned, [BLOCK_N][128 bytes] swizzled);
    // `scales` [BLOCK_N] words in, FP32 out. `thread` in [0, kNumThreads); all of them call it.
    __device__ __forceinline__ static void convert(const uint8_t* packed, uint8_t* out, uint32_t* scales,
                                                   uint32_t thread) {
        #pragma unroll 1
        for (uint32_t item = thread; item < kNumItems; item += kNumThreads) {
            const uint32_t row = item / 4, group = item % 4;
            const uint4 in = *reinterpret_cast<const uint4*>(packed + row * kPackedRowBytes + group * 16);
            const uint32_t exponents = scales[row];
            const uint32_t e_max = scale_fold::max_exponent(exponents);
            const uint2 pool = e2m1_magnitude_pool(e_max - ((exponents >> (8 * group)) & 0xFF));
            uint4 first, second;
            e2m1x8_to_e4m3x8(in.x, pool, first.x, first.y);
            e2m1x8_to_e4m3x8(in.y, pool, first.z, first.w);
            e2m1x8_to_e4m3x8(in.z, pool, second.x, second.y);
            e2m1x8_to_e4m3x8(in.w, pool, second.z, second.w);
            uint8_t* out_row = out + row * 128;
            *reinterpret_cast<uint4*>(out_row + (((2 * group) ^ (row % 8)) * 16)) = first;
            *reinterpret_cast<uint4*>(out_row + (((2 * group + 1) ^ (row % 8)) * 16)) = second;
            // The row's four threads (consecutive lanes) have read its exponents: its first replaces them by 2^e_max
            // (UE8M0 0 is 2^-127, an FP32 subnormal)
            __syncwarp();
            if (group == 0)
                scales[row] = scale_fold::ue8m0_to_fp32_bits(e_max);
        }
    }
};

}  // namespace deep_gemm
