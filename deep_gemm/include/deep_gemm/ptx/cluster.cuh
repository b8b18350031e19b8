// Thread-block-cluster helpers: rank, cluster-wide barrier, arrivals on a peer CTA's mbarrier, stores into a peer's
// shared memory (distributed shared memory) and the cluster-scope ordering around them.
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>

namespace deep_gemm::ptx {

__device__ __forceinline__ uint32_t cluster_cta_rank() {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// All threads of all CTAs of the cluster (not .aligned: callers may come from divergent paths); orders shared-memory writes (barrier init) before it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// The address, in the cluster's shared window, of the shared-memory address `addr` of this CTA mapped to CTA
// `cta_rank` (the same offset in that CTA).
__device__ __forceinline__ uint32_t map_to_cta(uint32_t addr, uint32_t cta_rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(cta_rank));
    return remote;
}

// Arrive on the mbarrier at the same shared-memory offset as `bar`, in CTA `cta_rank` of the cluster.
// Default semantics (release at CTA scope), on purpose: the callers only announce that their reads of
// a stage are complete (wgmma.wait_group has returned), which needs no cluster-scope fence. Asking
// for `.release.cluster` makes NVCC emit MEMBAR.ALL.GPU + ERRBAR before every arrival, which cost
// the multicast kernel about half its speed (measured on the H200). A caller that publishes writes with
// the arrival (split-K's exchange) issues fence_acq_rel_cluster before it.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(map_to_cta(smem_addr(bar), cta_rank)) : "memory");
}

// Store two floats at a cluster shared-memory address (from map_to_cta: this CTA's or a peer's).
__device__ __forceinline__ void st_cluster_v2(uint32_t addr, float x, float y) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// Orders this thread's earlier memory accesses (peers' shared memory included) before its later ones, for every
// thread of the cluster: what a later arrival then announces (release), or what an earlier wait saw (acquire).
__device__ __forceinline__ void fence_acq_rel_cluster() {
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
}

// Block until the phase with parity `phase` of this CTA's mbarrier has completed, with acquire semantics at
// cluster scope: the peers' writes that their arrivals released are then visible.
__device__ __forceinline__ void mbarrier_wait_cluster(uint64_t* bar, uint32_t phase) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}" ::"r"(smem_addr(bar)), "r"(phase) : "memory");
}

}  // namespace deep_gemm::ptx
