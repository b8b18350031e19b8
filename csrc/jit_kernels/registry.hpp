// Every kernel family the JIT can render, by name, with its configuration given as integer
// parameters: what the compile-only entry point (tests, precompilation) uses to build kernels for
// a named arch without a GPU.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "../jit/cache.hpp"
#include "params.hpp"
#include "impls/sm90_gemm_source.hpp"
#include "impls/sm90_fp8_mqa_logits.hpp"
#include "impls/sm90_fp8_paged_mqa_logits.hpp"
#include "impls/smxx_layout.hpp"
#include "impls/smxx_mqa_logits_pieces.hpp"
#include "impls/smxx_paged_mqa_schedule.hpp"
#include "impls/smxx_transpose_fp8.hpp"
#include "impls/smxx_zero_padding.hpp"

namespace dg::kernels {

inline const std::map<std::string, std::function<jit::KernelSource(const KernelParams&)>>& kernel_registry() {
    static const std::map<std::string, std::function<jit::KernelSource(const KernelParams&)>> registry = {
        {"smxx_transpose_sf", [](const KernelParams&) { return render_layout_kernel(LayoutKernel::kTransposeSf); }},
        {"smxx_pack_ue8m0", [](const KernelParams&) { return render_layout_kernel(LayoutKernel::kPackUe8m0); }},
        {"sm90_gemm", [](const KernelParams& p) { return render_sm90_gemm(config_from_params(p)); }},
        {"sm90_fp8_mqa_logits",
         [](const KernelParams& p) { return render_sm90_fp8_mqa_logits(mqa_logits_config_from_params(p)); }},
        {"sm90_fp8_paged_mqa_logits",
         [](const KernelParams& p) { return render_sm90_fp8_paged_mqa_logits(paged_mqa_logits_config_from_params(p)); }},
        {"smxx_paged_mqa_schedule", [](const KernelParams& p) {  // {"batch": B} picks the CTA shape (default 4096)
             return render_paged_mqa_schedule(paged_mqa_schedule_shape(param_or(p, "batch", 4096)));
         }},
        {"smxx_mqa_logits_pieces", [](const KernelParams& p) {
             return render_mqa_logits_pieces(param_or(p, "num_heads", 64), param_or(p, "head_dim", 128));
         }},
        {"smxx_transpose_fp8",
         [](const KernelParams& p) { return render_transpose_fp8(param_or(p, "aligned", 1) != 0); }},
        {"smxx_zero_padding_rows",  // {"psum_layout": 1}: the cumulative-ends layout (default 0: per-row ids)
         [](const KernelParams& p) { return render_zero_padding_kernel(param_or(p, "psum_layout", 0) != 0); }},
    };
    return registry;
}

}  // namespace dg::kernels
