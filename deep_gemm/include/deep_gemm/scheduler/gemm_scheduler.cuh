// Persistent tile scheduler for dense GEMMs: block b takes tiles b, b + gridDim.x, ...
// Tiles are rasterized in groups of kNumGroupN column blocks: inside a group, the N index moves
// fastest, so the CTAs running at one time share a few rows of A and a few columns of B in L2.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumGroupN>
struct GemmScheduler {
    uint32_t num_m_blocks;
    uint32_t num_n_blocks;
    uint32_t num_tiles;
    uint32_t tile_idx;

    __device__ __forceinline__ GemmScheduler(uint32_t shape_m, uint32_t shape_n)
        : num_m_blocks(ceil_div(shape_m, BLOCK_M)),
          num_n_blocks(ceil_div(shape_n, BLOCK_N)),
          num_tiles(num_m_blocks * num_n_blocks),
          tile_idx(blockIdx.x) {}

    // The next tile of this block as (m_block, n_block); false when none is left.
    __device__ __forceinline__ bool next(uint32_t& m_block, uint32_t& n_block) {
        if (tile_idx >= num_tiles)
            return false;
        const uint32_t tiles_per_group = num_m_blocks * kNumGroupN;
        const uint32_t group_idx = tile_idx / tiles_per_group;
        const uint32_t first_n = group_idx * kNumGroupN;
        const uint32_t group_width = min(kNumGroupN, num_n_blocks - first_n);
        const uint32_t in_group = tile_idx - group_idx * tiles_per_group;
        m_block = in_group / group_width;
        n_block = first_n + in_group % group_width;
        tile_idx += gridDim.x;
        return true;
    }
};

}  // namespace deep_gemm
