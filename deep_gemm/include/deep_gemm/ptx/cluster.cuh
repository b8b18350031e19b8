// Thread-block-cluster helpers: rank, cluster-wide barrier, and arrivals on a peer CTA's mbarrier.
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

// Arrive on the mbarrier at the same shared-memory offset as `bar`, in CTA `cta_rank` of the cluster.
// Default semantics (release at CTA scope), on purpose: the callers only announce that their reads of
// a stage are complete (wgmma.wait_group has returned), which needs no cluster-scope fence. Asking
// for `.release.cluster` makes NVCC emit MEMBAR.ALL.GPU + ERRBAR before every arrival, which cost
// the multicast kernel about half its speed (docs/perf/h200.md, 2026-12-02).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}"
        ::"r"(smem_addr(bar)), "r"(cta_rank) : "memory");
}

}  // namespace deep_gemm::ptx
