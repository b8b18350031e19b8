// The CPU and CUDA kernels of the deep_gemm:: torch.library ops, in C++: the dispatcher calls these functions
// directly, with no call back into Python (an op whose kernel is a Python function pays 1.4-1.9 us more per call,
// tools/measure_op_overhead.py, docs/design.md "Custom ops: kernels in C++").
//
// deep_gemm/ops.py defines the ops (schemas, tags) and their fake implementations; python_api.cpp registers the
// kernels listed in for_each_op_kernel for CPU and CUDA (TORCH_LIBRARY_IMPL, at the extension's load, before ops.py
// defines the schemas: the dispatcher checks each kernel's C++ signature against its schema when the schema arrives).
// ops.py registers Python kernels only for the ops not listed here (_C._op_kernels_in_cpp() names the listed ones).
//
// Each kernel takes the op's flattened arguments (a, sfa instead of the pair a), rebuilds what the csrc/apis function
// takes and calls it; its errors reach Python as the _C binding raises them (call_as_binding).
#pragma once

#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "apis/attention.hpp"
#include "apis/bf16_gemm.hpp"
#include "apis/cublaslt_gemm.hpp"
#include "apis/einsum.hpp"
#include "apis/gemm.hpp"
#include "apis/grouped_gemm.hpp"
#include "apis/hc_prenorm.hpp"
#include "apis/k_grouped_gemm.hpp"
#include "apis/layout.hpp"
#include "apis/quant.hpp"
#include "utils/fast_call.hpp"

namespace dg::op_kernels {

using at::Tensor;
using OptTensor = std::optional<at::Tensor>;
using Ints = at::OptionalIntArrayRef;

// Runs body; an exception of the extension's own (dg::InputError, TypeError, NotImplementedError, RuntimeError) is
// turned into the very Python exception the _C binding raises (ValueError, TypeError, _C.NotImplementedError,
// RuntimeError; same message) and handed to torch as a python_error, which torch.ops restores as it is. (Left to
// themselves they would surface as RuntimeError: torch maps only c10 errors to other types.) Any other exception
// (c10 errors from ATen calls) passes through as the binding's translators would treat it.
template <typename Body>
decltype(auto) call_as_binding(const Body& body) {
    try {
        return body();
    } catch (const python_error&) {
        throw;
    } catch (...) {
        const std::exception_ptr error = std::current_exception();
        python_error translated;
        {
            // (the dispatcher released the GIL before calling the kernel)
            pybind11::gil_scoped_acquire gil;
            if (!fast_call::set_dg_python_error(error))
                throw;
            translated.persist();
        }
        throw std::move(translated);
    }
}

inline apis::Recipe recipe_of(Ints ints) {
    if (!ints.has_value())
        return std::nullopt;
    return std::vector<int64_t>(ints->begin(), ints->end());
}

// ------------------------------------------------------------------------------------------------ FP8 GEMMs
using DenseFp8 = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const OptTensor&,
                          const apis::Recipe&, const apis::Recipe&, const apis::Recipe&, const std::string&, bool);

// (a template: tools/measure_op_overhead.py times this very code around a body that does nothing)
template <DenseFp8 Fn>
void fp8_gemm(const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb, const Tensor& d,
              const OptTensor& c, Ints recipe, Ints recipe_a, Ints recipe_b, std::string_view compiled_dims,
              bool disable_ue8m0_cast) {
    call_as_binding([&] {
        Fn(a, sfa, b, sfb, d, c, recipe_of(recipe), recipe_of(recipe_a), recipe_of(recipe_b),
           std::string(compiled_dims), disable_ue8m0_cast);
    });
}

// (the registered kernels are plain functions: GCC 12 leaves a function template specialization uninstantiated when
// its address is only taken through TORCH_FN)
inline void fp8_gemm_nt(const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb, const Tensor& d,
                        const OptTensor& c, Ints recipe, Ints recipe_a, Ints recipe_b, std::string_view compiled_dims,
                        bool disable_ue8m0_cast) {
    fp8_gemm<&apis::fp8_gemm_nt>(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast);
}

inline void m_grouped_fp8_gemm_nt_contiguous(const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb,
                                             const Tensor& d, const Tensor& grouped_layout, Ints recipe,
                                             Ints recipe_a, Ints recipe_b, std::string_view compiled_dims,
                                             bool disable_ue8m0_cast, bool use_psum_layout, bool ensure_zero_padding,
                                             std::optional<int64_t> expected_m_for_psum_layout) {
    call_as_binding([&] {
        apis::m_grouped_fp8_gemm_nt_contiguous({a, sfa}, {b, sfb}, d, grouped_layout, recipe_of(recipe),
                                               recipe_of(recipe_a), recipe_of(recipe_b), std::string(compiled_dims),
                                               disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
                                               expected_m_for_psum_layout);
    });
}

inline void m_grouped_fp8_gemm_nt_masked(const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb,
                                         const Tensor& d, const Tensor& masked_m, int64_t expected_m, Ints recipe,
                                         Ints recipe_a, Ints recipe_b, std::string_view compiled_dims,
                                         bool disable_ue8m0_cast) {
    call_as_binding([&] {
        apis::m_grouped_fp8_gemm_nt_masked({a, sfa}, {b, sfb}, d, masked_m, expected_m, recipe_of(recipe),
                                           recipe_of(recipe_a), recipe_of(recipe_b), std::string(compiled_dims),
                                           disable_ue8m0_cast);
    });
}

inline void k_grouped_fp8_gemm_nt_contiguous(const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb,
                                             const Tensor& d, Ints ks_cpu, const Tensor& grouped_layout,
                                             const OptTensor& c, Ints recipe, std::string_view compiled_dims,
                                             bool use_psum_layout) {
    call_as_binding([&] {
        apis::k_grouped_fp8_gemm_nt_contiguous(
            {a, sfa}, {b, sfb}, d, apis::require_ks_cpu(recipe_of(ks_cpu), "k_grouped_fp8_gemm_nt_contiguous"),
            grouped_layout, c, recipe_of(recipe), std::string(compiled_dims), use_psum_layout);
    });
}

inline void k_grouped_fp8_gemm_tn_contiguous(const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb,
                                             const Tensor& d, Ints ks_cpu, const Tensor& grouped_layout,
                                             const OptTensor& c, Ints recipe, std::string_view compiled_dims,
                                             bool use_psum_layout) {
    call_as_binding([&] {
        apis::k_grouped_fp8_gemm_tn_contiguous(
            {a, sfa}, {b, sfb}, d, apis::require_ks_cpu(recipe_of(ks_cpu), "k_grouped_fp8_gemm_tn_contiguous"),
            grouped_layout, c, recipe_of(recipe), std::string(compiled_dims), use_psum_layout);
    });
}

// ------------------------------------------------------------------------------------ BF16 and cuBLASLt GEMMs
#define DG_BF16_GEMM_KERNEL(name)                                                                               \
    inline void name(const Tensor& a, const Tensor& b, const Tensor& d, const OptTensor& c,                     \
                     std::string_view compiled_dims) {                                                           \
        call_as_binding([&] { apis::name(a, b, d, c, std::string(compiled_dims)); });                           \
    }
DG_BF16_GEMM_KERNEL(bf16_gemm_nt)
DG_BF16_GEMM_KERNEL(bf16_gemm_nn)
DG_BF16_GEMM_KERNEL(bf16_gemm_tn)
DG_BF16_GEMM_KERNEL(bf16_gemm_tt)
#undef DG_BF16_GEMM_KERNEL

#define DG_CUBLASLT_GEMM_KERNEL(name)                                                                           \
    inline void name(const Tensor& a, const Tensor& b, const Tensor& d, const OptTensor& c) {                   \
        call_as_binding([&] { apis::name(a, b, d, c); });                                                       \
    }
DG_CUBLASLT_GEMM_KERNEL(cublaslt_gemm_nt)
DG_CUBLASLT_GEMM_KERNEL(cublaslt_gemm_nn)
DG_CUBLASLT_GEMM_KERNEL(cublaslt_gemm_tn)
DG_CUBLASLT_GEMM_KERNEL(cublaslt_gemm_tt)
#undef DG_CUBLASLT_GEMM_KERNEL

inline void m_grouped_bf16_gemm_nt_contiguous(const Tensor& a, const Tensor& b, const Tensor& d,
                                              const Tensor& grouped_layout, std::string_view compiled_dims,
                                              bool use_psum_layout, bool ensure_zero_padding,
                                              std::optional<int64_t> expected_m_for_psum_layout) {
    call_as_binding([&] {
        apis::m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, std::string(compiled_dims), use_psum_layout,
                                                ensure_zero_padding, expected_m_for_psum_layout);
    });
}

inline void m_grouped_bf16_gemm_nn_contiguous(const Tensor& a, const Tensor& b, const Tensor& d,
                                              const Tensor& grouped_layout, std::string_view compiled_dims,
                                              bool use_psum_layout, bool ensure_zero_padding) {
    call_as_binding([&] {
        apis::m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, std::string(compiled_dims), use_psum_layout,
                                                ensure_zero_padding);
    });
}

inline void m_grouped_bf16_gemm_nt_masked(const Tensor& a, const Tensor& b, const Tensor& d, const Tensor& masked_m,
                                          int64_t expected_m, std::string_view compiled_dims) {
    call_as_binding(
        [&] { apis::m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, std::string(compiled_dims)); });
}

inline void k_grouped_bf16_gemm_tn_contiguous(const Tensor& a, const Tensor& b, const Tensor& d, Ints ks_cpu,
                                              const Tensor& grouped_layout, const OptTensor& c,
                                              std::string_view compiled_dims, bool use_psum_layout) {
    call_as_binding([&] {
        apis::k_grouped_bf16_gemm_tn_contiguous(
            a, b, d, apis::require_ks_cpu(recipe_of(ks_cpu), "k_grouped_bf16_gemm_tn_contiguous"), grouped_layout, c,
            std::string(compiled_dims), use_psum_layout);
    });
}

// ------------------------------------------------------------------------------------------------- MQA logits
inline Tensor fp8_fp4_mqa_logits(const Tensor& q, const OptTensor& q_sf, const Tensor& kv, const Tensor& kv_sf,
                                 const Tensor& weights, const Tensor& cu_seq_len_k_start,
                                 const Tensor& cu_seq_len_k_end, bool clean_logits, int64_t max_seqlen_k,
                                 at::ScalarType logits_dtype) {
    return call_as_binding([&] {
        return apis::fp8_fp4_mqa_logits({q, q_sf}, {kv, kv_sf}, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                                        clean_logits, max_seqlen_k, logits_dtype);
    });
}

inline Tensor fp8_fp4_paged_mqa_logits(const Tensor& q, const OptTensor& q_sf, const Tensor& kv_cache,
                                       const Tensor& weights, const Tensor& context_lens, const Tensor& block_table,
                                       const Tensor& schedule_meta, int64_t max_context_len, bool clean_logits,
                                       at::ScalarType logits_dtype, const OptTensor& indices) {
    return call_as_binding([&] {
        return apis::fp8_fp4_paged_mqa_logits({q, q_sf}, kv_cache, weights, context_lens, block_table, schedule_meta,
                                              max_context_len, clean_logits, logits_dtype, indices);
    });
}

inline Tensor get_paged_mqa_logits_metadata(const Tensor& context_lens, int64_t block_kv, int64_t num_sms,
                                            const OptTensor& indices) {
    return call_as_binding([&] { return apis::get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices); });
}

// ---------------------------------------------------------------------------------------------- scale layouts
// (a new int32 tensor, never sf itself: the transforms that may return sf keep their Python kernel)
inline Tensor get_mn_major_tma_aligned_packed_ue8m0_tensor(const Tensor& sf, const OptTensor& psum_layout) {
    return call_as_binding([&] { return apis::get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout); });
}

// ------------------------------------------------------------------------------------- einsum, HyperConnection
inline void einsum(std::string_view expr, const Tensor& a, const Tensor& b, const Tensor& d, const OptTensor& c,
                   bool use_cublaslt) {
    call_as_binding([&] { apis::einsum(std::string(expr), a, b, d, c, use_cublaslt); });
}

inline void fp8_einsum(std::string_view expr, const Tensor& a, const Tensor& sfa, const Tensor& b, const Tensor& sfb,
                       const Tensor& d, const OptTensor& c, at::IntArrayRef recipe) {
    call_as_binding([&] { apis::fp8_einsum(std::string(expr), {a, sfa}, {b, sfb}, d, c, recipe.vec()); });
}

inline void tf32_hc_prenorm_gemm(const Tensor& a, const Tensor& b, const Tensor& d, const Tensor& sqr_sum,
                                 std::optional<int64_t> num_splits) {
    call_as_binding([&] { apis::tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits); });
}

// ------------------------------------------------------------------------------------------------- FP8 casts
#define DG_PER_TOKEN_QUANT_KERNEL(name)                                                                         \
    inline std::tuple<Tensor, Tensor> name(const Tensor& x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0, \
                                           bool sf_mn_major) {                                                  \
        return call_as_binding([&] { return apis::name(x, use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major); }); \
    }
DG_PER_TOKEN_QUANT_KERNEL(per_token_quant_fp8)
DG_PER_TOKEN_QUANT_KERNEL(per_token_quant_fp4)
#undef DG_PER_TOKEN_QUANT_KERNEL

inline std::tuple<Tensor, Tensor> silu_and_mul_quant_fp8(const Tensor& x, bool use_ue8m0, int64_t gran_k,
                                                         bool use_packed_ue8m0, const OptTensor& row_weights,
                                                         std::optional<double> activation_clamp,
                                                         const OptTensor& masked_m, bool sf_mn_major) {
    return call_as_binding([&] {
        return apis::silu_and_mul_quant_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, row_weights, activation_clamp,
                                            masked_m, sf_mn_major);
    });
}

inline std::tuple<Tensor, Tensor> per_block_quant_fp8(const Tensor& x, bool use_ue8m0) {
    return call_as_binding([&] { return apis::per_block_quant_fp8(x, use_ue8m0); });
}

// ---------------------------------------------------------------------------------------------- registration
// Calls add(name, kernel) for every op whose kernels are these (one list for the registration and for
// op_kernels_in_cpp). Not here, so their kernels stay Python functions in deep_gemm/ops.py: the SM100-only layouts
// (their kernel is their fake implementation too), the two scale-layout transforms that may return sf itself (an op
// may not return an alias of its input: their Python kernel copies then) and fp8_gemm_nt_skip_head_mid
// (head_splits goes through the binding's tuple conversion and its error).
template <typename Add>
void for_each_op_kernel(Add&& add) {
    add("fp8_gemm_nt", TORCH_FN(fp8_gemm_nt));
    add("m_grouped_fp8_gemm_nt_contiguous", TORCH_FN(m_grouped_fp8_gemm_nt_contiguous));
    add("m_grouped_fp8_gemm_nt_masked", TORCH_FN(m_grouped_fp8_gemm_nt_masked));
    add("k_grouped_fp8_gemm_nt_contiguous", TORCH_FN(k_grouped_fp8_gemm_nt_contiguous));
    add("k_grouped_fp8_gemm_tn_contiguous", TORCH_FN(k_grouped_fp8_gemm_tn_contiguous));
    add("bf16_gemm_nt", TORCH_FN(bf16_gemm_nt));
    add("bf16_gemm_nn", TORCH_FN(bf16_gemm_nn));
    add("bf16_gemm_tn", TORCH_FN(bf16_gemm_tn));
    add("bf16_gemm_tt", TORCH_FN(bf16_gemm_tt));
    add("cublaslt_gemm_nt", TORCH_FN(cublaslt_gemm_nt));
    add("cublaslt_gemm_nn", TORCH_FN(cublaslt_gemm_nn));
    add("cublaslt_gemm_tn", TORCH_FN(cublaslt_gemm_tn));
    add("cublaslt_gemm_tt", TORCH_FN(cublaslt_gemm_tt));
    add("m_grouped_bf16_gemm_nt_contiguous", TORCH_FN(m_grouped_bf16_gemm_nt_contiguous));
    add("m_grouped_bf16_gemm_nn_contiguous", TORCH_FN(m_grouped_bf16_gemm_nn_contiguous));
    add("m_grouped_bf16_gemm_nt_masked", TORCH_FN(m_grouped_bf16_gemm_nt_masked));
    add("k_grouped_bf16_gemm_tn_contiguous", TORCH_FN(k_grouped_bf16_gemm_tn_contiguous));
    add("fp8_fp4_mqa_logits", TORCH_FN(fp8_fp4_mqa_logits));
    add("fp8_fp4_paged_mqa_logits", TORCH_FN(fp8_fp4_paged_mqa_logits));
    add("get_paged_mqa_logits_metadata", TORCH_FN(get_paged_mqa_logits_metadata));
    add("get_mn_major_tma_aligned_packed_ue8m0_tensor", TORCH_FN(get_mn_major_tma_aligned_packed_ue8m0_tensor));
    add("einsum", TORCH_FN(einsum));
    add("fp8_einsum", TORCH_FN(fp8_einsum));
    add("tf32_hc_prenorm_gemm", TORCH_FN(tf32_hc_prenorm_gemm));
    add("per_token_quant_fp8", TORCH_FN(per_token_quant_fp8));
    add("per_token_quant_fp4", TORCH_FN(per_token_quant_fp4));
    add("silu_and_mul_quant_fp8", TORCH_FN(silu_and_mul_quant_fp8));
    add("per_block_quant_fp8", TORCH_FN(per_block_quant_fp8));
}

// The names of the ops registered here (deep_gemm/ops.py registers Python kernels for the others).
inline std::vector<std::string> op_kernels_in_cpp() {
    std::vector<std::string> names;
    for_each_op_kernel([&](const char* name, const auto&) { names.emplace_back(name); });
    return names;
}

}  // namespace dg::op_kernels
