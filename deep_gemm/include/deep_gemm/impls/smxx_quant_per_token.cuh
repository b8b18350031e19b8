// Per-token FP8 cast (any SM >= 90), with an optional fused SwiGLU in front: the activation quantization before an
// FP8 GEMM. Memory-bound: one read of x, one write of e4m3 values plus one scale per 1 x kGranK group.
// The FP4 mode (kFp4) writes e2m1 codes two to a byte instead (scale amax / 6; deep_gemm.utils.fp4_casts).
//
//   plain:  out[b, m, k] = e4m3(x[b, m, k] / sf[b, m, k / kGranK])
//   SwiGLU: y = silu(min(g, c)) * clamp(u, -c, c) * w[b, m]  (g = x[b, m, k], u = x[b, m, K + k]; the clamp by c and
//           the row weight w optional), then y is cast as above. silu(g) = g / (1 + expf(-g)), all in FP32, each
//           operation rounded as in the PyTorch reference (deep_gemm.utils.casts.silu_and_mul_reference).
//   Scales: amax of the group, clamped at 1e-4, / 448, UE8M0 optionally (common/fp8_cast.cuh: bit-exact with
//           deep_gemm.utils.casts). Stored FP32 or as UE8M0 bytes (byte i of an int32 word is group 4j + i), at
//           sf + b * sf_stride_batch + m * sf_stride_row + k_group * sf_stride_k (words): K-major or MN-major with a
//           TMA-aligned MN stride (the GEMMs' layout), as the host chooses the strides.
//
// Launch: grid (x: CTAs striding over one batch's chunks, y: batches), kNumThreads threads.
// Work unit: a chunk = 8 consecutive elements of one output row (one 16-byte load of BF16, two of FP32); a row has
//   num_sf_k * kGranK / 8 chunks (its last group padded with zeros past K, as the reference pads), so every group of
//   kGranK / 8 lanes lies inside one warp: the warps walk the flattened [rows, chunks] space 32 chunks at a time.
// Per warp step (two sub-steps of 32 chunks, one with SwiGLU: the loads of the step are issued first, two 16-byte
// loads per lane in flight):
//   load (16-byte __ldg; element-wise where a row is not 16-byte aligned or past K) -> optional SwiGLU
//   -> amax over the lane's 8 values -> xor-shuffle max over the group's lanes -> scale -> 8 values to e4m3
//   (cvt.rn.satfinite.e4m3x2) -> one 8-byte store; the group's first lane stores the scale.
// Masked layouts: masked_m[b] (clamped to [0, num_rows]) rows of batch b are written; the others are not touched.
// MN-major scales: the align(M, 4) - M padding rows after row M - 1 are zeroed (by that row's group leaders; not
// in masked layouts, whose last row is not written unless masked_m[b] = M).
// No shared memory, no barriers: every lane of a warp takes the same loop trips, so the shuffles see full warps.
#pragma once

#include <deep_gemm/common/fp8_cast.cuh>
#include <deep_gemm/common/types.cuh>

namespace deep_gemm {

namespace per_token_quant {

// x / (1 + e^-x) in FP32 as three rounded steps (accurate expf, an add, IEEE division): the reference computes the
// same three with three PyTorch ops. NOTES: __fadd_rn keeps the compiler from fusing the add into the last multiply
// of expf's inlined code (an FMA would round once where the reference rounds twice).
__device__ __forceinline__ float silu(float x) {
    return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}

// The SwiGLU of 8 gate and up values: optional clamp, silu(gate) * up, optional row weight (in that order).
__device__ __forceinline__ void swiglu8(float (&gate)[8], const float (&up)[8], const PerTokenQuantParams& p,
                                       float weight, bool has_weight) {
    #pragma unroll
    for (uint32_t i = 0; i < 8; ++i) {
        float g = gate[i], u = up[i];
        if (p.has_clamp) {
            // (comparisons, not fminf/fmaxf: a NaN passes through, as torch.clamp lets it)
            const float c = p.activation_clamp;
            g = g > c ? c : g;
            u = u > c ? c : (u < -c ? -c : u);
        }
        float y = silu(g) * u;
        if (has_weight)
            y = y * weight;
        gate[i] = y;
    }
}

}  // namespace per_token_quant

template <uint32_t kNumThreads, uint32_t kGranK, bool kFp32Input, bool kUe8m0, bool kPackedUe8m0, bool kSwiGLU,
          bool kAligned, bool kFp4 = false>
__global__ void __launch_bounds__(kNumThreads)
per_token_quant_kernel(const __grid_constant__ PerTokenQuantParams p) {
    constexpr uint32_t kLanesPerGroup = kGranK / 8;
    static_assert(kGranK % 8 == 0 && kLanesPerGroup <= 32 && 32 % kLanesPerGroup == 0, "a group within one warp");
    static_assert(!kPackedUe8m0 || kUe8m0, "packed scales are UE8M0");
    static_assert(kNumThreads % 32 == 0, "whole warps");
    constexpr uint32_t kElemBytes = kFp32Input ? 4 : 2;
    constexpr uint32_t kChunksPerLane = per_token_quant_chunks_per_lane(kSwiGLU);

    const uint32_t batch = blockIdx.y;
    uint32_t num_rows = p.num_rows;
    if (p.masked_m != nullptr)
        num_rows = min(num_rows, static_cast<uint32_t>(max(__ldg(p.masked_m + batch), 0)));
    const uint32_t chunks_per_row = p.num_sf_k * kLanesPerGroup;
    const uint32_t num_chunks = num_rows * chunks_per_row;  // (the host checks that it fits 32 bits)
    const uint32_t lane = threadIdx.x % 32;

    const auto* x_batch = static_cast<const uint8_t*>(p.x) + static_cast<int64_t>(batch) * p.x_stride_batch * kElemBytes;
    uint8_t* out_batch = p.out + static_cast<int64_t>(batch) * p.out_stride_batch;
    const bool has_weight = kSwiGLU && p.row_weights != nullptr;

    // One chunk after its loads: (SwiGLU), the group's amax, the scale, the values, the stores
    const auto process_chunk = [&](bool valid, uint32_t row, uint32_t col, uint32_t count, float (&v)[8],
                                   float (&up)[8], float weight) {
        if constexpr (kSwiGLU) {
            per_token_quant::swiglu8(v, up, p, weight, has_weight);
            // (padding: silu(0) * 0 * w = 0, the zeros the reference pads the group with)
        }

        // The group's amax: this lane's 8 values, then the group's lanes (xor within aligned lane groups)
        float amax = 0.0f;
        #pragma unroll
        for (uint32_t i = 0; i < 8; ++i)
            amax = fp8_cast::max_nan(amax, fabsf(v[i]));
        #pragma unroll
        for (uint32_t mask = kLanesPerGroup / 2; mask >= 1; mask /= 2)
            amax = fp8_cast::max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, mask));

        // Scale, then the values
        const float sf = fp8_cast::scale_from_amax<kUe8m0, kFp4>(amax);
        const fp8_cast::Divisor divisor = fp8_cast::divisor_of(sf);
        #pragma unroll
        for (uint32_t i = 0; i < 8; ++i)
            v[i] = fp8_cast::scaled<kUe8m0>(v[i], divisor);
        if constexpr (kFp4) {
            // 8 codes in 4 bytes (out_stride_row in bytes, K / 2; count is even, as K is)
            const uint32_t codes = fp8_cast::to_e2m1x8(v);
            uint8_t* out_ptr = out_batch + static_cast<int64_t>(row) * p.out_stride_row + col / 2;
            if (kAligned && count == 8) {
                *reinterpret_cast<uint32_t*>(out_ptr) = codes;
            } else {
                #pragma unroll
                for (uint32_t i = 0; i < 4; ++i) {
                    if (2 * i < count)
                        out_ptr[i] = static_cast<uint8_t>(codes >> (8 * i));
                }
            }
        } else {
            const uint2 packed = fp8_cast::to_e4m3x8(v);
            uint8_t* out_ptr = out_batch + static_cast<int64_t>(row) * p.out_stride_row + col;
            if (kAligned && count == 8) {
                *reinterpret_cast<uint2*>(out_ptr) = packed;
            } else {
                #pragma unroll
                for (uint32_t i = 0; i < 8; ++i) {
                    if (i < count)
                        out_ptr[i] = static_cast<uint8_t>((i < 4 ? packed.x : packed.y) >> (8 * (i % 4)));
                }
            }
        }

        // The group's first lane stores its scale
        if (valid && lane % kLanesPerGroup == 0) {
            const uint32_t k_group = col / kGranK;
            const int64_t row_offset = static_cast<int64_t>(batch) * p.sf_stride_batch + static_cast<int64_t>(row) * p.sf_stride_row;
            if constexpr (kPackedUe8m0) {
                uint8_t* word = static_cast<uint8_t*>(p.sf) + 4 * (row_offset + static_cast<int64_t>(k_group / 4) * p.sf_stride_k);
                word[k_group % 4] = fp8_cast::ue8m0_byte(sf);
                // The last group also zeroes the rest of its word (the reference pads the scales to a multiple of 4)
                if (k_group + 1 == p.num_sf_k) {
                    for (uint32_t i = k_group % 4 + 1; i < 4; ++i)
                        word[i] = 0;
                }
            } else {
                static_cast<float*>(p.sf)[row_offset + static_cast<int64_t>(k_group) * p.sf_stride_k] = sf;
            }
            // MN-major: the last row's lanes also zero the padding rows of its column (as the layout kernel does)
            if (row + 1 == p.num_rows) {
                for (uint32_t i = 1; i <= p.sf_padding_rows; ++i) {
                    auto* word = static_cast<uint32_t*>(p.sf) + row_offset + static_cast<int64_t>(i) * p.sf_stride_row +
                                 static_cast<int64_t>(kPackedUe8m0 ? k_group / 4 : k_group) * p.sf_stride_k;
                    if (!kPackedUe8m0 || k_group % 4 == 0)
                        *word = 0;
                }
            }
        }
    };

    // Step: kChunksPerLane sub-steps of 32 consecutive chunks per warp, one chunk per lane each (whole groups: a
    // row's chunk count is a multiple of the group's lanes, and every sub-step starts at a multiple of 32). All the
    // sub-steps' loads are issued before any value is used (bytes in flight)
    for (uint32_t warp_base = (blockIdx.x * kNumThreads + (threadIdx.x - lane)) * kChunksPerLane;
         warp_base < num_chunks; warp_base += gridDim.x * kNumThreads * kChunksPerLane) {
        bool valid[kChunksPerLane];
        uint32_t row[kChunksPerLane], col[kChunksPerLane], count[kChunksPerLane];
        float values[kChunksPerLane][8], up[kChunksPerLane][8], weight[kChunksPerLane];
        #pragma unroll
        for (uint32_t u = 0; u < kChunksPerLane; ++u) {
            const uint32_t chunk = warp_base + u * 32 + lane;
            valid[u] = chunk < num_chunks;
            row[u] = valid[u] ? chunk / chunks_per_row : 0;
            col[u] = valid[u] ? (chunk - row[u] * chunks_per_row) * 8 : 0;
            // Real elements of this chunk: 8, fewer at the end of a row, 0 in a group's zero padding (or past the end)
            count[u] = valid[u] && col[u] < p.num_cols ? min(8u, p.num_cols - col[u]) : 0;
            weight[u] = 0.0f;

            // Load: gate (or the values) and up, in FP32
            const uint8_t* x_row = x_batch + static_cast<int64_t>(row[u]) * p.x_stride_row * kElemBytes;
            if (kAligned && count[u] == 8)
                fp8_cast::load8<kFp32Input>(x_row + col[u] * kElemBytes, values[u]);
            else
                fp8_cast::load8_partial<kFp32Input>(x_row + col[u] * kElemBytes, count[u], values[u]);
            if constexpr (kSwiGLU) {
                const uint8_t* up_ptr = x_row + (p.num_cols + col[u]) * kElemBytes;
                if (kAligned && count[u] == 8)
                    fp8_cast::load8<kFp32Input>(up_ptr, up[u]);
                else
                    fp8_cast::load8_partial<kFp32Input>(up_ptr, count[u], up[u]);
                weight[u] = has_weight && valid[u]
                                ? __ldg(p.row_weights + static_cast<int64_t>(batch) * p.num_rows + row[u])
                                : 0.0f;
            }
        }

        #pragma unroll
        for (uint32_t u = 0; u < kChunksPerLane; ++u)
            process_chunk(valid[u], row[u], col[u], count[u], values[u], up[u], weight[u]);
    }
}

}  // namespace deep_gemm
