// Config choice for the SM90 FP8 GEMM (pure function of the problem and the device: unit-tested on
// the CPU through `_C.get_fp8_gemm_config`, printed with DG_PRINT_CONFIGS=1).
//
// Model: the kernel is persistent, so time ~ waves x per-tile cost, with
//   waves = ceil(#tiles / #SMs)   and   per-tile cost ~ BLOCK_M x (BLOCK_N + 32)
// (with multicast, tiles would go in pairs along M to 2-CTA clusters sharing B, and waves count
// pairs over #SMs / 2; see multicast_enabled())
// (the +32 stands for what every tile pays regardless of its width: loading A, promotion
// bookkeeping, the epilogue). Among the candidates that fit the registers and shared memory, the
// cheapest wins; ties go to the wider tile. Stages: as many as shared memory holds (at most 8).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "../../utils/env.hpp"
#include "../../utils/exception.hpp"

namespace dg::kernels {

struct Fp8GemmConfig {
    // Compile-time shape (0: given at run time)
    uint32_t shape_m = 0, shape_n = 0, shape_k = 0;
    uint32_t block_m = 128, block_n = 128;
    uint32_t num_stages = 4;
    uint32_t num_math_warpgroups = 2;
    uint32_t num_group_n = 8;
    uint32_t num_multicast = 1;       // CTAs per cluster sharing one operand through TMA multicast
    bool is_multicast_on_a = false;   // the shared operand: A (pairs along N) or B (pairs along M)
    uint32_t store_chunk_n = 64;
    bool use_tma_store = true;
    uint32_t num_sms = 132;
    uint32_t smem_bytes = 0;

    uint32_t num_threads() const { return (num_math_warpgroups + 1) * 128; }
    std::string describe() const {
        return fmt::format("BLOCK_M={} BLOCK_N={} stages={} math_wgs={} group_n={} multicast={}{} store_chunk_n={} "
                           "tma_store={} sms={} smem={} compiled_mnk=({},{},{})", block_m, block_n, num_stages,
                           num_math_warpgroups, num_group_n, num_multicast, num_multicast > 1 ? (is_multicast_on_a ? "(A)" : "(B)") : "",
                           store_chunk_n, use_tma_store, num_sms, smem_bytes, shape_m, shape_n, shape_k);
    }
};

constexpr uint32_t kSm90MaxSmemBytes = 232448;  // 227 KiB opt-in per block

// TMA multicast of B across 2-CTA clusters (tile pairs along M): whether the heuristic may use it.
// DG_FP8_GEMM_MULTICAST=0 / =1 forces it off / allows it; unset, kMulticastByDefault decides
// (docs/perf/h200.md has the measurements behind it). The compile-only entry point builds any variant.
// (read by the caller, so that get_fp8_gemm_config stays a pure function of its arguments)
constexpr bool kMulticastByDefault = false;
inline bool multicast_enabled() {
    return get_env("DG_FP8_GEMM_MULTICAST").empty() ? kMulticastByDefault : get_env_flag("DG_FP8_GEMM_MULTICAST");
}

// Shared memory the kernel needs (mirrors Sm90Fp8Gemm1d2d::SMEM_SIZE).
inline uint32_t fp8_gemm_smem_bytes(uint32_t block_m, uint32_t block_n, uint32_t num_stages, bool use_tma_store) {
    const uint32_t d = use_tma_store ? block_m * block_n * 2 : 0;
    const uint32_t sfa = (block_m * 4 + 127) / 128 * 128;
    return 1024 + d + num_stages * (block_m * 128 + block_n * 128 + sfa + 8 + 16);  // + sfb pair + 2 barriers
}

// Widest 16/32/64-column chunk dividing BLOCK_N (TMA store box with a 32/64/128-byte swizzle).
inline uint32_t fp8_gemm_store_chunk(uint32_t block_n) {
    return block_n % 64 == 0 ? 64 : block_n % 32 == 0 ? 32 : 16;
}

// A tile of BLOCK_N columns starting at any multiple of BLOCK_N touches at most two 128-column
// scale blocks: the offset inside a scale block is a multiple of gcd(BLOCK_N, 128).
inline bool fp8_gemm_block_n_fits_sfb(uint32_t block_n) {
    uint32_t a = block_n, b = 128;
    while (b != 0) {
        const uint32_t t = a % b;
        a = b, b = t;
    }
    return block_n + (128 - a) <= 256;
}

// Work units of the persistent grid: tiles, or with multicast the tile pairs sharing one operand
// (pairs along N share A, pairs along M share B), as the kernel's GemmScheduler walks them.
inline uint64_t fp8_gemm_num_units(uint64_t m_blocks, uint64_t n_blocks, uint32_t num_multicast, bool is_multicast_on_a) {
    if (num_multicast == 1)
        return m_blocks * n_blocks;
    return is_multicast_on_a ? m_blocks * ((n_blocks + 1) / 2) : ((m_blocks + 1) / 2) * n_blocks;
}

// Accumulator registers per math thread: partial + accumulated, per 64-row slice.
inline bool fp8_gemm_fits_registers(uint32_t block_m, uint32_t block_n, uint32_t num_math_warpgroups) {
    const uint32_t slices = block_m / num_math_warpgroups / 64;
    return slices * block_n <= 160;
}

inline Fp8GemmConfig get_fp8_gemm_config(uint32_t m, uint32_t n, uint32_t k, uint32_t num_sms, bool use_tma_store,
                                         bool compile_m, bool compile_n, bool compile_k, bool allow_multicast) {
    DG_CHECK_INPUT(num_sms > 0, "num_sms must be positive");
    Fp8GemmConfig best;
    double best_cost = -1;
    const uint32_t block_ms[] = {64, 128, 256};
    for (const uint32_t block_m: block_ms) {
        // Small M: one 64-row math warpgroup; otherwise two warpgroups
        if (block_m == 64 && m > 64)
            continue;
        if (block_m == 256 && m <= 128)
            continue;
        const uint32_t wgs = block_m == 64 ? 1 : 2;
        for (uint32_t block_n = 16; block_n <= 256; block_n += 16) {
            if (!fp8_gemm_block_n_fits_sfb(block_n) || !fp8_gemm_fits_registers(block_m, block_n, wgs))
                continue;
            if (fp8_gemm_smem_bytes(block_m, block_n, 2, use_tma_store) > kSm90MaxSmemBytes)
                continue;
            // Pairs of tiles along M could share B through a 2-CTA cluster; the heuristic does not pick
            // it while the multicast kernel measures slower (docs/perf/h200.md, 2026-12-02: about 2x
            // slower at M = 4096, cause not found yet), see multicast_enabled().
            const uint64_t m_blocks = (m + block_m - 1) / block_m, n_blocks = (n + block_n - 1) / block_n;
            const bool multicast = allow_multicast && m_blocks >= 2 && num_sms >= 2;
            const uint64_t units = fp8_gemm_num_units(m_blocks, n_blocks, multicast ? 2 : 1, false);
            const uint64_t slots = multicast ? num_sms / 2 : num_sms;
            const uint64_t waves = (units + slots - 1) / slots;
            const double cost = double(waves) * block_m * (block_n + 32);
            const bool better = best_cost < 0 || cost < best_cost ||
                                (cost == best_cost && block_m * block_n > best.block_m * best.block_n);
            if (better) {
                best_cost = cost;
                best.block_m = block_m;
                best.block_n = block_n;
                best.num_math_warpgroups = wgs;
                best.num_multicast = multicast ? 2 : 1;
                best.is_multicast_on_a = false;
            }
        }
    }
    DG_CHECK(best_cost >= 0, "no FP8 GEMM config fits m={} n={} k={}", m, n, k);

    best.use_tma_store = use_tma_store;
    best.store_chunk_n = fp8_gemm_store_chunk(best.block_n);
    best.num_stages = 2;
    while (best.num_stages < 8 &&
           fp8_gemm_smem_bytes(best.block_m, best.block_n, best.num_stages + 1, use_tma_store) <= kSm90MaxSmemBytes)
        ++best.num_stages;
    best.smem_bytes = fp8_gemm_smem_bytes(best.block_m, best.block_n, best.num_stages, use_tma_store);
    best.num_sms = num_sms;
    best.shape_m = compile_m ? m : 0;
    best.shape_n = compile_n ? n : 0;
    best.shape_k = compile_k ? k : 0;
    return best;
}

}  // namespace dg::kernels
