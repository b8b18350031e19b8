// Config choice for the SM90 FP8 MQA-logits kernel (pure function of the problem and the device).
//
// The kernel is not persistent: CTA (b, p) takes BLOCK_Q = 2 * 256 / H queries and a chunk of C keys.
// A chunk long enough amortizes each CTA's setup (barrier init, Q load, pipeline fill: a few us,
// against ~0.3 us of tensor-core time per 64-key tile at H = 64, D = 128); short enough that the grid fills the
// SMs (measured: mqa_logits_split). Stages: as many as fit in 8 x 8 KB.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include <deep_gemm/common/host_device_types.hpp>

#include "../../utils/exception.hpp"
#include "../../utils/format.hpp"
#include "../../utils/tune.hpp"

namespace dg::kernels {

struct MqaLogitsConfig {
    uint32_t num_heads = 64, head_dim = 128, num_stages = 8;
    bool is_compressed = false, clean_logits = true, out_bf16 = false;
    bool relu_by_abs = false;  // the head reduction's form (mqa::weighted_relu_sums): FMNMX + FFMA, or |x| (below)
    // sum |x| w per accumulator, sum x w from e4m3 pieces of each query's weighted Q on the tensor core (needs
    // relu_by_abs; H = 64 or 32; mqa::SignedSumPieces)
    bool signed_sum_wgmma = false;
    // each math warpgroup's tile as two commit groups of N = 128: the first half reduced while the second's wgmmas run
    bool split_halves = false;
    // q and kv packed e2m1 with UE8M0 scales per 1x32 (the kernel's FP4 mode: e4m3 made in shared memory)
    bool fp4_operands = false;
    uint32_t num_kv_per_split = 4096;  // C: keys (and output columns) per CTA, a multiple of 64
    uint32_t smem_bytes = 0;

    // What the kernel is compiled with (the JIT renders it by field name)
    deep_gemm::Sm90MqaLogitsKernelConfig kernel_config() const {
        return {.num_heads = num_heads,
                .head_dim = head_dim,
                .num_stages = num_stages,
                .is_compressed = is_compressed,
                .clean_logits = clean_logits,
                .out_bf16 = out_bf16,
                .relu_by_abs = relu_by_abs,
                .signed_sum_wgmma = signed_sum_wgmma,
                .split_halves = split_halves,
                .fp4_operands = fp4_operands};
    }

    std::string describe() const {
        return fmt::format("H={} D={} stages={} compressed={} clean={} bf16={} relu_by_abs={} "
                           "signed_sum_wgmma={} split_halves={} fp4={} split={} smem={}", num_heads, head_dim,
                           num_stages, is_compressed, clean_logits, out_bf16, relu_by_abs, signed_sum_wgmma,
                           split_halves, fp4_operands, num_kv_per_split, smem_bytes);
    }
};

// The kernel's shared memory (deep_gemm::sm90_mqa_logits_smem_bytes, which the kernel checks against its layout).
inline uint32_t mqa_logits_smem_bytes(uint32_t num_heads, uint32_t head_dim, uint32_t num_stages,
                                      bool signed_sum_wgmma, bool fp4_operands = false) {
    deep_gemm::Sm90MqaLogitsKernelConfig c{};
    c.num_heads = num_heads, c.head_dim = head_dim, c.num_stages = num_stages, c.signed_sum_wgmma = signed_sum_wgmma;
    c.fp4_operands = fp4_operands;
    return deep_gemm::sm90_mqa_logits_smem_bytes(c);
}

inline uint32_t mqa_logits_block_q(uint32_t num_heads) { return deep_gemm::sm90_mqa_logits_block_q(num_heads); }

// The key chunk per CTA: 8192 keys, halved (down to 512) while the grid would hold fewer CTAs than SMs. Measured
// (H200, a sweep of the forced chunk over every H = 64 bench row and the H = 32 one): 8192 against the earlier
// rule (4096, halved while fewer than 4 CTAs per SM) 821 -> 852 TFLOPS geomean, the S_kv = 8192 rows 1-12 % faster
// (one chunk per query block: the Q tile, the pieces and the pipeline fill paid once per row block), 2048 x 65536
// causal 4 % slower; 16384: 849; 2048: 771.
inline uint32_t mqa_logits_split(uint64_t seq_len, uint64_t width, uint32_t num_heads, uint32_t num_sms) {
    const uint64_t num_q_blocks = (seq_len + mqa_logits_block_q(num_heads) - 1) / mqa_logits_block_q(num_heads);
    uint32_t split = 8192;
    while (split > 512 && num_q_blocks * ((width + split - 1) / split) < num_sms)
        split /= 2;
    return split;
}

inline MqaLogitsConfig get_mqa_logits_config(uint32_t num_heads, uint32_t head_dim, uint64_t seq_len,
                                             uint64_t seq_len_kv, uint64_t width, bool is_compressed,
                                             bool clean_logits, bool out_bf16, uint32_t num_sms,
                                             bool fp4_operands = false) {
    MqaLogitsConfig c;
    c.num_heads = num_heads, c.head_dim = head_dim;
    c.num_stages = head_dim == 128 ? 8 : 12;
    c.is_compressed = is_compressed, c.clean_logits = clean_logits, c.out_bf16 = out_bf16;
    c.num_kv_per_split = mqa_logits_split(seq_len, std::max(seq_len_kv, width), num_heads, num_sms);
    // Measured (H200, A/B timed alongside, every H = 64 row of the bench and the H = 32 one, D = 128): the
    // pieces 1-6 % faster, with the split tile 1-10 % (772 -> 816 TFLOPS geomean at H = 64); the split alone 1 %
    // slower. D = 64 keeps the FMNMX form (not measured).
    c.signed_sum_wgmma = head_dim == 128 && num_heads >= 32;
    c.relu_by_abs = c.signed_sum_wgmma;
    c.split_halves = c.signed_sum_wgmma && num_heads == 64;
    if (fp4_operands) {
        // FP4: the FMNMX form without the pieces (their pre-pass reads FP8 q) and 16 stages of 64 x D / 2 bytes (as
        // many bytes in flight as the FP8 path's 8 x 64 x D; not measured)
        c.fp4_operands = true;
        c.signed_sum_wgmma = c.relu_by_abs = c.split_halves = false;
        c.num_stages = 16;
    }
    c.smem_bytes = mqa_logits_smem_bytes(num_heads, head_dim, c.num_stages, c.signed_sum_wgmma, c.fp4_operands);
    return c;
}

// Where the split tile fits the math warpgroups' registers (ptxas spills otherwise): H = 64, and H = 32 without the
// pieces.
inline bool mqa_logits_split_halves_fit(const MqaLogitsConfig& c) {
    return c.num_heads == 64 || (c.num_heads == 32 && !c.signed_sum_wgmma);
}

// DG_TUNE's mqa_logits section: kv_split forces the keys per CTA (C) instead of mqa_logits_split's (for sweeps; any
// multiple of 64 gives the same bits: each output is one 64-key tile's sums either way).
inline void apply_mqa_logits_tune(MqaLogitsConfig& c, const TuneSettings& tune) {
    if (const auto kv_split = tune.get("kv_split"))
        c.num_kv_per_split = *kv_split;
}

// ---------------------------------------------------------------------------------------------- paged decode
// The paged kernel is persistent (one CTA per schedule row) and streams the kv cache through a ring of
// [64 keys x D] kv stages (the request's Q tile lives in two slots of its own): as many stages as fit in
// 200 KB next to the Q slots, 2 to 32, to keep enough bytes in flight per SM (16 x 8 KB at D = 128).
struct PagedMqaLogitsConfig {
    uint32_t next_n = 1, num_heads = 64, head_dim = 128, block_kv = 64, num_stages = 8;
    uint32_t num_math_wgs = 2;  // math warpgroups: 3 when next_n x H <= 128, else 2
    bool is_2d_context_lens = false, clean_logits = false;
    bool out_bf16 = false;     // BF16 logits (else FP32)
    bool has_indices = false;  // q rows are tokens, each with its block-table row from `indices` (next_n = 1)
    bool relu_by_abs = false;  // the head reduction's form (mqa::weighted_relu_sums): two FFMAs at next_n = 1
    // The signed head sums from e4m3 pieces on the tensor core (the kernel's kSignedSumByWgmma; with relu_by_abs)
    bool signed_sum_wgmma = false;
    // q and the cache's kv packed e2m1 with UE8M0 scales per 1x32 (the kernel's FP4 mode; set_paged_fp4)
    bool fp4_operands = false;
    uint32_t smem_bytes = 0;

    // What the kernel is compiled with (the JIT renders it by field name)
    deep_gemm::Sm90PagedMqaLogitsKernelConfig kernel_config() const {
        return {.next_n = next_n,
                .num_heads = num_heads,
                .head_dim = head_dim,
                .block_kv = block_kv,
                .num_stages = num_stages,
                .num_math_warpgroups = num_math_wgs,
                .is_2d_context_lens = is_2d_context_lens,
                .clean_logits = clean_logits,
                .relu_by_abs = relu_by_abs,
                .signed_sum_wgmma = signed_sum_wgmma,
                .out_bf16 = out_bf16,
                .has_indices = has_indices,
                .fp4_operands = fp4_operands};
    }

    std::string describe() const {
        return fmt::format("next_n={} H={} D={} block_kv={} stages={} math_wgs={} 2d_lens={} clean={} relu_by_abs={} "
                           "signed_sum_wgmma={} bf16={} indices={} fp4={} smem={}", next_n, num_heads, head_dim,
                           block_kv, num_stages, num_math_wgs, is_2d_context_lens, clean_logits, relu_by_abs,
                           signed_sum_wgmma, out_bf16, has_indices, fp4_operands, smem_bytes);
    }
};

// Shared memory of the pieces (kSignedSumByWgmma): per Q slot a 16-row piece tile and 16 FP32 scales
// (deep_gemm::sm90_paged_mqa_logits_pieces_bytes)
inline uint32_t paged_mqa_logits_pieces_bytes(uint32_t head_dim, bool signed_sum_wgmma) {
    return deep_gemm::sm90_paged_mqa_logits_pieces_bytes(head_dim, signed_sum_wgmma);
}

// The kernel's shared memory (deep_gemm::sm90_paged_mqa_logits_smem_bytes, which the kernel checks against its
// layout).
inline uint32_t paged_mqa_logits_smem_bytes(uint32_t next_n, uint32_t num_heads, uint32_t head_dim,
                                            uint32_t num_stages, bool signed_sum_wgmma = false,
                                            uint32_t num_math_wgs = 2, bool fp4_operands = false) {
    return deep_gemm::sm90_paged_mqa_logits_smem_bytes(next_n, num_heads, head_dim, num_stages, signed_sum_wgmma,
                                                       num_math_wgs, fp4_operands);
}

// As many stages as fit, rounded down to a multiple of the math warpgroups and of the 2 producer warps (each
// stage has one consumer and one producer)
inline uint32_t paged_mqa_logits_stages(uint32_t next_n, uint32_t num_heads, uint32_t head_dim, uint32_t num_math_wgs,
                                        bool signed_sum_wgmma = false, bool fp4_operands = false) {
    const uint32_t budget =
        200 * 1024 - 1024 - 2 * next_n * num_heads * head_dim - paged_mqa_logits_pieces_bytes(head_dim, signed_sum_wgmma) -
        deep_gemm::sm90_paged_mqa_logits_fp4_bytes(next_n, num_heads, head_dim, num_math_wgs, fp4_operands);
    const uint32_t stage_bytes = 64 * (fp4_operands ? head_dim / 2 : head_dim) + 64 * 4 + 16;
    const uint32_t fit = std::clamp<uint32_t>(budget / stage_bytes, 2, 32);
    const uint32_t unit = num_math_wgs % 2 == 0 ? num_math_wgs : 2 * num_math_wgs;
    return std::max(fit / unit * unit, unit);
}

// Three math warpgroups (152 registers each) hold an m64nN fragment with N = next_n x H <= 128; N = 256 needs
// two (232 registers each)
inline uint32_t paged_mqa_logits_max_math_wgs(uint32_t next_n, uint32_t num_heads) {
    return next_n * num_heads <= 128 ? 3 : 2;
}

// The signed head sums from e4m3 pieces by default (H200, H = 64, D = 128, two rounds of each form timed
// alternately): 64 x 2 x 65536 keys 2.0 % and 256 x 2 x 65536 1.7 % faster; at 8192 keys and at next_n = 1
// 0-2.4 % slower. So on for next_n = 2, H = 64, D = 128 from this many columns of logits (max_context_len; between
// the 8192 measured off and the 65536 measured on)
constexpr uint32_t kPagedPiecesMinContext = 16384;

// `max_context_len`: the logits' row length (0: not known, as for compile-only configs)
inline PagedMqaLogitsConfig get_paged_mqa_logits_config(uint32_t next_n, uint32_t num_heads, uint32_t head_dim,
                                                        uint32_t block_kv, bool is_2d_context_lens,
                                                        bool clean_logits, uint32_t max_context_len = 0) {
    PagedMqaLogitsConfig c;
    c.next_n = next_n, c.num_heads = num_heads, c.head_dim = head_dim, c.block_kv = block_kv;
    c.is_2d_context_lens = is_2d_context_lens, c.clean_logits = clean_logits;
    c.num_math_wgs = paged_mqa_logits_max_math_wgs(next_n, num_heads);
    c.signed_sum_wgmma =
        next_n == 2 && num_heads == 64 && head_dim == 128 && max_context_len >= kPagedPiecesMinContext;
    // Measured at H = 64 (H200, A/B timed alongside): two FFMAs per accumulator 6 % faster than FMNMX + FFMA at
    // next_n = 1, 3-4 % slower at next_n = 2 (the pieces complete the |x| form: with them, always)
    c.relu_by_abs = next_n == 1 || c.signed_sum_wgmma;
    c.num_stages = paged_mqa_logits_stages(next_n, num_heads, head_dim, c.num_math_wgs, c.signed_sum_wgmma);
    c.smem_bytes = paged_mqa_logits_smem_bytes(next_n, num_heads, head_dim, c.num_stages, c.signed_sum_wgmma);
    return c;
}

// DG_TUNE's paged_mqa_logits section: math_wgs (2 or 3) forces the math warpgroups (three fit only next_n x H <= 128:
// the register budget of a 64 x next_n H accumulator), stages the kv ring's depth (a multiple of 2, for the producer
// warps, and of the math warpgroups); without stages, the ring is sized again for the forced warpgroups.
inline void apply_paged_mqa_logits_tune(PagedMqaLogitsConfig& c, const TuneSettings& tune) {
    const auto math_wgs = tune.get("math_wgs"), stages = tune.get("stages");
    if (!math_wgs && !stages)
        return;
    if (math_wgs) {
        DG_CHECK_INPUT(*math_wgs <= paged_mqa_logits_max_math_wgs(c.next_n, c.num_heads),
                       "DG_TUNE: paged_mqa_logits:math_wgs={} needs next_n * H <= 128, got next_n {}, H {}",
                       *math_wgs, c.next_n, c.num_heads);
        c.num_math_wgs = *math_wgs;
    }
    if (stages) {
        DG_CHECK_INPUT(*stages % c.num_math_wgs == 0 && *stages % 2 == 0,
                       "DG_TUNE: paged_mqa_logits:stages={} must be a multiple of 2 (producer warps) and of the "
                       "kernel's {} math warpgroups here (next_n {}, H {})", *stages, c.num_math_wgs, c.next_n,
                       c.num_heads);
        c.num_stages = *stages;
    } else {
        c.num_stages = paged_mqa_logits_stages(c.next_n, c.num_heads, c.head_dim, c.num_math_wgs, c.signed_sum_wgmma,
                                               c.fp4_operands);
    }
    c.smem_bytes = paged_mqa_logits_smem_bytes(c.next_n, c.num_heads, c.head_dim, c.num_stages, c.signed_sum_wgmma,
                                               c.num_math_wgs, c.fp4_operands);
}

// The FP4 mode (q and kv packed e2m1, D 64 or 128): without the pieces (the pieces warps convert Q instead), and the
// ring sized again for the half-size stages and the FP4 buffers.
inline void set_paged_fp4(PagedMqaLogitsConfig& c) {
    c.fp4_operands = true;
    c.signed_sum_wgmma = false;
    c.relu_by_abs = c.next_n == 1;
    c.num_stages = paged_mqa_logits_stages(c.next_n, c.num_heads, c.head_dim, c.num_math_wgs, false, true);
    c.smem_bytes = paged_mqa_logits_smem_bytes(c.next_n, c.num_heads, c.head_dim, c.num_stages, false,
                                               c.num_math_wgs, true);
}

}  // namespace dg::kernels
