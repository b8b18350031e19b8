// Device pieces of the FP8 casts (impls/smxx_quant_*.cuh), each bit-exact with the PyTorch reference casts in
// deep_gemm/utils/casts.py as they run on CUDA:
//   amax  = max(|x|) over the block, NaN-propagating (torch.amax), then clamp(min=1e-4) (NaN stays NaN);
//   sf    = amax / 448 (IEEE division), with UE8M0 rounded up to a power of two on its bit pattern (ceil_to_ue8m0);
//   value = x / sf (IEEE division; by a power of two it is the exact product with 1 / sf), clamped to +-448 and
//           rounded to e4m3 to nearest even (cvt.rn.satfinite: the clamp and the rounding in one instruction).
// No fast-math anywhere: the JIT compiles without --use_fast_math, and the divisions are spelled __fdiv_rn.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm::fp8_cast {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr float kAmaxClampMin = 1e-4f;  // (the reference's Python float 1e-4, rounded to FP32 by torch.clamp)

// max(a, b) that returns NaN when either is NaN, as torch.amax / torch.clamp do (fmaxf would drop the NaN).
__device__ __forceinline__ float max_nan(float a, float b) {
    float out;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(out) : "f"(a), "f"(b));
    return out;
}

// 2 ** ceil(log2(sf)) for sf > 0 on the bit pattern: a non-zero mantissa bumps the exponent; inf and NaN stay.
__device__ __forceinline__ float ceil_to_ue8m0(float sf) {
    const uint32_t bits = __float_as_uint(sf);
    if ((bits & 0x7f800000u) == 0x7f800000u)
        return sf;
    return __uint_as_float(((bits >> 23) + ((bits & 0x7fffffu) != 0)) << 23);
}

// The scale of a block from its amax (before the clamp), for a format whose largest value is kMax (448 for e4m3,
// 6 for e2m1).
template <bool kUe8m0, bool kFp4 = false>
__device__ __forceinline__ float scale_from_amax(float amax) {
    const float sf = __fdiv_rn(max_nan(amax, kAmaxClampMin), kFp4 ? kE2m1Max : kE4m3Max);
    return kUe8m0 ? ceil_to_ue8m0(sf) : sf;
}

// What the values of one block are divided by: the scale and its correctly rounded reciprocal, computed once.
struct Divisor {
    float sf, rcp;
    bool finite;
};

__device__ __forceinline__ Divisor divisor_of(float sf) {
    return {sf, __frcp_rn(sf), isfinite(sf)};
}

// x / sf, correctly rounded (the reference's IEEE division), without a division per value.
//   UE8M0 (sf a power of two): x * (1 / sf) rounds the exact quotient once, so it is the division bit for bit
//   (subnormal results included: nothing is flushed to zero here).
//   FP32 scales: Markstein's correction, as NVCC's own division sequence does it: with rcp = RN(1 / sf) and
//   q0 = RN(x * rcp), e = RN(x - q0 * sf) (one FMA) and RN(q0 + e * rcp) = RN(x / sf). Checked against IEEE division
//   on 400k float32 pairs of this recipe, most on e4m3 rounding midpoints: no difference (tests/test_quant_kernels.py
//   repeats it on a few thousand). The quotients
//   that decide an e4m3 byte are normal and at most ~448 here (|x| <= amax), so no intermediate overflows or
//   underflows (the cases NVCC's sequence leaves to a slow path). An exact quotient (e = 0) or one that underflowed
//   to zero (q0 = 0: an e4m3 zero either way) keeps q0, whose sign is x's (q0 + e * rcp could give +0 for -0).
//   sf = inf or NaN (an inf or NaN in the block): x * rcp (0 or NaN) is what x / inf and x / NaN give.
template <bool kUe8m0>
__device__ __forceinline__ float scaled(float x, const Divisor& d) {
    const float q0 = __fmul_rn(x, d.rcp);
    if constexpr (kUe8m0)
        return q0;
    // (one select, no branch: for a non-finite sf, e is NaN and q0 is kept)
    const float e = __fmaf_rn(-q0, d.sf, x);
    const float q = __fmaf_rn(e, d.rcp, q0);
    return e == 0.0f || q0 == 0.0f || !d.finite ? q0 : q;
}

// Two FP32 values to two e4m3 bytes (lo in the low byte), round to nearest even, saturating at +-448, NaN kept.
__device__ __forceinline__ uint32_t to_e4m3x2(float lo, float hi) {
    unsigned short out;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(out) : "f"(hi), "f"(lo));
    return out;
}

// Eight values to eight e4m3 bytes, element 0 in the lowest byte.
__device__ __forceinline__ uint2 to_e4m3x8(const float (&v)[8]) {
    return make_uint2(to_e4m3x2(v[0], v[1]) | (to_e4m3x2(v[2], v[3]) << 16),
                      to_e4m3x2(v[4], v[5]) | (to_e4m3x2(v[6], v[7]) << 16));
}

// The 4-bit e2m1 code of a scaled value, as deep_gemm.utils.fp4_casts rounds: the magnitude clamped at 6, rounded
// to the nearest of {0, 0.5, 1, 1.5, 2, 3, 4, 6} with ties to the even code index, bit 3 the sign (never for 0).
// NOTES: the index is the number of midpoints below the magnitude, or on a midpoint the even one of its two
// neighbours' indices: the reference's two bucketize searches.
__device__ __forceinline__ uint32_t to_e2m1(float value) {
    const float m = fminf(fabsf(value), kE2m1Max);
    constexpr float kMidpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    uint32_t below = 0, at_or_below = 0;
    #pragma unroll
    for (uint32_t i = 0; i < 7; ++i) {
        below += m > kMidpoints[i];
        at_or_below += m >= kMidpoints[i];
    }
    const uint32_t index = below % 2 == 0 ? below : at_or_below;
    return index | (value < 0.0f && index != 0 ? 0x8u : 0u);
}

// Eight values to eight e2m1 codes, two to a byte (element 2j in the low nibble of byte j).
__device__ __forceinline__ uint32_t to_e2m1x8(const float (&v)[8]) {
    uint32_t out = 0;
    #pragma unroll
    for (uint32_t i = 0; i < 8; ++i)
        out |= to_e2m1(v[i]) << (4 * i);
    return out;
}

// The UE8M0 byte of a power-of-two FP32 scale (its biased exponent), as pack_ue8m0_to_int stores it.
__device__ __forceinline__ uint8_t ue8m0_byte(float sf) {
    return static_cast<uint8_t>((__float_as_uint(sf) >> 23) & 0xffu);
}

// Eight input elements as FP32: BF16 (the FP32 of its bits, exact) or FP32.
template <bool kFp32Input>
__device__ __forceinline__ void load8(const void* ptr, float (&v)[8]) {
    if constexpr (kFp32Input) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(ptr));
        const float4 b = __ldg(reinterpret_cast<const float4*>(ptr) + 1);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        const uint4 raw = __ldg(reinterpret_cast<const uint4*>(ptr));
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        #pragma unroll
        for (uint32_t i = 0; i < 4; ++i) {
            v[2 * i] = __uint_as_float(words[i] << 16);
            v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
        }
    }
}

// Up to eight elements, bounds-checked one by one (zero past `count`), for unaligned rows and the ragged end of one.
template <bool kFp32Input>
__device__ __forceinline__ void load8_partial(const void* ptr, uint32_t count, float (&v)[8]) {
    #pragma unroll
    for (uint32_t i = 0; i < 8; ++i) {
        if constexpr (kFp32Input)
            v[i] = i < count ? __ldg(reinterpret_cast<const float*>(ptr) + i) : 0.0f;
        else
            v[i] = i < count ? __uint_as_float(static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(ptr) + i)) << 16)
                             : 0.0f;
    }
}

}  // namespace deep_gemm::fp8_cast
