// Building TMA descriptors (CUtensorMap) for 2-D and 3-D tiles on the host.
//
// `make_tma_2d` encodes once; the GEMMs memoize descriptors per shape signature and only swap in
// the new base address with cuTensorMapReplaceAddress on later calls.
#pragma once

#include <array>
#include <cstdint>

#include "../utils/cuda_driver.hpp"
#include "../utils/exception.hpp"

namespace dg::jit {

using driver::CUtensorMap;
using driver::CUtensorMapDataType;
using driver::CUtensorMapSwizzle;

// The swizzle mode for a box whose inner extent is `inner_bytes` (0 bytes: none).
inline CUtensorMapSwizzle swizzle_for_bytes(uint32_t inner_bytes) {
    switch (inner_bytes) {
        case 0: return driver::CU_TENSOR_MAP_SWIZZLE_NONE;
        case 32: return driver::CU_TENSOR_MAP_SWIZZLE_32B;
        case 64: return driver::CU_TENSOR_MAP_SWIZZLE_64B;
        case 128: return driver::CU_TENSOR_MAP_SWIZZLE_128B;
        default: throw RuntimeError(fmt::format("TMA: no swizzle mode for {}-byte rows", inner_bytes));
    }
}

// A 2-D row-major tensor: `outer` rows of `inner` elements, `row_stride_bytes` apart; boxes of
// `box_outer` x `box_inner` elements.
inline CUtensorMap make_tma_2d(const void* base, CUtensorMapDataType dtype, uint64_t inner,
                               uint64_t outer, uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                               CUtensorMapSwizzle swizzle) {
    DG_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA: base address must be 16-byte aligned");
    DG_CHECK(row_stride_bytes % 16 == 0, "TMA: row stride {} bytes is not a multiple of 16", row_stride_bytes);
    CUtensorMap map{};
    const driver::cuuint64_t dims[2] = {inner, outer};
    const driver::cuuint64_t strides[1] = {row_stride_bytes};
    const driver::cuuint32_t box[2] = {box_inner, box_outer};
    const driver::cuuint32_t element_strides[2] = {1, 1};
    DG_CUDA_DRIVER_CHECK(driver::api().cuTensorMapEncodeTiled(
        &map, dtype, 2, const_cast<void*>(base), dims, strides, box, element_strides,
        driver::CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, driver::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

// A 3-D tensor of dims[0] (innermost) x dims[1] x dims[2] elements, dims 1 and 2 `strides_bytes` apart; boxes
// of box[0] x box[1] x box[2].
inline CUtensorMap make_tma_3d(const void* base, CUtensorMapDataType dtype, const std::array<uint64_t, 3>& dims,
                               const std::array<uint64_t, 2>& strides_bytes, const std::array<uint32_t, 3>& box,
                               CUtensorMapSwizzle swizzle) {
    DG_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA: base address must be 16-byte aligned");
    DG_CHECK(strides_bytes[0] % 16 == 0 && strides_bytes[1] % 16 == 0, "TMA: strides {} and {} bytes are not multiples "
             "of 16", strides_bytes[0], strides_bytes[1]);
    CUtensorMap map{};
    const driver::cuuint64_t global_dims[3] = {dims[0], dims[1], dims[2]};
    const driver::cuuint64_t strides[2] = {strides_bytes[0], strides_bytes[1]};
    const driver::cuuint32_t box_dims[3] = {box[0], box[1], box[2]};
    const driver::cuuint32_t element_strides[3] = {1, 1, 1};
    DG_CUDA_DRIVER_CHECK(driver::api().cuTensorMapEncodeTiled(
        &map, dtype, 3, const_cast<void*>(base), global_dims, strides, box_dims, element_strides,
        driver::CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, driver::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

inline void replace_tma_address(CUtensorMap& map, const void* base) {
    DG_CUDA_DRIVER_CHECK(driver::api().cuTensorMapReplaceAddress(&map, const_cast<void*>(base)));
}

}  // namespace dg::jit
