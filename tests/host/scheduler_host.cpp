// Host build of the device tile scheduler (deep_gemm/include/deep_gemm/scheduler/gemm_scheduler.cuh), for
// CPU tests of its tile enumeration: the CUDA qualifiers and built-ins it uses are stubbed, and every CTA
// of a virtual persistent grid is walked in turn.
//
// type: 0 normal, 1 contiguous, 2 psum, 3 masked, 4 normal with 3-way split-K, 5 normal with 2-CTA pairs along M,
//       6 k-grouped (layout: each group's K block count), 7 normal with stream-K (max_m: the stream-K tiles),
//       8 normal with 2-CTA pairs along N (multicast on A),
//       9 contiguous, the rows the row-by-row epilogue writes
// stdin:  type block_m block_n shape_m shape_n num_k_blocks grid num_groups alignment max_m layout_len layout...
// stdout: one line per tile: cta m_block n_block group row_end k_begin k_end
//         (type 7: then stream_k_tile num_contributors is_contribution)
//         type 9: one line per written row of each tile with n_block 0: row group
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define __device__
#define __host__
#define __forceinline__ inline
struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
static Dim3 blockIdx, gridDim;
template <typename T>
T __ldg(const T* p) {
    return *p;
}
// (declared for the whole-warp count; the host walk counts serially)
template <typename T>
T __shfl_xor_sync(unsigned, T value, int) {
    return value;
}
template <typename T>
T __shfl_sync(unsigned, T value, int) {
    return value;
}
using std::max;
using std::min;

#include <deep_gemm/scheduler/gemm_scheduler.cuh>

using namespace deep_gemm;

template <uint32_t BLOCK_M, uint32_t BLOCK_N, GemmType kType, uint32_t kNumSplits = 1, uint32_t kNumMulticast = 1,
          bool kStreamK = false, bool kIsMulticastOnA = false>
static void walk(uint32_t shape_m, uint32_t shape_n, uint32_t num_k_blocks, uint32_t grid, GroupedLayout layout) {
    gridDim.x = grid;
    for (uint32_t cta = 0; cta < grid; ++cta) {
        blockIdx.x = cta;
        using Scheduler = GemmScheduler<BLOCK_M, BLOCK_N, 8, kNumMulticast, kIsMulticastOnA, kNumSplits, kType, kStreamK>;
        // (the masked count as one thread makes it; a whole warp's sum is the same number)
        const uint32_t masked_units =
            kType == GemmType::kMGroupedMasked ? Scheduler::template masked_units<false>(layout, shape_n, 0) : 0;
        Scheduler scheduler(shape_m, shape_n, num_k_blocks, cta % kNumMulticast, layout, kStreamK ? layout.max_m : 0,
                            masked_units);
        GemmTile tile;
        // (each unit written over a poisoned tile: a field the scheduler leaves unset shows)
        while (std::memset(&tile, 0xff, sizeof(tile)), scheduler.next(tile) || scheduler.next_stream_k(tile)) {
            std::printf("%u %u %u %u %u %u %u", cta, tile.m_block, tile.n_block, tile.group, tile.row_end,
                        tile.k_begin, tile.k_end);
            if (kStreamK)
                std::printf(" %u %u %u", scheduler.stream_k_tile(), scheduler.stream_k_contributors(tile),
                            decltype(scheduler)::is_stream_k_contribution(tile) ? 1u : 0u);
            std::printf("\n");
        }
    }
}

// The rows of each tile (of the first column block) that the epilogue's row-by-row store writes: below row_end,
// and of the tile's group (contiguous_row_in_group).
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
static void walk_written_rows(uint32_t shape_m, uint32_t shape_n, uint32_t num_k_blocks, uint32_t grid,
                              GroupedLayout layout) {
    gridDim.x = grid;
    for (uint32_t cta = 0; cta < grid; ++cta) {
        blockIdx.x = cta;
        GemmScheduler<BLOCK_M, BLOCK_N, 8, 1, false, 1, GemmType::kMGroupedContiguous, false> scheduler(
            shape_m, shape_n, num_k_blocks, 0, layout, 0);
        GemmTile tile;
        while (scheduler.next(tile)) {
            if (tile.n_block != 0)
                continue;
            const uint32_t first = tile.m_block * BLOCK_M, end = std::min(first + BLOCK_M, tile.row_end);
            for (uint32_t row = first; row < end; ++row)
                if (contiguous_row_in_group(layout.data, row, tile.group))
                    std::printf("%u %u\n", row, tile.group);
        }
    }
}

template <GemmType kType, uint32_t kNumSplits = 1, uint32_t kNumMulticast = 1, bool kStreamK = false,
          bool kIsMulticastOnA = false>
static bool dispatch_blocks(uint32_t bm, uint32_t bn, uint32_t m, uint32_t n, uint32_t kb, uint32_t grid,
                            GroupedLayout layout) {
    if (bm == 128 && bn == 128)
        walk<128, 128, kType, kNumSplits, kNumMulticast, kStreamK, kIsMulticastOnA>(m, n, kb, grid, layout);
    else if (bm == 64 && bn == 112)
        walk<64, 112, kType, kNumSplits, kNumMulticast, kStreamK, kIsMulticastOnA>(m, n, kb, grid, layout);
    else
        return false;
    return true;
}

int main() {
    uint32_t type, bm, bn, m, n, kb, grid, groups, alignment, max_m, len;
    if (std::scanf("%u %u %u %u %u %u %u %u %u %u %u", &type, &bm, &bn, &m, &n, &kb, &grid, &groups, &alignment,
                   &max_m, &len) != 11)
        return 2;
    std::vector<int32_t> data(len);
    for (auto& v: data)
        if (std::scanf("%d", &v) != 1)
            return 2;
    const std::vector<uint32_t> k_blocks(data.begin(), data.end());
    const GroupedLayout layout{data.data(), groups, alignment, max_m, 0, k_blocks.data()};
    bool ok = false;
    switch (type) {
        case 0: ok = dispatch_blocks<GemmType::kNormal>(bm, bn, m, n, kb, grid, layout); break;
        case 1: ok = dispatch_blocks<GemmType::kMGroupedContiguous>(bm, bn, m, n, kb, grid, layout); break;
        case 2: ok = dispatch_blocks<GemmType::kMGroupedContiguousPsum>(bm, bn, m, n, kb, grid, layout); break;
        case 3: ok = dispatch_blocks<GemmType::kMGroupedMasked>(bm, bn, m, n, kb, grid, layout); break;
        case 4: ok = dispatch_blocks<GemmType::kNormal, 3>(bm, bn, m, n, kb, grid, layout); break;     // split-K 3
        case 5: ok = dispatch_blocks<GemmType::kNormal, 1, 2>(bm, bn, m, n, kb, grid, layout); break;  // pairs along M
        case 6: ok = dispatch_blocks<GemmType::kKGroupedContiguous>(bm, bn, m, n, kb, grid, layout); break;
        case 7: ok = dispatch_blocks<GemmType::kNormal, 1, 1, true>(bm, bn, m, n, kb, grid, layout); break;
        case 8: ok = dispatch_blocks<GemmType::kNormal, 1, 2, false, true>(bm, bn, m, n, kb, grid, layout); break;
        case 9:
            ok = bm == 128 && bn == 128;
            if (ok)
                walk_written_rows<128, 128>(m, n, kb, grid, layout);
            break;
    }
    return ok ? 0 : 3;
}
