// Config choice for the SM90 GEMM kernel, FP8 and BF16 (pure function of the problem and the device: unit-tested on
// the CPU through `_C.get_gemm_config`, printed with DG_PRINT_CONFIGS=1).
//
// get_gemm_config walks the candidates (BLOCK_M, BLOCK_N, split-K; multicast, overlapped promotion and stream-K where
// they apply) that fit the registers and shared memory (sm90_gemm_resources.hpp), prices each with the cost model
// (sm90_gemm_cost_model.hpp) and keeps the cheapest; near-ties go to the tile that keeps more SMs busy, then to the
// wider one. Stages: as many as shared memory holds (at most 8). DG_TUNE forces choices (GemmOverrides, sweeps).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "../../utils/env.hpp"
#include "../../utils/exception.hpp"
#include "../../utils/tune.hpp"
#include "sm90_gemm_cost_model.hpp"
#include "sm90_gemm_resources.hpp"
#include "sm90_gemm_types.hpp"

namespace dg::kernels {

// Forced choices (0 / -1: the heuristic decides), for tuning sweeps and for reproducing a config; a forced value no
// candidate can take is an error. They come from DG_TUNE's fp8_gemm or bf16_gemm section (gemm_overrides below;
// docs/design.md, "Forcing kernel configurations") or from `_C.get_gemm_config`'s arguments.
// block_m / block_n / num_splits: the tile and the split-K count.
// overlap: 1 = overlapped promotion (an error where it does not fit), 0 = never, -1 = the heuristic.
// fp32_buffers: FP32 D through TMA, staging buffers per math warpgroup (capped at BLOCK_N / 32; an error where not
// even two stages fit then; kernels without FP32 D through TMA have none).
// stream_k: 0 = never, 1 / 2 = stream-K of that mode wherever a plan can take it (normal GEMMs without split-K or
// multicast, enough K blocks for every CTA), -1 = the heuristic.
// multicast: 1 / 0 = the heuristic may / may not pair tiles along M sharing B (-1: kMulticastByDefault).
// multicast_on_a: only 2-CTA clusters of tile pairs along N that share A (each CTA loads half of A's rows into
// both; normal GEMMs with a K-major A, no split-K, at least two column blocks; an error where none fits).
// The kernel and host support these pairs; the heuristic never picks them: at M = 64 / 128 with many column tiles
// (where every tile re-reads the same A from L2) they ran 5-11 % slower than the heuristic's picks on the H200
// (128 x 7168 x 16384: 45.1 against 40.6 us): the cluster's handshakes and half-rate A loads cost more than the L2
// traffic they save.
// block_m_multiple / block_n_multiple (set_block_size_multiple_of; 0: none): only tiles whose BLOCK_M / BLOCK_N are
// multiples of them. fixed_reduction (set_deterministic): no split-K and no stream-K, so every output's K blocks are
// added in one order, the same for every M (with a forced split_k or stream_k it is an error).
struct GemmOverrides {
    uint32_t block_m = 0, block_n = 0, num_splits = 0;
    uint32_t block_m_multiple = 0, block_n_multiple = 0;
    bool fixed_reduction = false;
    int32_t overlap = -1;
    uint32_t fp32_buffers = 0;
    int32_t stream_k = -1;
    bool multicast_on_a = false;
    int32_t multicast = -1;

    bool allow_multicast() const { return multicast < 0 ? kMulticastByDefault : multicast == 1; }
};

// The forced choices of one GEMM family's DG_TUNE section (fp8_gemm or bf16_gemm: each reads only its own).
inline GemmOverrides gemm_overrides(const TuneSettings& tune) {
    GemmOverrides o;
    const auto get = [&](const char* key, auto fallback) {
        const auto v = tune.get(key);
        return v ? static_cast<decltype(fallback)>(*v) : fallback;
    };
    o.block_m = get("block_m", o.block_m);
    o.block_n = get("block_n", o.block_n);
    o.num_splits = get("split_k", o.num_splits);
    o.overlap = get("overlap", o.overlap);
    o.fp32_buffers = get("fp32_buffers", o.fp32_buffers);
    o.stream_k = get("stream_k", o.stream_k);
    o.multicast_on_a = get("multicast_on_a", 0u) != 0;
    o.multicast = get("multicast", o.multicast);
    return o;
}

// The forced choices for a GEMM with these operands, from the environment's DG_TUNE (read when a shape is first
// planned).
inline GemmOverrides gemm_overrides_for(const GemmOperands& operands) {
    return gemm_overrides(tune_settings(operands.is_fp8() ? TuneFamily::kFp8Gemm : TuneFamily::kBf16Gemm));
}

// The forced choices above with the runtime settings of DeviceRuntime::gemm_settings_key applied
inline GemmOverrides with_gemm_settings(GemmOverrides forced, uint32_t settings_key) {
    forced.block_m_multiple = settings_key & 0x1ffu;
    forced.block_n_multiple = (settings_key >> 9) & 0x1ffu;
    forced.fixed_reduction = ((settings_key >> 18) & 1u) != 0;
    return forced;
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
    // (FP8 x FP4: B's packed tile is not multicast)
    allow_multicast = allow_multicast && !grouped && !operands.mn_major_b && !operands.fp4_b() && !operands.k_batched;
    DG_CHECK_INPUT(num_sms > 0, "num_sms must be positive");
    DG_CHECK_INPUT(operands.is_fp8() ? !operands.mn_major_a && !operands.mn_major_b : true,
                   "FP8 operands must be K-major");
    const uint32_t num_k_blocks = (k + operands.block_k() - 1) / operands.block_k();
    DG_CHECK_INPUT(!forced.fixed_reduction || (forced.num_splits <= 1 && forced.stream_k <= 0),
                   "set_deterministic(True) forbids split-K and stream-K, but DG_TUNE forces split_k={} stream_k={}",
                   forced.num_splits, forced.stream_k);
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
            // K block of 64 x 160 in about the time two take for 128 x 160 (H200: 32 groups x 192 rows, 1.4x
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
        if (forced.block_m_multiple && block_m % forced.block_m_multiple != 0)
            continue;
        const uint32_t wgs = gemm_math_warpgroups(block_m);
        for (uint32_t block_n = 16; block_n <= 256; block_n += 16) {
            if ((forced.block_n && block_n != forced.block_n) ||
                (forced.block_n_multiple && block_n % forced.block_n_multiple != 0))
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
                if (splits > num_k_blocks || (splits > 1 && (grouped || forced.fixed_reduction || operands.skip_head_mid())))
                    continue;
                const bool tma_store = use_tma_store && splits == 1;
                if (gemm_max_stages(block_m, block_n, tma_store, operands, splits,
                                    gemm_min_fp32_buffers(block_n, tma_store, operands)) == 0)
                    continue;
                // Pairs of tiles along M share B through a 2-CTA cluster (not with split-K); forced, pairs along N
                // share A instead
                const bool multicast_on_a = forced.multicast_on_a;
                if (multicast_on_a && (grouped || splits > 1 || n_blocks < 2 || operands.mn_major_a || num_sms < 2 ||
                                       operands.k_batched))
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
                if (forced.fixed_reduction) {
                    // (no stream-K: its shared tiles' K ranges depend on the tile count, so on M)
                } else if (splits == 1 && !multicast && !grouped && forced.stream_k > 0) {
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
                // where the model sees the DRAM bound either way, more SMs pull more bytes at once (H200, BF16
                // masked 6 x 20 x 4096 x 7168: 64 x 96 tiles on every SM 98 us, 64 x 256 ones on 96 SMs 110 us)
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
    DG_CHECK_INPUT(best_cost >= 0, "no {} GEMM config fits m={} n={} k={} with the forced block_m={} block_n={} "
                   "split_k={} (DG_TUNE {}_gemm section or get_gemm_config arguments; 0 = not forced) and "
                   "set_block_size_multiple_of({}, {}) (0: none){}",
                   operands.is_fp8() ? "FP8" : "BF16", m, n, k, forced.block_m, forced.block_n, forced.num_splits,
                   operands.is_fp8() ? "fp8" : "bf16", forced.block_m_multiple, forced.block_n_multiple,
                   forced.multicast_on_a ? " and multicast_on_a=1 (normal GEMMs, K-major A, no split-K, "
                                           "at least two column blocks)" : "");

    best.use_tma_store = use_tma_store && best.num_splits == 1;
    // (with overlap=1 forced the winner runs the overlapped promotion exactly when it fits)
    DG_CHECK_INPUT(forced.overlap != 1 || best.overlap_promotion, "forced overlap=1: overlapped promotion does not "
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
    DG_CHECK_INPUT(best.num_stages >= 2, "forced fp32_buffers={}: BLOCK_M={} BLOCK_N={} with {} FP32 staging "
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
