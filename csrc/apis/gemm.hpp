// FP8 GEMM API: validate every input, normalize the scale layouts, pick the kernel by arch and recipe.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../jit_kernels/impls/sm90_gemm.hpp"
#include "../utils/tensor_checks.hpp"
#include "layout.hpp"

namespace dg::apis {

using TensorPair = std::tuple<at::Tensor, at::Tensor>;
using Recipe = std::optional<std::vector<int64_t>>;

struct CompiledDims {
    bool m = false, n = false, k = false;
};

inline CompiledDims parse_compiled_dims(const std::string& dims) {
    CompiledDims out;
    for (const char c: dims) {
        DG_CHECK_INPUT(c == 'm' || c == 'n' || c == 'k', "compiled_dims must use only the letters m, n, k; got '{}'", dims);
        (c == 'm' ? out.m : c == 'n' ? out.n : out.k) = true;
    }
    // (set_ignore_compile_dims(True): the letters are still checked, but every dimension is a runtime value)
    if (jit::DeviceRuntime::instance().ignore_compile_dims())
        return {};
    return out;
}

// (gran_m, gran_n, gran_k) from `recipe` or from `recipe_a`/`recipe_b`, defaulting by D's dtype.
inline std::tuple<int64_t, int64_t, int64_t> resolve_recipe(const Recipe& recipe, const Recipe& recipe_a,
                                                            const Recipe& recipe_b, const at::Tensor& d) {
    if (recipe) {
        DG_CHECK_INPUT(!recipe_a && !recipe_b, "give either recipe or recipe_a/recipe_b, not both");
        DG_CHECK_INPUT(recipe->size() == 3, "recipe must be (gran_m, gran_n, gran_k), got {} values", recipe->size());
        return {(*recipe)[0], (*recipe)[1], (*recipe)[2]};
    }
    if (recipe_a || recipe_b) {
        DG_CHECK_INPUT(recipe_a && recipe_b, "recipe_a and recipe_b must be given together");
        DG_CHECK_INPUT(recipe_a->size() == 2 && recipe_b->size() == 2,
                       "recipe_a and recipe_b must each be (gran_mn, gran_k)");
        DG_CHECK_INPUT((*recipe_a)[1] == (*recipe_b)[1], "recipe_a and recipe_b must share gran_k, got {} and {}",
                       (*recipe_a)[1], (*recipe_b)[1]);
        return {(*recipe_a)[0], (*recipe_b)[0], (*recipe_a)[1]};
    }
    return d.scalar_type() == at::kFloat ? std::make_tuple(1, 1, 128) : std::make_tuple(1, 128, 128);
}

// Host-checkable properties first (so that they are testable without a GPU), the device last.
// (`dims` 3: a stack of groups [G, rows, K], see check_groups_stacked.)
inline void check_fp8_operand(const at::Tensor& t, const char* name, int64_t dims = 2) {
    check_defined(t, name);
    check_dim(t, dims, name);
    check_dtype(t, at::kFloat8_e4m3fn, name);
    check_k_major_tma(t, name);
}

// The groups of a [G, rows, K] operand follow each other densely, so that the kernels read them as one
// [G * rows, K] matrix.
inline void check_groups_stacked(const at::Tensor& t, const char* name) {
    DG_CHECK_INPUT(t.stride(0) == t.size(1) * t.stride(1) || t.size(0) == 1,
                   "{}: the groups must be stacked densely (stride 0 = rows * stride 1), got a {}", name, describe(t));
}

// An FP32 scale tensor of exactly `sizes` (`layout` names them in the message, e.g. "[M, ceil(K/128)]"; `recipe`,
// when given, the (gran_m, gran_n, gran_k) that sized it). Nothing is formatted unless the check fails: this runs on
// every call.
inline void check_scales(const at::Tensor& sf, const char* name, std::initializer_list<int64_t> sizes,
                         const char* layout, std::optional<std::array<int64_t, 3>> recipe = std::nullopt) {
    check_defined(sf, name);
    check_dtype(sf, at::kFloat, name);
    DG_CHECK_INPUT(sf.sizes().equals(sizes), "{} must be {} = [{}]{}, got a {}", name, layout, fmt::join(sizes, ", "),
                   recipe ? fmt::format(" for recipe ({})", fmt::join(*recipe, ", ")) : "", describe(sf));
}

// Every tensor on a CUDA device, the same as `a`'s (checked after everything checkable on the host).
inline void check_same_cuda_device(const at::Tensor& a, const char* a_name,
                                   std::initializer_list<std::pair<const at::Tensor*, const char*>> others) {
    check_cuda(a, a_name);
    for (const auto& [t, name]: others) {
        check_cuda(*t, name);
        check_same_device(*t, a, name, a_name);
    }
}

// The bytes [first, last] a tensor's elements span (for an overlap test of two views of one storage).
inline std::pair<uintptr_t, uintptr_t> byte_span(const at::Tensor& t) {
    int64_t last = 0;
    for (int64_t i = 0; i < t.dim(); ++i)
        last += (t.size(i) - 1) * t.stride(i);
    const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
    return {first, first + static_cast<uintptr_t>(last + 1) * t.element_size() - 1};
}

// C of D = C + A @ B.T: D's dtype and shape (`layout` names it), and either D itself or not overlapping
// it (in place only as the very same elements: each is read, then written, by one thread).
inline void check_accumuland(const at::Tensor& c, const at::Tensor& d, const char* layout) {
    check_defined(c, "c");
    check_dtype(c, d.scalar_type(), "c (d's dtype)");
    DG_CHECK_INPUT(c.sizes() == d.sizes(), "c must be {} = [{}] (d's shape), got a {}", layout, fmt::join(d.sizes(), ", "),
                   describe(c));
    const bool same_elements = c.data_ptr() == d.data_ptr() && c.strides() == d.strides();
    if (same_elements || c.numel() == 0 || !c.storage().is_alias_of(d.storage()))
        return;
    // (views of one storage, e.g. padded rows: their spans must be disjoint)
    const auto [c_first, c_last] = byte_span(c);
    const auto [d_first, d_last] = byte_span(d);
    DG_CHECK_INPUT(c_last < d_first || d_last < c_first, "c must be d itself or not overlap d, got c = {} and d = {}",
                   describe(c), describe(d));
}

// An output must share no byte with an input: the kernel's CTAs read the inputs while others write the output, so
// an alias gives a silently wrong result. A host check of the byte ranges the tensors span (a few integer
// operations per tensor, no device access); views that interleave without sharing an element are rejected too.
inline void check_output_disjoint(const at::Tensor& out, const char* out_name,
                                  std::initializer_list<std::pair<const at::Tensor*, const char*>> inputs) {
    if (!out.defined() || out.numel() == 0)
        return;
    const auto [out_first, out_last] = byte_span(out);
    for (const auto& [t, name]: inputs) {
        if (!t->defined() || t->numel() == 0)
            continue;
        const auto [first, last] = byte_span(*t);
        DG_CHECK_INPUT(out_last < first || last < out_first,
                       "{} must not overlap {} (an output may not alias an input), got {} = {} and {} = {}", out_name,
                       name, out_name, describe(out), name, describe(*t));
    }
}

// D [M, N] of a dense GEMM with BF16 operands: BF16 or FP32, row-major (any row stride); C None or of D's dtype
// and shape, row-major, D itself or not overlapping it.
inline void check_dense_output(const at::Tensor& d, const std::optional<at::Tensor>& c, int64_t m, int64_t n) {
    check_defined(d, "d");
    check_dim(d, 2, "d");
    DG_CHECK_INPUT(d.scalar_type() == at::kBFloat16 || d.scalar_type() == at::kFloat,
                   "d must have dtype torch.bfloat16 or torch.float32, got a {}", describe(d));
    DG_CHECK_INPUT(d.size(0) == m && d.size(1) == n, "d must be [M, N] = [{}, {}], got a {}", m, n, describe(d));
    DG_CHECK_INPUT(d.stride(1) == 1 || n <= 1, "d must be row-major (stride 1 along N), got a {}", describe(d));
    if (c.has_value()) {
        check_accumuland(*c, d, "[M, N]");
        DG_CHECK_INPUT(c->stride(1) == 1 || n <= 1, "c must be row-major (stride 1 along N), got a {}", describe(*c));
    }
}

// D = C + A @ B.T with K = 0: D = C (nothing to do in place), or zeros without C.
inline void write_empty_k(const at::Tensor& d, const std::optional<at::Tensor>& c) {
    if (c.has_value() && !c->is_same(d))
        d.copy_(*c);
    else if (!c.has_value())
        d.zero_();
}

inline void check_sm90(const at::Tensor& t, const char* fn) {
    const int major = jit::DeviceRuntime::instance().properties(t.device().index()).major;
    if (major != 9)
        throw NotImplementedError(fmt::format("{}: deep_gemm kernels target SM90 (Hopper); this device is SM{}x", fn,
                                              major));
}

// What fp8_gemm_nt's arguments describe, once every property checkable on the host is checked.
struct Fp8GemmNtProblem {
    int64_t m, n, k;
    bool per_row_sfb;  // recipe (1, 1, 128): FP32 D, sfb per row of B
    CompiledDims dims;
};

// fp8_gemm_nt's checks that need no device (every dtype, shape, stride, recipe and C rule; the devices are checked
// by the caller): separate so that tools/measure_binding_overhead.py times them on a CPU machine.
inline Fp8GemmNtProblem check_fp8_gemm_nt_host(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b,
                                               const at::Tensor& sfb, const at::Tensor& d,
                                               const std::optional<at::Tensor>& c, const Recipe& recipe,
                                               const Recipe& recipe_a, const Recipe& recipe_b,
                                               const std::string& compiled_dims) {
    check_fp8_operand(a, "a[0] (A)");
    check_fp8_operand(b, "b[0] (B)");
    check_defined(d, "d");
    check_dim(d, 2, "d");
    const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
    DG_CHECK_INPUT(b.size(1) == k, "b[0] (B) must be [N, K] with K = {} (A's K), got a {}", k, describe(b));
    DG_CHECK_INPUT(d.size(0) == m && d.size(1) == n, "d must be [M, N] = [{}, {}], got a {}", m, n, describe(d));
    DG_CHECK_INPUT(d.stride(1) == 1 || n <= 1, "d must be row-major (stride 1 along N), got a {}", describe(d));
    DG_CHECK_INPUT(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "M, N and K must each be below 2^31");
    const auto cdims = parse_compiled_dims(compiled_dims);
    const auto [gran_m, gran_n, gran_k] = resolve_recipe(recipe, recipe_a, recipe_b, d);

    DG_CHECK_INPUT(gran_m == 1 && gran_k == 128 && (gran_n == 128 || gran_n == 1),
                   "recipe must be (1, 128, 128) or (1, 1, 128) on SM90, got ({}, {}, {})", gran_m, gran_n, gran_k);
    const bool per_row_sfb = gran_n == 1;
    if (per_row_sfb) {
        check_dtype(d, at::kFloat, "d (recipe (1, 1, 128) writes FP32)");
        if (c.has_value()) {
            check_accumuland(*c, d, "[M, N]");
            DG_CHECK_INPUT(c->stride(1) == 1 || n <= 1, "c must be row-major (stride 1 along N), got a {}", describe(*c));
        }
    } else {
        check_dtype(d, at::kBFloat16, "d (recipe (1, 128, 128) writes BF16)");
        DG_CHECK_INPUT(!c.has_value(), "c must be None with BF16 output: accumulation into C needs recipe (1, 1, 128) "
                                       "and FP32 d");
    }

    const int64_t sf_k = (k + 127) / 128;
    const int64_t sfb_rows = per_row_sfb ? n : (n + 127) / 128;
    check_scales(sfa, "a[1] (sfa)", {m, sf_k}, "[M, ceil(K/128)]");
    check_scales(sfb, "b[1] (sfb)", {sfb_rows, sf_k}, per_row_sfb ? "[N, ceil(K/128)]" : "[ceil(N/128), ceil(K/128)]",
                 std::array<int64_t, 3>{gran_m, gran_n, gran_k});
    check_output_disjoint(d, "d", {{&a, "a[0] (A)"}, {&b, "b[0] (B)"}, {&sfa, "a[1] (sfa)"}, {&sfb, "b[1] (sfb)"}});
    return {m, n, k, per_row_sfb, cdims};
}

// FP8 x FP4 (a packed FP4 B: csrc/apis/fp8_fp4_gemm.hpp, included below)
inline bool is_packed_fp4(const at::Tensor& b);
inline void fp8_fp4_gemm_nt_packed(const at::Tensor& a, const at::Tensor& sfa_in, const at::Tensor& b,
                                   const at::Tensor& sfb_in, const at::Tensor& d, const std::optional<at::Tensor>& c,
                                   const Recipe& recipe, const Recipe& recipe_a, const Recipe& recipe_b,
                                   const std::string& compiled_dims);

// (A and sfa, B and sfb, the Python API's pairs a and b, by reference: a copy of a tensor handle cost ~0.13 us of
// host time, measured with tools/measure_binding_overhead.py and PyTorch 2.13 on a CPU machine)
inline void fp8_gemm_nt(const at::Tensor& a, const at::Tensor& sfa_in, const at::Tensor& b, const at::Tensor& sfb_in,
                        const at::Tensor& d, const std::optional<at::Tensor>& c, const Recipe& recipe,
                        const Recipe& recipe_a, const Recipe& recipe_b, const std::string& compiled_dims,
                        bool disable_ue8m0_cast) {
    if (is_packed_fp4(b))
        return fp8_fp4_gemm_nt_packed(a, sfa_in, b, sfb_in, d, c, recipe, recipe_a, recipe_b, compiled_dims);
    const auto [m, n, k, per_row_sfb, cdims] =
        check_fp8_gemm_nt_host(a, sfa_in, b, sfb_in, d, c, recipe, recipe_a, recipe_b, compiled_dims);
    (void)disable_ue8m0_cast;  // SM90 takes FP32 scales: nothing to cast

    // Devices last
    check_same_cuda_device(a, "a[0] (A)", {{&b, "b[0] (B)"}, {&d, "d"}, {&sfa_in, "a[1] (sfa)"}, {&sfb_in, "b[1] (sfb)"}});
    if (c.has_value())
        check_same_cuda_device(a, "a[0] (A)", {{&*c, "c"}});
    check_sm90(a, "fp8_gemm_nt");
    const jit::DeviceScope device_scope(a.device().index());

    if (m == 0 || n == 0)
        return;
    if (k == 0)
        return write_empty_k(d, c);
    // (the scales as given when they are in the kernels' layout: references, no handle copies)
    at::Tensor sfa_storage, sfb_storage;
    const at::Tensor& sfa = mn_major_tma_aligned(sfa_in, sfa_storage);
    const at::Tensor& sfb = per_row_sfb          ? mn_major_tma_aligned(sfb_in, sfb_storage)
                            : sfb_in.is_contiguous() ? sfb_in
                                                     : (sfb_storage = sfb_in.contiguous());
    const at::Tensor* c_ptr = c.has_value() ? &*c : nullptr;
    kernels::Sm90GemmRunner::run({a, b, d, c_ptr, &sfa, &sfb, kernels::fp8_operands(per_row_sfb), cdims.m, cdims.n,
                                  cdims.k});
}

// The other layouts: FP8 wgmma reads only K-major operands on SM90.
inline void fp8_gemm_unsupported_layout(const std::string& name, const std::string& hint) {
    throw NotImplementedError(fmt::format(
        "{}: FP8 wgmma on SM90 reads only K-major operands; {} and call fp8_gemm_nt", name, hint));
}

}  // namespace dg::apis

#include "fp8_fp4_gemm.hpp"
