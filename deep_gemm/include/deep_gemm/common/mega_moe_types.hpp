// What the Mega MoE host code (the extension) and its kernels (impls/smxx_mega_moe.cuh) agree on: where each region
// of one rank's symmetric buffer lies. Every rank's buffer has the same layout (deep_gemm/mega/layout.py computes it
// once, in Python, and the extension copies the offsets into this struct), so a kernel reaches a peer's region as
// peer_base[rank] + offset. Plain C++, no CUDA header (see common/host_device_types.hpp for the convention).
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cstdint>
#endif

namespace deep_gemm {

// The route kernel keeps a histogram of every local expert in shared memory.
constexpr uint32_t kMegaMoeMaxLocalExperts = 1024;

// How the caller's tokens x are stored (and what x_sf holds).
enum MegaMoeXFormat : uint32_t {
    kMegaMoeXBf16 = 0,        // BF16, no scales
    kMegaMoeXFp8 = 1,         // e4m3 with FP32 scales per 1x128 (the SM90 FP8 x FP8 buffer)
    kMegaMoeXFp8Ue8m0x32 = 2  // e4m3 with UE8M0 scales per 1x32, four packed to an int32 (a packed_x_sf buffer)
};

// What the SwiGLU step writes for linear 2 (impls/smxx_mega_moe.cuh, step 4).
enum class MegaSwigluOut : uint32_t {
    kBf16 = 0,         // BF16 (bf16_mega_moe)
    kFp8 = 1,          // e4m3 with FP32 1x128 scales amax / 448 (fp8_mega_moe)
    kFp8Ue8m0x32 = 2   // e4m3 quantized per 1x32 with UE8M0 scales, folded to 1x128 (fp8_fp4_mega_moe)
};

// Byte offsets of the regions that peers read or write, and the dims that index them. Passed by value.
struct MegaMoeLayout {
    uint64_t num_tokens_offset;    // int32 [1]: this rank's token count T of the current call
    uint64_t x_offset;             // [max_tokens, hidden] FP8 e4m3 or BF16, row-major
    uint64_t x_sf_offset;          // [max_tokens, hidden / 128] row-major (FP8 dispatch): FP32, or int32 (x_format)
    uint64_t topk_idx_offset;      // int64 [max_tokens, num_topk]: global expert ids, -1 for none
    uint64_t topk_weights_offset;  // FP32 [max_tokens, num_topk]
    uint64_t combine_row_offset;   // int32 [max_tokens, num_topk]: written by the expert's owner: its L2 output row
    uint64_t l2_out_offset;        // BF16 [max_rows, hidden]: the expert outputs, read by the tokens' owners
    uint32_t max_tokens;           // num_max_tokens_per_rank
    uint32_t num_topk;
    uint32_t hidden;
    uint32_t num_experts;          // global E
    uint32_t num_local_experts;    // E / num_ranks: rank r owns experts [r * this, (r + 1) * this)
    uint32_t rank;
    uint32_t num_ranks;
    uint32_t x_format;             // MegaMoeXFormat
};

}  // namespace deep_gemm
