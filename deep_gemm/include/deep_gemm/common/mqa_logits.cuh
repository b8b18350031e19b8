// Device helpers shared by the MQA-logits kernels (prefill: impls/sm90_fp8_mqa_logits.cuh, paged decode:
// impls/sm90_fp8_paged_mqa_logits.cuh): the head reduction of an m64nNk32 accumulator fragment in
// registers, the quad reduction that gathers a query's sum into one lane, the -inf row filler, the scoring
// wgmmas of one 64-key tile, and the e4m3 pieces that put the signed head sums on the tensor core.
//
// Fragment layout (wgmma m64nN, FP32): a thread holds N / 8 column groups of 4 values, group j =
// (row r, columns 8j + 2(lane % 4) + {0, 1}) then (row r + 8, the same columns), r = 16 warp + lane / 4.
// With N = Q x H (query-major, heads contiguous), group j belongs to query j / (H / 8).
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/sync.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

namespace deep_gemm::mqa {

// Tell the compiler the accumulators [kBegin, kEnd) of `accum` (default: all) are live across the asynchronous
// wgmmas: reads after this cannot move above it, nor writes below it.
template <uint32_t kBegin = 0, uint32_t kEnd = ~0u, uint32_t kNumAccum>
__device__ __forceinline__ void fence_accum(float (&accum)[kNumAccum]) {
    #pragma unroll
    for (uint32_t i = kBegin; i < (kEnd < kNumAccum ? kEnd : kNumAccum); ++i)
        ptx::wgmma_fence_operand(accum[i]);
}

// accum[0, Wgmma::kNumAccum) = kv tile (64 keys x D, descriptor desc_kv) . B tile (N x D, desc_b)^T over the
// kNumKSteps k32 steps of D
template <typename Wgmma, uint32_t kNumKSteps>
__device__ __forceinline__ void mma_k_steps(uint64_t desc_kv, uint64_t desc_b, float* accum) {
    #pragma unroll
    for (uint32_t k = 0; k < kNumKSteps; ++k)
        Wgmma::mma(ptx::advance_smem_desc(desc_kv, k * 32), ptx::advance_smem_desc(desc_b, k * 32), accum, k > 0);
}

// accum = kv tile . Q tile (desc_q)^T: issued and committed (the fences keep the compiler from touching accum
// while wgmma owns it) ...
template <typename Wgmma, uint32_t kNumKSteps, uint32_t kNumAccum>
__device__ __forceinline__ void score_tile_issue(uint64_t desc_kv, uint64_t desc_q, float (&accum)[kNumAccum]) {
    fence_accum(accum);
    ptx::wgmma_fence();
    mma_k_steps<Wgmma, kNumKSteps>(desc_kv, desc_q, accum);
    ptx::wgmma_commit();
    fence_accum(accum);
}

// ... and waited for (accum readable after this)
template <uint32_t kNumAccum>
__device__ __forceinline__ void score_tile_wait(float (&accum)[kNumAccum]) {
    ptx::wgmma_wait<0>();
    fence_accum(accum);
}

// The reductions below cover the queries [kQueryBegin, kQueryEnd) of the fragment (default: all), so that a split
// tile can reduce the half whose wgmmas completed while the other half's still run.

// sums[q][h] = sum over this thread's columns of query q of relu(x) w (kScaleInside: relu(x scale[h]) w), relu
// as FMNMX: the kReluByAbs = false form of weighted_relu_sums below.
template <uint32_t kNumQueries, uint32_t kNumHeads, bool kScaleInside, uint32_t kQueryBegin, uint32_t kQueryEnd,
          uint32_t kNumAccum>
__device__ __forceinline__ void relu_sums_by_max(const float (&accum)[kNumAccum],
                                                 const float2 (&weight)[kNumQueries * kNumHeads / 8],
                                                 const float (&scale)[2], float (&sums)[kNumQueries][2]) {
    constexpr uint32_t kGroupsPerQuery = kNumHeads / 8;
    #pragma unroll
    for (uint32_t q = kQueryBegin; q < kQueryEnd; ++q) {
        float sum[2] = {0.0f, 0.0f};
        #pragma unroll
        for (uint32_t g = 0; g < kGroupsPerQuery; ++g) {
            const uint32_t j = q * kGroupsPerQuery + g;
            #pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {
                const float x = kScaleInside ? accum[j * 4 + e] * scale[e / 2] : accum[j * 4 + e];
                sum[e / 2] = fmaf(fmaxf(x, 0.0f), e % 2 == 0 ? weight[j].x : weight[j].y, sum[e / 2]);
            }
        }
        sums[q][0] = sum[0], sums[q][1] = sum[1];
    }
}

// Over this thread's columns of query q and its key row h (0: r, 1: r + 8): abs_sum[q][h] = sum |x| w (one FFMA
// per x, |x| an operand modifier) and, with kSigned, signed_sum[q][h] = sum x w (a second FFMA per x).
template <uint32_t kNumQueries, uint32_t kNumHeads, bool kSigned, uint32_t kQueryBegin = 0,
          uint32_t kQueryEnd = kNumQueries, uint32_t kNumAccum>
__device__ __forceinline__ void head_sums(const float (&accum)[kNumAccum],
                                          const float2 (&weight)[kNumQueries * kNumHeads / 8],
                                          float (&signed_sum)[kNumQueries][2], float (&abs_sum)[kNumQueries][2]) {
    static_assert(kNumAccum >= kNumQueries * kNumHeads / 2, "accumulator fragment too small");
    static_assert(kQueryBegin < kQueryEnd && kQueryEnd <= kNumQueries, "a query range of the fragment");
    constexpr uint32_t kGroupsPerQuery = kNumHeads / 8;
    #pragma unroll
    for (uint32_t q = kQueryBegin; q < kQueryEnd; ++q) {
        signed_sum[q][0] = signed_sum[q][1] = abs_sum[q][0] = abs_sum[q][1] = 0.0f;
        #pragma unroll
        for (uint32_t g = 0; g < kGroupsPerQuery; ++g) {
            const uint32_t j = q * kGroupsPerQuery + g;
            #pragma unroll
            for (uint32_t e = 0; e < 4; ++e) {  // x e of group j: key row e / 2, weight .x for even e, .y for odd
                const float w = e % 2 == 0 ? weight[j].x : weight[j].y;
                if constexpr (kSigned)
                    signed_sum[q][e / 2] = fmaf(accum[j * 4 + e], w, signed_sum[q][e / 2]);
                abs_sum[q][e / 2] = fmaf(fabsf(accum[j * 4 + e]), w, abs_sum[q][e / 2]);
            }
        }
    }
}

// sum_h relu(x_h s) w_h = (s sum x w + |s| sum |x| w) / 2, since relu(y) = (y + |y|) / 2 and |x s| = |x| |s|. Both
// products are rounded before the add: where the two sums are exact negatives or copies of each other (every x
// of the row has one sign, both sums from the same FFMAs) the result is exactly 0 or exactly s sum x w.
__device__ __forceinline__ float relu_from_sums(float scale, float signed_sum, float abs_sum) {
    const float half = 0.5f * scale;
    return __fadd_rn(__fmul_rn(half, signed_sum), __fmul_rn(fabsf(half), abs_sum));
}

// sums[q][h] = sum over this thread's columns of query q of relu(x s_h) w, for its two key rows h = 0 (r, s_0 =
// scale_0) and 1 (r + 8, s_1 = scale_1); exact in real arithmetic for kv scales of any sign, in one of two forms:
// - kReluByAbs = false: relu as FMNMX (the ALU pipe, half rate) then an FFMA per x; s folded out of the relu
//   (s relu(x) = relu(x s) for s >= 0) when every scale of the warp is >= 0, else applied inside (a warp-uniform
//   branch, so every lane must call this).
// - kReluByAbs = true: (s sum x w + |s| sum |x| w) / 2, since relu(y) = (y + |y|) / 2 and |x s| = |x| |s|: two
//   FFMAs per x (|x| is an FFMA operand modifier), no branch. The two sums cancel where most x are negative: the
//   rounding error is a few ulp of sum |x w| instead of sum relu(x) |w|, far below what the FP8 inputs cost; a
//   row whose x all share one sign comes out as with relu (0 for all negative, bit for bit). Measured (H200, A/B
//   timed alongside): 6 % faster in the paged kernel at next_n = 1, 3-6 % slower at next_n = 2 and 7 % slower in
//   the prefill kernel with ping-pong, where the reduction overlaps the other warpgroup's wgmmas.
template <uint32_t kNumQueries, uint32_t kNumHeads, bool kReluByAbs, uint32_t kQueryBegin = 0,
          uint32_t kQueryEnd = kNumQueries, uint32_t kNumAccum>
__device__ __forceinline__ void weighted_relu_sums(const float (&accum)[kNumAccum],
                                                   const float2 (&weight)[kNumQueries * kNumHeads / 8], float scale_0,
                                                   float scale_1, float (&sums)[kNumQueries][2]) {
    static_assert(kNumAccum >= kNumQueries * kNumHeads / 2, "accumulator fragment too small");
    const float scale[2] = {scale_0, scale_1};
    if constexpr (kReluByAbs) {
        float signed_sum[kNumQueries][2], abs_sum[kNumQueries][2];
        head_sums<kNumQueries, kNumHeads, true, kQueryBegin, kQueryEnd>(accum, weight, signed_sum, abs_sum);
        #pragma unroll
        for (uint32_t q = kQueryBegin; q < kQueryEnd; ++q)
            sums[q][0] = relu_from_sums(scale_0, signed_sum[q][0], abs_sum[q][0]),
            sums[q][1] = relu_from_sums(scale_1, signed_sum[q][1], abs_sum[q][1]);
    } else {
        // Two loop bodies behind a warp-uniform branch (not a select per x)
        if (__all_sync(0xffffffff, scale_0 >= 0.0f && scale_1 >= 0.0f)) {
            relu_sums_by_max<kNumQueries, kNumHeads, false, kQueryBegin, kQueryEnd>(accum, weight, scale, sums);
            #pragma unroll
            for (uint32_t q = kQueryBegin; q < kQueryEnd; ++q)
                sums[q][0] *= scale_0, sums[q][1] *= scale_1;
        } else {
            relu_sums_by_max<kNumQueries, kNumHeads, true, kQueryBegin, kQueryEnd>(accum, weight, scale, sums);
        }
    }
}

// The signed head sums on the tensor core (the prefill kernel's kSignedSumByWgmma form). sum_h x_h w_h for key j and
// query i is kv_j . u_i with u_i = sum_h w[i, h] q[i, h, :], so extra B rows holding u_i turn the half of
// relu_from_sums that needs a second FFMA per accumulator into a few small wgmmas per tile. B is e4m3, so u_i is
// split into kNumPieces rows with power-of-2 scales, u ~= sum_p scale_p piece_p: piece p rounds the residual left
// by the pieces before it to e4m3 after scaling its maximum into [128, 256), i.e. to 4 significant bits of that
// maximum (finer for subnormal-range values), so each piece divides the largest residual by ~2^4 and four leave
// ~2^-16 max|u| per element, far below the FP8 inputs' own error. The wgmma accumulates each piece in FP32.
template <uint32_t kHeadDim>
struct SignedSumPieces {
    static constexpr uint32_t kNumPieces = 4;
    static constexpr uint32_t kPerLane = kHeadDim / 32;  // one warp holds one query's u, kPerLane consecutive d per lane

    // The B row (wgmma column) of piece p of query q (of a math warpgroup's queries). After the quad reduce-scatter
    // lane l holds queries 4m + l % 4, and column 8j + 2(l % 4) + e (e = 0, 1) lands in lane l's accumulator group j:
    // query 4m + l at columns 8(2m + p / 2) + 2l + p % 2 puts all its pieces in that lane (groups 2m and 2m + 1).
    __device__ __forceinline__ static constexpr uint32_t row(uint32_t q, uint32_t p) {
        return 8 * (2 * (q / 4) + p / 2) + 2 * (q % 4) + p % 2;
    }
    // The accumulator of piece p, for query 4m + lane % 4 and key row h (0: r, 1: r + 8)
    __device__ __forceinline__ static constexpr uint32_t accum_index(uint32_t m, uint32_t p, uint32_t h) {
        return (2 * m + p / 2) * 4 + 2 * h + p % 2;
    }

    // u += weight * this lane's kPerLane e4m3 values of one q row, packed in `word` (the first d in the low byte):
    // the step of u = sum_h w[h] q[h, :], head by head in FP32
    template <typename Word>
    __device__ __forceinline__ static void add_weighted(float (&u)[kPerLane], Word word, float weight) {
        #pragma unroll
        for (uint32_t i = 0; i < kPerLane; i += 2) {
            const float2 x = ptx::unpack_e4m3x2(static_cast<uint16_t>(word >> (8 * i)));
            u[i] = fmaf(weight, x.x, u[i]), u[i + 1] = fmaf(weight, x.y, u[i + 1]);
        }
    }

    // Split u (this lane's kPerLane values of the warp's query; consumed) into words[p] (kPerLane e4m3 bytes, the
    // first d in the low byte) and scale[p] (warp-uniform). A residual below 2^-119 becomes zero pieces.
    __device__ __forceinline__ static void split(float (&u)[kPerLane], uint32_t (&words)[kNumPieces],
                                                 float (&scale)[kNumPieces]) {
        static_assert(kPerLane % 2 == 0, "pairs of e4m3");
        #pragma unroll
        for (uint32_t p = 0; p < kNumPieces; ++p) {
            float amax = 0.0f;
            #pragma unroll
            for (uint32_t i = 0; i < kPerLane; ++i)
                amax = fmaxf(amax, fabsf(u[i]));
            // Non-negative floats order as their bits; the biased exponent E + 127 of the warp's maximum
            const uint32_t amax_bits = __reduce_max_sync(0xffffffff, __float_as_uint(amax));
            const uint32_t exponent = amax_bits >> 23;
            words[p] = 0;
            if (exponent < 8 || exponent > 254) {  // (nearly) zero: no piece; inf / NaN: carried by the scale
                scale[p] = exponent > 254 ? __uint_as_float(amax_bits) : 0.0f;
                continue;
            }
            scale[p] = __uint_as_float((exponent - 7) << 23);            // 2^(E - 7): |u| / scale < 256 <= 448
            const float inverse = __uint_as_float((261 - exponent) << 23);  // 2^(7 - E), exact
            #pragma unroll
            for (uint32_t i = 0; i < kPerLane; i += 2) {
                const uint16_t pair = ptx::pack_e4m3x2(u[i] * inverse, u[i + 1] * inverse);
                const float2 rounded = ptx::unpack_e4m3x2(pair);
                u[i] -= rounded.x * scale[p], u[i + 1] -= rounded.y * scale[p];
                words[p] |= static_cast<uint32_t>(pair) << (8 * i);
            }
        }
    }
};

// One round over lane bit `kMask` (1 or 2) of a quad: with an even count, a reduce-scatter (the lane keeps
// the queries of its bit's parity, half of them, summed with its partner's); with one query, an all-reduce.
template <uint32_t kMask, uint32_t kCount>
__device__ __forceinline__ void quad_round(const float (&in)[kCount][2], float (&out)[kCount > 1 ? kCount / 2 : 1][2],
                                           uint32_t lane) {
    if constexpr (kCount == 1) {
        #pragma unroll
        for (uint32_t h = 0; h < 2; ++h)
            out[0][h] = in[0][h] + __shfl_xor_sync(0xffffffff, in[0][h], kMask);
    } else {
        static_assert(kCount % 2 == 0, "an even number of queries per round");
        const bool bit = lane & kMask;
        #pragma unroll
        for (uint32_t p = 0; p < kCount / 2; ++p) {
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const float keep = bit ? in[2 * p + 1][h] : in[2 * p][h];
                const float send = bit ? in[2 * p][h] : in[2 * p + 1][h];
                out[p][h] = keep + __shfl_xor_sync(0xffffffff, send, kMask);
            }
        }
    }
}

// The quad's sums of every query: lane l then holds in out[m] query 4m + l % 4 (kNumQueries >= 4), or query
// l % kNumQueries (kNumQueries = 1, 2: lanes past the count hold copies), for its two key rows.
template <uint32_t kNumQueries>
struct QuadReduce {
    static constexpr uint32_t kAfterFirst = kNumQueries > 1 ? kNumQueries / 2 : 1;
    static constexpr uint32_t kPerLane = kAfterFirst > 1 ? kAfterFirst / 2 : 1;
    __device__ __forceinline__ static void run(const float (&sums)[kNumQueries][2], float (&out)[kPerLane][2],
                                               uint32_t lane) {
        float half[kAfterFirst][2];
        quad_round<1, kNumQueries>(sums, half, lane);
        quad_round<2, kAfterFirst>(half, out, lane);
    }
    // The query (of the kNumQueries) that out[m] of this lane holds, and whether this lane stores it
    __device__ __forceinline__ static uint32_t query(uint32_t m, uint32_t lane) {
        return kNumQueries >= 4 ? 4 * m + lane % 4 : lane % 4 % kNumQueries;
    }
    __device__ __forceinline__ static bool stores(uint32_t lane) { return lane % 4 < kNumQueries; }
};

// -inf into [begin, end) of one output row by kNumThreads threads (tid in [0, kNumThreads)): a scalar head up to
// 16-byte alignment, 16-byte stores, a scalar tail. OutBits: uint32_t (FP32) or uint16_t (BF16).
template <typename OutBits, uint32_t kNumThreads>
__device__ __forceinline__ void fill_neg_inf(OutBits* row, uint32_t begin, uint32_t end, uint32_t tid) {
    if (begin >= end)
        return;
    constexpr uint32_t kPerVector = 16 / sizeof(OutBits);
    constexpr uint32_t kNegInfWord = sizeof(OutBits) == 2 ? 0xff80ff80u : 0xff800000u;
    constexpr OutBits kNegInf = static_cast<OutBits>(kNegInfWord);
    OutBits* ptr = row + begin;
    const uint32_t count = end - begin;
    const uint32_t misaligned = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ptr) % 16) / sizeof(OutBits);
    const uint32_t head = min(count, misaligned == 0 ? 0u : kPerVector - misaligned);
    if (tid < head)
        ptr[tid] = kNegInf;
    const uint32_t num_vectors = (count - head) / kPerVector;
    uint4* vectors = reinterpret_cast<uint4*>(ptr + head);
    const uint4 pattern = {kNegInfWord, kNegInfWord, kNegInfWord, kNegInfWord};
    #pragma unroll 1
    for (uint32_t i = tid; i < num_vectors; i += kNumThreads)
        vectors[i] = pattern;
    const uint32_t tail = head + num_vectors * kPerVector;
    if (tail + tid < count)
        ptr[tail + tid] = kNegInf;
}

}  // namespace deep_gemm::mqa
