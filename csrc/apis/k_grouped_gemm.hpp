// K-grouped GEMM API (MoE weight gradients), FP8 and BF16: validate every input, lay the groups out, then run
// the GEMM kernel in its k-grouped mode.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/sm90_gemm.hpp"
#include "../jit_kernels/impls/smxx_transpose_fp8.hpp"
#include "../utils/tensor_checks.hpp"
#include "gemm.hpp"
#include "layout.hpp"

namespace dg::apis {

namespace detail {

// Where each group's K starts in the flat buffers: back to back, or (psum layout) each group starting at
// the alignment past the previous group's end. Also checks K_g (a multiple of `k_multiple`).
inline std::vector<int64_t> k_group_starts(const std::vector<int64_t>& ks, bool use_psum_layout, int64_t alignment,
                                           int64_t k_multiple) {
    std::vector<int64_t> starts;
    int64_t end = 0;
    for (size_t g = 0; g < ks.size(); ++g) {
        DG_CHECK_INPUT(ks[g] >= 0 && ks[g] % k_multiple == 0 && ks[g] <= INT32_MAX,
                       "ks_cpu[{}] = {}: each group's K must be a non-negative multiple of {}{}", g, ks[g], k_multiple,
                       k_multiple > 1 ? " (TMA row strides)" : "");
        const int64_t start = use_psum_layout ? (end + alignment - 1) / alignment * alignment : end;
        starts.push_back(start);
        end = start + ks[g];
    }
    return starts;
}

// A k-grouped scale tensor, [sum of K blocks, MN] (one row per K block, as the per-channel cast of the
// [K, MN] operand gives it) or its transposed view [MN, sum of K blocks], as the [MN, K blocks] MN-major
// TMA-aligned tensor the kernel reads (copied by the layout kernel only when not already so).
inline at::Tensor k_grouped_scales(const at::Tensor& sf, int64_t mn, int64_t sf_rows, const char* name) {
    check_defined(sf, name);
    check_dtype(sf, at::kFloat, name);
    const bool rows_first = sf.dim() == 2 && sf.size(0) == sf_rows && sf.size(1) == mn;
    const bool mn_first = sf.dim() == 2 && sf.size(0) == mn && sf.size(1) == sf_rows;
    DG_CHECK_INPUT(rows_first || mn_first, "{} must be [sum of ceil(K_g / 128), MN] = [{}, {}] (or its transpose), got a {}",
                   name, sf_rows, mn, describe(sf));
    // (square: the layout decides; a row-major [K blocks, MN] is what the per-channel cast gives)
    const bool use_rows_first = rows_first && (!mn_first || sf.stride(1) == 1);
    return use_rows_first ? sf.t() : sf;
}

// What every k-grouped GEMM checks: the group count, D [G, M, N] FP32 contiguous, C, the recipe, grouped_layout
// int32 [G]. Returns the groups' starts along K (see k_group_starts).
inline std::vector<int64_t> check_k_grouped(const std::vector<int64_t>& ks, const at::Tensor& d,
                                            const std::optional<at::Tensor>& c, const at::Tensor& grouped_layout,
                                            bool use_psum_layout, int64_t k_multiple) {
    const int64_t num_groups = static_cast<int64_t>(ks.size());
    DG_CHECK_INPUT(num_groups >= 1 && num_groups <= kernels::kMaxKGroups,
                   "ks_cpu must list 1..{} group sizes (the per-group TMA maps travel as kernel parameters), got {}",
                   kernels::kMaxKGroups, num_groups);
    check_defined(d, "d");
    check_dim(d, 3, "d");
    check_dtype(d, at::kFloat, "d (k-grouped GEMMs write FP32)");
    DG_CHECK_INPUT(d.size(0) == num_groups, "d must be [G, M, N] with G = {} (len(ks_cpu)), got a {}", num_groups,
                   describe(d));
    DG_CHECK_INPUT(d.is_contiguous(), "d must be contiguous [G, M, N], got a {}", describe(d));
    DG_CHECK_INPUT(d.size(1) <= INT32_MAX && d.size(2) <= INT32_MAX, "M and N must each be below 2^31");
    if (c.has_value()) {
        check_accumuland(*c, d, "[G, M, N]");
        DG_CHECK_INPUT(c->is_contiguous(), "c must be contiguous [G, M, N], got a {}", describe(*c));
    }
    check_defined(grouped_layout, "grouped_layout");
    check_dtype(grouped_layout, at::kInt, "grouped_layout");
    DG_CHECK_INPUT(grouped_layout.dim() == 1 && grouped_layout.size(0) == num_groups,
                   "grouped_layout must be int32 [G] = [{}] (the groups' K, or their cumulative ends with "
                   "use_psum_layout=True), got a {}", num_groups, describe(grouped_layout));
    const int64_t alignment = jit::DeviceRuntime::instance().mk_alignment();
    return k_group_starts(ks, use_psum_layout, alignment, k_multiple);
}

}  // namespace detail

// Per group g: D[g] = C[g] + A_g @ B_g.T over the group's own K; see the Python docstring for the layouts.
// `a_is_k_major`: A and B are given as flat K-major groups (nt); otherwise as MN-major [sum K, M] and
// [sum K, N] (tn), transposed into the nt layout by a pre-pass.
inline void k_grouped_fp8_gemm_contiguous(const char* fn, bool k_major, const TensorPair& a_pair,
                                          const TensorPair& b_pair, const at::Tensor& d, const std::vector<int64_t>& ks,
                                          const at::Tensor& grouped_layout, const std::optional<at::Tensor>& c,
                                          const Recipe& recipe, const std::string& compiled_dims, bool use_psum_layout) {
    const auto& [a, sfa_in] = a_pair;
    const auto& [b, sfb_in] = b_pair;
    const std::vector<int64_t> starts = detail::check_k_grouped(ks, d, c, grouped_layout, use_psum_layout, 16);
    const int64_t m = d.size(1), n = d.size(2);
    if (recipe.has_value())
        DG_CHECK_INPUT(*recipe == std::vector<int64_t>({1, 1, 128}),
                       "recipe must be (1, 1, 128) for k-grouped GEMMs (per-row scales of A and B), got ({})",
                       fmt::join(*recipe, ", "));
    const auto cdims = parse_compiled_dims(compiled_dims);

    const int64_t total_k = starts.back() + ks.back();
    int64_t sf_rows = 0;
    for (const int64_t k: ks)
        sf_rows += (k + 127) / 128;

    check_defined(a, "a[0] (A)");
    check_defined(b, "b[0] (B)");
    check_dtype(a, at::kFloat8_e4m3fn, "a[0] (A)");
    check_dtype(b, at::kFloat8_e4m3fn, "b[0] (B)");
    if (k_major) {
        // Flat buffers: group g's A_g [M, K_g] at element M * start_g, B_g [N, K_g] at N * start_g
        DG_CHECK_INPUT(a.dim() == 1 && a.is_contiguous() && a.numel() >= m * total_k,
                       "a[0] (A) must be a contiguous 1-D buffer of at least M * sum(K) = {} elements (each group "
                       "[M, K_g] K-major, back to back), got a {}", m * total_k, describe(a));
        DG_CHECK_INPUT(b.dim() == 1 && b.is_contiguous() && b.numel() >= n * total_k,
                       "b[0] (B) must be a contiguous 1-D buffer of at least N * sum(K) = {} elements (each group "
                       "[N, K_g] K-major, back to back), got a {}", n * total_k, describe(b));
    } else {
        DG_CHECK_INPUT(a.dim() == 2 && a.size(0) >= total_k && a.size(1) == m && a.stride(1) == 1,
                       "a[0] (A) must be MN-major [sum(K), M] = [{}, {}] (stride 1 along M), got a {}", total_k, m,
                       describe(a));
        DG_CHECK_INPUT(b.dim() == 2 && b.size(0) >= total_k && b.size(1) == n && b.stride(1) == 1,
                       "b[0] (B) must be MN-major [sum(K), N] = [{}, {}] (stride 1 along N), got a {}", total_k, n,
                       describe(b));
    }
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0,
                   "a[0] (A) and b[0] (B) must start 16-byte aligned (TMA)");
    const at::Tensor sfa_mn = detail::k_grouped_scales(sfa_in, m, sf_rows, "a[1] (sfa)");
    const at::Tensor sfb_mn = detail::k_grouped_scales(sfb_in, n, sf_rows, "b[1] (sfb)");
    check_output_disjoint(d, "d", {{&a, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa_in, "a[1] (sfa)"},
                                   {&sfb_in, "b[1] (sfb)"}, {&grouped_layout, "grouped_layout"}});

    // Devices last
    check_same_cuda_device(a, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"}, {&sfb_in, "b[1] (sfb)"},
                                           {&grouped_layout, "grouped_layout"}});
    if (c.has_value())
        check_same_cuda_device(a, "a[0] (A)", {{&*c, "c"}});
    check_sm90(a, fn);
    const jit::DeviceScope device_scope(a.device().index());
    if (m == 0 || n == 0)
        return;

    // tn: a pre-pass transposes every group of A and of B into the nt layout (same group starts), one kernel each
    at::Tensor a_flat = a, b_flat = b;
    if (!k_major) {
        a_flat = at::empty({m * total_k}, a.options());
        b_flat = at::empty({n * total_k}, b.options());
        const int device = a.device().index();
        kernels::launch_transpose_fp8_groups(device, a.data_ptr(), a_flat.data_ptr(), static_cast<uint32_t>(m),
                                             static_cast<uint64_t>(a.stride(0)), ks, starts);
        kernels::launch_transpose_fp8_groups(device, b.data_ptr(), b_flat.data_ptr(), static_cast<uint32_t>(n),
                                             static_cast<uint64_t>(b.stride(0)), ks, starts);
    }
    // Scales as [K blocks, MN] rows with a TMA-aligned row stride
    const at::Tensor sfa = sf_rows > 0 ? get_mn_major_tma_aligned_tensor(sfa_mn).t() : sfa_mn.t();
    const at::Tensor sfb = sf_rows > 0 ? get_mn_major_tma_aligned_tensor(sfb_mn).t() : sfb_mn.t();
    kernels::Sm90GemmRunner::run_k_grouped({a_flat, b_flat, d, c.has_value() ? &*c : nullptr, &sfa, &sfb,
                                            static_cast<uint32_t>(m), static_cast<uint32_t>(n), ks, starts, cdims.m,
                                            cdims.n},
                                           kernels::fp8_operands(true));
}

// ks_cpu as the reference types it: None is allowed there (its SM100 psum path reads the K sizes on the device); the
// SM90 kernels take them from the host, so None raises ValueError naming the argument (the reference's SM90 path also
// requires the list). One check for the _C bindings and the op kernels (csrc/op_kernels.hpp).
inline const std::vector<int64_t>& require_ks_cpu(const std::optional<std::vector<int64_t>>& ks_cpu, const char* fn) {
    DG_CHECK_INPUT(ks_cpu.has_value(), "{}: ks_cpu must be the list of the groups' K on SM90 (the kernels take them "
                   "from the host), got None", fn);
    return *ks_cpu;
}

inline void k_grouped_fp8_gemm_nt_contiguous(const TensorPair& a, const TensorPair& b, const at::Tensor& d,
                                             const std::vector<int64_t>& ks, const at::Tensor& grouped_layout,
                                             const std::optional<at::Tensor>& c, const Recipe& recipe,
                                             const std::string& compiled_dims, bool use_psum_layout) {
    k_grouped_fp8_gemm_contiguous("k_grouped_fp8_gemm_nt_contiguous", true, a, b, d, ks, grouped_layout, c, recipe,
                                  compiled_dims, use_psum_layout);
}

inline void k_grouped_fp8_gemm_tn_contiguous(const TensorPair& a, const TensorPair& b, const at::Tensor& d,
                                             const std::vector<int64_t>& ks, const at::Tensor& grouped_layout,
                                             const std::optional<at::Tensor>& c, const Recipe& recipe,
                                             const std::string& compiled_dims, bool use_psum_layout) {
    k_grouped_fp8_gemm_contiguous("k_grouped_fp8_gemm_tn_contiguous", false, a, b, d, ks, grouped_layout, c, recipe,
                                  compiled_dims, use_psum_layout);
}

}  // namespace dg::apis
