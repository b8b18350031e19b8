// Persistent tile scheduler for dense GEMMs.
//
// A work unit is one output tile (m_block, n_block) over the K blocks [k_begin, k_end).
// With kNumSplits > 1 (split-K), each tile is cut into kNumSplits units over consecutive, near-equal
// K ranges; the units of one tile are consecutive in the unit order, so they run at the same time on
// neighbouring CTAs (their partial sums are added by a separate, deterministic reduction).
// With kNumMulticast = 2, the CTAs of a 2-CTA cluster take the two tiles of a pair that share one
// operand: along M (same n_block, B multicast) or, with kIsMulticastOnA, along N (same m_block, A
// multicast). Cluster c takes pairs c, c + #clusters, ...; CTA rank r takes tile r of each pair. A
// pair's second tile may lie past the matrix (odd block count): that CTA still runs it, so that it
// loads its half of the shared operand for its peer; TMA zero-fills its loads and clips its stores.
// Tiles (or pairs) are rasterized in groups of kNumGroupN columns: inside a group the N index moves
// fastest, so the CTAs running at one time share a few rows of A and a few columns of B in L2.
// M-grouped contiguous GEMMs (MoE): the rows of A are the concatenated segments of the groups (experts),
// each starting at a multiple of `alignment` (itself a multiple of BLOCK_M), so a row block lies in one
// group's segment or in padding. The group of a row block is read on the device from the layout: per
// row (GemmType::kMGroupedContiguous: int32 group id per row, -1 for padding) or as cumulative end rows
// (kMGroupedContiguousPsum: group g spans [align(end[g-1], alignment), end[g])). Padding blocks are
// skipped by every role alike; `tile.row_end` bounds the rows the epilogue may write (the per-row
// layout's rows are checked row by row: contiguous_row_in_group).
// M-grouped masked GEMMs (kMGroupedMasked, MoE decode): A and D are [groups, max_m, ...] viewed as
// [groups * max_m, ...] (max_m a multiple of BLOCK_M), and only the first masked_m[g] rows of group g
// count (read on the device, clamped to max_m): the units are walked group after group, each group
// contributing ceil(masked_m[g] / BLOCK_M) x #column blocks tiles, with a cursor that only moves forward.
// Their total (masked_units) is counted by each role before its tile loop, so that the loop ends on a
// comparison with that count: when it ended inside the cursor's walk (a value read in the loop), ptxas no
// longer kept the pipeline state and the wgmma descriptors in uniform registers and moved each descriptor there
// before every wgmma (R2UR: 175 instead of 120 instructions per K block at 128 x 128; a stream-K kernel with 16
// R2URs per K block ran 20 % slower).
// K-grouped GEMMs (kKGroupedContiguous, MoE weight gradients): num_groups GEMMs of the same M x N, each
// over its own K; the units are the groups' tiles one group after the other (rasterized inside a group),
// and a tile's K range is [0, K blocks of its group) (an empty group's tiles have none: D = C).
// Stream-K (kStreamK, normal GEMMs without split-K or multicast): the first `tiles - num_stream_k_tiles` tiles
// (a multiple of the grid) are given whole, round robin; the K blocks of the last num_stream_k_tiles tiles, as
// one sequence (tile after tile), are cut into gridDim.x near-equal ranges, range c to CTA c. A range falls
// into segments, one per tile it touches: a segment that starts a tile at K block 0 but ends inside it makes
// its CTA the tile's owner; one that starts inside a tile makes its CTA a contributor (only a CTA's first
// segment can), which hands its partial sums to the owner through a global workspace (StreamKParams). A
// tile's contributors are the CTAs right after its owner, in K order. The host keeps every range at least a
// K block long (so every CTA counted as a contributor makes its contribution).
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

struct GemmTile {
    uint32_t m_block, n_block;
    uint32_t split;             // index of the K range (0 without split-K)
    uint32_t k_begin, k_end;    // K blocks [k_begin, k_end)
    uint32_t group;             // the group (expert) of the rows (0 without groups)
    uint32_t row_end;           // rows at or past this are not written (M without groups)
    // (stream-K: what else a unit is, GemmScheduler tells from k_begin / k_end and its cursor, not kept here: the
    // math warpgroups hold tiles through the K loop, where three of them have no register to spare)
};

// The per-row contiguous layout (kMGroupedContiguous): whether the epilogue of a tile of group `group` writes row
// `row` of its block. Only a row whose id is that group: ids outside [0, num_groups) are padding wherever they
// are (a block's padding rows may hold -1, num_groups or any other id), and a row of another group inside the
// block, which no valid layout has, was computed with this group's B. Used by the epilogues' row-by-row stores
// (AccumFragment) and by the host tests of the scheduler.
__device__ __forceinline__ bool contiguous_row_in_group(const int32_t* row_groups, uint32_t row, uint32_t group) {
    return __ldg(row_groups + row) == static_cast<int32_t>(group);
}

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumGroupN, uint32_t kNumMulticast, bool kIsMulticastOnA,
          uint32_t kNumSplits = 1, GemmType kGemmType = GemmType::kNormal, bool kStreamK = false>
struct GemmScheduler {
    static_assert(kNumSplits >= 1 && (kNumSplits == 1 || kNumMulticast == 1), "split-K runs without multicast");
    static_assert(kGemmType == GemmType::kNormal || (kNumSplits == 1 && kNumMulticast == 1),
                  "grouped GEMMs run without split-K and without multicast (a pair could span two groups)");
    static_assert(!kStreamK || (kGemmType == GemmType::kNormal && kNumSplits == 1 && kNumMulticast == 1),
                  "stream-K runs on normal GEMMs, without split-K and without multicast");
    static constexpr bool kIsKGrouped = kGemmType == GemmType::kKGroupedContiguous;

    uint32_t num_m_units;  // rows of the unit grid (tiles, or pairs along M)
    uint32_t num_n_units;  // columns of the unit grid (tiles, or pairs along N)
    uint32_t num_units;
    uint32_t num_k_blocks;
    uint32_t unit_idx;
    uint32_t rank;
    uint32_t shape_m;
    GroupedLayout layout;
    // Masked mode's cursor: the group holding unit `first_unit` .. `first_unit + group_units - 1`
    uint32_t num_n_blocks, cur_group = 0, first_unit = 0, group_units = 0;
    // Stream-K: the tiles given whole (units [0, num_whole_tiles)), and this CTA's range [sk_next, sk_end) of the
    // stream-K tiles' K blocks (counted over those tiles one after the other)
    uint32_t num_whole_tiles = 0, sk_next = 0, sk_end = 0;

    // num_masked_units: the masked layout's masked_units (every role's own count; other layouts ignore it).
    __device__ __forceinline__ GemmScheduler(uint32_t shape_m, uint32_t shape_n, uint32_t num_k_blocks,
                                             uint32_t cta_rank, GroupedLayout grouped_layout = {},
                                             uint32_t num_stream_k_tiles = 0, uint32_t num_masked_units = 0) {
        const uint32_t num_m_blocks = ceil_div(shape_m, BLOCK_M);
        const uint32_t num_n_blocks = ceil_div(shape_n, BLOCK_N);
        const bool pair_along_m = kNumMulticast > 1 && !kIsMulticastOnA;
        const bool pair_along_n = kNumMulticast > 1 && kIsMulticastOnA;
        num_m_units = pair_along_m ? ceil_div(num_m_blocks, 2u) : num_m_blocks;
        num_n_units = pair_along_n ? ceil_div(num_n_blocks, 2u) : num_n_blocks;
        num_units = num_m_units * num_n_units * kNumSplits * (kIsKGrouped ? grouped_layout.num_groups : 1);
        this->num_k_blocks = num_k_blocks;
        unit_idx = blockIdx.x / kNumMulticast;
        rank = cta_rank;
        this->shape_m = shape_m;
        layout = grouped_layout;
        this->num_n_blocks = num_n_blocks;
        if constexpr (kGemmType == GemmType::kMGroupedMasked) {
            num_units = num_masked_units;
            enter_group(0);
        }
        if constexpr (kStreamK) {
            num_whole_tiles = num_units - num_stream_k_tiles;
            sk_next = stream_k_range_start(blockIdx.x);
            sk_end = stream_k_range_start(blockIdx.x + 1);
        }
    }

    // Stream-K: where CTA `cta`'s range of the stream-K K blocks starts (CTA gridDim.x: the end of all)
    // (the total, recomputed rather than kept: the math warpgroups' registers are scarce. In 32 bits: the host
    // keeps gridDim.x x total below 2^32 (gemm_stream_k_fits); a 64-bit division would be a subroutine call,
    // whose results the compiler no longer knows to be warp-uniform, and the K loop's wgmma descriptors then
    // leave the uniform registers: 20 % slower, measured)
    __device__ __forceinline__ uint32_t stream_k_range_start(uint32_t cta) const {
        const uint32_t total = (num_units - num_whole_tiles) * num_k_blocks;
        return cta * total / gridDim.x;
    }

    // Masked mode: the row blocks of group g (masked_m[g] clamped to [0, max_m]; none past the last group).
    __device__ __forceinline__ static uint32_t masked_m_blocks(const GroupedLayout& layout, uint32_t g) {
        const int32_t rows = g < layout.num_groups ? __ldg(layout.data + g) : 0;
        return ceil_div(static_cast<uint32_t>(max(0, min(rows, static_cast<int32_t>(layout.max_m)))), BLOCK_M);
    }

    // Masked mode: the units of all groups. kWholeWarp: every lane of the calling warp takes part (groups lane,
    // lane + 32, ..., then a shuffle sum: one round of loads per 32 groups, and a result known warp-uniform);
    // otherwise the calling thread reads every group.
    template <bool kWholeWarp>
    __device__ __forceinline__ static uint32_t masked_units(const GroupedLayout& layout, uint32_t shape_n,
                                                            uint32_t lane) {
        uint32_t m_blocks = 0;
        #pragma unroll 4  // (four loads in flight: up to 128 groups in one round trip for a warp)
        for (uint32_t g = kWholeWarp ? lane : 0; g < layout.num_groups; g += kWholeWarp ? 32 : 1)
            m_blocks += masked_m_blocks(layout, g);
        if constexpr (kWholeWarp) {
            #pragma unroll
            for (uint32_t offset = 16; offset > 0; offset /= 2)
                m_blocks += __shfl_xor_sync(0xffffffff, m_blocks, offset);
            // (every lane holds the sum now; lane 0's, broadcast, is what the compiler knows to be warp-uniform)
            m_blocks = __shfl_sync(0xffffffff, m_blocks, 0);
        }
        return m_blocks * ceil_div(shape_n, BLOCK_N);
    }

    // Masked mode: make group g current.
    __device__ __forceinline__ void enter_group(uint32_t g) {
        cur_group = g;
        group_units = masked_m_blocks(layout, g) * num_n_blocks;
    }

    // The next unit of this CTA; false when none is left. Padding row blocks of grouped GEMMs are skipped.
    __device__ __forceinline__ bool next(GemmTile& tile) {
        while (next_unit(tile)) {
            if (find_group(tile))
                return true;
        }
        return false;
    }

    // Sets tile.group and tile.row_end; false for a padding block (or an out-of-range group id, which is
    // treated as padding: nothing is read or written for it).
    __device__ __forceinline__ bool find_group(GemmTile& tile) const {
        const uint32_t row = tile.m_block * BLOCK_M;
        if constexpr (kGemmType == GemmType::kMGroupedMasked || kIsKGrouped)
            return true;  // set by next_unit
        tile.group = 0;
        tile.row_end = shape_m;
        if constexpr (kGemmType == GemmType::kMGroupedContiguous) {
            const int32_t group = __ldg(layout.data + row);
            tile.group = static_cast<uint32_t>(group);
            return group >= 0 && static_cast<uint32_t>(group) < layout.num_groups;
        } else if constexpr (kGemmType == GemmType::kMGroupedContiguousPsum) {
            // The first group whose end is past `row` (ends are non-decreasing), then check its aligned start
            uint32_t lo = 0, hi = layout.num_groups;
            while (lo < hi) {
                const uint32_t mid = (lo + hi) / 2;
                if (static_cast<uint32_t>(__ldg(layout.data + mid)) <= row)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo >= layout.num_groups)
                return false;
            const uint32_t start = lo == 0 ? 0 : align_up(static_cast<uint32_t>(__ldg(layout.data + lo - 1)), layout.alignment);
            tile.group = lo;
            tile.row_end = min(static_cast<uint32_t>(__ldg(layout.data + lo)), shape_m);
            return row >= start;
        } else {
            return true;
        }
    }

    __device__ __forceinline__ bool next_unit(GemmTile& tile) {
        if constexpr (kGemmType == GemmType::kMGroupedMasked)
            return next_masked_unit(tile);
        if (unit_idx >= (kStreamK ? num_whole_tiles : num_units))
            return false;
        const uint32_t split = unit_idx % kNumSplits;
        uint32_t tile_idx = unit_idx / kNumSplits;
        // K-grouped: the groups' tile grids one after the other
        uint32_t k_group = 0;
        if constexpr (kIsKGrouped) {
            k_group = tile_idx / (num_m_units * num_n_units);
            tile_idx -= k_group * num_m_units * num_n_units;
        }
        place(tile_idx, tile);
        tile.split = split;
        if constexpr (kIsKGrouped) {
            tile.group = k_group;
            tile.row_end = shape_m;
            tile.k_begin = 0;
            tile.k_end = layout.k_blocks[k_group];
        } else {
            tile.k_begin = split * num_k_blocks / kNumSplits;
            tile.k_end = (split + 1) * num_k_blocks / kNumSplits;
        }
        unit_idx += gridDim.x / kNumMulticast;
        return true;
    }

    // Stream-K: the next segment of this CTA's range (see the top of this file), once next() has handed out the
    // whole tiles (false without stream-K).
    __device__ __forceinline__ bool next_stream_k(GemmTile& tile) {
        if (!kStreamK || sk_next >= sk_end)
            return false;
        const uint32_t sk_tile = sk_next / num_k_blocks;
        const uint32_t tile_begin = sk_tile * num_k_blocks, tile_end = tile_begin + num_k_blocks;
        const uint32_t segment_end = min(sk_end, tile_end);
        place(num_whole_tiles + sk_tile, tile);
        tile.split = 0;
        tile.k_begin = sk_next - tile_begin;
        tile.k_end = segment_end - tile_begin;
        sk_next = segment_end;
        return find_group(tile);  // (a normal GEMM: group 0, rows up to M)
    }

    // Stream-K, about the unit next() handed out last. A contribution: it starts past K block 0 (whole tiles and
    // owners start at 0; there is no split-K). Its stream-K tile (the flag's index): the one holding the segment's
    // last K block, sk_next - 1.
    __device__ __forceinline__ static bool is_stream_k_contribution(const GemmTile& tile) {
        return kStreamK && tile.k_begin > 0;
    }
    __device__ __forceinline__ uint32_t stream_k_tile() const { return (sk_next - 1) / num_k_blocks; }
    // How many CTAs contribute partial sums to the unit (0 unless it is an owner's segment that ends inside its
    // tile): the CTAs after this one whose ranges start inside the tile
    __device__ __forceinline__ uint32_t stream_k_contributors(const GemmTile& tile) const {
        if (!kStreamK || tile.k_begin > 0 || tile.k_end == num_k_blocks)
            return 0;
        const uint32_t tile_end = (stream_k_tile() + 1) * num_k_blocks;
        uint32_t cta = blockIdx.x + 1;
        while (cta < gridDim.x && stream_k_range_start(cta) < tile_end)
            ++cta;
        return cta - blockIdx.x - 1;
    }

    // Tile (or pair) `tile_idx` of the rasterized order: its m_block and n_block (this CTA's tile of a pair).
    __device__ __forceinline__ void place(uint32_t tile_idx, GemmTile& tile) const {
        const uint32_t units_per_group = num_m_units * kNumGroupN;
        const uint32_t group_idx = tile_idx / units_per_group;
        const uint32_t first_n = group_idx * kNumGroupN;
        const uint32_t group_width = min(kNumGroupN, num_n_units - first_n);
        const uint32_t in_group = tile_idx - group_idx * units_per_group;
        const uint32_t m_unit = in_group / group_width;
        const uint32_t n_unit = first_n + in_group % group_width;
        if constexpr (kNumMulticast > 1 && !kIsMulticastOnA) {
            tile.m_block = m_unit * 2 + rank;
            tile.n_block = n_unit;
        } else if constexpr (kNumMulticast > 1) {
            tile.m_block = m_unit;
            tile.n_block = n_unit * 2 + rank;
        } else {
            tile.m_block = m_unit;
            tile.n_block = n_unit;
        }
    }

    // Masked mode: none left past the count of all units (see the top of this file); else move the cursor forward
    // to the group holding unit_idx, then place the tile in it (column blocks fastest, so that the CTAs running
    // together share the group's rows of A).
    __device__ __forceinline__ bool next_masked_unit(GemmTile& tile) {
        if (unit_idx >= num_units)
            return false;
        // (the last group bounds the walk even if masked_m changed after the count: no hang, and a tile past the
        // group's rows writes nothing)
        while (unit_idx >= first_unit + group_units && cur_group + 1 < layout.num_groups) {
            first_unit += group_units;
            enter_group(cur_group + 1);
        }
        const uint32_t local = unit_idx - first_unit;
        const uint32_t m_in_group = local / num_n_blocks;
        tile.n_block = local % num_n_blocks;
        tile.m_block = cur_group * (layout.max_m / BLOCK_M) + m_in_group;
        tile.group = cur_group;
        const int32_t rows = __ldg(layout.data + cur_group);
        tile.row_end = cur_group * layout.max_m + static_cast<uint32_t>(max(0, min(rows, static_cast<int32_t>(layout.max_m))));
        tile.split = 0;
        tile.k_begin = 0;
        tile.k_end = num_k_blocks;
        unit_idx += gridDim.x;
        return true;
    }
};

}  // namespace deep_gemm
