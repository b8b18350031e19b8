// BF16 GEMM API: dense in all four layouts, m-grouped (contiguous nt/nn, masked nt) and k-grouped (tn).
// Validates every input, then runs the one SM90 GEMM kernel with BF16 operands: wgmma reads each operand
// K-major or MN-major from shared memory, so no layout needs a transposing copy.
//
// Layout letters, as for the FP8 functions: the first is A's, the second B's. A: 'n' = [M, K] (K-major),
// 't' = [K, M] (M-major). B: 't' = [N, K] (K-major), 'n' = [K, N] (N-major). D = C + A @ B^T in the logical
// [M, K] x [N, K] sense.
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
// `shape` names its dimensions for messages, e.g. "[K, N]". `transposed`: a [K, rows] operand, which with a
// single row may also be a K-contiguous column (read as the [1, K] row: its row stride is meaningless).
inline void check_bf16_operand(const at::Tensor& t, const char* name, int64_t dims, const char* shape,
                               bool transposed = false) {
    check_defined(t, name);
    check_dim(t, dims, name);
    check_dtype(t, at::kBFloat16, name);
    const bool single_column = transposed && dims == 2 && t.size(1) == 1 && (t.stride(0) == 1 || t.size(0) <= 1);
    if (!single_column)
        check_k_major_tma(t, name, "row-major", shape);
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 || t.numel() == 0,
                   "{}: data pointer must be 16-byte aligned for TMA, got a {}", name, describe(t));
}

// A dense operand stored as [rows, K] (K-major) or [K, rows] (`transposed`): its logical [rows, K] view, and
// whether the kernel reads it MN-major. A single row (M or N = 1) stored as a K-contiguous column is read as
// the K-major [1, K] row; any other [K, rows] storage MN-major (rows past `rows` in a padded row stride are
// never read: TMA clips at `rows`).
inline std::pair<at::Tensor, bool> dense_bf16_operand(const at::Tensor& t, const char* name, bool transposed,
                                                      const char* shape) {
    check_bf16_operand(t, name, 2, shape, transposed);
    const at::Tensor view = transposed ? t.t() : t;
    const bool k_contiguous_row = view.size(0) == 1 && (view.stride(1) == 1 || view.size(1) <= 1);
    return {view, transposed && !k_contiguous_row};
}

}  // namespace detail

// D = C + A @ B^T with A stored [K, M] when `a_transposed` ('t') and B stored [K, N] when `b_transposed` ('n');
// see the Python docstrings.
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

// M-grouped contiguous: A [M, K], B [G, N, K] (nt) or [G, K, N] (nn), D [M, N] BF16.
inline void m_grouped_bf16_gemm_contiguous(const char* fn, bool b_transposed, const at::Tensor& a, const at::Tensor& b,
                                           const at::Tensor& d, const at::Tensor& grouped_layout,
                                           const std::string& compiled_dims, bool use_psum_layout,
                                           std::optional<int64_t> expected_m_for_psum_layout) {
    (void)expected_m_for_psum_layout;  // the config is chosen from the total row count
    detail::check_bf16_operand(a, "a", 2, "[M, K]");
    detail::check_bf16_operand(b, "b", 3, b_transposed ? "[G, K, N]" : "[G, N, K]");
    const at::Tensor b_nk = b_transposed ? b.transpose(1, 2) : b;
    const auto [m, k, num_groups, n] = detail::check_contiguous_operands(
        a, "a", "a", b, b_nk, "b", b_transposed ? "[G, K, N]" : "[G, N, K]", d);
    const auto cdims = parse_compiled_dims(compiled_dims);
    const int64_t alignment = detail::check_contiguous_layout(grouped_layout, m, num_groups, use_psum_layout);
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}, {&grouped_layout, "grouped_layout"}});

    // Devices last
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}, {&grouped_layout, "grouped_layout"}});
    check_sm90(a, fn);
    const jit::DeviceScope device_scope(a.device().index());
    if (m == 0 || n == 0)
        return;
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, false, b_transposed, false};
    detail::run_contiguous({a, b_nk, d, nullptr, nullptr, nullptr, operands, cdims.m, cdims.n, cdims.k}, grouped_layout,
                           use_psum_layout, alignment);
}

inline void m_grouped_bf16_gemm_nt_contiguous(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                              const at::Tensor& grouped_layout, const std::string& compiled_dims,
                                              bool use_psum_layout, std::optional<int64_t> expected_m_for_psum_layout) {
    m_grouped_bf16_gemm_contiguous("m_grouped_bf16_gemm_nt_contiguous", false, a, b, d, grouped_layout, compiled_dims,
                                   use_psum_layout, expected_m_for_psum_layout);
}
inline void m_grouped_bf16_gemm_nn_contiguous(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                              const at::Tensor& grouped_layout, const std::string& compiled_dims,
                                              bool use_psum_layout, std::optional<int64_t> expected_m_for_psum_layout) {
    m_grouped_bf16_gemm_contiguous("m_grouped_bf16_gemm_nn_contiguous", true, a, b, d, grouped_layout, compiled_dims,
                                   use_psum_layout, expected_m_for_psum_layout);
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
