// Attention-side APIs: the FP8 MQA logits of the DeepSeek-V3.2 lightning indexer. Validate every input
// (host-checkable properties first, the device last), allocate the logits, launch.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "../jit/device_runtime.hpp"
#include "../jit/kernel_runtime.hpp"
#include "../jit_kernels/impls/sm90_fp8_mqa_logits.hpp"
#include "../utils/env.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"

namespace dg::apis {

// ks/ke values: 0 <= ks <= ke <= seq_len_kv, and ke - ks <= max_seqlen_k when compressed. Read on the
// host: directly for CPU tensors; for CUDA tensors through one reduction and a device-to-host copy (a
// synchronization), skipped while the stream captures a CUDA graph or with
// DG_MQA_LOGITS_SKIP_RANGE_CHECK=1 (the kernel clamps the ranges anyway, so bad values never reach memory).
inline void check_key_ranges(const at::Tensor& ks, const at::Tensor& ke, int64_t seq_len_kv, int64_t max_seqlen_k) {
    if (ks.numel() == 0)
        return;
    if (ks.is_cuda()) {
        if (get_env_flag("DG_MQA_LOGITS_SKIP_RANGE_CHECK"))
            return;
        int status = driver::CU_STREAM_CAPTURE_STATUS_NONE;
        DG_CUDA_DRIVER_CHECK(driver::api().cuStreamIsCapturing(jit::current_stream(ks.device().index()), &status));
        if (status != driver::CU_STREAM_CAPTURE_STATUS_NONE)
            return;
    }
    const at::Tensor ks64 = ks.to(at::kLong), ke64 = ke.to(at::kLong);
    const at::Tensor length = ke64 - ks64;
    // One host copy of the four extremes: min ks, max ke, min length, max length
    const at::Tensor extremes = at::stack({ks64.min(), ke64.max(), length.min(), length.max()}).cpu();
    const int64_t* v = extremes.data_ptr<int64_t>();
    DG_CHECK_INPUT(v[0] >= 0, "cu_seq_len_k_start must be >= 0 everywhere, got a minimum of {}", v[0]);
    DG_CHECK_INPUT(v[1] <= seq_len_kv, "cu_seq_len_k_end must be <= S_kv = {} (kv rows) everywhere, got a maximum of {}",
                   seq_len_kv, v[1]);
    DG_CHECK_INPUT(v[2] >= 0, "cu_seq_len_k_start must be <= cu_seq_len_k_end for every query (ks > ke), got "
                   "ke - ks = {} somewhere", v[2]);
    if (max_seqlen_k > 0)
        DG_CHECK_INPUT(v[3] <= max_seqlen_k, "max_seqlen_k = {} must cover every query's ke - ks, got a longest range of {}",
                       max_seqlen_k, v[3]);
}

inline at::Tensor fp8_mqa_logits(const at::Tensor& q, const std::tuple<at::Tensor, at::Tensor>& kv_pair,
                                 const at::Tensor& weights, const at::Tensor& ks, const at::Tensor& ke,
                                 bool clean_logits, int64_t max_seqlen_k, at::ScalarType logits_dtype) {
    const auto& [kv, kv_scales] = kv_pair;
    // q [S, H, D]
    check_defined(q, "q");
    check_dim(q, 3, "q");
    check_dtype(q, at::kFloat8_e4m3fn, "q");
    const int64_t seq_len = q.size(0), num_heads = q.size(1), head_dim = q.size(2);
    DG_CHECK_INPUT(num_heads == 16 || num_heads == 32 || num_heads == 64,
                   "q must be [S, H, D] with H (heads) in {{16, 32, 64}}, got a {}", describe(q));
    DG_CHECK_INPUT(head_dim == 64 || head_dim == 128, "q must be [S, H, D] with D (head dim) in {{64, 128}}, got a {}",
                   describe(q));
    check_k_major_tma(q, "q");
    DG_CHECK_INPUT(q.stride(0) == num_heads * q.stride(1) || seq_len <= 1,
                   "q: the heads of a token must be stacked densely (stride 0 = H * stride 1), got a {}", describe(q));
    // kv = (kv [S_kv, D], kv_scales [S_kv])
    check_defined(kv, "kv[0] (kv)");
    check_dim(kv, 2, "kv[0] (kv)");
    check_dtype(kv, at::kFloat8_e4m3fn, "kv[0] (kv)");
    const int64_t seq_len_kv = kv.size(0);
    DG_CHECK_INPUT(kv.size(1) == head_dim, "kv[0] (kv) must be [S_kv, D] with D = {} (q's head dim), got a {}", head_dim,
                   describe(kv));
    check_k_major_tma(kv, "kv[0] (kv)");
    check_defined(kv_scales, "kv[1] (kv scales)");
    check_dtype(kv_scales, at::kFloat, "kv[1] (kv scales)");
    DG_CHECK_INPUT(kv_scales.dim() == 1 && kv_scales.size(0) == seq_len_kv,
                   "kv[1] (kv scales) must be [S_kv] = [{}], got a {}", seq_len_kv, describe(kv_scales));
    DG_CHECK_INPUT(kv_scales.stride(0) == 1 || seq_len_kv <= 1, "kv[1] (kv scales) must be contiguous, got a {}",
                   describe(kv_scales));
    // weights [S, H]
    check_defined(weights, "weights");
    check_dtype(weights, at::kFloat, "weights");
    DG_CHECK_INPUT(weights.dim() == 2 && weights.size(0) == seq_len && weights.size(1) == num_heads,
                   "weights must be [S, H] = [{}, {}], got a {}", seq_len, num_heads, describe(weights));
    DG_CHECK_INPUT(weights.stride(1) == 1, "weights must be contiguous along H (stride 1), got a {}", describe(weights));
    DG_CHECK_INPUT(weights.stride(0) >= 0 && weights.stride(0) <= INT32_MAX, "weights: row stride must be in [0, 2^31), got a {}",
                   describe(weights));
    // ks, ke [S]
    for (const auto& [t, name]: {std::pair{&ks, "cu_seq_len_k_start"}, std::pair{&ke, "cu_seq_len_k_end"}}) {
        check_defined(*t, name);
        check_dtype(*t, at::kInt, name);
        DG_CHECK_INPUT(t->dim() == 1 && t->size(0) == seq_len, "{} must be [S] = [{}], got a {}", name, seq_len,
                       describe(*t));
        DG_CHECK_INPUT(t->stride(0) == 1 || seq_len <= 1, "{} must be contiguous, got a {}", name, describe(*t));
    }
    DG_CHECK_INPUT(max_seqlen_k >= 0, "max_seqlen_k must be >= 0 (0: full [S, S_kv] logits), got {}", max_seqlen_k);
    DG_CHECK_INPUT(logits_dtype == at::kFloat || logits_dtype == at::kBFloat16,
                   "logits_dtype must be torch.float32 or torch.bfloat16, got {}", dtype_name(logits_dtype));
    DG_CHECK_INPUT(seq_len < INT32_MAX && seq_len_kv < INT32_MAX && max_seqlen_k < INT32_MAX,
                   "S, S_kv and max_seqlen_k must each be below 2^31");
    DG_CHECK_INPUT(ks.device() == ke.device(), "cu_seq_len_k_end must be on the same device as cu_seq_len_k_start ({}), got {}",
                   ks.device().str(), ke.device().str());
    check_key_ranges(ks, ke, seq_len_kv, max_seqlen_k);

    // Devices last
    check_same_cuda_device(q, "q", {{&kv, "kv[0] (kv)"}, {&kv_scales, "kv[1] (kv scales)"}, {&weights, "weights"},
                                    {&ks, "cu_seq_len_k_start"}, {&ke, "cu_seq_len_k_end"}});
    check_sm90(q, "fp8_mqa_logits");
    require_validated_or_opt_in("fp8_mqa_logits");
    const jit::DeviceScope device_scope(q.device().index());

    const bool is_compressed = max_seqlen_k > 0;
    const int64_t width = is_compressed ? max_seqlen_k : seq_len_kv;
    at::Tensor logits = at::empty({seq_len, width}, q.options().dtype(logits_dtype));
    if (seq_len == 0 || width == 0)
        return logits;
    if (seq_len_kv == 0) {
        // No key is valid anywhere
        if (clean_logits)
            logits.fill_(-std::numeric_limits<float>::infinity());
        return logits;
    }
    kernels::launch_sm90_fp8_mqa_logits({q, kv, kv_scales, weights, ks, ke, logits, is_compressed, clean_logits});
    return logits;
}

}  // namespace dg::apis
