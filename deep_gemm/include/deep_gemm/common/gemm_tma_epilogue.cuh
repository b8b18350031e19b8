// The GEMM epilogues that store a tile through TMA from 128B-swizzled shared-memory staging, per math warpgroup
// (WG_M rows of the tile; its accumulators are wgmma fragments, common/accum_fragment.cuh):
//   Bf16TmaEpilogue: BF16 D through stmatrix into the staging tile, TMA stores of column chunks that drain
//     during the next tile's K loop;
//   Fp32TmaEpilogue: FP32 D in 32-column chunks through a ring of staging buffers, with C added by TMA loads,
//     by a TMA reduce-add into D (C is D), or from registers.
// Each warpgroup syncs its own 128 threads on named barrier 1 + wg_idx; its thread 0 issues the TMA operations.
#pragma once

#include <deep_gemm/common/accum_fragment.cuh>
#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>
#include <deep_gemm/ptx/sync.cuh>
#include <deep_gemm/ptx/tma.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

namespace deep_gemm {

// The D column of a tile column: the identity, or a remap the kernel defines (skip-head-mid), applied per store chunk.
struct IdentityColumns {
    __device__ __forceinline__ uint32_t operator()(uint32_t n) const { return n; }
};

// Staging: BLOCK_M x BLOCK_N BF16, each warpgroup's WG_M rows one after another, and inside them column chunks
// of kStoreChunkN (16, 32 or 64 columns: one TMA box each, swizzled to match it).
template <uint32_t WG_M, uint32_t BLOCK_N, uint32_t kNumWgmmaM, uint32_t kNumAccum, uint32_t kStoreChunkN>
struct Bf16TmaEpilogue {
    using Accum = float[kNumWgmmaM][kNumAccum];
    static constexpr uint32_t kStoreChunkBytes = kStoreChunkN * 2;
    static constexpr uint32_t kNumStoreChunks = BLOCK_N / kStoreChunkN;

    // BF16 via stmatrix into this warpgroup's WG_M rows of the staging tile, then TMA stores (k3d: into a 3-D map at
    // (column, row, group)), each chunk at D column column_of(its first column).
    template <bool k3d = false, typename ColumnOf = IdentityColumns>
    __device__ __forceinline__ static void store(uint8_t* staging_tile, Accum& accum, uint32_t m0, uint32_t n0,
                                                 const TmaDescriptor* tma_d, uint32_t wg_idx, uint32_t warp_in_wg,
                                                 uint32_t lane, uint32_t group = 0, ColumnOf column_of = {}) {
        constexpr uint32_t kChunkSize = WG_M * kStoreChunkBytes;  // bytes of one column chunk of this warpgroup
        uint8_t* staging = staging_tile + wg_idx * WG_M * BLOCK_N * 2;
        const bool is_leader = threadIdx.x % 128 == 0;

        // The previous tile's stores must have finished reading the staging tile
        if (is_leader)
            ptx::tma_store_wait_read();
        ptx::named_barrier_sync(1 + wg_idx, 128);

        // Lane l addresses row l % 8 of matrix l / 8: (rows +8 if matrix is odd, columns +8 if matrix >= 2)
        const uint32_t row_in_slice = warp_in_wg * 16 + (lane / 8 % 2) * 8 + lane % 8;
        const uint32_t col_offset = (lane / 16) * 8;
        #pragma unroll
        for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
            #pragma unroll
            for (uint32_t j = 0; j < kNumAccum / 4; j += 2) {
                const uint32_t col = j * 8 + col_offset;
                const uint32_t chunk = col / kStoreChunkN;
                const uint32_t row = im * 64 + row_in_slice;
                const uint32_t offset =
                    ptx::swizzled_offset<kStoreChunkBytes>(row * kStoreChunkBytes + (col % kStoreChunkN) * 2);
                const float* v = &accum[im][j * 4];
                ptx::stmatrix_x4(staging + chunk * kChunkSize + offset, ptx::pack_bf16x2(v[0], v[1]),
                                 ptx::pack_bf16x2(v[2], v[3]), ptx::pack_bf16x2(v[4], v[5]),
                                 ptx::pack_bf16x2(v[6], v[7]));
            }
        }
        ptx::fence_proxy_async_smem();
        ptx::named_barrier_sync(1 + wg_idx, 128);
        if (is_leader) {
            #pragma unroll
            for (uint32_t c = 0; c < kNumStoreChunks; ++c) {
                if constexpr (k3d)
                    ptx::tma_store_3d(tma_d, staging + c * kChunkSize, column_of(n0 + c * kStoreChunkN), m0, group);
                else
                    ptx::tma_store_2d(tma_d, staging + c * kChunkSize, column_of(n0 + c * kStoreChunkN), m0);
            }
            ptx::tma_store_commit();
        }
    }
};

// How the FP32 TMA epilogue adds C: not at all (no C), by TMA loads into the staging buffers (C's rows
// 16-byte aligned, as TMA needs: the host encoded tma_c exactly then), in place by a TMA reduce-add into D
// (C is D), or from global memory into the registers (any other C; slow: serialized loads).
enum class CMode : uint32_t { kNone, kLoad, kReduce, kRegisters };

// kEnabled: the kernel stores FP32 D through TMA (otherwise every method but c_mode is unused, and c_mode is kNone).
// Staging: kNumBuffers buffers of WG_M rows x 128 bytes per math warpgroup, and a C-load barrier per buffer, found
// through the kernel's shared-memory map `s`: s.fp32_buffer(wg, buffer) and s.c_full(wg, buffer).
template <bool kEnabled, uint32_t WG_M, uint32_t BLOCK_N, uint32_t kNumWgmmaM, uint32_t kNumAccum, uint32_t kNumBuffers>
struct Fp32TmaEpilogue {
    using Accum = float[kNumWgmmaM][kNumAccum];
    static constexpr uint32_t kChunkCols = 32;           // 128-byte rows
    static constexpr uint32_t kChunkBytes = WG_M * 128;  // one math warpgroup's rows of a 32-column chunk
    // The staging ring: kNumBuffers buffers per math warpgroup, used chunk after chunk across tiles (with as many
    // buffers as chunks, or a divisor of the count, every tile starts at buffer 0 and `ring` stays 0).
    static constexpr uint32_t kNumChunks = BLOCK_N / kChunkCols;
    static constexpr uint32_t kRing = kEnabled ? kNumBuffers : 1;  // (1: no ring, unused)
    static constexpr bool kRingRotates = kNumChunks % kRing != 0;

    __device__ __forceinline__ static CMode c_mode(const void* c, uint32_t ldc, const void* d, uint32_t ldd) {
        if (!kEnabled || c == nullptr)
            return CMode::kNone;
        if (c == d && ldc == ldd)
            return CMode::kReduce;
        return reinterpret_cast<uintptr_t>(c) % 16 == 0 && ldc % 4 == 0 ? CMode::kLoad : CMode::kRegisters;
    }

    __device__ __forceinline__ static uint32_t buffer_of(uint32_t ring, uint32_t chunk) {
        return ((kRingRotates ? ring : 0) + chunk) % kRing;
    }

    // One thread of the warpgroup: TMA-load chunk `chunk` of C (this warpgroup's rows) into staging buffer
    // `buffer`, which the store that used it last has read. The box clips at M and N (zeros beyond).
    template <typename Storage>
    __device__ __forceinline__ static void load_c_chunk(const Storage& s, const TmaDescriptor* tma_c, uint32_t chunk,
                                                        uint32_t buffer, uint32_t m0, uint32_t n0, uint32_t group,
                                                        uint32_t wg_idx) {
        uint64_t* bar = s.c_full(wg_idx, buffer);
        ptx::mbarrier_arrive_expect_tx(bar, kChunkBytes);
        ptx::tma_load_3d(s.fp32_buffer(wg_idx, buffer), tma_c, bar, n0 + chunk * kChunkCols, m0, group);
    }

    // At a tile's start, one thread of the warpgroup: C's first kRing chunks (one per buffer: the ring is at most
    // a tile's chunk count) into the ring's buffers (they land during the K loop), once every store that used them
    // has read them.
    template <typename Storage>
    __device__ __forceinline__ static void load_c_prefetch(const Storage& s, const TmaDescriptor* tma_c, uint32_t ring,
                                                           uint32_t m0, uint32_t n0, uint32_t group, uint32_t wg_idx) {
        ptx::tma_store_wait_read<0>();
        #pragma unroll
        for (uint32_t chunk = 0; chunk < kRing; ++chunk)
            load_c_chunk(s, tma_c, chunk, buffer_of(ring, chunk), m0, n0, group, wg_idx);
    }

    // FP32 D through TMA, per 32-column chunk (128-byte rows) of this warpgroup's WG_M rows, through the staging
    // ring (128B-swizzled, as the box expects); one thread stores each chunk. The 3-D box (N, M, group) clips at
    // N and M. With a buffer per chunk (the host's choice where shared memory allows), the epilogue never waits
    // for its own stores: they drain during the next tile's K loop. By `c_mode`:
    //   kNone / kRegisters (C already in accum): wait until the store issued from the buffer kRing chunks
    //     ago has read it, write the chunk, fence, store.
    //   kReduce (C is D): the same, but TMA adds the chunk into D (reads, adds and writes each element once).
    //   kLoad: C's first kRing chunks were loaded at the tile's start (load_c_prefetch); per chunk, wait for its
    //     C, add it to the chunk in place in shared memory, fence, store, then (with fewer buffers than chunks,
    //     once that store has read the buffer) load C's chunk kRing further on into it.
    // `c_phases` holds the buffers' C-load barrier phases, `ring` the ring's position (advanced by the tile).
    template <typename Storage>
    __device__ __forceinline__ static void store(const Storage& s, Accum& accum, uint32_t m0, uint32_t n0,
                                                 uint32_t group, const TmaDescriptor* tma_d, const TmaDescriptor* tma_c,
                                                 CMode c_mode, uint32_t& c_phases, uint32_t& ring, uint32_t wg_idx,
                                                 uint32_t warp_in_wg, uint32_t lane) {
        const bool is_leader = threadIdx.x % 128 == 0;
        const bool load_c = c_mode == CMode::kLoad;
        #pragma unroll
        for (uint32_t chunk = 0; chunk < kNumChunks; ++chunk) {
            const uint32_t buffer_idx = buffer_of(ring, chunk);
            uint8_t* buffer = s.fp32_buffer(wg_idx, buffer_idx);
            if (load_c) {
                ptx::mbarrier_wait(s.c_full(wg_idx, buffer_idx), (c_phases >> buffer_idx) & 1);
                c_phases ^= 1u << buffer_idx;
            } else {
                if (is_leader)
                    ptx::tma_store_wait_read<kRing - 1>();
                ptx::named_barrier_sync(1 + wg_idx, 128);
            }
            #pragma unroll
            for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
                #pragma unroll
                for (uint32_t jj = 0; jj < kChunkCols / 8; ++jj) {
                    const uint32_t j = chunk * (kChunkCols / 8) + jj;
                    #pragma unroll
                    for (uint32_t half = 0; half < 2; ++half) {
                        const uint32_t row = accum_fragment_row(im, half, warp_in_wg, lane);
                        const uint32_t offset = ptx::swizzled_offset<128>(row * 128 + jj * 32 + (lane % 4) * 8);
                        float2* out = reinterpret_cast<float2*>(buffer + offset);
                        float2 value{accum[im][j * 4 + half * 2], accum[im][j * 4 + half * 2 + 1]};
                        if (load_c) {
                            const float2 c = *out;
                            value.x += c.x, value.y += c.y;
                        }
                        *out = value;
                    }
                }
            }
            ptx::fence_proxy_async_smem();
            ptx::named_barrier_sync(1 + wg_idx, 128);
            if (is_leader) {
                if (c_mode == CMode::kReduce)
                    ptx::tma_reduce_add_3d(tma_d, buffer, n0 + chunk * kChunkCols, m0, group);
                else
                    ptx::tma_store_3d(tma_d, buffer, n0 + chunk * kChunkCols, m0, group);
                ptx::tma_store_commit();
                if (load_c && chunk + kRing < kNumChunks) {
                    ptx::tma_store_wait_read<0>();
                    load_c_chunk(s, tma_c, chunk + kRing, buffer_idx, m0, n0, group, wg_idx);
                }
            }
        }
        if constexpr (kRingRotates)
            ring = (ring + kNumChunks) % kRing;
    }
};

}  // namespace deep_gemm
