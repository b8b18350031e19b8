// What the SM90 GEMM launcher plans a call with, without tensors or a device: the problem as the launcher sees it
// (GemmProblem: every property of a call that the kernel's config depends on), the config it picks for it
// (plan_gemm_config), and the inputs the API layer and the launcher derive from tensors (whether D can be stored by
// TMA, the masked layout's planning rows). The launcher (impls/sm90_gemm.hpp) and the ahead-of-time builds
// (`deep_gemm.precompile`, through `_C.render_gemm_kernels`) both call these, so that a precompiled kernel is
// exactly the one a launch renders and looks up.
#pragma once

#include <algorithm>
#include <cstdint>

#include "sm90_gemm.hpp"
#include "sm90_gemm_resources.hpp"
#include "sm90_gemm_types.hpp"

namespace dg::kernels {

struct GemmProblem {
    uint32_t m = 0, n = 0, k = 0;  // m: A's rows (masked: G x max_m; k-grouped: M of one group); k-grouped: k unused
    uint32_t num_sms = 0;          // SMs the kernels may use (set_num_sms' limit, else the device's)
    bool use_tma_store = true;     // D's rows and address allow a TMA store (dense_tma_store_fits / k_grouped_...)
    GemmOperands operands;
    bool compile_m = false, compile_n = false, compile_k = false;
    GemmType gemm_type = GemmType::kNormal;
    uint32_t num_groups = 1;
    uint32_t grouped_alignment = 128;  // contiguous: the segments' alignment; masked: masked_block_alignment
    uint32_t config_m = 0;             // the rows the heuristic plans for instead of m (masked, k-grouped), else 0
};

// K-grouped GEMMs are planned for this K per group: K changes from call to call, the plan (and kernel) does not.
constexpr uint32_t kKGroupedPlanK = 4096;

// The cluster capacity a plan may use on a device whose measured capacity is `device_capacity` when the GEMMs get
// `num_sms` of its SMs (set_num_sms may give them fewer than the device has).
inline ClusterCapacity capacity_for(const ClusterCapacity& device_capacity, uint32_t num_sms) {
    ClusterCapacity capacity = device_capacity;
    for (uint32_t size = 1; size <= kMaxSplits; ++size)
        capacity.ctas[size] = std::min(capacity.ctas[size], num_sms / size * size);
    return capacity;
}

// The config the launcher renders for `p`. `capacity`: the device's measured cluster capacity (capacity_for), or
// null before it is measured (the first GEMM planned on a device), which estimates whole clusters of num_sms.
// `forced`: DG_TUNE's section for these operands (gemm_overrides_for), read by the launcher when it plans.
inline GemmConfig plan_gemm_config(const GemmProblem& p, const ClusterCapacity* capacity, const GemmOverrides& forced) {
    const bool k_grouped = p.gemm_type == GemmType::kKGroupedContiguous;
    GemmConfig config = get_gemm_config(p.config_m ? p.config_m : p.m, p.n, k_grouped ? kKGroupedPlanK : p.k, p.num_sms,
                                        p.use_tma_store, p.compile_m, p.compile_n, p.compile_k,
                                        forced.allow_multicast(), forced, p.operands, p.gemm_type, p.grouped_alignment,
                                        capacity, p.gemm_type == GemmType::kMGroupedMasked ? p.num_groups : 1);
    config.shape_m = p.compile_m ? p.m : 0;  // (the real row count, also when config_m planned the config)
    if (k_grouped)
        config.max_k_groups = k_grouped_capacity(p.num_groups);
    return config;
}

// Dense and m-grouped GEMMs: D goes through a TMA store when the epilogue allows it and its rows, row length and
// address are 16-byte aligned (TMA stores whole 16-byte units: a row length that ends inside one would spill past N).
inline bool dense_tma_store_fits(const GemmOperands& operands, uint64_t n, uint64_t d_element_size, int64_t ldd_bytes,
                                 uintptr_t d_address) {
    return !operands.direct_store() && ldd_bytes % 16 == 0 && (n * d_element_size) % 16 == 0 && d_address % 16 == 0;
}

// K-grouped GEMMs: FP32 D [G, M, N], contiguous, so rows of N floats.
inline bool k_grouped_tma_store_fits(uint64_t n, uintptr_t d_address) { return n % 4 == 0 && d_address % 16 == 0; }

// The masked layout's BLOCK_M must divide the rows per group (max_m, a multiple of 64).
inline uint32_t masked_block_alignment(int64_t max_m) { return max_m % 128 == 0 ? 128 : 64; }

// The rows a masked GEMM is planned for: groups x expected_m (expected_m capped at max_m).
inline uint32_t masked_config_m(int64_t num_groups, int64_t expected_m, int64_t max_m) {
    return static_cast<uint32_t>(std::min<int64_t>(num_groups * std::min(expected_m, max_m), INT32_MAX));
}

}  // namespace dg::kernels
