// einsum (BF16) and fp8_einsum for the expressions the reference serves on SM90, on the shared SM90 GEMM kernel.
//   bmk,bnk->mn   D = sum_b A[b] @ B[b]^T (a reduction over the batch), FP32 accumulation.
//   bhr,hdr->bhd  per head h: D[:, h, :] = A[:, h, :] @ B[h]^T   (MLA absorbed projections; b = tokens)
//   bhd,hdr->bhr  per head h: D[:, h, :] = A[:, h, :] @ B[h]     (B[h] read MN-major, no transposing copy)
// fp8_einsum: bhr,hdr->bhd with FP8 operands, activations scaled per 1 x 128 and weights per 128 x 128 of each
// head, BF16 D.
//
// How they run (compositions on the one kernel; no kernel code of their own):
// - the per-head expressions run the m-grouped masked GEMM with the heads as its groups, every group full: A is
//   copied heads-first into [h, max_m, .] (max_m = b rounded up to whole 64-row blocks), the GEMM writes
//   [h, max_m, .], and that is copied into D's [b, h, .] layout. One GEMM launch over all heads (a launch per
//   head leaves most SMs idle: h = 128 GEMMs of a few tiles each), at the cost of the two copies (A and D once
//   more through memory, and scratch of their size). (The kernel's batched mode, 3-D TMA maps over A and D with
//   their own strides, drops the copies: written, not yet the default, see einsum_batched below.) B is read in
//   place: [h, d, r] is the masked GEMM's [G, N, K] (bhr) or, as its transpose, an MN-major [G, K, N] (bhd), which
//   BF16 wgmma reads from shared memory as it is.
// - bmk,bnk->mn launches the plain GEMM once per batch entry, accumulating in FP32 in place (C = D, which the
//   kernel adds with TMA reduce-adds); or (einsum_batched, opt-in until it has run on a GPU) one launch of the
//   kernel's K-batched mode, whose K loop runs over every entry's K blocks (A [b, m, k], B [b, n, k] through 3-D maps). Not the k-grouped mode: it writes one D per group rather than their sum,
//   and its BF16 form reads MN-major operands, while A[b] / B[b] here are K-major. Not a single GEMM over the
//   concatenated K either: [S, M, K] is no 2-D [M, S * K] view (its batch stride is M * K, not K).
// use_cublaslt=True serves the per-head expressions through PyTorch's batched matmul (cuBLAS), the vendor baseline.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/sm90_gemm.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"
#include "runtime.hpp"
#include "grouped_gemm.hpp"
#include "layout.hpp"

namespace dg::apis {

namespace detail {

enum class EinsumExpr { kBmkBnkMn, kBhrHdrBhd, kBhdHdrBhr };

inline EinsumExpr parse_einsum_expr(const std::string& expr) {
    if (expr == "bmk,bnk->mn")
        return EinsumExpr::kBmkBnkMn;
    if (expr == "bhr,hdr->bhd")
        return EinsumExpr::kBhrHdrBhd;
    if (expr == "bhd,hdr->bhr")
        return EinsumExpr::kBhdHdrBhr;
    throw InputError(fmt::format("expr must be one of 'bmk,bnk->mn', 'bhr,hdr->bhd', 'bhd,hdr->bhr' (written "
                                 "exactly so), got '{}'", expr));
}

// A 3-D operand whose 2-D slices the kernel reads by TMA: last dimension contiguous, the other strides multiples
// of 16 bytes (each slice's row stride, and the step between slices' base addresses), 16-byte aligned start.
inline void check_einsum_operand(const at::Tensor& t, const char* name, at::ScalarType dtype, const char* shape) {
    check_defined(t, name);
    check_dim(t, 3, name);
    check_dtype(t, dtype, name);
    check_k_major_tma(t, name, "last dimension contiguous", shape);
}

inline void check_einsum_sizes(const at::Tensor& t, const char* name, const char* shape,
                               std::initializer_list<int64_t> sizes) {
    DG_CHECK_INPUT(t.sizes().equals(sizes), "{} must be {} = [{}], got a {}", name, shape, fmt::join(sizes, ", "),
                   describe(t));
}

// One launch of the BF16 GEMM D = C + A @ B^T on 2-D views (A [M, K] K-major; B [N, K], K-major or MN-major).
inline void run_bf16_slice(const at::Tensor& a, const at::Tensor& b_nk, bool mn_major_b, const at::Tensor& d,
                           const at::Tensor* c) {
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, false, mn_major_b, d.scalar_type() == at::kFloat};
    // (N and K are a model's fixed dimensions, the rows the tokens: compiled as the GEMMs' 'nk' default)
    kernels::Sm90GemmRunner::run({a, b_nk, d, c, nullptr, nullptr, operands, false, true, true});
}

// A [groups, rows, cols] scratch tensor, groups stacked densely, its rows padded to 16 bytes (TMA strides).
inline at::Tensor stacked_scratch(int64_t groups, int64_t rows, int64_t cols, const at::TensorOptions& options) {
    const int64_t align = 16 / static_cast<int64_t>(options.dtype().itemsize());
    const int64_t ld = (cols + align - 1) / align * align;
    return at::empty({groups * rows, ld}, options).narrow(1, 0, cols).view({groups, rows, cols});
}

// `t` [G, rows, cols] as the masked GEMM reads a B: itself when its groups are stacked densely, else a copy.
inline at::Tensor stacked_groups(const at::Tensor& t) {
    if (t.stride(0) == t.size(1) * t.stride(1) || t.size(0) == 1)
        return t;
    at::Tensor copy = stacked_scratch(t.size(0), t.size(1), t.size(2), t.options());
    copy.copy_(t);
    return copy;
}

// The batched masked mode (GemmOperands::batched: A [b, h, k] and D [b, h, n] read and written in place through 3-D
// TMA maps, no copies) serves the per-head expressions when DG_TUNE's section of the GEMM's family sets
// einsum_batched=1: it has not run on a GPU yet, so the heads-first copies below stay the default until it has (then
// it becomes the default and the key goes). D's rows and heads must be TMA-addressable (16-byte strides, start).
inline bool einsum_batched(const kernels::GemmOperands& operands, const at::Tensor& d) {
    const auto& tune = tune_settings(operands.is_fp8() ? TuneFamily::kFp8Gemm : TuneFamily::kBf16Gemm);
    const int64_t elem = d.element_size();
    return tune.get("einsum_batched").value_or(0) == 1 &&
           kernels::dense_tma_store_fits(operands, d.size(2), elem, d.stride(0) * elem,
                                         reinterpret_cast<uintptr_t>(d.data_ptr())) &&
           (d.stride(1) * elem) % 16 == 0;
}

// The per-head product on the batched masked mode: every head (group) has all `batch` rows.
inline void run_batched(const at::Tensor& a, const at::Tensor& b_nk, const at::Tensor& d, const at::Tensor* sfa,
                        const at::Tensor* sfb, kernels::GemmOperands operands) {
    const int64_t batch = a.size(0), heads = a.size(1);
    operands.batched = true;
    const at::Tensor masked_m = at::full({heads}, batch, a.options().dtype(at::kInt));
    run_masked({a, b_nk, d, nullptr, sfa, sfb, operands, false, false, true}, masked_m, (batch + 63) / 64 * 64, batch);
}

// The heads-first scratch of the per-head expressions: A [h, max_m, k] holding A[:, h, :] in its first `batch`
// rows (the rows past them are never written by the GEMM: masked_m = batch), D [h, max_m, n], and masked_m.
struct HeadsFirst {
    int64_t max_m;
    at::Tensor a, d, masked_m;
};

inline HeadsFirst heads_first(const at::Tensor& a, int64_t n, const at::TensorOptions& d_options) {
    const int64_t batch = a.size(0), heads = a.size(1), k = a.size(2);
    HeadsFirst s;
    s.max_m = (batch + 63) / 64 * 64;
    s.a = stacked_scratch(heads, s.max_m, k, a.options());
    s.a.narrow(1, 0, batch).copy_(a.transpose(0, 1));
    s.d = stacked_scratch(heads, s.max_m, n, d_options);
    s.masked_m = at::full({heads}, batch, a.options().dtype(at::kInt));
    return s;
}

// D = sum_b A[b] @ B[b]^T (+ D itself when c is d): FP32 accumulation over the batch.
inline void einsum_bmk_bnk_mn(const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                              const std::optional<at::Tensor>& c) {
    check_einsum_operand(a, "a", at::kBFloat16, "[b, m, k]");
    check_einsum_operand(b, "b", at::kBFloat16, "[b, n, k]");
    const int64_t s = a.size(0), m = a.size(1), k = a.size(2), n = b.size(1);
    check_einsum_sizes(b, "b", "[b, n, k] with a's b and k", {s, n, k});
    check_defined(d, "d");
    check_dim(d, 2, "d");
    DG_CHECK_INPUT(d.scalar_type() == at::kBFloat16 || d.scalar_type() == at::kFloat,
                   "d must have dtype torch.bfloat16 or torch.float32, got a {}", describe(d));
    check_einsum_sizes(d, "d", "[m, n]", {m, n});
    DG_CHECK_INPUT(d.stride(1) == 1 || n <= 1, "d must be row-major (stride 1 along n), got a {}", describe(d));
    if (c.has_value()) {
        check_defined(*c, "c");
        DG_CHECK_INPUT(c->data_ptr() == d.data_ptr() && c->sizes() == d.sizes() && c->strides() == d.strides() &&
                       c->scalar_type() == at::kFloat,
                       "c must be None or d itself with FP32 d (D += sum_b A[b] @ B[b]^T in place), got c = {} and "
                       "d = {}", describe(*c), describe(d));
    }
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}});
    DG_CHECK_INPUT(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "m, n and k must each be below 2^31");
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}});
    check_sm90(a, "einsum");
    const jit::DeviceScope device_scope(a.device().index());

    if (m == 0 || n == 0)
        return;
    if (s == 0 || k == 0) {
        if (!c.has_value())
            d.zero_();
        return;
    }
    if (tune_settings(TuneFamily::kBf16Gemm).get("einsum_batched").value_or(0) == 1) {
        // One GEMM whose K loop runs over every batch entry (the K-batched mode: A and B read in place, the sum kept
        // in the accumulators: no D round trip per entry, BF16 D rounded once); opt-in as the per-head mode is
        kernels::GemmOperands operands{kernels::OperandKind::kBf16, false, false, d.scalar_type() == at::kFloat};
        operands.k_batched = true;
        kernels::GemmArgs args{a, b, d, c.has_value() ? &d : nullptr, nullptr, nullptr, operands, false, true, false};
        args.num_groups = static_cast<uint32_t>(s);
        return kernels::Sm90GemmRunner::run(args);
    }
    // FP32 D accumulates in place; BF16 D is rounded once, from an FP32 accumulator
    const at::Tensor acc = d.scalar_type() == at::kFloat ? d : at::empty({m, n}, d.options().dtype(at::kFloat));
    for (int64_t i = 0; i < s; ++i) {
        const at::Tensor a_i = a.select(0, i), b_i = b.select(0, i);
        run_bf16_slice(a_i, b_i, false, acc, i > 0 || c.has_value() ? &acc : nullptr);
    }
    if (!acc.is_same(d))
        d.copy_(acc);
}

// The per-head expressions (A's last dimension is r for bhr,hdr->bhd, d for bhd,hdr->bhr).
inline void einsum_per_head(EinsumExpr expr, const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                            bool use_cublaslt) {
    const bool bhr = expr == EinsumExpr::kBhrHdrBhd;
    const char* a_shape = bhr ? "[b, h, r]" : "[b, h, d]";
    const char* d_shape = bhr ? "[b, h, d]" : "[b, h, r]";
    check_einsum_operand(a, "a", at::kBFloat16, a_shape);
    check_einsum_operand(b, "b", at::kBFloat16, "[h, d, r]");
    const int64_t batch = a.size(0), heads = a.size(1), a_last = a.size(2);
    const int64_t dim_d = b.size(1), dim_r = b.size(2);
    check_einsum_sizes(b, "b", bhr ? "[h, d, r] with a's h and r" : "[h, d, r] with a's h and d",
                       {heads, bhr ? b.size(1) : a_last, bhr ? a_last : b.size(2)});
    check_defined(d, "d");
    check_dim(d, 3, "d");
    check_dtype(d, at::kBFloat16, "d");
    check_einsum_sizes(d, "d", d_shape, {batch, heads, bhr ? dim_d : dim_r});
    DG_CHECK_INPUT(d.stride(2) == 1 || d.size(2) <= 1, "d must be contiguous in its last dimension, got a {}",
                   describe(d));
    check_output_disjoint(d, "d", {{&a, "a"}, {&b, "b"}});
    DG_CHECK_INPUT(heads * ((batch + 63) / 64 * 64) <= INT32_MAX && dim_d <= INT32_MAX && dim_r <= INT32_MAX,
                   "h * b (b rounded up to 64), d and r must each be below 2^31");
    check_same_cuda_device(a, "a", {{&b, "b"}, {&d, "d"}});
    check_sm90(a, "einsum");
    const jit::DeviceScope device_scope(a.device().index());

    if (d.numel() == 0)
        return;
    if (a_last == 0)
        return void(d.zero_());
    if (use_cublaslt) {
        check_not_deterministic("einsum(use_cublaslt=True)");
        // [h, b, .] x [h, ., .] batched over heads, then written into D's [b, h, .] layout
        const at::Tensor by_head = at::bmm(a.transpose(0, 1), bhr ? b.transpose(1, 2) : b);
        d.copy_(by_head.transpose(0, 1));
        return;
    }
    const int64_t n = bhr ? dim_d : dim_r, k = a_last;
    // bhr: B [h, d, r] is [G, N, K] K-major; bhd: B [h, d, r] is [G, K, N], read as its MN-major [G, N, K] transpose
    const at::Tensor b_stacked = stacked_groups(b);
    const at::Tensor b_nk = bhr ? b_stacked : b_stacked.transpose(1, 2);
    const kernels::GemmOperands operands{kernels::OperandKind::kBf16, false, !bhr, false};
    if (einsum_batched(operands, d))
        return run_batched(a, b_nk, d, nullptr, nullptr, operands);
    const HeadsFirst s = heads_first(a, n, d.options());
    // K compiled in, N a runtime value: the masked BF16 kernel with N = 512 compiled in and the 64 x 256 tile the
    // heuristic picks for it spills (ptxas: 228 bytes; with N at run time, none)
    run_masked({s.a.view({heads * s.max_m, k}), b_nk, s.d.view({heads * s.max_m, n}), nullptr, nullptr, nullptr,
                operands, false, false, true}, s.masked_m, s.max_m, batch);
    d.copy_(s.d.narrow(1, 0, batch).transpose(0, 1));
}

}  // namespace detail

inline void einsum(const std::string& expr, const at::Tensor& a, const at::Tensor& b, const at::Tensor& d,
                   const std::optional<at::Tensor>& c, bool use_cublaslt) {
    const detail::EinsumExpr kind = detail::parse_einsum_expr(expr);
    if (kind == detail::EinsumExpr::kBmkBnkMn) {
        DG_CHECK_INPUT(!use_cublaslt, "use_cublaslt=True serves 'bhr,hdr->bhd' and 'bhd,hdr->bhr' only, not '{}'",
                       expr);
        return detail::einsum_bmk_bnk_mn(a, b, d, c);
    }
    DG_CHECK_INPUT(!c.has_value(), "c must be None for '{}' (accumulation is served for 'bmk,bnk->mn' only)", expr);
    detail::einsum_per_head(kind, a, b, d, use_cublaslt);
}

// bhr,hdr->bhd with FP8 operands: a = (A [b, h, r] e4m3, sfa FP32 [b, h, ceil(r/128)]), b = (B [h, d, r] e4m3,
// sfb FP32 [h, ceil(d/128), ceil(r/128)]), D BF16 [b, h, d].
inline void fp8_einsum(const std::string& expr, const TensorPair& a, const TensorPair& b, const at::Tensor& d,
                       const std::optional<at::Tensor>& c, const std::vector<int64_t>& recipe) {
    if (expr == "bhd,hdr->bhr" || expr == "bhd,bhr->hdr")
        throw NotImplementedError(fmt::format("fp8_einsum: '{}' is served on SM100 only (as in the reference); SM90 "
                                              "serves 'bhr,hdr->bhd'", expr));
    DG_CHECK_INPUT(expr == "bhr,hdr->bhd", "expr must be 'bhr,hdr->bhd' (the expression fp8_einsum serves on SM90), "
                   "got '{}'", expr);
    DG_CHECK_INPUT(recipe.size() == 3 && recipe[0] == 1 && recipe[1] == 128 && recipe[2] == 128,
                   "recipe must be (1, 128, 128) (activations per 1 x 128, weights per 128 x 128), got ({})",
                   fmt::join(recipe, ", "));
    DG_CHECK_INPUT(!c.has_value(), "c must be None: fp8_einsum writes BF16 d, without accumulation");
    const auto& [a_data, sfa] = a;
    const auto& [b_data, sfb] = b;
    detail::check_einsum_operand(a_data, "a[0] (A)", at::kFloat8_e4m3fn, "[b, h, r]");
    detail::check_einsum_operand(b_data, "b[0] (B)", at::kFloat8_e4m3fn, "[h, d, r]");
    const int64_t batch = a_data.size(0), heads = a_data.size(1), r = a_data.size(2), dim_d = b_data.size(1);
    detail::check_einsum_sizes(b_data, "b[0] (B)", "[h, d, r] with A's h and r", {heads, dim_d, r});
    const int64_t sf_r = (r + 127) / 128, sf_d = (dim_d + 127) / 128;
    check_scales(sfa, "a[1] (sfa)", {batch, heads, sf_r}, "[b, h, ceil(r/128)]");
    check_scales(sfb, "b[1] (sfb)", {heads, sf_d, sf_r}, "[h, ceil(d/128), ceil(r/128)]");
    check_defined(d, "d");
    check_dim(d, 3, "d");
    check_dtype(d, at::kBFloat16, "d");
    detail::check_einsum_sizes(d, "d", "[b, h, d]", {batch, heads, dim_d});
    DG_CHECK_INPUT(d.stride(2) == 1 || dim_d <= 1, "d must be contiguous in its last dimension, got a {}", describe(d));
    check_output_disjoint(d, "d", {{&a_data, "a[0] (A)"}, {&b_data, "b[0] (B)"}, {&sfa, "a[1] (sfa)"},
                                   {&sfb, "b[1] (sfb)"}});
    DG_CHECK_INPUT(heads * ((batch + 63) / 64 * 64) <= INT32_MAX && dim_d <= INT32_MAX && r <= INT32_MAX,
                   "h * b (b rounded up to 64), d and r must each be below 2^31");
    check_same_cuda_device(a_data, "a[0] (A)", {{&b_data, "b[0] (B)"}, {&d, "d"}, {&sfa, "a[1] (sfa)"},
                                                {&sfb, "b[1] (sfb)"}});
    check_sm90(a_data, "fp8_einsum");
    const jit::DeviceScope device_scope(a_data.device().index());

    if (d.numel() == 0)
        return;
    if (r == 0)
        return void(d.zero_());
    // A's scales straight into the layout the kernel reads, MN-major per K block over all heads' rows (each head
    // max_m rows apart): [ceil(r/128)][h * max_m] (one copy of the small scale tensor)
    const int64_t max_m = (batch + 63) / 64 * 64;
    const at::Tensor sfa_rows = at::empty({sf_r, heads * max_m}, sfa.options());
    sfa_rows.view({sf_r, heads, max_m}).narrow(2, 0, batch).copy_(sfa.permute({2, 1, 0}));
    const at::Tensor sfa_mn_major = sfa_rows.t();  // [h * max_m, ceil(r/128)]
    const at::Tensor b_stacked = detail::stacked_groups(b_data);
    const at::Tensor sfb_rows = sfb.contiguous();
    if (detail::einsum_batched(kernels::fp8_operands(false), d))
        return detail::run_batched(a_data, b_stacked, d, &sfa_mn_major, &sfb_rows, kernels::fp8_operands(false));
    // Heads first as for the BF16 expressions
    const detail::HeadsFirst s = detail::heads_first(a_data, dim_d, d.options());
    detail::run_masked({s.a.view({heads * s.max_m, r}), b_stacked, s.d.view({heads * s.max_m, dim_d}), nullptr,
                        &sfa_mn_major, &sfb_rows, kernels::fp8_operands(false), false, true, true},
                       s.masked_m, s.max_m, batch);
    d.copy_(s.d.narrow(1, 0, batch).transpose(0, 1));
}

}  // namespace dg::apis
