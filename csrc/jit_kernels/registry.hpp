// Every kernel family the JIT can render, by name, with its configuration given as named integer
// parameters: what the compile-only entry point (tests, precompilation) uses to build kernels for
// a named arch without a GPU. Each family lists the parameters it reads, with what they mean: the
// entry point rejects any other name and documents these (compile_kernel's docstring).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../jit/cache.hpp"
#include "../utils/exception.hpp"
#include "params.hpp"
#include "heuristics/sm90_gemm_resources.hpp"
#include "impls/sm90_gemm_source.hpp"
#include "impls/sm90_fp8_mqa_logits.hpp"
#include "impls/sm90_fp8_paged_mqa_logits.hpp"
#include "impls/sm90_tf32_hc_prenorm_gemm.hpp"
#include "impls/smxx_fold_scales.hpp"
#include "impls/smxx_layout.hpp"
#include "impls/smxx_mega_moe.hpp"
#include "impls/smxx_mqa_logits_pieces.hpp"
#include "impls/smxx_paged_mqa_schedule.hpp"
#include "impls/smxx_quant.hpp"
#include "impls/smxx_transpose_fp8.hpp"
#include "impls/smxx_zero_padding.hpp"

namespace dg::kernels {

struct KernelParamDoc {
    const char* name;
    const char* meaning;  // what it sets, its values and its default
};

struct KernelFamily {
    std::vector<KernelParamDoc> params;
    std::function<jit::KernelSource(const KernelParams&)> render;
};

// A config whose shared memory exceeds what one SM90 block may have would compile and then fail at launch.
inline void check_fits_sm90_smem(const char* family, uint32_t smem_bytes) {
    DG_CHECK_INPUT(smem_bytes <= kSm90MaxSmemBytes,
                   "{}: this configuration needs {} bytes of shared memory, an SM90 block can have at most {} (fewer "
                   "num_stages or smaller blocks)", family, smem_bytes, kSm90MaxSmemBytes);
}

inline const std::map<std::string, KernelFamily>& kernel_registry() {
    static const std::map<std::string, KernelFamily> registry = {
        {"smxx_transpose_sf", {{}, [](const KernelParams&) { return render_layout_kernel(LayoutKernel::kTransposeSf); }}},
        {"smxx_pack_ue8m0", {{}, [](const KernelParams&) { return render_layout_kernel(LayoutKernel::kPackUe8m0); }}},
        {"sm90_gemm",
         {{
              {"shape_m", "M compiled in (0: given at run time; default 0)"},
              {"shape_n", "N compiled in (0: at run time; default 0)"},
              {"shape_k", "K compiled in (0: at run time; default 0)"},
              {"block_m", "rows of a tile (default 128)"},
              {"block_n", "columns of a tile (default 128)"},
              {"num_stages", "shared-memory pipeline stages (default 4)"},
              {"num_math_warpgroups", "math warpgroups (default: from block_m)"},
              {"num_group_n", "tiles along N per rasterized group (default 8)"},
              {"num_multicast", "CTAs of a cluster sharing one operand by TMA multicast, 1 or 2 (default 1)"},
              {"is_multicast_on_a", "1: A is the multicast operand, 0: B (default 0)"},
              {"num_splits", "split-K units per tile (default 1)"},
              {"stream_k", "0 off, 1 the last wave's tiles split along K, 2 also one wave before (default 0)"},
              {"overlap_promotion", "1: FP8 promotion overlapped with the next block's wgmmas (default 0)"},
              {"per_row_sfb", "1: FP8 recipe (1, 1, 128), FP32 D (default 0: recipe (1, 128, 128))"},
              {"fp4_b", "1: FP8 A x packed FP4 B (e2m1, UE8M0 per 1x32), converted to e4m3 in shared memory"},
              {"bf16", "1: BF16 operands (default 0: FP8)"},
              {"mn_major_a", "BF16: 1 if A is MN-major (default 0)"},
              {"mn_major_b", "BF16: 1 if B is MN-major (default 0)"},
              {"fp32_out", "BF16: 1 for an FP32 D (default 0)"},
              {"has_c", "BF16: 1 with an FP32 C accumulated into D (default 0)"},
              {"gemm_type", "0 normal, 1 m-grouped contiguous, 2 its psum layout, 3 m-grouped masked, 4 k-grouped"},
              {"batched", "masked: 1 if A [rows, groups, K] and D [rows, groups, N] are read and written in place "
                          "through 3-D maps (default 0)"},
              {"k_batched", "normal BF16: 1 for D = sum_s A[s] @ B[s]^T, A [S, M, K] and B [S, N, K] read through 3-D "
                            "maps (default 0)"},
              {"head_left", "skip-head-mid: the left columns of each head (a multiple of 64; default 0: off)"},
              {"head_mid", "skip-head-mid: the columns of each head left unwritten (default 0)"},
              {"head_right", "skip-head-mid: the right columns of each head (a multiple of 64; default 0)"},
              {"max_k_groups", "k-grouped: capacity of the per-group TMA maps (default 8 for gemm_type 4, else 0)"},
              {"use_tma_store", "1: D stored through shared memory and TMA (default: where the epilogue allows)"},
              {"store_chunk_n", "columns per TMA store (default: from block_n)"},
              {"fp32_buffers", "FP32 D through TMA: staging buffers per math warpgroup (default: the fewest)"},
          },
          [](const KernelParams& p) {
              const auto c = config_from_params(p);
              check_fits_sm90_smem("sm90_gemm", c.smem_bytes);
              return render_sm90_gemm(c);
          }}},
        {"sm90_fp8_mqa_logits",
         {{
              {"num_heads", "query heads H, 16, 32 or 64 (default 64)"},
              {"head_dim", "head dimension D, 32, 64 or 128 (default 128)"},
              {"num_stages", "KV pipeline stages (default 8 for D 128, else 12)"},
              {"is_compressed", "1: compressed rows (default 0)"},
              {"clean_logits", "1: write -inf outside [ks, ke) (default 1)"},
              {"out_bf16", "1: BF16 logits (default 0: FP32)"},
              {"relu_by_abs", "1: the head reduction through absolute values, the signed sums' form (default 0)"},
              {"signed_sum_wgmma", "1: signed head sums by wgmma, needs relu_by_abs (default 0)"},
              {"split_halves", "1: each math warpgroup's tile in two halves, the first reduced while the second's wgmmas run (default 0)"},
              {"fp4_operands", "1: q and kv packed e2m1 with UE8M0 scales per 1x32, e4m3 made in shared memory; D 64 or 128 (default 0)"},
          },
          [](const KernelParams& p) {
              const auto c = mqa_logits_config_from_params(p);
              check_fits_sm90_smem("sm90_fp8_mqa_logits", c.smem_bytes);
              return render_sm90_fp8_mqa_logits(c);
          }}},
        {"sm90_fp8_paged_mqa_logits",
         {{
              {"next_n", "queries per request, 1, 2 or 4 (default 1)"},
              {"num_heads", "query heads H, 16, 32 or 64 (default 64)"},
              {"head_dim", "head dimension D, 32, 64 or 128 (default 128)"},
              {"block_kv", "keys per kv-cache block, 32 or 64 (default 64)"},
              {"is_2d_context_lens", "1: context_lens [B, next_n] (default 0: [B])"},
              {"clean_logits", "1: write -inf past each context (default 0)"},
              {"num_math_wgs", "math warpgroups (default: the heuristic's)"},
              {"relu_by_abs", "1: the head reduction through absolute values, the signed sums' form (default: the heuristic's)"},
              {"signed_sum_wgmma", "1: signed head sums by wgmma, needs relu_by_abs (default: the heuristic's)"},
              {"num_stages", "KV pipeline stages (default: the most that fit)"},
              {"out_bf16", "1: BF16 logits (default 0: FP32)"},
              {"has_indices", "1: q rows are tokens, each with its block-table row from `indices` (default 0)"},
              {"fp4_operands", "1: q and the cache's kv packed e2m1 with UE8M0 scales per 1x32; D 64 or 128 (default 0)"},
          },
          [](const KernelParams& p) {
              const auto c = paged_mqa_logits_config_from_params(p);
              check_fits_sm90_smem("sm90_fp8_paged_mqa_logits", c.smem_bytes);
              return render_sm90_fp8_paged_mqa_logits(c);
          }}},
        {"sm90_tf32_hc_prenorm_gemm",
         {{
              {"n", "columns of D (rows of B), a multiple of 8 in [8, 32] (default 32)"},
              {"block_m", "rows per CTA, 64 or 128 (default 128)"},
              {"num_stages", "cp.async ring stages (default 8 at block_m 128, 12 at 64)"},
          },
          [](const KernelParams& p) {
              const uint32_t block_m = param_or(p, "block_m", 128);
              const auto c = hc_prenorm_config(param_or(p, "n", 32), block_m,
                                               param_or(p, "num_stages", hc_prenorm_default_stages(block_m)));
              check_fits_sm90_smem("sm90_tf32_hc_prenorm_gemm", c.smem_bytes);
              return render_sm90_tf32_hc_prenorm_gemm(c);
          }}},
        {"smxx_paged_mqa_schedule",
         {{{"batch", "batch size B, picks the CTA shape (default 4096)"}},
          [](const KernelParams& p) {
              return render_paged_mqa_schedule(paged_mqa_schedule_shape(param_or(p, "batch", 4096)));
          }}},
        {"smxx_mqa_logits_pieces",
         {{{"num_heads", "query heads H (default 64)"}, {"head_dim", "head dimension D (default 128)"}},
          [](const KernelParams& p) {
              return render_mqa_logits_pieces(param_or(p, "num_heads", 64), param_or(p, "head_dim", 128));
          }}},
        {"smxx_quant_per_token",
         {{
              {"gran_k", "values per scale along K, 32 or 128 (default 128)"},
              {"fp32_input", "1: FP32 input (default 0: BF16)"},
              {"ue8m0", "1: power-of-two scales (default 0)"},
              {"packed_ue8m0", "1: scales as UE8M0 bytes packed four to an int32, needs ue8m0 (default 0)"},
              {"swiglu", "1: rows are [gate, up], silu(gate) * up is cast (default 0)"},
              {"aligned", "1: rows 16-byte aligned and K a multiple of 8: vector loads and stores (default 1)"},
              {"fp4", "1: e2m1 codes two to a byte, scale amax / 6 (default 0: e4m3)"},
          },
          [](const KernelParams& p) {
              PerTokenQuantVariant v;
              v.fp4 = param_or(p, "fp4", 0) != 0;
              v.gran_k = static_cast<uint32_t>(param_or(p, "gran_k", 128));
              v.fp32_input = param_or(p, "fp32_input", 0) != 0;
              v.ue8m0 = param_or(p, "ue8m0", 0) != 0;
              v.packed_ue8m0 = param_or(p, "packed_ue8m0", 0) != 0;
              v.swiglu = param_or(p, "swiglu", 0) != 0;
              v.aligned = param_or(p, "aligned", 1) != 0;
              return render_per_token_quant(v);
          }}},
        {"smxx_quant_per_block",
         {{
              {"fp32_input", "1: FP32 input (default 0: BF16)"},
              {"ue8m0", "1: power-of-two scales (default 0)"},
              {"aligned", "1: rows 16-byte aligned and K a multiple of 8: vector loads and stores (default 1)"},
          },
          [](const KernelParams& p) {
              PerBlockQuantVariant v;
              v.fp32_input = param_or(p, "fp32_input", 0) != 0;
              v.ue8m0 = param_or(p, "ue8m0", 0) != 0;
              v.aligned = param_or(p, "aligned", 1) != 0;
              return render_per_block_quant(v);
          }}},
        {"smxx_transpose_fp8",
         {{{"aligned", "1: the source and its row stride are multiples of 16 bytes: 16-byte loads (default 1)"}},
          [](const KernelParams& p) { return render_transpose_fp8(param_or(p, "aligned", 1) != 0); }}},
        {"smxx_mega_moe_route", {{}, [](const KernelParams&) { return render_mega_moe_kernel(MegaMoeKernel::kRoute); }}},
        {"smxx_mega_moe_gather", {{}, [](const KernelParams&) { return render_mega_moe_kernel(MegaMoeKernel::kGather); }}},
        {"smxx_mega_moe_swiglu",
         {{{"out", "0: BF16 (from BF16), 1: FP8 with FP32 1x128 scales (from FP32), 2: FP8 quantized per 1x32 with UE8M0 "
                   "scales and folded to 1x128 (from BF16) (default 1)"},
           {"fast_math", "1: approximate exp and division in SiLU (default 1)"}},
          [](const KernelParams& p) {
              const int64_t out = param_or(p, "out", 1);
              DG_CHECK_INPUT(out >= 0 && out <= 2, "smxx_mega_moe_swiglu: out must be 0, 1 or 2, got {}", out);
              return render_mega_moe_kernel(MegaMoeKernel::kSwiglu, static_cast<deep_gemm::MegaSwigluOut>(out),
                                            param_or(p, "fast_math", 1) != 0);
          }}},
        {"smxx_mega_moe_pre_dispatch",
         {{}, [](const KernelParams&) { return render_mega_moe_kernel(MegaMoeKernel::kPreDispatch); }}},
        {"smxx_mega_moe_combine", {{}, [](const KernelParams&) { return render_mega_moe_kernel(MegaMoeKernel::kCombine); }}},
        {"smxx_fold_scales",
         {{{"fp4_in", "1: the operand is packed e2m1 (default 0: e4m3)"}},
          [](const KernelParams& p) { return render_fold_scales_kernel(param_or(p, "fp4_in", 0) != 0); }}},
        {"smxx_zero_padding_rows",
         {{{"psum_layout", "1: the cumulative-ends layout (default 0: per-row ids)"},
           {"group_segments", "per-row: 1 for only the padding rows of segments that start with a group's row "
                              "(ensure_zero_padding=False; default 0: every padding row)"}},
          [](const KernelParams& p) {
              return render_zero_padding_kernel(param_or(p, "psum_layout", 0) != 0,
                                                param_or(p, "group_segments", 0) != 0);
          }}},
    };
    return registry;
}

// Raise ValueError naming the first parameter `family` does not read, with the names it knows.
inline void check_known_params(const std::string& family, const KernelFamily& kernel, const KernelParams& params) {
    for (const auto& [name, _]: params) {
        bool known = false;
        for (const auto& doc: kernel.params)
            known = known || name == doc.name;
        if (known)
            continue;
        std::vector<std::string> names;
        for (const auto& doc: kernel.params)
            names.emplace_back(doc.name);
        throw InputError(fmt::format("compile_kernel: unknown parameter '{}' for kernel family '{}'; it takes {}", name,
                                     family, names.empty() ? std::string("no parameters") : fmt::format("{}", fmt::join(names, ", "))));
    }
}

// compile_kernel's parameter documentation: one block per family.
inline std::string kernel_params_doc() {
    std::string out;
    for (const auto& [family, kernel]: kernel_registry()) {
        out += "  " + family + (kernel.params.empty() ? ": no parameters\n" : ":\n");
        for (const auto& doc: kernel.params)
            out += fmt::format("    {}: {}\n", doc.name, doc.meaning);
    }
    return out;
}

}  // namespace dg::kernels
