// The SM schedule of the paged decode MQA logits (any SM >= 90): get_paged_mqa_logits_metadata for CUDA tensors, in
// one launch of one CTA. Work is counted in kv blocks: request b has units_b = ceil(max(len_b, 0) / block_kv) of them,
// len_b = context_lens[b], or the largest of context_lens[b, :] when it is [B, next_n]. Of the U = q * num_sms + r
// units in all, SM i's share starts at unit start_i = i * q + min(i, r), and row i of the int32 [num_sms + 1, 2]
// output is (the request holding unit start_i, start_i's kv block within that request), or (B, 0) when start_i == U
// (always for row num_sms). Requests without units hold no unit, so no row names them.
//
// Pipeline (kNumThreads threads): the requests are cut into tiles of kNumThreads * kItems; in a tile, thread t owns the
// kItems consecutive requests from t * kItems and holds their unit counts in registers (kItems independent loads per
// next_n column). Per tile, a block-wide exclusive scan of the per-thread sums (warp shuffles, then the warp totals
// through shared memory) gives each thread its first unit.
//   pass 0 (more than one tile only): the tile totals add up to U, hence q and r;
//   pass 1: each thread writes its requests' inclusive unit prefixes into shared memory (with one tile, U, q and r
//           come from this tile's scan); then each row i (thread i % kNumThreads) whose start_i falls in the tile
//           binary-searches them for the first request whose prefix passes start_i: (that request, start_i minus
//           its exclusive prefix) — what searchsorted(right=True) gives on the CPU path;
//   tail:   the rows with start_i == U (row num_sms at least) are (B, 0).
// Every row is written exactly once, with one 8-byte store; no atomics; unit counts and prefixes are 64-bit, the
// divisions (by num_sms once, by block_kv a shift when it is a power of two) are the only ones.
// Why this shape (ncu, B = 64, cold caches): the first version placed the rows per request, two 32-bit
// divisions per request by the share sizes, and divided each length by block_kv: ~1000 instructions per warp at 8
// cycles each, 7.6 us on one SM; a row's search is ~log2(B) shared-memory loads, with nothing per request but the
// load and the scan (~440 instructions per warp, 3.9 us under ncu, 5.4-5.9 us in the bench). The host picks
// the CTA: 128 threads x 2 requests (one warp per scheduler) up to B = 256, 512 x 8 beyond (H200: the 512-thread
// CTA took 3.0 us on the device for B = 64, a 1-element fill 0.77 us; the 128-thread one 2.4-2.7 us up to B = 256,
// where a 1-element kernel that reads cold memory and writes takes 1.27 us).
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

// start_i = i * q + min(i, r): the first unit of SM i's share (U for i = num_sms).
__device__ __forceinline__ uint64_t schedule_share_start(uint32_t i, uint64_t q, uint32_t r) {
    return static_cast<uint64_t>(i) * q + min(i, r);
}

// context_lens: int32 [batch, next_n] with element strides stride_b, stride_t (next_n = 1 and any stride_t for a
// 1-D [batch]); schedule: int32 [num_sms + 1, 2], contiguous (8-byte aligned). batch < 2^31, block_kv > 0.
template <uint32_t kNumThreads, uint32_t kItems>
__global__ void __launch_bounds__(kNumThreads, 1)
paged_mqa_schedule_kernel(const int32_t* __restrict__ context_lens, int64_t stride_b, int64_t stride_t, uint32_t batch,
                          uint32_t next_n, uint32_t block_kv, uint32_t num_sms, int32_t* __restrict__ schedule) {
    static_assert(kNumThreads % 32 == 0 && kNumThreads <= 1024, "whole warps, one CTA");
    constexpr uint32_t kNumWarps = kNumThreads / 32, kTile = kNumThreads * kItems;
    __shared__ uint64_t prefix[kTile];              // pass 1: inclusive unit prefixes of the tile's requests
    __shared__ uint64_t warp_totals[2][kNumWarps];  // the scans' warp totals, double-buffered (one barrier a scan)

    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t num_tiles = (batch + kTile - 1) / kTile;
    const bool pow2_block = (block_kv & (block_kv - 1)) == 0;
    const uint32_t block_shift = __ffs(block_kv) - 1;
    const auto write_row = [&](uint32_t i, uint32_t request, uint64_t block) {
        reinterpret_cast<int2*>(schedule)[i] = make_int2(static_cast<int32_t>(request), static_cast<int32_t>(block));
    };

    uint64_t total = 0, q = 0;
    uint32_t r = 0, step = 0;
    const auto split_total = [&]() {  // U = q * num_sms + r (a 32-bit division for any real total)
        if ((total >> 32) == 0) {
            q = static_cast<uint32_t>(total) / num_sms;
            r = static_cast<uint32_t>(total) - static_cast<uint32_t>(q) * num_sms;
        } else {
            q = total / num_sms;
            r = static_cast<uint32_t>(total - q * num_sms);
        }
    };

    #pragma unroll 1
    for (uint32_t pass = num_tiles > 1 ? 0 : 1; pass < 2; ++pass) {
        uint64_t placed = 0;  // pass 1: the units of the tiles before this one
        #pragma unroll 1
        for (uint32_t tile = 0; tile < num_tiles; ++tile, ++step) {
            // The unit counts of the thread's requests (0 past B; negative lengths count as 0)
            const uint32_t first_request = tile * kTile + threadIdx.x * kItems;
            int32_t longest[kItems];
            #pragma unroll
            for (uint32_t k = 0; k < kItems; ++k)
                longest[k] = 0;
            const int32_t* lens = context_lens + static_cast<int64_t>(first_request) * stride_b;
            #pragma unroll 1
            for (uint32_t t = 0; t < next_n; ++t, lens += stride_t) {
                #pragma unroll
                for (uint32_t k = 0; k < kItems; ++k) {
                    if (first_request + k < batch)
                        longest[k] = max(longest[k], __ldg(lens + static_cast<int64_t>(k) * stride_b));
                }
            }
            uint32_t units[kItems];
            uint64_t sum = 0;
            #pragma unroll
            for (uint32_t k = 0; k < kItems; ++k) {
                // (a length below 2^31 plus block_kv - 1 fits 32 bits unsigned)
                const uint32_t keys = static_cast<uint32_t>(longest[k]) + block_kv - 1;
                units[k] = pow2_block ? keys >> block_shift : keys / block_kv;
                sum += units[k];
            }

            // Exclusive scan over the CTA: the warp's inclusive scan, then the earlier warps' totals
            uint64_t inclusive = sum;
            #pragma unroll
            for (uint32_t offset = 1; offset < 32; offset *= 2) {
                const uint64_t other = __shfl_up_sync(0xffffffff, inclusive, offset);
                if (lane >= offset)
                    inclusive += other;
            }
            uint64_t* totals = warp_totals[step % 2];
            if (lane == 31)
                totals[warp] = inclusive;
            __syncthreads();
            uint64_t begin = inclusive - sum, tile_units = 0;
            #pragma unroll
            for (uint32_t w = 0; w < kNumWarps; ++w) {
                const uint64_t v = totals[w];
                tile_units += v;
                begin += w < warp ? v : 0;
            }
            if (pass == 0) {
                total += tile_units;
                continue;
            }
            if (num_tiles == 1) {
                total = tile_units;
                split_total();
            }

            // The tile's inclusive prefixes (the previous tile's searches are over: every thread has passed this
            // tile's scan barrier since)
            uint64_t running = placed + begin;
            #pragma unroll
            for (uint32_t k = 0; k < kItems; ++k) {
                running += units[k];
                prefix[threadIdx.x * kItems + k] = running;
            }
            __syncthreads();

            // The rows starting in this tile: the first request whose inclusive prefix passes start_i (one with
            // units: the prefixes past B equal the tile's end, which passes every start in the tile)
            const uint32_t num_requests = min(kTile, batch - tile * kTile);
            #pragma unroll 1
            for (uint32_t i = threadIdx.x; i <= num_sms; i += kNumThreads) {
                const uint64_t start = schedule_share_start(i, q, r);
                if (start < placed || start >= placed + tile_units)
                    continue;
                uint32_t lo = 0, hi = num_requests;
                while (lo < hi) {
                    const uint32_t mid = (lo + hi) / 2;
                    if (prefix[mid] > start)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                const uint64_t before = lo == 0 ? placed : prefix[lo - 1];
                write_row(i, tile * kTile + lo, start - before);
            }
            placed += tile_units;
        }
        if (pass == 0)
            split_total();
    }

    // Tail: the shares that start at U (row num_sms at least; every row when there are no units)
    #pragma unroll 1
    for (uint32_t i = threadIdx.x; i <= num_sms; i += kNumThreads) {
        if (schedule_share_start(i, q, r) >= total)
            write_row(i, batch, 0);
    }
}

}  // namespace deep_gemm
