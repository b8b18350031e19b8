// The TMA descriptors of the SM90 GEMM kernel's operands, scales and FP32 D / C, in the layouts its producer and
// epilogues expect (deep_gemm/include/deep_gemm/impls/sm90_gemm.cuh): K-major operands in boxes of one K block,
// MN-major BF16 operands in 64 x 64 boxes, FP32 D in 32-column chunks, MN-major scales per K block.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>

#include "../../jit/tma.hpp"
#include "../heuristics/sm90_gemm.hpp"

namespace dg::kernels {

struct Sm90GemmMaps {
    // The stride of dimension `dim` of `t`, between its `rows` rows of `extent` elements: a single row has no
    // meaningful stride (it may be anything), so TMA gets the row length rounded up to 16 bytes.
    static int64_t row_stride(const at::Tensor& t, int64_t dim, int64_t rows, int64_t extent) {
        const int64_t align = 16 / t.element_size();
        return rows > 1 ? t.stride(dim) : (extent + align - 1) / align * align;
    }

    // A K-major operand, `rows` rows of `k` elements `ld` elements apart: boxes of 128 bytes of K (one K block)
    // x `box_rows`, 128B-swizzled as the wgmma descriptors expect.
    static jit::CUtensorMap k_major_map(const void* base, const GemmOperands& operands, uint64_t k, uint64_t rows,
                                        uint64_t ld, uint32_t box_rows) {
        const uint32_t bytes = operands.element_bytes();
        return jit::make_tma_2d(base, bytes == 1 ? driver::CU_TENSOR_MAP_DATA_TYPE_UINT8 : driver::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                k, rows, ld * bytes, 128 / bytes, box_rows, driver::CU_TENSOR_MAP_SWIZZLE_128B);
    }

    // FP8 x FP4's packed B, `rows` rows of `k` e2m1 values (k / 2 bytes, rows `ld` bytes apart): boxes of one K
    // block (64 bytes) x `box_rows`, unswizzled, as the kernel's converter reads them.
    static jit::CUtensorMap packed_fp4_map(const void* base, uint64_t k, uint64_t rows, uint64_t ld, uint32_t box_rows) {
        return jit::make_tma_2d(base, driver::CU_TENSOR_MAP_DATA_TYPE_UINT8, k / 2, rows, ld, 64, box_rows,
                                driver::CU_TENSOR_MAP_SWIZZLE_NONE);
    }

    // An MN-major BF16 operand, `groups` x `k` rows of `mn` elements (rows `ld` elements apart, groups k x ld):
    // boxes of 64 (MN, 128 bytes) x 64 (one K block) x 1, 128B-swizzled.
    static jit::CUtensorMap mn_major_map(const void* base, uint64_t mn, uint64_t k, uint64_t ld, uint64_t groups) {
        return jit::make_tma_3d(base, driver::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, {mn, k, groups}, {ld * 2, k * ld * 2},
                                {64, 64, 1}, driver::CU_TENSOR_MAP_SWIZZLE_128B);
    }

    // An operand of a plan: A [M, K] or B [groups x N, K], K-major or (BF16) MN-major.
    static jit::CUtensorMap operand_map(const void* base, const GemmOperands& operands, bool mn_major, uint64_t k,
                                        uint64_t rows, uint64_t groups, uint64_t ld, uint32_t box_rows) {
        return mn_major ? mn_major_map(base, rows, k, ld, groups)
                        : k_major_map(base, operands, k, rows * groups, ld, box_rows);
    }

    // A batched operand or D, [rows, groups, cols] (elements of `bytes`; rows `ld` and groups `group_stride` elements
    // apart, cols contiguous): a 3-D map at (col, row, group), boxes of box_cols x box_rows x 1 (BF16 or 1-byte values).
    static jit::CUtensorMap batched_map(const void* base, uint32_t bytes, uint64_t cols, uint64_t rows, uint64_t groups,
                                        uint64_t ld, uint64_t group_stride, uint32_t box_cols, uint32_t box_rows,
                                        driver::CUtensorMapSwizzle swizzle) {
        return jit::make_tma_3d(base, bytes == 1 ? driver::CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                 : driver::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                {cols, rows, groups}, {ld * bytes, group_stride * bytes}, {box_cols, box_rows, 1}, swizzle);
    }

    // FP32 D [groups][M][N] (rows `ldd` elements apart, groups M x ldd): boxes of 32 columns (128-byte rows,
    // swizzled) x a math warpgroup's rows x 1, as the FP32 TMA epilogue stages them.
    static jit::CUtensorMap fp32_d_map(void* base, uint64_t m, uint64_t n, uint64_t ldd, uint64_t groups,
                                       const GemmConfig& c) {
        return jit::make_tma_3d(base, driver::CU_TENSOR_MAP_DATA_TYPE_FLOAT32, {n, m, groups}, {ldd * 4, m * ldd * 4},
                                {32, c.block_m / c.num_math_warpgroups, 1}, driver::CU_TENSOR_MAP_SWIZZLE_128B);
    }

    // Whether the kernel TMA-loads an FP32 C (not D itself) into its staging buffers: when TMA can address its
    // rows (mirrors Sm90Gemm::fp32_c_mode; otherwise the math threads read C from global memory).
    static bool c_loaded_by_tma(const void* c, int64_t ldc) {
        return reinterpret_cast<uintptr_t>(c) % 16 == 0 && ldc % 4 == 0;
    }

    // MN-major FP32 scales, one row of `mn` per K block, rows `row_floats` apart: boxes of `box_mn` x 1.
    static jit::CUtensorMap scale_map(const void* base, uint64_t mn, uint64_t rows, uint64_t row_floats, uint32_t box_mn) {
        return jit::make_tma_2d(base, driver::CU_TENSOR_MAP_DATA_TYPE_FLOAT32, mn, rows, row_floats * 4, box_mn, 1,
                                driver::CU_TENSOR_MAP_SWIZZLE_NONE);
    }

    // Rows of the A box (granularity 8) and the sfa box (granularity 4): the kernel's rule
    // (deep_gemm::sm90_gemm_small_m_box_rows), by which it arms the stage barrier with the bytes of these boxes.
    static uint32_t small_m_box_rows(const GemmConfig& c, uint32_t m, uint32_t granularity) {
        return deep_gemm::sm90_gemm_small_m_box_rows(deep_gemm::sm90_gemm_small_m_box_may_shrink(c.kernel_config()),
                                                     c.block_m, m, granularity);
    }
};

}  // namespace dg::kernels
