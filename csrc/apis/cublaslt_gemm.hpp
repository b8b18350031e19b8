// cuBLASLt passthrough: the BF16 GEMM contract (D = C + A @ B in the nt, nn, tn and tt layouts, BF16 or FP32 D)
// served by cuBLAS(Lt) through PyTorch's at::mm / at::addmm, so that users can put the vendor library behind
// deep_gemm's API as a baseline. Validation is the BF16 GEMMs' (host-checkable properties first, devices last);
// no JIT, no arch requirement: any CUDA GPU PyTorch's cuBLAS runs on.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"

namespace dg::apis {

namespace detail {

// A BF16 operand in its layout: 2-D `shape` (e.g. "[M, K]"), BF16, stride 1 along its last dimension, which
// `major` names ("K", "M" or "N"). Any row stride: cuBLAS needs no alignment.
inline void check_cublaslt_operand(const at::Tensor& t, const char* name, const char* shape, const char* major) {
    check_defined(t, name);
    check_dim(t, 2, name);
    check_dtype(t, at::kBFloat16, name);
    DG_CHECK_INPUT(t.stride(1) == 1 || t.size(1) <= 1, "{} must be {}, {}-major (stride 1 along {}), got a {}", name,
                   shape, major, major, describe(t));
}

// `a_k_major`: A is [M, K] K-major (first letter n), else [K, M] M-major (t); `b_k_major`: B is [N, K] K-major
// (second letter t), else [K, N] N-major (n).
inline void cublaslt_gemm(bool a_k_major, bool b_k_major, const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                          const std::optional<at::Tensor>& c) {
    if (a_k_major)
        check_cublaslt_operand(a, "a", "[M, K]", "K");
    else
        check_cublaslt_operand(a, "a", "[K, M]", "M");
    if (b_k_major)
        check_cublaslt_operand(b, "b", "[N, K]", "K");
    else
        check_cublaslt_operand(b, "b", "[K, N]", "N");
    const int64_t m = a.size(a_k_major ? 0 : 1), k = a.size(a_k_major ? 1 : 0);
    const int64_t n = b.size(b_k_major ? 0 : 1), b_k = b.size(b_k_major ? 1 : 0);
    DG_CHECK_INPUT(b_k == k, "b must be {} with K = {} (a's K), got a {}", b_k_major ? "[N, K]" : "[K, N]", k, describe(b));

    check_dense_output(d, c, m, n);
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}});

    // Devices last
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}});
    if (c.has_value())
        check_same_cuda_device(a, "a", {{&*c, "c"}});

    if (m == 0 || n == 0)
        return;
    if (k == 0)
        return write_empty_k(d, c);
    at::Tensor out = d;  // (the out= overloads take a mutable reference; `out` shares d's storage)
    const bool accumulate = c.has_value();
    const at::Tensor a_mk = a_k_major ? a : a.t();  // [M, K]
    const at::Tensor b_kn = b_k_major ? b.t() : b;  // [K, N]
    if (d.scalar_type() == at::kFloat) {
        // BF16 x BF16 accumulated in FP32 and written (or added to C) without rounding to BF16: the mm.dtype and
        // addmm.dtype overloads (CUDA only; C may be `out` itself)
        if (accumulate)
            at::addmm_out(out, *c, a_mk, b_kn, at::kFloat);
        else
            at::mm_out(out, a_mk, b_kn, at::kFloat);
    } else {
        if (accumulate)
            at::addmm_out(out, *c, a_mk, b_kn);
        else
            at::mm_out(out, a_mk, b_kn);
    }
}

}  // namespace detail

inline void cublaslt_gemm_nt(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(true, true, a, b, d, c);
}

inline void cublaslt_gemm_nn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(true, false, a, b, d, c);
}

inline void cublaslt_gemm_tn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(false, false, a, b, d, c);
}

inline void cublaslt_gemm_tt(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(false, true, a, b, d, c);
}

}  // namespace dg::apis
