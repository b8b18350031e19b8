// The SM schedule of the paged decode MQA logits (any SM >= 90): get_paged_mqa_logits_metadata for CUDA tensors, in
// one launch of one CTA. Work is counted in kv blocks: request b has units_b = ceil(max(len_b, 0) / block_kv) of them,
// len_b = context_lens[b], or the largest of context_lens[b, :] when it is [B, next_n]. Of the U = q * num_sms + r
// units in all, SM i's share starts at unit start_i = i * q + min(i, r), and row i of the int32 [num_sms + 1, 2]
// output is (the request holding unit start_i, start_i's kv block within that request), or (B, 0) when start_i == U
// (always for row num_sms). Requests without units hold no unit, so no row names them.
//
// Pipeline (kNumThreads threads, one pass over the lengths to count, one to place): the requests are cut into tiles of
// kNumThreads * kItems; in a tile, thread t owns the kItems consecutive requests from t * kItems. Per tile, each
// thread loads its requests' lengths (kItems independent loads per next_n column), keeps their unit counts in shared
// memory (its own slots only: read back by the same thread, so no barrier) and a block-wide exclusive scan of the
// per-thread sums (warp shuffles, then the warp totals through shared memory: one barrier a tile) gives its first unit.
//   pass 0: the tile totals add up to U, hence q and r;
//   pass 1: for each request b with units [begin, end), the rows i with begin <= start_i < end are [first(begin),
//           first(end)), first(x) being the first i with start_i >= x (O(1): the inverse of start_i); the owner
//           writes them when there are at most kMaxRowsPerThread, else its whole warp does (ballot, broadcast, 32 rows
//           per step). With one tile, pass 1 reuses pass 0's counts (the lengths are read once).
//   tail:   the rows from first(U) to num_sms (start_i == U) are (B, 0), strided over the CTA.
// Every row is written exactly once, with one 8-byte store; no atomics; unit counts and prefixes are 64-bit.
// The code is kept small on purpose (one copy of each step, the per-request loop not unrolled, the 64-bit division
// out of line): the bench runs it from a cold L2, where every instruction-cache miss is a DRAM round trip, and
// the unrolled first version (~67 KB of SASS) took ~9 us (run 26) for a few hundred instructions of work.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

// When more rows than this start inside one request, the owner's whole warp writes them
constexpr uint32_t kMaxRowsPerThread = 4;

// start_i = i * q + min(i, r): the first unit of SM i's share (U for i = num_sms).
__device__ __forceinline__ uint64_t schedule_share_start(uint32_t i, uint64_t q, uint32_t r) {
    return static_cast<uint64_t>(i) * q + min(i, r);
}

// ceil(a / b) for b > 0 in 64 bits: out of line (never reached for real context lengths, see schedule_ceil_div)
__device__ __noinline__ uint64_t schedule_ceil_div_64(uint64_t a, uint64_t b) {
    const uint64_t quotient = a / b;
    return quotient + (a != quotient * b ? 1 : 0);
}

// ceil(a / b) for b > 0, through a 32-bit division whenever both fit (always, for real context lengths).
__device__ __forceinline__ uint64_t schedule_ceil_div(uint64_t a, uint64_t b) {
    if (((a | b) >> 32) != 0) [[unlikely]]
        return schedule_ceil_div_64(a, b);
    const uint32_t a32 = static_cast<uint32_t>(a), b32 = static_cast<uint32_t>(b);
    const uint32_t quotient = a32 / b32;
    return quotient + (a32 != quotient * b32 ? 1 : 0);
}

// The first SM i with start_i >= x, for 0 <= x <= U: the first r shares hold q + 1 units each, the others q (an x
// past the first r shares implies q > 0). Clamped to num_sms.
__device__ __forceinline__ uint32_t schedule_first_share(uint64_t x, uint64_t q, uint32_t r, uint32_t num_sms) {
    const uint64_t head = static_cast<uint64_t>(r) * (q + 1);
    uint64_t i = num_sms;
    if (x <= head)
        i = schedule_ceil_div(x, q + 1);
    else if (q > 0)
        i = r + schedule_ceil_div(x - head, q);
    return static_cast<uint32_t>(min(i, static_cast<uint64_t>(num_sms)));
}

// context_lens: int32 [batch, next_n] with element strides stride_b, stride_t (next_n = 1 and any stride_t for a
// 1-D [batch]); schedule: int32 [num_sms + 1, 2], contiguous (8-byte aligned). batch < 2^31, block_kv > 0.
template <uint32_t kNumThreads, uint32_t kItems>
__global__ void __launch_bounds__(kNumThreads, 1)
paged_mqa_schedule_kernel(const int32_t* __restrict__ context_lens, int64_t stride_b, int64_t stride_t, uint32_t batch,
                          uint32_t next_n, uint32_t block_kv, uint32_t num_sms, int32_t* __restrict__ schedule) {
    static_assert(kNumThreads % 32 == 0 && kNumThreads <= 1024, "whole warps, one CTA");
    constexpr uint32_t kNumWarps = kNumThreads / 32, kTile = kNumThreads * kItems;
    __shared__ uint32_t tile_units[kTile];           // unit counts of the current tile, thread t's at [t * kItems, +kItems)
    __shared__ uint64_t warp_totals[2][kNumWarps];  // the scans' warp totals, double-buffered (one barrier a tile)

    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t num_tiles = (batch + kTile - 1) / kTile;
    uint32_t* units = tile_units + threadIdx.x * kItems;
    const auto write_row = [&](uint32_t i, uint32_t request, uint64_t block) {
        reinterpret_cast<int2*>(schedule)[i] = make_int2(static_cast<int32_t>(request), static_cast<int32_t>(block));
    };

    uint64_t total = 0, q = 0, placed = 0;  // placed: pass 1's units of the tiles before this one
    uint32_t r = 0, step = 0;
    #pragma unroll 1
    for (uint32_t pass = 0; pass < 2; ++pass) {
        #pragma unroll 1
        for (uint32_t tile = 0; tile < num_tiles; ++tile, ++step) {
            const uint32_t first_request = tile * kTile + threadIdx.x * kItems;
            // The thread's unit counts (0 past B; negative lengths count as 0), loaded unless pass 0 left them
            if (pass == 0 || num_tiles > 1) {
                int32_t longest[kItems];
                #pragma unroll
                for (uint32_t k = 0; k < kItems; ++k)
                    longest[k] = 0;
                #pragma unroll 1
                for (uint32_t t = 0; t < next_n; ++t) {
                    #pragma unroll
                    for (uint32_t k = 0; k < kItems; ++k) {
                        if (first_request + k < batch)
                            longest[k] = max(longest[k], __ldg(context_lens + static_cast<int64_t>(first_request + k) *
                                                               stride_b + static_cast<int64_t>(t) * stride_t));
                    }
                }
                // (a length below 2^31 plus block_kv - 1 fits 32 bits unsigned)
                #pragma unroll
                for (uint32_t k = 0; k < kItems; ++k)
                    units[k] = (static_cast<uint32_t>(longest[k]) + block_kv - 1) / block_kv;
            }
            uint64_t sum = 0;
            #pragma unroll
            for (uint32_t k = 0; k < kItems; ++k)
                sum += units[k];

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
            uint64_t begin = inclusive - sum, tile_units_sum = 0;
            #pragma unroll
            for (uint32_t w = 0; w < kNumWarps; ++w) {
                const uint64_t v = totals[w];
                tile_units_sum += v;
                begin += w < warp ? v : 0;
            }
            if (pass == 0) {
                total += tile_units_sum;
                continue;
            }
            begin += placed;  // the first unit of the thread's first request
            placed += tile_units_sum;

            uint32_t row = schedule_first_share(begin, q, r, num_sms);
            #pragma unroll 1
            for (uint32_t k = 0; k < kItems; ++k) {
                // Rows [row, row_end) start inside request first_request + k, at its block start_i - begin
                const uint64_t end = begin + units[k];
                const uint32_t row_end = units[k] == 0 ? row : schedule_first_share(end, q, r, num_sms);
                const bool by_warp = row_end - row > kMaxRowsPerThread;
                if (!by_warp) {
                    for (uint32_t i = row; i < row_end; ++i)
                        write_row(i, first_request + k, schedule_share_start(i, q, r) - begin);
                }
                // Long ranges (few requests over many SMs): one lane's range at a time, by the whole warp
                uint32_t pending = __ballot_sync(0xffffffff, by_warp);
                while (pending != 0) {
                    const uint32_t src = __ffs(pending) - 1;
                    pending &= pending - 1;
                    const uint32_t request = __shfl_sync(0xffffffff, first_request + k, src);
                    const uint32_t from = __shfl_sync(0xffffffff, row, src), to = __shfl_sync(0xffffffff, row_end, src);
                    const uint64_t base = __shfl_sync(0xffffffff, begin, src);
                    for (uint32_t i = from + lane; i < to; i += 32)
                        write_row(i, request, schedule_share_start(i, q, r) - base);
                }
                begin = end;
                row = row_end;
            }
        }
        if (pass == 0) {
            // U = q * num_sms + r (a 32-bit division for any real total)
            if ((total >> 32) == 0) {
                q = static_cast<uint32_t>(total) / num_sms;
                r = static_cast<uint32_t>(total) - static_cast<uint32_t>(q) * num_sms;
            } else {
                q = total / num_sms;
                r = static_cast<uint32_t>(total - q * num_sms);
            }
        }
    }

    // Tail: the shares that start at U (row num_sms at least)
    for (uint32_t i = schedule_first_share(total, q, r, num_sms) + threadIdx.x; i <= num_sms; i += kNumThreads)
        write_row(i, batch, 0);
}

}  // namespace deep_gemm
