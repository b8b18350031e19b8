// tf32_hc_prenorm_gemm: the HyperConnection pre-norm, D = A @ B.T on TF32 tensor cores and the row sums of squares
// of A, in one pass over A (jit_kernels/impls/sm90_tf32_hc_prenorm_gemm.hpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/sm90_tf32_hc_prenorm_gemm.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"

namespace dg::apis {

namespace detail {

// An output of tf32_hc_prenorm_gemm: FP32, contiguous, of exactly `shape` (`layout` names it in the message)
inline void check_hc_output(const at::Tensor& t, const char* name, at::IntArrayRef shape, const char* layout) {
    check_defined(t, name);
    check_dtype(t, at::kFloat, name);
    DG_CHECK_INPUT(t.sizes().equals(shape), "{} must be {} = [{}], got a {}", name, layout, fmt::join(shape, ", "),
                   describe(t));
    DG_CHECK_INPUT(t.is_contiguous(), "{} must be contiguous, got a {}", name, describe(t));
}

}  // namespace detail

// a BF16 [M, K] K-major, b FP32 [N, K] K-major (N a multiple of 8 in [8, 32], K a positive multiple of 64).
// num_splits None: d FP32 [M, N], sqr_sum FP32 [M] get the results; num_splits S in [1, K / 64]: d [S, M, N] and
// sqr_sum [S, M] get the partials of split s's K blocks (of 64) [s * KB / S, (s + 1) * KB / S), KB = K / 64, for the
// caller to sum. Without num_splits, hc_prenorm_plan picks the row-block height (128 or 64) and the K splits that
// fill the SMs: up to 8 splits per row block, one thread-block cluster, add their partials through distributed shared
// memory in split order before writing d and sqr_sum (one launch, no workspace); wider splits (small M) write partials
// to a workspace that a second pass sums in split order. Deterministic either way (no atomics); under
// set_deterministic the split count depends on K only, so each row's result is independent of M.
inline void tf32_hc_prenorm_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                                 const at::Tensor& sqr_sum, std::optional<int64_t> num_splits) {
    constexpr const char* fn = "tf32_hc_prenorm_gemm";
    check_defined(a, "a");
    check_defined(b, "b");
    check_dim(a, 2, "a");
    check_dim(b, 2, "b");
    check_dtype(a, at::kBFloat16, "a");
    check_dtype(b, at::kFloat, "b");
    const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
    DG_CHECK_INPUT(b.size(1) == k, "b must be [N, K] with K = {} (a's K), got a {}", k, describe(b));
    DG_CHECK_INPUT(n % 8 == 0 && n >= 8 && n <= 32, "b: N (its rows) must be a multiple of 8 in [8, 32] on SM90, got "
                   "N = {}", n);
    DG_CHECK_INPUT(k % 64 == 0 && k > 0, "a: K must be a positive multiple of 64, got K = {}", k);
    DG_CHECK_INPUT(m <= INT32_MAX && k <= INT32_MAX, "a: M and K must each be below 2^31, got a {}", describe(a));
    DG_CHECK_INPUT(a.stride(1) == 1, "a must be K-major (stride 1 along K), got a {}", describe(a));
    DG_CHECK_INPUT(b.stride(1) == 1, "b must be K-major (stride 1 along K), got a {}", describe(b));
    // (16-byte copies of A and B rows)
    DG_CHECK_INPUT((a.stride(0) * 2) % 16 == 0 || m <= 1, "a: the row stride must be a multiple of 8 elements (16 "
                   "bytes), got a {}", describe(a));
    DG_CHECK_INPUT((b.stride(0) * 4) % 16 == 0 || n <= 1, "b: the row stride must be a multiple of 4 elements (16 "
                   "bytes), got a {}", describe(b));
    DG_CHECK_INPUT(m == 0 || reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0,
                   "a: data pointer must be 16-byte aligned, got a {}", describe(a));
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0, "b: data pointer must be 16-byte aligned, got "
                   "a {}", describe(b));
    const int64_t num_k_blocks = k / 64;
    if (num_splits.has_value()) {
        const int64_t s = *num_splits;
        DG_CHECK_INPUT(s >= 1 && s <= num_k_blocks && s <= 65535, "num_splits must be None or in [1, K / 64 = {}] "
                       "(each split at least 64 of K), got {}", std::min<int64_t>(num_k_blocks, 65535), s);
        detail::check_hc_output(d, "d", {s, m, n}, "[num_splits, M, N]");
        detail::check_hc_output(sqr_sum, "sqr_sum", {s, m}, "[num_splits, M]");
    } else {
        detail::check_hc_output(d, "d", {m, n}, "[M, N] (no num_splits)");
        detail::check_hc_output(sqr_sum, "sqr_sum", {m}, "[M] (no num_splits)");
    }
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}, {&sqr_sum, "sqr_sum"}});
    check_output_disjoint(sqr_sum, "sqr_sum", {{&a, "a"}, {&b, "b"}});
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}, {&sqr_sum, "sqr_sum"}});
    check_sm90(a, fn);
    if (m == 0)
        return;

    const jit::DeviceScope device_scope(a.device().index());
    const int device_index = a.device().index();
    if (num_splits.has_value()) {
        kernels::launch_sm90_tf32_hc_prenorm_gemm(device_index, a.data_ptr(), a.stride(0), b.data_ptr<float>(),
                                                  b.stride(0), d.data_ptr<float>(), sqr_sum.data_ptr<float>(), m, n, k,
                                                  128, *num_splits, false);
        return;
    }
    const bool deterministic = jit::DeviceRuntime::instance().deterministic();
    const auto plan = kernels::hc_prenorm_plan(m, n, k, jit::DeviceRuntime::instance().num_sms(device_index),
                                               deterministic);
    if (plan.reduction != kernels::HcPrenormReduction::kSecondPass) {
        kernels::launch_sm90_tf32_hc_prenorm_gemm(device_index, a.data_ptr(), a.stride(0), b.data_ptr<float>(),
                                                  b.stride(0), d.data_ptr<float>(), sqr_sum.data_ptr<float>(), m, n, k,
                                                  plan.block_m, plan.num_splits,
                                                  plan.reduction == kernels::HcPrenormReduction::kCluster,
                                                  !deterministic);
        return;
    }
    // Splits wider than a cluster: the partials into a workspace, then summed over the splits (a reduction along the
    // outer dimension: each output a serial sum in split order, no atomics, so the same bits on every run)
    const int64_t s = plan.num_splits;
    const at::Tensor partial_d = at::empty({s, m, n}, d.options());
    const at::Tensor partial_sq = at::empty({s, m}, sqr_sum.options());
    kernels::launch_sm90_tf32_hc_prenorm_gemm(device_index, a.data_ptr(), a.stride(0), b.data_ptr<float>(), b.stride(0),
                                              partial_d.data_ptr<float>(), partial_sq.data_ptr<float>(), m, n, k,
                                              plan.block_m, s, false);
    at::Tensor d_out = d, sq_out = sqr_sum;
    at::sum_out(d_out, partial_d, {0});
    at::sum_out(sq_out, partial_sq, {0});
}

}  // namespace dg::apis
