// M-grouped FP8 x FP4 GEMM API on SM90 (m_grouped_fp8_fp4_gemm_nt_contiguous / _masked, or the FP8 names, with a
// packed FP4 B [G, N, K / 2]): validate every input, bring B's scales into the kernel's layout, run the SM90 GEMM's
// FP8 x FP4 mode in its grouped layout. Included by grouped_gemm.hpp, whose FP8 functions dispatch here.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "fp8_fp4_gemm.hpp"
#include "grouped_gemm.hpp"

namespace dg::apis {

// Contiguous layout: A e4m3 [M, K] or packed FP4 [M, K / 2] with its scales (check_fp4_gemm_sfa), B packed FP4 [G, N, K / 2] with sfb FP32
// [G, N, ceil(K/32)] or packed UE8M0 int32 [G, N, ceil(K/128)], D BF16 [M, N].
inline void m_grouped_fp8_fp4_gemm_nt_contiguous_packed(const at::Tensor& a_in, const at::Tensor& sfa_in,
                                                        const at::Tensor& b, const at::Tensor& sfb_in,
                                                        const at::Tensor& d, const at::Tensor& grouped_layout,
                                                        const Recipe& recipe, const Recipe& recipe_a,
                                                        const Recipe& recipe_b, const std::string& compiled_dims,
                                                        bool use_psum_layout, bool ensure_zero_padding) {
    const int64_t k = check_fp4_gemm_a(a_in, 2);
    check_dim(b, 3, "b[0] (B, packed FP4)");
    const int64_t m = a_in.size(0), num_groups = b.size(0), n = b.size(1);
    check_fp4_b(b, sfb_in, num_groups, n, k);
    DG_CHECK_INPUT(num_groups >= 1, "b[0] (B, packed FP4) must hold at least one group, got a {}", describe(b));
    detail::check_grouped_d(d, m, n);
    DG_CHECK_INPUT(m <= INT32_MAX && n * num_groups <= INT32_MAX && k <= INT32_MAX,
                   "M, G * N and K must each be below 2^31");
    DG_CHECK_INPUT(k > 0, "K must be positive for m-grouped GEMMs, got a[0] (A) = a {}", describe(a_in));
    const auto cdims = parse_compiled_dims(compiled_dims);
    const auto recipe_gran_k = check_fp4_recipe(recipe, recipe_a, recipe_b);
    const int64_t gran_k = check_fp4_gemm_sfa(sfa_in, {m}, "M", k, is_packed_fp4(a_in), recipe_gran_k);
    const int64_t alignment = detail::check_contiguous_layout(grouped_layout, m, num_groups, use_psum_layout);
    check_output_disjoint(d, "d", {{&a_in, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa_in, "a[1] (sfa)"},
                                   {&sfb_in, "b[1] (sfb)"}, {&grouped_layout, "grouped_layout"}});

    check_same_cuda_device(a_in, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"},
                                              {&sfb_in, "b[1] (sfb)"}, {&grouped_layout, "grouped_layout"}});
    check_sm90(a_in, "m_grouped_fp8_fp4_gemm_nt_contiguous");
    const jit::DeviceScope device_scope(a_in.device().index());
    if (m == 0 || n == 0)
        return;
    const auto [a, sfa] = fp4_gemm_operand_a(a_in, sfa_in, k, gran_k);
    const at::Tensor sfb = fp4_b_scale_words(sfb_in);
    detail::run_contiguous({a, b, d, nullptr, &sfa, &sfb, kernels::fp8_fp4_operands(), cdims.m, cdims.n, cdims.k},
                           grouped_layout, use_psum_layout, alignment,
                           detail::padding_zeroing(ensure_zero_padding, use_psum_layout));
}

// Masked layout: A e4m3 [G, max_m, K] or packed FP4 [G, max_m, K / 2] with scales [G, max_m, ...], B packed FP4 [G, N, K / 2] with its
// scales as above, D BF16 [G, max_m, N]; masked_m int32 [G] stays on the device.
inline void m_grouped_fp8_fp4_gemm_nt_masked_packed(const at::Tensor& a_in, const at::Tensor& sfa_in, const at::Tensor& b,
                                                    const at::Tensor& sfb_in, const at::Tensor& d,
                                                    const at::Tensor& masked_m, int64_t expected_m,
                                                    const Recipe& recipe, const Recipe& recipe_a,
                                                    const Recipe& recipe_b, const std::string& compiled_dims) {
    const int64_t k = check_fp4_gemm_a(a_in, 3);
    check_dim(b, 3, "b[0] (B, packed FP4)");
    const int64_t num_groups = a_in.size(0), max_m = a_in.size(1), n = b.size(1);
    DG_CHECK_INPUT(b.size(0) == num_groups, "b[0] (B, packed FP4) must be [G, N, K / 2] with G = {} (a[0]'s), got a {}",
                   num_groups, describe(b));
    check_fp4_b(b, sfb_in, num_groups, n, k);
    DG_CHECK_INPUT(num_groups >= 1, "a[0] (A) must hold at least one group, got a {}", describe(a_in));
    detail::check_masked_rows(max_m);
    DG_CHECK_INPUT(k > 0, "K must be positive for m-grouped GEMMs, got a[0] (A) = a {}", describe(a_in));
    check_groups_stacked(a_in, "a[0] (A)");
    DG_CHECK_INPUT(num_groups * max_m <= INT32_MAX && num_groups * n <= INT32_MAX && k <= INT32_MAX,
                   "G * max_m, G * N and K must each be below 2^31");
    detail::check_masked(masked_m, d, num_groups, max_m, n, expected_m);
    const auto cdims = parse_compiled_dims(compiled_dims);
    const auto recipe_gran_k = check_fp4_recipe(recipe, recipe_a, recipe_b);
    const int64_t gran_k = check_fp4_gemm_sfa(sfa_in, {num_groups, max_m}, "G, max_m", k, is_packed_fp4(a_in),
                                              recipe_gran_k);
    check_output_disjoint(d, "d", {{&a_in, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa_in, "a[1] (sfa)"},
                                   {&sfb_in, "b[1] (sfb)"}, {&masked_m, "masked_m"}});

    check_same_cuda_device(a_in, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"},
                                              {&sfb_in, "b[1] (sfb)"}, {&masked_m, "masked_m"}});
    check_sm90(a_in, "m_grouped_fp8_fp4_gemm_nt_masked");
    const jit::DeviceScope device_scope(a_in.device().index());
    if (n == 0 || max_m == 0)
        return;
    // (the groups as one [G * max_m, ...] operand: stacked densely, checked above)
    const auto [a_flat, sfa] = fp4_gemm_operand_a(a_in.view({num_groups * max_m, a_in.size(2)}),
                                                  sfa_in.reshape({num_groups * max_m, sfa_in.size(2)}), k, gran_k);
    const at::Tensor d_flat = d.view({num_groups * max_m, n});
    const at::Tensor sfb = fp4_b_scale_words(sfb_in);
    detail::run_masked({a_flat, b, d_flat, nullptr, &sfa, &sfb, kernels::fp8_fp4_operands(), cdims.m, cdims.n,
                        cdims.k},
                       masked_m, max_m, expected_m);
}

}  // namespace dg::apis
