// FP8 x FP4 GEMM API on SM90 (fp8_fp4_gemm_nt with a packed FP4 B): validate every input, bring B's scales into the
// kernel's layout (UE8M0 exponents packed four to a word, MN-major), launch the SM90 GEMM in its FP8 x FP4 mode.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "../jit_kernels/impls/smxx_fold_scales.hpp"
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

// A of an FP8 x FP4 call, `dims`-D: e4m3 [..., K] (K-major, TMA-aligned), or packed e2m1 int8/uint8 [..., K / 2]
// (FP4 x FP4: two values a byte, low nibble first; row-major, even row stride, 2-byte aligned). Returns K.
inline int64_t check_fp4_gemm_a(const at::Tensor& a, int64_t dims) {
    check_defined(a, "a[0] (A)");
    check_dim(a, dims, "a[0] (A)");
    if (!is_packed_fp4(a)) {
        DG_CHECK_INPUT(a.scalar_type() == at::kFloat8_e4m3fn, "a[0] (A) must be float8_e4m3fn or packed FP4 "
                       "(int8/uint8, two e2m1 values a byte), got a {}", describe(a));
        check_fp8_operand(a, "a[0] (A)", dims);
        return a.size(-1);
    }
    DG_CHECK_INPUT(a.stride(-1) == 1 && a.stride(-2) % 2 == 0 && reinterpret_cast<uintptr_t>(a.data_ptr()) % 2 == 0,
                   "a[0] (A, packed FP4) must be row-major with an even row stride and a 2-byte aligned start, got a {}",
                   describe(a));
    return 2 * a.size(-1);
}

// Recipe of an FP8 x FP4 call: None, (1, 1, 32) (A and B scaled per 1x32), or recipe_a (1, 128) or (1, 32) with
// recipe_b (1, 32). Returns A's granularity along K when the recipe names it.
inline std::optional<int64_t> check_fp4_recipe(const Recipe& recipe, const Recipe& recipe_a, const Recipe& recipe_b) {
    if (recipe) {
        DG_CHECK_INPUT(*recipe == std::vector<int64_t>({1, 1, 32}), "recipe must be None or (1, 1, 32) with a packed "
                       "FP4 B (or give recipe_a and recipe_b), got ({})", fmt::join(*recipe, ", "));
        DG_CHECK_INPUT(!recipe_a && !recipe_b, "recipe and recipe_a / recipe_b must not be given together");
        return 32;
    }
    if (!recipe_a && !recipe_b)
        return std::nullopt;
    DG_CHECK_INPUT(recipe_a && recipe_b, "recipe_a and recipe_b must be given together");
    DG_CHECK_INPUT(*recipe_a == std::vector<int64_t>({1, 128}) || *recipe_a == std::vector<int64_t>({1, 32}),
                   "recipe_a must be (1, 128) or (1, 32) with a packed FP4 B (sfa per row and 128 or 32 of K), got ({})",
                   fmt::join(*recipe_a, ", "));
    DG_CHECK_INPUT(*recipe_b == std::vector<int64_t>({1, 32}), "recipe_b must be (1, 32) for a packed FP4 B (sfb per "
                   "row and 32 of K), got ({})", fmt::join(*recipe_b, ", "));
    return (*recipe_a)[1];
}

// A's scales of an FP8 x FP4 call, per row and `gran_k` of K: FP32 [rows..., ceil(K/gran_k)], or UE8M0 packed four
// to an int32 along K, [rows..., ceil(K/(4 gran_k))] (the reference's packed form). gran_k is the recipe's, else read
// from sfa's shape: 128 where both readings fit (K <= 32 for FP32, K <= 128 for packed: recipe_a=(1, 32) picks 1x32
// there), 32 for a packed FP4 A. Returns gran_k.
inline int64_t check_fp4_gemm_sfa(const at::Tensor& sfa, std::vector<int64_t> rows, const char* rows_layout, int64_t k,
                                  bool a_is_fp4, std::optional<int64_t> recipe_gran_k) {
    check_defined(sfa, "a[1] (sfa)");
    const bool packed = sfa.scalar_type() == at::kInt;
    DG_CHECK_INPUT(packed || sfa.scalar_type() == at::kFloat, "a[1] (sfa) must be FP32 or packed UE8M0 int32, got a {}",
                   describe(sfa));
    const auto cols = [&](int64_t gran_k) { return (k + (packed ? 4 : 1) * gran_k - 1) / ((packed ? 4 : 1) * gran_k); };
    int64_t gran_k = recipe_gran_k.value_or(a_is_fp4 || (sfa.dim() > 0 && sfa.size(-1) != cols(128)) ? 32 : 128);
    DG_CHECK_INPUT(!a_is_fp4 || gran_k == 32, "a packed FP4 A takes 1x32 scales (recipe_a (1, 32)), got recipe_a "
                   "(1, {})", gran_k);
    rows.push_back(cols(gran_k));
    DG_CHECK_INPUT(sfa.sizes().equals(rows), "a[1] (sfa) {}must be [{}, ceil(K/{})] = [{}] for 1x{} scales{}, got a {}",
                   packed ? "as packed UE8M0 int32 " : "as FP32 ", rows_layout, (packed ? 4 : 1) * gran_k,
                   fmt::join(rows, ", "), gran_k, recipe_gran_k ? "" : " (1x128: [.., ceil(K/128)] FP32 or "
                   "[.., ceil(K/512)] packed; 1x32: [.., ceil(K/32)] FP32 or [.., ceil(K/128)] packed)", describe(sfa));
    return gran_k;
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

// B's exponent words in the kernel's layout, MN-major [(G,)][ceil(K/128)][align(N, 4)] (packed words moved as FP32
// bit patterns by the layout kernel).
inline at::Tensor fp4_b_scale_words(const at::Tensor& sfb) {
    if (sfb.scalar_type() == at::kInt)
        return get_mn_major_tma_aligned_tensor(sfb.view(at::kFloat));
    return fp4_scale_words(sfb, "b[1] (sfb)");
}

// A as the kernel reads it, e4m3 [rows, K] with FP32 1x128 scales MN-major and TMA-aligned. `a` [rows, K] (e4m3) or
// [rows, K / 2] (packed FP4) and `sfa` [rows, ...] as check_fp4_gemm_sfa accepted them with `gran_k`. 1x128 e4m3 A
// passes through (its scales unpacked or transposed where needed); 1x32 scales and packed FP4 are folded into a new e4m3
// copy by smxx_fold_scales (common/scale_fold.cuh: exact for FP4, for e4m3 exact down to 2^-6 of the block's scale).
inline std::pair<at::Tensor, at::Tensor> fp4_gemm_operand_a(const at::Tensor& a, const at::Tensor& sfa, int64_t k,
                                                            int64_t gran_k) {
    if (gran_k == 128 && !is_packed_fp4(a)) {
        at::Tensor storage;
        const at::Tensor sfa_fp32 = fp4_gemm_sfa_fp32(sfa, k);
        const at::Tensor& aligned = mn_major_tma_aligned(sfa_fp32, storage);
        return {a, aligned};
    }
    const int64_t rows = a.size(0), sf_k = (k + 127) / 128, aligned_rows = get_tma_aligned_size(rows, 4);
    DG_CHECK_INPUT(rows <= INT32_MAX && k <= INT32_MAX, "a[0] (A): rows and K must be below 2^31, got a {}", describe(a));
    const at::Tensor words = sfa.scalar_type() == at::kInt ? sfa : fp4_scale_words(sfa, "a[1] (sfa)").view(at::kInt);
    at::Tensor out = at::empty({rows, k}, a.options().dtype(at::kFloat8_e4m3fn));
    at::Tensor sf = at::empty({sf_k, aligned_rows}, a.options().dtype(at::kFloat)).t().narrow(0, 0, rows);
    kernels::launch_fold_scales(a.device().index(),
                                {a.data_ptr(), static_cast<uint64_t>(a.stride(0)), words.data_ptr<int32_t>(),
                                 static_cast<uint64_t>(words.stride(0)), static_cast<uint64_t>(words.stride(1)),
                                 out.data_ptr(), static_cast<uint64_t>(k), sf.data_ptr<float>(),
                                 static_cast<uint64_t>(aligned_rows), static_cast<uint32_t>(rows),
                                 static_cast<uint32_t>(k), is_packed_fp4(a)});
    return {out, sf};
}

// fp8_fp4_gemm_nt's checks that need no device: A e4m3 [M, K] or packed FP4 [M, K / 2] with its scales
// (check_fp4_gemm_sfa); B packed e2m1 int8/uint8 [N, K/2] with sfb FP32 [N, ceil(K/32)] or packed UE8M0 int32
// [N, ceil(K/128)]; BF16 D; no C. Returns the problem and A's scale granularity along K.
struct Fp8Fp4GemmProblem {
    Fp8GemmNtProblem gemm;
    int64_t sfa_gran_k;  // 128, or 32 (A folded to 1x128 before the GEMM)
};

inline Fp8Fp4GemmProblem check_fp8_fp4_gemm_nt_host(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                                    const at::Tensor& sfb, const at::Tensor& d,
                                                    const std::optional<at::Tensor>& c, const Recipe& recipe,
                                                    const Recipe& recipe_a, const Recipe& recipe_b,
                                                    const std::string& compiled_dims) {
    const int64_t k = check_fp4_gemm_a(a, 2);
    check_dim(b, 2, "b[0] (B, packed FP4)");
    check_defined(d, "d");
    check_dim(d, 2, "d");
    const int64_t m = a.size(0), n = b.size(0);
    check_fp4_b(b, sfb, 0, n, k);
    check_dtype(d, at::kBFloat16, "d (FP8 x FP4 writes BF16)");
    DG_CHECK_INPUT(d.size(0) == m && d.size(1) == n, "d must be [M, N] = [{}, {}], got a {}", m, n, describe(d));
    DG_CHECK_INPUT(d.stride(1) == 1 || n <= 1, "d must be row-major (stride 1 along N), got a {}", describe(d));
    DG_CHECK_INPUT(!c.has_value(), "c must be None with a packed FP4 B (BF16 output)");
    DG_CHECK_INPUT(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "M, N and K must each be below 2^31");
    const auto cdims = parse_compiled_dims(compiled_dims);
    const auto recipe_gran_k = check_fp4_recipe(recipe, recipe_a, recipe_b);
    const int64_t gran_k = check_fp4_gemm_sfa(sfa, {m}, "M", k, is_packed_fp4(a), recipe_gran_k);
    check_output_disjoint(d, "d", {{&a, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa, "a[1] (sfa)"}, {&sfb, "b[1] (sfb)"}});
    return {{m, n, k, false, cdims}, gran_k};
}

// D = A @ B.T with B packed FP4 (see check_fp8_fp4_gemm_nt_host); SM90 converts B to e4m3 in shared memory, folding
// its power-of-two 1x32 scales into the conversion (A with 1x32 scales, or FP4, is folded before: fp4_gemm_operand_a).
inline void fp8_fp4_gemm_nt_packed(const at::Tensor& a_in, const at::Tensor& sfa_in, const at::Tensor& b,
                                   const at::Tensor& sfb_in, const at::Tensor& d, const std::optional<at::Tensor>& c,
                                   const Recipe& recipe, const Recipe& recipe_a, const Recipe& recipe_b,
                                   const std::string& compiled_dims) {
    const auto [problem, gran_k] = check_fp8_fp4_gemm_nt_host(a_in, sfa_in, b, sfb_in, d, c, recipe, recipe_a,
                                                              recipe_b, compiled_dims);
    const auto [m, n, k] = std::make_tuple(problem.m, problem.n, problem.k);
    check_same_cuda_device(a_in, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"},
                                              {&sfb_in, "b[1] (sfb)"}});
    check_sm90(a_in, "fp8_fp4_gemm_nt");
    const jit::DeviceScope device_scope(a_in.device().index());
    if (m == 0 || n == 0)
        return;
    if (k == 0)
        return write_empty_k(d, c);

    const auto [a, sfa] = fp4_gemm_operand_a(a_in, sfa_in, k, gran_k);
    const at::Tensor sfb = fp4_b_scale_words(sfb_in);
    kernels::Sm90GemmRunner::run({a, b, d, nullptr, &sfa, &sfb, kernels::fp8_fp4_operands(), problem.dims.m,
                                  problem.dims.n, problem.dims.k});
}

}  // namespace dg::apis
