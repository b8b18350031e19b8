// Grouped FP8 transpose (any SM >= 90): the pre-pass of the tn k-grouped FP8 GEMM. Per group g, the rows
// [start_g, start_g + K_g) of an MN-major src [sum K, MN] (row stride `ld` bytes) become dst_g [MN, K_g], K-major, at
// byte MN * start_g of the flat dst (the nt layout the GEMM reads). K_g and start_g are multiples of 16.
//
// Pipeline per CTA (256 threads), one tile of 64 rows of K (inside one group) x 64 columns of MN:
//   load:  thread t reads tile row t / 4, bytes 16 (t % 4) .. +16 (one 16-byte load; bytewise at the MN edge or for
//          a src that is not 16-byte aligned) into shared memory as four words; rows hold 16 words + 1 of padding,
//          and the upper 32 rows' words are XOR-swizzled by 8, so that the reads below are conflict-free;
//   store: thread t builds dst row mn0 + t / 4, K bytes 16 (t % 4) .. +16 of the tile: each output word gathers
//          one byte from each of four tile words (byte_perm); one 16-byte store per thread.
// Grid: x = MN tiles, y = the K tiles of all groups (group g's from tile_begin[g]); a CTA finds its group by a scan of
// the parameter `groups` (at most kMaxGroups entries). Empty groups own no tile.
#pragma once

#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

// (the parameter `groups`: TransposeGroups, common/host_device_types.hpp)
template <uint32_t kMaxGroups, bool kAligned>
__global__ void __launch_bounds__(256, 1)
transpose_fp8_groups_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, uint32_t mn, uint64_t ld,
                            const __grid_constant__ TransposeGroups<kMaxGroups> groups) {
    constexpr uint32_t kTile = 64, kPitch = kTile / 4 + 1;  // words per tile row, with one of padding
    __shared__ uint32_t tile[kTile * kPitch];
    const auto word = [](uint32_t row, uint32_t col) { return row * kPitch + (col ^ ((row / 32) * 8)); };

    uint32_t g = 0;
    while (g + 1 < groups.num_groups && blockIdx.y >= groups.tile_begin[g + 1])
        ++g;
    const uint32_t k_g = groups.k[g], k0 = (blockIdx.y - groups.tile_begin[g]) * kTile;
    const uint32_t rows = min(kTile, k_g - k0);  // a multiple of 16
    const uint32_t mn0 = blockIdx.x * kTile;
    const uint32_t t = threadIdx.x;

    {
        const uint32_t row = t / 4, col = (t % 4) * 16;  // tile row, first byte column
        uint32_t w[4] = {0, 0, 0, 0};
        if (row < rows && mn0 + col < mn) {
            const uint8_t* in = src + static_cast<uint64_t>(groups.start[g] + k0 + row) * ld + mn0 + col;
            if (kAligned && mn0 + col + 16 <= mn) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(in));
                w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
            } else {
                #pragma unroll
                for (uint32_t i = 0; i < 16; ++i) {
                    if (mn0 + col + i < mn)
                        w[i / 4] |= static_cast<uint32_t>(__ldg(in + i)) << (8 * (i % 4));
                }
            }
        }
        #pragma unroll
        for (uint32_t i = 0; i < 4; ++i)
            tile[word(row, col / 4 + i)] = w[i];
    }
    __syncthreads();

    const uint32_t out_row = t / 4, chunk = t % 4;  // dst row mn0 + out_row, K bytes 16 chunk .. + 16 of the tile
    if (mn0 + out_row >= mn || chunk * 16 >= rows)
        return;
    // Byte out_row % 4 of x in byte 0 and of y in byte 1
    const uint32_t pick = (out_row % 4) | ((4 + out_row % 4) << 4);
    uint32_t out[4];
    #pragma unroll
    for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t k = chunk * 16 + i * 4;
        const uint32_t b0 = tile[word(k + 0, out_row / 4)], b1 = tile[word(k + 1, out_row / 4)];
        const uint32_t b2 = tile[word(k + 2, out_row / 4)], b3 = tile[word(k + 3, out_row / 4)];
        out[i] = __byte_perm(__byte_perm(b0, b1, pick), __byte_perm(b2, b3, pick), 0x5410);
    }
    uint8_t* dst_row = dst + static_cast<uint64_t>(mn) * groups.start[g] + static_cast<uint64_t>(mn0 + out_row) * k_g;
    *reinterpret_cast<uint4*>(dst_row + k0 + chunk * 16) = make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace deep_gemm
