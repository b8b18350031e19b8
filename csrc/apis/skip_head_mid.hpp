// fp8_gemm_nt_skip_head_mid: the FP8 GEMM D = A @ B^T (recipe (1, 128, 128), BF16 D) whose output columns skip a
// middle band of every head. B's N = H * (left + right) rows are H heads of `left` then `right` rows; D has
// H * (left + mid + right) columns, and GEMM column n = h * (left + right) + j lands in D column
// h * (left + mid + right) + (j < left ? j : j + mid). The `mid` columns of every head are never written (the
// caller fills them, e.g. with RoPE parts).
//
// Served as a composition on the shared SM90 GEMM kernel: the GEMM writes a dense [M, N] BF16 scratch tensor,
// then two strided copies (PyTorch) place its left and right parts in D. This needs no alignment of left, mid or
// right (any sizes, D's columns need not be 16-byte aligned per head part), at the cost of one extra pass over
// M x N BF16 (write + read of the scratch). With mid = 0 the GEMM writes D directly. The kernel's epilogue column
// remap (GemmOperands::head_left/mid/right: each store chunk at its head part's D column) drops the scratch pass
// where left and right are whole 64-column chunks and D is TMA-addressable; it has not run on a GPU yet, so it is
// taken only under DG_TUNE's fp8_gemm:skip_head_mid_fused=1 (then the default, and the key goes).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>

#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"

namespace dg::apis {

using HeadSplits = std::tuple<int64_t, int64_t, int64_t>;

// The number of heads H that `head_splits` and B's N describe; every rule checked on the host.
inline int64_t check_head_splits(const HeadSplits& head_splits, int64_t n, const at::Tensor& d) {
    const auto [left, mid, right] = head_splits;
    DG_CHECK_INPUT(left >= 0 && mid >= 0 && right >= 0 && left + right > 0,
                   "head_splits must be (left, mid, right) with non-negative sizes and left + right > 0, got ({}, {}, {})",
                   left, mid, right);
    DG_CHECK_INPUT(n % (left + right) == 0,
                   "head_splits: B's N = {} must be a multiple of left + right = {} (H heads of left + right rows), "
                   "got head_splits ({}, {}, {})", n, left + right, left, mid, right);
    const int64_t num_heads = n / (left + right);
    check_defined(d, "d");
    check_dim(d, 2, "d");
    check_dtype(d, at::kBFloat16, "d (recipe (1, 128, 128) writes BF16)");
    const int64_t d_cols = num_heads * (left + mid + right);
    DG_CHECK_INPUT(d.size(1) == d_cols, "d must have H * (left + mid + right) = {} * {} = {} columns for head_splits "
                   "({}, {}, {}) and B's N = {}, got a {}", num_heads, left + mid + right, d_cols, left, mid, right, n,
                   describe(d));
    DG_CHECK_INPUT(d.stride(1) == 1 || d_cols <= 1, "d must be row-major (stride 1 along its columns), got a {}",
                   describe(d));
    return num_heads;
}

inline void fp8_gemm_nt_skip_head_mid(const TensorPair& a, const TensorPair& b, const at::Tensor& d,
                                      const HeadSplits& head_splits, const Recipe& recipe,
                                      const std::string& compiled_dims, bool disable_ue8m0_cast) {
    const auto& [a_data, sfa] = a;
    const auto& [b_data, sfb] = b;
    check_fp8_operand(a_data, "a[0] (A)");
    check_fp8_operand(b_data, "b[0] (B)");
    const int64_t m = a_data.size(0), n = b_data.size(0);
    const int64_t num_heads = check_head_splits(head_splits, n, d);
    DG_CHECK_INPUT(d.size(0) == m, "d must have M = {} rows (A's), got a {}", m, describe(d));
    if (recipe.has_value())
        DG_CHECK_INPUT(recipe->size() == 3 && (*recipe)[0] == 1 && (*recipe)[1] == 128 && (*recipe)[2] == 128,
                       "recipe must be None or (1, 128, 128) (SM90 serves skip-head-mid with BF16 d), got ({})",
                       fmt::join(*recipe, ", "));
    // The rest of the GEMM's rules (K, scales, compiled_dims) on D's first N columns, standing for the [M, N] GEMM
    // output; the whole of D must not overlap an input
    const at::Tensor d_gemm_shape = d.narrow(1, 0, std::min<int64_t>(n, d.size(1)));
    check_fp8_gemm_nt_host(a_data, sfa, b_data, sfb, d_gemm_shape, std::nullopt, recipe, std::nullopt, std::nullopt,
                           compiled_dims);
    check_output_disjoint(d, "d", {{&a_data, "a[0] (A)"}, {&b_data, "b[0] (B)"}, {&sfa, "a[1] (sfa)"},
                                   {&sfb, "b[1] (sfb)"}});
    check_same_cuda_device(a_data, "a[0] (A)", {{&b_data, "b[0] (B)"}, {&d, "d"}, {&sfa, "a[1] (sfa)"},
                                                {&sfb, "b[1] (sfb)"}});
    check_sm90(a_data, "fp8_gemm_nt_skip_head_mid");
    const jit::DeviceScope device_scope(a_data.device().index());

    const auto [left, mid, right] = head_splits;
    if (m == 0 || n == 0)
        return;
    if (mid == 0)  // (D's columns are the GEMM's)
        return fp8_gemm_nt(a_data, sfa, b_data, sfb, d, std::nullopt, recipe, std::nullopt, std::nullopt,
                           compiled_dims, disable_ue8m0_cast);
    const int64_t elem = d.element_size();
    // (K = 0 takes the composition, whose GEMM writes the zeros)
    if (tune_settings(TuneFamily::kFp8Gemm).get("skip_head_mid_fused").value_or(0) == 1 && a_data.size(1) > 0 &&
        left % 64 == 0 &&
        right % 64 == 0 && (d.stride(0) * elem) % 16 == 0 && reinterpret_cast<uintptr_t>(d.data_ptr()) % 16 == 0 &&
        (d.stride(1) == 1 || d.size(1) <= 1)) {
        const auto cdims = parse_compiled_dims(compiled_dims);
        at::Tensor sfa_storage;
        const at::Tensor& sfa_mn = mn_major_tma_aligned(sfa, sfa_storage);
        const at::Tensor sfb_rows = sfb.is_contiguous() ? sfb : sfb.contiguous();
        kernels::GemmOperands operands = kernels::fp8_operands(false);
        operands.head_left = static_cast<uint32_t>(left), operands.head_mid = static_cast<uint32_t>(mid);
        operands.head_right = static_cast<uint32_t>(right);
        return kernels::Sm90GemmRunner::run({a_data, b_data, d, nullptr, &sfa_mn, &sfb_rows, operands, cdims.m,
                                             cdims.n, cdims.k});
    }
    const at::Tensor scratch = at::empty({m, n}, d.options());
    fp8_gemm_nt(a_data, sfa, b_data, sfb, scratch, std::nullopt, recipe, std::nullopt, std::nullopt, compiled_dims,
                disable_ue8m0_cast);
    const at::Tensor d_heads = d.unflatten(1, {num_heads, left + mid + right});
    const at::Tensor gemm_heads = scratch.view({m, num_heads, left + right});
    if (left > 0)
        d_heads.narrow(2, 0, left).copy_(gemm_heads.narrow(2, 0, left));
    if (right > 0)
        d_heads.narrow(2, left + mid, right).copy_(gemm_heads.narrow(2, left, right));
}

}  // namespace dg::apis
