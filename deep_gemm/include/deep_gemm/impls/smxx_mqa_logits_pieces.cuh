// The pre-pass of the MQA logits prefill kernel's signed head sums (any SM >= 90): for every query i, the
// vector u_i = sum_h weights[i, h] q[i, h, :] split into 4 e4m3 pieces with power-of-two scales
// (mqa::SignedSumPieces), written once to global memory, where each CTA of sm90_fp8_mqa_logits loads its
// queries' pieces by TMA with its Q tile.
// (Each CTA used to compute them itself before its first wgmma: ~1350 instructions per math warp while the tensor
// core idled, 2.5-4.5 % of every prefill row, and S_kv / C times per query: ncu's source page.)
//
// Pipeline: one warp per query (kNumThreads / 32 per CTA: the host's choice), lane l holding d in [l * D / 32, +D / 32): per head, the
// weight (broadcast load) and the lane's D / 32 e4m3 values of q[i, h, :] (one coalesced row per warp), unpacked and
// accumulated in FP32 in head order; then the split (warp max per piece) and the stores.
// Output layout, queries padded to a multiple of Q = 256 / H (a prefill math warpgroup's queries; queries past S get
// zero pieces): pieces uint8 [padded / Q * 4Q, D], the 4Q rows of warpgroup block b = i / Q at [b * 4Q, +4Q), piece p
// of query i % Q at row SignedSumPieces::row(i % Q, p) of the block (the order the kernel's wgmma columns need);
// scales FP32 [padded * 4], piece p of query i at [4i + p].
#pragma once

#include <cuda/std/type_traits>

#include <deep_gemm/common/mqa_logits.cuh>
#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/sync.cuh>

namespace deep_gemm {

template <uint32_t kNumHeads, uint32_t kHeadDim, uint32_t kNumThreads>
struct MqaLogitsPieces {
    using Pieces = mqa::SignedSumPieces<kHeadDim>;
    static constexpr uint32_t kQueriesPerBlock = 256 / kNumHeads;  // Q: one math warpgroup's queries
    static constexpr uint32_t kRowsPerBlock = kQueriesPerBlock * Pieces::kNumPieces;
    static constexpr uint32_t kQueriesPerCta = kNumThreads / 32;
    static_assert(kNumThreads % 32 == 0 && kNumThreads <= 1024, "whole warps, one query each");
    static_assert(kNumHeads == 32 || kNumHeads == 64, "the signed sums by wgmma run at H = 32 or 64");
    static_assert(kHeadDim == 64 || kHeadDim == 128, "D must be 64 or 128");
};

// q: [S, H, D] e4m3 bytes, row (i, h) at q + (i * H + h) * ld_q_row; weights: FP32 [S, H], row stride ld_weights;
// queries [0, num_padded) with num_padded a multiple of Q (the ones >= seq_len give zero pieces).
template <uint32_t kNumHeads, uint32_t kHeadDim, uint32_t kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1)
mqa_logits_pieces_kernel(const uint8_t* __restrict__ q, uint64_t ld_q_row, const float* __restrict__ weights,
                         uint64_t ld_weights, uint32_t seq_len, uint32_t num_padded, uint8_t* __restrict__ pieces,
                         float* __restrict__ piece_scales) {
    using Layout = MqaLogitsPieces<kNumHeads, kHeadDim, kNumThreads>;
    using Pieces = typename Layout::Pieces;
    constexpr uint32_t kPerLane = Pieces::kPerLane;
    using Word = cuda::std::conditional_t<kPerLane == 4, uint32_t, uint16_t>;

    const uint32_t lane = threadIdx.x % 32;
    const uint32_t query = blockIdx.x * Layout::kQueriesPerCta + threadIdx.x / 32;
    if (query >= num_padded)  // warp-uniform: the split's warp reductions see full warps
        return;

    float u[kPerLane] = {};
    if (query < seq_len) {
        const float* w = weights + static_cast<uint64_t>(query) * ld_weights;
        const uint8_t* row = q + static_cast<uint64_t>(query) * kNumHeads * ld_q_row + lane * kPerLane;
        #pragma unroll 8
        for (uint32_t h = 0; h < kNumHeads; ++h) {
            const float weight = __ldg(w + h);
            Pieces::add_weighted(u, __ldg(reinterpret_cast<const Word*>(row + h * ld_q_row)), weight);
        }
    }
    uint32_t words[Pieces::kNumPieces];
    float scales[Pieces::kNumPieces];
    Pieces::split(u, words, scales);

    const uint32_t block = query / Layout::kQueriesPerBlock, in_block = query % Layout::kQueriesPerBlock;
    #pragma unroll
    for (uint32_t p = 0; p < Pieces::kNumPieces; ++p) {
        const uint64_t out_row = static_cast<uint64_t>(block) * Layout::kRowsPerBlock + Pieces::row(in_block, p);
        *reinterpret_cast<Word*>(pieces + out_row * kHeadDim + lane * kPerLane) = static_cast<Word>(words[p]);
        if (lane == p)
            piece_scales[static_cast<uint64_t>(query) * Pieces::kNumPieces + p] = scales[p];
    }
}

}  // namespace deep_gemm
