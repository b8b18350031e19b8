// What a candidate config of the SM90 GEMM kernel needs and whether it fits: shared memory and stages (the kernel's
// rule, deep_gemm::sm90_gemm_smem), the FP32 staging ring, split-K's exchange slots, registers per math thread, the
// scale-block rule of BLOCK_N, and the work units of the persistent grid.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../../utils/exception.hpp"
#include "sm90_gemm_types.hpp"

namespace dg::kernels {

constexpr uint32_t kSm90MaxSmemBytes = 232448;  // 227 KiB opt-in per block

// K-grouped GEMMs pass two TMA maps (2 x 128 bytes) and two counters per group as kernel parameters, which
// may take up to 32764 bytes (CUDA >= 12.1): at most 120 groups. The capacity is rounded up so that a few
// kernels serve every group count.
constexpr uint32_t kMaxKGroups = 120;
inline uint32_t k_grouped_capacity(uint32_t num_groups) {
    for (const uint32_t capacity: {8u, 16u, 32u, 64u})
        if (num_groups <= capacity)
            return capacity;
    return kMaxKGroups;
}

// TMA multicast of B across 2-CTA clusters (tile pairs along M): whether the heuristic may use it unless DG_TUNE's
// multicast key says otherwise (GemmOverrides::allow_multicast). Off: halving B's L2-to-SM traffic changed nothing
// measurable (H200: the large FP8 shapes and the BF16 M = 4096 shapes within +-2 %; with 192-row tiles 2-6 %
// slower), so L2 bandwidth is not what limits those tiles. The compile-only entry point builds any variant.
constexpr bool kMulticastByDefault = false;

// Math warpgroups of a BLOCK_M: one of 64 rows, three of 64 (BLOCK_M 192), else two.
inline uint32_t gemm_math_warpgroups(uint32_t block_m) {
    return block_m == 64 ? 1 : block_m == 192 ? 3 : 2;
}

// Shared memory the kernel needs (deep_gemm::sm90_gemm_smem, the kernel's own rule): per stage 128 bytes of K per
// row of A and B, FP8 scales; the D staging (FP32: `fp32_buffers` 32-column chunks of 128-byte rows per row of the
// tile); split-K's exchange slots and barriers.
inline uint32_t gemm_smem_bytes(const GemmConfig& c) {
    const bool fp32_tma = c.use_tma_store && c.operands.fp32_out;
    DG_CHECK_INPUT(fp32_tma ? c.fp32_buffers >= 1 && c.fp32_buffers <= c.block_n / 32 : c.fp32_buffers == 0,
                   "fp32_buffers must be 1..BLOCK_N / 32 ({}) for FP32 D through TMA, 0 otherwise; got {}",
                   c.block_n / 32, c.fp32_buffers);
    return deep_gemm::sm90_gemm_smem(c.kernel_config()).total;
}

// The same for a candidate tile with the math warpgroups of its BLOCK_M (gemm_math_warpgroups).
inline uint32_t gemm_smem_bytes(uint32_t block_m, uint32_t block_n, uint32_t num_stages, bool use_tma_store,
                                const GemmOperands& operands = {}, uint32_t num_splits = 1, uint32_t fp32_buffers = 0) {
    GemmConfig c;
    c.block_m = block_m, c.block_n = block_n, c.num_stages = num_stages, c.use_tma_store = use_tma_store;
    c.operands = operands, c.num_splits = num_splits, c.fp32_buffers = fp32_buffers;
    c.num_math_warpgroups = gemm_math_warpgroups(block_m);
    return gemm_smem_bytes(c);
}

// The most stages (2 .. 8) that fit in shared memory, 0 if not even two do.
inline uint32_t gemm_max_stages(uint32_t block_m, uint32_t block_n, bool use_tma_store, const GemmOperands& operands,
                                uint32_t num_splits, uint32_t fp32_buffers) {
    uint32_t stages = 0;
    for (uint32_t s = 2; s <= 8; ++s)
        if (gemm_smem_bytes(block_m, block_n, s, use_tma_store, operands, num_splits, fp32_buffers) <= kSm90MaxSmemBytes)
            stages = s;
    return stages;
}

// FP32 D through TMA: the fewest staging buffers per math warpgroup the kernel runs with (two: one is written
// while the other's store drains; one for a 32-column tile), or 0 where D does not go that way.
inline uint32_t gemm_min_fp32_buffers(uint32_t block_n, bool use_tma_store, const GemmOperands& operands) {
    return use_tma_store && operands.fp32_out ? std::min(2u, block_n / 32) : 0;
}

// FP32 D through TMA: a buffer per 32-column chunk of the tile, so that the epilogue never waits for its own
// stores (they drain during the next tile's K loop; with two, each chunk waits for the store two back to have
// read its buffer), unless that leaves fewer than kMinFp32RingStages stages where the fewest buffers leave more;
// then the most buffers that keep them.
constexpr uint32_t kMinFp32RingStages = 4;
inline uint32_t gemm_fp32_buffers(uint32_t block_m, uint32_t block_n, bool use_tma_store, const GemmOperands& operands,
                                  uint32_t num_splits) {
    const uint32_t fewest = gemm_min_fp32_buffers(block_n, use_tma_store, operands);
    if (fewest == 0)
        return 0;
    const auto stages = [&](uint32_t buffers) {
        return gemm_max_stages(block_m, block_n, use_tma_store, operands, num_splits, buffers);
    };
    const uint32_t floor = std::min(kMinFp32RingStages, stages(fewest));
    for (uint32_t buffers = block_n / 32; buffers > fewest; --buffers)
        if (stages(buffers) >= floor)
            return buffers;
    return fewest;
}

// Widest 16/32/64-column chunk dividing BLOCK_N (TMA store box with a 32/64/128-byte swizzle).
inline uint32_t gemm_store_chunk(uint32_t block_n) {
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
inline uint64_t gemm_num_units(uint64_t m_blocks, uint64_t n_blocks, uint32_t num_multicast, bool is_multicast_on_a) {
    if (num_multicast == 1)
        return m_blocks * n_blocks;
    return is_multicast_on_a ? m_blocks * ((n_blocks + 1) / 2) : ((m_blocks + 1) / 2) * n_blocks;
}

// Accumulator registers per math thread, per 64-row slice: BLOCK_N / 2 accumulated, and for FP8 as many partial.
// Three math warpgroups (BLOCK_M = 192) get 152 registers each instead of 232: BLOCK_N <= 128 (SASS-checked).
// FP8 128 x 192 on two warpgroups (96 + 96 accumulators, no overlap) also compiles without spills (168 registers
// at entry), but ran 2-5 % slower than the heuristic's 192 x 128 at M = 4096 and 8192 (H200: 4096 x 7168 x 7168
// 324.4 against 310.4 us; two warpgroups cover each other's promotion worse than three): `forced` (DG_TUNE
// fp8_gemm:block_n=192) admits it for sweeps, the heuristic does not pick it.
inline bool gemm_fits_registers(uint32_t block_m, uint32_t block_n, uint32_t num_math_warpgroups, bool is_fp8 = true,
                                bool forced = false) {
    const uint32_t slices = block_m / num_math_warpgroups / 64;
    if (!is_fp8)
        return slices * block_n / 2 <= 128u;
    if (forced && num_math_warpgroups == 2 && slices == 1 && block_n == 192)
        return true;
    return slices * block_n <= (num_math_warpgroups == 3 ? 128u : 160u);
}

// FP8 with overlapped promotion holds a second partial buffer: accum + 2 partials = 3 x BLOCK_N / 2 registers per
// 64-row slice, within 192 (ptxas: no spills up to BLOCK_N = 128 with one slice); not with three math warpgroups
// (128 registers; two warpgroups' wgmmas already cover each one's promotion there).
inline bool gemm_fits_overlap(uint32_t block_m, uint32_t block_n, uint32_t num_math_warpgroups) {
    const uint32_t slices = block_m / num_math_warpgroups / 64;
    return num_math_warpgroups < 3 && slices * block_n * 3 / 2 <= 192u;
}

}  // namespace dg::kernels
