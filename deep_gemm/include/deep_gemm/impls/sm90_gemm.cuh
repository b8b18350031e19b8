// SM90 GEMMs on one pipeline: FP8 with fine-grained scaling ("1d2d": A scaled per 1x128, B per 128x128; or
// both per row, recipe (1, 1, 128)) and BF16 in every layout. The operand kind (OperandKind) decides only the
// K loop's inner step (wgmma kind, promotion) and which scales travel with a stage; the pipeline, scheduler
// and epilogues are shared.
//
// FP8:  D[m, n] = sum_kb  sfa[m, kb] * sfb[n / 128 (or n), kb] * sum_{k in block kb} A[m, k] * B[n, k]
//       A [M, K] and B [N, K] float8_e4m3fn, K-major; sfa FP32 MN-major [ceil(K/128)][align(M, 4)]; sfb FP32
//       K-major [ceil(N/128)][ceil(K/128)] (1d2d) or MN-major like sfa (per row); D BF16 (1d2d) or FP32 (+ C).
// FP8 x FP4 (kFp4B): as FP8 with A's sfa per 1x128, B e2m1 packed two a byte along K (low nibble first) [N, K / 2]
//       with UE8M0 exponents per 1x32 (the host packs them four to a word, MN-major [ceil(K/128)][align(N, 4)]);
//       BF16 D. B is converted to e4m3 in shared memory with the 1x32 scales folded in relative to the K block's
//       largest, which is promoted as a per-row sfb (common/fp4_conversion.cuh). M-grouped: B [groups, N, K / 2], its
//       exponent words [groups][ceil(K/128)][align(N, 4)].
// BF16: D[m, n] = C[m, n] + sum_k A[m, k] * B[n, k], A and B BF16, each K-major ([M, K] / [N, K] rows) or
//       MN-major ([K, M] / [K, N] rows: wgmma reads it transposed); D BF16 or FP32, C (D's type) optional.
//
// Launch: persistent, grid = at most #SMs (whole clusters), (kNumMathWarpgroups + 1) * 128 threads, 1 CTA/SM;
//   with kNumMulticast = 2, clusters of 2 CTAs work on tile pairs that share B (or A, kIsMulticastOnA):
//   each CTA's producer loads half of the shared tile and multicasts it into both CTAs (K-major only);
//   with kNumSplits > 1, clusters of kNumSplits CTAs work on the K ranges of one tile (split-K, below).
// Roles:
//   warpgroups 0 .. kNumMathWarpgroups-1  math (setmaxnreg 232; 152 with three): each owns WG_M = BLOCK_M / kNumMathWarpgroups
//       rows of the tile.
//       FP8, per 128-deep K block: wait full[s]; read its sfa rows from smem; issue 4 x wgmma m64nBLOCK_Nk32
//       per 64 rows into `partial`; wait; arrive empty[s] (one lane per warp); promote: accum += partial *
//       sfa[row] * sfb[col block] on the CUDA cores (two-level accumulation: FP8 tensor-core sums never run
//       longer than 128 of K; common/fp8_promotion.cuh). With kOverlapPromotion (one or two math warpgroups, where a second partial buffer
//       fits): block k + 1's wgmmas are issued into the other buffer before waiting (wait_group 1) for block k's,
//       so the tensor cores run them during block k's promotion (overlapped_step).
//       BF16, per 64-deep K block: wait full[s]; issue 4 x wgmma m64nBLOCK_Nk16 per 64 rows accumulating into
//       `accum`; wait until one group is in flight (the previous block's); arrive empty[s - 1].
//   last warpgroup  producer (setmaxnreg 40):
//       warp 0, one thread: per K block, after waiting empty[s], TMA loads of the A tile, the B tile and
//       (FP8) the BLOCK_M sfa values (and per-row sfb) into stage s; arms full[s] with the byte count. (A plain
//       GEMM with M < BLOCK_M loads only the A and sfa rows that exist: small_m_box_rows.)
//       warps 1 .. 3 (FP4 converter, kFp4B only): per K block, wait b_loaded[s] (the packed B tile and its
//       exponent words, which the TMA thread loads on that barrier instead of full[s]), write B as the e4m3 tile
//       and the rows' FP32 scales into stage s, fence the async proxy, arrive on full[s] (one arrival per warp).
//       warp 1 (sfb loader, 1d2d only): the two sfb values of the K block (the tile's first and last 128-column
//       scale blocks) into stage s, then arrives on full[s]. Its lanes load 32 K blocks' worth at a
//       time, so the global-load latency is paid once per 32 stages, not on the math warps' path.
//       M-grouped contiguous, when the host sets GroupedLayout::zero_padding (ensure_zero_padding in the GEMM):
//       every producer warp, its role done (or idle), zeroes D's padding rows, a row per warp over the grid
//       (common/zero_padding.cuh), while the math runs; no tile writes those rows.
// Stage ring: kNumStages stages of A (BLOCK_M x 128 B) + B (BLOCK_N x 128 B) [+ sfa (BLOCK_M x 4 B) + sfb],
//   128B-swizzled as TMA writes them and as wgmma reads them: K-major tiles one box of rows x 128 bytes;
//   MN-major tiles boxes of 64 elements (128 bytes) x 64 rows of K, one after another (the descriptor's
//   leading byte offset steps between them). full[s] (TMA bytes + 1, or 2 with the sfb loader, or 4 with the
//   FP4 converter) and empty[s] (4 * kNumMathWarpgroups arrivals per CTA of the cluster: a multicast stage is
//   free only when both CTAs consumed it). All roles walk the same tile sequence, so the ring runs on across
//   tiles without draining. Clusters sync after barrier init and before exit.
// sfb (1d2d): a tile of BLOCK_N columns spans at most two 128-column scale blocks (the host picks BLOCK_N
//   so); columns left of `boundary` take the first, the others the second (TileSfb). `boundary` takes
//   one of 128 / gcd(BLOCK_N, 128) values, and the promotion is compiled once per value (selected per
//   K block by a warp-uniform branch), so it holds no per-column selection.
// Shared memory: [D staging (TMA store): BLOCK_M x BLOCK_N BF16, or FP32 kNumFp32Buffers x BLOCK_M x 32] [split-K slots]
//   [A x stages] [B x stages] [sfa x stages] [sfb x stages] [FP4: packed B x stages] [full, empty barriers]
//   [FP32 D: C-load barriers] [split-K: exchange barriers] [FP4: b_loaded barriers], 1024-byte aligned.
// Epilogue (kUseTmaStore, BF16 D without C): each math warpgroup converts its accumulators to BF16, writes them
//   with stmatrix into its rows of the staging tile (column chunks of kStoreChunkN, swizzled to match the
//   TMA box), fences, and one thread issues TMA stores; the next tile waits for those stores to have
//   read shared memory before overwriting it, so the store of tile i overlaps the K loop of tile i+1.
//   FP32 D (kUseTmaStore): per 32-column chunk, each math warpgroup writes its rows into the next of a ring of
//   kNumFp32Buffers 128B-swizzled staging buffers and one thread stores the chunk by TMA; in place (C is D) TMA
//   adds the chunk into D instead (cp.reduce.async.bulk .add: no C read by the threads); another C is TMA-loaded
//   chunk by chunk into the same buffers (the first kNumFp32Buffers chunks during the tile's K loop, each
//   further one once the store that many chunks back has read its buffer) and added there (a C whose rows TMA
//   cannot address: from global memory). With a buffer per chunk the stores drain during the next K loop.
//   Otherwise (D's row stride not 16-byte aligned, BF16 D with a C) threads store directly with bounds
//   checks, after reading all of their C. (TMA epilogues: common/gemm_tma_epilogue.cuh; direct stores:
//   common/accum_fragment.cuh.)
// Split-K (kNumSplits > 1, small M): a tile's kNumSplits units, over consecutive near-equal K ranges, run in the
//   kNumSplits CTAs of one cluster (the grid is a whole number of clusters, so unit u = tile * kNumSplits + split
//   lands on cluster rank `split`). After the K loop the CTAs exchange their FP32 partial sums through distributed
//   shared memory and each adds a share of the tile's elements from all of them in split order, adds C and
//   stores it to D directly (SplitKExchange, common/gemm_exchange.cuh): one kernel, deterministic, no global
//   workspace.
// Stream-K (kStreamK, normal GEMMs whose tiles leave the last wave partly idle): the last stream_k.num_tiles tiles'
//   K blocks are spread evenly over all CTAs (GemmScheduler); a CTA whose range starts inside a tile stores its
//   FP32 partial sums to its slot of a global workspace and counts them in the tile's flag (StreamKExchange);
//   the tile's owner (the CTA that ran its first K blocks) waits for the count, adds the slots in K order and
//   runs the normal epilogue (StreamKExchange::add_contributions): deterministic, one kernel.
// Tiles are taken by GemmScheduler (rasterized in groups of kNumGroupN column blocks).
// M-grouped (kGemmType, MoE): B is [groups, N, K] viewed as [groups * N, K] (MN-major: [groups][K][N], a 3-D
//   map) and sfb as [groups, ceil(N/128), K blocks]; the scheduler finds each row block's group (contiguous:
//   skipping padding blocks; masked: A and D [groups * max_m, ...], walking each group's masked_m rows), the
//   producer offsets B's rows and the sfb loader its scales by the group (recipe (1, 1, 128): per-row sfb
//   [groups][K blocks][N], the group's K-block rows); tiles with rows that must not be written are stored
//   directly with a per-row check, whole ones through TMA. D BF16, or FP32 without C (recipe (1, 1, 128) or
//   BF16 with FP32 D). Batched (kBatched, einsum's per-head products): a masked GEMM whose A [rows, groups, K] and
//   D [rows, groups, N] stay in their own layout: 3-D maps at (K or N, row in the group, group), whose bounds zero
//   A's and clip D's rows past the group's (every group has the same rows; max_m is only the scheduler's stride).
// K-grouped (kKGroupedContiguous, MoE weight gradients; FP8 recipe (1, 1, 128) or BF16): per group g,
//   D[g] = C[g] + A_g @ B_g^T with A_g [M, K_g] and B_g [N, K_g] (FP8: K-major; BF16 tn: MN-major [K_g, M] and
//   [K_g, N]), back to back in flat buffers. Their row strides or extents differ per group, so the host passes
//   one TMA map per group and operand in the kernel parameter `k_groups` (with each group's K block count and
//   first scale row); FP8 scales sfa [sum_g K blocks, M] and sfb [sum_g K blocks, N] are one map each. D and
//   C [groups, M, N] FP32, stored directly.
// Limits: BLOCK_M in {64, 128, 192 (three math warpgroups, BLOCK_N <= 128), 256}; BLOCK_N a multiple of 16 (TMA
//   store) or 8, at most 256 (MN-major B: a multiple of 64); K a multiple of 16 bytes (TMA strides); the tails
//   of M, N, K are zero-filled by TMA loads and clipped by the TMA store.
#pragma once

#include <cuda_bf16.h>
#include <cuda/std/type_traits>

#include <deep_gemm/common/accum_fragment.cuh>
#include <deep_gemm/common/fp4_conversion.cuh>
#include <deep_gemm/common/fp8_promotion.cuh>
#include <deep_gemm/common/gemm_exchange.cuh>
#include <deep_gemm/common/gemm_tma_epilogue.cuh>
#include <deep_gemm/common/pipeline.cuh>
#include <deep_gemm/common/types.cuh>
#include <deep_gemm/common/zero_padding.cuh>
#include <deep_gemm/ptx/cluster.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>
#include <deep_gemm/ptx/sync.cuh>
#include <deep_gemm/ptx/tma.cuh>
#include <deep_gemm/ptx/wgmma.cuh>
#include <deep_gemm/scheduler/gemm_scheduler.cuh>

namespace deep_gemm {

// `Config::kValue`: the Sm90GemmKernelConfig (common/host_device_types.hpp) the JIT renders by field name.
template <typename Config>
struct Sm90Gemm {
    static constexpr Sm90GemmKernelConfig kConfig = Config::kValue;
    static constexpr uint32_t SHAPE_M = kConfig.shape_m, SHAPE_N = kConfig.shape_n, SHAPE_K = kConfig.shape_k;
    static constexpr uint32_t BLOCK_M = kConfig.block_m, BLOCK_N = kConfig.block_n;
    static constexpr uint32_t kNumStages = kConfig.num_stages;
    static constexpr uint32_t kNumMathWarpgroups = kConfig.num_math_warpgroups;
    static constexpr uint32_t kNumGroupN = kConfig.num_group_n;
    static constexpr uint32_t kNumMulticast = kConfig.num_multicast;
    static constexpr bool kIsMulticastOnA = kConfig.is_multicast_on_a;
    static constexpr uint32_t kStoreChunkN = kConfig.store_chunk_n;
    static constexpr uint32_t kNumFp32Buffers = kConfig.fp32_buffers;
    static constexpr bool kUseTmaStore = kConfig.use_tma_store;
    static constexpr uint32_t kNumSplits = kConfig.num_splits;
    static constexpr OperandKind kOperands = kConfig.operands;
    static constexpr bool kMnMajorA = kConfig.mn_major_a, kMnMajorB = kConfig.mn_major_b;
    static constexpr bool kFp32Out = kConfig.fp32_out;
    static constexpr GemmType kGemmType = kConfig.gemm_type;
    static constexpr uint32_t kMaxKGroups = kConfig.max_k_groups;
    static constexpr bool kOverlapPromotion = kConfig.overlap_promotion;
    static constexpr bool kStreamK = kConfig.stream_k;
    // Masked, batched: A [rows, groups, K] and D [rows, groups, N] in place (3-D maps at (K or N, row, group))
    static constexpr bool kBatched = kConfig.batched;
    // Normal, K-batched: D = sum_s A[s] @ B[s]^T, the K loop over S x ceil(K / BLOCK_K) blocks (3-D maps at (K, row, s))
    static constexpr bool kKBatched = kConfig.k_batched;
    // Skip-head-mid: each head's (left + right) GEMM columns stored around a gap of `mid` D columns
    static constexpr uint32_t kHeadLeft = kConfig.head_left, kHeadMid = kConfig.head_mid, kHeadRight = kConfig.head_right;
    static constexpr bool kSkipHeadMid = kHeadLeft + kHeadRight > 0;
    struct HeadMidColumns {
        __device__ __forceinline__ uint32_t operator()(uint32_t n) const {
            const uint32_t head = n / (kHeadLeft + kHeadRight), j = n % (kHeadLeft + kHeadRight);
            return head * (kHeadLeft + kHeadMid + kHeadRight) + (j < kHeadLeft ? j : j + kHeadMid);
        }
    };
    static constexpr bool kIsFp8 = kOperands != OperandKind::kBf16;
    static constexpr bool kBlockSfb = kOperands == OperandKind::kFp8BlockScaled;
    // FP8 x FP4: B arrives packed (e2m1) with UE8M0 exponents per 1x32 and is converted to e4m3 in shared memory
    // (common/fp4_conversion.cuh); its per-row scale 2^e_max is promoted like recipe (1, 1, 128)'s sfb
    static constexpr bool kFp4B = kOperands == OperandKind::kFp8Fp4;
    static constexpr bool kPerRowSfb = kOperands == OperandKind::kFp8RowScaled || kFp4B;
    // A stage holds 128 bytes of K per row: 128 FP8 or 64 BF16 elements
    static constexpr uint32_t kElemBytes = kIsFp8 ? 1 : 2;
    static constexpr uint32_t BLOCK_K = 128 / kElemBytes;
    static constexpr uint32_t kMmaK = 32 / kElemBytes;  // K of one wgmma instruction
    // MN-major tiles come in boxes of 64 elements (128 bytes) x BLOCK_K rows of K
    static constexpr uint32_t kMnChunkBytes = 64 * BLOCK_K * kElemBytes;
    static constexpr uint32_t WG_M = BLOCK_M / kNumMathWarpgroups;
    static constexpr uint32_t kNumWgmmaM = WG_M / 64;
    static constexpr uint32_t kNumMathThreads = kNumMathWarpgroups * 128;
    static constexpr uint32_t kNumThreads = kNumMathThreads + 128;
    using Wgmma = cuda::std::conditional_t<kIsFp8, ptx::WgmmaFp8E4m3<BLOCK_N>, ptx::WgmmaBf16<BLOCK_N>>;
    using Out = cuda::std::conditional_t<kFp32Out, float, __nv_bfloat16>;
    using Scheduler =
        GemmScheduler<BLOCK_M, BLOCK_N, kNumGroupN, kNumMulticast, kIsMulticastOnA, kNumSplits, kGemmType, kStreamK>;
    static constexpr bool kIsKGrouped = kGemmType == GemmType::kKGroupedContiguous;
    static constexpr bool kIsMasked = kGemmType == GemmType::kMGroupedMasked;
    static constexpr bool kIsMGrouped = kGemmType != GemmType::kNormal && !kIsKGrouped;
    static constexpr bool kIsContiguous =
        kGemmType == GemmType::kMGroupedContiguous || kGemmType == GemmType::kMGroupedContiguousPsum;
    using KGroups = KGroupedParams<kMaxKGroups>;
    static constexpr uint32_t kNumAccum = Wgmma::kNumAccum;  // per thread per 64 rows
    using Accum = float[kNumWgmmaM][kNumAccum];

    // The epilogues and the partial-sum exchanges, on this kernel's accumulator fragments
    static constexpr bool kFp32TmaStore = kFp32Out && kUseTmaStore;
    using Fragment = AccumFragment<kNumWgmmaM, kNumAccum>;
    using Bf16Epilogue = Bf16TmaEpilogue<WG_M, BLOCK_N, kNumWgmmaM, kNumAccum, kStoreChunkN>;
    using Fp32Epilogue = Fp32TmaEpilogue<kFp32TmaStore, WG_M, BLOCK_N, kNumWgmmaM, kNumAccum, kNumFp32Buffers>;
    using StreamK = StreamKExchange<BLOCK_M * BLOCK_N, kNumWgmmaM, kNumAccum, kNumMathThreads>;
    using SplitK = SplitKExchange<kNumSplits, kNumWgmmaM, kNumAccum, kNumMathThreads>;
    // FP8: the promotion of each K block's partial sums; per-row sfb keeps kSfbAhead column-scale pairs in
    // registers ahead of their use (two with three math warpgroups: within 128 registers)
    static constexpr uint32_t kSfbAhead = kNumMathWarpgroups == 3 ? 2 : 4;
    using Promotion = Fp8Promotion<kNumWgmmaM, kNumAccum, BLOCK_N, kSfbAhead>;
    using StageScales = typename Promotion::StageScales;

    // Shared memory (sm90_gemm_smem, the host's size too): TMA store staging, split-K slots, the stage ring
    static constexpr Sm90GemmSmem kSmem = sm90_gemm_smem(kConfig);
    static constexpr uint32_t SMEM_D_SIZE = kSmem.d;
    // FP32 D through TMA: one barrier per staging buffer of each math warpgroup, for the TMA loads of C into it
    static constexpr uint32_t kNumCBarriers = kSmem.num_c_barriers;
    static constexpr uint32_t SMEM_A_SIZE_PER_STAGE = kSmem.a_per_stage;
    static constexpr uint32_t SMEM_B_SIZE_PER_STAGE = kSmem.b_per_stage;
    static constexpr uint32_t SMEM_SFA_SIZE_PER_STAGE = kSmem.sfa_per_stage;
    static constexpr uint32_t SMEM_SFB_SIZE_PER_STAGE = kSmem.sfb_per_stage;
    static constexpr uint32_t SMEM_B_PACKED_SIZE_PER_STAGE = kSmem.b_packed_per_stage;  // FP8 x FP4: e2m1 B
    // FP8 x FP4: producer warps 1 .. 3 convert B (the TMA thread is warp 0's lane 0)
    static constexpr uint32_t kNumConverterWarps = kFp4B ? 3 : 0;
    using Fp4Converter = Fp4ToE4m3<BLOCK_N, 96>;
    // Split-K: the slots of the accumulator pairs this CTA reduces (SplitKExchange)
    static constexpr uint32_t SMEM_SPLIT_SIZE = kSmem.split;
    static_assert(SMEM_SPLIT_SIZE == (kNumSplits == 1 ? 0 : align_up(SplitK::kSlotBytes, 1024u)),
                  "sm90_gemm_split_slot_bytes must match SplitKExchange's slots");
    static constexpr uint32_t kNumSplitBarriers = kSmem.num_split_barriers;  // split_full, split_free
    static constexpr uint32_t kClusterSize = kNumMulticast * kNumSplits;
    // (the stage ring starts after the D staging tile and the split-K slots)
    static constexpr uint32_t SMEM_HEAD_SIZE = SMEM_D_SIZE + SMEM_SPLIT_SIZE;
    static constexpr uint32_t SMEM_SIZE = kSmem.total;

    static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 192 || BLOCK_M == 256,
                  "BLOCK_M must be 64, 128, 192 (three math warpgroups) or 256");
    static_assert(kNumMathWarpgroups >= 1 && kNumMathWarpgroups <= 3, "one to three math warpgroups");
    // Register split after setmaxnreg: the producer warpgroup keeps 40; the math warpgroups share the rest of
    // the 64K-register file (only registers the CTA's own warps released can be handed out: the counts
    // must add up exactly, or setmaxnreg.inc waits forever)
    static constexpr uint32_t kProducerRegs = 40;
    static constexpr uint32_t kMathRegs = kNumMathWarpgroups == 3 ? 152 : 232;
    static_assert(WG_M % 64 == 0 && kNumWgmmaM >= 1 && kNumWgmmaM <= 2, "each math warpgroup owns 64 or 128 rows");
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N <= 256, "BLOCK_N must be a multiple of 8, at most 256");
    static_assert(!kUseTmaStore || kFp32Out || (BLOCK_N % 16 == 0 && BLOCK_N % kStoreChunkN == 0 &&
                                                (kStoreChunkN == 16 || kStoreChunkN == 32 || kStoreChunkN == 64)),
                  "BF16 TMA store: BLOCK_N must be a multiple of 16 split into 16/32/64-column chunks");
    static_assert(kNumMulticast == 1 || kNumMulticast == 2, "clusters of 1 or 2 CTAs");
    static_assert(kNumSplits == 1 || !kUseTmaStore, "split-K stores D directly, not through TMA");
    static_assert(kOperands == OperandKind::kFp8RowScaled ? kFp32Out : kBlockSfb || kFp4B ? !kFp32Out : true,
                  "recipe (1, 1, 128) writes FP32, recipe (1, 128, 128) and FP8 x FP4 BF16; BF16 GEMMs either");
    static_assert(!kFp4B || ((kNumMulticast == 1 || kIsMulticastOnA) && !kIsKGrouped),
                  "FP8 x FP4: B is not multicast (its packed tile has its own barrier); normal or m-grouped GEMMs");
    static_assert(!kFp32Out || !kUseTmaStore || BLOCK_N % Fp32Epilogue::kChunkCols == 0,
                  "FP32 TMA stores go in 32-column chunks: BLOCK_N must be a multiple of 32");
    static_assert(kFp32TmaStore ? kNumFp32Buffers >= 1 && kNumFp32Buffers <= BLOCK_N / Fp32Epilogue::kChunkCols
                                : kNumFp32Buffers == 0,
                  "FP32 D through TMA stages 1 .. BLOCK_N / 32 chunks per math warpgroup; other kernels none");
    static_assert(kIsFp8 ? !kMnMajorA && !kMnMajorB : true, "FP8 wgmma reads K-major operands only");
    static_assert(!kOverlapPromotion || kIsFp8, "only FP8 promotes partial sums (BF16 accumulates in the wgmmas)");
    static_assert(!kIsMGrouped || !kFp32Out || kNumSplits == 1, "m-grouped GEMMs are not split along K");
    static_assert(!kBatched || (kGemmType == GemmType::kMGroupedMasked && kUseTmaStore && !kFp32Out && !kMnMajorA &&
                                !kFp4B && kNumMulticast == 1 && kNumSplits == 1),
                  "batched: a masked GEMM with K-major A, no multicast or split-K, BF16 D through TMA");
    static_assert(!kKBatched || (kGemmType == GemmType::kNormal && !kIsFp8 && !kMnMajorA && !kMnMajorB &&
                                 kNumMulticast == 1),
                  "K-batched: a normal BF16 GEMM with K-major operands, no multicast");
    static_assert(!kSkipHeadMid || (kGemmType == GemmType::kNormal && kUseTmaStore && !kFp32Out && kNumSplits == 1 &&
                                    kHeadLeft % 64 == 0 && kHeadRight % 64 == 0),
                  "skip-head-mid: a normal GEMM with BF16 D through TMA, no split-K, left and right whole 64 columns");
    static_assert(!kMnMajorB || BLOCK_N % 64 == 0, "an MN-major B tile is loaded in boxes of 64 columns");
    static_assert(kIsKGrouped == (kMaxKGroups > 0) && (!kIsKGrouped || (kFp32Out && !kBlockSfb)),
                  "k-grouped GEMMs (and only they) take per-group TMA maps, with FP32 D: recipe (1, 1, 128) or BF16");
    static_assert(kNumMulticast == 1 || (kIsMulticastOnA ? BLOCK_M % 16 == 0 && !kMnMajorA : BLOCK_N % 16 == 0 && !kMnMajorB),
                  "each CTA of a pair loads half of the shared K-major tile: 8-row (1024-byte) aligned halves");
    static_assert(SMEM_A_SIZE_PER_STAGE % 1024 == 0 && SMEM_B_SIZE_PER_STAGE % 1024 == 0,
                  "stage buffers must keep 1024-byte alignment for the 128B swizzle");

    // Shared-memory map; stage buffers are found by arithmetic (a pointer array indexed by the
    // run-time stage would live in local memory).
    struct SharedStorage {
        uint8_t* base;
        __device__ __forceinline__ __nv_bfloat16* d() const { return reinterpret_cast<__nv_bfloat16*>(base); }
        __device__ __forceinline__ uint8_t* a(uint32_t stage) const {
            return base + SMEM_HEAD_SIZE + stage * SMEM_A_SIZE_PER_STAGE;
        }
        __device__ __forceinline__ uint8_t* b(uint32_t stage) const {
            return base + SMEM_HEAD_SIZE + kNumStages * SMEM_A_SIZE_PER_STAGE + stage * SMEM_B_SIZE_PER_STAGE;
        }
        __device__ __forceinline__ float* sfa(uint32_t stage) const {
            return reinterpret_cast<float*>(base + SMEM_HEAD_SIZE + kNumStages * (SMEM_A_SIZE_PER_STAGE + SMEM_B_SIZE_PER_STAGE) +
                                            stage * SMEM_SFA_SIZE_PER_STAGE);
        }
        __device__ __forceinline__ float* sfb(uint32_t stage) const {
            return reinterpret_cast<float*>(base + SMEM_HEAD_SIZE + kNumStages * (SMEM_A_SIZE_PER_STAGE + SMEM_B_SIZE_PER_STAGE +
                                            SMEM_SFA_SIZE_PER_STAGE) + stage * SMEM_SFB_SIZE_PER_STAGE);
        }
        // FP8 x FP4: the packed B tile of a stage, as TMA writes it (no swizzle: BLOCK_N rows x 64 bytes)
        __device__ __forceinline__ uint8_t* b_packed(uint32_t stage) const {
            return base + SMEM_HEAD_SIZE + kNumStages * (SMEM_A_SIZE_PER_STAGE + SMEM_B_SIZE_PER_STAGE +
                                                         SMEM_SFA_SIZE_PER_STAGE + SMEM_SFB_SIZE_PER_STAGE) +
                   stage * SMEM_B_PACKED_SIZE_PER_STAGE;
        }
        __device__ __forceinline__ uint64_t* full(uint32_t stage) const {
            return reinterpret_cast<uint64_t*>(base + SMEM_HEAD_SIZE + kNumStages * (SMEM_A_SIZE_PER_STAGE +
                                               SMEM_B_SIZE_PER_STAGE + SMEM_SFA_SIZE_PER_STAGE + SMEM_SFB_SIZE_PER_STAGE +
                                               SMEM_B_PACKED_SIZE_PER_STAGE)) + stage;
        }
        __device__ __forceinline__ uint64_t* empty(uint32_t stage) const { return full(kNumStages + stage); }
        // FP32 D (Fp32TmaEpilogue): staging buffer `buffer` (0 .. kNumFp32Buffers - 1) of math warpgroup `wg`, and
        // the barrier of C's loads into it
        __device__ __forceinline__ uint8_t* fp32_buffer(uint32_t wg, uint32_t buffer) const {
            return base + (wg * kNumFp32Buffers + buffer) * Fp32Epilogue::kChunkBytes;
        }
        __device__ __forceinline__ uint64_t* c_full(uint32_t wg, uint32_t buffer) const {
            return full(2 * kNumStages + wg * kNumFp32Buffers + buffer);
        }
        // Split-K: the slots of the pairs this CTA reduces (SplitKExchange); split_full: each CTA of the cluster
        // has stored its pairs here; split_free: each owner has read this CTA's
        __device__ __forceinline__ float2* split_slots() const { return reinterpret_cast<float2*>(base + SMEM_D_SIZE); }
        __device__ __forceinline__ uint64_t* split_full() const { return full(2 * kNumStages + kNumCBarriers); }
        __device__ __forceinline__ uint64_t* split_free() const { return full(2 * kNumStages + kNumCBarriers + 1); }
        // FP8 x FP4: the packed B tile and its exponents have landed (TMA bytes), for the converter
        __device__ __forceinline__ uint64_t* b_loaded(uint32_t stage) const {
            return full(2 * kNumStages + kNumCBarriers + kNumSplitBarriers + stage);
        }
    };

    // The sfb rows of a tile: columns [n0, n0 + boundary) use scale block `first`, the rest `last`
    // (clamped, so that a pair's phantom tile past N reads valid scales).
    struct TileSfb {
        uint32_t first, last, boundary;
        __device__ __forceinline__ TileSfb(uint32_t n_block, uint32_t shape_n) {
            const uint32_t n0 = n_block * BLOCK_N, num_blocks = ceil_div(shape_n, 128u);
            first = min(n0 / 128, num_blocks - 1);
            last = min((n0 + BLOCK_N - 1) / 128, num_blocks - 1);
            boundary = (first + 1) * 128 - n0;
        }
    };

    // The masked layout's unit count for a role's scheduler, counted by the calling warp, all lanes (GemmScheduler::
    // masked_units); 0 for the other layouts, whose schedulers do not take it.
    __device__ __forceinline__ static uint32_t masked_units(const GroupedLayout& layout, uint32_t shape_n, uint32_t lane) {
        if constexpr (kIsMasked)
            return Scheduler::template masked_units<true>(layout, shape_n, lane);
        else
            return 0;
    }

    // ---------------------------------------------------------------- sfb loader (one warp)
    __device__ __forceinline__ static void sfb_loader(const SharedStorage& s, uint32_t shape_m, uint32_t shape_n,
                                                      uint32_t num_k_blocks, const float* __restrict__ sfb,
                                                      GroupedLayout layout, uint32_t num_stream_k_tiles,
                                                      uint32_t rank, uint32_t lane) {
        Scheduler scheduler(shape_m, shape_n, num_k_blocks, rank, layout, num_stream_k_tiles,
                            masked_units(layout, shape_n, lane));
        PipelineState<kNumStages> pipe;
        GemmTile tile;
        // sfb [groups][ceil(N / 128)][K blocks]
        const uint32_t group_stride = ceil_div(shape_n, 128u) * num_k_blocks;
        while (scheduler.next(tile) || scheduler.next_stream_k(tile)) {
            const TileSfb tile_sfb(tile.n_block, shape_n);
            const float* first = sfb + tile.group * group_stride + tile_sfb.first * num_k_blocks;
            const float* last = sfb + tile.group * group_stride + tile_sfb.last * num_k_blocks;
            #pragma unroll 1
            for (uint32_t k0 = tile.k_begin; k0 < tile.k_end; k0 += 32) {
                // Lane i holds K block k0 + i
                float2 value = {0.0f, 0.0f};
                if (k0 + lane < tile.k_end)
                    value = {__ldg(first + k0 + lane), __ldg(last + k0 + lane)};
                const uint32_t count = min(32u, tile.k_end - k0);
                #pragma unroll 1
                for (uint32_t i = 0; i < count; ++i, pipe.advance()) {
                    ptx::mbarrier_wait(s.empty(pipe.stage), pipe.phase ^ 1);
                    if (lane == i) {
                        *reinterpret_cast<float2*>(s.sfb(pipe.stage)) = value;
                        ptx::mbarrier_arrive(s.full(pipe.stage));
                    }
                    __syncwarp();
                }
            }
        }
    }

    // Rows of the A box (granularity 8) and the sfa box (granularity 4): only the rows that exist when the whole
    // problem is one row block smaller than BLOCK_M, where sm90_gemm_small_m_box_may_shrink allows it. The host
    // encodes the boxes with the same rule.
    __host__ __device__ __forceinline__ static uint32_t small_m_box_rows(uint32_t shape_m, uint32_t granularity) {
        constexpr bool kMayShrink = sm90_gemm_small_m_box_may_shrink(kConfig);
        return sm90_gemm_small_m_box_rows(kMayShrink, BLOCK_M, shape_m, granularity);
    }

    // ---------------------------------------------------------------- producer (one thread)
    __device__ __forceinline__ static void producer(const SharedStorage& s, uint32_t shape_m, uint32_t shape_n,
                                                    uint32_t num_k_blocks, const TmaDescriptor* tma_a,
                                                    const TmaDescriptor* tma_b, const TmaDescriptor* tma_sfa,
                                                    const TmaDescriptor* tma_sfb, const KGroups& k_groups,
                                                    GroupedLayout layout, uint32_t num_stream_k_tiles, uint32_t rank,
                                                    uint32_t num_masked_units) {
        // Bytes landing in this CTA per stage, whoever issued them (a multicast half comes from the peer); with
        // M < BLOCK_M, the A and sfa boxes hold only the rows that exist (small_m_box_rows)
        const uint32_t a_rows = small_m_box_rows(shape_m, 8), sfa_rows = small_m_box_rows(shape_m, 4);
        // (FP8 x FP4: B and its exponents arm b_loaded instead; the converter completes full)
        const uint32_t stage_bytes = a_rows * BLOCK_K * kElemBytes + (kFp4B ? 0 : SMEM_B_SIZE_PER_STAGE) +
                                     (kIsFp8 ? sfa_rows * 4 : 0) + (kPerRowSfb && !kFp4B ? BLOCK_N * 4 : 0);
        constexpr uint16_t kBothCtas = 0b11;
        Scheduler scheduler(shape_m, shape_n, num_k_blocks, rank, layout, num_stream_k_tiles, num_masked_units);
        PipelineState<kNumStages> pipe;
        GemmTile tile;
        while (scheduler.next(tile) || scheduler.next_stream_k(tile)) {
            const uint32_t m_block = tile.m_block, n_block = tile.n_block;
            // m-grouped: B is [groups * N, K] (K-major) or [groups][K][N] (MN-major, a 3-D map); k-grouped: the
            // group's own maps of A and B, and its first row in the scale tensors [sum of K blocks, M or N]
            uint32_t b_row = (kMnMajorB ? 0 : tile.group * shape_n) + n_block * BLOCK_N, b_group = tile.group, sf_row = 0;
            // (per-row sfb of an m-grouped GEMM: [groups][K blocks][N], the group's rows one map of groups x K blocks
            // rows, as FP8 x FP4's exponent words; sfa's rows are the K blocks of all M rows)
            const uint32_t sfb_row = kIsMGrouped ? tile.group * num_k_blocks : sf_row;
            if constexpr (kIsKGrouped) {
                tma_a = &k_groups.a[tile.group];
                tma_b = &k_groups.b[tile.group];
                b_row = n_block * BLOCK_N, b_group = 0;
                sf_row = k_groups.sf_row[tile.group];
            }
            // (not unrolled: the producer runs in 40 registers)
            #pragma unroll 1
            for (uint32_t k_block = tile.k_begin; k_block < tile.k_end; ++k_block, pipe.advance()) {
                ptx::mbarrier_wait(s.empty(pipe.stage), pipe.phase ^ 1);
                uint64_t* full = s.full(pipe.stage);
                ptx::mbarrier_arrive_expect_tx(full, stage_bytes);
                if constexpr (kNumMulticast > 1 && kIsMulticastOnA) {
                    // Same m_block in both CTAs: each loads half of A's rows into both
                    constexpr uint32_t kHalf = BLOCK_M / 2;
                    ptx::tma_load_2d_multicast(s.a(pipe.stage) + rank * kHalf * 128, tma_a, full, k_block * BLOCK_K,
                                               m_block * BLOCK_M + rank * kHalf, kBothCtas);
                } else if constexpr (kKBatched) {
                    // Block k_block is block k_block % kb of batch entry k_block / kb (kb: K blocks per entry)
                    const uint32_t kb = num_k_blocks / layout.num_groups;
                    const uint32_t entry = k_block / kb, k_in_entry = (k_block % kb) * BLOCK_K;
                    ptx::tma_load_3d(s.a(pipe.stage), tma_a, full, k_in_entry, m_block * BLOCK_M, entry);
                    ptx::tma_load_3d(s.b(pipe.stage), tma_b, full, k_in_entry, b_row, entry);
                } else if constexpr (kBatched) {
                    // A [rows, groups, K] in place: the group's rows of the 3-D map (rows past the group's are
                    // outside the map: zeros)
                    ptx::tma_load_3d(s.a(pipe.stage), tma_a, full, k_block * BLOCK_K,
                                     m_block * BLOCK_M - tile.group * layout.max_m, tile.group);
                } else {
                    load_tile<BLOCK_M, kMnMajorA>(s.a(pipe.stage), tma_a, full, k_block, m_block * BLOCK_M, 0);
                }
                if constexpr (kKBatched) {
                    // (B loaded with A above)
                } else if constexpr (kFp4B) {
                    // Packed B (K in bytes: two values each) and the rows' exponent words, for the converter
                    uint64_t* loaded = s.b_loaded(pipe.stage);
                    ptx::mbarrier_arrive_expect_tx(loaded, SMEM_B_PACKED_SIZE_PER_STAGE + BLOCK_N * 4);
                    ptx::tma_load_2d(s.b_packed(pipe.stage), tma_b, loaded, k_block * (BLOCK_K / 2), b_row);
                    // (m-grouped: the exponent words are [groups][K blocks][N], one map of groups x K blocks rows)
                    ptx::tma_load_2d(s.sfb(pipe.stage), tma_sfb, loaded, n_block * BLOCK_N,
                                     tile.group * num_k_blocks + k_block);
                } else if constexpr (kNumMulticast > 1 && !kIsMulticastOnA) {
                    // Same n_block in both CTAs: each loads half of B's rows into both
                    constexpr uint32_t kHalf = BLOCK_N / 2;
                    ptx::tma_load_2d_multicast(s.b(pipe.stage) + rank * kHalf * 128, tma_b, full, k_block * BLOCK_K,
                                               b_row + rank * kHalf, kBothCtas);
                } else {
                    load_tile<BLOCK_N, kMnMajorB>(s.b(pipe.stage), tma_b, full, k_block, b_row, b_group);
                }
                if constexpr (kIsFp8)
                    ptx::tma_load_2d(s.sfa(pipe.stage), tma_sfa, full, m_block * BLOCK_M, sf_row + k_block);
                if constexpr (kPerRowSfb && !kFp4B)
                    ptx::tma_load_2d(s.sfb(pipe.stage), tma_sfb, full, n_block * BLOCK_N, sfb_row + k_block);
            }
        }
    }

    // ---------------------------------------------------------------- FP4 converter (producer warps 1 .. 3)
    // Per K block: wait for the packed B tile (b_loaded), write it as e4m3 into the stage's B tile and its row
    // scales as FP32 (Fp4ToE4m3), make the writes visible to wgmma (async proxy), and complete full with one
    // arrival per warp. The stage's buffers are free: the producer loaded it after the math released it.
    __device__ __forceinline__ static void fp4_converter(const SharedStorage& s, uint32_t shape_m, uint32_t shape_n,
                                                         uint32_t num_k_blocks, GroupedLayout layout,
                                                         uint32_t num_stream_k_tiles, uint32_t rank, uint32_t thread) {
        Scheduler scheduler(shape_m, shape_n, num_k_blocks, rank, layout, num_stream_k_tiles,
                            masked_units(layout, shape_n, thread % 32));
        PipelineState<kNumStages> pipe;
        GemmTile tile;
        while (scheduler.next(tile) || scheduler.next_stream_k(tile)) {
            #pragma unroll 1
            for (uint32_t k_block = tile.k_begin; k_block < tile.k_end; ++k_block, pipe.advance()) {
                ptx::mbarrier_wait(s.b_loaded(pipe.stage), pipe.phase);
                Fp4Converter::convert(s.b_packed(pipe.stage), s.b(pipe.stage),
                                      reinterpret_cast<uint32_t*>(s.sfb(pipe.stage)), thread);
                ptx::fence_proxy_async_smem();
                __syncwarp();
                if (thread % 32 == 0)
                    ptx::mbarrier_arrive(s.full(pipe.stage));
            }
        }
    }

    // One operand tile of kRows (M or N) x BLOCK_K into `dst`. K-major: one box of kRows rows x 128 bytes at
    // (K, row). MN-major: kRows / 64 boxes of 64 elements x BLOCK_K rows of K at (row + 64 i, K, group), one
    // after another, as the MN-major descriptor's leading byte offset expects.
    template <uint32_t kRows, bool kMnMajor>
    __device__ __forceinline__ static void load_tile(uint8_t* dst, const TmaDescriptor* map, uint64_t* full,
                                                     uint32_t k_block, uint32_t row, uint32_t group) {
        if constexpr (kMnMajor) {
            #pragma unroll
            for (uint32_t i = 0; i < kRows / 64; ++i)
                ptx::tma_load_3d(dst + i * kMnChunkBytes, map, full, row + i * 64, k_block * BLOCK_K, group);
        } else {
            ptx::tma_load_2d(dst, map, full, k_block * BLOCK_K, row);
        }
    }

    // ---------------------------------------------------------------- math warpgroups: one K block's steps
    template <typename Registers>
    __device__ __forceinline__ static void fence_registers(Registers& regs) {
        #pragma unroll
        for (uint32_t im = 0; im < kNumWgmmaM; ++im)
            #pragma unroll
            for (uint32_t i = 0; i < kNumAccum; ++i)
                ptx::wgmma_fence_operand(regs[im][i]);
    }

    __device__ __forceinline__ static StageScales wait_and_read_scales(const SharedStorage& s,
                                                                       const PipelineState<kNumStages>& at,
                                                                       uint32_t wg_idx, uint32_t warp_in_wg,
                                                                       uint32_t lane) {
        ptx::mbarrier_wait(s.full(at.stage), at.phase);
        StageScales out;
        out.sfb = kPerRowSfb ? float2{0.0f, 0.0f} : *reinterpret_cast<const float2*>(s.sfb(at.stage));
        #pragma unroll
        for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
            const uint32_t rows = wg_idx * WG_M;
            out.sfa[im][0] = s.sfa(at.stage)[rows + accum_fragment_row(im, 0, warp_in_wg, lane)];
            out.sfa[im][1] = s.sfa(at.stage)[rows + accum_fragment_row(im, 1, warp_in_wg, lane)];
        }
        return out;
    }

    // Descriptors of tiles as the producer loads them (see load_tile), and the byte step of one wgmma's K
    // inside them: along a 128-byte row (K-major) or 16 rows of K further (MN-major).
    template <bool kMnMajor>
    __device__ __forceinline__ static uint64_t make_desc(const void* smem) {
        if constexpr (kMnMajor)
            return ptx::make_smem_desc_mn_major_sw128<kMnChunkBytes>(smem);
        else
            return ptx::make_smem_desc_k_major_sw128(smem);
    }
    template <bool kMnMajor>
    static constexpr uint32_t kMmaKStepBytes = kMnMajor ? kMmaK * 128 : kMmaK * kElemBytes;

    // regs (+)= A_slice (64 x BLOCK_K) * B_tile^T (BLOCK_K x BLOCK_N) per 64-row slice, in BLOCK_K / kMmaK
    // steps: one committed wgmma group, not waited for. kAccumulate: add to regs (else overwrite them, FP8's
    // per-K-block partial sums). `desc_a` / `desc_b`: descriptors of this warpgroup's rows of A and of B in
    // stage 0 (a 64-row slice is 64 x 128 bytes further in either layout).
    template <bool kAccumulate, typename Registers>
    __device__ __forceinline__ static void issue_mma(uint64_t desc_a, uint64_t desc_b, uint32_t stage, Registers& regs) {
        fence_registers(regs);
        ptx::wgmma_fence();
        #pragma unroll
        for (uint32_t im = 0; im < kNumWgmmaM; ++im) {
            #pragma unroll
            for (uint32_t kk = 0; kk < BLOCK_K / kMmaK; ++kk) {
                const uint64_t a = ptx::advance_smem_desc(
                    desc_a, stage * SMEM_A_SIZE_PER_STAGE + im * 64 * 128 + kk * kMmaKStepBytes<kMnMajorA>);
                const uint64_t b = ptx::advance_smem_desc(desc_b, stage * SMEM_B_SIZE_PER_STAGE + kk * kMmaKStepBytes<kMnMajorB>);
                if constexpr (kIsFp8)
                    Wgmma::mma(a, b, regs[im], kAccumulate || kk > 0);
                else
                    Wgmma::template mma<kMnMajorA, kMnMajorB>(a, b, regs[im], kAccumulate || kk > 0);
            }
        }
        ptx::wgmma_commit();
        fence_registers(regs);
    }

    // The stage's operands are consumed: hand it back to the producers (the peer's too, whose multicast
    // writes into this CTA's stage).
    __device__ __forceinline__ static void release_stage(const SharedStorage& s, uint32_t stage, uint32_t lane,
                                                         uint32_t rank) {
        if (lane == 0)
            ptx::mbarrier_arrive(s.empty(stage));
        if constexpr (kNumMulticast > 1) {
            if (lane == 1)
                ptx::mbarrier_arrive_cluster(s.empty(stage), rank ^ 1);
        }
    }

    // kOverlapPromotion, one K block: `current` holds the block at `pipe` (its wgmmas in flight). If kHasNext, wait
    // for the next block's stage (at `ahead`), read its scales into `next_scales` and issue its wgmmas into `next`,
    // then wait only for `current`'s group; promote `current` and release its stage. So the tensor cores run the
    // next block's wgmmas during this block's promotion, and the wgmma latency leaves the per-block chain.
    template <bool kHasNext>
    __device__ __forceinline__ static void overlapped_step(const SharedStorage& s, PipelineState<kNumStages>& pipe,
                                                           PipelineState<kNumStages>& ahead, Accum& accum,
                                                           Accum& current, Accum& next,
                                                           const StageScales& current_scales, StageScales& next_scales,
                                                           uint32_t boundary, uint64_t desc_a, uint64_t desc_b,
                                                           uint32_t wg_idx, uint32_t warp_in_wg, uint32_t lane,
                                                           uint32_t rank) {
        if constexpr (kHasNext) {
            next_scales = wait_and_read_scales(s, ahead, wg_idx, warp_in_wg, lane);
            issue_mma<false>(desc_a, desc_b, ahead.stage, next);
            ahead.advance();
            ptx::wgmma_wait<1>();
        } else {
            ptx::wgmma_wait<0>();
        }
        fence_registers(current);
        float2 sfb_ahead[kSfbAhead];
        if constexpr (kPerRowSfb)
            Promotion::load_sfb_ahead(sfb_ahead, s.sfb(pipe.stage), lane);
        promote_and_release(s, pipe.stage, accum, current, current_scales, sfb_ahead, boundary, lane, rank);
        pipe.advance();
    }

    // A K block's partial sums are complete (waited for): promote them and hand the stage back. Per-row sfb reads
    // the column scales from the stage (the first kSfbAhead pairs already in `sfb_ahead`), so it releases after
    // the promotion; the block-scaled recipe holds its scales in registers and releases first.
    template <typename Registers>
    __device__ __forceinline__ static void promote_and_release(const SharedStorage& s, uint32_t stage, Accum& accum,
                                                               const Registers& partial, const StageScales& scales,
                                                               float2 (&sfb_ahead)[kSfbAhead], uint32_t boundary,
                                                               uint32_t lane, uint32_t rank) {
        if constexpr (kPerRowSfb) {
            Promotion::promote_per_row(accum, partial, scales, sfb_ahead, s.sfb(stage), lane);
            release_stage(s, stage, lane, rank);
        } else {
            release_stage(s, stage, lane, rank);
            Promotion::promote(accum, partial, scales, boundary);
        }
    }

    // ---------------------------------------------------------------- padding rows (producer warps)
    // ensure_zero_padding inside the GEMM (m-grouped contiguous, GroupedLayout::zero_padding bit 0 set): D's padding
    // rows, which no tile writes, zeroed by the producer warpgroup's warps once their role is done (the TMA producer's
    // warp after its last load, the idle ones at once), a row per warp over the grid, in parallel with the math
    __device__ __forceinline__ static void zero_padding(void* d, uint32_t ldd, uint32_t shape_m, uint32_t shape_n,
                                                        const GroupedLayout& layout, uint32_t producer_warp,
                                                        uint32_t lane) {
        constexpr uint32_t kHalves = sizeof(Out) / 2;  // (zeroed as BF16 elements: zero is all zero bytes)
        constexpr bool kPsum = kGemmType == GemmType::kMGroupedContiguousPsum;
        const auto zero = [&](auto group_segments_only) {
            zero_padding_rows<kPsum, decltype(group_segments_only)::value>(
                static_cast<uint16_t*>(d), shape_m, shape_n * kHalves, static_cast<uint64_t>(ldd) * kHalves,
                layout.data, layout.num_groups, layout.alignment, (layout.zero_padding & 2) != 0,
                blockIdx.x * 4 + producer_warp, gridDim.x * 4, lane);
        };
        if (!kPsum && (layout.zero_padding & 4) != 0)
            zero(cuda::std::true_type{});
        else
            zero(cuda::std::false_type{});
    }

    // ---------------------------------------------------------------- math warpgroups
    __device__ __forceinline__ static void math(const SharedStorage& s, uint32_t shape_m, uint32_t shape_n,
                                                uint32_t num_k_blocks, void* __restrict__ d, uint32_t ldd,
                                                const Out* c, uint32_t ldc, const TmaDescriptor* tma_d, const TmaDescriptor* tma_c,
                                                GroupedLayout layout, const StreamKParams& stream_k, uint32_t rank) {
        const uint32_t num_stream_k_tiles = stream_k.num_tiles;
        // (through a shuffle, so that the compiler knows it is warp-uniform: the A descriptors built from it
        // then live in uniform registers, as wgmma needs them)
        const uint32_t wg_idx = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
        const uint32_t warp_in_wg = (threadIdx.x / 32) % 4;
        const uint32_t lane = threadIdx.x % 32;

        Scheduler scheduler(shape_m, shape_n, num_k_blocks, rank, layout, num_stream_k_tiles,
                            masked_units(layout, shape_n, lane));
        PipelineState<kNumStages> pipe;
        float accum[kNumWgmmaM][kNumAccum];
        float partial[kNumWgmmaM][kNumAccum];
        // (kOverlapPromotion: the next block's partial sums; otherwise unused, and no register is allocated)
        float partial_next[kNumWgmmaM][kNumAccum];
        const uint64_t desc_a = make_desc<kMnMajorA>(s.a(0) + wg_idx * WG_M * 128);
        const uint64_t desc_b = make_desc<kMnMajorB>(s.b(0));
        // FP32 D through TMA with a C: how C is added (the same for every tile), the phases of the C-load
        // barriers (bit b: staging buffer b), and the staging ring's position (see Fp32TmaEpilogue::store)
        // (m-grouped FP32 D takes no C: the host passes none)
        const CMode c_mode = kIsMGrouped ? CMode::kNone : Fp32Epilogue::c_mode(c, ldc, d, ldd);
        uint32_t c_phases = 0, fp32_ring = 0;
        uint32_t tile_count = 0;  // (split-K: the exchange barriers' phases)
        // One unit: its K loop, then its epilogue (a stream-K contribution: its partial sums to the workspace)
        const auto run_unit = [&](const GemmTile& tile) {
            const uint32_t m0 = tile.m_block * BLOCK_M + wg_idx * WG_M;
            const uint32_t n0 = tile.n_block * BLOCK_N;
            const uint32_t boundary = TileSfb(tile.n_block, shape_n).boundary;
            // C's first chunks land during the K loop
            if constexpr (kFp32TmaStore) {
                if (c_mode == CMode::kLoad && !Scheduler::is_stream_k_contribution(tile) && threadIdx.x % 128 == 0)
                    Fp32Epilogue::load_c_prefetch(s, tma_c, fp32_ring, m0, n0, tile.group, wg_idx);
            }

            #pragma unroll
            for (uint32_t im = 0; im < kNumWgmmaM; ++im)
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    accum[im][i] = 0.0f;

            if constexpr (kIsFp8 && kOverlapPromotion) {
                // Two partial buffers: block k + 1's wgmmas run while block k is promoted
                StageScales scales[2];
                PipelineState<kNumStages> ahead = pipe;  // the stage of the next block to issue
                uint32_t k_block = tile.k_begin;
                // (each step's branches end in their own promotion, and the loop is left only after a step without
                // a next block: where paths with a group in flight merge, ptxas waits for every group, C7517)
                if (k_block < tile.k_end) {
                    scales[0] = wait_and_read_scales(s, ahead, wg_idx, warp_in_wg, lane);
                    issue_mma<false>(desc_a, desc_b, ahead.stage, partial);
                    ahead.advance();
                    // (the two halves differ only in which buffer is current: written out, not as a lambda or a
                    // helper returning whether to go on, whose merged return paths bring C7517 back)
                    while (true) {
                        if (++k_block < tile.k_end) {
                            overlapped_step<true>(s, pipe, ahead, accum, partial, partial_next, scales[0], scales[1],
                                                  boundary, desc_a, desc_b, wg_idx, warp_in_wg, lane, rank);
                        } else {
                            overlapped_step<false>(s, pipe, ahead, accum, partial, partial_next, scales[0], scales[1],
                                                   boundary, desc_a, desc_b, wg_idx, warp_in_wg, lane, rank);
                            break;
                        }
                        if (++k_block < tile.k_end) {
                            overlapped_step<true>(s, pipe, ahead, accum, partial_next, partial, scales[1], scales[0],
                                                  boundary, desc_a, desc_b, wg_idx, warp_in_wg, lane, rank);
                        } else {
                            overlapped_step<false>(s, pipe, ahead, accum, partial_next, partial, scales[1], scales[0],
                                                   boundary, desc_a, desc_b, wg_idx, warp_in_wg, lane, rank);
                            break;
                        }
                    }
                }
            } else if constexpr (kIsFp8) {
                for (uint32_t k_block = tile.k_begin; k_block < tile.k_end; ++k_block, pipe.advance()) {
                    const StageScales scales = wait_and_read_scales(s, pipe, wg_idx, warp_in_wg, lane);
                    issue_mma<false>(desc_a, desc_b, pipe.stage, partial);
                    float2 sfb_ahead[kSfbAhead];
                    if constexpr (kPerRowSfb)
                        Promotion::load_sfb_ahead(sfb_ahead, s.sfb(pipe.stage), lane);
                    ptx::wgmma_wait<0>();
                    fence_registers(partial);
                    promote_and_release(s, pipe.stage, accum, partial, scales, sfb_ahead, boundary, lane, rank);
                }
            } else {
                // BF16: the wgmmas accumulate into `accum` directly. A stage is released once its wgmmas are
                // done, which wgmma.wait_group 1 tells one K block later: the next block is queued meanwhile.
                uint32_t pending = kNumStages;  // (none)
                for (uint32_t k_block = tile.k_begin; k_block < tile.k_end; ++k_block, pipe.advance()) {
                    ptx::mbarrier_wait(s.full(pipe.stage), pipe.phase);
                    issue_mma<true>(desc_a, desc_b, pipe.stage, accum);
                    ptx::wgmma_wait<1>();
                    if (pending != kNumStages)
                        release_stage(s, pending, lane, rank);
                    pending = pipe.stage;
                }
                ptx::wgmma_wait<0>();
                fence_registers(accum);
                if (pending != kNumStages)
                    release_stage(s, pending, lane, rank);
            }

            // Stream-K: a contribution goes to the workspace (no D); an owner adds the contributions first
            if constexpr (kStreamK) {
                if (Scheduler::is_stream_k_contribution(tile)) {
                    StreamK::contribute(stream_k, accum, scheduler.stream_k_tile());
                    return;
                }
                if (const uint32_t num_contributors = scheduler.stream_k_contributors(tile); num_contributors > 0)
                    StreamK::add_contributions(stream_k, accum, scheduler.stream_k_tile(), num_contributors);
            }

            if constexpr (kNumSplits > 1) {
                // The cluster's partial sums of the pairs this CTA owns, then their direct store (C read first)
                SplitK::reduce(s.split_slots(), s.split_full(), s.split_free(), accum, tile.split, tile_count);
                Fragment::template store_direct<kNumSplits>(accum, m0, n0, shape_m, shape_n, static_cast<Out*>(d), ldd,
                                                            c, ldc, warp_in_wg, lane, nullptr, 0, tile.split);
            } else if constexpr (kFp32Out && kIsMGrouped) {
                store_tile_fp32_m_grouped(s, accum, tile, m0, n0, shape_m, shape_n, static_cast<float*>(d), ldd, tma_d,
                                          layout, c_phases, fp32_ring, wg_idx, warp_in_wg, lane);
            } else if constexpr (kFp32Out) {
                // (k-grouped: D and C are [groups, M, N], each group's rows dense; otherwise group 0)
                const uint64_t group_offset = static_cast<uint64_t>(tile.group) * shape_m;
                float* d_group = static_cast<float*>(d) + group_offset * ldd;
                const float* c_group = c != nullptr ? c + group_offset * ldc : nullptr;
                if constexpr (kUseTmaStore) {
                    if (c_mode == CMode::kRegisters)
                        Fragment::add_c(accum, m0, n0, shape_m, shape_n, c_group, ldc, warp_in_wg, lane);
                    Fp32Epilogue::store(s, accum, m0, n0, tile.group, tma_d, tma_c, c_mode, c_phases, fp32_ring, wg_idx,
                                        warp_in_wg, lane);
                } else {
                    Fragment::store_direct(accum, m0, n0, shape_m, shape_n, d_group, ldd, c_group, ldc, warp_in_wg, lane);
                }
            } else if (c != nullptr) {
                // BF16 D = C + A @ B^T (dense BF16 GEMMs only)
                Fragment::store_direct(accum, m0, n0, shape_m, shape_n, static_cast<__nv_bfloat16*>(d), ldd, c, ldc,
                                       warp_in_wg, lane);
            } else {
                store_tile_bf16(s, accum, tile, m0, n0, shape_m, shape_n, static_cast<__nv_bfloat16*>(d), ldd, tma_d,
                                layout, wg_idx, warp_in_wg, lane);
            }
        };
        // Whole tiles, then (stream-K) the segments of the shared tiles: two loops, each with its own copy of the
        // unit. In one loop, ptxas no longer kept the pipeline state and the wgmma descriptors in uniform registers
        // (16 R2UR and ~60 more instructions per K block; 20 % slower on every tile, measured on the H200).
        GemmTile tile;
        for (; scheduler.next(tile); ++tile_count)
            run_unit(tile);
        if constexpr (kStreamK) {
            for (; scheduler.next_stream_k(tile); ++tile_count)
                run_unit(tile);
        }
        if constexpr (kUseTmaStore) {
            if (threadIdx.x % 128 == 0)
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
    }

    // Whether every row of the tile inside M may be written (then the TMA store, which clips only at M, is
    // used): always for normal GEMMs; for grouped ones, when the group's rows cover the block (per-row
    // layout: a segment's padding rows come after its rows, so the block's last row decides: any id there other
    // than the tile's group, -1, G or another, sends the tile to the row-by-row store).
    __device__ __forceinline__ static bool tile_fully_valid(const GemmTile& tile, uint32_t shape_m, GroupedLayout layout) {
        const uint32_t last_row = min(tile.m_block * BLOCK_M + BLOCK_M, shape_m) - 1;
        if constexpr (kGemmType == GemmType::kMGroupedContiguous)
            return contiguous_row_in_group(layout.data, last_row, tile.group);
        else if constexpr (kGemmType == GemmType::kMGroupedContiguousPsum || kGemmType == GemmType::kMGroupedMasked)
            return last_row < tile.row_end;
        else
            return true;
    }

    // ---------------------------------------------------------------- epilogues
    // BF16 D: through TMA when D's rows allow it and the tile has no padding rows, else directly.
    __device__ __forceinline__ static void store_tile_bf16(const SharedStorage& s, Accum& accum,
                                                           const GemmTile& tile, uint32_t m0, uint32_t n0,
                                                           uint32_t shape_m, uint32_t shape_n, __nv_bfloat16* d,
                                                           uint32_t ldd, const TmaDescriptor* tma_d, GroupedLayout layout,
                                                           uint32_t wg_idx, uint32_t warp_in_wg, uint32_t lane) {
        if constexpr (kSkipHeadMid) {
            // (every chunk inside one head's left or right part: its D column is its first column's)
            Bf16Epilogue::template store<false>(reinterpret_cast<uint8_t*>(s.d()), accum, m0, n0, tma_d, wg_idx,
                                                warp_in_wg, lane, 0, HeadMidColumns{});
            return;
        }
        if constexpr (kBatched) {
            // D [rows, groups, N] in place: the 3-D map's bounds clip the rows past the group's
            Bf16Epilogue::template store<true>(reinterpret_cast<uint8_t*>(s.d()), accum, m0 - tile.group * layout.max_m,
                                               n0, tma_d, wg_idx, warp_in_wg, lane, tile.group);
            return;
        }
        if constexpr (kUseTmaStore) {
            if (tile_fully_valid(tile, shape_m, layout)) {
                Bf16Epilogue::store(reinterpret_cast<uint8_t*>(s.d()), accum, m0, n0, tma_d, wg_idx, warp_in_wg, lane);
                return;
            }
        }
        Fragment::store_direct(accum, m0, n0, tile.row_end, shape_n, d, ldd, static_cast<const __nv_bfloat16*>(nullptr),
                               0, warp_in_wg, lane, kGemmType == GemmType::kMGroupedContiguous ? layout.data : nullptr,
                               tile.group);
    }

    // FP32 D of an m-grouped GEMM (no C): as BF16 D, through TMA when the tile has no padding rows (D's rows are
    // global: group 0 of the 3-D map), else directly with the per-row check.
    __device__ __forceinline__ static void store_tile_fp32_m_grouped(const SharedStorage& s, Accum& accum,
                                                                     const GemmTile& tile, uint32_t m0, uint32_t n0,
                                                                     uint32_t shape_m, uint32_t shape_n, float* d,
                                                                     uint32_t ldd, const TmaDescriptor* tma_d,
                                                                     GroupedLayout layout, uint32_t& c_phases,
                                                                     uint32_t& fp32_ring, uint32_t wg_idx,
                                                                     uint32_t warp_in_wg, uint32_t lane) {
        if constexpr (kUseTmaStore) {
            if (tile_fully_valid(tile, shape_m, layout)) {
                Fp32Epilogue::store(s, accum, m0, n0, 0, tma_d, nullptr, CMode::kNone, c_phases, fp32_ring, wg_idx,
                                    warp_in_wg, lane);
                return;
            }
        }
        Fragment::store_direct(accum, m0, n0, tile.row_end, shape_n, d, ldd, static_cast<const float*>(nullptr), 0,
                               warp_in_wg, lane, kGemmType == GemmType::kMGroupedContiguous ? layout.data : nullptr,
                               tile.group);
    }
};

template <typename Config>
__global__ void __launch_bounds__((Config::kValue.num_math_warpgroups + 1) * 128, 1)
sm90_gemm_kernel(uint32_t shape_m, uint32_t shape_n, uint32_t shape_k, const float* __restrict__ sfb,
                 void* __restrict__ d, uint32_t ldd, const void* c, uint32_t ldc, GroupedLayout grouped_layout,
                 StreamKParams stream_k, const __grid_constant__ TmaDescriptor tma_a,
                 const __grid_constant__ TmaDescriptor tma_b, const __grid_constant__ TmaDescriptor tma_sfa,
                 const __grid_constant__ TmaDescriptor tma_sfb, const __grid_constant__ TmaDescriptor tma_d,
                 const __grid_constant__ TmaDescriptor tma_c, const __grid_constant__ KGroupedParams<Config::kValue.max_k_groups> k_groups) {
    using Gemm = Sm90Gemm<Config>;
    constexpr uint32_t kNumStages = Gemm::kNumStages, kNumMathWarpgroups = Gemm::kNumMathWarpgroups;
    constexpr uint32_t kNumFp32Buffers = Gemm::kNumFp32Buffers, kNumSplits = Gemm::kNumSplits;
    constexpr uint32_t kNumMulticast = Gemm::kNumMulticast;
    constexpr bool kUseTmaStore = Gemm::kUseTmaStore;
    shape_m = Gemm::SHAPE_M != 0 ? Gemm::SHAPE_M : shape_m;
    shape_n = Gemm::SHAPE_N != 0 ? Gemm::SHAPE_N : shape_n;
    shape_k = Gemm::SHAPE_K != 0 ? Gemm::SHAPE_K : shape_k;
    // (K-batched: every batch entry's K blocks, grouped_layout.num_groups entries)
    const uint32_t num_k_blocks = ceil_div(shape_k, Gemm::BLOCK_K) * (Gemm::kKBatched ? grouped_layout.num_groups : 1);
    if constexpr (Gemm::kIsKGrouped)
        grouped_layout.k_blocks = k_groups.k_blocks;

    // Shared memory, 1024-byte aligned for the 128B swizzle
    // (offset from the shared array itself, not through an integer, so that the compiler keeps the
    // shared address space and emits LDS, not generic loads)
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + (1024 - ptx::smem_addr(smem_raw) % 1024) % 1024;
    const typename Gemm::SharedStorage storage{smem};

    // Barriers and descriptor prefetch, by the producer's first thread
    if (threadIdx.x == Gemm::kNumMathThreads) {
        ptx::prefetch_tma_descriptor(&tma_a);
        ptx::prefetch_tma_descriptor(&tma_b);
        if constexpr (Gemm::kIsFp8)
            ptx::prefetch_tma_descriptor(&tma_sfa);
        if constexpr (Gemm::kPerRowSfb)
            ptx::prefetch_tma_descriptor(&tma_sfb);
        if constexpr (kUseTmaStore)
            ptx::prefetch_tma_descriptor(&tma_d);
        if (Gemm::Fp32Epilogue::c_mode(c, ldc, d, ldd) == CMode::kLoad)
            ptx::prefetch_tma_descriptor(&tma_c);
        #pragma unroll
        for (uint32_t i = 0; i < kNumStages; ++i) {
            // the TMA producer (and the sfb loader, or the FP4 converter's warps)
            ptx::mbarrier_init(storage.full(i), Gemm::kBlockSfb ? 2 : 1 + Gemm::kNumConverterWarps);
            ptx::mbarrier_init(storage.empty(i), kNumMathWarpgroups * 4 * kNumMulticast);
        }
        if constexpr (Gemm::kNumCBarriers > 0) {
            #pragma unroll
            for (uint32_t i = 0; i < Gemm::kNumCBarriers; ++i)  // (armed by the warpgroup's leader with C's bytes)
                ptx::mbarrier_init(storage.c_full(i / kNumFp32Buffers, i % kNumFp32Buffers), 1);
        }
        if constexpr (Gemm::kFp4B) {
            #pragma unroll
            for (uint32_t i = 0; i < kNumStages; ++i)
                ptx::mbarrier_init(storage.b_loaded(i), 1);
        }
        if constexpr (kNumSplits > 1) {
            ptx::mbarrier_init(storage.split_full(), kNumSplits);  // one arrival per CTA of the cluster
            ptx::mbarrier_init(storage.split_free(), kNumSplits);
        }
        ptx::fence_barrier_init();
    }
    // The peers' barriers must be initialized before any multicast, remote arrival or remote store
    if constexpr (Gemm::kClusterSize > 1)
        ptx::cluster_sync();
    else
        __syncthreads();
    const uint32_t rank = kNumMulticast > 1 ? ptx::cluster_cta_rank() : 0;

    // Programmatic dependent launch: inputs may come from the previous kernel
    ptx::grid_dependency_wait();
    ptx::grid_dependency_launch_dependents();

    if (threadIdx.x >= Gemm::kNumMathThreads) {
        ptx::warpgroup_reg_dealloc<Gemm::kProducerRegs>();
        const uint32_t producer_warp = (threadIdx.x - Gemm::kNumMathThreads) / 32;
        // (the TMA thread's masked unit count, by its whole warp)
        uint32_t producer_masked_units = 0;
        if constexpr (Gemm::kIsMasked) {
            if (producer_warp == 0)
                producer_masked_units = Gemm::masked_units(grouped_layout, shape_n, threadIdx.x % 32);
        }
        if (threadIdx.x == Gemm::kNumMathThreads)
            Gemm::producer(storage, shape_m, shape_n, num_k_blocks, &tma_a, &tma_b, &tma_sfa, &tma_sfb, k_groups,
                           grouped_layout, stream_k.num_tiles, rank, producer_masked_units);
        else if (Gemm::kBlockSfb && producer_warp == 1)
            Gemm::sfb_loader(storage, shape_m, shape_n, num_k_blocks, sfb, grouped_layout, stream_k.num_tiles, rank,
                             threadIdx.x % 32);
        else if (Gemm::kFp4B && producer_warp >= 1)
            Gemm::fp4_converter(storage, shape_m, shape_n, num_k_blocks, grouped_layout, stream_k.num_tiles, rank,
                                threadIdx.x - Gemm::kNumMathThreads - 32);
        if constexpr (Gemm::kIsContiguous) {
            if ((grouped_layout.zero_padding & 1) != 0) {  // (off: the roles' code path as without the pass)
                __syncwarp();  // (the TMA producer's lanes wait for its one thread)
                Gemm::zero_padding(d, ldd, shape_m, shape_n, grouped_layout, producer_warp, threadIdx.x % 32);
            }
        }
    } else {
        ptx::warpgroup_reg_alloc<Gemm::kMathRegs>();
        Gemm::math(storage, shape_m, shape_n, num_k_blocks, d, ldd, static_cast<const typename Gemm::Out*>(c), ldc,
                   &tma_d, &tma_c, grouped_layout, stream_k, rank);
    }
    // No CTA may leave while a peer can still arrive on its barriers or store into its shared memory
    if constexpr (Gemm::kClusterSize > 1)
        ptx::cluster_sync();
}

}  // namespace deep_gemm
