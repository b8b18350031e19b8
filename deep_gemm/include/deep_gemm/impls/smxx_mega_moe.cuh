// Mega MoE, stage 1 (any SM >= 90): the communication and element-wise kernels around the two m-grouped GEMMs.
// y[t] = sum_j L2_e(w[t, j] * SwiGLU(L1_e(x_t))), e = topk_idx[t, j], for the experts owned by any rank of the group.
// Every rank's symmetric buffer has the same layout (common/mega_moe_types.hpp); `peers[r]` is rank r's base address
// (PyTorch symmetric memory maps the peers' buffers into this process; a group of one has only its own).
//
// Pipeline of one call on rank r (the host puts a group barrier between the steps that read what peers wrote):
//   1. route   (grid: one CTA per local expert e, 512 threads): scans the top-k ids of every rank (T_s from the
//              peer's num_tokens) twice: a shared-memory histogram of all local experts gives e's first row
//              start_e = sum_{e' < e} align(count_e', alignment) (no grid-wide sync needed); then, in (rank, token,
//              slot) order, a block-wide ballot scan numbers e's entries. Writes per row its source entry
//              (src_of_row, -1 on padding rows), psum_ends[e] = start_e + count_e (the grouped GEMM's psum layout),
//              recv_stats[e] += count_e, and into the source rank's buffer combine_row[t, j] = the row.
//   2. gather  (a warp per row): copies the routed token's x row (16-byte loads from the peer) into l1_acts; FP8:
//              its 1x128 scales into l1_acts_sf, MN-major with row stride sf_stride (the GEMM's layout). x with
//              packed UE8M0 1x32 scales (a packed_x_sf buffer) is folded to 1x128 on the way (common/scale_fold.cuh:
//              each 32-group shifted by its exponent's distance to the block's largest, that largest as the FP32
//              scale), so both FP8 paths run their GEMMs on 1x128 activations.
//   3. L1      (the m-grouped contiguous GEMM, psum layout, not in this file): l1_out [rows, 2I], gate and up
//              columns interleaved in groups of 8; FP8 x FP8: FP32 (recipe (1, 1, 128): each interleaved weight row
//              scaled by its original 128 x 128 block's scale); FP8 x FP4 and BF16: BF16.
//   4. swiglu  (a warp per (row, 128 columns)): a = silu(min(g, c)) * clamp(u, -c, c) * w[t, j] in FP32 (w read from
//              the source rank), then by MegaSwigluOut: kFp8: amax over the 128 (floored at 1e-4), sf = amax / 448,
//              q = e4m3(a / sf) with satfinite rounding into l2_acts and sf into l2_acts_sf (MN-major);
//              kFp8Ue8m0x32 (FP8 x FP4): per 32 (8 lanes) sf_g = 2^ceil(log2(max(amax, 1e-4) / 448)) and
//              q = e4m3(a / sf_g), as the reference quantizes, then folded to 1x128 as in step 2; kBf16: bf16(a).
//   5. L2      (the m-grouped GEMM again): l2_out [rows, hidden] BF16, in the symmetric buffer.
//   6. combine (a CTA per own token, 256 threads, 8 columns each per step): y[t] = bf16(sum_j l2_out_s[row_tj]),
//              s the owner of expert e = topk_idx[t, j] (ids outside [0, E) are skipped: masked slots), rows read
//              from the peer s at the row it wrote in step 1; slots summed in j order (deterministic).
//   0. pre-dispatch (mega_moe_pre_dispatch_sm90, before a call; a warp per (token, 128 columns)): x's 1x128
//              block to FP8 as deep_gemm.utils.per_token_cast_to_fp8 does (amax floored at 1e-4, sf = amax / 448,
//              q = e4m3(x / sf), true divisions: the same bytes) into the buffer's x / x_sf, or, into an int32
//              x_sf, per 1x32 with UE8M0 scales packed four to a word (per_token_cast_to_fp8(x, use_ue8m0=True,
//              gran_k=32, use_packed_ue8m0=True): a packed_x_sf buffer's format); the warp of a token's
//              first block also copies its top-k ids (int32 or int64 in, int64 out) and weights (FP32, BF16 or
//              FP16 in, FP32 out, times routed_scaling_factor in FP32).
// Limits: hidden and I multiples of 128, at most kMaxLocalExperts local experts, num_max_tokens_per_rank * num_topk *
// num_ranks below 2^31. Stage 2 fuses 4 into L1's epilogue and 6 into L2's (docs/design.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <deep_gemm/common/fp8_cast.cuh>
#include <deep_gemm/common/mega_moe_types.hpp>
#include <deep_gemm/common/scale_fold.cuh>
#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

template <typename T>
__device__ __forceinline__ T* mega_region(const uint64_t* peers, uint32_t rank, uint64_t offset) {
    return reinterpret_cast<T*>(peers[rank] + offset);
}

// The local expert index of a global id, or -1 when rank `layout.rank` does not own it (or it is no valid id).
__device__ __forceinline__ int32_t mega_local_expert(const MegaMoeLayout& layout, int64_t expert) {
    const int64_t first = static_cast<int64_t>(layout.rank) * layout.num_local_experts;
    if (expert < first || expert >= first + layout.num_local_experts || expert >= layout.num_experts)
        return -1;
    return static_cast<int32_t>(expert - first);
}

__device__ __forceinline__ uint32_t mega_num_tokens(const uint64_t* peers, const MegaMoeLayout& layout, uint32_t rank) {
    const int32_t t = *mega_region<const int32_t>(peers, rank, layout.num_tokens_offset);
    return min(static_cast<uint32_t>(max(t, 0)), layout.max_tokens);
}

// ------------------------------------------------------------------------------------------------ 0. pre-dispatch
// The 1x128 FP8 quantization of 4 values per lane over a warp's 128 columns: this lane's 4 bytes and the scale.
__device__ __forceinline__ uint32_t mega_quantize_128(const float (&a)[4], float& sf) {
    float amax = 0.0f;
    #pragma unroll
    for (uint32_t k = 0; k < 4; ++k)
        amax = fmaxf(amax, fabsf(a[k]));
    #pragma unroll
    for (uint32_t mask = 16; mask > 0; mask /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
    // NOTES: true division (not a reciprocal multiply), as deep_gemm.utils.casts quantizes: same FP8 bytes.
    sf = __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f);
    uint32_t packed = 0;
    #pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
        const float q = fminf(fmaxf(__fdiv_rn(a[k], sf), -448.0f), 448.0f);
        const __nv_fp8_storage_t byte = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
        packed |= static_cast<uint32_t>(byte) << (8 * k);
    }
    return packed;
}

// The reference's 1x32 UE8M0 quantization of 4 values per lane over a warp's 128 columns (8 lanes a group): this
// lane's 4 bytes at its group's scale; `exponent` gets the group's UE8M0 byte.
__device__ __forceinline__ uint32_t mega_quantize_ue8m0_32(const float (&a)[4], uint32_t& exponent) {
    float amax = 0.0f;
    #pragma unroll
    for (uint32_t k = 0; k < 4; ++k)
        amax = fp8_cast::max_nan(amax, fabsf(a[k]));
    #pragma unroll
    for (uint32_t mask = 4; mask > 0; mask /= 2)
        amax = fp8_cast::max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
    const float sf = fp8_cast::scale_from_amax<true>(amax);
    const fp8_cast::Divisor divisor = fp8_cast::divisor_of(sf);
    exponent = fp8_cast::ue8m0_byte(sf);
    return fp8_cast::to_e4m3x2(fp8_cast::scaled<true>(a[0], divisor), fp8_cast::scaled<true>(a[1], divisor)) |
           (fp8_cast::to_e4m3x2(fp8_cast::scaled<true>(a[2], divisor), fp8_cast::scaled<true>(a[3], divisor)) << 16);
}

// The four groups' exponents of a warp's 128 columns as one packed word (group g, lanes 8g .. 8g + 7, in byte g), in
// every lane.
__device__ __forceinline__ uint32_t mega_exponent_word(uint32_t exponent) {
    uint32_t word = 0;
    #pragma unroll
    for (uint32_t g = 0; g < 4; ++g)
        word |= __shfl_sync(0xffffffffu, exponent, 8 * g) << (8 * g);
    return word;
}

template <uint32_t kNumWarps>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
mega_moe_pre_dispatch_kernel(const __nv_bfloat16* __restrict__ x, uint64_t x_stride, const void* __restrict__ topk_idx,
                             uint64_t idx_row_stride, uint64_t idx_col_stride, const void* __restrict__ topk_weights,
                             uint64_t w_row_stride, uint64_t w_col_stride, uint8_t* __restrict__ buf_x,
                             uint64_t buf_x_stride, void* __restrict__ buf_x_sf, uint64_t sf_row_stride,
                             uint64_t sf_col_stride, int64_t* __restrict__ buf_topk_idx, uint64_t buf_idx_row_stride,
                             uint64_t buf_idx_col_stride, float* __restrict__ buf_topk_weights,
                             uint64_t buf_w_row_stride, uint64_t buf_w_col_stride, uint32_t num_tokens,
                             uint32_t hidden, uint32_t num_topk, uint32_t idx_is_64, uint32_t weights_dtype,
                             float routed_scaling_factor, uint32_t sf_packed_ue8m0) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, blocks_per_row = hidden / 128;
    const uint64_t units = static_cast<uint64_t>(num_tokens) * blocks_per_row;
    for (uint64_t unit = static_cast<uint64_t>(blockIdx.x) * kNumWarps + warp; unit < units;
         unit += static_cast<uint64_t>(gridDim.x) * kNumWarps) {
        const uint32_t token = static_cast<uint32_t>(unit / blocks_per_row), block = static_cast<uint32_t>(unit % blocks_per_row);
        const uint32_t col = block * 128 + lane * 4;
        // NOTES: the host checked x's rows and pointer 8-byte aligned, buf_x's 4-byte aligned.
        const uint2 raw = *reinterpret_cast<const uint2*>(x + token * x_stride + col);
        const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw);
        float a[4];
        #pragma unroll
        for (uint32_t k = 0; k < 4; ++k)
            a[k] = __bfloat162float(v[k]);
        const uint64_t sf_index = token * sf_row_stride + block * sf_col_stride;
        uint32_t packed;
        if (sf_packed_ue8m0) {
            uint32_t exponent;
            packed = mega_quantize_ue8m0_32(a, exponent);
            const uint32_t word = mega_exponent_word(exponent);
            if (lane == 0)
                static_cast<uint32_t*>(buf_x_sf)[sf_index] = word;
        } else {
            float sf;
            packed = mega_quantize_128(a, sf);
            if (lane == 0)
                static_cast<float*>(buf_x_sf)[sf_index] = sf;
        }
        *reinterpret_cast<uint32_t*>(buf_x + token * buf_x_stride + col) = packed;
        if (block != 0)
            continue;
        for (uint32_t j = lane; j < num_topk; j += 32) {
            const uint64_t i = token * idx_row_stride + j * idx_col_stride;
            buf_topk_idx[token * buf_idx_row_stride + j * buf_idx_col_stride] =
                idx_is_64 ? static_cast<const int64_t*>(topk_idx)[i] : static_cast<const int32_t*>(topk_idx)[i];
            const uint64_t w = token * w_row_stride + j * w_col_stride;
            const float weight = weights_dtype == 0 ? static_cast<const float*>(topk_weights)[w]
                                 : weights_dtype == 1 ? __bfloat162float(static_cast<const __nv_bfloat16*>(topk_weights)[w])
                                                      : __half2float(static_cast<const __half*>(topk_weights)[w]);
            buf_topk_weights[token * buf_w_row_stride + j * buf_w_col_stride] = __fmul_rn(weight, routed_scaling_factor);
        }
    }
}

// ------------------------------------------------------------------------------------------------ 1. route
// (Every kernel here is a template, so that a rendered source instantiates exactly one: one kernel per cubin.)
template <uint32_t kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1)
mega_moe_route_kernel(const uint64_t* __restrict__ peers, const MegaMoeLayout layout, uint32_t alignment,
                      uint32_t num_rows, int32_t* __restrict__ src_of_row, int32_t* __restrict__ psum_ends,
                      int32_t* __restrict__ recv_stats) {
    constexpr uint32_t kNumWarps = kNumThreads / 32;
    __shared__ uint32_t counts[kMegaMoeMaxLocalExperts];
    __shared__ uint32_t warp_totals[kNumWarps];
    __shared__ uint32_t start_row;
    const uint32_t expert = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    // Histogram of every local expert's entries
    for (uint32_t i = threadIdx.x; i < layout.num_local_experts; i += blockDim.x)
        counts[i] = 0;
    __syncthreads();
    for (uint32_t s = 0; s < layout.num_ranks; ++s) {
        const int64_t* ids = mega_region<const int64_t>(peers, s, layout.topk_idx_offset);
        const uint32_t entries = mega_num_tokens(peers, layout, s) * layout.num_topk;
        for (uint32_t i = threadIdx.x; i < entries; i += blockDim.x) {
            const int32_t local = mega_local_expert(layout, ids[i]);
            if (local >= 0)
                atomicAdd(&counts[local], 1u);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t start = 0;
        for (uint32_t e = 0; e < expert; ++e)
            start += align_up(counts[e], alignment);
        start_row = start;
    }
    __syncthreads();
    const uint32_t start = start_row, count = counts[expert];

    // Number this expert's entries in (rank, token, slot) order: a ballot per warp, the warps' totals scanned
    uint32_t done = 0;
    for (uint32_t s = 0; s < layout.num_ranks; ++s) {
        const int64_t* ids = mega_region<const int64_t>(peers, s, layout.topk_idx_offset);
        int32_t* combine_row = mega_region<int32_t>(peers, s, layout.combine_row_offset);
        const uint32_t entries = mega_num_tokens(peers, layout, s) * layout.num_topk;
        for (uint32_t base = 0; base < entries; base += blockDim.x) {
            const uint32_t i = base + threadIdx.x;
            const bool mine = i < entries && mega_local_expert(layout, ids[i]) == static_cast<int32_t>(expert);
            const uint32_t ballot = __ballot_sync(0xffffffffu, mine);
            if (lane == 0)
                warp_totals[warp] = __popc(ballot);
            __syncthreads();
            uint32_t before = done;
            for (uint32_t w = 0; w < warp; ++w)
                before += warp_totals[w];
            if (mine) {
                const uint32_t row = start + before + __popc(ballot & ((1u << lane) - 1u));
                // NOTES: rows past num_rows (a token bound the caller broke) are dropped, never written out of
                // bounds; combine skips their slots (row -1).
                if (row < num_rows)
                    src_of_row[row] = static_cast<int32_t>((s * layout.max_tokens) * layout.num_topk + i);
                combine_row[i] = row < num_rows ? static_cast<int32_t>(row) : -1;
            }
            for (uint32_t w = 0; w < kNumWarps; ++w)
                done += warp_totals[w];
            __syncthreads();
        }
    }

    // Padding rows up to the next expert's start (the last expert: up to every row the GEMMs see)
    const uint32_t pad_end = expert + 1 == gridDim.x ? num_rows : min(start + align_up(count, alignment), num_rows);
    for (uint32_t row = start + count + threadIdx.x; row < pad_end; row += blockDim.x)
        src_of_row[row] = -1;
    if (threadIdx.x == 0) {
        psum_ends[expert] = static_cast<int32_t>(min(start + count, num_rows));
        if (recv_stats != nullptr)
            recv_stats[expert] += static_cast<int32_t>(count);
    }
}

// ------------------------------------------------------------------------------------------------ 2. gather
template <uint32_t kNumWarps>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
mega_moe_gather_kernel(const uint64_t* __restrict__ peers, const MegaMoeLayout layout, uint32_t num_rows,
                       const int32_t* __restrict__ src_of_row, uint8_t* __restrict__ l1_acts,
                       float* __restrict__ l1_acts_sf, uint32_t sf_stride) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bool fp8 = layout.x_format != kMegaMoeXBf16, packed_sf = layout.x_format == kMegaMoeXFp8Ue8m0x32;
    const uint32_t row_bytes = layout.hidden * (fp8 ? 1u : 2u), sf_cols = layout.hidden / 128;
    const uint32_t entries_per_rank = layout.max_tokens * layout.num_topk;
    for (uint32_t row = blockIdx.x * kNumWarps + warp; row < num_rows; row += gridDim.x * kNumWarps) {
        const int32_t src = src_of_row[row];
        if (src < 0)
            continue;
        const uint32_t s = static_cast<uint32_t>(src) / entries_per_rank;
        const uint32_t token = (static_cast<uint32_t>(src) % entries_per_rank) / layout.num_topk;
        // NOTES: hidden is a multiple of 128, so rows are whole 16-byte vectors at 16-byte aligned addresses.
        const uint4* from = reinterpret_cast<const uint4*>(
            mega_region<const uint8_t>(peers, s, layout.x_offset) + static_cast<uint64_t>(token) * row_bytes);
        uint4* to = reinterpret_cast<uint4*>(l1_acts + static_cast<uint64_t>(row) * row_bytes);
        if (packed_sf) {
            // Per 128-column block (a word of four exponents): lane l's 4 bytes shifted by its group's distance to
            // the block's largest exponent, which becomes the block's FP32 scale
            const uint32_t* words = mega_region<const uint32_t>(peers, s, layout.x_sf_offset) +
                                    static_cast<uint64_t>(token) * sf_cols;
            for (uint32_t c = 0; c < sf_cols; ++c) {
                const uint32_t word = words[c], e_max = scale_fold::max_exponent(word);
                const uint32_t shift = e_max - ((word >> (8 * (lane / 8))) & 0xFF);
                const uint32_t i = c * 32 + lane;  // (4-byte units)
                reinterpret_cast<uint32_t*>(to)[i] = scale_fold::shift_e4m3x4(reinterpret_cast<const uint32_t*>(from)[i], shift);
                if (lane == 0)
                    l1_acts_sf[static_cast<uint64_t>(c) * sf_stride + row] =
                        __uint_as_float(scale_fold::ue8m0_to_fp32_bits(e_max));
            }
            continue;
        }
        for (uint32_t v = lane; v < row_bytes / 16; v += 32)
            to[v] = from[v];
        if (fp8) {
            const float* sf = mega_region<const float>(peers, s, layout.x_sf_offset) + static_cast<uint64_t>(token) * sf_cols;
            for (uint32_t c = lane; c < sf_cols; c += 32)
                l1_acts_sf[static_cast<uint64_t>(c) * sf_stride + row] = sf[c];
        }
    }
}

// ------------------------------------------------------------------------------------------------ 4. swiglu
__device__ __forceinline__ float mega_silu(float g, bool fast_math) {
    return fast_math ? __fdividef(g, 1.0f + __expf(-g)) : g / (1.0f + expf(-g));
}

// l1_out [rows, 2I]: FP32 with kFp32In (the FP8 x FP8 path's L1 writes FP32), else BF16; l2_acts [rows, I] as kOut
// (header comment, step 4).
template <uint32_t kNumWarps, bool kFp32In, MegaSwigluOut kOut, bool kFastMath>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
mega_moe_swiglu_kernel(const uint64_t* __restrict__ peers, const MegaMoeLayout layout, uint32_t num_rows,
                       uint32_t intermediate, const int32_t* __restrict__ src_of_row, const void* __restrict__ l1_out,
                       void* __restrict__ l2_acts, float* __restrict__ l2_acts_sf, uint32_t sf_stride,
                       bool has_clamp, float clamp_value) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t blocks_per_row = intermediate / 128, entries_per_rank = layout.max_tokens * layout.num_topk;
    const uint64_t units = static_cast<uint64_t>(num_rows) * blocks_per_row;
    for (uint64_t unit = static_cast<uint64_t>(blockIdx.x) * kNumWarps + warp; unit < units;
         unit += static_cast<uint64_t>(gridDim.x) * kNumWarps) {
        const uint32_t row = static_cast<uint32_t>(unit / blocks_per_row), block = static_cast<uint32_t>(unit % blocks_per_row);
        const int32_t src = src_of_row[row];
        if (src < 0)
            continue;
        const uint32_t s = static_cast<uint32_t>(src) / entries_per_rank, entry = static_cast<uint32_t>(src) % entries_per_rank;
        const float weight = mega_region<const float>(peers, s, layout.topk_weights_offset)[entry];

        // This lane's 4 outputs i = block * 128 + lane * 4 + 0..3: gate column (i / 8) * 16 + i % 8, up 8 further
        const uint32_t i0 = block * 128 + lane * 4;
        const uint64_t col = static_cast<uint64_t>(row) * (2 * intermediate) + (i0 / 8) * 16 + i0 % 8;
        // (4 values each: one 16-byte load of FP32, one 8-byte load of BF16; col is a multiple of 4)
        float g[4], u[4];
        if constexpr (kFp32In) {
            const float* src = static_cast<const float*>(l1_out) + col;
            *reinterpret_cast<float4*>(g) = *reinterpret_cast<const float4*>(src);
            *reinterpret_cast<float4*>(u) = *reinterpret_cast<const float4*>(src + 8);
        } else {
            const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(l1_out) + col;
            const uint2 g_raw = *reinterpret_cast<const uint2*>(src);
            const uint2 u_raw = *reinterpret_cast<const uint2*>(src + 8);
            #pragma unroll
            for (uint32_t k = 0; k < 4; ++k) {
                g[k] = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(&g_raw)[k]);
                u[k] = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(&u_raw)[k]);
            }
        }
        float a[4];
        #pragma unroll
        for (uint32_t k = 0; k < 4; ++k) {
            float gk = g[k], uk = u[k];
            if (has_clamp) {
                gk = fminf(gk, clamp_value);
                uk = fminf(fmaxf(uk, -clamp_value), clamp_value);
            }
            a[k] = mega_silu(gk, kFastMath) * uk * weight;
        }
        const uint64_t out = static_cast<uint64_t>(row) * intermediate + i0;
        if constexpr (kOut == MegaSwigluOut::kFp8) {
            float sf;
            const uint32_t packed = mega_quantize_128(a, sf);
            *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(l2_acts) + out) = packed;
            if (lane == 0)
                l2_acts_sf[static_cast<uint64_t>(block) * sf_stride + row] = sf;
        } else if constexpr (kOut == MegaSwigluOut::kFp8Ue8m0x32) {
            uint32_t exponent;
            const uint32_t packed = mega_quantize_ue8m0_32(a, exponent);
            const uint32_t e_max = scale_fold::max_exponent(mega_exponent_word(exponent));
            *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(l2_acts) + out) =
                scale_fold::shift_e4m3x4(packed, e_max - exponent);
            if (lane == 0)
                l2_acts_sf[static_cast<uint64_t>(block) * sf_stride + row] =
                    __uint_as_float(scale_fold::ue8m0_to_fp32_bits(e_max));
        } else {
            __nv_bfloat16 b[4];
            #pragma unroll
            for (uint32_t k = 0; k < 4; ++k)
                b[k] = __float2bfloat16_rn(a[k]);
            *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(l2_acts) + out) = *reinterpret_cast<const uint2*>(b);
        }
    }
}

// ------------------------------------------------------------------------------------------------ 6. combine
template <uint32_t kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1)
mega_moe_combine_kernel(const uint64_t* __restrict__ peers, const MegaMoeLayout layout, uint32_t num_tokens,
                        __nv_bfloat16* __restrict__ y, uint64_t y_stride) {
    const int64_t* ids = mega_region<const int64_t>(peers, layout.rank, layout.topk_idx_offset);
    const int32_t* rows = mega_region<const int32_t>(peers, layout.rank, layout.combine_row_offset);
    for (uint32_t token = blockIdx.x; token < num_tokens; token += gridDim.x) {
        for (uint32_t c0 = threadIdx.x * 8; c0 < layout.hidden; c0 += kNumThreads * 8) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (uint32_t j = 0; j < layout.num_topk; ++j) {
                const int64_t expert = ids[static_cast<uint64_t>(token) * layout.num_topk + j];
                if (expert < 0 || expert >= layout.num_experts)
                    continue;
                const uint32_t owner = static_cast<uint32_t>(expert) / layout.num_local_experts;
                const int32_t row = rows[static_cast<uint64_t>(token) * layout.num_topk + j];
                if (row < 0)
                    continue;
                const __nv_bfloat16* src = mega_region<const __nv_bfloat16>(peers, owner, layout.l2_out_offset) +
                                           static_cast<uint64_t>(row) * layout.hidden + c0;
                const uint4 raw = *reinterpret_cast<const uint4*>(src);
                const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw);
                #pragma unroll
                for (uint32_t k = 0; k < 8; ++k)
                    acc[k] += __bfloat162float(v[k]);
            }
            __nv_bfloat16 out[8];
            #pragma unroll
            for (uint32_t k = 0; k < 8; ++k)
                out[k] = __float2bfloat16_rn(acc[k]);
            *reinterpret_cast<uint4*>(y + static_cast<uint64_t>(token) * y_stride + c0) = *reinterpret_cast<const uint4*>(out);
        }
    }
}

}  // namespace deep_gemm
