// BF16 GEMM API: dense in all four layouts, m-grouped (contiguous nt/nn, masked nt) and k-grouped (tn).
// Validates every input, then runs the one SM90 GEMM kernel with BF16 operands: wgmma reads each operand
// K-major or MN-major from shared memory, so no layout needs a transposing copy.
//
// Layout letters, as for the FP8 functions: the first is A's, the second B's. A: 'n' = given as [M, K],
// 't' = given as [K, M]. B: 't' = given as [N, K], 'n' = given as [K, N]. D = C + A @ B^T in the logical
// [M, K] x [N, K] sense. As in the reference, the letters fix the shapes only: each operand's storage major
// (K-major or MN-major) is read from its strides, so bf16_gemm_nt with an x.T.contiguous().T view runs the
// kernel that reads that operand MN-major, with no copy.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/sm90_gemm.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"
#include "grouped_gemm.hpp"
#include "k_grouped_gemm.hpp"

namespace dg::apis {

namespace detail {

// A BF16 operand stored row-major ([rows, cols], stride 1 along cols) with TMA-aligned row strides;
// `shape` names its dimensions for messages, e.g. "[K, N]".
inline void check_bf16_operand(const at::Tensor& t, const char* name, int64_t dims, const char* shape) {
    check_defined(t, name);
    check_dim(t, dims, name);
    check_dtype(t, at::kBFloat16, name);
    check_k_major_tma(t, name, "row-major", shape);
}

// The storage of an operand given as the logical view `view` (last two dimensions [rows, K]), read from its
// strides as the reference does: K-major when stride 1 runs along K, MN-major when it runs along the rows (the
// kernel then reads the [.., K, rows] storage in place, no transposing copy). Returns whether it is MN-major.
// A dimension of size 1 has no meaningful stride: K-major wins a tie. `given_shape` is the shape the caller
// passed, for messages ("[M, K]", "[K, N]", ...).
inline bool bf16_operand_is_mn_major(const at::Tensor& view, const char* name, const char* given_shape) {
    const int64_t rows = view.size(-2), k = view.size(-1);
    const bool k_major = view.stride(-1) == 1 || k <= 1;
    const bool mn_major = view.stride(-2) == 1 || rows <= 1;
    DG_CHECK_INPUT(k_major || mn_major, "{} ({}) must have stride 1 along K (K-major) or along its other dimension "
                   "(MN-major), got a {}", name, given_shape, describe(view));
    return !k_major;
}

// A BF16 operand given as `t` (`given_shape`, e.g. "[K, N]"), seen as its logical [.., rows, K] view `view`:
// dtype, rank, then the storage its strides describe (row strides multiples of 16 bytes, 16-byte aligned start).
// Returns whether the kernel reads it MN-major.
inline bool check_bf16_view(const at::Tensor& t, const at::Tensor& view, const char* name, const char* given_shape) {
    const bool mn_major = bf16_operand_is_mn_major(view, name, given_shape);
    const at::Tensor storage = mn_major ? view.transpose(-1, -2) : view;
    check_k_major_tma(storage, name, mn_major ? "MN-major storage" : "K-major storage", given_shape);
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 || t.numel() == 0,
                   "{}: data pointer must be 16-byte aligned for TMA, got a {}", name, describe(t));
    return mn_major;
}

// A dense operand given as [rows, K] (`transposed` false) or [K, rows]: its logical [rows, K] view and whether the
// kernel reads it MN-major (from its strides, whatever the layout letter: bf16_gemm_nt with x.T.contiguous().T
// views is the nn / tn / tt GEMM).
inline std::pair<at::Tensor, bool> dense_bf16_operand(const at::Tensor& t, const char* name, bool transposed,
                                                      const char* shape) {
    check_defined(t, name);
    check_dim(t, 2, name);
    check_dtype(t, at::kBFloat16, name);
    const at::Tensor view = transposed ? t.t() : t;
    return {view, check_bf16_view(t, view, name, shape)};
}

}  // namespace detail

// D = C + A @ B^T with A given as [K, M] when `a_transposed` ('t') and B given as [K, N] when `b_transposed` ('n');
// each operand's storage major comes from its strides. See the Python docstrings.
inline void bf16_gemm(const char* fn, bool a_transposed, bool b_transposed, const at::Tensor& a, const at::Tensor& b,
                      const at::Tensor& d, const std::optional<at::Tensor>& c, const std::string& compiled_dims) {
    const auto [a_mk, mn_major_a] = detail::dense_bf16_operand(a, "a", a_transposed, a_transposed ? "[K, M]" : "[M, K]");
    const auto [b_nk, mn_major_b] = detail::dense_bf16_operand(b, "b", b_transposed, b_transposed ? "[K, N]" : "[N, K]");
    const int64_t m = a_mk.size(0), k = a_mk.size(1), n = b_nk.size(0);
    DG_CHECK_INPUT(b_nk.size(1) == k, "b must be {} with K = {} (a's K), got a {}", b_transposed ? "[K, N]" : "[N, K]",
                   k, describe(b));
    check_dense_output(d, c, m, n);
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}});
    DG_CHECK_INPUT(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "M, N and K must each be below 2^31");
    const auto cdims = parse_compiled_dims(compiled_dims);

    // Devices last
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}});
    if (c.has_value())
        check_same_cuda_device(a, "a", {{&*c, "c"}});
    check_sm90(a, fn);
    const jit::DeviceScope device_scope(a.device().index());

    if (m == 0 || n == 0)
        return;
    if (k == 0)
        return write_empty_k(d, c);
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, mn_major_a, mn_major_b,
                                         d.scalar_type() == at::kFloat};
    kernels::Sm90GemmRunner::run({a_mk, b_nk, d, c.has_value() ? &*c : nullptr, nullptr, nullptr, operands, cdims.m,
                                  cdims.n, cdims.k});
}

inline void bf16_gemm_nt(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                         const std::optional<at::Tensor>& c, const std::string& compiled_dims) {
    bf16_gemm("bf16_gemm_nt", false, false, a, b, d, c, compiled_dims);
}
inline void bf16_gemm_nn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                         const std::optional<at::Tensor>& c, const std::string& compiled_dims) {
    bf16_gemm("bf16_gemm_nn", false, true, a, b, d, c, compiled_dims);
}
inline void bf16_gemm_tn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                         const std::optional<at::Tensor>& c, const std::string& compiled_dims) {
    bf16_gemm("bf16_gemm_tn", true, true, a, b, d, c, compiled_dims);
}
inline void bf16_gemm_tt(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                         const std::optional<at::Tensor>& c, const std::string& compiled_dims) {
    bf16_gemm("bf16_gemm_tt", true, false, a, b, d, c, compiled_dims);
}

// M-grouped contiguous: A [M, K] (K-major), B given as [G, N, K] (nt) or [G, K, N] (nn), its storage major read
// from its strides; D [M, N] BF16. Padding rows written as zeros: detail::padding_zeroing.
inline void m_grouped_bf16_gemm_contiguous(const char* fn, bool b_transposed, const at::Tensor& a, const at::Tensor& b,
                                           const at::Tensor& d, const at::Tensor& grouped_layout,
                                           const std::string& compiled_dims, bool use_psum_layout,
                                           bool ensure_zero_padding, std::optional<int64_t> expected_m_for_psum_layout) {
    (void)expected_m_for_psum_layout;  // the config is chosen from the total row count
    const char* b_shape = b_transposed ? "[G, K, N]" : "[G, N, K]";
    detail::check_bf16_operand(a, "a", 2, "[M, K]");
    check_defined(b, "b");
    check_dim(b, 3, "b");
    check_dtype(b, at::kBFloat16, "b");
    const at::Tensor b_nk = b_transposed ? b.transpose(1, 2) : b;
    const bool mn_major_b = detail::check_bf16_view(b, b_nk, "b", b_shape);
    const at::Tensor b_storage = mn_major_b ? b_nk.transpose(1, 2) : b_nk;  // [G, K, N] or [G, N, K], row-major
    const auto [m, k, num_groups, n] =
        detail::check_contiguous_operands(a, "a", "a", b_storage, b_nk, "b", b_shape, d);
    const auto cdims = parse_compiled_dims(compiled_dims);
    const int64_t alignment = detail::check_contiguous_layout(grouped_layout, m, num_groups, use_psum_layout);
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}, {&grouped_layout, "grouped_layout"}});

    // Devices last
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}, {&grouped_layout, "grouped_layout"}});
    check_sm90(a, fn);
    const jit::DeviceScope device_scope(a.device().index());
    if (m == 0 || n == 0)
        return;
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, false, mn_major_b, false};
    detail::run_contiguous({a, b_nk, d, nullptr, nullptr, nullptr, operands, cdims.m, cdims.n, cdims.k}, grouped_layout,
                           use_psum_layout, alignment,
                           detail::padding_zeroing(ensure_zero_padding, use_psum_layout));
}

inline void m_grouped_bf16_gemm_nt_contiguous(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                              const at::Tensor& grouped_layout, const std::string& compiled_dims,
                                              bool use_psum_layout, bool ensure_zero_padding,
                                              std::optional<int64_t> expected_m_for_psum_layout) {
    m_grouped_bf16_gemm_contiguous("m_grouped_bf16_gemm_nt_contiguous", false, a, b, d, grouped_layout, compiled_dims,
                                   use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout);
}
inline void m_grouped_bf16_gemm_nn_contiguous(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                              const at::Tensor& grouped_layout, const std::string& compiled_dims,
                                              bool use_psum_layout, bool ensure_zero_padding) {
    m_grouped_bf16_gemm_contiguous("m_grouped_bf16_gemm_nn_contiguous", true, a, b, d, grouped_layout, compiled_dims,
                                   use_psum_layout, ensure_zero_padding, std::nullopt);
}

// M-grouped masked: A [G, max_m, K], B [G, N, K], D [G, max_m, N] BF16, rows past masked_m[g] untouched.
inline void m_grouped_bf16_gemm_nt_masked(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                          const at::Tensor& masked_m, int64_t expected_m,
                                          const std::string& compiled_dims) {
    detail::check_bf16_operand(a, "a", 3, "[G, max_m, K]");
    detail::check_bf16_operand(b, "b", 3, "[G, N, K]");
    const auto [num_groups, max_m, k, n] = detail::check_masked_operands(a, "a", b, "b");
    detail::check_masked(masked_m, d, num_groups, max_m, n, expected_m);
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}, {&masked_m, "masked_m"}});
    const auto cdims = parse_compiled_dims(compiled_dims);

    // Devices last
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}, {&masked_m, "masked_m"}});
    check_sm90(a, "m_grouped_bf16_gemm_nt_masked");
    const jit::DeviceScope device_scope(a.device().index());
    if (n == 0 || max_m == 0)
        return;
    const at::Tensor a_flat = a.view({num_groups * max_m, k});
    const at::Tensor d_flat = d.view({num_groups * max_m, n});
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, false, false, false};
    detail::run_masked({a_flat, b, d_flat, nullptr, nullptr, nullptr, operands, cdims.m, cdims.n, cdims.k}, masked_m,
                       max_m, expected_m);
}

// K-grouped tn, A [sum K, M] and B [sum K, N] MN-major, group g's rows from start_g:
// D[g] = C[g] + a[start_g : start_g + K_g].T @ b[start_g : start_g + K_g].
inline void k_grouped_bf16_gemm_tn_contiguous(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                              const std::vector<int64_t>& ks, const at::Tensor& grouped_layout,
                                              const std::optional<at::Tensor>& c, const std::string& compiled_dims,
                                              bool use_psum_layout) {
    const std::vector<int64_t> starts = detail::check_k_grouped(ks, d, c, grouped_layout, use_psum_layout, 1);
    const int64_t m = d.size(1), n = d.size(2), total_k = starts.back() + ks.back();
    const auto cdims = parse_compiled_dims(compiled_dims);
    detail::check_bf16_operand(a, "a", 2, "[sum(K), M]");
    detail::check_bf16_operand(b, "b", 2, "[sum(K), N]");
    DG_CHECK_INPUT(a.size(0) >= total_k && a.size(1) == m, "a must be [sum(K), M] with at least {} rows and M = {} "
                   "(d's), got a {}", total_k, m, describe(a));
    DG_CHECK_INPUT(b.size(0) >= total_k && b.size(1) == n, "b must be [sum(K), N] with at least {} rows and N = {} "
                   "(d's), got a {}", total_k, n, describe(b));
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}, {&grouped_layout, "grouped_layout"}});

    // Devices last
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}, {&grouped_layout, "grouped_layout"}});
    if (c.has_value())
        check_same_cuda_device(a, "a", {{&*c, "c"}});
    check_sm90(a, "k_grouped_bf16_gemm_tn_contiguous");
    const jit::DeviceScope device_scope(a.device().index());
    if (m == 0 || n == 0)
        return;
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, true, true, true};
    kernels::Sm90GemmRunner::run_k_grouped({a, b, d, c.has_value() ? &*c : nullptr, nullptr, nullptr,
                                            static_cast<uint32_t>(m), static_cast<uint32_t>(n), ks, starts, cdims.m,
                                            cdims.n},
                                           operands);
}

}  // namespace dg::apis
