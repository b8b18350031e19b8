// Attention-side APIs: the FP8 MQA logits of the DeepSeek-V3.2 lightning indexer. Validate every input
// (host-checkable properties first, the device last), allocate the logits, launch.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "../jit/device_runtime.hpp"
#include "../jit/kernel_runtime.hpp"
#include "../jit_kernels/impls/sm90_fp8_mqa_logits.hpp"
#include "../jit_kernels/impls/sm90_fp8_paged_mqa_logits.hpp"
#include "../jit_kernels/impls/smxx_paged_mqa_schedule.hpp"
#include "../utils/env.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"
#include "value_checks.hpp"

namespace dg::apis {

// ks/ke values (DG_DEBUG_CHECKS=1 only, see wants_value_check): 0 <= ks <= ke <= seq_len_kv, and ke - ks <=
// max_seqlen_k when compressed, read on the host through one reduction and one copy.
inline void check_key_ranges(const at::Tensor& ks, const at::Tensor& ke, int64_t seq_len_kv, int64_t max_seqlen_k) {
    if (ks.numel() == 0 || !wants_value_check(ks))
        return;
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

// The FP8 and FP4 MQA logits: q_scales null for FP8 q and kv (e4m3, FP32 kv scales), else FP4 q and kv (packed
// e2m1 as int8 or uint8, q [S, H, D / 2] and kv [S_kv, D / 2], D in {64, 128}) with int32 UE8M0 words: q_scales
// [S, H] and kv scales [S_kv] (the exponents of each row's D / 32 groups of 32, group g in byte g).
inline at::Tensor mqa_logits(const at::Tensor& q, const at::Tensor* q_scales,
                             const std::tuple<at::Tensor, at::Tensor>& kv_pair, const at::Tensor& weights,
                             const at::Tensor& ks, const at::Tensor& ke, bool clean_logits, int64_t max_seqlen_k,
                             at::ScalarType logits_dtype, const char* api) {
    const auto& [kv, kv_scales] = kv_pair;
    const bool fp4 = q_scales != nullptr;
    // q [S, H, D] (FP4: [S, H, D / 2])
    check_defined(q, "q");
    check_dim(q, 3, "q");
    if (fp4)
        DG_CHECK_INPUT(q.scalar_type() == at::kChar || q.scalar_type() == at::kByte,
                       "q[0] (q) must be packed FP4 (torch.int8 or torch.uint8, two e2m1 values a byte) when q[1] (q "
                       "scales) is given, got a {}", describe(q));
    else
        check_dtype(q, at::kFloat8_e4m3fn, "q");
    const int64_t seq_len = q.size(0), num_heads = q.size(1), head_dim = q.size(2) * (fp4 ? 2 : 1);
    DG_CHECK_INPUT(num_heads == 16 || num_heads == 32 || num_heads == 64,
                   "q must be [S, H, D] with H (heads) in {{16, 32, 64}}, got a {}", describe(q));
    if (fp4)
        DG_CHECK_INPUT(head_dim == 64 || head_dim == 128,
                       "q[0] (q, packed FP4) must be [S, H, D / 2] with D (head dim) in {{64, 128}}, got a {}",
                       describe(q));
    else
        DG_CHECK_INPUT(head_dim == 32 || head_dim == 64 || head_dim == 128,
                       "q must be [S, H, D] with D (head dim) in {{32, 64, 128}}, got a {}", describe(q));
    check_k_major_tma(q, "q");
    DG_CHECK_INPUT(q.stride(0) == num_heads * q.stride(1) || seq_len <= 1,
                   "q: the heads of a token must be stacked densely (stride 0 = H * stride 1), got a {}", describe(q));
    if (fp4) {
        // q scales [S, H]: one int32 of UE8M0 exponents per head row
        check_defined(*q_scales, "q[1] (q scales)");
        check_dtype(*q_scales, at::kInt, "q[1] (q scales, packed UE8M0)");
        DG_CHECK_INPUT(q_scales->dim() == 2 && q_scales->size(0) == seq_len && q_scales->size(1) == num_heads,
                       "q[1] (q scales) must be [S, H] = [{}, {}] (an int32 of D / 32 UE8M0 exponents per head row), "
                       "got a {}", seq_len, num_heads, describe(*q_scales));
        DG_CHECK_INPUT(q_scales->is_contiguous(), "q[1] (q scales) must be contiguous, got a {}", describe(*q_scales));
    }
    // kv = (kv [S_kv, D], kv_scales [S_kv]) (FP4: [S_kv, D / 2] and int32 [S_kv])
    check_defined(kv, "kv[0] (kv)");
    check_dim(kv, 2, "kv[0] (kv)");
    if (fp4)
        DG_CHECK_INPUT(kv.scalar_type() == at::kChar || kv.scalar_type() == at::kByte,
                       "kv[0] (kv) must be packed FP4 (torch.int8 or torch.uint8) when q is FP4, got a {}", describe(kv));
    else
        check_dtype(kv, at::kFloat8_e4m3fn, "kv[0] (kv)");
    const int64_t seq_len_kv = kv.size(0);
    if (fp4)
        DG_CHECK_INPUT(kv.size(1) * 2 == head_dim, "kv[0] (kv, packed FP4) must be [S_kv, D / 2] with D / 2 = {} (q's), "
                       "got a {}", head_dim / 2, describe(kv));
    else
        DG_CHECK_INPUT(kv.size(1) == head_dim, "kv[0] (kv) must be [S_kv, D] with D = {} (q's head dim), got a {}",
                       head_dim, describe(kv));
    check_k_major_tma(kv, "kv[0] (kv)");
    check_defined(kv_scales, "kv[1] (kv scales)");
    if (fp4)
        check_dtype(kv_scales, at::kInt, "kv[1] (kv scales, packed UE8M0 with FP4 kv)");
    else
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
    if (fp4)
        check_same_cuda_device(q, "q", {{q_scales, "q[1] (q scales)"}});
    check_sm90(q, api);
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
    kernels::launch_sm90_fp8_mqa_logits(
        {q, kv, kv_scales, weights, ks, ke, logits, is_compressed, clean_logits, q_scales});
    return logits;
}

inline at::Tensor fp8_mqa_logits(const at::Tensor& q, const std::tuple<at::Tensor, at::Tensor>& kv_pair,
                                 const at::Tensor& weights, const at::Tensor& ks, const at::Tensor& ke,
                                 bool clean_logits, int64_t max_seqlen_k, at::ScalarType logits_dtype) {
    return mqa_logits(q, nullptr, kv_pair, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype,
                      "fp8_mqa_logits");
}

// q = (values, scales or None): None is FP8 q (fp8_mqa_logits); scales given is FP4 q and kv.
inline at::Tensor fp8_fp4_mqa_logits(const std::tuple<at::Tensor, std::optional<at::Tensor>>& q_pair,
                                     const std::tuple<at::Tensor, at::Tensor>& kv_pair, const at::Tensor& weights,
                                     const at::Tensor& ks, const at::Tensor& ke, bool clean_logits,
                                     int64_t max_seqlen_k, at::ScalarType logits_dtype) {
    const auto& [q, q_scales] = q_pair;
    return mqa_logits(q, q_scales.has_value() ? &*q_scales : nullptr, kv_pair, weights, ks, ke, clean_logits,
                      max_seqlen_k, logits_dtype,
                      q_scales.has_value() ? "fp8_fp4_mqa_logits" : "fp8_mqa_logits");
}


// ---------------------------------------------------------------------------------------------- paged decode
// The schedule of the paged decode kernel: work is counted in kv blocks (block_kv keys of one request;
// request b has ceil(context_len[b] / block_kv) of them, context_len[b] the longest of its next_n query
// tokens' lengths when context_lens is [B, next_n], negative lengths counted as 0). SM i gets units
// [i * q + min(i, r), (i + 1) * q + min(i + 1, r)) of the total T = q * num_sms + r, in request order, and
// schedule_meta[i] = (first request, first kv block within it) of its range; row num_sms = (B, 0) ends
// the last range. No host synchronization, so it can be captured in a CUDA graph. On a CUDA device of
// SM >= 90: one JIT kernel launch of one CTA (smxx_paged_mqa_schedule.cuh). Elsewhere (CPU tensors, older
// GPUs): a few tensor ops (prefix sums, searchsorted), the reference the kernel is tested against.
// indices (int32 [N], the request of each token, see check_token_indices): then context_lens holds the N tokens'
// own lengths and each token is a unit of the schedule (next_n = 1), so the schedule is that of context_lens alone.
inline at::Tensor get_paged_mqa_logits_metadata(const at::Tensor& context_lens, int64_t block_kv, int64_t num_sms,
                                                const std::optional<at::Tensor>& indices) {
    check_defined(context_lens, "context_lens");
    check_dtype(context_lens, at::kInt, "context_lens");
    DG_CHECK_INPUT(context_lens.dim() == 1 || context_lens.dim() == 2,
                   "context_lens must be [B] or [B, next_n], got a {}", describe(context_lens));
    if (indices.has_value()) {
        DG_CHECK_INPUT(context_lens.dim() == 1 || context_lens.size(1) == 1,
                       "context_lens must be [N] or [N, 1] (one length per token) with indices, got a {}",
                       describe(context_lens));
        check_defined(*indices, "indices");
        check_dtype(*indices, at::kInt, "indices");
        DG_CHECK_INPUT(indices->dim() == 1 && indices->size(0) == context_lens.size(0),
                       "indices must be [N] = [{}] (a request per token of context_lens), got a {}",
                       context_lens.size(0), describe(*indices));
        DG_CHECK_INPUT(indices->device() == context_lens.device(),
                       "indices must be on the same device as context_lens ({}), got {}", context_lens.device().str(),
                       indices->device().str());
    }
    DG_CHECK_INPUT(block_kv == 32 || block_kv == 64, "block_kv must be 32 or 64 (keys per kv-cache block), got {}",
                   block_kv);
    DG_CHECK_INPUT(num_sms > 0 && num_sms <= 65536, "num_sms must be in [1, 65536], got {}", num_sms);

    const int64_t batch = context_lens.size(0), next_n = context_lens.dim() == 2 ? context_lens.size(1) : 1;
    DG_CHECK_INPUT(batch < INT32_MAX && next_n < INT32_MAX, "context_lens: B and next_n must be below 2^31, got a {}",
                   describe(context_lens));

    if (context_lens.is_cuda() && jit::DeviceRuntime::instance().properties(context_lens.device().index()).major >= 9) {
        const int device_index = context_lens.device().index();
        const jit::DeviceScope device_scope(device_index);
        at::Tensor schedule = at::empty({num_sms + 1, 2}, context_lens.options());
        kernels::launch_paged_mqa_schedule(device_index, context_lens.data_ptr<int32_t>(), context_lens.stride(0),
                                           context_lens.dim() == 2 ? context_lens.stride(1) : 0,
                                           static_cast<uint32_t>(batch), static_cast<uint32_t>(next_n),
                                           static_cast<uint32_t>(block_kv), static_cast<uint32_t>(num_sms),
                                           schedule.data_ptr<int32_t>());
        return schedule;
    }

    // The tensor-op reference
    const auto long_options = context_lens.options().dtype(at::kLong);
    if (batch == 0 || (context_lens.dim() == 2 && context_lens.size(1) == 0))
        return at::stack({at::full({num_sms + 1}, batch, long_options), at::zeros({num_sms + 1}, long_options)}, 1)
            .to(at::kInt);
    at::Tensor lens = context_lens.to(at::kLong);
    if (lens.dim() == 2)
        lens = std::get<0>(lens.max(1));
    const at::Tensor units = (lens.clamp_min(0) + (block_kv - 1)).div(block_kv, "floor");  // [B] kv blocks
    const at::Tensor ends = units.cumsum(0);                                                 // inclusive prefix
    const at::Tensor total = ends[-1];
    // First unit of each SM's range: i * q + min(i, r) for i in [0, num_sms]
    const at::Tensor i = at::arange(num_sms + 1, long_options);
    const at::Tensor q = total.div(num_sms, "floor"), r = total.remainder(num_sms);
    const at::Tensor start = i * q + at::minimum(i, r);
    // Its request: the first whose inclusive prefix passes it (B at the end); the block within that request
    const at::Tensor request = at::searchsorted(ends, start, /*out_int32=*/false, /*right=*/true);
    const at::Tensor begins = at::cat({at::zeros({1}, long_options), ends});  // exclusive prefix, [B + 1]
    const at::Tensor block = start - begins.index_select(0, request);
    return at::stack({request, block}, 1).to(at::kInt).contiguous();
}

// indices (with the paged call): int32 [N], contiguous, on context_lens' device; q rows are tokens (next_n = 1)
// and token t reads the keys of block-table row indices[t] (its request) up to its own context_lens[t].
inline void check_token_indices(const at::Tensor& indices, int64_t num_tokens, int64_t next_n) {
    check_defined(indices, "indices");
    check_dtype(indices, at::kInt, "indices");
    DG_CHECK_INPUT(next_n == 1, "indices: q must be [N, 1, H, D] (one token per row, next_n = 1) with indices, got "
                   "next_n = {}", next_n);
    DG_CHECK_INPUT(indices.dim() == 1 && indices.size(0) == num_tokens,
                   "indices must be [N] = [{}] (the request of each q row), got a {}", num_tokens, describe(indices));
    DG_CHECK_INPUT(indices.stride(0) == 1 || num_tokens <= 1, "indices must be contiguous, got a {}",
                   describe(indices));
}

// context_lens, block_table and indices values (DG_DEBUG_CHECKS=1 only, see wants_value_check): 0 <= context_len
// <= max_context_len, ceil(context_len / block_kv) <= max_blocks, indices in [0, block-table rows), and every
// block id a request uses in [0, num_blocks). Off, the kernel clamps them, so bad values never read or write out
// of bounds.
inline void check_paged_values(const at::Tensor& context_lens, const at::Tensor& block_table,
                               const std::optional<at::Tensor>& indices, int64_t block_kv, int64_t num_kv_blocks,
                               int64_t max_context_len) {
    if (context_lens.numel() == 0 || !wants_value_check(context_lens))
        return;
    const at::Tensor lens = context_lens.to(at::kLong);
    const at::Tensor longest = lens.dim() == 2 ? std::get<0>(lens.max(1)) : lens;   // [B]
    const at::Tensor used = (longest.clamp_min(0) + (block_kv - 1)).div(block_kv, "floor");  // blocks per request
    const int64_t max_blocks = block_table.size(1), num_rows = block_table.size(0);
    at::Tensor rows = block_table;
    if (indices.has_value()) {
        const at::Tensor ids = indices->to(at::kLong);
        const at::Tensor range = at::stack({ids.min(), ids.max()}).cpu();
        const int64_t* r = range.data_ptr<int64_t>();
        DG_CHECK_INPUT(r[0] >= 0 && r[1] < num_rows, "indices must be in [0, {}) (block_table rows) everywhere, got "
                       "[{}, {}] (request indices out of range)", num_rows, r[0], r[1]);
        rows = block_table.index_select(0, ids);
    }
    at::Tensor bad_ids = at::zeros({}, lens.options());
    if (max_blocks > 0) {
        const at::Tensor column = at::arange(max_blocks, lens.options());
        const at::Tensor in_use = column.unsqueeze(0) < used.unsqueeze(1);
        const at::Tensor ids = rows.to(at::kLong);
        bad_ids = (in_use & ((ids < 0) | (ids >= num_kv_blocks))).sum();
    }
    const at::Tensor extremes = at::stack({lens.min(), lens.max(), used.max(), bad_ids}).cpu();
    const int64_t* v = extremes.data_ptr<int64_t>();
    DG_CHECK_INPUT(v[0] >= 0, "context_lens must be >= 0 everywhere, got a minimum of {}", v[0]);
    DG_CHECK_INPUT(v[1] <= max_context_len,
                   "context_lens must be <= max_context_len = {} everywhere (context longer than max_context_len), got "
                   "a maximum of {}", max_context_len, v[1]);
    DG_CHECK_INPUT(v[2] <= max_blocks,
                   "block_table must have a column per kv block of the longest context: {} blocks of {} keys, got "
                   "max_blocks = {}", v[2], block_kv, max_blocks);
    DG_CHECK_INPUT(v[3] == 0, "block_table: {} block id(s) in use are outside [0, num_blocks = {}) (block ids out of "
                   "range)", v[3], num_kv_blocks);
}

// The FP8 and FP4 paged MQA logits: q_scales null for FP8 q and cache (e4m3 values, FP32 scales), else FP4 (q packed
// e2m1 as int8 or uint8 [B, T, H, D / 2], D in {64, 128}, q_scales int32 [B, T, H]; the cache's blocks hold
// block_kv x D / 2 packed bytes, then block_kv int32 UE8M0 words).
inline at::Tensor paged_mqa_logits(const at::Tensor& q, const at::Tensor* q_scales, const at::Tensor& kv_cache,
                                   const at::Tensor& weights, const at::Tensor& context_lens,
                                   const at::Tensor& block_table, const at::Tensor& schedule_meta,
                                   int64_t max_context_len, bool clean_logits, const std::optional<at::Tensor>& indices,
                                   at::ScalarType logits_dtype, const char* api) {
    const bool fp4 = q_scales != nullptr;
    // q [B, T, H, D] (FP4: [B, T, H, D / 2])
    check_defined(q, "q");
    check_dim(q, 4, "q");
    if (fp4)
        DG_CHECK_INPUT(q.scalar_type() == at::kChar || q.scalar_type() == at::kByte,
                       "q[0] (q) must be packed FP4 (torch.int8 or torch.uint8, two e2m1 values a byte) when q[1] (q "
                       "scales) is given, got a {}", describe(q));
    else
        check_dtype(q, at::kFloat8_e4m3fn, "q");
    const int64_t batch = q.size(0), next_n = q.size(1), num_heads = q.size(2), head_dim = q.size(3) * (fp4 ? 2 : 1);
    const int64_t row_bytes = fp4 ? head_dim / 2 : head_dim;  // a key's values in the cache
    DG_CHECK_INPUT(next_n == 1 || next_n == 2 || next_n == 4,
                   "q must be [B, next_n, H, D] with next_n in {{1, 2, 4}}, got a {}", describe(q));
    DG_CHECK_INPUT(num_heads == 16 || num_heads == 32 || num_heads == 64,
                   "q must be [B, next_n, H, D] with H (heads) in {{16, 32, 64}}, got a {}", describe(q));
    if (fp4)
        DG_CHECK_INPUT(head_dim == 64 || head_dim == 128,
                       "q[0] (q, packed FP4) must be [B, next_n, H, D / 2] with D (head dim) in {{64, 128}}, got a {}",
                       describe(q));
    else
        DG_CHECK_INPUT(head_dim == 32 || head_dim == 64 || head_dim == 128,
                       "q must be [B, next_n, H, D] with D (head dim) in {{32, 64, 128}}, got a {}", describe(q));
    DG_CHECK_INPUT(q.is_contiguous(), "q must be contiguous, got a {}", describe(q));
    if (fp4) {
        check_defined(*q_scales, "q[1] (q scales)");
        check_dtype(*q_scales, at::kInt, "q[1] (q scales, packed UE8M0)");
        DG_CHECK_INPUT(q_scales->dim() == 3 && q_scales->size(0) == batch && q_scales->size(1) == next_n &&
                           q_scales->size(2) == num_heads,
                       "q[1] (q scales) must be [B, next_n, H] = [{}, {}, {}] (an int32 of D / 32 UE8M0 exponents per "
                       "head row), got a {}", batch, next_n, num_heads, describe(*q_scales));
        DG_CHECK_INPUT(q_scales->is_contiguous(), "q[1] (q scales) must be contiguous, got a {}", describe(*q_scales));
    }
    // kv_cache [num_blocks, block_kv, 1, D + 4] (FP4: D / 2 + 4)
    check_defined(kv_cache, "kv_cache");
    check_dim(kv_cache, 4, "kv_cache");
    check_dtype(kv_cache, at::kByte, "kv_cache");
    const int64_t num_kv_blocks = kv_cache.size(0), block_kv = kv_cache.size(1);
    const char* row_form = fp4 ? "D / 2 + 4" : "D + 4";
    DG_CHECK_INPUT((block_kv == 32 || block_kv == 64) && kv_cache.size(2) == 1 && kv_cache.size(3) == row_bytes + 4,
                   "kv_cache must be [num_blocks, block_kv, 1, {}] with block_kv in {{32, 64}} and D = {} (q's head "
                   "dim), got a {}", row_form, head_dim, describe(kv_cache));
    DG_CHECK_INPUT(num_kv_blocks >= 1, "kv_cache must hold at least one block, got a {}", describe(kv_cache));
    // Each block packed (its block_kv x D values, then its block_kv scales); blocks any 16-byte multiple apart
    const int64_t block_bytes = block_kv * (row_bytes + 4);
    const int64_t block_stride = num_kv_blocks == 1 ? block_bytes : kv_cache.stride(0);
    DG_CHECK_INPUT(kv_cache.stride(3) == 1 && kv_cache.stride(1) == row_bytes + 4 && block_stride >= block_bytes &&
                       block_stride % 16 == 0,
                   "kv_cache must have its inner dims packed (stride 3 = 1, stride 1 = {} = {}) and blocks a "
                   "multiple of 16 bytes apart, at least block_kv * ({}) = {} (stride 0), got a {}", row_form,
                   row_bytes + 4, row_form, block_bytes, describe(kv_cache));
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(kv_cache.data_ptr()) % 16 == 0,
                   "kv_cache: data pointer must be 16-byte aligned for TMA, got a {}", describe(kv_cache));
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(q.data_ptr()) % 16 == 0 || q.numel() == 0,
                   "q: data pointer must be 16-byte aligned for TMA, got a {}", describe(q));
    // weights [B * T, H]
    check_defined(weights, "weights");
    check_dtype(weights, at::kFloat, "weights");
    DG_CHECK_INPUT(weights.dim() == 2 && weights.size(0) == batch * next_n && weights.size(1) == num_heads,
                   "weights must be [B * next_n, H] = [{}, {}], got a {}", batch * next_n, num_heads, describe(weights));
    DG_CHECK_INPUT(weights.stride(1) == 1, "weights must be contiguous along H (stride 1), got a {}", describe(weights));
    DG_CHECK_INPUT(weights.stride(0) >= 0 && weights.stride(0) <= INT32_MAX,
                   "weights: row stride must be in [0, 2^31), got a {}", describe(weights));
    // context_lens [B] or [B, T], block_table [B, max_blocks], schedule_meta [n + 1, 2]
    check_defined(context_lens, "context_lens");
    check_dtype(context_lens, at::kInt, "context_lens");
    DG_CHECK_INPUT((context_lens.dim() == 1 && context_lens.size(0) == batch) ||
                       (context_lens.dim() == 2 && context_lens.size(0) == batch && context_lens.size(1) == next_n),
                   "context_lens must be [B] = [{}] or [B, next_n] = [{}, {}], got a {}", batch, batch, next_n,
                   describe(context_lens));
    DG_CHECK_INPUT(context_lens.is_contiguous(), "context_lens must be contiguous, got a {}", describe(context_lens));
    check_defined(block_table, "block_table");
    check_dtype(block_table, at::kInt, "block_table");
    if (indices.has_value()) {
        check_token_indices(*indices, batch, next_n);
        DG_CHECK_INPUT(block_table.dim() == 2 && (block_table.size(0) >= 1 || batch == 0),
                       "block_table must be [R, max_blocks] with R >= 1 requests (rows named by indices), got a {}",
                       describe(block_table));
    } else {
        DG_CHECK_INPUT(block_table.dim() == 2 && block_table.size(0) == batch,
                       "block_table must be [B, max_blocks] with B = {}, got a {}", batch, describe(block_table));
    }
    DG_CHECK_INPUT((block_table.stride(1) == 1 || block_table.size(1) <= 1) && block_table.stride(0) >= 0,
                   "block_table must be contiguous along max_blocks (stride 1 = 1; rows may be strided, e.g. "
                   "block_tables[::next_n]), got a {}", describe(block_table));
    check_defined(schedule_meta, "schedule_meta");
    check_dtype(schedule_meta, at::kInt, "schedule_meta");
    DG_CHECK_INPUT(schedule_meta.dim() == 2 && schedule_meta.size(0) >= 2 && schedule_meta.size(0) <= 65537 &&
                       schedule_meta.size(1) == 2,
                   "schedule_meta must be [num_sms + 1, 2] (from get_paged_mqa_logits_metadata), got a {}",
                   describe(schedule_meta));
    DG_CHECK_INPUT(schedule_meta.is_contiguous(), "schedule_meta must be contiguous, got a {}", describe(schedule_meta));
    DG_CHECK_INPUT(max_context_len >= 0 && max_context_len < INT32_MAX,
                   "max_context_len must be in [0, 2^31 - 1), got {}", max_context_len);
    DG_CHECK_INPUT(batch * next_n < INT32_MAX && num_kv_blocks * block_kv < INT32_MAX &&
                       block_table.size(0) < INT32_MAX && block_table.size(1) < INT32_MAX,
                   "B * next_n, the cache's keys and block_table's dims must each be below 2^31");
    DG_CHECK_INPUT(logits_dtype == at::kFloat || logits_dtype == at::kBFloat16,
                   "logits_dtype must be torch.float32 or torch.bfloat16, got {}", dtype_name(logits_dtype));
    DG_CHECK_INPUT(context_lens.device() == block_table.device(),
                   "block_table must be on the same device as context_lens ({}), got {}", context_lens.device().str(),
                   block_table.device().str());
    if (indices.has_value())
        DG_CHECK_INPUT(indices->device() == context_lens.device(),
                       "indices must be on the same device as context_lens ({}), got {}", context_lens.device().str(),
                       indices->device().str());
    check_paged_values(context_lens, block_table, indices, block_kv, num_kv_blocks, max_context_len);

    // Devices last
    check_same_cuda_device(q, "q", {{&kv_cache, "kv_cache"}, {&weights, "weights"}, {&context_lens, "context_lens"},
                                    {&block_table, "block_table"}, {&schedule_meta, "schedule_meta"}});
    if (indices.has_value())
        check_same_cuda_device(q, "q", {{&*indices, "indices"}});
    if (fp4)
        check_same_cuda_device(q, "q", {{q_scales, "q[1] (q scales)"}});
    check_sm90(q, api);
    const jit::DeviceScope device_scope(q.device().index());

    at::Tensor logits = at::empty({batch * next_n, max_context_len}, q.options().dtype(logits_dtype));
    if (batch == 0 || max_context_len == 0)
        return logits;
    kernels::launch_sm90_fp8_paged_mqa_logits(
        {q, kv_cache, weights, context_lens, block_table, indices, schedule_meta, logits, clean_logits, q_scales});
    return logits;
}

inline at::Tensor fp8_paged_mqa_logits(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& weights,
                                       const at::Tensor& context_lens, const at::Tensor& block_table,
                                       const at::Tensor& schedule_meta, int64_t max_context_len, bool clean_logits,
                                       const std::optional<at::Tensor>& indices, at::ScalarType logits_dtype) {
    return paged_mqa_logits(q, nullptr, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                            clean_logits, indices, logits_dtype, "fp8_paged_mqa_logits");
}

inline at::Tensor fp8_fp4_paged_mqa_logits(const std::tuple<at::Tensor, std::optional<at::Tensor>>& q_pair,
                                           const at::Tensor& kv_cache, const at::Tensor& weights,
                                           const at::Tensor& context_lens, const at::Tensor& block_table,
                                           const at::Tensor& schedule_meta, int64_t max_context_len, bool clean_logits,
                                           at::ScalarType logits_dtype, const std::optional<at::Tensor>& indices) {
    // q = (values, scales or None): None is FP8 q (fp8_paged_mqa_logits); scales given is FP4 q and cache
    const auto& [q, q_scales] = q_pair;
    return paged_mqa_logits(q, q_scales.has_value() ? &*q_scales : nullptr, kv_cache, weights, context_lens,
                            block_table, schedule_meta, max_context_len, clean_logits, indices, logits_dtype,
                            q_scales.has_value() ? "fp8_fp4_paged_mqa_logits" : "fp8_paged_mqa_logits");
}

}  // namespace dg::apis
