// Config choice for the SM90 GEMM kernel, FP8 and BF16 (pure function of the problem and the device: unit-tested on
// the CPU through `_C.get_gemm_config`, printed with DG_PRINT_CONFIGS=1).
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
// Among the candidates that fit the registers and shared memory, the cheapest wins; near-ties go
// to the wider tile. Stages: as many as shared memory holds (at most 8).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "../../utils/env.hpp"
#include "../../utils/exception.hpp"

namespace dg::kernels {

// The kernel's GemmType (deep_gemm/include/deep_gemm/scheduler/gemm_scheduler.cuh).
enum class GemmType : uint32_t {
    kNormal = 0,
    kMGroupedContiguous = 1,
    kMGroupedContiguousPsum = 2,
    kMGroupedMasked = 3,
    kKGroupedContiguous = 4,
};

inline bool is_m_grouped(GemmType type) {
    return type != GemmType::kNormal && type != GemmType::kKGroupedContiguous;
}

inline const char* gemm_type_name(GemmType type) {
    switch (type) {
        case GemmType::kMGroupedContiguous: return "GemmType::kMGroupedContiguous";
        case GemmType::kMGroupedContiguousPsum: return "GemmType::kMGroupedContiguousPsum";
        case GemmType::kMGroupedMasked: return "GemmType::kMGroupedMasked";
        case GemmType::kKGroupedContiguous: return "GemmType::kKGroupedContiguous";
        default: return "GemmType::kNormal";
    }
}

// What the operands are (mirrors deep_gemm::OperandKind) and how D is written.
enum class OperandKind : uint32_t {
    kFp8BlockScaled = 0,  // recipe (1, 128, 128), BF16 D
    kFp8RowScaled = 1,    // recipe (1, 1, 128), FP32 D (+ C)
    kBf16 = 2,            // BF16 operands, either layout each; BF16 or FP32 D (+ C)
};

inline const char* operand_kind_name(OperandKind kind) {
    switch (kind) {
        case OperandKind::kFp8RowScaled: return "OperandKind::kFp8RowScaled";
        case OperandKind::kBf16: return "OperandKind::kBf16";
        default: return "OperandKind::kFp8BlockScaled";
    }
}

struct GemmOperands {
    OperandKind kind = OperandKind::kFp8BlockScaled;
    bool mn_major_a = false, mn_major_b = false;  // BF16 only: A stored [K, M], B stored [K, N]
    bool fp32_out = false;                        // FP32 D (always so with kFp8RowScaled)
    bool has_c = false;                           // a C added by the epilogue

    bool is_fp8() const { return kind != OperandKind::kBf16; }
    bool per_row_sfb() const { return kind == OperandKind::kFp8RowScaled; }
    bool block_sfb() const { return kind == OperandKind::kFp8BlockScaled; }
    // BF16 D with a C to add: stored straight from registers (FP32 D goes through TMA, adding C in place)
    bool direct_store() const { return has_c && !fp32_out; }
    // K per stage: 128 bytes of each row
    uint32_t block_k() const { return is_fp8() ? 128 : 64; }
    uint32_t element_bytes() const { return is_fp8() ? 1 : 2; }
    bool operator==(const GemmOperands&) const = default;
};

// The FP8 recipe (1, 1, 128) or (1, 128, 128) as kernel operands.
inline GemmOperands fp8_operands(bool per_row_sfb, bool has_c = false) {
    return {per_row_sfb ? OperandKind::kFp8RowScaled : OperandKind::kFp8BlockScaled, false, false, per_row_sfb, has_c};
}

struct GemmConfig {
    // Compile-time shape (0: given at run time)
    uint32_t shape_m = 0, shape_n = 0, shape_k = 0;
    uint32_t block_m = 128, block_n = 128;
    uint32_t num_stages = 4;
    uint32_t num_math_warpgroups = 2;
    uint32_t num_group_n = 8;
    uint32_t num_multicast = 1;       // CTAs per cluster sharing one operand through TMA multicast
    uint32_t num_splits = 1;          // split-K: units per tile along K, one cluster of CTAs per tile
    uint32_t stream_k = 0;            // stream-K: 0 off; 1 the last, partial wave's tiles shared by all CTAs along
                                      // K (gemm_stream_k_tiles); 2 those and one whole wave before them
    bool overlap_promotion = false;   // FP8: two partial buffers, block k + 1's wgmmas run during block k's promotion
    GemmOperands operands;            // operand kind and layouts, D's type
    GemmType gemm_type = GemmType::kNormal;
    uint32_t max_k_groups = 0;        // k-grouped: capacity of the per-group TMA map parameter (else 0)
    bool is_multicast_on_a = false;   // the shared operand: A (pairs along N) or B (pairs along M)
    uint32_t store_chunk_n = 64;
    uint32_t fp32_buffers = 0;        // FP32 D through TMA: staging buffers (32-column chunks) per math warpgroup
    bool use_tma_store = true;
    uint32_t num_sms = 132;
    uint32_t smem_bytes = 0;

    uint32_t num_threads() const { return (num_math_warpgroups + 1) * 128; }
    std::string describe() const {
        static constexpr const char* kKinds[] = {"fp8 sfb per-block", "fp8 sfb per-row", "bf16"};
        return fmt::format("BLOCK_M={} BLOCK_N={} split_k={} stream_k={} overlap={} stages={} math_wgs={} group_n={} "
                           "multicast={}{} store_chunk_n={} fp32_buffers={} tma_store={} operands={} layout={}{} d={}{} "
                           "type={} max_k_groups={} sms={} smem={} compiled_mnk=({},{},{})",
                           block_m, block_n, num_splits, stream_k, overlap_promotion, num_stages, num_math_warpgroups, num_group_n, num_multicast,
                           num_multicast > 1 ? (is_multicast_on_a ? "(A)" : "(B)") : "", store_chunk_n, fp32_buffers, use_tma_store,
                           kKinds[static_cast<uint32_t>(operands.kind)], operands.mn_major_a ? "t" : "n",
                           operands.mn_major_b ? "n" : "t", operands.fp32_out ? "fp32" : "bf16",
                           operands.has_c ? "+c" : "", static_cast<uint32_t>(gemm_type), max_k_groups, num_sms,
                           smem_bytes, shape_m, shape_n, shape_k);
    }
};

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

// TMA multicast of B across 2-CTA clusters (tile pairs along M): whether the heuristic may use it.
// DG_FP8_GEMM_MULTICAST=0 / =1 forces it off / allows it; unset, kMulticastByDefault decides
// (docs/perf/h200.md has the measurements behind it). The compile-only entry point builds any variant.
// (read by the caller, so that get_gemm_config stays a pure function of its arguments)
constexpr bool kMulticastByDefault = false;
inline bool multicast_enabled() {
    return get_env_flag("DG_FP8_GEMM_MULTICAST", kMulticastByDefault);
}

// Math warpgroups of a BLOCK_M: one of 64 rows, three of 64 (BLOCK_M 192), else two.
inline uint32_t gemm_math_warpgroups(uint32_t block_m) {
    return block_m == 64 ? 1 : block_m == 192 ? 3 : 2;
}

// Split-K's exchange slots (mirrors Sm90Gemm::SMEM_SPLIT_SIZE): each math thread's accumulators as float2 pairs,
// spread over the splits' owners, one slot per split.
inline uint32_t gemm_split_slot_bytes(uint32_t block_m, uint32_t block_n, uint32_t num_splits) {
    if (num_splits <= 1)
        return 0;
    const uint32_t wgs = gemm_math_warpgroups(block_m);
    const uint32_t pairs = (block_m / wgs / 64) * block_n / 4;  // per math thread
    const uint32_t bytes = num_splits * ((pairs + num_splits - 1) / num_splits) * wgs * 128 * 8;
    return (bytes + 1023) / 1024 * 1024;
}

// Shared memory the kernel needs (mirrors Sm90Gemm::SMEM_SIZE): per stage 128 bytes of K per row of A and B,
// FP8 scales; the D staging (FP32: `fp32_buffers` 32-column chunks of 128-byte rows per row of the tile);
// split-K's exchange slots and barriers.
inline uint32_t gemm_smem_bytes(uint32_t block_m, uint32_t block_n, uint32_t num_stages, bool use_tma_store,
                                const GemmOperands& operands = {}, uint32_t num_splits = 1, uint32_t fp32_buffers = 0) {
    const bool fp32_tma = use_tma_store && operands.fp32_out;
    DG_CHECK_INPUT(fp32_tma ? fp32_buffers >= 1 && fp32_buffers <= block_n / 32 : fp32_buffers == 0,
                   "fp32_buffers must be 1..BLOCK_N / 32 ({}) for FP32 D through TMA, 0 otherwise; got {}",
                   block_n / 32, fp32_buffers);
    const uint32_t d = !use_tma_store ? 0 : operands.fp32_out ? block_m * fp32_buffers * 128 : block_m * block_n * 2;
    const uint32_t sfa = operands.is_fp8() ? (block_m * 4 + 127) / 128 * 128 : 0;
    // a column's scales, the tile's pair, or none
    const uint32_t sfb = operands.per_row_sfb() ? (block_n * 4 + 127) / 128 * 128 : operands.block_sfb() ? 8 : 0;
    // (FP32 D through TMA: a barrier for C's loads into each staging buffer of each math warpgroup)
    const uint32_t c_barriers = fp32_tma ? gemm_math_warpgroups(block_m) * fp32_buffers * 8 : 0;
    const uint32_t split = num_splits > 1 ? gemm_split_slot_bytes(block_m, block_n, num_splits) + 2 * 8 : 0;
    return 1024 + d + split + num_stages * (block_m * 128 + block_n * 128 + sfa + sfb + 16) + c_barriers;  // + 2 barriers
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
// at entry, 2026-12-05), but it was never timed: `forced` (DG_FP8_GEMM_BLOCK_N) admits it for a sweep, the
// heuristic does not pick it.
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

// Forced choices (0: the heuristic decides), from DG_FP8_GEMM_BLOCK_M / _BLOCK_N / _SPLIT_K: for
// tuning sweeps and for reproducing a config; a forced value no candidate can take is an error.
// DG_FP8_GEMM_OVERLAP: 1 = overlapped promotion (an error where it does not fit), 0 = never, unset = the heuristic.
// DG_FP8_GEMM_FP32_BUFFERS: FP32 D through TMA, staging buffers per math warpgroup (capped at BLOCK_N / 32; an error
// where not even two stages fit then; kernels without FP32 D through TMA have none).
// DG_FP8_GEMM_STREAM_K: 0 = never, 1 / 2 = stream-K of that mode wherever a plan can take it (normal GEMMs
// without split-K or multicast, enough K blocks for every CTA), unset = the heuristic.
// DG_FP8_GEMM_MULTICAST_ON_A=1: only 2-CTA clusters of tile pairs along N that share A (each CTA loads half of A's
// rows into both; normal GEMMs with a K-major A, no split-K, at least two column blocks; an error where none fits).
// The kernel and host support these pairs, the heuristic never picks them (not yet timed): for sweeps of M <= 128,
// where every column tile re-reads the same A from L2.
struct GemmOverrides {
    uint32_t block_m = 0, block_n = 0, num_splits = 0;
    int32_t overlap = -1;
    uint32_t fp32_buffers = 0;
    int32_t stream_k = -1;
    bool multicast_on_a = false;
};

// Estimated time, in SM cycles, of one candidate (see the model at the top of this file).
struct GemmCostModel {
    static constexpr double kLatencyPerKBlock = 350;   // one K block's serial chain: barrier, wgmma, promotion
    static constexpr double kL2BytesPerCycle = 64;     // L2 -> one SM
    static constexpr double kDramBytesPerCycle = 2000;  // HBM3e, all SMs together
    static constexpr double kDramBytesPerCyclePerSm = 22; // what one SM pulls when few SMs stream (H200: 45 GB/s
                                                          // with 50 SMs busy, 2026-12-02 run 9)
    static constexpr double kUnitOverheadCycles = 2000;   // per unit: the pipeline's first loads, the epilogue
    // Split-K's exchange in the cluster, per unit: two handshakes with cluster-scope fences, then the tile's
    // FP32 partial sums stored into the peers' shared memory and read back by their owners (estimates)
    static constexpr double kSplitExchangeCycles = 1000;
    static constexpr double kDsmemBytesPerCycle = 32;
    // Three math warpgroups (BLOCK_M = 192): two warpgroups' wgmmas cover each one's promotion, where with
    // two the tensor cores idle while both promote. Measured per K block against this model's estimate
    // (run 12 sweep, M = 4096 and 8192): 1.19-1.21x the estimate with three, 1.49-1.60x with two.
    static constexpr double kThreeWarpgroupMmaFactor = 0.78;
    // Where that was measured: large problems (M >= 2048); below, BLOCK_M = 192 is not a candidate.
    static constexpr uint64_t kThreeWarpgroupMinM = 2048;
    // Two math warpgroups with overlapped promotion (a second partial buffer) on 128 x 128 tiles of a dense
    // recipe-(1, 128, 128) GEMM: a row runs at 0.94x the three-warpgroup tile's rate (run 47 sweep, M = 4096 and
    // 8192, against 192 x 128 in the same run: 4096 x 4096 x 7168 185.7 vs 197.0 us (7.8 vs 5.3 waves of units),
    // 4096 x 7168 x 7168 320.5 vs 323.0, 8192^3 864.5 vs 800.4, 4096 x 2112 x 7168 117.3 vs 102.8: each as that
    // rate and the waves predict). Applied only there, where it was measured (other widths cross a scale-block
    // boundary and ran slower: 128 x 112 231.8 us at 4096 x 4096 x 7168).
    // The same tiles on m-grouped contiguous GEMMs (run 74/75 sweeps, H200, 5 stages either way): faster than the
    // 128 x 160 tiles without overlap that the plain model picked, on all 16 rows of the grouped suite (4 x 8192,
    // 8 x 4096, 32 x 256 and 256 x 64 rows, N x K of 4096 x 7168, 7168 x 2048, 6144 x 7168, 7168 x 3072): e.g.
    // 4 x 8192 x 4096 x 7168 1421 -> 1248 us, 32 x 256 x 4096 x 7168 531 -> 462, 256 x 64 x 7168 x 2048 1254 -> 1134.
    // Not on masked prefill-like groups (1 x 1024 x 7168 x 2048: 37.3 vs 33.5 us with 128 x 160), so not there.
    static constexpr double kOverlapMmaFactor = 0.83;
    // The per-row recipe (1, 1, 128) on normal GEMMs of K >= kRowScaledOverlapMinK: the same tiles (FP32 D) beat
    // the three-warpgroup 192 x 128 tile where this rate, with the tile's L2 term then binding, says so (run 79 sweep,
    // H200, both in one run, median us: 4096 x 7168 x 7168 482.1 -> 467.2, 7168 x 2048 x 16384 529.2 -> 500.9, 2048 x
    // 4096 x 7168 154.0 -> 142.3, 4096 x 4096 x 16384 630.7 -> 574.1; and 192 x 128 stays where it was faster:
    // 4096 x 2112 x 7168 156.8 vs 172.9, 8192^3 1153.2 vs 1191.7, 7168 x 7168 x 4096 493.8 vs 495.4). Not below that K
    // (4096 x 24576 x 1536: 421.2 vs 486.9, 8192 x 7168 x 2048: 316.9 vs 350.4, the FP32 epilogues' share), nor on
    // k-grouped GEMMs (run 75: 4 x 4096 x 7168 x 8192 1989 vs 2023 us, 16 x 4096 x 7168 x 2048 2451 vs 2797).
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

inline GemmOverrides forced_config() {
    const auto read = [](const char* name) { return get_env_uint(name, 0, 4096, "a small non-negative integer"); };
    const int32_t forced_overlap = get_env("DG_FP8_GEMM_OVERLAP").empty() ? -1 : get_env_flag("DG_FP8_GEMM_OVERLAP");
    const int32_t forced_stream_k = get_env("DG_FP8_GEMM_STREAM_K").empty()
                                        ? -1
                                        : static_cast<int32_t>(get_env_uint("DG_FP8_GEMM_STREAM_K", 0, 2, "0, 1 or 2"));
    return {read("DG_FP8_GEMM_BLOCK_M"), read("DG_FP8_GEMM_BLOCK_N"), read("DG_FP8_GEMM_SPLIT_K"), forced_overlap,
            read("DG_FP8_GEMM_FP32_BUFFERS"), forced_stream_k, get_env_flag("DG_FP8_GEMM_MULTICAST_ON_A")};
}

constexpr uint32_t kMaxSplits = 8;  // (the CTAs of a tile's splits form one cluster: at most 8, portably)

// How many CTAs whole clusters of each size (1 .. kMaxSplits CTAs) occupy at most on the device. A cluster's CTAs
// share one GPC, and the GPCs' SM counts need not divide by the cluster size (seen on the H200: clusters of 4
// fill only 120 of 132 SMs), so this is measured on the device (the host fills it from
// cuOccupancyMaxActiveClusters; GEMM kernels run one CTA per SM) or estimated as whole clusters of #SMs.
struct ClusterCapacity {
    uint32_t ctas[kMaxSplits + 1] = {};
    static ClusterCapacity estimate(uint32_t num_sms) {
        ClusterCapacity c;
        for (uint32_t size = 1; size <= kMaxSplits; ++size)
            c.ctas[size] = num_sms / size * size;
        return c;
    }
};
constexpr uint32_t kMinKBlocksPerSplit = 2;
// Stream-K by default (mode 1): where run 50 measured it faster than the same shape without, FP8 with 128 x 128
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

// operands: FP8 (recipe (1, 128, 128) or (1, 1, 128)) or BF16; FP32 D through TMA in 32-column chunks; BF16 D
// with a C written directly (no TMA store); split-K for any dense GEMM (the reduction adds C). BF16: no three-warpgroup tiles (they hide FP8's promotion), an MN-major B takes BLOCK_N in
// multiples of 64, and its multicast is not offered.
// gemm_type: m-grouped layouts take BLOCK_M dividing `grouped_alignment` (a row block never spans two
// groups: the contiguous segments' alignment, or the masked layout's rows per group) and neither split-K
// nor multicast; `m` is then the total (contiguous) or expected (masked: groups x expected_m) row count, and
// masked plans are made per group (`num_groups`: each group's row blocks and B are its own).
// K-grouped (weight gradients): FP32 D, neither split-K nor multicast; `m` is groups x M (every
// group's tiles are units of the one persistent grid) and `k` a typical K per group; the caller sets
// max_k_groups.
inline GemmConfig get_gemm_config(uint32_t m, uint32_t n, uint32_t k, uint32_t num_sms, bool use_tma_store,
                                  bool compile_m, bool compile_n, bool compile_k, bool allow_multicast,
                                  const GemmOverrides& forced = {}, const GemmOperands& operands = {},
                                  GemmType gemm_type = GemmType::kNormal, uint32_t grouped_alignment = 128,
                                  const ClusterCapacity* capacity = nullptr, uint32_t num_groups = 1) {
    const ClusterCapacity cluster_ctas = capacity != nullptr ? *capacity : ClusterCapacity::estimate(num_sms);
    DG_CHECK_INPUT(num_groups >= 1 && (num_groups == 1 || gemm_type == GemmType::kMGroupedMasked),
                   "num_groups (the masked layout's groups) must be 1 for other layouts, got {}", num_groups);
    const uint64_t group_rows = (uint64_t(m) + num_groups - 1) / num_groups;
    use_tma_store = use_tma_store && !operands.direct_store();
    const bool grouped = gemm_type != GemmType::kNormal, m_grouped = is_m_grouped(gemm_type);
    allow_multicast = allow_multicast && !grouped && !operands.mn_major_b;
    DG_CHECK_INPUT(num_sms > 0, "num_sms must be positive");
    DG_CHECK_INPUT(operands.is_fp8() ? !operands.mn_major_a && !operands.mn_major_b : true,
                   "FP8 operands must be K-major");
    const uint32_t num_k_blocks = (k + operands.block_k() - 1) / operands.block_k();
    GemmConfig best;
    double best_cost = -1;
    uint64_t best_busy = 0;
    // (BLOCK_M = 192, three math warpgroups so that two cover each one's promotion: for large problems,
    // where it was measured, or when forced)
    const uint32_t block_ms[] = {64, 128, 192, 256};
    for (const uint32_t block_m: block_ms) {
        if (block_m == 192 && (!operands.is_fp8() || (forced.block_m != 192 && m < GemmCostModel::kThreeWarpgroupMinM)))
            continue;
        // M <= 64: one 64-row math warpgroup; otherwise two warpgroups of 64 or 128 rows (three of 64 rows
        // for BLOCK_M = 192, see gemm_math_warpgroups)
        if (m_grouped) {
            // Any BLOCK_M that divides the segment alignment (a row block never spans two groups); masked groups
            // take 64-row blocks exactly when their rows fit one (as dense M does): one math warpgroup runs a
            // K block of 64 x 160 in about the time two run 128 x 160 (run 41: 32 groups x 192 rows, 1.4x
            // slower in 64-row blocks), while groups of 20 rows gain 5-13 % over 128-row blocks.
            if ((forced.block_m && block_m != forced.block_m) || grouped_alignment % block_m != 0 || block_m == 256)
                continue;
            if (!forced.block_m && gemm_type == GemmType::kMGroupedMasked && grouped_alignment % 128 == 0 &&
                (block_m == 64) != (group_rows <= 64))
                continue;
        } else if (forced.block_m ? block_m != forced.block_m
                                  : ((block_m == 64) != (m <= 64) || (block_m == 256 && m <= 128))) {
            continue;
        }
        const uint32_t wgs = gemm_math_warpgroups(block_m);
        for (uint32_t block_n = 16; block_n <= 256; block_n += 16) {
            if (forced.block_n && block_n != forced.block_n)
                continue;
            if ((operands.block_sfb() && !fp8_gemm_block_n_fits_sfb(block_n)) ||
                !gemm_fits_registers(block_m, block_n, wgs, operands.is_fp8(), forced.block_n == block_n) ||
                (operands.mn_major_b && block_n % 64 != 0) || (operands.fp32_out && use_tma_store && block_n % 32 != 0))
                continue;
            // (masked: each group's rows in row blocks of their own)
            const uint64_t m_blocks = num_groups * ((group_rows + block_m - 1) / block_m);
            const uint64_t n_blocks = (n + block_n - 1) / block_n;
            for (uint32_t splits = 1; splits <= kMaxSplits; ++splits) {
                // Split-K only when the tiles alone leave SMs idle, and with a few K blocks per split
                // (never with groups, nor more splits than K blocks)
                if (forced.num_splits ? splits != forced.num_splits
                                      : splits > 1 && (m_blocks * n_blocks >= num_sms ||
                                                       splits * kMinKBlocksPerSplit > num_k_blocks))
                    continue;
                if (splits > num_k_blocks || (splits > 1 && grouped))
                    continue;
                const bool tma_store = use_tma_store && splits == 1;
                if (gemm_max_stages(block_m, block_n, tma_store, operands, splits,
                                    gemm_min_fp32_buffers(block_n, tma_store, operands)) == 0)
                    continue;
                // Pairs of tiles along M share B through a 2-CTA cluster (not with split-K); forced, pairs along N
                // share A instead
                const bool multicast_on_a = forced.multicast_on_a;
                if (multicast_on_a && (grouped || splits > 1 || n_blocks < 2 || operands.mn_major_a || num_sms < 2))
                    continue;
                const bool multicast = multicast_on_a || (allow_multicast && splits == 1 && m_blocks >= 2 && num_sms >= 2);
                const uint64_t units = gemm_num_units(m_blocks, n_blocks, multicast ? 2 : 1, multicast_on_a) * splits;
                // (a pair, or a split tile's units, form one cluster: as many as the GPCs hold)
                const uint64_t slots = multicast ? cluster_ctas.ctas[2] / 2 : cluster_ctas.ctas[splits];
                if (slots == 0)
                    continue;
                const bool overlap = operands.is_fp8() && forced.overlap != 0 && gemm_fits_overlap(block_m, block_n, wgs);
                double cost = GemmCostModel::cost(m, n, k, block_m, block_n, splits, units, slots, operands, num_groups,
                                                  overlap, gemm_type);
                // Stream-K: where forced (each mode that fits), or by default where it was measured faster
                // (gemm_stream_k_by_default); the model's cost of it counts where lower
                uint32_t stream_k = 0;
                if (splits == 1 && !multicast && !grouped && forced.stream_k > 0) {
                    const uint32_t mode = uint32_t(forced.stream_k);
                    if (gemm_stream_k_fits(units, slots, mode, num_k_blocks)) {
                        cost = GemmCostModel::stream_k_cost(m, n, k, block_m, block_n, units, slots,
                                                            gemm_stream_k_tiles(units, slots, mode), operands, overlap);
                        stream_k = mode;
                    }
                } else if (splits == 1 && !multicast && !grouped && forced.stream_k < 0 &&
                           gemm_stream_k_by_default(m, units, slots, num_k_blocks, operands)) {
                    cost = std::min(cost, GemmCostModel::stream_k_cost(m, n, k, block_m, block_n, units, slots,
                                                                       gemm_stream_k_tiles(units, slots, 1), operands,
                                                                       overlap));
                    stream_k = 1;
                }
                // Near-ties (same split and BLOCK_M) go to the tile that keeps more SMs busy, then to the wider one:
                // where the model sees the DRAM bound either way, more SMs pull more bytes at once (run 42: BF16
                // masked 6 x 20 x 4096 x 7168, 64 x 96 tiles on every SM 98 us, 64 x 256 ones on 96 SMs 110 us)
                const uint64_t busy = stream_k ? slots : std::min(units, slots);
                const bool better = best_cost < 0 || cost < best_cost * 0.999 ||
                                    (cost <= best_cost * 1.001 && splits == best.num_splits &&
                                     block_m == best.block_m &&
                                     (busy > best_busy || (busy == best_busy && block_n > best.block_n)));
                if (better) {
                    best_busy = busy;
                    best_cost = cost;
                    best.block_m = block_m;
                    best.block_n = block_n;
                    best.num_splits = splits;
                    best.stream_k = stream_k;
                    best.num_math_warpgroups = wgs;
                    best.num_multicast = multicast ? 2 : 1;
                    best.is_multicast_on_a = multicast_on_a;
                    best.overlap_promotion = overlap;
                }
            }
        }
    }
    DG_CHECK_INPUT(best_cost >= 0, "no GEMM config fits m={} n={} k={} with the forced BLOCK_M={} BLOCK_N={} "
                   "split-K={} (DG_FP8_GEMM_BLOCK_M / _BLOCK_N / _SPLIT_K; 0 = not forced){}", m, n, k, forced.block_m,
                   forced.block_n, forced.num_splits,
                   forced.multicast_on_a ? " and DG_FP8_GEMM_MULTICAST_ON_A=1 (normal GEMMs, K-major A, no split-K, "
                                           "at least two column blocks)" : "");

    best.use_tma_store = use_tma_store && best.num_splits == 1;
    // (with DG_FP8_GEMM_OVERLAP=1 the winner runs the overlapped promotion exactly when it fits)
    DG_CHECK_INPUT(forced.overlap != 1 || best.overlap_promotion, "DG_FP8_GEMM_OVERLAP=1: overlapped promotion does not "
                   "fit BLOCK_M={} BLOCK_N={} with {} math warpgroups ({})", best.block_m, best.block_n,
                   best.num_math_warpgroups, operands.is_fp8() ? "registers" : "FP8 only");
    best.operands = operands;
    best.gemm_type = gemm_type;
    best.store_chunk_n = gemm_store_chunk(best.block_n);
    best.fp32_buffers = gemm_fp32_buffers(best.block_m, best.block_n, best.use_tma_store, operands, best.num_splits);
    if (forced.fp32_buffers != 0 && best.fp32_buffers != 0)
        best.fp32_buffers = std::min(forced.fp32_buffers, best.block_n / 32);
    best.num_stages = gemm_max_stages(best.block_m, best.block_n, best.use_tma_store, operands, best.num_splits,
                                      best.fp32_buffers);
    DG_CHECK_INPUT(best.num_stages >= 2, "DG_FP8_GEMM_FP32_BUFFERS={}: BLOCK_M={} BLOCK_N={} with {} FP32 staging "
                   "buffers per math warpgroup leaves no room for two stages", forced.fp32_buffers, best.block_m,
                   best.block_n, best.fp32_buffers);
    best.smem_bytes = gemm_smem_bytes(best.block_m, best.block_n, best.num_stages, best.use_tma_store, operands,
                                      best.num_splits, best.fp32_buffers);
    best.num_sms = num_sms;
    best.shape_m = compile_m ? m : 0;
    best.shape_n = compile_n ? n : 0;
    best.shape_k = compile_k ? k : 0;
    return best;
}

}  // namespace dg::kernels
