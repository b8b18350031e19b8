// Host side of deep_gemm/include/deep_gemm/impls/sm90_tf32_hc_prenorm_gemm.cuh: config, render, load (once per
// device, N and stage count), launch on the current stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../../utils/exception.hpp"
#include "../heuristics/sm90_gemm_resources.hpp"

namespace dg::kernels {

// Mirrors deep_gemm::hc_prenorm (the kernel checks the shared memory it was rendered for with a static_assert)
constexpr uint32_t kHcPrenormBlockK = 64, kHcPrenormThreads = 256, kHcPrenormKSlices = 4;
// Stages per row-block height: 7 K blocks of 16 KB of A in flight per SM at BLOCK_M = 128, 11 of 8 KB at 64 (both
// near 192 KB of shared memory at N = 32)
constexpr uint32_t kHcPrenormDefaultStages = 8, kHcPrenormDefaultStages64 = 12;

inline uint32_t hc_prenorm_default_stages(uint32_t block_m) {
    return block_m == 64 ? kHcPrenormDefaultStages64 : kHcPrenormDefaultStages;
}

struct HcPrenormConfig {
    uint32_t n;           // columns of D: a multiple of 8 in [8, 32]
    uint32_t block_m;     // rows per CTA: 64 or 128
    uint32_t num_stages;  // ring stages
    uint32_t smem_bytes;
};

inline uint32_t hc_prenorm_smem_bytes(uint32_t n, uint32_t block_m, uint32_t num_stages) {
    const uint32_t per_stage = block_m * kHcPrenormBlockK * 2 + n * kHcPrenormBlockK * 4;
    // (the epilogue's per-slice partials and row sums, then the CTA's sums for its cluster peers)
    const uint32_t reduce = kHcPrenormKSlices * block_m * (n + 4) * 4 + kHcPrenormKSlices * block_m * 4 +
                            block_m * n * 4 + block_m * 4;
    return std::max(num_stages * per_stage, reduce);
}

// num_stages 0: the default of block_m
inline HcPrenormConfig hc_prenorm_config(uint32_t n, uint32_t block_m = 128, uint32_t num_stages = 0) {
    DG_CHECK_INPUT(n % 8 == 0 && n >= 8 && n <= 32, "sm90_tf32_hc_prenorm_gemm: N must be a multiple of 8 in [8, 32], "
                   "got {}", n);
    DG_CHECK_INPUT(block_m == 64 || block_m == 128, "sm90_tf32_hc_prenorm_gemm: block_m must be 64 or 128, got {}",
                   block_m);
    if (num_stages == 0)
        num_stages = hc_prenorm_default_stages(block_m);
    DG_CHECK_INPUT(num_stages >= 2 && num_stages <= 16, "sm90_tf32_hc_prenorm_gemm: num_stages must be in [2, 16], "
                   "got {}", num_stages);
    return {n, block_m, num_stages, hc_prenorm_smem_bytes(n, block_m, num_stages)};
}

inline jit::KernelSource render_sm90_tf32_hc_prenorm_gemm(const HcPrenormConfig& config) {
    return {"sm90_tf32_hc_prenorm_gemm",
            fmt::format("#include <deep_gemm/impls/sm90_tf32_hc_prenorm_gemm.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static_assert(hc_prenorm::HcPrenormSmem<{0}, {1}>::bytes({2}) == {3},\n"
                        "              \"host and kernel disagree on the shared memory\");\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&sm90_tf32_hc_prenorm_gemm_kernel<{0}, {1}, {2}>);\n"
                        "}}\n",
                        config.n, config.block_m, config.num_stages, config.smem_bytes)};
}

constexpr uint32_t kHcPrenormMaxClusterSplits = 8;  // the portable cluster size

// How a call's K splits are added: none (one split), inside a thread-block cluster (at most 8 splits, one launch), or
// by a second pass over a workspace of partials (a fixed-order sum over the splits: wider splits for small M)
enum class HcPrenormReduction { kNone, kCluster, kSecondPass };

struct HcPrenormPlan {
    uint32_t block_m;     // 64 or 128
    uint32_t num_splits;  // K splits per row block
    HcPrenormReduction reduction;
    int64_t cost_bytes;   // the model's estimate (bytes per SM), for tests and the design notes
};

// The cost model behind hc_prenorm_plan. The kernel is memory-bound, so the time is the busiest SM's bytes: its waves
// x (its K blocks x (the A rows it reads x 128 B + B's kN x 256 B, from L2 or HBM) + a fixed cost per CTA), plus, for
// a second pass, that launch and its workspace traffic spread over the SMs. The fixed costs are in bytes of one SM's
// share of the copy bandwidth (~25 GB/s on an H100): 48 KB ~ 2 us of ramp, prologue and epilogue per CTA; 64 KB ~
// 2.5 us for the second launch.
constexpr int64_t kHcPrenormCtaFixedBytes = 48 << 10, kHcPrenormSecondPassBytes = 64 << 10;

inline int64_t hc_prenorm_cost(int64_t m, int64_t n, int64_t k, int num_sms, uint32_t block_m, int64_t num_splits,
                               bool second_pass) {
    const int64_t m_blocks = (m + block_m - 1) / block_m, k_blocks = k / kHcPrenormBlockK;
    const int64_t waves = (m_blocks * num_splits + num_sms - 1) / num_sms;
    const int64_t blocks_per_cta = (k_blocks + num_splits - 1) / num_splits;
    const int64_t bytes_per_k_block = std::min<int64_t>(block_m, m) * kHcPrenormBlockK * 2 + n * kHcPrenormBlockK * 4;
    int64_t cost = waves * (blocks_per_cta * bytes_per_k_block + kHcPrenormCtaFixedBytes);
    if (second_pass)
        cost += kHcPrenormSecondPassBytes + 2 * num_splits * m * (n + 1) * 4 / num_sms;
    return cost;
}

// The tiling used when the caller gives no num_splits (the result is D [M, N] either way). Candidates: BLOCK_M 128 or
// 64 with 1..8 splits per row block added in a cluster (at least two K blocks per split), and the widest split that
// keeps one wave (more than 8, at least two K blocks each) added by a second pass. The model's cheapest wins; ties
// go to the earlier candidate (BLOCK_M 128 first, fewer splits first).
// batch_invariant (set_deterministic): the split count, the only thing that changes a row's reduction order, is
// fixed by K alone (min(8, K / 64) splits added in a cluster), so a row's result does not depend on M; only BLOCK_M
// is chosen.
inline HcPrenormPlan hc_prenorm_plan(int64_t m, int64_t n, int64_t k, int num_sms, bool batch_invariant = false) {
    DG_CHECK(m >= 1 && k >= kHcPrenormBlockK && k % kHcPrenormBlockK == 0 && num_sms >= 1,
             "hc_prenorm_plan: m = {}, k = {}, num_sms = {}", m, k, num_sms);
    const int64_t k_blocks = k / kHcPrenormBlockK;
    const auto reduction_of = [](int64_t s) {
        return s > 1 ? HcPrenormReduction::kCluster : HcPrenormReduction::kNone;
    };
    HcPrenormPlan best{0, 0, HcPrenormReduction::kNone, INT64_MAX};
    const auto consider = [&](uint32_t block_m, int64_t s, HcPrenormReduction reduction) {
        const int64_t cost =
            hc_prenorm_cost(m, n, k, num_sms, block_m, s, reduction == HcPrenormReduction::kSecondPass);
        if (cost < best.cost_bytes)
            best = {block_m, static_cast<uint32_t>(s), reduction, cost};
    };
    if (batch_invariant) {
        const int64_t s = std::min<int64_t>(kHcPrenormMaxClusterSplits, k_blocks);
        for (uint32_t block_m : {128u, 64u})
            consider(block_m, s, reduction_of(s));
        return best;
    }
    const int64_t max_cluster_splits = std::clamp<int64_t>(k_blocks / 2, 1, kHcPrenormMaxClusterSplits);
    for (uint32_t block_m : {128u, 64u}) {
        for (int64_t s = 1; s <= max_cluster_splits; ++s)
            consider(block_m, s, reduction_of(s));
    }
    for (uint32_t block_m : {128u, 64u}) {
        const int64_t m_blocks = (m + block_m - 1) / block_m;
        const int64_t s = std::min<int64_t>(k_blocks / 2, num_sms / m_blocks);
        if (s > kHcPrenormMaxClusterSplits)
            consider(block_m, s, HcPrenormReduction::kSecondPass);
    }
    return best;
}

// a BF16 [m, K] (row stride lda elements), b FP32 [n, K] (row stride ldb); m >= 1, K a positive multiple of 64,
// 1 <= num_splits <= K / 64 (checked by the API), block_m 64 or 128. reduce_in_cluster = false: d FP32
// [num_splits, m, n] and sqr_sum [num_splits, m] get the partials. reduce_in_cluster = true (num_splits <= 8): d [m, n]
// and sqr_sum [m] get their sums (each row block's splits form one cluster); with fit_one_wave, when fewer clusters of
// that size fit on the device at once than there are row blocks, the split count is lowered one at a time until they
// do, so that no cluster waits for a second wave (never under set_deterministic: the split count must not depend on
// M). Both contiguous.
inline void launch_sm90_tf32_hc_prenorm_gemm(int device_index, const void* a, int64_t lda, const float* b, int64_t ldb,
                                             float* d, float* sqr_sum, int64_t m, int64_t n, int64_t k,
                                             uint32_t block_m, int64_t num_splits, bool reduce_in_cluster,
                                             bool fit_one_wave = true) {
    DG_CHECK(m >= 1 && m <= INT32_MAX && k % kHcPrenormBlockK == 0 && k > 0 && num_splits >= 1 &&
             num_splits <= k / kHcPrenormBlockK && (!reduce_in_cluster || num_splits <= kHcPrenormMaxClusterSplits),
             "tf32_hc_prenorm_gemm: m = {}, k = {}, num_splits = {}", m, k, num_splits);
    const int64_t m_blocks = (m + block_m - 1) / block_m;
    DG_CHECK_INPUT(m_blocks <= 65535, "tf32_hc_prenorm_gemm: a has M = {} rows, at most {} are supported", m,
                   65535 * block_m);
    DG_CHECK_INPUT(num_splits <= 65535, "tf32_hc_prenorm_gemm: num_splits must be at most 65535, got {}", num_splits);
    const auto config = hc_prenorm_config(static_cast<uint32_t>(n), block_m);
    static jit::KernelCache<std::tuple<int, uint32_t, uint32_t, uint32_t>> kernels;
    const auto stream = jit::current_stream(device_index);
    const jit::Kernel& kernel =
        kernels.get({device_index, config.n, config.block_m, config.num_stages}, [&]() -> const jit::Kernel& {
            const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
            return jit::get_kernel(render_sm90_tf32_hc_prenorm_gemm(config), arch, device_index, stream);
        });
    jit::LaunchConfig launch;
    launch.num_threads = kHcPrenormThreads;
    launch.smem_bytes = config.smem_bytes;
    launch.stream = stream;
    if (reduce_in_cluster) {
        // (the occupancy query per device, N, BLOCK_M and cluster size once: it is a host call into the driver)
        static std::mutex mutex;
        static std::map<std::tuple<int, uint32_t, uint32_t, int64_t>, int> max_clusters;
        while (fit_one_wave && num_splits > 1) {
            launch.cluster_dim = static_cast<unsigned int>(num_splits);
            launch.grid = {static_cast<unsigned int>(num_splits), 1, 1};
            std::lock_guard lock(mutex);
            const auto key = std::make_tuple(device_index, config.n, config.block_m, num_splits);
            auto it = max_clusters.find(key);
            if (it == max_clusters.end())
                it = max_clusters.emplace(key, kernel.max_active_clusters(device_index, launch)).first;
            if (it->second >= m_blocks)
                break;
            --num_splits;
        }
        launch.cluster_dim = static_cast<unsigned int>(num_splits);
    }
    launch.grid = {static_cast<unsigned int>(num_splits), static_cast<unsigned int>(m_blocks), 1};
    const auto* a_ptr = static_cast<const uint8_t*>(a);
    uint64_t lda_arg = static_cast<uint64_t>(lda), ldb_arg = static_cast<uint64_t>(ldb);
    auto m_arg = static_cast<uint32_t>(m), k_blocks_arg = static_cast<uint32_t>(k / kHcPrenormBlockK);
    kernel.launch(device_index, launch, a_ptr, lda_arg, b, ldb_arg, d, sqr_sum, m_arg, k_blocks_arg);
}

}  // namespace dg::kernels
