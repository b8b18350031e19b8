// What the extension (host, g++) and the kernels (device, NVCC or NVRTC) must agree on, declared once: the GEMM
// types and operand kinds, the kernel parameter structs passed by value, the compile-time configs the JIT renders
// (by field name), the shared-memory sizes and the TMA box rules. Plain C++ types and constexpr functions, no
// CUDA header: the extension includes it through the package include path (deep_gemm/include), the kernels as
// <deep_gemm/common/host_device_types.hpp>, which puts it in the JIT cache key like every kernel header.
#pragma once

// NVRTC has no standard headers: there the fixed-width integer names come from common/types.cuh, which includes
// this header after declaring them in namespace deep_gemm.
#if !defined(__CUDACC_RTC__)
#include <cstdint>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define DG_HOST_DEVICE __host__ __device__
#else
#define DG_HOST_DEVICE
#endif

namespace deep_gemm {

// ------------------------------------------------------------------------------------------------ GEMM kinds

// How the rows (M) or the reduction (K) of a GEMM are grouped.
enum class GemmType : uint32_t {
    kNormal = 0,
    kMGroupedContiguous = 1,
    kMGroupedContiguousPsum = 2,
    kMGroupedMasked = 3,
    kKGroupedContiguous = 4,
};

DG_HOST_DEVICE constexpr bool is_m_grouped(GemmType type) {
    return type != GemmType::kNormal && type != GemmType::kKGroupedContiguous;
}

// The enumerator as C++ source (the JIT renders configs with it).
DG_HOST_DEVICE constexpr const char* gemm_type_name(GemmType type) {
    switch (type) {
        case GemmType::kMGroupedContiguous: return "GemmType::kMGroupedContiguous";
        case GemmType::kMGroupedContiguousPsum: return "GemmType::kMGroupedContiguousPsum";
        case GemmType::kMGroupedMasked: return "GemmType::kMGroupedMasked";
        case GemmType::kKGroupedContiguous: return "GemmType::kKGroupedContiguous";
        default: return "GemmType::kNormal";
    }
}

// What the operands are and how their products are scaled.
enum class OperandKind : uint32_t {
    kFp8BlockScaled = 0,  // e4m3, recipe (1, 128, 128): sfa per row and 128 of K, sfb per 128 x 128 block; BF16 D
    kFp8RowScaled = 1,    // e4m3, recipe (1, 1, 128): sfa and sfb per row and 128 of K; FP32 D (+ C)
    kBf16 = 2,            // BF16, unscaled: the wgmmas accumulate straight into the FP32 accumulators
    kFp8Fp4 = 3,          // A e4m3 with sfa per row and 128 of K; B e2m1 (packed two a byte) with UE8M0 exponents per
                          // row and 32 of K, converted to e4m3 in shared memory; BF16 D
};

// The enumerator as C++ source (the JIT renders configs with it).
DG_HOST_DEVICE constexpr const char* operand_kind_name(OperandKind kind) {
    switch (kind) {
        case OperandKind::kFp8RowScaled: return "OperandKind::kFp8RowScaled";
        case OperandKind::kBf16: return "OperandKind::kBf16";
        case OperandKind::kFp8Fp4: return "OperandKind::kFp8Fp4";
        default: return "OperandKind::kFp8BlockScaled";
    }
}

// ------------------------------------------------------------------------------------------------ kernel parameters

// A TMA tensor map (CUtensorMap): 128 opaque bytes, built on the host, passed as a __grid_constant__ kernel
// parameter.
struct alignas(64) TmaDescriptor {
    uint64_t opaque[16];
};
static_assert(sizeof(TmaDescriptor) == 128, "a CUtensorMap is 128 bytes");

// The grouped layout of a GEMM (unused by normal GEMMs), passed by value.
struct GroupedLayout {
    const int32_t* data;     // per-row group ids [M], cumulative end rows [num_groups], or masked_m [num_groups]
    uint32_t num_groups;
    uint32_t alignment;      // contiguous: segment start alignment (rows)
    uint32_t max_m;          // masked: rows per group in A and D
    uint32_t zero_padding;   // contiguous: bit 0, the GEMM zeroes D's padding rows (ensure_zero_padding); bit 1,
                             // with 16-byte stores; bit 2, only those of group segments (common/zero_padding.cuh)
    const uint32_t* k_blocks;  // k-grouped: K blocks per group (a generic pointer into the kernel's
                               // parameters, set by the kernel: read with plain loads)
};
static_assert(sizeof(GroupedLayout) == 32, "GroupedLayout is a 32-byte kernel parameter");

// Stream-K's kernel parameter: the global workspace its CTAs exchange partial sums through (unused without
// stream-K). partials: one slot of BLOCK_M x BLOCK_N floats per CTA, for its contribution (a CTA makes at most
// one: its range's first segment); flags: per stream-K tile, how many contributions were stored (zero when
// the kernel starts: the host clears them; each owner resets its tile's count once it has seen all).
struct StreamKParams {
    float* partials;
    uint32_t* flags;
    uint32_t num_tiles;  // the stream-K tiles (the last ones in the tile order), 0 for none
};
static_assert(sizeof(StreamKParams) == 24, "StreamKParams is a 24-byte kernel parameter");

// K-grouped GEMMs: each group's A [M, K_g] and B [N, K_g] have their own row stride, so the host encodes
// one TMA map per group and operand, and passes them by value (kernel parameters may take up to 32764
// bytes: kMaxGroups <= 120). sf_row[g]: the group's first row in the scale tensors [sum of K blocks, M or N].
template <uint32_t kMaxGroups>
struct KGroupedParams {
    TmaDescriptor a[kMaxGroups];
    TmaDescriptor b[kMaxGroups];
    uint32_t k_blocks[kMaxGroups];
    uint32_t sf_row[kMaxGroups];
};
template <>
struct KGroupedParams<0> {  // (not k-grouped)
    uint32_t unused;
};

// Byte offsets of the fields of KGroupedParams<capacity>, for the host, which fills one buffer for any capacity.
struct KGroupedParamsOffsets {
    DG_HOST_DEVICE static constexpr uint32_t a(uint32_t capacity, uint32_t group) { return group * 128; }
    DG_HOST_DEVICE static constexpr uint32_t b(uint32_t capacity, uint32_t group) {
        return (capacity + group) * 128;
    }
    DG_HOST_DEVICE static constexpr uint32_t k_blocks(uint32_t capacity, uint32_t group) {
        return 2 * capacity * 128 + group * 4;
    }
    DG_HOST_DEVICE static constexpr uint32_t sf_row(uint32_t capacity, uint32_t group) {
        return 2 * capacity * 128 + (capacity + group) * 4;
    }
};
static_assert(sizeof(KGroupedParams<8>) == KGroupedParamsOffsets::k_blocks(8, 16) &&
              sizeof(KGroupedParams<120>) == KGroupedParamsOffsets::k_blocks(120, 240),
              "KGroupedParams: the maps of A, then of B, then the K block counts and first scale rows");

// ------------------------------------------------------------------------------------------------ SM90 GEMM

// The compile-time config of the SM90 GEMM kernel (deep_gemm/impls/sm90_gemm.cuh); the JIT renders it with
// designated initializers in this order (visit_fields).
struct Sm90GemmKernelConfig {
    uint32_t shape_m, shape_n, shape_k;  // compile-time shape (0: given at run time)
    uint32_t block_m, block_n;
    uint32_t num_stages;
    uint32_t num_math_warpgroups;
    uint32_t num_group_n;           // tiles rasterized in groups of this many column blocks
    uint32_t num_multicast;         // CTAs per cluster sharing one operand through TMA multicast
    bool is_multicast_on_a;         // the shared operand: A (pairs along N) or B (pairs along M)
    uint32_t store_chunk_n;         // BF16 TMA store: columns per box
    uint32_t fp32_buffers;          // FP32 D through TMA: staging buffers (32-column chunks) per math warpgroup
    bool use_tma_store;
    uint32_t num_splits;            // split-K: units per tile along K, one cluster of CTAs per tile
    OperandKind operands;
    bool mn_major_a, mn_major_b;    // BF16 only: A stored [K, M], B stored [K, N]
    bool fp32_out;                  // FP32 D (always so with kFp8RowScaled)
    GemmType gemm_type;
    uint32_t max_k_groups;          // k-grouped: capacity of the per-group TMA map parameter (else 0)
    bool overlap_promotion;         // FP8: block k + 1's wgmmas run during block k's promotion
    bool stream_k;                  // the last wave's tiles shared by all CTAs along K
    bool batched;                   // masked: A [rows, groups, K] and D [rows, groups, N] in place, 3-D TMA maps
    bool k_batched;                 // normal: D = sum_s A[s] @ B[s]^T, A [S, M, K] and B [S, N, K] by 3-D TMA maps
    // Skip-head-mid (head_left + head_right > 0): output column n = h * (left + right) + j is stored at D column
    // h * (left + mid + right) + (j < left ? j : j + mid); left and right multiples of 64 (whole store chunks)
    uint32_t head_left, head_mid, head_right;

    // Calls f(name, value) for each field, in declaration order (what the JIT renders).
    template <typename F>
    constexpr void visit_fields(F&& f) const {
        f("shape_m", shape_m), f("shape_n", shape_n), f("shape_k", shape_k), f("block_m", block_m);
        f("block_n", block_n), f("num_stages", num_stages), f("num_math_warpgroups", num_math_warpgroups);
        f("num_group_n", num_group_n), f("num_multicast", num_multicast), f("is_multicast_on_a", is_multicast_on_a);
        f("store_chunk_n", store_chunk_n), f("fp32_buffers", fp32_buffers), f("use_tma_store", use_tma_store);
        f("num_splits", num_splits), f("operands", operands), f("mn_major_a", mn_major_a);
        f("mn_major_b", mn_major_b), f("fp32_out", fp32_out), f("gemm_type", gemm_type);
        f("max_k_groups", max_k_groups), f("overlap_promotion", overlap_promotion), f("stream_k", stream_k);
        f("batched", batched), f("k_batched", k_batched), f("head_left", head_left), f("head_mid", head_mid);
        f("head_right", head_right);
    }
};

// Split-K's exchange slots: each math thread's accumulators (BLOCK_N / 2 per 64-row slice) as float2 pairs, spread
// over the splits' owners, one slot per split (SplitKExchange), 1024-byte aligned; none without split-K.
DG_HOST_DEVICE constexpr uint32_t sm90_gemm_split_slot_bytes(uint32_t block_m, uint32_t block_n,
                                                             uint32_t num_math_warpgroups, uint32_t num_splits) {
    if (num_splits <= 1)
        return 0;
    const uint32_t pairs = (block_m / num_math_warpgroups / 64) * (block_n / 2) / 2;  // per math thread
    const uint32_t bytes = num_splits * ((pairs + num_splits - 1) / num_splits) * num_math_warpgroups * 128 * 8;
    return (bytes + 1023) / 1024 * 1024;
}

// The SM90 GEMM kernel's shared memory: [D staging (TMA store)] [split-K slots] [A x stages] [B x stages]
// [sfa x stages] [sfb x stages] [packed FP4 B x stages] [full, empty barriers] [C-load barriers] [split-K barriers]
// [FP8 x FP4: b_loaded barriers], plus 1024 bytes to align the base for the 128B swizzle.
struct Sm90GemmSmem {
    uint32_t d;                // TMA store staging: the BF16 tile, or kNumFp32Buffers 32-column FP32 chunks per row
    uint32_t split;            // split-K: the slots of the accumulator pairs this CTA reduces
    uint32_t a_per_stage, b_per_stage;
    uint32_t sfa_per_stage;    // FP8: BLOCK_M floats; BF16: none
    uint32_t sfb_per_stage;    // 1d2d: float2, the tile's two scale blocks; per-row sfb: BLOCK_N floats (FP8 x FP4:
                               // the rows' packed exponent words, replaced by FP32 scales); BF16: none
    uint32_t b_packed_per_stage;  // FP8 x FP4: the packed e2m1 B tile (BLOCK_N x 64 bytes); otherwise none
    uint32_t num_c_barriers;   // FP32 D through TMA: one per staging buffer of each math warpgroup (C's loads)
    uint32_t num_split_barriers;  // split-K: split_full, split_free
    uint32_t total;
};

DG_HOST_DEVICE constexpr uint32_t sm90_gemm_align_up(uint32_t a, uint32_t b) {
    return (a + b - 1) / b * b;
}

DG_HOST_DEVICE constexpr Sm90GemmSmem sm90_gemm_smem(const Sm90GemmKernelConfig& c) {
    const bool is_fp8 = c.operands != OperandKind::kBf16;
    const uint32_t elem_bytes = is_fp8 ? 1 : 2, block_k = 128 / elem_bytes;
    Sm90GemmSmem s{};
    s.d = !c.use_tma_store ? 0 : c.fp32_out ? c.block_m * c.fp32_buffers * 128 : c.block_m * c.block_n * 2;
    s.split = sm90_gemm_split_slot_bytes(c.block_m, c.block_n, c.num_math_warpgroups, c.num_splits);
    s.a_per_stage = c.block_m * block_k * elem_bytes;
    s.b_per_stage = c.block_n * block_k * elem_bytes;
    s.sfa_per_stage = is_fp8 ? sm90_gemm_align_up(c.block_m * 4u, 128u) : 0;
    const bool fp4_b = c.operands == OperandKind::kFp8Fp4;
    s.sfb_per_stage = c.operands == OperandKind::kFp8RowScaled || fp4_b ? sm90_gemm_align_up(c.block_n * 4u, 128u)
                      : c.operands == OperandKind::kFp8BlockScaled ? 8
                                                                   : 0;
    s.num_c_barriers = c.fp32_out && c.use_tma_store ? c.fp32_buffers * c.num_math_warpgroups : 0;
    s.num_split_barriers = c.num_splits == 1 ? 0 : 2;
    s.b_packed_per_stage = fp4_b ? sm90_gemm_align_up(c.block_n * 64u, 128u) : 0;
    // (FP8 x FP4: a third barrier per stage, b_loaded)
    s.total = 1024 + s.d + s.split +
              c.num_stages * (s.a_per_stage + s.b_per_stage + s.sfa_per_stage + s.sfb_per_stage + s.b_packed_per_stage +
                              (fp4_b ? 3 : 2) * 8) +
              (s.num_c_barriers + s.num_split_barriers) * 8;
    return s;
}

// Whether the A and sfa boxes may hold only the rows that exist when the whole problem is one row block smaller
// than BLOCK_M: a plain GEMM, K-major A, not multicast on A (decode: M = 1 ... 32). TMA then does not zero-fill
// the rest of the tile on every K block; the tile's other rows keep stale shared memory, and a wgmma row depends
// only on its own A row and scale, and rows >= M are never stored.
DG_HOST_DEVICE constexpr bool sm90_gemm_small_m_box_may_shrink(const Sm90GemmKernelConfig& c) {
    return c.gemm_type == GemmType::kNormal && !c.mn_major_a && !(c.num_multicast > 1 && c.is_multicast_on_a);
}

// Rows of the A box (granularity 8) and the sfa box (granularity 4): the host encodes the boxes and the kernel
// arms the stage barrier with their bytes by this one rule.
DG_HOST_DEVICE constexpr uint32_t sm90_gemm_small_m_box_rows(bool may_shrink, uint32_t block_m, uint32_t shape_m,
                                                             uint32_t granularity) {
    return may_shrink && shape_m < block_m ? sm90_gemm_align_up(shape_m > 0 ? shape_m : 1u, granularity) : block_m;
}

// ------------------------------------------------------------------------------------------------ FP8 transpose

// The grouped FP8 transpose's kernel parameter (deep_gemm/impls/smxx_transpose_fp8.cuh), passed by value.
template <uint32_t kMaxGroups>
struct TransposeGroups {
    uint32_t num_groups;
    uint32_t tile_begin[kMaxGroups];  // the first K tile (grid y) of each group
    uint32_t start[kMaxGroups];       // the group's first row of src
    uint32_t k[kMaxGroups];           // K_g
};

// ------------------------------------------------------------------------------------------------ SM90 MQA logits

// FP8 pieces (rows of D) per query of the signed head sums by wgmma (mqa::SignedSumPieces: the e4m3 pieces of each
// query's weighted Q).
inline constexpr uint32_t kMqaSignedSumPieces = 4;

// The compile-time config of the prefill MQA-logits kernel (deep_gemm/impls/sm90_fp8_mqa_logits.cuh); the JIT
// renders it with designated initializers in this order (visit_fields).
struct Sm90MqaLogitsKernelConfig {
    uint32_t num_heads, head_dim, num_stages;
    bool is_compressed;     // rows W = max_seqlen_k wide: key j of query i in column j - ks[i] (else column j)
    bool clean_logits;      // the columns outside each query's key range written as -inf
    bool out_bf16;          // BF16 logits (else FP32)
    bool relu_by_abs;       // the head reduction's form: |x| (two FFMAs) rather than FMNMX + FFMA
    bool signed_sum_wgmma;  // the signed head sums from e4m3 pieces of each query's weighted Q on the tensor core
    bool split_halves;      // each math warpgroup's tile as two commit groups of N = 128
    bool fp4_operands;      // q and kv packed e2m1 with UE8M0 scales per 1x32, made e4m3 in shared memory

    // Calls f(name, value) for each field, in declaration order (what the JIT renders).
    template <typename F>
    constexpr void visit_fields(F&& f) const {
        f("num_heads", num_heads), f("head_dim", head_dim), f("num_stages", num_stages);
        f("is_compressed", is_compressed), f("clean_logits", clean_logits), f("out_bf16", out_bf16);
        f("relu_by_abs", relu_by_abs), f("signed_sum_wgmma", signed_sum_wgmma), f("split_halves", split_halves);
        f("fp4_operands", fp4_operands);
    }
};

// Queries per CTA: two math warpgroups of 256 query-heads (the wgmma N) each.
DG_HOST_DEVICE constexpr uint32_t sm90_mqa_logits_block_q(uint32_t num_heads) { return 2 * 256 / num_heads; }

// Its shared memory: alignment slack, the two math warpgroups' Q tiles (and with signed_sum_wgmma their pieces:
// kMqaSignedSumPieces rows of D per query; the pieces' scales stay in global memory), the kv stages of 64 keys, the
// stages' full/empty barriers, the Q barrier, and 16 bytes for the key range. With fp4_operands the stages hold
// packed kv (D / 2 bytes a key), and each math warpgroup has its packed Q tile and two e4m3 kv tiles of its own.
DG_HOST_DEVICE constexpr uint32_t sm90_mqa_logits_smem_bytes(const Sm90MqaLogitsKernelConfig& c) {
    const uint32_t pieces =
        c.signed_sum_wgmma ? sm90_mqa_logits_block_q(c.num_heads) * kMqaSignedSumPieces * c.head_dim : 0;
    const uint32_t fp4_buffers = c.fp4_operands ? 2 * (256 * c.head_dim / 2 + 2 * 64 * c.head_dim) : 0;
    const uint32_t stage_bytes = 64 * (c.fp4_operands ? c.head_dim / 2 : c.head_dim);
    return 1024 + 2 * 256 * c.head_dim + pieces + fp4_buffers + c.num_stages * stage_bytes +
           (2 * c.num_stages + 1) * 8 + 16;
}

// The compile-time config of the paged (decode) MQA-logits kernel (deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh),
// rendered like the prefill's.
struct Sm90PagedMqaLogitsKernelConfig {
    uint32_t next_n;               // T: queries (tokens) per request, 1, 2 or 4
    uint32_t num_heads, head_dim;
    uint32_t block_kv;             // keys per kv-cache block, 32 or 64
    uint32_t num_stages;
    uint32_t num_math_warpgroups;  // 3 when next_n x H <= 128, else 2
    bool is_2d_context_lens;       // context_lens [B, T] (else [B])
    bool clean_logits;             // the columns past each query's context written as -inf
    bool relu_by_abs;              // the head reduction's form: |x| (two FFMAs) rather than FMNMX + FFMA
    bool signed_sum_wgmma;         // the signed head sums from e4m3 pieces on the tensor core (with relu_by_abs)
    bool out_bf16;                 // BF16 logits (else FP32)
    bool has_indices;              // q rows are tokens, each with its block-table row from `indices` (next_n = 1)
    bool fp4_operands;             // q and the cache's kv packed e2m1 with UE8M0 scales per 1x32 (e4m3 in smem)

    // Calls f(name, value) for each field, in declaration order (what the JIT renders).
    template <typename F>
    constexpr void visit_fields(F&& f) const {
        f("next_n", next_n), f("num_heads", num_heads), f("head_dim", head_dim), f("block_kv", block_kv);
        f("num_stages", num_stages), f("num_math_warpgroups", num_math_warpgroups);
        f("is_2d_context_lens", is_2d_context_lens), f("clean_logits", clean_logits), f("relu_by_abs", relu_by_abs);
        f("signed_sum_wgmma", signed_sum_wgmma), f("out_bf16", out_bf16), f("has_indices", has_indices);
        f("fp4_operands", fp4_operands);
    }
};

// Shared memory of the paged kernel's pieces (signed_sum_wgmma): per Q slot (two) a 16-row piece tile (4 queries x
// kMqaSignedSumPieces) and its 16 FP32 scales.
DG_HOST_DEVICE constexpr uint32_t sm90_paged_mqa_logits_pieces_bytes(uint32_t head_dim, bool signed_sum_wgmma) {
    return signed_sum_wgmma ? 2 * (4 * kMqaSignedSumPieces * head_dim + 4 * kMqaSignedSumPieces * 4) : 0;
}

// Shared memory of the paged kernel's FP4 buffers (fp4_operands): two packed Q slots and, per math warpgroup, two
// e4m3 kv tiles (converted from the stages, which then hold 64 x D / 2 packed bytes).
DG_HOST_DEVICE constexpr uint32_t sm90_paged_mqa_logits_fp4_bytes(uint32_t next_n, uint32_t num_heads,
                                                                  uint32_t head_dim, uint32_t num_math_warpgroups,
                                                                  bool fp4_operands) {
    return fp4_operands ? 2 * next_n * num_heads * head_dim / 2 + num_math_warpgroups * 2 * 64 * head_dim : 0;
}

// Its shared memory: alignment slack, two Q slots, the kv stages with their 64 FP32 scales, the pieces, the
// full/empty barriers of the stages and of the Q slots (and the pieces' barriers). fp4_operands: the FP4 buffers,
// stages of 64 x D / 2 packed bytes and 64 exponent words, and the Q slots' conversion barriers.
DG_HOST_DEVICE constexpr uint32_t sm90_paged_mqa_logits_smem_bytes(uint32_t next_n, uint32_t num_heads,
                                                                   uint32_t head_dim, uint32_t num_stages,
                                                                   bool signed_sum_wgmma,
                                                                   uint32_t num_math_warpgroups = 2,
                                                                   bool fp4_operands = false) {
    return 1024 + 2 * next_n * num_heads * head_dim +
           num_stages * (64 * (fp4_operands ? head_dim / 2 : head_dim) + 64 * 4) +
           sm90_paged_mqa_logits_pieces_bytes(head_dim, signed_sum_wgmma) +
           sm90_paged_mqa_logits_fp4_bytes(next_n, num_heads, head_dim, num_math_warpgroups, fp4_operands) +
           (2 * num_stages + (signed_sum_wgmma || fp4_operands ? 6 : 4)) * 8;
}

// The paged kernel's problem, passed by value as one kernel parameter.
struct PagedMqaProblem {
    uint32_t batch_size, max_blocks, num_kv_blocks, out_width;
    const int32_t* context_lens;  // [B] or [B, T]
    const int32_t* block_table;   // [num_table_rows, max_blocks], row stride ld_block_table
    uint64_t ld_block_table;
    const int32_t* indices;       // has_indices: [B], the block-table row of each q row (token)
    uint32_t num_table_rows;
    const int32_t* schedule;      // [gridDim.x + 1, 2]
    const float* weights;         // [B * T, H], row stride ld_weights
    uint32_t ld_weights;
    void* logits;                 // [B * T, W] FP32 (BF16 with out_bf16), row stride ld_logits
    uint64_t ld_logits;
    const uint32_t* q_exponents;  // fp4_operands: [B * T, H] UE8M0 words of q's head rows, contiguous (else null)
};

// ------------------------------------------------------------------------------------------------ FP8 quantization

// Chunks of 8 values each lane of the per-token cast loads before it computes any: two 16-byte loads in flight per
// lane either way (a SwiGLU chunk loads gate and up; two SwiGLU chunks spilled registers). The host sizes the grid
// with it.
DG_HOST_DEVICE constexpr uint32_t per_token_quant_chunks_per_lane(bool swiglu) {
    return swiglu ? 1 : 2;
}

// The per-token FP8 cast's kernel parameter (deep_gemm/impls/smxx_quant_per_token.cuh), passed by value. Rows are
// [num_batches, num_rows] (a 2-D input is one batch); each row has num_cols output values. Strides are in elements of
// the tensor they index; the scale strides are in 4-byte words (an FP32 scale, or a word of four packed UE8M0 bytes).
struct PerTokenQuantParams {
    const void* x;                 // BF16 or FP32; with SwiGLU each row is [gate (num_cols), up (num_cols)]
    int64_t x_stride_batch, x_stride_row;
    uint8_t* out;                  // e4m3 [num_batches, num_rows, num_cols]
    int64_t out_stride_batch, out_stride_row;
    void* sf;                      // FP32 scales, or int32 words of packed UE8M0 bytes
    int64_t sf_stride_batch, sf_stride_row, sf_stride_k;
    uint32_t sf_padding_rows;      // MN-major: rows after the last one that are zeroed (align(M, 4) - M), else 0
    uint32_t num_batches, num_rows, num_cols, num_sf_k;  // num_sf_k = ceil(num_cols / gran_k)
    const int32_t* masked_m;       // nullptr, or [num_batches]: rows past masked_m[b] are left untouched
    const float* row_weights;      // nullptr, or FP32 [num_batches, num_rows] contiguous: SwiGLU output scaled per row
    float activation_clamp;        // SwiGLU: gate <= clamp, up in [-clamp, clamp] (when has_clamp)
    uint32_t has_clamp;
};

// The 128x128-block FP8 cast's kernel parameter (deep_gemm/impls/smxx_quant_per_block.cuh), passed by value.
struct PerBlockQuantParams {
    const void* x;                 // BF16 or FP32 [num_batches, num_rows, num_cols]
    int64_t x_stride_batch, x_stride_row;
    uint8_t* out;                  // e4m3, contiguous
    float* sf;                     // FP32 [num_batches, ceil(num_rows / 128), ceil(num_cols / 128)], contiguous
    uint32_t num_batches, num_rows, num_cols;
};

}  // namespace deep_gemm
