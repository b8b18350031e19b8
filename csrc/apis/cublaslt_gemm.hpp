// cuBLASLt passthrough: D = C + A @ B in the nt, nn, tn and tt shapes, served by cuBLAS(Lt) through PyTorch
// (at::mm / at::addmm, at::_scaled_mm for FP8), so that users can put the vendor library behind deep_gemm's API
// as a baseline. As in the reference, the layout letters fix the shapes only: each operand's storage major is
// read from its strides. Operands: BF16 (D BF16 or FP32), FP32 (D FP32), or FP8 E4M3 / E5M2 (per-tensor scale 1,
// as the reference's cuBLASLt call applies none; D BF16 or FP32). No JIT, no arch requirement for BF16 / FP32
// (any CUDA GPU PyTorch's cuBLAS runs on); FP8 needs the GPUs cuBLASLt's FP8 GEMM runs on (SM89 and later).
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"
#include "runtime.hpp"

namespace dg::apis {

namespace detail {

inline bool is_fp8_dtype(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2; }

// An operand given as `t` (`given_shape`, e.g. "[K, N]") and seen as its logical [rows, K] view: 2-D, stride 1
// along one of its dimensions (which one is its major). Returns whether it is K-major.
inline bool check_cublaslt_operand(const at::Tensor& t, const at::Tensor& view, const char* name,
                                   const char* given_shape) {
    const bool k_major = view.stride(1) == 1 || view.size(1) <= 1;
    const bool mn_major = view.stride(0) == 1 || view.size(0) <= 1;
    DG_CHECK_INPUT(k_major || mn_major, "{} ({}) must have stride 1 along K (K-major) or along its other dimension "
                   "(MN-major), got a {}", name, given_shape, describe(t));
    return k_major;
}

// `a_transposed`: A given as [K, M] (first letter t), else [M, K]; `b_transposed`: B given as [K, N] (second letter
// n), else [N, K].
inline void cublaslt_gemm(bool a_transposed, bool b_transposed, const at::Tensor& a, const at::Tensor& b,
                          const at::Tensor& d, const std::optional<at::Tensor>& c) {
    check_not_deterministic("cublaslt_gemm");
    const char* a_shape = a_transposed ? "[K, M]" : "[M, K]";
    const char* b_shape = b_transposed ? "[K, N]" : "[N, K]";
    check_defined(a, "a");
    check_defined(b, "b");
    check_dim(a, 2, "a");
    check_dim(b, 2, "b");
    const at::ScalarType dtype = a.scalar_type();
    const bool fp8 = is_fp8_dtype(dtype);
    DG_CHECK_INPUT(dtype == at::kBFloat16 || dtype == at::kFloat || fp8,
                   "a must have dtype torch.bfloat16, torch.float32, torch.float8_e4m3fn or torch.float8_e5m2, got a {}",
                   describe(a));
    if (fp8) {
        DG_CHECK_INPUT(is_fp8_dtype(b.scalar_type()), "b must be FP8 (torch.float8_e4m3fn or torch.float8_e5m2) like a, "
                       "got a {}", describe(b));
        DG_CHECK_INPUT(dtype == at::kFloat8_e4m3fn || b.scalar_type() == at::kFloat8_e4m3fn,
                       "a and b may not both be torch.float8_e5m2 (cuBLASLt has no E5M2 x E5M2 GEMM)");
    } else {
        check_dtype(b, dtype, "b (a's dtype)");
    }
    const at::Tensor a_mk = a_transposed ? a.t() : a;  // logical [M, K]
    const at::Tensor b_nk = b_transposed ? b.t() : b;  // logical [N, K]
    const bool a_k_major = check_cublaslt_operand(a, a_mk, "a", a_shape);
    const bool b_k_major = check_cublaslt_operand(b, b_nk, "b", b_shape);
    const int64_t m = a_mk.size(0), k = a_mk.size(1), n = b_nk.size(0);
    DG_CHECK_INPUT(b_nk.size(1) == k, "b must be {} with K = {} (a's K), got a {}", b_shape, k, describe(b));

    check_dense_output(d, c, m, n);
    DG_CHECK_INPUT(dtype != at::kFloat || d.scalar_type() == at::kFloat,
                   "d must have dtype torch.float32 for FP32 operands, got a {}", describe(d));
    if (fp8) {
        // cuBLASLt's FP8 GEMM (at::_scaled_mm) reads both operands K-major, with K and N multiples of 16 and
        // 16-byte aligned rows
        DG_CHECK_INPUT(a_k_major && b_k_major, "FP8 operands must both be K-major (stride 1 along K: cuBLASLt's FP8 "
                       "GEMM reads no other layout), got a = a {} and b = a {}", describe(a), describe(b));
        DG_CHECK_INPUT(k % 16 == 0 && n % 16 == 0, "FP8 operands need K and N multiples of 16 (cuBLASLt), got K = {}, "
                       "N = {}", k, n);
        DG_CHECK_INPUT((a_mk.stride(0) % 16 == 0 || m <= 1) && b_nk.stride(0) % 16 == 0,
                       "FP8 operands need row strides that are multiples of 16 elements (cuBLASLt), got a {} and a {}",
                       describe(a), describe(b));
    }
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
    const at::Tensor b_kn = b_nk.t();  // [K, N]
    if (fp8) {
        // Per-tensor scales of 1 (the reference applies none). C is added after the product (the FP8 GEMM's bias is
        // a row vector), which is then kept in FP32 so that a BF16 D is rounded once, as cuBLASLt's D = AB + C is
        const at::Tensor one = at::ones({}, a.options().dtype(at::kFloat));
        if (!accumulate && d.is_contiguous()) {
            at::_scaled_mm_out(out, a_mk, b_kn, one, one, std::nullopt, std::nullopt, d.scalar_type());
        } else {
            const at::ScalarType product_dtype = accumulate ? at::kFloat : d.scalar_type();
            const at::Tensor product = at::_scaled_mm(a_mk, b_kn, one, one, std::nullopt, std::nullopt, product_dtype);
            if (accumulate)
                at::add_out(out, *c, product);
            else
                out.copy_(product);
        }
        return;
    }
    if (dtype == at::kBFloat16 && d.scalar_type() == at::kFloat) {
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
    detail::cublaslt_gemm(false, false, a, b, d, c);
}

inline void cublaslt_gemm_nn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(false, true, a, b, d, c);
}

inline void cublaslt_gemm_tn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(true, true, a, b, d, c);
}

inline void cublaslt_gemm_tt(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                             const std::optional<at::Tensor>& c) {
    detail::cublaslt_gemm(true, false, a, b, d, c);
}

}  // namespace dg::apis
