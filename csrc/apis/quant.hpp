// The FP8 casts as kernels (jit_kernels/impls/smxx_quant.hpp): per-token (1 x 128 or 1 x 32 scales, FP32 or UE8M0,
// packed UE8M0, K-major or the GEMMs' MN-major TMA-aligned scale layout), the fused SwiGLU + per-token cast of the
// MoE intermediate (contiguous or masked), and the 128 x 128 block cast. Bit-exact with deep_gemm.utils.casts.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/smxx_quant.hpp"
#include "../utils/tensor_checks.hpp"
#include "layout.hpp"

namespace dg::apis {

namespace detail {

// x of a cast: BF16 or FP32, 2-D [M, K] or 3-D [G, M, K] (the checks that need no device).
inline void check_quant_input(const at::Tensor& x, const char* fn) {
    check_defined(x, "x");
    DG_CHECK_INPUT(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat,
                   "{}: x must have dtype torch.bfloat16 or torch.float32, got a {}", fn, describe(x));
    DG_CHECK_INPUT(x.dim() == 2 || x.dim() == 3, "{}: x must be 2-D [M, K] or 3-D [G, M, K], got a {}", fn,
                   describe(x));
    DG_CHECK_INPUT(x.size(-2) <= INT32_MAX && x.size(-1) <= INT32_MAX, "{}: x: M and K must be below 2^31, got a {}",
                   fn, describe(x));
}

// x on a CUDA device of SM90 or newer; returns x with stride 1 along K (a copy when it had another).
inline at::Tensor quant_input_on_device(const at::Tensor& x, const char* fn) {
    check_cuda(x, "x");
    const int major = jit::DeviceRuntime::instance().properties(x.device().index()).major;
    if (major < 9)
        throw NotImplementedError(fmt::format("{}: the FP8 cast kernels need SM90 or newer; this device is SM{}x (the "
                                              "PyTorch casts in deep_gemm.utils.casts run anywhere)", fn, major));
    return x.stride(-1) == 1 || x.size(-1) <= 1 ? x : x.contiguous();
}

inline void check_gran_k(int64_t gran_k, bool use_ue8m0, bool use_packed_ue8m0, const char* fn) {
    DG_CHECK_INPUT(gran_k == 32 || gran_k == 128, "{}: gran_k must be 32 or 128 for the kernels, got {}", fn, gran_k);
    DG_CHECK_INPUT(!use_packed_ue8m0 || use_ue8m0,
                   "{}: use_packed_ue8m0=True needs use_ue8m0=True (power-of-two scales)", fn);
}

// Whether x's rows (and batches) start 16-byte aligned and K is a multiple of 8: 16-byte loads and 8-byte stores.
inline bool rows_aligned(const at::Tensor& x, int64_t k) {
    const int64_t elem = x.element_size();
    const bool batches_ok = x.dim() == 2 || x.size(0) <= 1 || (x.stride(0) * elem) % 16 == 0;
    const bool rows_ok = x.size(-2) <= 1 || (x.stride(-2) * elem) % 16 == 0;
    return k % 8 == 0 && batches_ok && rows_ok && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

// The scale tensor of a per-token cast of [G?, M, K] and where the kernel writes it: FP32 [G?, M, SF_K] (or int32
// [G?, M, ceil(SF_K / 4)] packed), K-major contiguous, or MN-major with the M stride padded to 16 bytes, the layout
// get_mn_major_tma_aligned_tensor returns (storage [G, words, align(M, 4)], the padding rows zeroed by the kernel).
inline at::Tensor new_per_token_sf(const at::Tensor& x, int64_t m, int64_t sf_k, bool packed, bool mn_major,
                                   deep_gemm::PerTokenQuantParams& params) {
    const bool batched = x.dim() == 3;
    const int64_t g = batched ? x.size(0) : 1;
    const int64_t words = packed ? (sf_k + 3) / 4 : sf_k;
    const auto options = x.options().dtype(packed ? at::kInt : at::kFloat);
    at::Tensor sf;
    if (mn_major) {
        const int64_t aligned_m = get_tma_aligned_size(m, 4);
        auto storage = at::empty({g, words, aligned_m}, options);
        sf = storage.transpose(1, 2).narrow(1, 0, m);
        params.sf_stride_batch = words * aligned_m, params.sf_stride_row = 1, params.sf_stride_k = aligned_m;
        params.sf_padding_rows = static_cast<uint32_t>(aligned_m - m);
    } else {
        sf = at::empty({g, m, words}, options);
        params.sf_stride_batch = m * words, params.sf_stride_row = words, params.sf_stride_k = 1;
    }
    params.sf = sf.data_ptr();
    return batched ? sf : sf.squeeze(0);
}

// What both per-token casts share: x (rows of `input_cols` values, of which the cast reads num_cols per row, or
// 2 * num_cols with SwiGLU) -> (e4m3 [G?, M, num_cols], scales), launched.
inline std::tuple<at::Tensor, at::Tensor> per_token_cast(const at::Tensor& x, int64_t num_cols, bool use_ue8m0,
                                                         int64_t gran_k, bool use_packed_ue8m0, bool sf_mn_major,
                                                         bool swiglu, const std::optional<at::Tensor>& row_weights,
                                                         std::optional<double> activation_clamp,
                                                         const std::optional<at::Tensor>& masked_m, bool fp4 = false) {
    const bool batched = x.dim() == 3;
    const int64_t g = batched ? x.size(0) : 1, m = x.size(-2);
    const int64_t sf_k = (num_cols + gran_k - 1) / gran_k;
    deep_gemm::PerTokenQuantParams params{};
    // (FP4: two codes a byte, int8 [G?, M, K / 2], as deep_gemm.utils.per_token_cast_to_fp4 returns)
    const int64_t out_cols = fp4 ? num_cols / 2 : num_cols;
    std::vector<int64_t> out_shape = batched ? std::vector<int64_t>{g, m, out_cols} : std::vector<int64_t>{m, out_cols};
    auto out = at::empty(out_shape, x.options().dtype(fp4 ? at::kChar : at::kFloat8_e4m3fn));
    auto sf = new_per_token_sf(x, m, sf_k, use_packed_ue8m0, sf_mn_major, params);

    params.x = x.data_ptr();
    params.x_stride_batch = batched ? x.stride(0) : 0;
    params.x_stride_row = x.stride(-2);
    params.out = static_cast<uint8_t*>(out.data_ptr());
    params.out_stride_batch = m * out_cols;
    params.out_stride_row = out_cols;
    params.num_batches = static_cast<uint32_t>(g);
    params.num_rows = static_cast<uint32_t>(m);
    params.num_cols = static_cast<uint32_t>(num_cols);
    params.num_sf_k = static_cast<uint32_t>(sf_k);
    params.masked_m = masked_m.has_value() ? masked_m->data_ptr<int32_t>() : nullptr;
    params.row_weights = row_weights.has_value() ? row_weights->data_ptr<float>() : nullptr;
    params.has_clamp = activation_clamp.has_value() ? 1 : 0;
    params.activation_clamp = activation_clamp.has_value() ? static_cast<float>(*activation_clamp) : 0.0f;

    kernels::PerTokenQuantVariant variant;
    variant.gran_k = static_cast<uint32_t>(gran_k);
    variant.fp32_input = x.scalar_type() == at::kFloat;
    variant.ue8m0 = use_ue8m0;
    variant.packed_ue8m0 = use_packed_ue8m0;
    variant.swiglu = swiglu;
    variant.aligned = rows_aligned(x, num_cols);
    variant.fp4 = fp4;
    if (g > 0 && m > 0 && num_cols > 0) {
        const jit::DeviceScope device_scope(x.device().index());
        kernels::launch_per_token_quant(x.device().index(), variant, params);
    }
    return {out, sf};
}

}  // namespace detail

inline std::tuple<at::Tensor, at::Tensor> per_token_quant_fp8(const at::Tensor& x_in, bool use_ue8m0, int64_t gran_k,
                                                              bool use_packed_ue8m0, bool sf_mn_major) {
    constexpr const char* fn = "per_token_quant_fp8";
    detail::check_gran_k(gran_k, use_ue8m0, use_packed_ue8m0, fn);
    detail::check_quant_input(x_in, fn);
    const at::Tensor x = detail::quant_input_on_device(x_in, fn);
    return detail::per_token_cast(x, x.size(-1), use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major, false,
                                  std::nullopt, std::nullopt, std::nullopt);
}

inline std::tuple<at::Tensor, at::Tensor> per_token_quant_fp4(const at::Tensor& x_in, bool use_ue8m0, int64_t gran_k,
                                                              bool use_packed_ue8m0, bool sf_mn_major) {
    constexpr const char* fn = "per_token_quant_fp4";
    detail::check_gran_k(gran_k, use_ue8m0, use_packed_ue8m0, fn);
    detail::check_quant_input(x_in, fn);
    DG_CHECK_INPUT(x_in.size(-1) % 2 == 0, "{}: x: K must be even (two FP4 values to a byte), got a {}", fn,
                   describe(x_in));
    const at::Tensor x = detail::quant_input_on_device(x_in, fn);
    return detail::per_token_cast(x, x.size(-1), use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major, false,
                                  std::nullopt, std::nullopt, std::nullopt, true);
}

inline std::tuple<at::Tensor, at::Tensor> silu_and_mul_quant_fp8(const at::Tensor& x_in, bool use_ue8m0,
                                                                 int64_t gran_k, bool use_packed_ue8m0,
                                                                 const std::optional<at::Tensor>& row_weights,
                                                                 std::optional<double> activation_clamp,
                                                                 const std::optional<at::Tensor>& masked_m,
                                                                 bool sf_mn_major) {
    constexpr const char* fn = "silu_and_mul_quant_fp8";
    detail::check_gran_k(gran_k, use_ue8m0, use_packed_ue8m0, fn);
    detail::check_quant_input(x_in, fn);
    const at::Tensor& x = x_in;
    DG_CHECK_INPUT(x.size(-1) % 2 == 0, "{}: x must be [..., 2 * I] (gate then up), its last dim must be even, got a "
                   "{}", fn, describe(x));
    const bool batched = x.dim() == 3;
    const int64_t g = batched ? x.size(0) : 1, m = x.size(-2);
    if (masked_m.has_value()) {
        const at::Tensor& mm = *masked_m;
        check_defined(mm, "masked_m");
        DG_CHECK_INPUT(batched, "{}: masked_m needs a 3-D x [G, M_max, 2 * I] (the masked layout), got a {}", fn,
                       describe(x));
        check_dtype(mm, at::kInt, "masked_m");
        DG_CHECK_INPUT(mm.dim() == 1 && mm.size(0) == g && mm.is_contiguous(),
                       "masked_m must be a contiguous int32 [G] with G = {} (x's groups), got a {}", g, describe(mm));
    }
    if (row_weights.has_value()) {
        const at::Tensor& w = *row_weights;
        check_defined(w, "row_weights");
        check_dtype(w, at::kFloat, "row_weights");
        const bool shape_ok = batched ? (w.dim() == 2 && w.size(0) == g && w.size(1) == m) : (w.dim() == 1 && w.size(0) == m);
        DG_CHECK_INPUT(shape_ok && w.is_contiguous(), "row_weights must be a contiguous float32 {} (one weight per row "
                       "of x), got a {}", batched ? fmt::format("[{}, {}]", g, m) : fmt::format("[{}]", m), describe(w));
    }
    if (activation_clamp.has_value())
        DG_CHECK_INPUT(*activation_clamp >= 0 && std::isfinite(*activation_clamp),
                       "{}: activation_clamp must be None or a finite value >= 0, got {}", fn, *activation_clamp);
    const at::Tensor x_dev = detail::quant_input_on_device(x_in, fn);
    if (masked_m.has_value())
        check_same_device(*masked_m, x_dev, "masked_m", "x");
    if (row_weights.has_value())
        check_same_device(*row_weights, x_dev, "row_weights", "x");
    return detail::per_token_cast(x_dev, x_dev.size(-1) / 2, use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major, true,
                                  row_weights, activation_clamp, masked_m);
}

inline std::tuple<at::Tensor, at::Tensor> per_block_quant_fp8(const at::Tensor& x_in, bool use_ue8m0) {
    constexpr const char* fn = "per_block_quant_fp8";
    detail::check_quant_input(x_in, fn);
    const at::Tensor x = detail::quant_input_on_device(x_in, fn);
    const bool batched = x.dim() == 3;
    const int64_t g = batched ? x.size(0) : 1, n = x.size(-2), k = x.size(-1);
    auto out = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));
    std::vector<int64_t> sf_shape = {(n + 127) / 128, (k + 127) / 128};
    if (batched)
        sf_shape.insert(sf_shape.begin(), g);
    auto sf = at::empty(sf_shape, x.options().dtype(at::kFloat));
    if (g == 0 || n == 0 || k == 0)
        return {out, sf};
    deep_gemm::PerBlockQuantParams params{};
    params.x = x.data_ptr();
    params.x_stride_batch = batched ? x.stride(0) : 0;
    params.x_stride_row = x.stride(-2);
    params.out = static_cast<uint8_t*>(out.data_ptr());
    params.sf = sf.data_ptr<float>();
    params.num_batches = static_cast<uint32_t>(g);
    params.num_rows = static_cast<uint32_t>(n);
    params.num_cols = static_cast<uint32_t>(k);
    kernels::PerBlockQuantVariant variant;
    variant.fp32_input = x.scalar_type() == at::kFloat;
    variant.ue8m0 = use_ue8m0;
    variant.aligned = detail::rows_aligned(x, k);
    const jit::DeviceScope device_scope(x.device().index());
    kernels::launch_per_block_quant(x.device().index(), variant, params);
    return {out, sf};
}

}  // namespace dg::apis
