// SM90 FP8 MQA logits: the scoring GEMM of the DeepSeek-V3.2 lightning indexer (prefill, non-paged).
//
// Computes   logits[i, j] = sum_h relu(q[i, h, :] . kv[j, :] * kv_scale[j]) * weights[i, h]
// for ks[i] <= j < ke[i] (clamped on the device to 0 <= ks <= ke <= S_kv, so bad indices never reach
// memory); with kCleanLogits every other position of row i is -inf. Output rows are W = S_kv wide, or
// W = max_seqlen_k when compressed (kIsCompressed: key j of row i lands in column j - ks[i]).
// q [S, H, D] and kv [S_kv, D] float8_e4m3fn with D contiguous; kv_scale FP32 [S_kv]; weights FP32
// [S, H]; logits FP32 or BF16 (kOutBf16) with row stride ld_logits.
//
// GEMM view: M = keys (A = a 64-key kv tile [64, D]), N = 256 = all H heads of 256 / H queries (B = those
//   rows of q seen as [S * H, D]), K = D (D / 32 wgmma k32 steps; FP32 accumulation over at most 128).
//   The head reduction runs along N: inside each thread's accumulator fragment (columns 8j + 2(lane%4)
//   + {0, 1}), then a two-round quad reduce-scatter (shfl.xor 1, 2) that leaves lane l the sums of
//   queries q = l%4 (mod 4) for its two key rows. No shared-memory reduction, no second pass (helpers
//   shared with the paged decode kernel: common/mqa_logits.cuh).
// Launch: grid (ceil(S / BLOCK_Q), num_splits), 384 threads, 1 CTA/SM, not persistent (the hardware
//   hands out CTAs as SMs free up, in blockIdx order, which balances causal ranges). CTA (x, p) owns query
//   block b = gridDim.x - 1 - x (the last queries, which see the most keys, first), queries
//   [b * BLOCK_Q, +BLOCK_Q), BLOCK_Q = 2 * 256 / H, and output columns [p * C, (p + 1) * C), C =
//   num_kv_per_split (a multiple of 64): it computes the 64-key tiles of keys [p * C, +C) that meet the
//   union of its queries' [ks, ke).
// Roles:
//   warpgroups 0, 1  math (setmaxnreg 232): warpgroup w owns queries [w * 256 / H, +256 / H) of the block
//       (its own Q tile) and keeps their weights for its 64 columns in registers. Per kv tile t: load the
//       scales of its two keys (H = 16: of tile t + 1, one tile ahead); wait full[s]; D / 32 x wgmma
//       m64n256k32 into 128 accumulators; H = 16: while they run, store tile t - 1's results; wait; arrive
//       empty[s] (lane 0 of each warp); relu(x kv_scale) x weight summed over heads
//       (mqa::weighted_relu_sums, kReluByAbs: its form, exact for any sign of the scale); quad
//       reduce-scatter; H >= 32: store the valid (i, j) straight from registers now (8 consecutive keys =
//       one 32-byte sector per query). (Deferring the stores under the next wgmmas: +6-9 % at H = 16,
//       3-10 % slower at H = 64: there the deferred work competes for issue slots with the other
//       warpgroup's reduction.) Ping-pong: the two warpgroups take turns to issue (named barriers 1 and 2:
//       wait for the turn, issue, pass it), so their wgmmas run one after the other on the tensor core and
//       each one's reduction overlaps the other's wgmmas instead of both issuing together and reducing
//       together (2.2 % faster over the H = 64 rows on the H200 than issuing independently).
//       kSplitHalves (H = 64; H = 32 without the pieces): the tile's wgmmas as two commit groups of
//       m64n128k32, queries [0, Q/2) then [Q/2, Q); the first half is reduced (wait_group 1) while the
//       second half's wgmmas run, then the second (wait_group 0).
//       kSignedSumByWgmma (H = 64, 32; the |x| form): the e4m3 pieces of u_i = sum_h w[i, h] q[i, h, :]
//       (mqa::SignedSumPieces: 4 scaled rows per query), written for every query by the pre-pass kernel
//       (smxx_mqa_logits_pieces.cuh), arrive by TMA with the Q tile in each warpgroup's piece tile, their scales
//       by one load per lane from global memory (computing them here took ~2-3 us per CTA while the tensor core
//       idled, ncu); per kv tile, D / 32 more wgmmas m64n(4 Q)k32 give sum_h x_h w_h for each key and
//       query, so the reduction is one |x| FFMA per accumulator (the signed sums carry the tensor core's FP8
//       accumulation error, so a key whose every head scores negative gives ~2^-12 of |s| sum |x w|, not 0).
//       Measured (H200): the pieces 1-6 % faster, with the split tile 1-10 % (the defaults at D = 128).
//   warpgroup 2 (setmaxnreg 40): warp 0, one thread: TMA of both Q tiles and piece tiles (once, on q_full), then one
//       kv tile per stage after empty[s], arming full[s] with its bytes. Warps 1-3 (kCleanLogits):
//       -inf into every invalid position of the CTA's rows and columns with 16-byte stores, while the
//       math runs (disjoint from the valid positions, so nothing orders the two).
// Stage ring: kNumStages x 64 keys x D bytes, 128B (D = 128) or 64B (D = 64) swizzled as TMA writes and
//   wgmma reads it; full[s]: 1 arrival + bytes; empty[s]: 8 arrivals (both math warpgroups read every
//   stage: one kv tile feeds 2 x 256 / H queries, halving L2 traffic against one warpgroup per tile).
// Shared memory: [Q: 2 x 256 x D] [pieces: 2 x 4 Q x D] [kv stages] [full x stages, empty x stages, q_full]
//   [tile range] (the pieces only with kSignedSumByWgmma; kFp4: [e4m3 kv: 2 x 2 x 64 x D] [packed Q: 2 x 256 x D / 2]
//   after the pieces, and stages of 64 x D / 2).
// FP4 mode (kFp4: the reference's FP4 q and kv, common/mqa_fp4.cuh): q [S, H, D / 2] and kv [S_kv, D / 2] packed
//   e2m1 (int8), q_sf int32 [S, H] and kv_sf int32 [S_kv] (kv_scales reinterpreted), UE8M0 exponents per 1x32. They
//   stay packed in global memory and in the TMA ring (unswizzled boxes of D / 2 bytes a row; a stage is half the
//   FP8 one). Each math warpgroup converts its packed Q tile once (after q_full) into its e4m3 Q tile, and every
//   kv stage, before its turn, into one of two e4m3 kv tiles of its own (alternating; fence.proxy.async, a
//   warpgroup barrier), then releases the stage at once and issues the same wgmmas from that tile. Each row's
//   2^e_max goes where the FP8 path has its scale: the key's into the per-key scale, the head's into that head's
//   weight (relu(x s_k) s_q w = relu(x s_k) (s_q w) for s_q > 0), so the reduction and stores are the FP8 path's.
//   No pieces (the pre-pass reads FP8 q); D in {64, 128}.
// Speed limits: per 64-key tile a math thread issues 2 instructions per accumulator (256: FMNMX + FFMA, or
//   two FFMAs; 128 with the pieces) plus ~40 for the reduction and stores, against 512 tensor-core cycles per
//   warpgroup tile at D = 128; the two math warpgroups alternate on the tensor core, one's epilogue under the
//   other's wgmma. Each warpgroup's chain (issue, its wgmmas behind the other's, reduce, issue) is the limit:
//   halving the reduction moved the time into the wgmma wait (ncu: the tensor pipe 55 -> 62 %). D = 64
//   halves the tensor work, not the epilogue (CUDA-core bound). Each CTA pays barrier init and pipeline
//   fill (a few us) once per C keys. Limits: H in {16, 32, 64}, D in {32, 64, 128} (the pieces: D >= 64).
#pragma once

#include <cuda_bf16.h>
#include <cuda/std/type_traits>

#include <deep_gemm/common/mqa_fp4.cuh>
#include <deep_gemm/common/mqa_logits.cuh>
#include <deep_gemm/common/pipeline.cuh>
#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>
#include <deep_gemm/ptx/sync.cuh>
#include <deep_gemm/ptx/tma.cuh>
#include <deep_gemm/ptx/wgmma.cuh>

namespace deep_gemm {

// A query's valid keys [begin, end), clamped to 0 <= begin <= end <= seq_len_kv; empty past the last query.
struct KeyRange {
    uint32_t begin = 0, end = 0;
    __device__ __forceinline__ static KeyRange load(const int32_t* ks, const int32_t* ke, uint32_t query,
                                                    uint32_t seq_len, uint32_t seq_len_kv) {
        KeyRange r;
        if (query < seq_len) {
            const int32_t limit = static_cast<int32_t>(seq_len_kv);
            const int32_t b = min(max(__ldg(ks + query), 0), limit);
            const int32_t e = min(max(__ldg(ke + query), b), limit);
            r.begin = static_cast<uint32_t>(b), r.end = static_cast<uint32_t>(e);
        }
        return r;
    }
};

// `Config::kValue`: the Sm90MqaLogitsKernelConfig (common/host_device_types.hpp) the JIT renders by field name.
template <typename Config>
struct Sm90Fp8MqaLogits {
    static constexpr Sm90MqaLogitsKernelConfig kConfig = Config::kValue;
    static constexpr uint32_t kNumHeads = kConfig.num_heads, kHeadDim = kConfig.head_dim;
    static constexpr uint32_t kNumStages = kConfig.num_stages;
    static constexpr bool kIsCompressed = kConfig.is_compressed, kCleanLogits = kConfig.clean_logits;
    static constexpr bool kOutBf16 = kConfig.out_bf16, kReluByAbs = kConfig.relu_by_abs;
    static constexpr bool kSignedSumByWgmma = kConfig.signed_sum_wgmma, kSplitHalves = kConfig.split_halves;
    static constexpr bool kFp4 = kConfig.fp4_operands;
    static constexpr uint32_t BLOCK_KV = 64;                    // keys per tile: one wgmma M
    static constexpr uint32_t WG_N = 256;                       // query-heads per math warpgroup: wgmma N
    static constexpr uint32_t kNumMathWarpgroups = 2;
    static constexpr uint32_t kQueriesPerWg = WG_N / kNumHeads;  // 4, 8, 16
    static constexpr uint32_t BLOCK_Q = kNumMathWarpgroups * kQueriesPerWg;
    static constexpr uint32_t kQueriesPerLane = kQueriesPerWg / 4;  // after the quad reduce-scatter
    static constexpr uint32_t kGroupsPerQuery = kNumHeads / 8;      // 8-column accumulator groups
    static constexpr uint32_t kNumKSteps = kHeadDim / 32;
    static constexpr uint32_t kNumMathThreads = kNumMathWarpgroups * 128;
    static constexpr uint32_t kNumThreads = kNumMathThreads + 128;
    static constexpr uint32_t kNumCleanThreads = 96;  // warps 1-3 of the producer warpgroup
    static constexpr uint32_t kProducerRegs = 40, kMathRegs = 232;
    static constexpr uint32_t kTurnBarrier = 1;  // ping-pong: named barriers 1 (warpgroup 0's turn) and 2 (1's)
    static constexpr uint32_t kConvertBarrier = 3;  // kFp4: named barriers 3 and 4, one per math warpgroup
    static constexpr uint32_t kNumFp4Groups = kHeadDim / 32;  // kFp4: UE8M0 exponents per row
    using Wgmma = ptx::WgmmaFp8E4m3<WG_N>;
    using WgmmaHalf = ptx::WgmmaFp8E4m3<WG_N / 2>;  // kSplitHalves
    static constexpr uint32_t kNumAccum = Wgmma::kNumAccum;  // 128 per thread
    static constexpr uint32_t kNumGroups = WG_N / 8;         // 32 column groups of 8 per thread row
    using OutBits = cuda::std::conditional_t<kOutBf16, uint16_t, uint32_t>;
    // kSignedSumByWgmma: the e4m3 pieces of each query's signed head-sum vector, one extra B row per piece
    using Pieces = mqa::SignedSumPieces<kHeadDim>;
    static constexpr uint32_t PIECES_N = kSignedSumByWgmma ? kQueriesPerWg * Pieces::kNumPieces : 8;
    using WgmmaPieces = ptx::WgmmaFp8E4m3<PIECES_N>;
    static constexpr uint32_t kNumPiecesAccum = WgmmaPieces::kNumAccum;

    static constexpr uint32_t SMEM_Q_SIZE_PER_WG = WG_N * kHeadDim;
    static constexpr uint32_t SMEM_PIECES_SIZE_PER_WG = kSignedSumByWgmma ? PIECES_N * kHeadDim : 0;
    // kFp4: each math warpgroup's packed Q tile (what TMA loads) and its two e4m3 kv tiles (converted from the
    // stages, alternating: tile t + 1 is written while no warp of the warpgroup can still read tile t - 1's, as
    // every warp passed tile t - 1's wgmma wait before the barrier after tile t's conversion)
    static constexpr uint32_t SMEM_Q_PACKED_SIZE_PER_WG = kFp4 ? WG_N * kHeadDim / 2 : 0;
    static constexpr uint32_t SMEM_KV_E4M3_TILE_SIZE = BLOCK_KV * kHeadDim;
    static constexpr uint32_t SMEM_KV_E4M3_SIZE_PER_WG = kFp4 ? 2 * SMEM_KV_E4M3_TILE_SIZE : 0;
    static constexpr uint32_t SMEM_Q_LOAD_SIZE_PER_WG = kFp4 ? SMEM_Q_PACKED_SIZE_PER_WG : SMEM_Q_SIZE_PER_WG;
    static constexpr uint32_t SMEM_KV_SIZE_PER_STAGE = BLOCK_KV * (kFp4 ? kHeadDim / 2 : kHeadDim);
    static constexpr uint32_t SMEM_FP4_OFFSET = kNumMathWarpgroups * (SMEM_Q_SIZE_PER_WG + SMEM_PIECES_SIZE_PER_WG);
    static constexpr uint32_t SMEM_KV_OFFSET =
        SMEM_FP4_OFFSET + kNumMathWarpgroups * (SMEM_Q_PACKED_SIZE_PER_WG + SMEM_KV_E4M3_SIZE_PER_WG);
    static constexpr uint32_t SMEM_BARRIER_OFFSET = SMEM_KV_OFFSET + kNumStages * SMEM_KV_SIZE_PER_STAGE;
    static constexpr uint32_t SMEM_SIZE = 1024 + SMEM_BARRIER_OFFSET + (2 * kNumStages + 1) * 8 + 16;
    static_assert(SMEM_SIZE == sm90_mqa_logits_smem_bytes(kConfig) && BLOCK_Q == sm90_mqa_logits_block_q(kNumHeads) &&
                  Pieces::kNumPieces == kMqaSignedSumPieces,
                  "the host's shared-memory and query-block rules must match this layout");

    static_assert(kNumHeads == 16 || kNumHeads == 32 || kNumHeads == 64, "H must be 16, 32 or 64");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128,
                  "D must be 32, 64 or 128 (one swizzled TMA row)");
    static_assert(kQueriesPerWg % 4 == 0 && BLOCK_Q <= 32, "the quad reduce-scatter needs 4 | queries per warpgroup");
    static_assert(kNumStages >= 2 && kNumStages <= 16, "2 to 16 stages");
    static_assert(SMEM_Q_SIZE_PER_WG % 1024 == 0 && SMEM_KV_SIZE_PER_STAGE % 1024 == 0 &&
                  SMEM_PIECES_SIZE_PER_WG % 1024 == 0, "tiles must keep 1024-byte alignment for the swizzle");
    static_assert(!kSignedSumByWgmma || (kReluByAbs && kQueriesPerWg <= 8 && kHeadDim >= 64),
                  "the signed sums by wgmma complete the |x| form, at H = 64 or 32 (registers), D >= 64");
    static_assert(!kSplitHalves || kQueriesPerWg == 4 || (kQueriesPerWg == 8 && !kSignedSumByWgmma),
                  "the split tile fits at H = 64, and at H = 32 without the pieces (registers)");
    static_assert(!kFp4 || (!kSignedSumByWgmma && (kHeadDim == 64 || kHeadDim == 128)),
                  "FP4 operands: D = 64 or 128, without the pieces (their pre-pass reads FP8 q)");
    static_assert(SMEM_Q_PACKED_SIZE_PER_WG % 1024 == 0 && SMEM_KV_E4M3_SIZE_PER_WG % 1024 == 0,
                  "the FP4 buffers keep the e4m3 tiles 1024-byte aligned");

    // Shared-memory map (buffers found by arithmetic: a pointer array indexed at run time would be local memory)
    struct SharedStorage {
        uint8_t* base;
        __device__ __forceinline__ uint8_t* q(uint32_t wg) const { return base + wg * SMEM_Q_SIZE_PER_WG; }
        __device__ __forceinline__ uint8_t* pieces(uint32_t wg) const {
            return base + kNumMathWarpgroups * SMEM_Q_SIZE_PER_WG + wg * SMEM_PIECES_SIZE_PER_WG;
        }
        __device__ __forceinline__ uint8_t* kv(uint32_t stage) const {
            return base + SMEM_KV_OFFSET + stage * SMEM_KV_SIZE_PER_STAGE;
        }
        __device__ __forceinline__ uint8_t* kv_e4m3(uint32_t wg, uint32_t slot) const {
            return base + SMEM_FP4_OFFSET + wg * SMEM_KV_E4M3_SIZE_PER_WG + slot * SMEM_KV_E4M3_TILE_SIZE;
        }
        __device__ __forceinline__ uint8_t* q_packed(uint32_t wg) const {
            return base + SMEM_FP4_OFFSET + kNumMathWarpgroups * SMEM_KV_E4M3_SIZE_PER_WG + wg * SMEM_Q_PACKED_SIZE_PER_WG;
        }
        __device__ __forceinline__ uint64_t* full(uint32_t stage) const {
            return reinterpret_cast<uint64_t*>(base + SMEM_BARRIER_OFFSET) + stage;
        }
        __device__ __forceinline__ uint64_t* empty(uint32_t stage) const { return full(kNumStages + stage); }
        __device__ __forceinline__ uint64_t* q_full() const { return full(2 * kNumStages); }
        // [0]: first key of the first tile, [1]: number of tiles (written once before the role split)
        __device__ __forceinline__ uint32_t* tiles() const { return reinterpret_cast<uint32_t*>(full(2 * kNumStages + 1)); }
    };

    // ---------------------------------------------------------------- block setup (warp 0)
    // The CTA's kv tiles: keys [p * C, (p + 1) * C) that meet the union of its queries' ranges, from a
    // 64-aligned first key (so that every 8-key store segment is sector aligned).
    __device__ __forceinline__ static void plan_tiles(const SharedStorage& s, uint32_t q_first, uint32_t seq_len,
                                                      uint32_t seq_len_kv, uint32_t num_kv_per_split,
                                                      const int32_t* ks, const int32_t* ke, uint32_t lane) {
        KeyRange r;
        if (lane < BLOCK_Q)
            r = KeyRange::load(ks, ke, q_first + lane, seq_len, seq_len_kv);
        const bool has_keys = r.begin < r.end;
        const uint32_t lo = __reduce_min_sync(0xffffffff, has_keys ? r.begin : 0xffffffffu);
        const uint32_t hi = __reduce_max_sync(0xffffffff, has_keys ? r.end : 0u);
        const uint32_t chunk_begin = blockIdx.y * num_kv_per_split;
        const uint32_t chunk_end = min(chunk_begin + num_kv_per_split, seq_len_kv);
        const uint32_t first = max(lo / BLOCK_KV * BLOCK_KV, chunk_begin);
        const uint32_t last = min(hi, chunk_end);
        if (lane == 0) {
            s.tiles()[0] = first;
            s.tiles()[1] = last > first ? ceil_div(last - first, BLOCK_KV) : 0;
        }
    }

    // ---------------------------------------------------------------- producer (one thread)
    __device__ __forceinline__ static void producer(const SharedStorage& s, uint32_t q_first, uint32_t kv_first,
                                                    uint32_t num_tiles, const TmaDescriptor* tma_q,
                                                    const TmaDescriptor* tma_kv, const TmaDescriptor* tma_pieces) {
        // Both warpgroups' Q tiles: rows [q_first * H, +2 * 256) of q as [S * H, D] (past the end: zeros); with
        // kSignedSumByWgmma their piece tiles too: warpgroup block b = q_first / Q + wg, rows [b * 4Q, +4Q) of the
        // pre-pass's pieces (smxx_mqa_logits_pieces.cuh)
        // (kFp4: the packed Q tiles, converted by the math warpgroups)
        ptx::mbarrier_arrive_expect_tx(s.q_full(), kNumMathWarpgroups * (SMEM_Q_LOAD_SIZE_PER_WG + SMEM_PIECES_SIZE_PER_WG));
        #pragma unroll
        for (uint32_t wg = 0; wg < kNumMathWarpgroups; ++wg) {
            const uint32_t wg_q_first = q_first + wg * kQueriesPerWg;
            ptx::tma_load_2d(kFp4 ? s.q_packed(wg) : s.q(wg), tma_q, s.q_full(), 0,
                             static_cast<int32_t>(wg_q_first * kNumHeads));
            if constexpr (kSignedSumByWgmma)
                ptx::tma_load_2d(s.pieces(wg), tma_pieces, s.q_full(), 0,
                                 static_cast<int32_t>((q_first / kQueriesPerWg + wg) * PIECES_N));
        }

        PipelineState<kNumStages> pipe;
        #pragma unroll 1
        for (uint32_t t = 0; t < num_tiles; ++t, pipe.advance()) {
            ptx::mbarrier_wait(s.empty(pipe.stage), pipe.phase ^ 1);
            ptx::mbarrier_arrive_expect_tx(s.full(pipe.stage), SMEM_KV_SIZE_PER_STAGE);
            ptx::tma_load_2d(s.kv(pipe.stage), tma_kv, s.full(pipe.stage), 0,
                             static_cast<int32_t>(kv_first + t * BLOCK_KV));
        }
    }

    // ---------------------------------------------------------------- cleaner (warps 1-3 of the producer warpgroup)
    __device__ __forceinline__ static void fill_neg_inf(OutBits* row, uint32_t begin, uint32_t end, uint32_t tid) {
        mqa::fill_neg_inf<OutBits, kNumCleanThreads>(row, begin, end, tid);
    }

    // Every position of the CTA's rows, in columns [p * C, (p + 1) * C) of the W-wide output, that holds
    // no valid key: outside [ks, ke) (full rows), or at or past ke - ks (compressed rows).
    __device__ __forceinline__ static void clean(uint32_t q_first, uint32_t seq_len, uint32_t seq_len_kv,
                                                 uint32_t out_width, uint32_t num_kv_per_split, const int32_t* ks,
                                                 const int32_t* ke, OutBits* logits, uint64_t ld_logits, uint32_t tid) {
        const uint32_t col_begin = blockIdx.y * num_kv_per_split;
        const uint32_t col_end = min(col_begin + num_kv_per_split, out_width);
        if (col_begin >= col_end)
            return;
        #pragma unroll 1
        for (uint32_t i = 0; i < BLOCK_Q && q_first + i < seq_len; ++i) {
            const KeyRange r = KeyRange::load(ks, ke, q_first + i, seq_len, seq_len_kv);
            OutBits* row = logits + static_cast<uint64_t>(q_first + i) * ld_logits;
            if constexpr (kIsCompressed) {
                const uint32_t length = min(r.end - r.begin, out_width);
                fill_neg_inf(row, max(length, col_begin), col_end, tid);
            } else {
                fill_neg_inf(row, col_begin, min(r.begin, col_end), tid);
                fill_neg_inf(row, max(r.end, col_begin), col_end, tid);
            }
        }
    }

    // ---------------------------------------------------------------- math warpgroups
    // One tile's wgmmas: accum = kv tile . Q tile^T (kSplitHalves: queries [0, Q/2) and [Q/2, Q) as two commit
    // groups of N = 128, the second with the pieces), pieces_accum = kv tile . pieces^T (kSignedSumByWgmma)
    __device__ __forceinline__ static void issue_tile(uint64_t desc_kv, uint64_t desc_q, uint64_t desc_pieces,
                                                      float (&accum)[kNumAccum],
                                                      float (&pieces_accum)[kNumPiecesAccum]) {
        mqa::fence_accum(accum);
        if constexpr (kSignedSumByWgmma)
            mqa::fence_accum(pieces_accum);
        ptx::wgmma_fence();
        if constexpr (kSplitHalves) {
            mqa::mma_k_steps<WgmmaHalf, kNumKSteps>(desc_kv, desc_q, accum);
            ptx::wgmma_commit();
            mqa::mma_k_steps<WgmmaHalf, kNumKSteps>(
                desc_kv, ptx::advance_smem_desc(desc_q, WG_N / 2 * kHeadDim), accum + kNumAccum / 2);
        } else {
            mqa::mma_k_steps<Wgmma, kNumKSteps>(desc_kv, desc_q, accum);
        }
        if constexpr (kSignedSumByWgmma)
            mqa::mma_k_steps<WgmmaPieces, kNumKSteps>(desc_kv, desc_pieces, pieces_accum);
        ptx::wgmma_commit();
        mqa::fence_accum(accum);
        if constexpr (kSignedSumByWgmma)
            mqa::fence_accum(pieces_accum);
    }

    // sums[q] for the queries [kBegin, kEnd): sum_h relu(x_h s) w_h in the kReluByAbs form, or sum_h |x_h| w_h
    // (kSignedSumByWgmma: the signed half comes from the pieces)
    template <uint32_t kBegin, uint32_t kEnd>
    __device__ __forceinline__ static void head_reduce(const float (&accum)[kNumAccum],
                                                       const float2 (&weight)[kNumGroups], float scale_0,
                                                       float scale_1, float (&sums)[kQueriesPerWg][2]) {
        if constexpr (kSignedSumByWgmma) {
            float unused[kQueriesPerWg][2];
            mqa::head_sums<kQueriesPerWg, kNumHeads, false, kBegin, kEnd>(accum, weight, unused, sums);
        } else {
            mqa::weighted_relu_sums<kQueriesPerWg, kNumHeads, kReluByAbs, kBegin, kEnd>(accum, weight, scale_0,
                                                                                       scale_1, sums);
        }
    }

    __device__ __forceinline__ static void store(OutBits* ptr, float value) {
        if constexpr (kOutBf16)
            *ptr = __bfloat16_as_ushort(__float2bfloat16_rn(value));
        else
            *ptr = __float_as_uint(value);
    }

    __device__ __forceinline__ static void math(const SharedStorage& s, uint32_t wg_idx, uint32_t q_first,
                                                uint32_t kv_first, uint32_t num_tiles, uint32_t seq_len,
                                                uint32_t seq_len_kv, uint32_t out_width, const float* kv_scales,
                                                const float* weights, uint32_t ld_weights, const float* piece_scales,
                                                const int32_t* ks, const int32_t* ke, OutBits* logits,
                                                uint64_t ld_logits, const uint32_t* q_exponents) {
        const uint32_t warp_in_wg = (threadIdx.x / 32) % 4;
        const uint32_t lane = threadIdx.x % 32;
        const uint32_t wg_q_first = q_first + wg_idx * kQueriesPerWg;

        // Weights of this thread's columns: group j holds heads (j % kGroupsPerQuery) * 8 + 2 (lane % 4) + {0, 1}
        // of query j / kGroupsPerQuery (0 past the last query)
        float2 weight[kNumGroups];
        #pragma unroll
        for (uint32_t j = 0; j < kNumGroups; ++j) {
            const uint32_t query = wg_q_first + j / kGroupsPerQuery;
            const uint32_t head = (j % kGroupsPerQuery) * 8 + (lane % 4) * 2;
            weight[j] = {0.0f, 0.0f};
            if (query < seq_len) {
                const float* w = weights + static_cast<uint64_t>(query) * ld_weights + head;
                weight[j] = {__ldg(w), __ldg(w + 1)};
                if constexpr (kFp4) {
                    // The heads' q scales 2^e_max (exact powers of two) fold into their weights
                    const uint32_t* e = q_exponents + static_cast<uint64_t>(query) * kNumHeads + head;
                    weight[j].x *= mqa::row_scale<kNumFp4Groups>(__ldg(e));
                    weight[j].y *= mqa::row_scale<kNumFp4Groups>(__ldg(e + 1));
                }
            }
        }
        // The queries this lane stores after the reduce-scatter: wg_q_first + 4m + lane % 4; their valid
        // keys (compressed: capped at out_width columns)
        KeyRange ranges[kQueriesPerLane];
        #pragma unroll
        for (uint32_t m = 0; m < kQueriesPerLane; ++m) {
            ranges[m] = KeyRange::load(ks, ke, wg_q_first + 4 * m + lane % 4, seq_len, seq_len_kv);
            if constexpr (kIsCompressed)
                ranges[m].end = min(ranges[m].end, ranges[m].begin + out_width);
        }

        const uint64_t desc_q = ptx::make_smem_desc_k_major_swizzled<kHeadDim>(s.q(wg_idx));
        const uint64_t desc_kv = ptx::make_smem_desc_k_major_swizzled<kHeadDim>(kFp4 ? s.kv_e4m3(wg_idx, 0) : s.kv(0));
        const uint64_t desc_pieces = ptx::make_smem_desc_k_major_swizzled<kHeadDim>(s.pieces(wg_idx));
        // kSignedSumByWgmma: the scales of the pieces of the queries this lane stores (4m + lane % 4), from the
        // pre-pass (its buffer holds every query of the padded grid); the pieces came with the Q tile
        float piece_scale[kQueriesPerLane][Pieces::kNumPieces];
        if constexpr (kSignedSumByWgmma) {
            #pragma unroll
            for (uint32_t m = 0; m < kQueriesPerLane; ++m) {
                #pragma unroll
                for (uint32_t p = 0; p < Pieces::kNumPieces; ++p)
                    piece_scale[m][p] = __ldg(piece_scales + Pieces::kNumPieces * static_cast<uint64_t>(
                                                                 wg_q_first + 4 * m + lane % 4) + p);
            }
        }
        ptx::mbarrier_wait(s.q_full(), 0);
        if constexpr (kFp4) {
            // This warpgroup's Q rows (query-heads [wg_q_first * H, +256); none past the last query) to e4m3, once
            const uint64_t row_first = static_cast<uint64_t>(wg_q_first) * kNumHeads;
            const uint64_t num_rows = static_cast<uint64_t>(seq_len) * kNumHeads;
            mqa::convert_fp4_rows<WG_N, kHeadDim, 128>(
                s.q_packed(wg_idx), s.q(wg_idx), threadIdx.x % 128,
                [&](uint32_t row) { return row_first + row < num_rows ? __ldg(q_exponents + row_first + row) : 0u; });
            ptx::fence_proxy_async_smem();
            ptx::named_barrier_sync(kConvertBarrier + wg_idx, 128);
        }

        // kDeferFlush (H = 16): tile t - 1's stores run while tile t's wgmmas do, and the kv scales are loaded
        // one tile ahead; else each tile's quad reduce-scatter and stores follow its own reduction. Measured
        // (H200, A/B timed alongside): deferred 6-9 % faster at H = 16; at H = 64 3-10 % slower in every form
        // tried (with or without the shuffles deferred, the scale prefetch alone), as the deferred work
        // competes for issue slots with the other warpgroup's reduction; at H = 32 within noise.
        constexpr bool kDeferFlush = kQueriesPerWg == 16;
        // This thread's first key (row r of the tile; the other is r + 8) and its kv scale: 0 past the end (not
        // stored)
        const auto first_key = [&](uint32_t t) { return kv_first + t * BLOCK_KV + warp_in_wg * 16 + lane / 4; };
        // (kFp4: kv_scales holds each key's exponent word; its scale is 2^e_max)
        const uint32_t* kv_exponents = reinterpret_cast<const uint32_t*>(kv_scales);
        const auto load_scale = [&](uint32_t key) {
            if constexpr (kFp4)
                return key < seq_len_kv ? mqa::row_scale<kNumFp4Groups>(__ldg(kv_exponents + key)) : 0.0f;
            else
                return key < seq_len_kv ? __ldg(kv_scales + key) : 0.0f;
        };
        float next_scale_0 = 0.0f, next_scale_1 = 0.0f;
        if constexpr (kDeferFlush)
            next_scale_0 = load_scale(first_key(0)), next_scale_1 = load_scale(first_key(0) + 8);

        // The last tile's values after the quad reduce-scatter (lane l: queries 4m + l % 4) and their stores
        float reduced[kQueriesPerLane][2];
        uint32_t reduced_key_0 = 0;
        const auto flush = [&]() {
            #pragma unroll
            for (uint32_t m = 0; m < kQueriesPerLane; ++m) {
                #pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    // Query wg_q_first + 4m + lane % 4, key reduced_key_0 + 8h: stored only where valid
                    const uint32_t key = reduced_key_0 + h * 8;
                    if (key >= ranges[m].begin && key < ranges[m].end) {
                        const uint32_t col = kIsCompressed ? key - ranges[m].begin : key;
                        const uint64_t row = wg_q_first + 4 * m + lane % 4;
                        store(logits + row * ld_logits + col, reduced[m][h]);
                    }
                }
            }
        };

        float accum[kNumAccum];
        float pieces_accum[kNumPiecesAccum];  // kSignedSumByWgmma: kv tile . pieces^T
        PipelineState<kNumStages> pipe;
        if (wg_idx == 1)
            ptx::named_barrier_arrive(kTurnBarrier, kNumMathThreads);  // warpgroup 0 issues first
        #pragma unroll 1
        for (uint32_t t = 0; t < num_tiles; ++t, pipe.advance()) {
            const uint32_t key_0 = first_key(t);
            float scale_0, scale_1;
            if constexpr (kDeferFlush) {
                scale_0 = next_scale_0, scale_1 = next_scale_1;
                if (t + 1 < num_tiles)
                    next_scale_0 = load_scale(first_key(t + 1)), next_scale_1 = load_scale(first_key(t + 1) + 8);
            } else {
                scale_0 = load_scale(key_0), scale_1 = load_scale(key_0 + 8);
            }

            // accum [64 keys x 256 query-heads] = kv tile (64 x D) * Q tile (256 x D)^T
            // Ping-pong: wait for this warpgroup's turn, issue, pass the turn: the other's wgmmas queue behind
            // these on the tensor core, so one warpgroup's head reduction runs under the other's wgmmas
            ptx::mbarrier_wait(s.full(pipe.stage), pipe.phase);
            if constexpr (kFp4) {
                // The packed stage into this warpgroup's e4m3 kv tile t % 2, before its turn (under the other's
                // wgmmas); the stage is free once every warp has converted its part
                const uint32_t tile_first = kv_first + t * BLOCK_KV;
                mqa::convert_fp4_rows<BLOCK_KV, kHeadDim, 128>(
                    s.kv(pipe.stage), s.kv_e4m3(wg_idx, t % 2), threadIdx.x % 128, [&](uint32_t row) {
                        return tile_first + row < seq_len_kv ? __ldg(kv_exponents + tile_first + row) : 0u;
                    });
                ptx::fence_proxy_async_smem();
                ptx::named_barrier_sync(kConvertBarrier + wg_idx, 128);
                if (lane == 0)
                    ptx::mbarrier_arrive(s.empty(pipe.stage));
            }
            ptx::named_barrier_sync(kTurnBarrier + wg_idx, kNumMathThreads);
            const uint64_t desc_kv_stage =
                kFp4 ? ptx::advance_smem_desc(desc_kv, (t % 2) * SMEM_KV_E4M3_TILE_SIZE)
                     : ptx::advance_smem_desc(desc_kv, pipe.stage * SMEM_KV_SIZE_PER_STAGE);
            issue_tile(desc_kv_stage, desc_q, desc_pieces, accum, pieces_accum);
            if (wg_idx == 0 || t + 1 < num_tiles)  // (warpgroup 0 syncs num_tiles times)
                ptx::named_barrier_arrive(kTurnBarrier + (wg_idx ^ 1), kNumMathThreads);
            // (In a branch: ptxas keeps it after the last wgmma and the turn's pass; unconditional, it hoisted
            // work between the wgmmas, delaying the pass to the other warpgroup, as the SASS showed)
            if (kDeferFlush && t > 0)
                flush();

            // Per query and key: sum_h relu(x_h s) w_h (any sign of s), or, with the pieces, sum_h |x_h| w_h;
            // kSplitHalves: the first half's queries while the second half's wgmmas run
            float sums[kQueriesPerWg][2];
            if constexpr (kSplitHalves) {
                ptx::wgmma_wait<1>();
                mqa::fence_accum<0, kNumAccum / 2>(accum);
                // (In a branch the compiler cannot fold: straight-line, ptxas sinks this half's FFMAs below the
                // second wait, where they no longer overlap the second half's wgmmas)
                if (ptx::lane_id() < 32)
                    head_reduce<0, kQueriesPerWg / 2>(accum, weight, scale_0, scale_1, sums);
            }
            ptx::wgmma_wait<0>();
            mqa::fence_accum<kSplitHalves ? kNumAccum / 2 : 0>(accum);
            if constexpr (kSignedSumByWgmma)
                mqa::fence_accum(pieces_accum);
            if (!kFp4 && lane == 0)
                ptx::mbarrier_arrive(s.empty(pipe.stage));
            head_reduce<kSplitHalves ? kQueriesPerWg / 2 : 0, kQueriesPerWg>(accum, weight, scale_0, scale_1, sums);

            // Quad reduce-scatter: round 1 keeps queries of lane bit 0's parity, round 2 those of bit 1's
            mqa::QuadReduce<kQueriesPerWg>::run(sums, reduced, lane);
            if constexpr (kSignedSumByWgmma) {
                // relu from sum_h x_h w_h (the pieces' wgmmas) and the reduced sum_h |x_h| w_h
                #pragma unroll
                for (uint32_t m = 0; m < kQueriesPerLane; ++m) {
                    #pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) {
                        float signed_sum = 0.0f;  // smallest piece first
                        #pragma unroll
                        for (uint32_t p = Pieces::kNumPieces; p-- > 0;)
                            signed_sum = fmaf(piece_scale[m][p], pieces_accum[Pieces::accum_index(m, p, h)],
                                              signed_sum);
                        reduced[m][h] = mqa::relu_from_sums(h == 0 ? scale_0 : scale_1, signed_sum, reduced[m][h]);
                    }
                }
            }
            reduced_key_0 = key_0;
            if constexpr (!kDeferFlush)
                flush();
        }
        if constexpr (kDeferFlush)
            flush();
    }
};

template <typename Config>
__global__ void __launch_bounds__(384, 1)
sm90_fp8_mqa_logits_kernel(uint32_t seq_len, uint32_t seq_len_kv, uint32_t out_width, uint32_t num_kv_per_split,
                           const float* __restrict__ kv_scales, const float* __restrict__ weights, uint32_t ld_weights,
                           const float* __restrict__ piece_scales, const int32_t* __restrict__ ks,
                           const int32_t* __restrict__ ke, void* __restrict__ logits, uint64_t ld_logits,
                           const __grid_constant__ TmaDescriptor tma_q, const __grid_constant__ TmaDescriptor tma_kv,
                           const __grid_constant__ TmaDescriptor tma_pieces, const uint32_t* __restrict__ q_exponents) {
    using Kernel = Sm90Fp8MqaLogits<Config>;
    constexpr uint32_t kNumStages = Kernel::kNumStages;
    constexpr bool kSignedSumByWgmma = Kernel::kSignedSumByWgmma, kCleanLogits = Kernel::kCleanLogits;
    using OutBits = typename Kernel::OutBits;

    // Shared memory, 1024-byte aligned for the swizzle
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + (1024 - ptx::smem_addr(smem_raw) % 1024) % 1024;
    const typename Kernel::SharedStorage storage{smem};
    // Query blocks last first: in causal and context-parallel patterns later queries see more keys, so the heaviest
    // CTAs start first and the last wave holds the lightest (longest-first; measured: the busiest SM's cycles 1.12x
    // the mean on 8192 x 8192 causal with the first queries first)
    const uint32_t q_first = (gridDim.x - 1 - blockIdx.x) * Kernel::BLOCK_Q;

    // Barriers by the producer's thread; the tile range by warp 0 (after the previous grid's writes: PDL)
    if (threadIdx.x == Kernel::kNumMathThreads) {
        ptx::prefetch_tma_descriptor(&tma_q);
        ptx::prefetch_tma_descriptor(&tma_kv);
        if constexpr (kSignedSumByWgmma)
            ptx::prefetch_tma_descriptor(&tma_pieces);
        #pragma unroll
        for (uint32_t i = 0; i < kNumStages; ++i) {
            ptx::mbarrier_init(storage.full(i), 1);
            ptx::mbarrier_init(storage.empty(i), Kernel::kNumMathWarpgroups * 4);
        }
        ptx::mbarrier_init(storage.q_full(), 1);
        ptx::fence_barrier_init();
    }
    ptx::grid_dependency_wait();
    if (threadIdx.x < 32)
        Kernel::plan_tiles(storage, q_first, seq_len, seq_len_kv, num_kv_per_split, ks, ke, threadIdx.x);
    __syncthreads();
    ptx::grid_dependency_launch_dependents();
    const uint32_t kv_first = storage.tiles()[0], num_tiles = storage.tiles()[1];

    if (threadIdx.x >= Kernel::kNumMathThreads) {
        ptx::warpgroup_reg_dealloc<Kernel::kProducerRegs>();
        const uint32_t tid = threadIdx.x - Kernel::kNumMathThreads;
        if (tid == 0 && num_tiles > 0) {
            Kernel::producer(storage, q_first, kv_first, num_tiles, &tma_q, &tma_kv, &tma_pieces);
        } else if (kCleanLogits && tid >= 32) {
            Kernel::clean(q_first, seq_len, seq_len_kv, out_width, num_kv_per_split, ks, ke,
                          static_cast<OutBits*>(logits), ld_logits, tid - 32);
        }
    } else {
        ptx::warpgroup_reg_alloc<Kernel::kMathRegs>();
        if (num_tiles > 0)
            Kernel::math(storage, __shfl_sync(0xffffffff, threadIdx.x / 128, 0), q_first, kv_first, num_tiles, seq_len,
                         seq_len_kv, out_width, kv_scales, weights, ld_weights, piece_scales, ks, ke,
                         static_cast<OutBits*>(logits), ld_logits, q_exponents);
    }
}

}  // namespace deep_gemm
