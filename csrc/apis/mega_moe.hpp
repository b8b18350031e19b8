// Mega MoE stage 1: the extension's internal steps (route + gather, SwiGLU + quantize, combine) that
// deep_gemm/mega/moe.py strings together with the m-grouped GEMMs and the group barriers. The public functions and
// their full argument checks are in Python (deep_gemm.mega); these check what the kernels need to stay in bounds.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/smxx_mega_moe.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"

namespace dg::apis {

namespace detail {

// The layout as deep_gemm/mega/layout.py's MegaMoeBufferLayout.kernel_layout(rank) lists it (15 integers).
inline deep_gemm::MegaMoeLayout mega_moe_layout(const std::vector<int64_t>& v) {
    DG_CHECK_INPUT(v.size() == 15, "layout must list 15 integers (MegaMoeBufferLayout.kernel_layout), got {}", v.size());
    for (size_t i = 0; i < v.size(); ++i)
        DG_CHECK_INPUT(v[i] >= 0, "layout[{}] must be non-negative, got {}", i, v[i]);
    deep_gemm::MegaMoeLayout l{};
    l.num_tokens_offset = v[0], l.x_offset = v[1], l.x_sf_offset = v[2], l.topk_idx_offset = v[3];
    l.topk_weights_offset = v[4], l.combine_row_offset = v[5], l.l2_out_offset = v[6];
    l.max_tokens = static_cast<uint32_t>(v[7]), l.num_topk = static_cast<uint32_t>(v[8]);
    l.hidden = static_cast<uint32_t>(v[9]), l.num_experts = static_cast<uint32_t>(v[10]);
    l.num_local_experts = static_cast<uint32_t>(v[11]), l.rank = static_cast<uint32_t>(v[12]);
    l.num_ranks = static_cast<uint32_t>(v[13]), l.x_format = static_cast<uint32_t>(v[14]);
    DG_CHECK_INPUT(v[14] <= deep_gemm::kMegaMoeXFp8Ue8m0x32, "layout: x format must be 0 (BF16), 1 (FP8, FP32 1x128 "
                   "scales) or 2 (FP8, packed UE8M0 1x32 scales), got {}", v[14]);
    DG_CHECK_INPUT(l.num_ranks >= 1 && l.rank < l.num_ranks, "layout: rank {} of {} ranks", l.rank, l.num_ranks);
    DG_CHECK_INPUT(l.num_local_experts >= 1 && l.num_local_experts <= deep_gemm::kMegaMoeMaxLocalExperts &&
                   l.num_local_experts * l.num_ranks == l.num_experts,
                   "layout: {} local experts of {} on {} ranks (1 to {} per rank)", l.num_local_experts,
                   l.num_experts, l.num_ranks, deep_gemm::kMegaMoeMaxLocalExperts);
    DG_CHECK_INPUT(l.hidden % 128 == 0 && l.hidden > 0, "layout: hidden must be a positive multiple of 128, got {}",
                   l.hidden);
    DG_CHECK_INPUT(static_cast<int64_t>(l.max_tokens) * l.num_topk * l.num_ranks <= INT32_MAX,
                   "layout: num_max_tokens_per_rank * num_topk * num_ranks must be below 2^31");
    return l;
}

// peers: int64 [num_ranks] on the device, the ranks' buffer base addresses.
inline const uint64_t* mega_moe_peers(const at::Tensor& peers, const deep_gemm::MegaMoeLayout& layout) {
    check_cuda(peers, "peers");
    check_dtype(peers, at::kLong, "peers");
    DG_CHECK_INPUT(peers.dim() == 1 && peers.size(0) == layout.num_ranks && peers.is_contiguous(),
                   "peers must be a contiguous int64 [{}] (one base address per rank), got a {}", layout.num_ranks,
                   describe(peers));
    return reinterpret_cast<const uint64_t*>(peers.data_ptr<int64_t>());
}

inline void check_int32_vector(const at::Tensor& t, int64_t size, const char* name) {
    check_cuda(t, name);
    check_dtype(t, at::kInt, name);
    DG_CHECK_INPUT(t.dim() == 1 && t.size(0) >= size && t.is_contiguous(),
                   "{} must be a contiguous int32 vector of at least {} entries, got a {}", name, size, describe(t));
}

// A's rows as the GEMM sees them: [num_rows, cols] row-major of `dtype`, and its MN-major scales [cols / 128] x
// sf_stride (FP8 only).
inline void check_rows(const at::Tensor& t, int64_t num_rows, int64_t cols, const char* name) {
    check_cuda(t, name);
    DG_CHECK_INPUT(t.dim() == 2 && t.size(0) >= num_rows && t.size(1) == cols && t.stride(1) == 1 &&
                   t.stride(0) == cols, "{} must be a dense [>= {}, {}] row-major tensor, got a {}", name, num_rows,
                   cols, describe(t));
}

// An MN-major scale view [>= num_rows, sf_cols] (stride 1 along rows, sf_stride >= num_rows along columns): its
// pointer and row stride, or (null, 0) when absent.
inline std::pair<float*, uint32_t> mega_moe_sf(const std::optional<at::Tensor>& sf, int64_t num_rows, int64_t sf_cols,
                                               const char* name) {
    if (!sf.has_value())
        return {nullptr, 0};
    check_cuda(*sf, name);
    check_dtype(*sf, at::kFloat, name);
    DG_CHECK_INPUT(sf->dim() == 2 && sf->size(0) >= num_rows && sf->size(1) == sf_cols &&
                   (sf->stride(0) == 1 || sf->size(0) <= 1) && sf->stride(1) >= sf->size(0) && sf->stride(1) <= UINT32_MAX,
                   "{} must be an MN-major FP32 [>= {}, {}] view, got a {}", name, num_rows, sf_cols, describe(*sf));
    return {sf->data_ptr<float>(), static_cast<uint32_t>(sf->stride(1))};
}

}  // namespace detail

// Route every rank's tokens to this rank's experts and gather their rows (kernel steps 1 and 2).
inline void mega_moe_dispatch(const at::Tensor& peers, const std::vector<int64_t>& layout_values, int64_t alignment,
                              int64_t num_rows, const at::Tensor& src_of_row, const at::Tensor& psum_ends,
                              const std::optional<at::Tensor>& recv_stats, const at::Tensor& l1_acts,
                              const std::optional<at::Tensor>& l1_acts_sf) {
    const auto layout = detail::mega_moe_layout(layout_values);
    const uint64_t* peer_ptrs = detail::mega_moe_peers(peers, layout);
    DG_CHECK_INPUT(alignment > 0 && num_rows >= 0 && num_rows % alignment == 0 && num_rows <= INT32_MAX,
                   "num_rows ({}) must be a non-negative multiple of alignment ({})", num_rows, alignment);
    detail::check_int32_vector(src_of_row, num_rows, "src_of_row");
    detail::check_int32_vector(psum_ends, layout.num_local_experts, "psum_ends");
    int32_t* stats = nullptr;
    if (recv_stats.has_value()) {
        detail::check_int32_vector(*recv_stats, layout.num_local_experts, "cumulative_local_expert_recv_stats");
        stats = recv_stats->data_ptr<int32_t>();
    }
    detail::check_rows(l1_acts, num_rows, layout.hidden, "l1_acts");
    const bool fp8 = layout.x_format != deep_gemm::kMegaMoeXBf16;
    DG_CHECK_INPUT(l1_acts.element_size() == (fp8 ? 1 : 2), "l1_acts must have x's element size");
    DG_CHECK_INPUT(fp8 == l1_acts_sf.has_value(), "l1_acts_sf must be given exactly for FP8 dispatch");
    const auto [sf, sf_stride] = detail::mega_moe_sf(l1_acts_sf, num_rows, layout.hidden / 128, "l1_acts_sf");
    check_sm90(peers, "mega_moe_dispatch");
    const jit::DeviceScope device_scope(peers.device().index());
    kernels::launch_mega_moe_dispatch(peers.device().index(), peer_ptrs, layout, static_cast<uint32_t>(alignment),
                                      static_cast<uint32_t>(num_rows), src_of_row.data_ptr<int32_t>(),
                                      psum_ends.data_ptr<int32_t>(), stats, l1_acts.data_ptr(), sf, sf_stride);
}

// SwiGLU (+ clamp, x routing weight) of L1's interleaved output, quantized to FP8 with FP32 1x128 scales (l2_acts_sf
// given; L1's output FP32: the FP8 x FP8 path runs L1 once with per-row B scales), or per 1x32 with UE8M0 scales
// folded to 1x128 (ue8m0_x32; L1's output BF16: the FP8 x FP4 path), or rounded to BF16 (no l2_acts_sf; BF16 input).
inline void mega_moe_swiglu(const at::Tensor& peers, const std::vector<int64_t>& layout_values, int64_t num_rows,
                            int64_t intermediate, const at::Tensor& src_of_row, const at::Tensor& l1_out,
                            const at::Tensor& l2_acts,
                            const std::optional<at::Tensor>& l2_acts_sf, std::optional<double> activation_clamp,
                            bool fast_math, bool ue8m0_x32) {
    const auto layout = detail::mega_moe_layout(layout_values);
    const uint64_t* peer_ptrs = detail::mega_moe_peers(peers, layout);
    DG_CHECK_INPUT(intermediate > 0 && intermediate % 128 == 0,
                   "intermediate_hidden must be a positive multiple of 128, got {}", intermediate);
    DG_CHECK_INPUT(num_rows >= 0 && num_rows <= INT32_MAX, "num_rows must be in [0, 2^31), got {}", num_rows);
    detail::check_int32_vector(src_of_row, num_rows, "src_of_row");
    detail::check_rows(l1_out, num_rows, 2 * intermediate, "l1_out");
    DG_CHECK_INPUT(!ue8m0_x32 || l2_acts_sf.has_value(), "ue8m0_x32 needs l2_acts_sf (FP8 output)");
    const auto out = !l2_acts_sf.has_value() ? deep_gemm::MegaSwigluOut::kBf16
                     : ue8m0_x32            ? deep_gemm::MegaSwigluOut::kFp8Ue8m0x32
                                            : deep_gemm::MegaSwigluOut::kFp8;
    const bool fp32_in = kernels::mega_swiglu_fp32_in(out);
    check_dtype(l1_out, fp32_in ? at::kFloat : at::kBFloat16,
                fp32_in ? "l1_out (FP8 x FP8 path: FP32)" : "l1_out (FP8 x FP4 and BF16 paths: BF16)");
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(l1_out.data_ptr()) % 16 == 0, "l1_out must be 16-byte aligned");
    detail::check_rows(l2_acts, num_rows, intermediate, "l2_acts");
    DG_CHECK_INPUT(l2_acts.element_size() == (l2_acts_sf.has_value() ? 1 : 2),
                   "l2_acts must be FP8 with l2_acts_sf, BF16 without");
    const auto [sf, sf_stride] = detail::mega_moe_sf(l2_acts_sf, num_rows, intermediate / 128, "l2_acts_sf");
    DG_CHECK_INPUT(!activation_clamp.has_value() || *activation_clamp > 0,
                   "activation_clamp must be None or positive, got {}", activation_clamp.value_or(0));
    check_sm90(peers, "mega_moe_swiglu");
    const jit::DeviceScope device_scope(peers.device().index());
    kernels::launch_mega_moe_swiglu(peers.device().index(), peer_ptrs, layout, static_cast<uint32_t>(num_rows),
                                    static_cast<uint32_t>(intermediate), src_of_row.data_ptr<int32_t>(),
                                    l1_out.data_ptr(), l2_acts.data_ptr(), sf, sf_stride,
                                    activation_clamp.has_value(),
                                    static_cast<float>(activation_clamp.value_or(0)), out, fast_math);
}

// mega_moe_pre_dispatch_sm90 on CUDA tensors (deep_gemm.mega checks the public arguments; these are the kernel's
// bounds): x[:num_tokens] to FP8 into buf_x / buf_x_sf (FP32 buf_x_sf: 1x128 scales; int32: UE8M0 1x32 scales packed
// four to a word), the routing into buf_topk_idx / buf_topk_weights (times routed_scaling_factor).
inline void mega_moe_pre_dispatch(const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& topk_weights,
                                  const at::Tensor& buf_x, const at::Tensor& buf_x_sf, const at::Tensor& buf_topk_idx,
                                  const at::Tensor& buf_topk_weights, int64_t num_tokens,
                                  double routed_scaling_factor) {
    for (const auto* t : {&x, &topk_idx, &topk_weights, &buf_x, &buf_x_sf, &buf_topk_idx, &buf_topk_weights})
        DG_CHECK_INPUT(t->dim() == 2, "every tensor must be 2-D, got a {}", describe(*t));
    const int64_t hidden = buf_x.size(1), k = buf_topk_idx.size(1);
    DG_CHECK_INPUT(num_tokens >= 0 && num_tokens <= buf_x.size(0) && num_tokens <= INT32_MAX,
                   "num_tokens must be in [0, {}], got {}", buf_x.size(0), num_tokens);
    DG_CHECK_INPUT(hidden % 128 == 0 && hidden > 0, "buf_x must have hidden a positive multiple of 128, got a {}",
                   describe(buf_x));
    check_dtype(x, at::kBFloat16, "x");
    check_dtype(buf_x, at::kFloat8_e4m3fn, "buf_x");
    const bool sf_packed = buf_x_sf.scalar_type() == at::kInt;
    DG_CHECK_INPUT(sf_packed || buf_x_sf.scalar_type() == at::kFloat, "buf_x_sf must be FP32 (1x128 scales) or int32 "
                   "(packed UE8M0 1x32 scales), got a {}", describe(buf_x_sf));
    check_dtype(buf_topk_idx, at::kLong, "buf_topk_idx");
    check_dtype(buf_topk_weights, at::kFloat, "buf_topk_weights");
    DG_CHECK_INPUT(topk_idx.scalar_type() == at::kLong || topk_idx.scalar_type() == at::kInt,
                   "topk_idx must be int64 or int32, got a {}", describe(topk_idx));
    const auto wt = topk_weights.scalar_type();
    DG_CHECK_INPUT(wt == at::kFloat || wt == at::kBFloat16 || wt == at::kHalf,
                   "topk_weights must be FP32, BF16 or FP16, got a {}", describe(topk_weights));
    DG_CHECK_INPUT(x.size(0) >= num_tokens && x.size(1) == hidden && (x.stride(1) == 1 || hidden == 1) &&
                   x.stride(0) % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 8 == 0,
                   "x must be [>= {}, {}] with unit column stride, 8-byte aligned rows, got a {}", num_tokens, hidden,
                   describe(x));
    DG_CHECK_INPUT(buf_x.stride(1) == 1 && buf_x.stride(0) % 4 == 0 && reinterpret_cast<uintptr_t>(buf_x.data_ptr()) % 4 == 0,
                   "buf_x must have unit column stride and 4-byte aligned rows, got a {}", describe(buf_x));
    DG_CHECK_INPUT(buf_x_sf.size(0) >= num_tokens && buf_x_sf.size(1) == hidden / 128,
                   "buf_x_sf must be [>= {}, {}], got a {}", num_tokens, hidden / 128, describe(buf_x_sf));
    for (const auto& [t, name] : {std::pair{&topk_idx, "topk_idx"}, std::pair{&topk_weights, "topk_weights"},
                                  std::pair{&buf_topk_idx, "buf_topk_idx"}, std::pair{&buf_topk_weights, "buf_topk_weights"}})
        DG_CHECK_INPUT(t->size(0) >= num_tokens && t->size(1) == k, "{} must be [>= {}, {}], got a {}", name, num_tokens,
                       k, describe(*t));
    DG_CHECK_INPUT(std::isfinite(routed_scaling_factor), "routed_scaling_factor must be finite, got {}",
                   routed_scaling_factor);
    check_same_cuda_device(buf_x, "buf_x", {{&x, "x"}, {&topk_idx, "topk_idx"}, {&topk_weights, "topk_weights"},
                                            {&buf_x_sf, "buf_x_sf"}, {&buf_topk_idx, "buf_topk_idx"},
                                            {&buf_topk_weights, "buf_topk_weights"}});
    check_sm90(buf_x, "mega_moe_pre_dispatch_sm90");
    const jit::DeviceScope device_scope(buf_x.device().index());
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    kernels::MegaMoePreDispatchArgs args{
        x.data_ptr(), u(x.stride(0)), topk_idx.data_ptr(), u(topk_idx.stride(0)), u(topk_idx.stride(1)),
        topk_weights.data_ptr(), u(topk_weights.stride(0)), u(topk_weights.stride(1)), buf_x.data_ptr(),
        u(buf_x.stride(0)), buf_x_sf.data_ptr(), u(buf_x_sf.stride(0)), u(buf_x_sf.stride(1)),
        buf_topk_idx.data_ptr<int64_t>(), u(buf_topk_idx.stride(0)), u(buf_topk_idx.stride(1)),
        buf_topk_weights.data_ptr<float>(), u(buf_topk_weights.stride(0)), u(buf_topk_weights.stride(1)),
        static_cast<uint32_t>(num_tokens), static_cast<uint32_t>(hidden), static_cast<uint32_t>(k),
        topk_idx.scalar_type() == at::kLong ? 1u : 0u, wt == at::kFloat ? 0u : wt == at::kBFloat16 ? 1u : 2u,
        static_cast<float>(routed_scaling_factor), sf_packed ? 1u : 0u};
    kernels::launch_mega_moe_pre_dispatch(buf_x.device().index(), args);
}

// y[t] = the sum of token t's top-k expert outputs, read from the experts' ranks (kernel step 6).
inline void mega_moe_combine(const at::Tensor& peers, const std::vector<int64_t>& layout_values, const at::Tensor& y) {
    const auto layout = detail::mega_moe_layout(layout_values);
    const uint64_t* peer_ptrs = detail::mega_moe_peers(peers, layout);
    check_cuda(y, "y");
    check_dtype(y, at::kBFloat16, "y");
    DG_CHECK_INPUT(y.dim() == 2 && y.size(0) <= layout.max_tokens && y.size(1) == layout.hidden && y.stride(1) == 1 &&
                   y.stride(0) % 8 == 0 && reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0,
                   "y must be BF16 [T <= {}, {}] row-major, 16-byte aligned rows, got a {}", layout.max_tokens,
                   layout.hidden, describe(y));
    check_sm90(peers, "mega_moe_combine");
    const jit::DeviceScope device_scope(peers.device().index());
    kernels::launch_mega_moe_combine(peers.device().index(), peer_ptrs, layout, static_cast<uint32_t>(y.size(0)),
                                     y.data_ptr(), static_cast<uint64_t>(y.stride(0)));
}

}  // namespace dg::apis
