// What the SM90 GEMM kernel is instantiated with, on the host: its layout (GemmType), operand kind and layouts
// (GemmOperands) and the whole config (GemmConfig), which the heuristic fills and the JIT renders.
#pragma once

#include <cstdint>
#include <string>

#include <deep_gemm/common/host_device_types.hpp>

#include "../../utils/exception.hpp"

namespace dg::kernels {

// The kinds the kernel is instantiated with (declared with the kernels, deep_gemm/common/host_device_types.hpp)
using deep_gemm::GemmType;
using deep_gemm::gemm_type_name;
using deep_gemm::is_m_grouped;
using deep_gemm::operand_kind_name;
using deep_gemm::OperandKind;

// How D is written and the operand layouts, with the operand kind.
struct GemmOperands {
    OperandKind kind = OperandKind::kFp8BlockScaled;
    bool mn_major_a = false, mn_major_b = false;  // BF16 only: A stored [K, M], B stored [K, N]
    bool fp32_out = false;                        // FP32 D (always so with kFp8RowScaled)
    bool has_c = false;                           // a C added by the epilogue
    // Masked GEMMs only: A [rows, groups, K] and D [rows, groups, N] (K-major A, BF16 D through TMA), read and
    // written in place through 3-D TMA maps at (K or N, row in the group, group): einsum's per-head expressions
    bool batched = false;
    // Normal BF16 GEMMs only: D = sum over s of A[s] @ B[s]^T with A [S, M, K] and B [S, N, K] K-major, read in place
    // through 3-D TMA maps at (K, row, s): the K loop runs over S x ceil(K / BLOCK_K) blocks (einsum 'bmk,bnk->mn')
    bool k_batched = false;
    // fp8_gemm_nt_skip_head_mid in the epilogue (head_left + head_right > 0): the GEMM's column n = h * (left + right)
    // + j lands in D column h * (left + mid + right) + (j < left ? j : j + mid); BF16 D through TMA, no split-K
    uint32_t head_left = 0, head_mid = 0, head_right = 0;
    bool skip_head_mid() const { return head_left + head_right > 0; }

    bool is_fp8() const { return kind != OperandKind::kBf16; }
    bool per_row_sfb() const { return kind == OperandKind::kFp8RowScaled; }
    bool block_sfb() const { return kind == OperandKind::kFp8BlockScaled; }
    // FP8 x FP4: B packed e2m1 with UE8M0 exponents per 1x32, converted to e4m3 in the kernel
    bool fp4_b() const { return kind == OperandKind::kFp8Fp4; }
    // The per-row sfb (or FP4 B's exponent words), TMA-loaded per stage: MN-major [ceil(K/128)][N] 4-byte words
    bool sfb_by_tma() const { return per_row_sfb() || fp4_b(); }
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

// FP8 A (sfa per row and 128 of K) x FP4 B (UE8M0 per row and 32 of K), BF16 D.
inline GemmOperands fp8_fp4_operands() {
    return {OperandKind::kFp8Fp4, false, false, false, false};
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
    // What the kernel is compiled with (the JIT renders it by field name)
    deep_gemm::Sm90GemmKernelConfig kernel_config() const {
        return {.shape_m = shape_m,
                .shape_n = shape_n,
                .shape_k = shape_k,
                .block_m = block_m,
                .block_n = block_n,
                .num_stages = num_stages,
                .num_math_warpgroups = num_math_warpgroups,
                .num_group_n = num_group_n,
                .num_multicast = num_multicast,
                .is_multicast_on_a = is_multicast_on_a,
                .store_chunk_n = store_chunk_n,
                .fp32_buffers = fp32_buffers,
                .use_tma_store = use_tma_store,
                .num_splits = num_splits,
                .operands = operands.kind,
                .mn_major_a = operands.mn_major_a,
                .mn_major_b = operands.mn_major_b,
                .fp32_out = operands.fp32_out || operands.per_row_sfb(),
                .gemm_type = gemm_type,
                .max_k_groups = max_k_groups,
                .overlap_promotion = overlap_promotion,
                .stream_k = stream_k > 0,
                .batched = operands.batched,
                .k_batched = operands.k_batched,
                .head_left = operands.head_left,
                .head_mid = operands.head_mid,
                .head_right = operands.head_right};
    }
    std::string describe() const {
        static constexpr const char* kKinds[] = {"fp8 sfb per-block", "fp8 sfb per-row", "bf16", "fp8 x fp4"};
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
