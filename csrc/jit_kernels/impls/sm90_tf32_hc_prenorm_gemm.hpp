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
constexpr uint32_t kHcPrenormBlockM = 128, kHcPrenormBlockK = 64, kHcPrenormThreads = 256, kHcPrenormKSlices = 4;
constexpr uint32_t kHcPrenormDefaultStages = 8;  // 7 K blocks of 16 KB of A in flight per SM

struct HcPrenormConfig {
    uint32_t n;           // columns of D: a multiple of 8 in [8, 32]
    uint32_t num_stages;  // ring stages
    uint32_t smem_bytes;
};

inline uint32_t hc_prenorm_smem_bytes(uint32_t n, uint32_t num_stages) {
    const uint32_t per_stage = kHcPrenormBlockM * kHcPrenormBlockK * 2 + n * kHcPrenormBlockK * 4;
    // (the epilogue's per-slice partials and row sums, then the CTA's sums for its cluster peers)
    const uint32_t reduce = kHcPrenormKSlices * kHcPrenormBlockM * (n + 4) * 4 +
                            kHcPrenormKSlices * kHcPrenormBlockM * 4 + kHcPrenormBlockM * n * 4 + kHcPrenormBlockM * 4;
    return std::max(num_stages * per_stage, reduce);
}

inline HcPrenormConfig hc_prenorm_config(uint32_t n, uint32_t num_stages = kHcPrenormDefaultStages) {
    DG_CHECK_INPUT(n % 8 == 0 && n >= 8 && n <= 32, "sm90_tf32_hc_prenorm_gemm: N must be a multiple of 8 in [8, 32], "
                   "got {}", n);
    DG_CHECK_INPUT(num_stages >= 2 && num_stages <= 16, "sm90_tf32_hc_prenorm_gemm: num_stages must be in [2, 16], "
                   "got {}", num_stages);
    return {n, num_stages, hc_prenorm_smem_bytes(n, num_stages)};
}

inline jit::KernelSource render_sm90_tf32_hc_prenorm_gemm(const HcPrenormConfig& config) {
    return {"sm90_tf32_hc_prenorm_gemm",
            fmt::format("#include <deep_gemm/impls/sm90_tf32_hc_prenorm_gemm.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static_assert(hc_prenorm::HcPrenormSmem<{0}>::bytes({1}) == {2},\n"
                        "              \"host and kernel disagree on the shared memory\");\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&sm90_tf32_hc_prenorm_gemm_kernel<{0}, {1}>);\n"
                        "}}\n",
                        config.n, config.num_stages, config.smem_bytes)};
}

constexpr uint32_t kHcPrenormMaxClusterSplits = 8;  // the portable cluster size

// The split count used when the caller gives none, reduced in a cluster: enough CTAs (row blocks x splits) to give
// every SM one, at most 8 (a portable cluster), at least two K blocks (128 of K) per split; 1 when the row blocks
// alone fill half the SMs or more.
inline uint32_t hc_prenorm_auto_splits(int64_t m, int64_t k, int num_sms) {
    const int64_t m_blocks = (m + kHcPrenormBlockM - 1) / kHcPrenormBlockM, k_blocks = k / kHcPrenormBlockK;
    if (m_blocks <= 0 || m_blocks * 2 >= num_sms)
        return 1;
    const int64_t by_sms = num_sms / m_blocks, by_k = std::max<int64_t>(1, k_blocks / 2);
    return static_cast<uint32_t>(std::clamp<int64_t>(std::min(by_sms, by_k), 1, kHcPrenormMaxClusterSplits));
}

// a BF16 [m, K] (row stride lda elements), b FP32 [n, K] (row stride ldb); m >= 1, K a positive multiple of 64,
// 1 <= num_splits <= K / 64 (checked by the API). reduce_in_cluster = false: d FP32 [num_splits, m, n] and sqr_sum
// [num_splits, m] get the partials. reduce_in_cluster = true (num_splits <= 8): d [m, n] and sqr_sum [m] get their
// sums (each row block's splits form one cluster); when fewer clusters of that size fit on the device at once than
// there are row blocks, the split count is lowered one at a time until they do, so that no cluster waits for a
// second wave. Both contiguous.
inline void launch_sm90_tf32_hc_prenorm_gemm(int device_index, const void* a, int64_t lda, const float* b, int64_t ldb,
                                             float* d, float* sqr_sum, int64_t m, int64_t n, int64_t k,
                                             int64_t num_splits, bool reduce_in_cluster) {
    DG_CHECK(m >= 1 && m <= INT32_MAX && k % kHcPrenormBlockK == 0 && k > 0 && num_splits >= 1 &&
             num_splits <= k / kHcPrenormBlockK && (!reduce_in_cluster || num_splits <= kHcPrenormMaxClusterSplits),
             "tf32_hc_prenorm_gemm: m = {}, k = {}, num_splits = {}", m, k, num_splits);
    const int64_t m_blocks = (m + kHcPrenormBlockM - 1) / kHcPrenormBlockM;
    DG_CHECK_INPUT(m_blocks <= 65535, "tf32_hc_prenorm_gemm: a has M = {} rows, at most {} are supported", m,
                   65535 * kHcPrenormBlockM);
    DG_CHECK_INPUT(num_splits <= 65535, "tf32_hc_prenorm_gemm: num_splits must be at most 65535, got {}", num_splits);
    const auto config = hc_prenorm_config(static_cast<uint32_t>(n));
    static jit::KernelCache<std::tuple<int, uint32_t, uint32_t>> kernels;
    const auto stream = jit::current_stream(device_index);
    const jit::Kernel& kernel = kernels.get({device_index, config.n, config.num_stages}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_sm90_tf32_hc_prenorm_gemm(config), arch, device_index, stream);
    });
    jit::LaunchConfig launch;
    launch.num_threads = kHcPrenormThreads;
    launch.smem_bytes = config.smem_bytes;
    launch.stream = stream;
    if (reduce_in_cluster) {
        // (the occupancy query per device, N and cluster size once: it is a host call into the driver)
        static std::mutex mutex;
        static std::map<std::tuple<int, uint32_t, int64_t>, int> max_clusters;
        while (num_splits > 1) {
            launch.cluster_dim = static_cast<unsigned int>(num_splits);
            launch.grid = {static_cast<unsigned int>(num_splits), 1, 1};
            std::lock_guard lock(mutex);
            const auto key = std::make_tuple(device_index, config.n, num_splits);
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
