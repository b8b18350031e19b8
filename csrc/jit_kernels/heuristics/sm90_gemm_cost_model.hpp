// The cost model of the SM90 GEMM heuristic (sm90_gemm.hpp), and where stream-K runs by default.
//
// Model (GemmCostModel, in SM cycles): the kernel is persistent and each CTA runs its units one
// after the other, in waves of as many units as there are CTAs (slots), so
//   time = sum over waves of max(unit time, the wave's units' share of the DRAM bytes / DRAM bandwidth)
//   unit time = K blocks per unit x per-K-block time + per-unit costs
//   units = tiles x splits (with multicast: tile pairs, over #SMs / 2 slots)
//   per-K-block time = max(latency floor, wgmma time ~ BLOCK_M x (BLOCK_N + 32) / 32, L2 -> SM bytes,
//                          B bytes at the DRAM bandwidth one SM can pull)
// (a last, partial wave of memory-bound units takes a unit's time, not its share of the bytes: few SMs cannot
// pull the DRAM bandwidth; this is what makes masked groups of few rows prefer more, narrower tiles).
// Masked GEMMs are planned per group: `m` rows in `num_groups` groups, each with its own row blocks and its
// own B (counted once per group).
// (the +32 stands for what every tile pays regardless of its width: loading A, promotion
// bookkeeping, the epilogue; +16 for BF16, which has no promotion). A K block is 128 bytes of each row
// (128 FP8 or 64 BF16 elements): the same wgmma time and bytes either way. Split-K (small M, fewer tiles than
// SMs) cuts a tile's K blocks into up to 8 units, one cluster of CTAs, at the price of shared memory for the
// exchange of their FP32 partial sums (fewer stages) and the exchange itself at the end of each unit. Stream-K
// shares the last wave's tiles (or the last two waves') among all CTAs along K, at the price of partial sums
// through L2 and a memset of the flags (GemmCostModel::stream_k_cost): by default only where it was measured
// faster (gemm_stream_k_by_default), otherwise when forced.
#pragma once

#include <algorithm>
#include <cstdint>

#include "sm90_gemm_types.hpp"

namespace dg::kernels {

// Estimated time, in SM cycles, of one candidate (see the model at the top of this file).
struct GemmCostModel {
    static constexpr double kLatencyPerKBlock = 350;   // one K block's serial chain: barrier, wgmma, promotion
    static constexpr double kL2BytesPerCycle = 64;     // L2 -> one SM
    static constexpr double kDramBytesPerCycle = 2000;  // HBM3e, all SMs together
    static constexpr double kDramBytesPerCyclePerSm = 22; // what one SM pulls when few SMs stream (H200: 45 GB/s
                                                          // with 50 SMs busy, measured)
    static constexpr double kUnitOverheadCycles = 2000;   // per unit: the pipeline's first loads, the epilogue
    // Split-K's exchange in the cluster, per unit: two handshakes with cluster-scope fences, then the tile's
    // FP32 partial sums stored into the peers' shared memory and read back by their owners (estimates)
    static constexpr double kSplitExchangeCycles = 1000;
    static constexpr double kDsmemBytesPerCycle = 32;
    // Three math warpgroups (BLOCK_M = 192): two warpgroups' wgmmas cover each one's promotion, where with
    // two the tensor cores idle while both promote. Measured per K block against this model's estimate
    // (H200 config sweep, M = 4096 and 8192): 1.19-1.21x the estimate with three, 1.49-1.60x with two.
    static constexpr double kThreeWarpgroupMmaFactor = 0.78;
    // Where that was measured: large problems (M >= 2048); below, BLOCK_M = 192 is not a candidate.
    static constexpr uint64_t kThreeWarpgroupMinM = 2048;
    // Two math warpgroups with overlapped promotion (a second partial buffer) on 128 x 128 tiles of a dense
    // recipe-(1, 128, 128) GEMM: a row runs at 0.94x the three-warpgroup tile's rate (H200 config sweep, M = 4096
    // and 8192, against 192 x 128 timed alongside: 4096 x 4096 x 7168 185.7 vs 197.0 us (7.8 vs 5.3 waves of units),
    // 4096 x 7168 x 7168 320.5 vs 323.0, 8192^3 864.5 vs 800.4, 4096 x 2112 x 7168 117.3 vs 102.8: each as that
    // rate and the waves predict). Applied only there, where it was measured (other widths cross a scale-block
    // boundary and ran slower: 128 x 112 231.8 us at 4096 x 4096 x 7168).
    // The same tiles on m-grouped contiguous GEMMs (H200 config sweeps, 5 stages either way): faster than the
    // 128 x 160 tiles without overlap that the plain model picked, on all 16 rows of the grouped suite (4 x 8192,
    // 8 x 4096, 32 x 256 and 256 x 64 rows, N x K of 4096 x 7168, 7168 x 2048, 6144 x 7168, 7168 x 3072): e.g.
    // 4 x 8192 x 4096 x 7168 1421 -> 1248 us, 32 x 256 x 4096 x 7168 531 -> 462, 256 x 64 x 7168 x 2048 1254 -> 1134.
    // Not on masked prefill-like groups (1 x 1024 x 7168 x 2048: 37.3 vs 33.5 us with 128 x 160), so not there.
    static constexpr double kOverlapMmaFactor = 0.83;
    // The per-row recipe (1, 1, 128) on normal GEMMs of K >= kRowScaledOverlapMinK: the same tiles (FP32 D) beat
    // the three-warpgroup 192 x 128 tile where this rate, with the tile's L2 term then binding, says so (H200 config
    // sweep, both timed alongside, median us: 4096 x 7168 x 7168 482.1 -> 467.2, 7168 x 2048 x 16384 529.2 -> 500.9,
    // 2048 x 4096 x 7168 154.0 -> 142.3, 4096 x 4096 x 16384 630.7 -> 574.1; and 192 x 128 stays where it was faster:
    // 4096 x 2112 x 7168 156.8 vs 172.9, 8192^3 1153.2 vs 1191.7, 7168 x 7168 x 4096 493.8 vs 495.4). Not below that K
    // (4096 x 24576 x 1536: 421.2 vs 486.9, 8192 x 7168 x 2048: 316.9 vs 350.4, the FP32 epilogues' share), nor on
    // k-grouped GEMMs (H200: 4 x 4096 x 7168 x 8192 1989 vs 2023 us, 16 x 4096 x 7168 x 2048 2451 vs 2797).
    static constexpr double kRowScaledOverlapMmaFactor = 0.80;
    static constexpr uint64_t kRowScaledOverlapMinK = 4096;

    // Stream-K (see gemm_stream_k_tiles): the flags' clearing before the launch (a memset, and the gap before the
    // kernel) and each exchange's handshake (estimates).
    static constexpr double kStreamKClearCycles = 3000;

    // What one unit of a candidate costs (in SM cycles): a K block, the whole unit (its K blocks, fixed costs and
    // split-K's exchange), and the unit's share of the problem's DRAM bytes at the whole device's bandwidth.
    struct UnitTimes {
        double per_k_block, unit_time, dram_cycles_per_unit;
        uint64_t num_k_blocks;
    };
    // (a K block is 128 bytes of each row: 128 FP8 or 64 BF16 elements, the same wgmma time either way)
    // `m` rows in `num_groups` groups of m / num_groups rows, each with its own B, in `units` units. `overlap`: the
    // candidate runs the overlapped promotion; `gemm_type`: the layout (the overlap's rate was measured on normal
    // and m-grouped contiguous GEMMs).
    static UnitTimes unit_times(uint64_t m, uint64_t n, uint64_t k, uint32_t block_m, uint32_t block_n,
                                uint32_t num_splits, uint64_t units, const GemmOperands& operands, uint64_t num_groups,
                                bool overlap, GemmType gemm_type) {
        const uint64_t block_k = operands.block_k(), num_k_blocks = (k + block_k - 1) / block_k;
        const uint64_t group_rows = (m + num_groups - 1) / num_groups;
        // (with three warpgroups a K block costs the same at BLOCK_N 112 as at 128: measured 1216 vs 1153 cycles;
        // BF16 has no promotion: a smaller per-tile overhead)
        const double overhead = operands.is_fp8() ? 32 : 16;
        const bool measured_layout = gemm_type == GemmType::kNormal || gemm_type == GemmType::kMGroupedContiguous ||
                                     gemm_type == GemmType::kMGroupedContiguousPsum;
        const bool overlap_tile = overlap && block_m == 128 && block_n == 128 && m >= kThreeWarpgroupMinM;
        const bool measured_overlap = overlap_tile && measured_layout && operands.block_sfb();
        const bool measured_row_scaled_overlap = overlap_tile && gemm_type == GemmType::kNormal &&
                                                 operands.per_row_sfb() && k >= kRowScaledOverlapMinK;
        const double mma = block_m == 192 ? 192.0 * (128 + 32) / 32 * kThreeWarpgroupMmaFactor
                                          : double(block_m) * (block_n + overhead) / 32 *
                                                (measured_overlap              ? kOverlapMmaFactor
                                                 : measured_row_scaled_overlap ? kRowScaledOverlapMmaFactor
                                                                               : 1.0);
        const double l2 = double(std::min<uint64_t>(block_m, group_rows) + block_n) * 128 / kL2BytesPerCycle;
        // With one row block (per group), every B tile is read by one unit only: it streams from DRAM (A hits L2).
        // With more, the units sharing a B tile run at about the same time and find it in L2.
        const double dram = group_rows <= block_m ? double(block_n) * 128 / kDramBytesPerCyclePerSm : 0.0;
        const double per_k_block = std::max({kLatencyPerKBlock, mma, l2, dram});
        const double exchange = num_splits > 1 ? kSplitExchangeCycles + 2.0 * block_m * block_n * 4 / kDsmemBytesPerCycle
                                               : 0.0;
        const double unit_time = ((num_k_blocks + num_splits - 1) / num_splits) * per_k_block + kUnitOverheadCycles +
                                 exchange;
        const double d_bytes = (operands.fp32_out ? 4.0 : 2.0) * (operands.has_c ? 2 : 1) * m * n;
        const double dram_cycles_per_unit =
            (operands.element_bytes() * (double(m) * k + double(num_groups) * n * k) + d_bytes) / kDramBytesPerCycle /
            double(units);
        return {per_k_block, unit_time, dram_cycles_per_unit, num_k_blocks};
    }

    // `units` run in waves of `slots` (see unit_times for the rest).
    static double cost(uint64_t m, uint64_t n, uint64_t k, uint32_t block_m, uint32_t block_n, uint32_t num_splits,
                       uint64_t units, uint64_t slots, const GemmOperands& operands = {}, uint64_t num_groups = 1,
                       bool overlap = false, GemmType gemm_type = GemmType::kNormal) {
        const UnitTimes t = unit_times(m, n, k, block_m, block_n, num_splits, units, operands, num_groups, overlap,
                                       gemm_type);
        const uint64_t full_waves = units / slots, last_wave = units % slots;
        return double(full_waves) * std::max(t.unit_time, double(slots) * t.dram_cycles_per_unit) +
               (last_wave > 0 ? std::max(t.unit_time, double(last_wave) * t.dram_cycles_per_unit) : 0.0);
    }

    // Stream-K over the last `stream_k_tiles` of `tiles` tiles on `slots` CTAs (a normal GEMM, no split-K): the whole
    // tiles' waves, then each CTA's share of the stream-K tiles' K blocks, its segments' fixed costs, the exchange
    // (a contribution stored to L2, the owner reading up to as many as a tile holds ranges) and the flags' clearing.
    static double stream_k_cost(uint64_t m, uint64_t n, uint64_t k, uint32_t block_m, uint32_t block_n, uint64_t tiles,
                                uint64_t slots, uint64_t stream_k_tiles, const GemmOperands& operands, bool overlap) {
        const UnitTimes t = unit_times(m, n, k, block_m, block_n, 1, tiles, operands, 1, overlap, GemmType::kNormal);
        const uint64_t whole_waves = (tiles - stream_k_tiles) / slots;
        const uint64_t share = (stream_k_tiles * t.num_k_blocks + slots - 1) / slots;
        const uint64_t segments = std::min(share, (share + t.num_k_blocks - 1) / t.num_k_blocks + 1);
        const uint64_t contributors = (t.num_k_blocks + share - 1) / share;
        const double exchange = double(block_m) * block_n * 4 / kL2BytesPerCycle * double(1 + contributors);
        const double stream_k = double(share) * t.per_k_block + double(segments) * kUnitOverheadCycles + exchange +
                                kStreamKClearCycles;
        return double(whole_waves) * std::max(t.unit_time, double(slots) * t.dram_cycles_per_unit) +
               std::max(stream_k, double(stream_k_tiles) * t.dram_cycles_per_unit);
    }
};

// Stream-K's tiles (the last ones of the tile order) of `tiles` tiles on `ctas` CTAs in mode 1 (the last wave's,
// partial or whole) or 2 (those and the whole wave before them), so that the tiles given whole fill whole waves;
// 0 for mode 0. Every CTA's range must hold at least kMinStreamKBlocksPerCta K blocks (gemm_stream_k_fits).
constexpr uint64_t kMinStreamKBlocksPerCta = 2;
inline uint64_t gemm_stream_k_tiles(uint64_t tiles, uint64_t ctas, uint32_t mode) {
    if (mode == 0 || tiles == 0 || ctas == 0)
        return 0;
    const uint64_t whole_waves = (tiles - 1) / ctas;
    return tiles - (whole_waves - std::min<uint64_t>(whole_waves, mode - 1)) * ctas;
}
// (the scheduler computes a CTA's range as cta x total / CTAs in 32 bits: the product must fit)
inline bool gemm_stream_k_fits(uint64_t tiles, uint64_t ctas, uint32_t mode, uint64_t num_k_blocks) {
    const uint64_t stream_k_tiles = gemm_stream_k_tiles(tiles, ctas, mode);
    const uint64_t total = stream_k_tiles * num_k_blocks;
    return stream_k_tiles > 0 && total >= ctas * kMinStreamKBlocksPerCta && ctas * total < (uint64_t(1) << 32) &&
           (mode == 1 || stream_k_tiles > ctas);
}

// Stream-K by default (mode 1): where it measured faster than the same shape without (H200), FP8 with 128 x 128
// block scales at M >= 2048 whose tiles fill at least kStreamKMinWholeWaves whole waves, over at least
// kStreamKMinKBlocks K blocks: 4096 x 4096 x 7168 186.4 vs 191.0 us, 4096 x 7168 x 16384 708.4 vs 760.7,
// 4096 x 24576 x 1536 245.4 vs 248.7, 8192^3 806.4 vs 822.3, 4096 x 7168 x 2048 104.4 vs 105.7. Not elsewhere:
// 4096 x 2112 x 7168 (2.8 waves) 110.1 vs 105.0; M = 64 / 128 x 7168 x 16384 (one row block) 47.2 vs 41.2 and
// 49.3 vs 44.9; BF16 slower on every row measured (128 x 24576 x 1536 40.4 vs 30.2, 4096 x 7168 x 16384 1323 vs
// 1209). Mode 2 (the last two waves) only when forced (faster on 128 x 129280 x 7168, 249.1 vs 256.6, slower on
// 4096 x 2112 x 7168 and every BF16 row).
constexpr uint64_t kStreamKMinWholeWaves = 4, kStreamKMinKBlocks = 16, kStreamKMinM = 2048;
inline bool gemm_stream_k_by_default(uint64_t m, uint64_t tiles, uint64_t ctas, uint64_t num_k_blocks,
                                     const GemmOperands& operands) {
    return operands.block_sfb() && m >= kStreamKMinM && tiles >= kStreamKMinWholeWaves * ctas &&
           num_k_blocks >= kStreamKMinKBlocks && gemm_stream_k_fits(tiles, ctas, 1, num_k_blocks);
}

}  // namespace dg::kernels
