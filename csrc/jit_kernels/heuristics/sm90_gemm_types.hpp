// What the SM90 GEMM kernel is instantiated with, on the host: its layout (GemmType), operand kind and layouts
// (GemmOperands) and the whole config (GemmConfig), which the heuristic fills and the JIT renders.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace dg::kernels
