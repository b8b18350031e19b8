// FP8 x FP4 GEMM API on SM90 (fp8_fp4_gemm_nt with a packed FP4 B): validate every input, bring B's scales into the
// kernel's layout (UE8M0 exponents packed four to a word, MN-major), launch the SM90 GEMM in its FP8 x FP4 mode.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "gemm.hpp"
#include "value_checks.hpp"

namespace dg::apis {

// Whether `b` of fp8_gemm_nt / fp8_fp4_gemm_nt is packed FP4 (two e2m1 values a byte) rather than e4m3.
inline bool is_packed_fp4(const at::Tensor& b) {
    return b.defined() && (b.scalar_type() == at::kChar || b.scalar_type() == at::kByte);
}

// A packed FP4 B, [N, K / 2] (groups == 0) or [G, N, K / 2], with its scales: FP32 [(G,) N, ceil(K/32)] or packed
// UE8M0 int32 [(G,) N, ceil(K/128)]. K (A's) a multiple of 32: B's rows are 16-byte multiples for TMA.
inline void check_fp4_b(const at::Tensor& b, const at::Tensor& sfb, int64_t groups, int64_t n, int64_t k) {
    DG_CHECK_INPUT(k % 32 == 0, "K (a[0]'s columns) must be a multiple of 32 with a packed FP4 B (16-byte rows of B for "
                   "TMA), got K = {}", k);
    const char* shape = groups == 0 ? "[N, K / 2]" : "[G, N, K / 2]";
    DG_CHECK_INPUT(b.size(-1) * 2 == k, "b[0] (B, packed FP4) must be {} with K / 2 = {} (two e2m1 values a byte, A's "
                   "K = {}), got a {}", shape, k / 2, k, describe(b));
    check_k_major_tma(b, "b[0] (B, packed FP4)");
    if (groups > 0)
        check_groups_stacked(b, "b[0] (B, packed FP4)");
    check_defined(sfb, "b[1] (sfb)");
    const auto expect = [&](int64_t cols) {
        return groups == 0 ? std::vector<int64_t>{n, cols} : std::vector<int64_t>{groups, n, cols};
    };
    const char* prefix = groups == 0 ? "" : "G, ";
    if (sfb.scalar_type() == at::kInt) {
        DG_CHECK_INPUT(sfb.sizes().equals(expect((k + 127) / 128)), "b[1] (sfb) as packed UE8M0 int32 must be [{}N, "
                       "ceil(K/128)] = [{}], got a {}", prefix, fmt::join(expect((k + 127) / 128), ", "), describe(sfb));
    } else {
        DG_CHECK_INPUT(sfb.scalar_type() == at::kFloat, "b[1] (sfb) must be FP32 [{}N, ceil(K/32)] or packed UE8M0 "
                       "int32 [{}N, ceil(K/128)], got a {}", prefix, prefix, describe(sfb));
        DG_CHECK_INPUT(sfb.sizes().equals(expect((k + 31) / 32)), "b[1] (sfb) as FP32 must be [{}N, ceil(K/32)] = [{}], "
                       "got a {}", prefix, fmt::join(expect((k + 31) / 32), ", "), describe(sfb));
    }
}

// A's scales of an FP8 x FP4 call: FP32 [..., ceil(K/128)] (checked by check_scales), or UE8M0 packed four to an
// int32 along K, [..., ceil(K/512)] (the reference's packed form; `rows` the leading sizes).
inline void check_fp4_gemm_sfa(const at::Tensor& sfa, std::vector<int64_t> rows, const char* rows_layout, int64_t k) {
    if (sfa.defined() && sfa.scalar_type() == at::kInt) {
        rows.push_back((k + 511) / 512);
        DG_CHECK_INPUT(sfa.sizes().equals(rows), "a[1] (sfa) as packed UE8M0 int32 must be [{}, ceil(K/512)] = [{}], "
                       "got a {}", rows_layout, fmt::join(rows, ", "), describe(sfa));
        return;
    }
    rows.push_back((k + 127) / 128);
    check_defined(sfa, "a[1] (sfa)");
    check_dtype(sfa, at::kFloat, "a[1] (sfa) (FP32, or packed UE8M0 int32)");
    DG_CHECK_INPUT(sfa.sizes().equals(rows), "a[1] (sfa) must be [{}, ceil(K/128)] = [{}], got a {}", rows_layout,
                   fmt::join(rows, ", "), describe(sfa));
}

// A's scales as FP32 [..., ceil(K/128)]: packed UE8M0 words unpacked (exponent byte e -> 2^(e - 127)).
inline at::Tensor fp4_gemm_sfa_fp32(const at::Tensor& sfa, int64_t k) {
    if (sfa.scalar_type() != at::kInt)
        return sfa;
    const int64_t sf_k = (k + 127) / 128;
    at::Tensor words = sfa.to(at::kLong).bitwise_and(int64_t(0xFFFFFFFF)).unsqueeze(-1);
    const at::Tensor shifts = at::arange(0, 32, 8, words.options());
    at::Tensor exponents = words.bitwise_right_shift(shifts).bitwise_and(0xFF);  // [..., ceil(K/512), 4]
    // (UE8M0 0 is 2^-127, an FP32 subnormal: bits 0x00400000)
    at::Tensor bits = at::where(exponents.eq(0), at::full_like(exponents, 0x00400000), exponents * (int64_t(1) << 23));
    std::vector<int64_t> sizes(sfa.sizes().begin(), sfa.sizes().end());
    sizes.back() = sizes.back() * 4;
    bits = bits.reshape(sizes).narrow(-1, 0, sf_k).to(at::kInt).contiguous();
    return bits.view(at::kFloat);
}

// Recipe of an FP8 x FP4 call: None, or recipe_a (1, 128) with recipe_b (1, 32).
inline void check_fp4_recipe(const Recipe& recipe, const Recipe& recipe_a, const Recipe& recipe_b) {
    DG_CHECK_INPUT(!recipe, "recipe must be None with a packed FP4 B: give recipe_a=(1, 128) and recipe_b=(1, 32), or "
                   "neither");
    if (recipe_a || recipe_b) {
        DG_CHECK_INPUT(recipe_a && recipe_b, "recipe_a and recipe_b must be given together");
        DG_CHECK_INPUT(*recipe_a == std::vector<int64_t>({1, 128}), "recipe_a must be (1, 128) with a packed FP4 B "
                       "(sfa per row and 128 of K), got ({})", fmt::join(*recipe_a, ", "));
        DG_CHECK_INPUT(*recipe_b == std::vector<int64_t>({1, 32}), "recipe_b must be (1, 32) for a packed FP4 B (sfb per "
                       "row and 32 of K), got ({})", fmt::join(*recipe_b, ", "));
    }
}

// B's exponent words in the kernel's layout, MN-major [(G,)][ceil(K/128)][align(N, 4)]: packed words moved as FP32
// bit patterns by the layout kernel; FP32 scales packed by it (their exponent bytes, as the reference casts FP32 scales
// to UE8M0: per_token_cast_to_fp4(..., use_ue8m0=True) gives powers of two; DG_DEBUG_CHECKS=1 checks that they are,
// one synchronization, off by default as every value check).
inline at::Tensor fp4_b_scale_words(const at::Tensor& sfb) {
    if (sfb.scalar_type() == at::kInt)
        return get_mn_major_tma_aligned_tensor(sfb.view(at::kFloat));
    if (wants_value_check(sfb)) {
        DG_CHECK_INPUT(!sfb.view(at::kInt).bitwise_and(static_cast<int64_t>(0x807FFFFF)).ne(0).any().item<bool>(),
                       "b[1] (sfb): FP32 scales of FP4 B must be positive powers of two (UE8M0), got other values");
    }
    return get_mn_major_tma_aligned_packed_ue8m0_tensor(sfb, std::nullopt);
}

// fp8_fp4_gemm_nt's checks that need no device: A e4m3 [M, K] with FP32 sfa [M, ceil(K/128)]; B packed e2m1
// int8/uint8 [N, K/2] with sfb FP32 [N, ceil(K/32)] or packed UE8M0 int32 [N, ceil(K/128)]; BF16 D; no C.
inline Fp8GemmNtProblem check_fp8_fp4_gemm_nt_host(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                                   const at::Tensor& sfb, const at::Tensor& d,
                                                   const std::optional<at::Tensor>& c, const Recipe& recipe,
                                                   const Recipe& recipe_a, const Recipe& recipe_b,
                                                   const std::string& compiled_dims) {
    check_fp8_operand(a, "a[0] (A)");
    check_dim(b, 2, "b[0] (B, packed FP4)");
    check_defined(d, "d");
    check_dim(d, 2, "d");
    const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
    check_fp4_b(b, sfb, 0, n, k);
    check_dtype(d, at::kBFloat16, "d (FP8 x FP4 writes BF16)");
    DG_CHECK_INPUT(d.size(0) == m && d.size(1) == n, "d must be [M, N] = [{}, {}], got a {}", m, n, describe(d));
    DG_CHECK_INPUT(d.stride(1) == 1 || n <= 1, "d must be row-major (stride 1 along N), got a {}", describe(d));
    DG_CHECK_INPUT(!c.has_value(), "c must be None with a packed FP4 B (BF16 output)");
    DG_CHECK_INPUT(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "M, N and K must each be below 2^31");
    const auto cdims = parse_compiled_dims(compiled_dims);
    check_fp4_recipe(recipe, recipe_a, recipe_b);
    check_fp4_gemm_sfa(sfa, {m}, "M", k);
    check_output_disjoint(d, "d", {{&a, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa, "a[1] (sfa)"}, {&sfb, "b[1] (sfb)"}});
    return {m, n, k, false, cdims};
}

// D = A @ B.T with A e4m3 and B packed FP4 (see check_fp8_fp4_gemm_nt_host); SM90 converts B to e4m3 in shared
// memory, folding its power-of-two 1x32 scales into the conversion.
inline void fp8_fp4_gemm_nt_packed(const at::Tensor& a, const at::Tensor& sfa_in, const at::Tensor& b,
                                   const at::Tensor& sfb_in, const at::Tensor& d, const std::optional<at::Tensor>& c,
                                   const Recipe& recipe, const Recipe& recipe_a, const Recipe& recipe_b,
                                   const std::string& compiled_dims) {
    const auto problem = check_fp8_fp4_gemm_nt_host(a, sfa_in, b, sfb_in, d, c, recipe, recipe_a, recipe_b,
                                                    compiled_dims);
    const auto [m, n, k] = std::make_tuple(problem.m, problem.n, problem.k);
    check_same_cuda_device(a, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"}, {&sfb_in, "b[1] (sfb)"}});
    check_sm90(a, "fp8_fp4_gemm_nt");
    const jit::DeviceScope device_scope(a.device().index());
    if (m == 0 || n == 0)
        return;
    if (k == 0)
        return write_empty_k(d, c);

    at::Tensor sfa_storage;
    const at::Tensor sfa_fp32 = fp4_gemm_sfa_fp32(sfa_in, k);
    const at::Tensor& sfa = mn_major_tma_aligned(sfa_fp32, sfa_storage);
    const at::Tensor sfb = fp4_b_scale_words(sfb_in);
    kernels::Sm90GemmRunner::run({a, b, d, nullptr, &sfa, &sfb, kernels::fp8_fp4_operands(), problem.dims.m,
                                  problem.dims.n, problem.dims.k});
}

}  // namespace dg::apis
