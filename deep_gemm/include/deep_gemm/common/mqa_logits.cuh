// Device helpers shared by the MQA-logits kernels (prefill: impls/sm90_fp8_mqa_logits.cuh, paged decode:
// impls/sm90_fp8_paged_mqa_logits.cuh): the head reduction of an m64nNk32 accumulator fragment in
// registers, the quad reduction that gathers a query's sum into one lane, the -inf row filler, and the
// scoring wgmmas of one 64-key tile.
//
// Fragment layout (wgmma m64nN, FP32): a thread holds N / 8 column groups of 4 values, group j =
// (row r, columns 8j + 2(lane % 4) + {0, 1}) then (row r + 8, the same columns), r = 16 warp + lane / 4.
// With N = Q x H (query-major, heads contiguous), group j belongs to query j / (H / 8).
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

namespace deep_gemm::mqa {

// accum = kv tile (64 keys x D, descriptor desc_kv) . Q tile (N x D, desc_q)^T over the kNumKSteps k32 steps
// of D: issued and committed (the fences keep the compiler from touching accum while wgmma owns it) ...
template <typename Wgmma, uint32_t kNumKSteps, uint32_t kNumAccum>
__device__ __forceinline__ void score_tile_issue(uint64_t desc_kv, uint64_t desc_q, float (&accum)[kNumAccum]) {
    #pragma unroll
    for (uint32_t i = 0; i < kNumAccum; ++i)
        ptx::wgmma_fence_operand(accum[i]);
    ptx::wgmma_fence();
    #pragma unroll
    for (uint32_t k = 0; k < kNumKSteps; ++k)
        Wgmma::mma(ptx::advance_smem_desc(desc_kv, k * 32), ptx::advance_smem_desc(desc_q, k * 32), accum, k > 0);
    ptx::wgmma_commit();
    #pragma unroll
    for (uint32_t i = 0; i < kNumAccum; ++i)
        ptx::wgmma_fence_operand(accum[i]);
}

// ... and waited for (accum readable after this)
template <uint32_t kNumAccum>
__device__ __forceinline__ void score_tile_wait(float (&accum)[kNumAccum]) {
    ptx::wgmma_wait<0>();
    #pragma unroll
    for (uint32_t i = 0; i < kNumAccum; ++i)
        ptx::wgmma_fence_operand(accum[i]);
}

// sums[q][h] = sum over this thread's columns of query q of relu(x) w (kScaleInside: relu(x scale[h]) w), relu
// as FMNMX: the kReluByAbs = false form of weighted_relu_sums below.
template <uint32_t kNumQueries, uint32_t kNumHeads, bool kScaleInside, uint32_t kNumAccum>
__device__ __forceinline__ void relu_sums_by_max(const float (&accum)[kNumAccum],
                                                 const float2 (&weight)[kNumQueries * kNumHeads / 8],
                                                 const float (&scale)[2], float (&sums)[kNumQueries][2]) {
    constexpr uint32_t kGroupsPerQuery = kNumHeads / 8;
    #pragma unroll
    for (uint32_t q = 0; q < kNumQueries; ++q) {
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

// sums[q][h] = sum over this thread's columns of query q of relu(x s_h) w, for its two key rows h = 0 (r, s_0 =
// scale_0) and 1 (r + 8, s_1 = scale_1); exact in real arithmetic for kv scales of any sign, in one of two forms:
// - kReluByAbs = false: relu as FMNMX (the ALU pipe, half rate) then an FFMA per x; s folded out of the relu
//   (s relu(x) = relu(x s) for s >= 0) when every scale of the warp is >= 0, else applied inside (a warp-uniform
//   branch, so every lane must call this).
// - kReluByAbs = true: (s sum x w + |s| sum |x| w) / 2, since relu(y) = (y + |y|) / 2 and |x s| = |x| |s|: two
//   FFMAs per x (|x| is an FFMA operand modifier), no branch. The two sums cancel where most x are negative: the
//   rounding error is a few ulp of sum |x w| instead of sum relu(x) |w|, far below what the FP8 inputs cost; a
//   row whose x all share one sign comes out as with relu (0 for all negative, bit for bit). Measured (runs 27,
//   28): 6 % faster in the paged kernel at next_n = 1, 3-6 % slower at next_n = 2 and 7 % slower in the
//   prefill kernel with ping-pong, where the reduction overlaps the other warpgroup's wgmmas.
template <uint32_t kNumQueries, uint32_t kNumHeads, bool kReluByAbs, uint32_t kNumAccum>
__device__ __forceinline__ void weighted_relu_sums(const float (&accum)[kNumAccum],
                                                   const float2 (&weight)[kNumQueries * kNumHeads / 8], float scale_0,
                                                   float scale_1, float (&sums)[kNumQueries][2]) {
    static_assert(kNumAccum >= kNumQueries * kNumHeads / 2, "accumulator fragment too small");
    const float scale[2] = {scale_0, scale_1};
    if constexpr (kReluByAbs) {
        constexpr uint32_t kGroupsPerQuery = kNumHeads / 8;
        // x e of group j: key row e / 2, weight .x for even e, .y for odd
        const auto weight_of = [&](uint32_t j, uint32_t e) { return e % 2 == 0 ? weight[j].x : weight[j].y; };
        #pragma unroll
        for (uint32_t q = 0; q < kNumQueries; ++q) {
            float signed_sum[2] = {0.0f, 0.0f}, abs_sum[2] = {0.0f, 0.0f};  // sum x w, sum |x| w per key row
            #pragma unroll
            for (uint32_t g = 0; g < kGroupsPerQuery; ++g) {
                const uint32_t j = q * kGroupsPerQuery + g;
                #pragma unroll
                for (uint32_t e = 0; e < 4; ++e) {
                    signed_sum[e / 2] = fmaf(accum[j * 4 + e], weight_of(j, e), signed_sum[e / 2]);
                    abs_sum[e / 2] = fmaf(fabsf(accum[j * 4 + e]), weight_of(j, e), abs_sum[e / 2]);
                }
            }
            // (Both products rounded before the add: where every x of a row has one sign the two sums are exact
            // negatives or copies of each other, so the result is exactly 0 or exactly s sum x w)
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const float half = 0.5f * scale[h];
                sums[q][h] = __fadd_rn(__fmul_rn(half, signed_sum[h]), __fmul_rn(fabsf(half), abs_sum[h]));
            }
        }
    } else {
        // Two loop bodies behind a warp-uniform branch (not a select per x)
        if (__all_sync(0xffffffff, scale_0 >= 0.0f && scale_1 >= 0.0f)) {
            relu_sums_by_max<kNumQueries, kNumHeads, false>(accum, weight, scale, sums);
            #pragma unroll
            for (uint32_t q = 0; q < kNumQueries; ++q)
                sums[q][0] *= scale_0, sums[q][1] *= scale_1;
        } else {
            relu_sums_by_max<kNumQueries, kNumHeads, true>(accum, weight, scale, sums);
        }
    }
}

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
