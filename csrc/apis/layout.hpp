// Scaling-factor layout API: TMA alignment, MN-major transposition, UE8M0 packing, and the
// per-recipe transform the GEMMs apply to their scale inputs.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/smxx_layout.hpp"
#include "../utils/tensor_checks.hpp"
#include "value_checks.hpp"

namespace dg::apis {

inline int64_t get_tma_aligned_size(int64_t x, int64_t element_size) {
    DG_CHECK_INPUT(element_size > 0 && 16 % element_size == 0,
                   "get_tma_aligned_size: element_size must divide 16 bytes, got {}", element_size);
    DG_CHECK_INPUT(x >= 0, "get_tma_aligned_size: x must be non-negative, got {}", x);
    const int64_t alignment = 16 / element_size;
    return (x + alignment - 1) / alignment * alignment;
}

// Whether `sf` ([MN, K'] or [G, MN, K']) is already MN-major with TMA-aligned MN stride.
inline bool is_mn_major_tma_aligned(const at::Tensor& sf) {
    const int64_t k = sf.size(-1);
    const int64_t aligned_mn = get_tma_aligned_size(sf.size(-2), sf.element_size());
    if (sf.stride(-2) != 1 || sf.stride(-1) != aligned_mn)
        return false;
    if (sf.dim() == 3 && sf.stride(0) != k * aligned_mn)
        return false;
    return reinterpret_cast<uintptr_t>(sf.data_ptr()) % 16 == 0;
}

namespace detail {

inline void check_sf(const at::Tensor& sf, const char* fn) {
    check_defined(sf, "sf");
    DG_CHECK_INPUT(sf.dim() == 2 || sf.dim() == 3, "{}: sf must be 2-D [MN, SF_K] or 3-D [G, MN, SF_K], got a {}", fn,
                   describe(sf));
    check_dtype(sf, at::kFloat, "sf");
    check_cuda(sf, "sf");
}

// Run `kind` over `sf` and return the [G?, MN, out_k] view of an MN-major, TMA-aligned result.
inline at::Tensor run_layout_kernel(const at::Tensor& sf, kernels::LayoutKernel kind) {
    const jit::DeviceScope device_scope(sf.device().index());
    const bool batched = sf.dim() == 3;
    const int64_t num_groups = batched ? sf.size(0) : 1;
    const int64_t mn = sf.size(-2), sf_k = sf.size(-1);
    const int64_t aligned_mn = get_tma_aligned_size(mn, 4);
    const bool pack = kind == kernels::LayoutKernel::kPackUe8m0;
    const int64_t out_k = pack ? (sf_k + 3) / 4 : sf_k;
    DG_CHECK_INPUT(mn <= UINT32_MAX / 2, "sf: MN = {} too large", mn);
    auto storage = at::empty({num_groups, out_k, aligned_mn}, sf.options().dtype(pack ? at::kInt : at::kFloat));
    if (num_groups > 0 && out_k > 0 && aligned_mn > 0)
        kernels::launch_layout_kernel(kind, sf.device().index(), sf.data_ptr<float>(), storage.data_ptr(),
                                      static_cast<uint32_t>(mn), static_cast<uint32_t>(sf_k),
                                      static_cast<uint32_t>(aligned_mn), static_cast<uint32_t>(num_groups),
                                      batched ? sf.stride(0) : 0, sf.stride(-2), sf.stride(-1));
    auto view = storage.transpose(1, 2).narrow(1, 0, mn);
    return batched ? view : view.squeeze(0);
}

}  // namespace detail

// The K-grouped packing of utils.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor on a CUDA `sf` [SF_K, MN]
// (any strides): group g's scale rows [row_start[g], row_start[g] + num_rows[g]) packed four to an int32 word, MN-major,
// into output rows from the sum of the earlier groups' ceil(num_rows / 4) on; one launch of the pack kernel per
// non-empty group, writing its rows of the output in place. Returns [sum of words, MN] int32, row stride
// get_tma_aligned_size(MN, 4) (the padding zero). The caller (the Python function) validated the ranges.
inline at::Tensor pack_ue8m0_k_grouped(const at::Tensor& sf, const std::vector<int64_t>& row_start,
                                       const std::vector<int64_t>& num_rows) {
    check_defined(sf, "sf");
    DG_CHECK_INPUT(sf.dim() == 2, "sf must be 2-D [SF_K, MN], got a {}", describe(sf));
    check_dtype(sf, at::kFloat, "sf");
    check_cuda(sf, "sf");
    DG_CHECK_INPUT(row_start.size() == num_rows.size(), "row_start and num_rows must have one entry per group, got {} "
                   "and {}", row_start.size(), num_rows.size());
    const int64_t mn = sf.size(1), aligned_mn = get_tma_aligned_size(mn, 4);
    int64_t num_words = 0;
    for (size_t g = 0; g < row_start.size(); ++g) {
        DG_CHECK_INPUT(row_start[g] >= 0 && num_rows[g] >= 0 && row_start[g] + num_rows[g] <= sf.size(0),
                       "group {}: scale rows [{}, {}) must lie inside sf's {} rows", g, row_start[g],
                       row_start[g] + num_rows[g], sf.size(0));
        num_words += (num_rows[g] + 3) / 4;
    }
    DG_CHECK_INPUT(mn <= UINT32_MAX / 2, "sf: MN = {} too large", mn);
    auto storage = at::empty({num_words, aligned_mn}, sf.options().dtype(at::kInt));  // (every word written)
    const jit::DeviceScope device_scope(sf.device().index());
    int64_t word_row = 0;
    for (size_t g = 0; g < row_start.size(); ++g) {
        if (num_rows[g] == 0 || mn == 0)
            continue;
        // group g's scales viewed as [1, MN, num_rows] (the kernel's [G, MN, SF_K] with its strides)
        kernels::launch_layout_kernel(kernels::LayoutKernel::kPackUe8m0, sf.device().index(),
                                      sf.data_ptr<float>() + row_start[g] * sf.stride(0),
                                      storage.data_ptr<int32_t>() + word_row * aligned_mn, static_cast<uint32_t>(mn),
                                      static_cast<uint32_t>(num_rows[g]), static_cast<uint32_t>(aligned_mn), 1, 0,
                                      sf.stride(1), sf.stride(0));
        word_row += (num_rows[g] + 3) / 4;
    }
    return storage.narrow(1, 0, mn);
}

// `sf` itself when it is MN-major and TMA-aligned (no copy of the handle: the GEMMs' hot path), else `storage`, set to
// the transformed copy.
inline const at::Tensor& mn_major_tma_aligned(const at::Tensor& sf, at::Tensor& storage) {
    detail::check_sf(sf, "get_mn_major_tma_aligned_tensor");
    if (is_mn_major_tma_aligned(sf))
        return sf;
    storage = detail::run_layout_kernel(sf, kernels::LayoutKernel::kTransposeSf);
    return storage;
}

inline at::Tensor get_mn_major_tma_aligned_tensor(const at::Tensor& sf) {
    at::Tensor storage;
    return mn_major_tma_aligned(sf, storage);
}

namespace detail {

// psum_layout of the scale transforms: None, or the int32 [G] cumulative end rows of an m-grouped psum layout
// (the reference's layout argument), on sf's device. Per-row scales follow the rows of A one to one, so on SM90
// the layout changes nothing in the result; it is checked so that a wrong argument still raises.
inline void check_psum_layout(const std::optional<at::Tensor>& psum_layout, const at::Tensor& sf, const char* fn) {
    if (!psum_layout.has_value())
        return;
    const at::Tensor& layout = *psum_layout;
    check_defined(layout, "psum_layout");
    check_dtype(layout, at::kInt, "psum_layout");
    DG_CHECK_INPUT(layout.dim() == 1 && layout.size(0) >= 1, "{}: psum_layout must be int32 [G] (the groups' "
                   "cumulative end rows, G >= 1), got a {}", fn, describe(layout));
    if (sf.defined())
        check_same_device(layout, sf, "psum_layout", "sf");
}

}  // namespace detail

inline at::Tensor get_mn_major_tma_aligned_packed_ue8m0_tensor(const at::Tensor& sf,
                                                               const std::optional<at::Tensor>& psum_layout) {
    detail::check_psum_layout(psum_layout, sf, "get_mn_major_tma_aligned_packed_ue8m0_tensor");
    detail::check_sf(sf, "get_mn_major_tma_aligned_packed_ue8m0_tensor");
    return detail::run_layout_kernel(sf, kernels::LayoutKernel::kPackUe8m0);
}

// FP32 scales that stand for UE8M0 exponents (1x32 scales of FP4 operands, or of an A folded to 1x128) packed four to
// an int32 along K, MN-major [(G,)][ceil(K/128)][align(rows, 4)]: their exponent bytes, as the reference casts FP32
// scales to UE8M0 (per_token_cast_to_fp4(..., use_ue8m0=True) gives powers of two; DG_DEBUG_CHECKS=1 checks that they
// are, one synchronization, off by default as every value check).
inline at::Tensor fp4_scale_words(const at::Tensor& sf, const char* name) {
    if (wants_value_check(sf)) {
        DG_CHECK_INPUT(!sf.view(at::kInt).bitwise_and(static_cast<int64_t>(0x807FFFFF)).ne(0).any().item<bool>(),
                       "{}: FP32 1x32 scales must be positive powers of two (UE8M0), got other values", name);
    }
    return get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, std::nullopt);
}

// (gran_mn, gran_k) of one operand from a 2-tuple recipe or a 3-tuple (gran_m, gran_n, gran_k).
inline std::pair<int64_t, int64_t> operand_granularity(const std::vector<int64_t>& recipe, std::optional<bool> is_sfa) {
    if (recipe.size() == 2)
        return {recipe[0], recipe[1]};
    DG_CHECK_INPUT(recipe.size() == 3, "recipe must be (gran_mn, gran_k) or (gran_m, gran_n, gran_k), got {} values",
                   recipe.size());
    DG_CHECK_INPUT(is_sfa.has_value(), "is_sfa must be given with a 3-value recipe (gran_m, gran_n, gran_k)");
    return {*is_sfa ? recipe[0] : recipe[1], recipe[2]};
}

inline at::Tensor transform_sf_into_required_layout(const at::Tensor& sf, int64_t mn, int64_t k,
                                                    const std::vector<int64_t>& recipe,
                                                    std::optional<int64_t> num_groups, std::optional<bool> is_sfa,
                                                    bool disable_ue8m0_cast,
                                                    const std::optional<at::Tensor>& psum_layout) {
    check_defined(sf, "sf");
    detail::check_psum_layout(psum_layout, sf, "transform_sf_into_required_layout");
    const auto [gran_mn, gran_k] = operand_granularity(recipe, is_sfa);
    DG_CHECK_INPUT(gran_mn == 1 || gran_mn == 128, "recipe: scale granularity along MN must be 1 or 128, got {}", gran_mn);
    DG_CHECK_INPUT(gran_k == 128 || (gran_k == 32 && gran_mn == 1),
                   "recipe: scale granularity must be (1 or 128, 128) or, for 1x32 UE8M0 scales (FP4 operands), "
                   "(1, 32) on SM90, got ({}, {})", gran_mn, gran_k);
    DG_CHECK_INPUT(mn >= 0 && k >= 0, "mn and k must be non-negative, got mn={} k={}", mn, k);
    // 1x32 scales come as FP32 [.., ceil(K/32)] or as UE8M0 bytes packed four to an int32 [.., ceil(K/128)]
    const bool packed = gran_k == 32 && sf.scalar_type() == at::kInt;
    const int64_t expected_mn = (mn + gran_mn - 1) / gran_mn;
    const int64_t expected_k = (k + (packed ? 4 : 1) * gran_k - 1) / ((packed ? 4 : 1) * gran_k);
    const bool batched = num_groups.has_value();
    DG_CHECK_INPUT(sf.dim() == (batched ? 3 : 2), "sf must be {}-D{}, got a {}", batched ? 3 : 2,
                   batched ? " [num_groups, MN, SF_K]" : " [MN, SF_K]", describe(sf));
    DG_CHECK_INPUT(sf.size(-2) == expected_mn && sf.size(-1) == expected_k && (!batched || sf.size(0) == *num_groups),
                   "sf must have shape {}[{}, {}] for mn={}, k={} and granularity ({}, {}){}, got a {}",
                   batched ? fmt::format("[{}, ...] ", *num_groups) : "", expected_mn, expected_k, mn, k, gran_mn,
                   gran_k, packed ? " as packed UE8M0 int32" : "", describe(sf));

    DG_CHECK_INPUT(sf.scalar_type() == at::kFloat || packed,
                   "sf must be float32 on SM90{}, got a {}",
                   gran_k == 32 ? " or, with 1x32 scales, packed UE8M0 int32" : " (packed UE8M0 scales: recipe (1, 32))",
                   describe(sf));
    check_cuda(sf, "sf");
    const int arch_major = jit::DeviceRuntime::instance().properties(sf.device().index()).major;
    if (arch_major != 9)
        throw NotImplementedError(fmt::format(
            "transform_sf_into_required_layout: only SM90 (Hopper) is supported, device has compute capability {}.x",
            arch_major));
    if (gran_k == 32) {
        // The FP8 x FP4 GEMMs' layout: UE8M0 words MN-major and TMA-aligned (packed words moved as FP32 bit
        // patterns); with disable_ue8m0_cast, FP32 scales stay FP32 (MN-major), which those GEMMs also take
        if (packed)
            return get_mn_major_tma_aligned_tensor(sf.view(at::kFloat)).view(at::kInt);
        return disable_ue8m0_cast ? get_mn_major_tma_aligned_tensor(sf) : fp4_scale_words(sf, "sf");
    }
    (void)disable_ue8m0_cast;  // SM90 kernels take FP32 1x128 / 128x128 scales: there is no UE8M0 cast to disable
    if (gran_mn == 1)
        return get_mn_major_tma_aligned_tensor(sf);
    return sf.contiguous();  // 128x128 blocks: read K-major by pointer
}

}  // namespace dg::apis
