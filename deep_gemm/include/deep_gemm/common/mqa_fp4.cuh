// The FP4 mode of the MQA-logits kernels: packed e2m1 rows (q rows of a head, kv rows of a key) with UE8M0 scales
// per 1x32, made e4m3 in shared memory for the FP8 wgmma.
//
// Format (the reference's): a row of D values is D / 2 bytes, two e2m1 values a byte (the even one in the low
// nibble); its scales are one int32 holding the UE8M0 exponents of its D / 32 groups of 32 (group g in byte g; the
// bytes past D / 32 are ignored). Byte e means 2^(e - 127); 0 means 0 (as deep_gemm.utils.unpack_ue8m0_from_int).
// Folding: group g's values become e4m3(v * 2^(e_g - e_max)), e_max the row's largest exponent, and the row's
// 2^(e_max - 127) is applied in FP32 where the FP8 path applies its scale (kv: the per-key scale; q: the weight of
// the head). Exact while a row's exponents span <= 8 binades (e4m3 subnormals reach 2^-9; larger shifts round to
// nearest even, common/fp4_conversion.cuh).
#pragma once

#include <deep_gemm/common/fp4_conversion.cuh>
#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

namespace deep_gemm::mqa {

// The largest of the low kNumGroups exponent bytes of a row's scale word.
template <uint32_t kNumGroups>
__device__ __forceinline__ uint32_t max_exponent(uint32_t exponents) {
    static_assert(kNumGroups >= 1 && kNumGroups <= 4, "one to four 1x32 groups per row");
    uint32_t e_max = exponents & 0xFF;
    #pragma unroll
    for (uint32_t g = 1; g < kNumGroups; ++g)
        e_max = max(e_max, (exponents >> (8 * g)) & 0xFF);
    return e_max;
}

// A row's FP32 scale 2^(e_max - 127) (0 for the byte 0, as the exponent field of an FP32 zero).
template <uint32_t kNumGroups>
__device__ __forceinline__ float row_scale(uint32_t exponents) {
    return __uint_as_float(max_exponent<kNumGroups>(exponents) << 23);
}

// Converts kRows packed rows (`packed`: kHeadDim / 2 bytes a row, unswizzled, 16-byte aligned) into the e4m3 tile
// `out` (1024-byte aligned, kHeadDim bytes a row in the swizzle of kHeadDim-byte rows that wgmma's K-major
// descriptor reads). `exponents_of(row)` gives the row's scale word. Work item: one 1x32 group of a row (16 bytes
// in, 32 out), item i by thread i % kNumThreads (threads past the last item do nothing); `thread` in
// [0, kNumThreads), all of them call it. The caller fences (async proxy) and syncs.
template <uint32_t kRows, uint32_t kHeadDim, uint32_t kNumThreads, typename ExponentsOf>
__device__ __forceinline__ void convert_fp4_rows(const uint8_t* packed, uint8_t* out, uint32_t thread,
                                                 const ExponentsOf& exponents_of) {
    static_assert(kHeadDim == 64 || kHeadDim == 128, "FP4 rows of 64 or 128 values (one swizzled e4m3 row)");
    constexpr uint32_t kNumGroups = kHeadDim / 32;
    constexpr uint32_t kNumItems = kRows * kNumGroups;
    #pragma unroll 1
    for (uint32_t item = thread; item < kNumItems; item += kNumThreads) {
        const uint32_t row = item / kNumGroups, group = item % kNumGroups;
        const uint4 in = *reinterpret_cast<const uint4*>(packed + row * (kHeadDim / 2) + group * 16);
        const uint32_t exponents = exponents_of(row);
        const uint32_t shift = max_exponent<kNumGroups>(exponents) - ((exponents >> (8 * group)) & 0xFF);
        const uint2 pool = e2m1_magnitude_pool(shift);
        uint4 first, second;
        e2m1x8_to_e4m3x8(in.x, pool, first.x, first.y);
        e2m1x8_to_e4m3x8(in.y, pool, first.z, first.w);
        e2m1x8_to_e4m3x8(in.z, pool, second.x, second.y);
        e2m1x8_to_e4m3x8(in.w, pool, second.z, second.w);
        const uint32_t logical = row * kHeadDim + group * 32;
        *reinterpret_cast<uint4*>(out + ptx::swizzled_offset<kHeadDim>(logical)) = first;
        *reinterpret_cast<uint4*>(out + ptx::swizzled_offset<kHeadDim>(logical + 16)) = second;
    }
}

}  // namespace deep_gemm::mqa
