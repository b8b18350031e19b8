// One GEMM tile's FP32 partial sums, computed by several CTAs over consecutive K ranges, brought together in a
// fixed order (deterministic: the sum does not depend on timing), inside one kernel:
//   StreamKExchange: through a global workspace and a per-tile flag (stream-K: any CTAs of the grid);
//   SplitKExchange:  through distributed shared memory (split-K: the CTAs of one cluster).
// Both run on the math threads (kNumMathThreads, warpgroups of 128) with their accumulators as wgmma fragments
// (common/accum_fragment.cuh), and synchronize them on named barrier kExchangeBarrierId.
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/cluster.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>
#include <deep_gemm/ptx/sync.cuh>
#include <deep_gemm/scheduler/gemm_scheduler.cuh>

namespace deep_gemm {

// Named barrier of the math threads for either exchange (0 is __syncthreads, 1 .. 3 the math warpgroups' own).
constexpr uint32_t kExchangeBarrierId = 8;

// A contribution: every math thread stores its accumulators float4 by float4 into its CTA's slot (float4 q of
// thread t at [q][t]: a warp stores 512 contiguous bytes), bypassing L1; once all have (the math threads'
// barrier), one thread publishes them: a GPU-scope fence, then the tile's count + 1 (the pattern of a grid
// barrier). The owner's first math thread waits until the count shows every contribution, resets it to 0
// (nothing else touches it in this launch, so the next one finds it zero), and after the barrier every thread
// adds the slots to its accumulators in K order (the CTAs after the owner, one by one): the sum does not
// depend on timing. Contributors never wait, and every CTA of the grid is resident (one per SM, at most
// #SMs), so the owner's wait ends. A slot is kTileElems floats (BLOCK_M x BLOCK_N).
template <uint32_t kTileElems, uint32_t kNumWgmmaM, uint32_t kNumAccum, uint32_t kNumMathThreads>
struct StreamKExchange {
    using Accum = float[kNumWgmmaM][kNumAccum];
    static constexpr uint32_t kAccumPerThread = kNumWgmmaM * kNumAccum;
    static_assert(kNumAccum % 4 == 0, "a float4 of accumulators lies in one wgmma row block");

    __device__ __forceinline__ static float4* slot(const StreamKParams& stream_k, uint32_t cta) {
        return reinterpret_cast<float4*>(stream_k.partials + static_cast<uint64_t>(cta) * kTileElems);
    }

    __device__ __forceinline__ static void contribute(const StreamKParams& stream_k, Accum& accum,
                                                      uint32_t stream_k_tile) {
        const uint32_t thread = threadIdx.x;  // (a math thread)
        float4* own = slot(stream_k, blockIdx.x);
        #pragma unroll
        for (uint32_t q = 0; q < kAccumPerThread / 4; ++q) {
            const float* v = &accum[q * 4 / kNumAccum][q * 4 % kNumAccum];
            __stcg(own + q * kNumMathThreads + thread, make_float4(v[0], v[1], v[2], v[3]));
        }
        ptx::named_barrier_sync(kExchangeBarrierId, kNumMathThreads);
        if (thread == 0) {
            ptx::fence_acq_rel_gpu();
            ptx::red_add_relaxed_gpu(stream_k.flags + stream_k_tile, 1);
        }
    }

    __device__ __forceinline__ static void add_contributions(const StreamKParams& stream_k, Accum& accum,
                                                             uint32_t stream_k_tile, uint32_t num_contributors) {
        const uint32_t thread = threadIdx.x;
        if (thread == 0) {
            uint32_t* flag = stream_k.flags + stream_k_tile;
            while (ptx::ld_acquire_gpu(flag) != num_contributors)
                __nanosleep(32);
            ptx::st_relaxed_gpu(flag, 0);
        }
        ptx::named_barrier_sync(kExchangeBarrierId, kNumMathThreads);
        // (loads in batches of kBatch float4s, all in flight before their adds: few registers beyond the
        // accumulators, which three math warpgroups' 128 registers per thread leave no room for)
        // (the last batch may be short: BLOCK_N = 176 gives 22 float4s per thread)
        constexpr uint32_t kBatch = 4, kNumQuads = kAccumPerThread / 4;
        #pragma unroll 1
        for (uint32_t j = 1; j <= num_contributors; ++j) {
            const float4* other = slot(stream_k, blockIdx.x + j);
            #pragma unroll
            for (uint32_t q0 = 0; q0 < kNumQuads; q0 += kBatch) {
                float4 parts[kBatch];
                #pragma unroll
                for (uint32_t i = 0; i < kBatch; ++i)
                    if (q0 + i < kNumQuads)
                        parts[i] = __ldcg(other + (q0 + i) * kNumMathThreads + thread);
                #pragma unroll
                for (uint32_t i = 0; i < kBatch; ++i) {
                    if (q0 + i < kNumQuads) {
                        float* v = &accum[(q0 + i) * 4 / kNumAccum][(q0 + i) * 4 % kNumAccum];
                        v[0] += parts[i].x, v[1] += parts[i].y, v[2] += parts[i].z, v[3] += parts[i].w;
                    }
                }
            }
        }
    }
};

// The kNumSplits CTAs of a cluster (cluster rank = the tile's split) computed one tile over consecutive K ranges.
// Every math thread holds the same fragment pairs p of the tile in each of them; pair p is reduced by CTA
// p % kNumSplits. Each CTA stores its pairs straight into their owners' slots (remote stores into distributed
// shared memory: nothing waits on their latency), then every owner adds its pairs' kNumSplits slots in split
// order into its accumulators and frees its slots; the caller then stores the pairs it owns (every other
// accumulator of this CTA is stale). Per tile, in each CTA: `split_full` completes when all kNumSplits CTAs have
// stored their pairs into it (one arrival each, after a cluster-scope fence), `split_free` when all owners have
// read the pairs this CTA sent them (the next tile's stores wait for it). Both barriers count kNumSplits arrivals.
template <uint32_t kNumSplits, uint32_t kNumWgmmaM, uint32_t kNumAccum, uint32_t kNumMathThreads>
struct SplitKExchange {
    using Accum = float[kNumWgmmaM][kNumAccum];
    static constexpr uint32_t kNumPairs = kNumWgmmaM * kNumAccum / 2;
    static constexpr uint32_t kPairsPerOwner = ceil_div(kNumPairs, kNumSplits);
    // The slots of the pairs one CTA reduces: [kNumSplits][kPairsPerOwner][kNumMathThreads] float2
    static constexpr uint32_t kSlotBytes = kNumSplits * kPairsPerOwner * kNumMathThreads * 8;
    static_assert(kNumSplits >= 1 && kNumSplits <= 8, "a split-K cluster holds at most 8 CTAs");

    __device__ __forceinline__ static void reduce(float2* slots, uint64_t* split_full, uint64_t* split_free,
                                                  Accum& accum, uint32_t split, uint32_t tile_count) {
        constexpr uint32_t kPairsPerRowBlock = kNumAccum / 2;
        const uint32_t thread = threadIdx.x;  // (a math thread: 0 .. kNumMathThreads - 1)
        if (tile_count > 0)
            ptx::mbarrier_wait_cluster(split_free, (tile_count - 1) & 1);
        const uint32_t slots_addr = ptx::smem_addr(slots);
        #pragma unroll
        for (uint32_t p = 0; p < kNumPairs; ++p) {
            const uint32_t slot = (split * kPairsPerOwner + p / kNumSplits) * kNumMathThreads + thread;
            ptx::st_cluster_v2(ptx::map_to_cta(slots_addr + slot * 8, p % kNumSplits),
                               accum[p / kPairsPerRowBlock][(p % kPairsPerRowBlock) * 2],
                               accum[p / kPairsPerRowBlock][(p % kPairsPerRowBlock) * 2 + 1]);
        }
        ptx::fence_acq_rel_cluster();
        ptx::named_barrier_sync(kExchangeBarrierId, kNumMathThreads);
        if (thread < kNumSplits)
            ptx::mbarrier_arrive_cluster(split_full, thread);
        ptx::mbarrier_wait_cluster(split_full, tile_count & 1);

        // This CTA's pairs p = split + kNumSplits * j: the sum of their slots replaces their accumulators
        #pragma unroll
        for (uint32_t p = 0; p < kNumPairs; ++p) {
            if (p % kNumSplits != split)
                continue;
            const uint32_t j = p / kNumSplits;
            float2 sum = slots[j * kNumMathThreads + thread];
            #pragma unroll
            for (uint32_t q = 1; q < kNumSplits; ++q) {
                const float2 v = slots[(q * kPairsPerOwner + j) * kNumMathThreads + thread];
                sum.x += v.x, sum.y += v.y;
            }
            accum[p / kPairsPerRowBlock][(p % kPairsPerRowBlock) * 2] = sum.x;
            accum[p / kPairsPerRowBlock][(p % kPairsPerRowBlock) * 2 + 1] = sum.y;
        }
        // This CTA's slots are read: each sender may overwrite its slot with the next tile's pairs
        ptx::named_barrier_sync(kExchangeBarrierId, kNumMathThreads);
        if (thread < kNumSplits) {
            ptx::fence_acq_rel_cluster();
            ptx::mbarrier_arrive_cluster(split_free, thread);
        }
    }
};

}  // namespace deep_gemm
