// TMA (cp.async.bulk.tensor) wrappers: 2-D and 3-D tile loads completing on an mbarrier, 2-D and 3-D tile
// stores (and reduce-adds) from shared memory with bulk-group completion, and the proxy fence that orders them.
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>

namespace deep_gemm::ptx {

__device__ __forceinline__ void prefetch_tma_descriptor(const TmaDescriptor* desc) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

// Load the box at (x = inner coordinate, y = outer coordinate) into `dst`; completes on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor* desc, uint64_t* bar, int32_t x, int32_t y) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(x), "r"(y)
        : "memory");
}

// Load the 3-D box at (x, y, z) (innermost first) into `dst`; completes on `bar`.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor* desc, uint64_t* bar, int32_t x, int32_t y,
                                            int32_t z) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(x), "r"(y), "r"(z)
        : "memory");
}

// Load the box at (x, y) into `dst` of every CTA in `cta_mask` (same shared-memory offset); each
// destination CTA's mbarrier at `bar`'s offset receives the completed bytes.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TmaDescriptor* desc, uint64_t* bar, int32_t x,
                                                      int32_t y, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(x), "r"(y),
          "h"(cta_mask)
        : "memory");
}

// Store the box at (x, y) from `src`; out-of-bounds parts of the box are not written.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* desc, const void* src, int32_t x, int32_t y) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 ::"l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(src)), "r"(x), "r"(y) : "memory");
}

// Store the 3-D box at (x, y, z) from `src`; out-of-bounds parts are not written.
__device__ __forceinline__ void tma_store_3d(const TmaDescriptor* desc, const void* src, int32_t x, int32_t y, int32_t z) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
                 ::"l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(src)), "r"(x), "r"(y), "r"(z) : "memory");
}

// Add the 3-D box at (x, y, z) from `src` into global memory (element type from the map; each element one
// read-add-write done by TMA); out-of-bounds parts are left alone.
__device__ __forceinline__ void tma_reduce_add_3d(const TmaDescriptor* desc, const void* src, int32_t x, int32_t y,
                                                  int32_t z) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
                 ::"l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(src)), "r"(x), "r"(y), "r"(z) : "memory");
}

__device__ __forceinline__ void tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until all but the newest kPending committed store groups have finished reading shared memory (it
// may be rewritten).
template <int kPending = 0>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Order this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace deep_gemm::ptx
