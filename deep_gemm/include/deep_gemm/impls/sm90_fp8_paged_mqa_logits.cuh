// SM90 FP8 paged MQA logits: the scoring GEMM of the DeepSeek-V3.2 lightning indexer at decode.
//
// Computes   logits[b * T + t, j] = sum_h relu(q[b, t, h, :] . kv[b, j, :] * kv_scale[b, j]) * weights[b * T + t, h]
// for the keys j < end(b, t) of request b's query token t (T = next_n): end = context_len[b] - T + t + 1 with
// context_lens [B], end = context_lens[b, t] with context_lens [B, T]; clamped on the device to [0, W], W =
// max_context_len. With kCleanLogits the rest of each row is -inf. Key j of request b lives in kv-cache
// block block_table[r, j / BLOCK_KV], row j % BLOCK_KV, r = b (kHasIndices: r = indices[b], the request whose
// block-table row token b uses; then T = 1 and each q row is one token with its own context length). The
// block table's rows are ld_block_table elements apart. kv_cache is uint8 [num_blocks, BLOCK_KV, 1, D + 4]:
// per block BLOCK_KV x D FP8 values, then BLOCK_KV FP32 scales; blocks any multiple of 16 bytes apart (the
// TMA descriptors carry that stride: the values as [num_blocks][BLOCK_KV][D], the scales as [num_blocks]
// [BLOCK_KV]). Logits FP32, or BF16 with kOutBf16 (rounded from the FP32 sums in the store).
//
// GEMM view: M = 64 keys (A = 64 / BLOCK_KV consecutive kv blocks of one request), N = T x H (B = all
//   queries of the request, q seen as [B * T * H, D]), K = D. Head reduction in registers and a quad
//   reduction as in the prefill kernel (common/mqa_logits.cuh): lane l ends with query l % 4 of its rows.
// Launch: persistent, one CTA per row of the schedule (get_paged_mqa_logits_metadata): CTA i takes the kv
//   blocks from schedule[i] = (request, block) up to schedule[i + 1], in tiles of 64 keys; (M + 1) x 128
//   threads, M = kNumMathWarpgroups math warpgroups: 3 when T H <= 128, else 2 (the head reduction of one
//   warp, two FFMAs per accumulator, is latency-bound, so more warps keep up with the memory; 3 x 152
//   registers hold an N <= 128 fragment, N = 256 needs 2 x 232).
// Roles:
//   warpgroups 0 .. M-1  math (setmaxnreg 232 / 152): tile n goes to warpgroup n % M. Each steps from
//       its tile to its next, M tiles on (one add while that tile is in the same request: walking the other
//       warpgroups' tiles one by one was ~30 % of the math warps' stall samples under ncu), and still enters
//       every request of the range on the way: entering, wait q_full of its Q slot; leaving, arrive q_empty
//       (so a slot is refilled only once every warpgroup is past its request). On the first own tile of a
//       request: load its weights for this thread's N / 4 columns and its query ends. Per own tile: wait
//       full[s]; D / 32 x wgmma m64nNk32; while they run, flush the previous own tile (quad reduce of its
//       per-thread sums, store of the valid keys: below the query's end, in blocks of the CTA's range,
//       from registers); wait; the scales of its two keys from shared memory; arrive empty[s]; relu(x s)
//       x weight summed over heads (mqa::weighted_relu_sums, kReluByAbs: its form) into the pending sums.
//       kSignedSumByWgmma (with kReluByAbs): the tile's wgmmas also take the slot's piece tile (D / 32 x wgmma
//       m64n16k32, same commit group), so sum_h x w of the lane's query comes from its piece columns (4 FFMAs
//       a key row) and the per-accumulator work is one FFMA, |x| w; relu from both after the quad reduce
//       (mqa::relu_from_sums). Entering a request also waits for pieces_full of its slot.
//       One more flush after the last own tile.
//       No global loads per tile.
//   warpgroup M (setmaxnreg 40): warps 0 and 1 produce, tile n by warp n % 2 (one warp's issue loop, a
//       chain of ~70 dependent instructions, took ~800 cycles a tile under ncu, the limit at ~65 % of
//       the copy bandwidth). Each steps over the other's tiles as the math does; each warp's lanes hold
//       the cache block ids of 64 consecutive kv blocks of the current request (two windows of 32, the
//       second loaded 32 blocks ahead of use, so the block-table reads never stall the issue); warp 0's
//       lane 0, per request: after q_empty, TMA of the request's Q tile into the next Q slot; per own tile,
//       lane 0: after empty[s], TMA of the kv blocks' FP8 values and FP32 scales (block ids clamped into the
//       cache). Warp 0 also fetches into L2 the first request's block-table lines as soon as the schedule row is
//       read (in parallel with the request's length, which the cursor needs first) and every request's weight
//       rows as it enters it (the math warpgroups read them on entering it, up to a ring of tiles later). Warps 2-3:
//       kSignedSumByWgmma: per request, once its Q tile lands, the e4m3 pieces of u_t = sum_h w[t, h] q[t, h, :]
//       of its queries into the slot's piece tile (see pieces()); then (kCleanLogits) -inf past the end of rows
//       blockIdx.x + k * gridDim.x (disjoint from the math's stores).
// kv ring: kNumStages x [64 keys x D], 128B (D = 128) or 64B (D = 64) swizzle, and 64 FP32 kv scales;
//   full[s]: 1 arrival + bytes; empty[s]: 4 arrivals (the consuming warpgroup's warps). S is a multiple of M
//   and of 2, so stage s is always consumed by warpgroup s % M and filled by producer warp s % 2 (a parity
//   wait by another warpgroup or warp, one phase behind, would pass at once).
// Q ring: 2 slots of [T H x D] (a request's queries), same swizzle; q_full: 1 arrival + bytes; q_empty: 4 M
//   arrivals (every math warp, on leaving the request). kSignedSumByWgmma: per slot a [16 x D] piece tile (rows
//   mqa::SignedSumPieces::row(t, p), the rows of queries past T zero), 16 FP32 piece scales, and pieces_full: 2
//   arrivals (the pieces warps).
// Shared memory: [Q x 2] [pieces x 2] [kv x stages] [scales x stages] [piece scales x 2] [full x stages, empty x
//   stages, q_full x 2, q_empty x 2, pieces_full x 2] (the pieces' parts only with kSignedSumByWgmma). kFp4: [e4m3 kv
//   x 2 per math warpgroup] before the stages (of 64 x D / 2), [packed Q x 2] after them, pieces_full as q_converted.
// Invalid device-side values never reach memory: requests and blocks of the schedule are clamped to B and
//   the request's blocks, block-table columns to max_blocks, kHasIndices request indices to the table's rows,
//   block ids to the cache, ends to [0, W].
// FP4 mode (kFp4, common/mqa_fp4.cuh): q [B, T, H, D / 2] packed e2m1 with q_exponents int32 [B * T, H], and a
//   cache of [num_blocks, BLOCK_KV, 1, D / 2 + 4] bytes: per block BLOCK_KV x D / 2 packed e2m1, then BLOCK_KV int32
//   words of UE8M0 exponents per 1x32 (the reference's layout). Both stay packed in the TMA ring (unswizzled; the
//   words land where the FP8 scales do). The pieces warps convert each request's packed Q slot into its e4m3 slot
//   (after q_full; arrive q_converted, which the math waits for on entering the request); each math warpgroup
//   converts its own tiles' stages into one of two e4m3 kv tiles of its own (alternating; fence.proxy.async, a
//   warpgroup barrier) before issuing from it. Each row's 2^e_max goes where the FP8 path has its scale: the
//   key's from its word as the key's scale, the head's into that head's weight. No pieces; D in {64, 128}.
// Limits: H in {16, 32, 64}, D in {32, 64, 128} (the pieces: D >= 64), BLOCK_KV in {32, 64}, T in {1, 2, 4}.
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

// (the problem, as the kernel receives it: PagedMqaProblem, common/host_device_types.hpp)

// `Config::kValue`: the Sm90PagedMqaLogitsKernelConfig (common/host_device_types.hpp) the JIT renders by field name.
template <typename Config>
struct Sm90Fp8PagedMqaLogits {
    static constexpr Sm90PagedMqaLogitsKernelConfig kConfig = Config::kValue;
    static constexpr uint32_t kNextN = kConfig.next_n, kNumHeads = kConfig.num_heads, kHeadDim = kConfig.head_dim;
    static constexpr uint32_t kBlockKv = kConfig.block_kv, kNumStages = kConfig.num_stages;
    static constexpr uint32_t kNumMathWarpgroups = kConfig.num_math_warpgroups;
    static constexpr bool kIs2dContextLens = kConfig.is_2d_context_lens, kCleanLogits = kConfig.clean_logits;
    static constexpr bool kReluByAbs = kConfig.relu_by_abs, kSignedSumByWgmma = kConfig.signed_sum_wgmma;
    static constexpr bool kOutBf16 = kConfig.out_bf16, kHasIndices = kConfig.has_indices;
    static constexpr bool kFp4 = kConfig.fp4_operands;
    static constexpr uint32_t kNumFp4Groups = kHeadDim / 32;  // kFp4: UE8M0 exponents per row
    static constexpr uint32_t kConvertBarrier = 1;  // kFp4: named barriers 1 .. M, one per math warpgroup
    static constexpr uint32_t TILE_KV = 64;  // keys per tile: one wgmma M
    static constexpr uint32_t kBlocksPerTile = TILE_KV / kBlockKv;
    static constexpr uint32_t WG_N = kNextN * kNumHeads;  // query-heads of one request: wgmma N
    static constexpr uint32_t kNumMathThreads = kNumMathWarpgroups * 128;
    static constexpr uint32_t kNumThreads = kNumMathThreads + 128;
    static constexpr uint32_t kNumProducerWarps = 2;  // tile n: warp n % 2 of the producer warpgroup issues it
    static constexpr uint32_t kNumCleanThreads = 128 - 32 * kNumProducerWarps;
    static constexpr uint32_t kNumPiecesWarps = kNumCleanThreads / 32;  // kSignedSumByWgmma: query t by warp t % 2
    // Registers: 65536 per SM, the producer warpgroup at 40, the math warpgroups share the rest (multiple of 8)
    static constexpr uint32_t kProducerRegs = 40;
    static constexpr uint32_t kMathRegs = kNumMathWarpgroups == 2 ? 232 : 152;
    using Wgmma = ptx::WgmmaFp8E4m3<WG_N>;
    using Reduce = mqa::QuadReduce<kNextN>;
    static_assert(Reduce::kPerLane == 1, "T <= 4: one query per lane after the quad reduce (the deferred store)");
    static constexpr uint32_t kNumAccum = Wgmma::kNumAccum;
    static constexpr uint32_t kNumGroups = WG_N / 8;
    static constexpr uint32_t kGroupsPerQuery = kNumHeads / 8;
    static constexpr uint32_t kNumKSteps = kHeadDim / 32;
    using OutBits = cuda::std::conditional_t<kOutBf16, uint16_t, uint32_t>;

    // kSignedSumByWgmma: the e4m3 pieces of u_t = sum_h w[t, h] q[t, h, :] of the request's queries, one B row per
    // piece (mqa::SignedSumPieces::row), in a 16-row tile per Q slot, and their scales [4 queries x 4 pieces]
    using Pieces = mqa::SignedSumPieces<kHeadDim>;
    static constexpr uint32_t PIECES_N = 4 * Pieces::kNumPieces;
    using WgmmaPieces = ptx::WgmmaFp8E4m3<PIECES_N>;
    static constexpr uint32_t kNumPiecesAccum = kSignedSumByWgmma ? WgmmaPieces::kNumAccum : 1;

    static constexpr uint32_t kNumQSlots = 2;
    static constexpr uint32_t SMEM_Q_SIZE = WG_N * kHeadDim;  // one slot
    static constexpr uint32_t SMEM_PIECES_SIZE = kSignedSumByWgmma ? PIECES_N * kHeadDim : 0;  // one slot's tile
    static constexpr uint32_t SMEM_PIECE_SCALES_SIZE = kSignedSumByWgmma ? 4 * Pieces::kNumPieces * 4 : 0;
    static constexpr uint32_t SMEM_PIECES_OFFSET = kNumQSlots * SMEM_Q_SIZE;
    static constexpr uint32_t kKvRowBytes = kFp4 ? kHeadDim / 2 : kHeadDim;  // a key's bytes in a stage
    static constexpr uint32_t SMEM_KV_SIZE_PER_STAGE = TILE_KV * kKvRowBytes;
    // kFp4: per math warpgroup two e4m3 kv tiles, and after the stages two packed Q slots
    static constexpr uint32_t SMEM_KV_E4M3_TILE_SIZE = TILE_KV * kHeadDim;
    static constexpr uint32_t SMEM_KV_E4M3_OFFSET = SMEM_PIECES_OFFSET + kNumQSlots * SMEM_PIECES_SIZE;
    static constexpr uint32_t SMEM_KV_E4M3_SIZE = kFp4 ? kNumMathWarpgroups * 2 * SMEM_KV_E4M3_TILE_SIZE : 0;
    static constexpr uint32_t SMEM_KV_OFFSET = SMEM_KV_E4M3_OFFSET + SMEM_KV_E4M3_SIZE;
    static constexpr uint32_t SMEM_Q_PACKED_SIZE = kFp4 ? WG_N * kHeadDim / 2 : 0;  // one slot
    static constexpr uint32_t SMEM_Q_PACKED_OFFSET = SMEM_KV_OFFSET + kNumStages * SMEM_KV_SIZE_PER_STAGE;
    static constexpr uint32_t SMEM_SCALES_SIZE_PER_STAGE = TILE_KV * sizeof(float);
    static constexpr uint32_t SMEM_SCALES_OFFSET = SMEM_Q_PACKED_OFFSET + kNumQSlots * SMEM_Q_PACKED_SIZE;
    static constexpr uint32_t SMEM_PIECE_SCALES_OFFSET = SMEM_SCALES_OFFSET + kNumStages * SMEM_SCALES_SIZE_PER_STAGE;
    static constexpr uint32_t SMEM_BARRIER_OFFSET = SMEM_PIECE_SCALES_OFFSET + kNumQSlots * SMEM_PIECE_SCALES_SIZE;
    static constexpr uint32_t kNumBarriers = 2 * kNumStages + (kSignedSumByWgmma || kFp4 ? 3 : 2) * kNumQSlots;
    static constexpr uint32_t SMEM_SIZE = 1024 + SMEM_BARRIER_OFFSET + kNumBarriers * 8;
    static_assert(SMEM_SIZE == sm90_paged_mqa_logits_smem_bytes(kNextN, kNumHeads, kHeadDim, kNumStages,
                                                                kSignedSumByWgmma, kNumMathWarpgroups, kFp4) &&
                  Pieces::kNumPieces == kMqaSignedSumPieces,
                  "the host's shared-memory rule must match this layout");
    static constexpr uint32_t kStageBytes = SMEM_KV_SIZE_PER_STAGE + SMEM_SCALES_SIZE_PER_STAGE;  // TMA bytes per tile
    static constexpr uint32_t kIdWindow = 32;  // block ids per producer window (one per lane)

    static_assert(kNumHeads == 16 || kNumHeads == 32 || kNumHeads == 64, "H must be 16, 32 or 64");
    static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128,
                  "D must be 32, 64 or 128 (one swizzled TMA row)");
    static_assert(kBlockKv == 32 || kBlockKv == 64, "BLOCK_KV must be 32 or 64");
    static_assert(kNextN == 1 || kNextN == 2 || kNextN == 4, "next_n must be 1, 2 or 4");
    static_assert(!kHasIndices || kNextN == 1, "with indices every q row is one token (next_n = 1)");
    static_assert(kNumStages >= 2 && kNumStages <= 32, "2 to 32 stages");
    // Tile n sits in stage n % S and goes to warpgroup n % M: with M | S every stage has one consumer, which
    // waited for the stage's previous phase itself, so its parity wait can never match a phase one behind
    static_assert(kNumStages % kNumMathWarpgroups == 0 && kNumStages % kNumProducerWarps == 0,
                  "the stage count must be a multiple of the math warpgroups and of the producer warps");
    static_assert(kNumMathWarpgroups == 2 || (kNumMathWarpgroups == 3 && WG_N <= 128),
                  "2 math warpgroups, or 3 when next_n x H <= 128 (their accumulators fit in 152 registers)");
    static_assert(kNumMathWarpgroups * 128 * kMathRegs + 128 * kProducerRegs <= 65536, "register file");
    static_assert(kIdWindow % kBlocksPerTile == 0, "a tile's blocks lie in one id window");
    // A swizzled tile starts on its swizzle pattern's period (8 rows of D bytes); the kv stages on 1024 bytes
    static_assert(SMEM_Q_SIZE % (8 * kHeadDim) == 0 && (kBlockKv * kHeadDim) % 1024 == 0 &&
                  SMEM_KV_OFFSET % 1024 == 0, "tiles must keep their swizzle alignment");
    static_assert(SMEM_PIECES_SIZE % 1024 == 0, "piece tiles keep the kv stages 1024-byte aligned");
    static_assert(!kFp4 || (!kSignedSumByWgmma && (kHeadDim == 64 || kHeadDim == 128)),
                  "FP4 operands: D = 64 or 128, without the pieces (the pieces warps convert Q instead)");
    static_assert(SMEM_Q_PACKED_SIZE % 16 == 0 && SMEM_KV_OFFSET % 1024 == 0 && SMEM_SCALES_OFFSET % 16 == 0,
                  "the FP4 buffers keep the TMA destinations aligned");
    static_assert(!kSignedSumByWgmma || (kReluByAbs && kNextN <= 4 && kNumPiecesWarps == 2 && kHeadDim >= 64),
                  "the pieces complete the |x| form; 4 queries at most (one 16-row piece tile), two pieces warps, "
                  "D >= 64 (a lane's share of u is 2 or 4 bytes)");

    struct SharedStorage {
        uint8_t* base;
        __device__ __forceinline__ uint8_t* q(uint32_t slot) const { return base + slot * SMEM_Q_SIZE; }
        __device__ __forceinline__ uint8_t* kv(uint32_t stage) const {
            return base + SMEM_KV_OFFSET + stage * SMEM_KV_SIZE_PER_STAGE;
        }
        // The tile's 64 kv scales (block i's at [i * BLOCK_KV, +BLOCK_KV))
        __device__ __forceinline__ float* scales(uint32_t stage) const {
            return reinterpret_cast<float*>(base + SMEM_SCALES_OFFSET + stage * SMEM_SCALES_SIZE_PER_STAGE);
        }
        __device__ __forceinline__ uint64_t* full(uint32_t stage) const {
            return reinterpret_cast<uint64_t*>(base + SMEM_BARRIER_OFFSET) + stage;
        }
        __device__ __forceinline__ uint64_t* empty(uint32_t stage) const { return full(kNumStages + stage); }
        __device__ __forceinline__ uint64_t* q_full(uint32_t slot) const { return full(2 * kNumStages + slot); }
        __device__ __forceinline__ uint64_t* q_empty(uint32_t slot) const {
            return full(2 * kNumStages + kNumQSlots + slot);
        }
        // kSignedSumByWgmma: the slot's piece tile, their scales (query t's at [4 t, +4)) and the barrier the pieces
        // warps arrive on once both are written (kNumPiecesWarps arrivals)
        __device__ __forceinline__ uint8_t* pieces(uint32_t slot) const {
            return base + SMEM_PIECES_OFFSET + slot * SMEM_PIECES_SIZE;
        }
        __device__ __forceinline__ float* piece_scales(uint32_t slot) const {
            return reinterpret_cast<float*>(base + SMEM_PIECE_SCALES_OFFSET + slot * SMEM_PIECE_SCALES_SIZE);
        }
        __device__ __forceinline__ uint64_t* pieces_full(uint32_t slot) const {
            return full(2 * kNumStages + 2 * kNumQSlots + slot);
        }
        // kFp4: the slot's packed Q tile (what TMA loads), the barrier the pieces warps arrive on once they have
        // written its e4m3 Q tile (the pieces' barrier: the two are never both in use), and the math warpgroup's
        // e4m3 kv tiles
        __device__ __forceinline__ uint8_t* q_packed(uint32_t slot) const {
            return base + SMEM_Q_PACKED_OFFSET + slot * SMEM_Q_PACKED_SIZE;
        }
        __device__ __forceinline__ uint64_t* q_converted(uint32_t slot) const { return pieces_full(slot); }
        __device__ __forceinline__ uint8_t* kv_e4m3(uint32_t wg, uint32_t buffer) const {
            return base + SMEM_KV_E4M3_OFFSET + (2 * wg + buffer) * SMEM_KV_E4M3_TILE_SIZE;
        }
    };

    // ---------------------------------------------------------------- per-request facts (any thread)
    // Request b's kv blocks: ceil(longest context / BLOCK_KV), at most max_blocks
    __device__ __forceinline__ static uint32_t num_blocks_of(const PagedMqaProblem& p, uint32_t request) {
        int32_t length = 0;
        if constexpr (kIs2dContextLens) {
            #pragma unroll
            for (uint32_t t = 0; t < kNextN; ++t)
                length = max(length, __ldg(p.context_lens + request * kNextN + t));
        } else {
            length = max(__ldg(p.context_lens + request), 0);
        }
        return min(ceil_div(static_cast<uint32_t>(length), kBlockKv), p.max_blocks);
    }

    // The end (exclusive) of the keys query token t of request b sees, in [0, W]
    __device__ __forceinline__ static uint32_t query_end(const PagedMqaProblem& p, uint32_t request, uint32_t t) {
        const int32_t end = kIs2dContextLens
                                ? __ldg(p.context_lens + request * kNextN + t)
                                : __ldg(p.context_lens + request) - static_cast<int32_t>(kNextN - 1 - t);
        return static_cast<uint32_t>(min(max(end, 0), static_cast<int32_t>(p.out_width)));
    }

    // The block-table row of q row group b: b, or (kHasIndices) indices[b] clamped to the table's rows
    __device__ __forceinline__ static const int32_t* table_row(const PagedMqaProblem& p, uint32_t request) {
        uint32_t row = request;
        if constexpr (kHasIndices)
            row = static_cast<uint32_t>(min(max(__ldg(p.indices + request), 0),
                                            static_cast<int32_t>(p.num_table_rows) - 1));
        return p.block_table + static_cast<uint64_t>(row) * p.ld_block_table;
    }

    // The cache block of request b's kv block k (clamped: any value stays inside the cache)
    __device__ __forceinline__ static uint32_t block_id(const PagedMqaProblem& p, uint32_t request, uint32_t block) {
        const int32_t id = __ldg(table_row(p, request) + min(block, p.max_blocks - 1));
        return static_cast<uint32_t>(min(max(id, 0), static_cast<int32_t>(p.num_kv_blocks) - 1));
    }

    // Into L2, one line a lane (lanes past what there is do nothing): with_block_table, the block-table lines of the
    // request's kv blocks [block, block + 64) (the producer's two id windows); always, the request's
    // weight rows (what its first math warpgroup reads on entering it). A hint only: fetched ahead of the loads
    // that need them, so that those hit L2 instead of waiting on memory.
    static constexpr uint32_t kWeightLinesPerRow = (kNumHeads * 4 + 127) / 128;
    __device__ __forceinline__ static void prefetch_request(const PagedMqaProblem& p, uint32_t request, uint32_t block,
                                                            bool with_block_table, uint32_t lane) {
        if (request >= p.batch_size)
            return;
        if (lane < kNextN * kWeightLinesPerRow) {
            const uint32_t row = request * kNextN + lane / kWeightLinesPerRow;
            ptx::prefetch_l2(p.weights + static_cast<uint64_t>(row) * p.ld_weights + (lane % kWeightLinesPerRow) * 32);
        } else if (with_block_table && p.max_blocks > 0 && lane < kNextN * kWeightLinesPerRow + 3) {
            const uint32_t column = min(block + min((lane - kNextN * kWeightLinesPerRow) * 32, 63u), p.max_blocks - 1);
            ptx::prefetch_l2(table_row(p, request) + column);
        }
    }

    // ---------------------------------------------------------------- the CTA's tiles, in order
    struct Cursor {
        uint32_t request, block, num_blocks;  // the tile: kv blocks [block, +64 / BLOCK_KV) of request
        uint32_t end_request, end_block;       // the range ends before (end_request, end_block)

        __device__ __forceinline__ void skip_empty(const PagedMqaProblem& p) {
            #pragma unroll 1
            while (request < p.batch_size && block >= num_blocks) {
                ++request, block = 0;
                num_blocks = request < p.batch_size ? num_blocks_of(p, request) : 0;
            }
        }
        // The CTA's first tile; on_schedule(request, block) runs once the schedule row is read, before the
        // request's length is (a role can start fetching what needs only those two)
        template <typename OnSchedule>
        __device__ __forceinline__ static Cursor start(const PagedMqaProblem& p, const OnSchedule& on_schedule) {
            Cursor c;
            c.request = min(static_cast<uint32_t>(max(__ldg(p.schedule + 2 * blockIdx.x), 0)), p.batch_size);
            c.block = static_cast<uint32_t>(max(__ldg(p.schedule + 2 * blockIdx.x + 1), 0));
            c.end_request = min(static_cast<uint32_t>(max(__ldg(p.schedule + 2 * blockIdx.x + 2), 0)), p.batch_size);
            c.end_block = static_cast<uint32_t>(max(__ldg(p.schedule + 2 * blockIdx.x + 3), 0));
            on_schedule(c.request, c.block);
            c.num_blocks = c.request < p.batch_size ? num_blocks_of(p, c.request) : 0;
            c.skip_empty(p);
            return c;
        }
        __device__ __forceinline__ bool valid() const {
            return request < end_request || (request == end_request && block < end_block && num_blocks > 0);
        }
        // Blocks of this tile at or past this are not the CTA's (or not the request's)
        __device__ __forceinline__ uint32_t block_limit() const {
            return request == end_request ? min(end_block, num_blocks) : num_blocks;
        }
        __device__ __forceinline__ void advance(const PagedMqaProblem& p) {
            block += kBlocksPerTile;
            skip_empty(p);
        }
        // The first tile of the next request with blocks (valid() says whether it is still the CTA's)
        __device__ __forceinline__ void next_request(const PagedMqaProblem& p) {
            block = num_blocks;
            skip_empty(p);
        }
        // n tiles ahead in one step when that tile is still this request's and the CTA's (then so is every tile
        // between): no request is entered on the way; false (and unmoved) otherwise
        __device__ __forceinline__ bool jump_within_request(uint32_t n) {
            const uint32_t target = block + n * kBlocksPerTile;
            if (target >= block_limit())
                return false;
            block = target;
            return true;
        }
        // n tiles ahead, calling enter() for each request the cursor enters while still in the range (so a role
        // that skips other roles' tiles still sees every request of the range, in order)
        template <typename Enter>
        __device__ __forceinline__ void step(const PagedMqaProblem& p, uint32_t n, const Enter& enter) {
            if (jump_within_request(n))
                return;
            #pragma unroll 1
            for (uint32_t i = 0; i < n && valid(); ++i) {
                const uint32_t before = request;
                advance(p);
                if (valid() && request != before)
                    enter();
            }
        }
    };

    // ---------------------------------------------------------------- producers (kNumProducerWarps warps)
    // The cache block ids of kv blocks [first, first + 2 kIdWindow) of one request: lane l holds blocks first + l
    // (now) and first + kIdWindow + l (next). Sliding loads the window after next, a window before its use.
    struct BlockIdWindow {
        uint32_t request, first, now, next;

        __device__ __forceinline__ void reset(const PagedMqaProblem& p, uint32_t req, uint32_t block, uint32_t lane) {
            request = req, first = block;
            now = block_id(p, request, first + lane);
            next = block_id(p, request, first + kIdWindow + lane);
        }
        // The id of kv block `block` (in [first, first + 2 kIdWindow), non-decreasing over calls); warp-collective
        __device__ __forceinline__ uint32_t get(const PagedMqaProblem& p, uint32_t block, uint32_t lane) {
            if (block >= first + kIdWindow) {
                first += kIdWindow, now = next;
                next = block_id(p, request, first + kIdWindow + lane);
            }
            return __shfl_sync(0xffffffff, now, block - first);
        }
    };

    __device__ __forceinline__ static void producer(const SharedStorage& s, const PagedMqaProblem& p,
                                                    const TmaDescriptor* tma_q, const TmaDescriptor* tma_kv,
                                                    const TmaDescriptor* tma_scales, uint32_t warp, uint32_t lane) {
        PipelineState<kNumStages> pipe;  // this warp's stages: warp, warp + 2, ... (tiles warp, warp + 2, ...)
        pipe.stage = warp;
        PipelineState<kNumQSlots> q_pipe;
        BlockIdWindow ids;
        // Warp 0: the first request's block-table lines and weights into L2 while the cursor reads its length
        Cursor c = Cursor::start(p, [&](uint32_t request, uint32_t block) {
            if (warp == 0)
                prefetch_request(p, request, block, true, lane);
        });
        // Every request of the range (own tiles in it or not): its block ids; warp 0: its Q tile into its slot
        const auto enter = [&]() {
            ids.reset(p, c.request, c.block, lane);
            if (warp == 0 && lane == 0) {
                ptx::mbarrier_wait(s.q_empty(q_pipe.stage), q_pipe.phase ^ 1);
                // (kFp4: the packed Q tile, converted by the pieces warps)
                ptx::mbarrier_arrive_expect_tx(s.q_full(q_pipe.stage), kFp4 ? SMEM_Q_PACKED_SIZE : SMEM_Q_SIZE);
                ptx::tma_load_2d(kFp4 ? s.q_packed(q_pipe.stage) : s.q(q_pipe.stage), tma_q, s.q_full(q_pipe.stage),
                                 0, static_cast<int32_t>(c.request * WG_N));
            }
        };
        // The cursor's steps enter every later request: into the next Q slot; warp 0 fetches its weights into L2
        // for the math warpgroups, which enter it up to a ring of tiles later
        const auto enter_next = [&]() {
            q_pipe.advance();
            enter();
            if (warp == 0)
                prefetch_request(p, c.request, c.block, false, lane);
        };
        if (c.valid())
            enter();
        c.step(p, warp, enter_next);
        #pragma unroll 1
        for (; c.valid(); c.step(p, kNumProducerWarps, enter_next), pipe.template advance_by<kNumProducerWarps>()) {
            uint32_t id[kBlocksPerTile];
            #pragma unroll
            for (uint32_t i = 0; i < kBlocksPerTile; ++i)
                id[i] = ids.get(p, c.block + i, lane);
            if (lane == 0) {
                ptx::mbarrier_wait(s.empty(pipe.stage), pipe.phase ^ 1);
                ptx::mbarrier_arrive_expect_tx(s.full(pipe.stage), kStageBytes);
                #pragma unroll
                for (uint32_t i = 0; i < kBlocksPerTile; ++i) {
                    ptx::tma_load_3d(s.kv(pipe.stage) + i * kBlockKv * kKvRowBytes, tma_kv, s.full(pipe.stage), 0, 0,
                                     static_cast<int32_t>(id[i]));
                    ptx::tma_load_2d(s.scales(pipe.stage) + i * kBlockKv, tma_scales, s.full(pipe.stage), 0,
                                     static_cast<int32_t>(id[i]));
                }
            }
            __syncwarp();
        }
    }

    // ---------------------------------------------------------------- cleaner (the producer warpgroup's other warps)
    __device__ __forceinline__ static void clean(const PagedMqaProblem& p, uint32_t tid) {
        #pragma unroll 1
        for (uint32_t row = blockIdx.x; row < p.batch_size * kNextN; row += gridDim.x) {
            // From the first key the math does not store: past the query's end, or past the blocks the table's
            // columns hold (a context longer than max_blocks x BLOCK_KV keys)
            const uint32_t end = min(query_end(p, row / kNextN, row % kNextN),
                                     num_blocks_of(p, row / kNextN) * kBlockKv);
            mqa::fill_neg_inf<OutBits, kNumCleanThreads>(static_cast<OutBits*>(p.logits) + row * p.ld_logits, end,
                                                         p.out_width, tid);
        }
    }

    // ---------------------------------------------------------------- pieces (kSignedSumByWgmma)
    // The producer warpgroup's other two warps. Per request of the range, in order: once its Q tile has landed
    // (q_full), warp w builds u_t = sum_h w[t, h] q[t, h, :] of its queries t = w, w + 2 (< T) in FP32, in head order
    // (lane l holds d in [l kPerLane, +kPerLane), read from the slot's swizzled Q rows; the weights from global memory,
    // one per lane and head block of 32, broadcast per head), splits it into e4m3 pieces (mqa::SignedSumPieces),
    // writes them into the slot's piece tile as TMA would (rows Pieces::row(t, p), swizzled) with their scales, and
    // arrives on pieces_full. The slot is free by then: its Q tile is loaded only once every math warp has left the
    // request before (q_empty), and the math warps enter a request only after pieces_full, so the next Q tile cannot
    // land under these reads.
    __device__ __forceinline__ static void pieces(const SharedStorage& s, const PagedMqaProblem& p, uint32_t warp,
                                                  uint32_t lane) {
        constexpr uint32_t kPerLane = Pieces::kPerLane;
        constexpr uint32_t kHeadBlocks = (kNumHeads + 31) / 32, kHeadsPerBlock = kNumHeads < 32 ? kNumHeads : 32;
        using Word = cuda::std::conditional_t<kPerLane == 4, uint32_t, uint16_t>;
        PipelineState<kNumQSlots> q_pipe;
        Cursor c = Cursor::start(p, [](uint32_t, uint32_t) {});
        #pragma unroll 1
        for (; c.valid(); c.next_request(p), q_pipe.advance()) {
            ptx::mbarrier_wait(s.q_full(q_pipe.stage), q_pipe.phase);
            const uint8_t* q_tile = s.q(q_pipe.stage);
            uint8_t* piece_tile = s.pieces(q_pipe.stage);
            #pragma unroll 1
            for (uint32_t t = warp; t < kNextN; t += kNumPiecesWarps) {
                const float* w = p.weights + (static_cast<uint64_t>(c.request) * kNextN + t) * p.ld_weights;
                float weight[kHeadBlocks];
                #pragma unroll
                for (uint32_t i = 0; i < kHeadBlocks; ++i)
                    weight[i] = lane < kHeadsPerBlock ? __ldg(w + i * 32 + lane) : 0.0f;
                float u[kPerLane] = {};
                #pragma unroll
                for (uint32_t i = 0; i < kHeadBlocks; ++i) {
                    #pragma unroll 8
                    for (uint32_t k = 0; k < kHeadsPerBlock; ++k) {
                        const uint32_t row = t * kNumHeads + i * 32 + k;
                        const Word word = *reinterpret_cast<const Word*>(
                            q_tile + ptx::swizzled_offset<kHeadDim>(row * kHeadDim + lane * kPerLane));
                        Pieces::add_weighted(u, word, __shfl_sync(0xffffffff, weight[i], k));
                    }
                }
                uint32_t words[Pieces::kNumPieces];
                float scales[Pieces::kNumPieces];
                Pieces::split(u, words, scales);
                #pragma unroll
                for (uint32_t q = 0; q < Pieces::kNumPieces; ++q) {
                    const uint32_t logical = Pieces::row(t, q) * kHeadDim + lane * kPerLane;
                    *reinterpret_cast<Word*>(piece_tile + ptx::swizzled_offset<kHeadDim>(logical)) =
                        static_cast<Word>(words[q]);
                    if (lane == q)
                        s.piece_scales(q_pipe.stage)[t * Pieces::kNumPieces + q] = scales[q];
                }
            }
            ptx::fence_proxy_async_smem();  // the tile's generic writes, before the math's wgmmas read them
            __syncwarp();
            if (lane == 0)
                ptx::mbarrier_arrive(s.pieces_full(q_pipe.stage));
        }
    }

    // ---------------------------------------------------------------- Q conversion (kFp4)
    // The pieces warps, per request of the range in order: once its packed Q tile has landed (q_full), its T H rows
    // to e4m3 in the slot's Q tile (exponents from q_exponents), fence, arrive q_converted. The slot is free as for
    // the pieces: the next Q tile lands only after every math warp left the request before (q_empty), and the math
    // warps enter a request only after q_converted, so nothing reads the e4m3 tile or the packed one under these.
    __device__ __forceinline__ static void convert_q(const SharedStorage& s, const PagedMqaProblem& p, uint32_t warp,
                                                     uint32_t lane) {
        PipelineState<kNumQSlots> q_pipe;
        Cursor c = Cursor::start(p, [](uint32_t, uint32_t) {});
        #pragma unroll 1
        for (; c.valid(); c.next_request(p), q_pipe.advance()) {
            ptx::mbarrier_wait(s.q_full(q_pipe.stage), q_pipe.phase);
            const uint32_t* exponents = p.q_exponents + static_cast<uint64_t>(c.request) * WG_N;
            mqa::convert_fp4_rows<WG_N, kHeadDim, 32 * kNumPiecesWarps>(
                s.q_packed(q_pipe.stage), s.q(q_pipe.stage), warp * 32 + lane,
                [&](uint32_t row) { return __ldg(exponents + row); });
            ptx::fence_proxy_async_smem();  // the tile's generic writes, before the math's wgmmas read them
            __syncwarp();
            if (lane == 0)
                ptx::mbarrier_arrive(s.q_converted(q_pipe.stage));
        }
    }

    // ---------------------------------------------------------------- math warpgroups
    // One logit: FP32 bits, or (kOutBf16) rounded to nearest-even BF16
    __device__ __forceinline__ static void store(OutBits* ptr, float value) {
        if constexpr (kOutBf16)
            *ptr = __bfloat16_as_ushort(__float2bfloat16_rn(value));
        else
            *ptr = __float_as_uint(value);
    }

    __device__ __forceinline__ static void math(const SharedStorage& s, const PagedMqaProblem& p, uint32_t wg_idx) {
        const uint32_t warp_in_wg = (threadIdx.x / 32) % 4;
        const uint32_t lane = threadIdx.x % 32;
        const uint32_t row_0 = warp_in_wg * 16 + lane / 4;  // this thread's key rows in the tile: row_0, row_0 + 8

        float2 weight[kNumGroups];                // group j: query j / (H / 8), heads (j % (H / 8)) 8 + 2 (lane % 4) + {0, 1}
        uint32_t ends[Reduce::kPerLane];          // the ends of the queries this lane stores
        uint32_t loaded_request = 0xffffffffu;
        float accum[kNumAccum];
        // kSignedSumByWgmma: kv tile . pieces^T, and the scales of the pieces of the query this lane stores
        float pieces_accum[kNumPiecesAccum];
        float piece_scale[Pieces::kNumPieces];

        // The previous own tile's per-thread sums, reduced across the quad and stored while this tile's wgmmas
        // run; where its two values go (row pointer at key row_0) and which of them are stored. The flush sits in
        // a branch so that ptxas keeps it after the last wgmma (unconditional, it hoisted the shuffles between
        // the wgmmas); on a bool, not a pointer test, which made ptxas add a divergent-shuffle fallback.
        float pending[kNextN][2];
        float pending_signed[2], pending_scale[2];  // kSignedSumByWgmma: this lane's query's sum x w, the kv scales
        OutBits* pending_out = static_cast<OutBits*>(p.logits);
        bool pending_stores[2] = {false, false};
        bool has_pending = false;
        const auto flush = [&]() {
            float reduced[Reduce::kPerLane][2];
            Reduce::run(pending, reduced, lane);
            if constexpr (kSignedSumByWgmma) {
                #pragma unroll
                for (uint32_t h = 0; h < 2; ++h)
                    reduced[0][h] = mqa::relu_from_sums(pending_scale[h], pending_signed[h], reduced[0][h]);
            }
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                if (pending_stores[h])
                    store(pending_out + h * 8, reduced[0][h]);
            }
        };

        PipelineState<kNumStages> pipe;  // this warpgroup's stages: wg_idx, wg_idx + M, ... (its tiles' stages)
        pipe.stage = wg_idx;
        uint32_t num_own_tiles = 0;  // kFp4: which of the two e4m3 kv tiles the next own tile takes
        PipelineState<kNumQSlots> q_pipe;
        Cursor c = Cursor::start(p, [](uint32_t, uint32_t) {});
        // Every request of the range (own tiles in it or not): wait for its Q tile; the cursor's steps enter every
        // later request, leaving the previous one's Q slot first
        const auto enter = [&]() {
            ptx::mbarrier_wait(s.q_full(q_pipe.stage), q_pipe.phase);
            if constexpr (kSignedSumByWgmma)
                ptx::mbarrier_wait(s.pieces_full(q_pipe.stage), q_pipe.phase);
            if constexpr (kFp4)
                ptx::mbarrier_wait(s.q_converted(q_pipe.stage), q_pipe.phase);
        };
        const auto enter_next = [&]() {
            // Every lane read the slot's piece scales; lane 0's arrival releases only its own accesses, so the warp
            // barrier orders the other lanes' reads before it (the pieces warps rewrite the scales once q_empty
            // has let the next Q tile into the slot)
            if constexpr (kSignedSumByWgmma)
                __syncwarp();
            if (lane == 0)
                ptx::mbarrier_arrive(s.q_empty(q_pipe.stage));
            q_pipe.advance();
            enter();
        };
        if (c.valid())
            enter();
        c.step(p, wg_idx, enter_next);
        #pragma unroll 1
        for (; c.valid(); c.step(p, kNumMathWarpgroups, enter_next), pipe.template advance_by<kNumMathWarpgroups>()) {
            // A new request: its weights and query ends
            if (c.request != loaded_request) {
                loaded_request = c.request;
                #pragma unroll
                for (uint32_t j = 0; j < kNumGroups; ++j) {
                    const uint32_t query = c.request * kNextN + j / kGroupsPerQuery;
                    const float* w = p.weights + static_cast<uint64_t>(query) * p.ld_weights +
                                     (j % kGroupsPerQuery) * 8 + (lane % 4) * 2;
                    weight[j] = {__ldg(w), __ldg(w + 1)};
                    if constexpr (kFp4) {
                        // The heads' q scales 2^e_max (exact powers of two) fold into their weights
                        const uint32_t* e = p.q_exponents + static_cast<uint64_t>(query) * kNumHeads +
                                            (j % kGroupsPerQuery) * 8 + (lane % 4) * 2;
                        weight[j].x *= mqa::row_scale<kNumFp4Groups>(__ldg(e));
                        weight[j].y *= mqa::row_scale<kNumFp4Groups>(__ldg(e + 1));
                    }
                }
                #pragma unroll
                for (uint32_t m = 0; m < Reduce::kPerLane; ++m)
                    ends[m] = query_end(p, c.request, Reduce::query(m, lane));
                if constexpr (kSignedSumByWgmma) {
                    #pragma unroll
                    for (uint32_t q = 0; q < Pieces::kNumPieces; ++q)
                        piece_scale[q] =
                            s.piece_scales(q_pipe.stage)[Reduce::query(0, lane) * Pieces::kNumPieces + q];
                }
            }

            // This thread's two keys: in blocks of the CTA's range (else scale 0, not stored)
            const uint32_t limit = c.block_limit();
            bool in_range[2];
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h)
                in_range[h] = c.block + (row_0 + h * 8) / kBlockKv < limit;

            // accum [64 keys x T H query-heads] = kv tile (64 x D) * Q tile (T H x D)^T; the previous own tile's
            // quad reduce and stores (shuffle and address latency) run under these wgmmas
            const uint64_t desc_kv = ptx::make_smem_desc_k_major_swizzled<kHeadDim>(
                kFp4 ? s.kv_e4m3(wg_idx, num_own_tiles % 2) : s.kv(pipe.stage));
            const uint64_t desc_q = ptx::make_smem_desc_k_major_swizzled<kHeadDim>(s.q(q_pipe.stage));
            ptx::mbarrier_wait(s.full(pipe.stage), pipe.phase);
            if constexpr (kFp4) {
                // The packed stage into this warpgroup's e4m3 kv tile (alternating: every warp has passed the
                // wgmma wait of the tile that used it before the barrier after the previous conversion); the
                // exponent words came with the stage
                const uint32_t* words = reinterpret_cast<const uint32_t*>(s.scales(pipe.stage));
                mqa::convert_fp4_rows<TILE_KV, kHeadDim, 128>(s.kv(pipe.stage), s.kv_e4m3(wg_idx, num_own_tiles % 2),
                                                              threadIdx.x % 128,
                                                              [&](uint32_t row) { return words[row]; });
                ptx::fence_proxy_async_smem();
                ptx::named_barrier_sync(kConvertBarrier + wg_idx, 128);
            }
            if constexpr (kSignedSumByWgmma) {  // and pieces_accum = kv tile . pieces^T, in the same commit group
                const uint64_t desc_pieces = ptx::make_smem_desc_k_major_swizzled<kHeadDim>(s.pieces(q_pipe.stage));
                mqa::fence_accum(accum);
                mqa::fence_accum(pieces_accum);
                ptx::wgmma_fence();
                mqa::mma_k_steps<Wgmma, kNumKSteps>(desc_kv, desc_q, accum);
                mqa::mma_k_steps<WgmmaPieces, kNumKSteps>(desc_kv, desc_pieces, pieces_accum);
                ptx::wgmma_commit();
                mqa::fence_accum(accum);
                mqa::fence_accum(pieces_accum);
            } else {
                mqa::score_tile_issue<Wgmma, kNumKSteps>(desc_kv, desc_q, accum);
            }
            if (has_pending)
                flush();
            mqa::score_tile_wait(accum);
            if constexpr (kSignedSumByWgmma)
                mqa::fence_accum(pieces_accum);
            float scale[2];
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                if constexpr (kFp4)  // (the key's exponent word: its scale is 2^e_max)
                    scale[h] = in_range[h] ? mqa::row_scale<kNumFp4Groups>(reinterpret_cast<const uint32_t*>(
                                                 s.scales(pipe.stage))[row_0 + h * 8])
                                           : 0.0f;
                else
                    scale[h] = in_range[h] ? s.scales(pipe.stage)[row_0 + h * 8] : 0.0f;
            }
            if (lane == 0)
                ptx::mbarrier_arrive(s.empty(pipe.stage));

            // Per query and key: sum_h relu(x_h s) w_h (any sign of s); stored by the next flush: the valid keys
            // (below the query's end, in blocks of the CTA's range) of query Reduce::query(0, lane). With the
            // pieces: sum_h |x_h| w_h here, sum_h x_h w_h of the lane's query from its piece columns (smallest
            // piece first), relu from both after the flush's quad reduce
            if constexpr (kSignedSumByWgmma) {
                float unused[kNextN][2];
                mqa::head_sums<kNextN, kNumHeads, false>(accum, weight, unused, pending);
                #pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    float signed_sum = 0.0f;
                    #pragma unroll
                    for (uint32_t q = Pieces::kNumPieces; q-- > 0;)
                        signed_sum = fmaf(piece_scale[q], pieces_accum[Pieces::accum_index(0, q, h)], signed_sum);
                    pending_signed[h] = signed_sum, pending_scale[h] = scale[h];
                }
            } else {
                mqa::weighted_relu_sums<kNextN, kNumHeads, kReluByAbs>(accum, weight, scale[0], scale[1], pending);
            }
            const uint32_t key_0 = c.block * kBlockKv + row_0;
            const uint64_t out_row = static_cast<uint64_t>(c.request) * kNextN + Reduce::query(0, lane);
            pending_out = static_cast<OutBits*>(p.logits) + out_row * p.ld_logits + key_0;
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h)
                pending_stores[h] = Reduce::stores(lane) && in_range[h] && key_0 + h * 8 < ends[0];
            has_pending = true;
            if constexpr (kFp4)
                ++num_own_tiles;
        }
        flush();
        // (no arrival for the last request's slot: nothing is loaded after it)
    }
};

template <typename Config>
__global__ void __launch_bounds__((Config::kValue.num_math_warpgroups + 1) * 128, 1)
sm90_fp8_paged_mqa_logits_kernel(const __grid_constant__ PagedMqaProblem problem,
                                 const __grid_constant__ TmaDescriptor tma_q,
                                 const __grid_constant__ TmaDescriptor tma_kv,
                                 const __grid_constant__ TmaDescriptor tma_scales) {
    using Kernel = Sm90Fp8PagedMqaLogits<Config>;
    constexpr uint32_t kNumStages = Kernel::kNumStages;
    constexpr bool kSignedSumByWgmma = Kernel::kSignedSumByWgmma, kCleanLogits = Kernel::kCleanLogits;

    // Shared memory, 1024-byte aligned for the swizzle
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + (1024 - ptx::smem_addr(smem_raw) % 1024) % 1024;
    const typename Kernel::SharedStorage storage{smem};

    // Barriers by the producer's first thread
    if (threadIdx.x == Kernel::kNumMathThreads) {
        ptx::prefetch_tma_descriptor(&tma_q);
        ptx::prefetch_tma_descriptor(&tma_kv);
        ptx::prefetch_tma_descriptor(&tma_scales);
        #pragma unroll
        for (uint32_t i = 0; i < kNumStages; ++i) {
            ptx::mbarrier_init(storage.full(i), 1);
            ptx::mbarrier_init(storage.empty(i), 4);
        }
        #pragma unroll
        for (uint32_t i = 0; i < Kernel::kNumQSlots; ++i) {
            ptx::mbarrier_init(storage.q_full(i), 1);
            ptx::mbarrier_init(storage.q_empty(i), Kernel::kNumMathThreads / 32);
            if constexpr (kSignedSumByWgmma || Kernel::kFp4)
                ptx::mbarrier_init(storage.pieces_full(i), Kernel::kNumPiecesWarps);
        }
        ptx::fence_barrier_init();
    }
    // kSignedSumByWgmma: zero piece tiles (the rows of queries past T stay zero; the wgmmas read them too)
    if constexpr (kSignedSumByWgmma) {
        constexpr uint32_t kWords = Kernel::kNumQSlots * Kernel::SMEM_PIECES_SIZE / 16;
        for (uint32_t i = threadIdx.x; i < kWords; i += Kernel::kNumThreads)
            reinterpret_cast<uint4*>(storage.pieces(0))[i] = make_uint4(0, 0, 0, 0);
        ptx::fence_proxy_async_smem();
    }
    __syncthreads();
    // The schedule, context lengths and block table may come from the previous grid (PDL)
    ptx::grid_dependency_wait();
    ptx::grid_dependency_launch_dependents();

    if (threadIdx.x >= Kernel::kNumMathThreads) {
        ptx::warpgroup_reg_dealloc<Kernel::kProducerRegs>();
        const uint32_t tid = threadIdx.x - Kernel::kNumMathThreads;
        if (tid < 32 * Kernel::kNumProducerWarps) {
            Kernel::producer(storage, problem, &tma_q, &tma_kv, &tma_scales, tid / 32, tid % 32);
        } else {
            // kSignedSumByWgmma: every request's pieces first (the math waits for them), then the -inf
            if constexpr (kSignedSumByWgmma)
                Kernel::pieces(storage, problem, tid / 32 - Kernel::kNumProducerWarps, tid % 32);
            if constexpr (Kernel::kFp4)  // (kFp4: every request's Q conversion first, then the -inf)
                Kernel::convert_q(storage, problem, tid / 32 - Kernel::kNumProducerWarps, tid % 32);
            if constexpr (kCleanLogits)
                Kernel::clean(problem, tid - 32 * Kernel::kNumProducerWarps);
        }
    } else {
        ptx::warpgroup_reg_alloc<Kernel::kMathRegs>();
        Kernel::math(storage, problem, __shfl_sync(0xffffffff, threadIdx.x / 128, 0));
    }
}

}  // namespace deep_gemm
