// M-grouped GEMM API (MoE), FP8 and BF16: validate every input, then run the GEMM kernel in its grouped mode.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <tuple>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/sm90_gemm.hpp"
#include "../jit_kernels/impls/smxx_zero_padding.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"
#include "layout.hpp"

namespace dg::apis {

namespace detail {

// The contiguous layout tensor: int32 [M] group ids (M then a multiple of the segment alignment), or with
// use_psum_layout [G] cumulative end rows. Returns the alignment.
inline int64_t check_contiguous_layout(const at::Tensor& grouped_layout, int64_t m, int64_t num_groups,
                                       bool use_psum_layout) {
    const int64_t alignment = jit::DeviceRuntime::instance().mk_alignment();
    check_defined(grouped_layout, "grouped_layout");
    check_dtype(grouped_layout, at::kInt, "grouped_layout");
    if (use_psum_layout) {
        DG_CHECK_INPUT(grouped_layout.dim() == 1 && grouped_layout.size(0) == num_groups,
                       "grouped_layout (use_psum_layout=True) must be int32 [G] = [{}] cumulative end rows, got a {}",
                       num_groups, describe(grouped_layout));
    } else {
        DG_CHECK_INPUT(grouped_layout.dim() == 1 && grouped_layout.size(0) == m,
                       "grouped_layout must be int32 [M] = [{}], one group id per row (-1 for padding), got a {}", m,
                       describe(grouped_layout));
        DG_CHECK_INPUT(m % alignment == 0, "M = {} must be a multiple of get_mk_alignment_for_contiguous_layout() = {} "
                                           "(each group's segment starts aligned and is padded)", m, alignment);
    }
    DG_CHECK_INPUT(grouped_layout.stride(0) == 1 || grouped_layout.size(0) <= 1,
                   "grouped_layout must be contiguous, got a {}", describe(grouped_layout));
    return alignment;
}

// D [M, N] of an m-grouped GEMM (BF16, or FP32 where `d_name` says so), row-major.
inline void check_grouped_d(const at::Tensor& d, int64_t m, int64_t n, at::ScalarType dtype = at::kBFloat16,
                            const char* d_name = "d") {
    check_defined(d, "d");
    check_dim(d, 2, "d");
    check_dtype(d, dtype, d_name);
    DG_CHECK_INPUT(d.size(0) == m && d.size(1) == n, "d must be [M, N] = [{}, {}], got a {}", m, n, describe(d));
    DG_CHECK_INPUT(d.stride(1) == 1 || n <= 1, "d must be row-major (stride 1 along N), got a {}", describe(d));
}

// A's rows per group of a masked GEMM: whole 64-row blocks (BLOCK_M divides them).
inline void check_masked_rows(int64_t max_m) {
    DG_CHECK_INPUT(max_m % 64 == 0, "A's rows per group (max_m = {}) must be a multiple of 64", max_m);
}

// The operands of a contiguous m-grouped GEMM (dtypes and row-major layout already checked): A [M, K], B given as
// `b` (named `b_name`, shaped `b_shape`) and seen as the logical [G, N, K] `b_nk`, D [M, N] BF16 (or `d_dtype`,
// checked under the name `d_name`): matching K (A's,
// "`k_owner`'s K" in messages), at least one group stacked densely, sizes within int32, K positive. Returns
// (M, K, G, N).
inline std::tuple<int64_t, int64_t, int64_t, int64_t> check_contiguous_operands(
    const at::Tensor& a, const char* a_name, const char* k_owner, const at::Tensor& b, const at::Tensor& b_nk,
    const char* b_name, const char* b_shape, const at::Tensor& d, at::ScalarType d_dtype = at::kBFloat16,
    const char* d_name = "d") {
    const int64_t m = a.size(0), k = a.size(1), num_groups = b_nk.size(0), n = b_nk.size(1);
    DG_CHECK_INPUT(b_nk.size(2) == k, "{} must be {} with K = {} ({}'s K), got a {}", b_name, b_shape, k, k_owner,
                   describe(b));
    DG_CHECK_INPUT(num_groups >= 1, "{} must hold at least one group, got a {}", b_name, describe(b));
    check_groups_stacked(b, b_name);
    check_grouped_d(d, m, n, d_dtype, d_name);
    DG_CHECK_INPUT(m <= INT32_MAX && n * num_groups <= INT32_MAX && k <= INT32_MAX,
                   "M, G * N and K must each be below 2^31");
    DG_CHECK_INPUT(k > 0, "K must be positive for m-grouped GEMMs, got {} = a {}", a_name, describe(a));
    return {m, k, num_groups, n};
}

// The operands of a masked GEMM, A [G, max_m, K] and B [G, N, K] (their dtypes and K-major layout already
// checked): matching G and K, whole 64-row blocks per group, groups stacked densely, sizes within int32.
// Returns (G, max_m, K, N).
inline std::tuple<int64_t, int64_t, int64_t, int64_t> check_masked_operands(const at::Tensor& a, const char* a_name,
                                                                            const at::Tensor& b, const char* b_name) {
    const int64_t num_groups = a.size(0), max_m = a.size(1), k = a.size(2), n = b.size(1);
    DG_CHECK_INPUT(b.size(0) == num_groups && b.size(2) == k, "{} must be [G, N, K] with G = {} and K = {} ({}'s), got "
                   "a {}", b_name, num_groups, k, a_name, describe(b));
    DG_CHECK_INPUT(num_groups >= 1, "{} must hold at least one group, got a {}", a_name, describe(a));
    check_masked_rows(max_m);
    DG_CHECK_INPUT(k > 0, "K must be positive for m-grouped GEMMs, got {} = a {}", a_name, describe(a));
    check_groups_stacked(a, a_name);
    check_groups_stacked(b, b_name);
    DG_CHECK_INPUT(num_groups * max_m <= INT32_MAX && num_groups * n <= INT32_MAX && k <= INT32_MAX,
                   "G * max_m, G * N and K must each be below 2^31");
    return {num_groups, max_m, k, n};
}

// masked_m int32 [G], contiguous, and D [G, max_m, N] BF16 (or `d_dtype`, checked under the name `d_name`) with its
// groups stacked densely.
inline void check_masked(const at::Tensor& masked_m, const at::Tensor& d, int64_t num_groups, int64_t max_m, int64_t n,
                         int64_t expected_m, at::ScalarType d_dtype = at::kBFloat16, const char* d_name = "d") {
    check_defined(d, "d");
    check_dim(d, 3, "d");
    check_dtype(d, d_dtype, d_name);
    DG_CHECK_INPUT(d.size(0) == num_groups && d.size(1) == max_m && d.size(2) == n,
                   "d must be [G, max_m, N] = [{}, {}, {}], got a {}", num_groups, max_m, n, describe(d));
    DG_CHECK_INPUT(d.stride(2) == 1 && (d.stride(0) == max_m * d.stride(1) || num_groups == 1),
                   "d must be row-major with its groups stacked densely, got a {}", describe(d));
    DG_CHECK_INPUT(expected_m > 0, "expected_m must be positive (a hint of the rows per group), got {}", expected_m);
    check_defined(masked_m, "masked_m");
    check_dtype(masked_m, at::kInt, "masked_m");
    DG_CHECK_INPUT(masked_m.dim() == 1 && masked_m.size(0) == num_groups && (masked_m.stride(0) == 1 || num_groups == 1),
                   "masked_m must be a contiguous int32 [G] = [{}], got a {}", num_groups, describe(masked_m));
}

// The FP8 recipe of an m-grouped GEMM: (1, 128, 128) (B scaled per 128 x 128 block, BF16 D) or (1, 1, 128) (B scaled
// per row and 128 of K, FP32 D). Returns whether it is the per-row one.
inline bool check_m_grouped_recipe(int64_t gran_m, int64_t gran_n, int64_t gran_k) {
    DG_CHECK_INPUT(gran_m == 1 && gran_k == 128 && (gran_n == 128 || gran_n == 1),
                   "recipe must be (1, 128, 128) or (1, 1, 128) for m-grouped GEMMs on SM90, got ({}, {}, {})", gran_m,
                   gran_n, gran_k);
    return gran_n == 1;
}

// B's scales of an m-grouped FP8 GEMM: FP32 [G, ceil(N/128), ceil(K/128)] per block, or [G, N, ceil(K/128)] per row.
inline void check_grouped_sfb(const at::Tensor& sfb, bool per_row_sfb, int64_t num_groups, int64_t n, int64_t sf_k) {
    if (per_row_sfb)
        check_scales(sfb, "b[1] (sfb)", {num_groups, n, sf_k}, "[G, N, ceil(K/128)]");
    else
        check_scales(sfb, "b[1] (sfb)", {num_groups, (n + 127) / 128, sf_k}, "[G, ceil(N/128), ceil(K/128)]");
}

// Which of D's padding rows a contiguous call zeroes: with ensure_zero_padding all; without it, in the per-row layout,
// those of segments that start with a group's row. The reference's SM90 kernel stores whole 128-row (alignment)
// blocks, so there the padding rows of a group's last block come back written (zeros for zero padding rows of A),
// and its own tests compare them after ensure_zero_padding=False; ours skips padding rows (a 64-row block can be
// all padding), so it zeroes those. Segments that start with padding stay untouched, as there.
inline kernels::ZeroPadding padding_zeroing(bool ensure_zero_padding, bool use_psum_layout) {
    return ensure_zero_padding ? kernels::ZeroPadding::kAll
           : use_psum_layout   ? kernels::ZeroPadding::kNone
                               : kernels::ZeroPadding::kGroupSegments;
}

// Run the contiguous layout: A [M, K], B [G, N, K] (logical view), D [M, N]; D's padding rows zeroed as `zeroing`
// says: by the GEMM's producer warps under DG_TUNE's <family>:zero_padding_in_gemm=1 (no second launch; the
// default once it has run on a GPU), else by one small kernel after the GEMM on the same stream that writes only
// those rows (no host sync). Both zero an FP32 row as twice as many BF16 elements (zero is all zero bytes).
inline void run_contiguous(kernels::GemmArgs args, const at::Tensor& grouped_layout, bool use_psum_layout,
                           int64_t alignment, kernels::ZeroPadding zeroing) {
    args.gemm_type = use_psum_layout ? kernels::GemmType::kMGroupedContiguousPsum : kernels::GemmType::kMGroupedContiguous;
    args.grouped_layout = &grouped_layout;
    args.num_groups = static_cast<uint32_t>(args.b.size(0));
    args.grouped_alignment = static_cast<uint32_t>(alignment);
    const at::Tensor& d = args.d;
    const int64_t halves = d.element_size() / 2;  // BF16 elements per element of D
    const uint64_t n = static_cast<uint64_t>(d.size(1) * halves), ldd = static_cast<uint64_t>(d.stride(0) * halves);
    const auto family = args.operands.is_fp8() ? TuneFamily::kFp8Gemm : TuneFamily::kBf16Gemm;
    const bool zero = zeroing != kernels::ZeroPadding::kNone;
    const bool segments_only = zeroing == kernels::ZeroPadding::kGroupSegments;
    const bool in_gemm = zero && tune_settings(family).get("zero_padding_in_gemm").value_or(0) == 1;
    if (in_gemm) {
        args.zero_padding = 1u | (kernels::zero_padding_vectorized(d.data_ptr(), n, ldd) ? 2u : 0u) |
                            (segments_only ? 4u : 0u);
    }
    kernels::Sm90GemmRunner::run(args);
    if (zero && !in_gemm)
        kernels::launch_zero_padding_rows(d.device().index(), d.data_ptr(), static_cast<uint32_t>(d.size(0)),
                                          static_cast<uint32_t>(n), ldd, grouped_layout.data_ptr<int32_t>(),
                                          args.num_groups, static_cast<uint32_t>(alignment), use_psum_layout,
                                          segments_only);
}

// Run the masked layout: A [G * max_m, K], B [G, N, K] (logical view), D [G * max_m, N].
inline void run_masked(kernels::GemmArgs args, const at::Tensor& masked_m, int64_t max_m, int64_t expected_m) {
    const int64_t num_groups = args.b.size(0);
    args.gemm_type = kernels::GemmType::kMGroupedMasked;
    args.grouped_layout = &masked_m;
    args.num_groups = static_cast<uint32_t>(num_groups);
    args.grouped_alignment = kernels::masked_block_alignment(max_m);  // BLOCK_M must divide max_m
    args.max_m = static_cast<uint32_t>(max_m);
    args.config_m = kernels::masked_config_m(num_groups, expected_m, max_m);
    kernels::Sm90GemmRunner::run(args);
}

}  // namespace detail

// FP8 x FP4 (a packed FP4 B [G, N, K / 2]: csrc/apis/fp8_fp4_grouped_gemm.hpp, included below)
inline void m_grouped_fp8_fp4_gemm_nt_contiguous_packed(const at::Tensor& a, const at::Tensor& sfa_in,
                                                        const at::Tensor& b, const at::Tensor& sfb_in,
                                                        const at::Tensor& d, const at::Tensor& grouped_layout,
                                                        const Recipe& recipe, const Recipe& recipe_a,
                                                        const Recipe& recipe_b, const std::string& compiled_dims,
                                                        bool use_psum_layout, bool ensure_zero_padding);
inline void m_grouped_fp8_fp4_gemm_nt_masked_packed(const at::Tensor& a, const at::Tensor& sfa_in, const at::Tensor& b,
                                                    const at::Tensor& sfb_in, const at::Tensor& d,
                                                    const at::Tensor& masked_m, int64_t expected_m,
                                                    const Recipe& recipe, const Recipe& recipe_a,
                                                    const Recipe& recipe_b, const std::string& compiled_dims);

// D[rows of group g] = A[rows of group g] @ B[g].T for the groups (experts) whose row segments are
// concatenated in A; see the Python docstring for the layouts.
inline void m_grouped_fp8_gemm_nt_contiguous(const TensorPair& a_pair, const TensorPair& b_pair, const at::Tensor& d,
                                             const at::Tensor& grouped_layout, const Recipe& recipe,
                                             const Recipe& recipe_a, const Recipe& recipe_b,
                                             const std::string& compiled_dims, bool disable_ue8m0_cast,
                                             bool use_psum_layout, bool ensure_zero_padding,
                                             std::optional<int64_t> expected_m_for_psum_layout) {
    (void)disable_ue8m0_cast;          // SM90 takes FP32 scales
    (void)expected_m_for_psum_layout;  // the config is chosen from the total row count
    const auto& [a, sfa_in] = a_pair;
    const auto& [b, sfb_in] = b_pair;
    if (is_packed_fp4(b))
        return m_grouped_fp8_fp4_gemm_nt_contiguous_packed(a, sfa_in, b, sfb_in, d, grouped_layout, recipe, recipe_a,
                                                           recipe_b, compiled_dims, use_psum_layout,
                                                           ensure_zero_padding);
    check_fp8_operand(a, "a[0] (A)");
    check_fp8_operand(b, "b[0] (B)", 3);
    check_defined(d, "d");
    const auto [gran_m, gran_n, gran_k] = resolve_recipe(recipe, recipe_a, recipe_b, d);
    const bool per_row_sfb = detail::check_m_grouped_recipe(gran_m, gran_n, gran_k);
    const auto [m, k, num_groups, n] = detail::check_contiguous_operands(
        a, "a[0] (A)", "A", b, b, "b[0] (B)", "[G, N, K]", d, per_row_sfb ? at::kFloat : at::kBFloat16,
        per_row_sfb ? "d (recipe (1, 1, 128) writes FP32)" : "d (recipe (1, 128, 128) writes BF16)");
    const auto cdims = parse_compiled_dims(compiled_dims);

    const int64_t sf_k = (k + 127) / 128;
    check_scales(sfa_in, "a[1] (sfa)", {m, sf_k}, "[M, ceil(K/128)]");
    detail::check_grouped_sfb(sfb_in, per_row_sfb, num_groups, n, sf_k);

    const int64_t alignment = detail::check_contiguous_layout(grouped_layout, m, num_groups, use_psum_layout);
    check_output_disjoint(d, "d", {{&a, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa_in, "a[1] (sfa)"},
                                   {&sfb_in, "b[1] (sfb)"}, {&grouped_layout, "grouped_layout"}});

    // Devices last
    check_same_cuda_device(a, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"}, {&sfb_in, "b[1] (sfb)"},
                                           {&grouped_layout, "grouped_layout"}});
    check_sm90(a, "m_grouped_fp8_gemm_nt_contiguous");
    const jit::DeviceScope device_scope(a.device().index());

    if (m == 0 || n == 0)
        return;
    // (the scales as given when they are in the kernel's layout: references, no handle copies or kernels)
    at::Tensor sfa_storage, sfb_storage;
    const at::Tensor& sfa = mn_major_tma_aligned(sfa_in, sfa_storage);
    // (per row: [G][ceil(K/128)][align(N, 4)], the groups' K-block rows one after another)
    const at::Tensor& sfb = per_row_sfb              ? mn_major_tma_aligned(sfb_in, sfb_storage)
                            : sfb_in.is_contiguous() ? sfb_in
                                                     : (sfb_storage = sfb_in.contiguous());
    detail::run_contiguous({a, b, d, nullptr, &sfa, &sfb, kernels::fp8_operands(per_row_sfb), cdims.m, cdims.n,
                            cdims.k},
                           grouped_layout, use_psum_layout, alignment,
                           detail::padding_zeroing(ensure_zero_padding, use_psum_layout));
}

// For each group g, the first masked_m[g] rows: D[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g].T (MoE decode);
// masked_m stays on the device (no host sync: the call can be captured in a CUDA graph).
inline void m_grouped_fp8_gemm_nt_masked(const TensorPair& a_pair, const TensorPair& b_pair, const at::Tensor& d,
                                         const at::Tensor& masked_m, int64_t expected_m, const Recipe& recipe,
                                         const Recipe& recipe_a, const Recipe& recipe_b,
                                         const std::string& compiled_dims, bool disable_ue8m0_cast) {
    (void)disable_ue8m0_cast;  // SM90 takes FP32 scales
    const auto& [a, sfa_in] = a_pair;
    const auto& [b, sfb_in] = b_pair;
    if (is_packed_fp4(b))
        return m_grouped_fp8_fp4_gemm_nt_masked_packed(a, sfa_in, b, sfb_in, d, masked_m, expected_m, recipe, recipe_a,
                                                       recipe_b, compiled_dims);
    check_fp8_operand(a, "a[0] (A)", 3);
    check_fp8_operand(b, "b[0] (B)", 3);
    const auto [num_groups, max_m, k, n] = detail::check_masked_operands(a, "a[0] (A)", b, "b[0] (B)");
    check_defined(d, "d");
    const auto [gran_m, gran_n, gran_k] = resolve_recipe(recipe, recipe_a, recipe_b, d);
    const bool per_row_sfb = detail::check_m_grouped_recipe(gran_m, gran_n, gran_k);
    detail::check_masked(masked_m, d, num_groups, max_m, n, expected_m, per_row_sfb ? at::kFloat : at::kBFloat16,
                         per_row_sfb ? "d (recipe (1, 1, 128) writes FP32)" : "d (recipe (1, 128, 128) writes BF16)");
    const auto cdims = parse_compiled_dims(compiled_dims);

    const int64_t sf_k = (k + 127) / 128;
    check_scales(sfa_in, "a[1] (sfa)", {num_groups, max_m, sf_k}, "[G, max_m, ceil(K/128)]");
    detail::check_grouped_sfb(sfb_in, per_row_sfb, num_groups, n, sf_k);
    check_output_disjoint(d, "d", {{&a, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa_in, "a[1] (sfa)"},
                                   {&sfb_in, "b[1] (sfb)"}, {&masked_m, "masked_m"}});

    // Devices last
    check_same_cuda_device(a, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"}, {&sfb_in, "b[1] (sfb)"},
                                           {&masked_m, "masked_m"}});
    check_sm90(a, "m_grouped_fp8_gemm_nt_masked");
    const jit::DeviceScope device_scope(a.device().index());
    if (n == 0 || max_m == 0)
        return;

    // The groups flattened: A [G * max_m, K], D [G * max_m, N], sfa [G * max_m, ceil(K/128)]
    const at::Tensor a_flat = a.view({num_groups * max_m, k});
    const at::Tensor d_flat = d.view({num_groups * max_m, n});
    const at::Tensor sfa = get_mn_major_tma_aligned_tensor(sfa_in.reshape({num_groups * max_m, sf_k}));
    const at::Tensor sfb = per_row_sfb              ? get_mn_major_tma_aligned_tensor(sfb_in)
                           : sfb_in.is_contiguous() ? sfb_in
                                                    : sfb_in.contiguous();
    detail::run_masked({a_flat, b, d_flat, nullptr, &sfa, &sfb, kernels::fp8_operands(per_row_sfb), cdims.m, cdims.n, cdims.k},
                       masked_m, max_m, expected_m);
}

}  // namespace dg::apis

#include "fp8_fp4_grouped_gemm.hpp"
