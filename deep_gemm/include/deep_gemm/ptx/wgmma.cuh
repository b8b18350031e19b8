// wgmma helpers: shared-memory matrix descriptors and the fence/commit/wait protocol.
// The per-N instructions themselves are in wgmma_ops.cuh (generated).
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>
#include <deep_gemm/ptx/wgmma_ops.cuh>

namespace deep_gemm::ptx {

// Descriptor of a K-major tile stored with the 128-byte swizzle, as TMA writes it: rows of 128 bytes,
// 8-row groups 1024 bytes apart (stride byte offset), the tile 1024-byte aligned (base offset 0).
// The leading byte offset is unused for swizzled K-major layouts. To step along K inside the
// 128-byte row, add the byte offset to `smem` (the hardware swizzles the final address).
__device__ __forceinline__ uint64_t make_smem_desc_k_major_sw128(const void* smem) {
    const uint64_t addr = smem_addr(smem);
    uint64_t desc = 0;
    desc |= (addr & 0x3ffffull) >> 4;          // bits  0-13: start address >> 4
    desc |= uint64_t(1) << 16;                 // bits 16-29: leading byte offset >> 4 (unused)
    desc |= uint64_t(1024 >> 4) << 32;         // bits 32-45: stride byte offset >> 4
    desc |= uint64_t(1) << 62;                 // bits 62-63: swizzle mode 1 = 128B
    return desc;
}

// The same for a K-major tile whose rows are `kRowBytes` = 128, 64 or 32 bytes, stored with the matching
// swizzle (TMA box inner extent = kRowBytes): 8-row groups 8 * kRowBytes apart, the tile aligned to
// 8 * kRowBytes. Swizzle mode field: 1 = 128B, 2 = 64B, 3 = 32B.
template <uint32_t kRowBytes>
__device__ __forceinline__ uint64_t make_smem_desc_k_major_swizzled(const void* smem) {
    static_assert(kRowBytes == 128 || kRowBytes == 64 || kRowBytes == 32, "rows of 128, 64 or 32 bytes");
    constexpr uint64_t kMode = kRowBytes == 128 ? 1 : kRowBytes == 64 ? 2 : 3;
    const uint64_t addr = smem_addr(smem);
    uint64_t desc = 0;
    desc |= (addr & 0x3ffffull) >> 4;             // bits  0-13: start address >> 4
    desc |= uint64_t(1) << 16;                    // bits 16-29: leading byte offset >> 4 (unused)
    desc |= uint64_t(8 * kRowBytes >> 4) << 32;   // bits 32-45: stride byte offset >> 4
    desc |= kMode << 62;                          // bits 62-63: swizzle mode
    return desc;
}

// Byte offset of `logical` (row-major, rows of kRowBytes = 128, 64 or 32 bytes) in a tile stored with the matching
// swizzle, for generic-proxy reads and writes of such a tile: the 16-byte chunk index (bits 4 and up) XOR the row
// bits 7 and up (Swizzle<3, 4, 3> / <2, 4, 3> / <1, 4, 3>)
template <uint32_t kRowBytes>
__device__ __forceinline__ uint32_t swizzled_offset(uint32_t logical) {
    static_assert(kRowBytes == 128 || kRowBytes == 64 || kRowBytes == 32, "rows of 128, 64 or 32 bytes");
    return logical ^ (((logical >> 7) & (kRowBytes / 16 - 1)) << 4);
}

// Descriptor of an MN-major tile of 16-bit elements, stored as TMA writes boxes of 64 (MN) x K rows with the
// 128-byte swizzle: each K row holds 64 consecutive MN elements (128 bytes), 8-row groups along K are 1024
// bytes apart (stride byte offset), and the next 64 MN elements sit `kChunkBytes` further (leading byte
// offset: one box of 64 x BLOCK_K). The tile is 1024-byte aligned. To step along K, add 16 rows x 128 bytes
// per k16 step to `smem`.
template <uint32_t kChunkBytes>
__device__ __forceinline__ uint64_t make_smem_desc_mn_major_sw128(const void* smem) {
    static_assert(kChunkBytes % 1024 == 0 && (kChunkBytes >> 4) < (1u << 14), "a 14-bit leading byte offset");
    const uint64_t addr = smem_addr(smem);
    uint64_t desc = 0;
    desc |= (addr & 0x3ffffull) >> 4;              // bits  0-13: start address >> 4
    desc |= uint64_t(kChunkBytes >> 4) << 16;      // bits 16-29: leading byte offset >> 4 (next 64 MN elements)
    desc |= uint64_t(1024 >> 4) << 32;             // bits 32-45: stride byte offset >> 4 (next 8 K rows)
    desc |= uint64_t(1) << 62;                     // bits 62-63: swizzle mode 1 = 128B
    return desc;
}

// The descriptor of the tile `bytes` further in shared memory (a multiple of 16): the start address
// field holds address >> 4 in 14 bits, and every shared-memory address is below 2^18, so the add
// cannot carry out of the field. Lets a loop build its descriptors with one integer add from a base.
__device__ __forceinline__ uint64_t advance_smem_desc(uint64_t desc, uint32_t bytes) {
    return desc + (bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int kNumPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kNumPending) : "memory");
}

// Tell the compiler the accumulator registers are live across the asynchronous wgmma.
__device__ __forceinline__ void wgmma_fence_operand(float& reg) {
    asm volatile("" : "+f"(reg)::"memory");
}

}  // namespace deep_gemm::ptx
