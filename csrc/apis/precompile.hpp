// What the ahead-of-time builds (deep_gemm/precompile.py) need from the extension, all without a GPU: the sources a
// launch would render for a problem (through the launchers' own planning functions, so a precompiled kernel is the
// one a launch looks up), a registry family's source, and a source's cache entry (key, folder, whether it is built).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../jit/cache.hpp"
#include "../jit/device_runtime.hpp"
#include "../jit_kernels/heuristics/sm90_gemm_plan.hpp"
#include "../jit_kernels/impls/sm90_fp8_mqa_logits.hpp"
#include "../jit_kernels/impls/sm90_fp8_paged_mqa_logits.hpp"
#include "../jit_kernels/impls/sm90_gemm_source.hpp"
#include "../jit_kernels/impls/smxx_mqa_logits_pieces.hpp"
#include "../jit_kernels/registry.hpp"
#include "gemm.hpp"

namespace dg::apis {

namespace detail {

// Distinct sources in order of first appearance, each with the problem values (M, expected_m, ...) that render it.
class SourceSet {
public:
    void add(const jit::KernelSource& source, int64_t value, bool first_plan_only = false) {
        auto [it, inserted] = index_.emplace(source.code, entries_.size());
        if (inserted)
            entries_.push_back({source, {}, first_plan_only});
        auto& entry = entries_[it->second];
        entry.first_plan_only = entry.first_plan_only && first_plan_only;
        if (entry.values.empty() || entry.values.back() != value)
            entry.values.push_back(value);
    }
    pybind11::list to_list() const {
        pybind11::list out;
        for (const auto& e: entries_) {
            pybind11::dict d;
            d["family"] = e.source.family;
            d["source"] = e.source.code;
            d["values"] = e.values;
            d["first_plan_only"] = e.first_plan_only;
            out.append(d);
        }
        return out;
    }

private:
    struct Entry {
        jit::KernelSource source;
        std::vector<int64_t> values;
        bool first_plan_only;
    };
    std::vector<Entry> entries_;
    std::map<std::string, size_t> index_;
};

}  // namespace detail

// The SM90 GEMM kernels that calls with these problems render: one call per value of `m_values` (dense and
// contiguous: M, the rows of A; masked: expected_m; k-grouped: M of each group), D contiguous and 16-byte aligned as
// PyTorch allocates it. Each value is planned as the launcher plans it: with the device's cluster capacity
// (`cluster_ctas`, CTAs that whole clusters of 1 .. 8 fill; empty: not known) and, for the first GEMM planned in a
// process (before that capacity is measured), with whole clusters of num_sms; both kernels are returned.
// compiled_dims, contiguous alignment and DG_TUNE: read as the launch reads them (set_ignore_compile_dims,
// set_mk_alignment_for_contiguous_layout, the environment).
inline pybind11::list render_gemm_kernels(const std::vector<int64_t>& m_values, int64_t n, int64_t k, uint32_t num_sms,
                                          const std::vector<uint32_t>& cluster_ctas, bool per_row_sfb, bool bf16,
                                          bool mn_major_a, bool mn_major_b, bool fp32_out, bool has_c,
                                          uint32_t gemm_type, int64_t num_groups, int64_t max_m,
                                          const std::string& compiled_dims, bool fp4_b) {
    using namespace kernels;
    DG_CHECK_INPUT(num_sms > 0, "num_sms must be positive, got {}", num_sms);
    DG_CHECK_INPUT(cluster_ctas.empty() || cluster_ctas.size() == kMaxSplits,
                   "cluster_ctas must list the CTAs that whole clusters of 1 .. {} CTAs fill ({} values), got {}",
                   kMaxSplits, kMaxSplits, cluster_ctas.size());
    DG_CHECK_INPUT(gemm_type <= 4, "gemm_type must be 0 (normal), 1 (m-grouped contiguous), 2 (its psum layout), 3 "
                   "(m-grouped masked) or 4 (k-grouped), got {}", gemm_type);
    DG_CHECK_INPUT(n > 0 && n <= INT32_MAX, "n must be in [1, 2^31), got {}", n);
    const auto type = static_cast<GemmType>(gemm_type);
    const bool masked = type == GemmType::kMGroupedMasked, k_grouped = type == GemmType::kKGroupedContiguous;
    const bool contiguous = type == GemmType::kMGroupedContiguous || type == GemmType::kMGroupedContiguousPsum;
    DG_CHECK_INPUT(k_grouped || (k > 0 && k <= INT32_MAX), "k must be in [1, 2^31), got {}", k);
    DG_CHECK_INPUT(num_groups >= 1 && (num_groups == 1 || type != GemmType::kNormal) && num_groups <= INT32_MAX,
                   "num_groups must be 1 for a normal GEMM and positive for grouped ones, got {}", num_groups);
    DG_CHECK_INPUT(!masked || (max_m > 0 && max_m % 64 == 0 && num_groups * max_m <= INT32_MAX),
                   "max_m (the masked layout's rows per group) must be a positive multiple of 64, got {}", max_m);
    DG_CHECK_INPUT(!(bf16 && per_row_sfb), "per_row_sfb (FP8 recipe (1, 1, 128)) and bf16 exclude each other");
    DG_CHECK_INPUT(bf16 || (!mn_major_a && !mn_major_b && !fp32_out),
                   "mn_major_a, mn_major_b and fp32_out describe BF16 GEMMs (bf16=True)");
    DG_CHECK_INPUT(!fp4_b || (!bf16 && !per_row_sfb && !has_c && !k_grouped && k % 32 == 0),
                   "fp4_b (a packed FP4 B) is an FP8 GEMM with BF16 D, no C, not k-grouped, K a multiple of 32");
    GemmOperands operands = bf16    ? GemmOperands{OperandKind::kBf16, mn_major_a, mn_major_b, fp32_out, has_c}
                            : fp4_b ? fp8_fp4_operands()
                                    : fp8_operands(per_row_sfb, has_c);
    const auto dims = parse_compiled_dims(compiled_dims);
    const uint32_t alignment = contiguous ? static_cast<uint32_t>(jit::DeviceRuntime::instance().mk_alignment())
                               : masked   ? masked_block_alignment(max_m)
                               : k_grouped ? 0 : 128;
    const uint64_t d_element_size = operands.fp32_out || operands.per_row_sfb() ? 4 : 2;
    const bool use_tma_store = k_grouped ? k_grouped_tma_store_fits(n, 0)
                                         : dense_tma_store_fits(operands, n, d_element_size, n * d_element_size, 0);
    std::optional<ClusterCapacity> measured;
    if (!cluster_ctas.empty()) {
        ClusterCapacity device = ClusterCapacity::estimate(num_sms);
        for (size_t i = 0; i < cluster_ctas.size(); ++i)
            device.ctas[i + 1] = cluster_ctas[i];
        measured = capacity_for(device, num_sms);
    }
    const GemmOverrides forced =
        with_gemm_settings(gemm_overrides_for(operands), jit::DeviceRuntime::instance().gemm_settings_key());

    detail::SourceSet sources;
    for (const int64_t value: m_values) {
        DG_CHECK_INPUT(value > 0 && value <= INT32_MAX,
                       "m_values must be in [1, 2^31) (M = 0 launches nothing), got {}", value);
        DG_CHECK_INPUT(type != GemmType::kMGroupedContiguous || value % alignment == 0,
                       "m_values: M = {} of the contiguous layout must be a multiple of "
                       "get_mk_alignment_for_contiguous_layout() = {}", value, alignment);
        GemmProblem p;
        p.m = static_cast<uint32_t>(masked ? num_groups * max_m : value);
        p.n = static_cast<uint32_t>(n), p.k = k_grouped ? 0 : static_cast<uint32_t>(k);
        p.num_sms = num_sms, p.use_tma_store = use_tma_store, p.operands = operands;
        p.compile_m = dims.m, p.compile_n = dims.n, p.compile_k = dims.k && !k_grouped;
        p.gemm_type = type, p.num_groups = static_cast<uint32_t>(num_groups), p.grouped_alignment = alignment;
        p.config_m = masked ? masked_config_m(num_groups, value, max_m)
                   : k_grouped ? static_cast<uint32_t>(std::min<int64_t>(num_groups * value, INT32_MAX)) : 0;
        if (measured)
            sources.add(render_sm90_gemm(plan_gemm_config(p, &*measured, forced)), value);
        sources.add(render_sm90_gemm(plan_gemm_config(p, nullptr, forced)), value, measured.has_value());
    }
    return sources.to_list();
}

// The kernels fp8_mqa_logits launches for these logits (the logits kernel, and the signed sums' pre-pass where its
// config takes them). The config does not depend on the sequence lengths or the SM count: only the grid does.
inline pybind11::list render_mqa_logits_kernels(uint32_t num_heads, uint32_t head_dim, bool is_compressed,
                                                bool clean_logits, bool out_bf16) {
    DG_CHECK_INPUT(num_heads == 16 || num_heads == 32 || num_heads == 64, "num_heads must be 16, 32 or 64, got {}",
                   num_heads);
    DG_CHECK_INPUT(head_dim == 32 || head_dim == 64 || head_dim == 128, "head_dim must be 32, 64 or 128, got {}",
                   head_dim);
    const auto c = kernels::plan_mqa_logits_config(num_heads, head_dim, 1, 1, 1, is_compressed, clean_logits,
                                                   out_bf16, 1);
    detail::SourceSet sources;
    sources.add(kernels::render_sm90_fp8_mqa_logits(c), 0);
    if (c.signed_sum_wgmma)
        sources.add(kernels::render_mqa_logits_pieces(num_heads, head_dim), 0);
    return sources.to_list();
}

// The kernels fp8_paged_mqa_logits launches for these logits, one call per logits width of `max_context_lens` (the
// config changes with it), and the schedule kernels of get_paged_mqa_logits_metadata for batches of up to
// `max_batch` requests (or tokens, with indices).
inline pybind11::list render_paged_mqa_logits_kernels(uint32_t next_n, uint32_t num_heads, uint32_t head_dim,
                                                      uint32_t block_kv, bool is_2d_context_lens, bool clean_logits,
                                                      const std::vector<int64_t>& max_context_lens, bool out_bf16,
                                                      bool has_indices, int64_t max_batch) {
    DG_CHECK_INPUT(next_n == 1 || next_n == 2 || next_n == 4, "next_n must be 1, 2 or 4, got {}", next_n);
    DG_CHECK_INPUT(num_heads == 16 || num_heads == 32 || num_heads == 64, "num_heads must be 16, 32 or 64, got {}",
                   num_heads);
    DG_CHECK_INPUT(head_dim == 32 || head_dim == 64 || head_dim == 128, "head_dim must be 32, 64 or 128, got {}",
                   head_dim);
    DG_CHECK_INPUT(block_kv == 32 || block_kv == 64, "block_kv must be 32 or 64, got {}", block_kv);
    DG_CHECK_INPUT(!has_indices || next_n == 1, "has_indices needs next_n = 1 (each token is a row), got {}", next_n);
    DG_CHECK_INPUT(max_batch > 0 && max_batch <= INT32_MAX, "max_batch must be in [1, 2^31), got {}", max_batch);
    detail::SourceSet sources;
    for (const int64_t width: max_context_lens) {
        DG_CHECK_INPUT(width >= 0 && width <= UINT32_MAX, "max_context_lens must be in [0, 2^32), got {}", width);
        sources.add(kernels::render_sm90_fp8_paged_mqa_logits(kernels::plan_paged_mqa_logits_config(
                        next_n, num_heads, head_dim, block_kv, is_2d_context_lens, clean_logits,
                        static_cast<uint32_t>(width), out_bf16, has_indices)),
                    width);
    }
    for (const int64_t batch: {std::min<int64_t>(max_batch, 1), max_batch})
        sources.add(kernels::render_paged_mqa_schedule(kernels::paged_mqa_schedule_shape(static_cast<uint32_t>(batch))),
                    batch);
    return sources.to_list();
}

// The source compile_kernel(family, params) would compile (its registry's rendering), without compiling it.
inline std::string render_kernel(const std::string& family, const kernels::KernelParams& params) {
    const auto& registry = kernels::kernel_registry();
    const auto it = registry.find(family);
    DG_CHECK_INPUT(it != registry.end(), "render_kernel: unknown kernel family '{}'", family);
    kernels::check_known_params(family, it->second, params);
    return it->second.render(params).code;
}

// Where `source` of `family` is cached for `arch` with the compiler `use_nvrtc` selects (None: DG_JIT_USE_NVRTC), and
// whether a complete entry is there: the lookup a launch makes, without compiling.
inline pybind11::dict kernel_cache_entry(const std::string& family, const std::string& source, const std::string& arch,
                                         std::optional<bool> use_nvrtc) {
    (void)jit::arch_number(arch);
    const jit::KernelSource kernel{family, source};
    const auto& compiler = jit::get_compiler(use_nvrtc);
    const auto dir = jit::cache_entry_dir(kernel, arch, compiler);
    pybind11::dict out;
    out["entry_dir"] = dir.string();
    out["key"] = dir.filename().string();
    out["cached"] = fs::exists(dir) && jit::detail::read_valid_entry(dir).has_value();
    return out;
}

inline void bind_precompile(pybind11::module_& m) {
    using namespace pybind11::literals;
    m.def("render_gemm_kernels", &render_gemm_kernels, "m_values"_a, "n"_a, "k"_a, "num_sms"_a = 132,
          "cluster_ctas"_a = std::vector<uint32_t>{}, "per_row_sfb"_a = false, "bf16"_a = false,
          "mn_major_a"_a = false, "mn_major_b"_a = false, "fp32_out"_a = false, "has_c"_a = false, "gemm_type"_a = 0,
          "num_groups"_a = 1, "max_m"_a = 0, "compiled_dims"_a = "nk", "fp4_b"_a = false,
          "The SM90 GEMM kernels that calls with these problems render and look up (no GPU needed), planned by the\n"
          "launcher's own function: one call per value of m_values (dense and contiguous: M, A's rows; masked:\n"
          "expected_m, with max_m the rows per group; k-grouped: each group's M), D contiguous. Operands as for\n"
          "get_gemm_config (per_row_sfb: FP8 recipe (1, 1, 128), FP32 D; bf16 with mn_major_a / mn_major_b /\n"
          "fp32_out; has_c; fp4_b: FP8 x FP4, a packed FP4 B). gemm_type: 0 normal, 1 m-grouped contiguous, 2 its psum layout, 3 masked, 4 k-grouped.\n"
          "num_sms: the SMs the GEMMs get; cluster_ctas: the CTAs whole clusters of 1 .. 8 CTAs fill on the device\n"
          "(8 values, as DG_PRINT_CONFIGS=1 prints them; empty: not known). The first GEMM a process plans is chosen\n"
          "before that capacity is measured, with whole clusters of num_sms: that kernel is listed too\n"
          "(first_plan_only when no measured plan renders it). compiled_dims, set_ignore_compile_dims,\n"
          "set_mk_alignment_for_contiguous_layout and DG_TUNE apply as at launch.\n"
          "Returns [{family, source, values (the m_values rendering it), first_plan_only}], distinct sources in\n"
          "order of first appearance. Raises ValueError on a bad argument.");
    m.def("render_mqa_logits_kernels", &render_mqa_logits_kernels, "num_heads"_a, "head_dim"_a,
          "is_compressed"_a = false, "clean_logits"_a = true, "out_bf16"_a = false,
          "The kernels fp8_mqa_logits launches for q [S, num_heads, head_dim] (is_compressed: max_seqlen_k > 0;\n"
          "out_bf16: logits_dtype torch.bfloat16), planned as a launch plans them (DG_TUNE applies), no GPU needed.\n"
          "Returns [{family, source, values, first_plan_only}]. Raises ValueError on a bad argument.");
    m.def("render_paged_mqa_logits_kernels", &render_paged_mqa_logits_kernels, "next_n"_a, "num_heads"_a,
          "head_dim"_a, "block_kv"_a = 64, "is_2d_context_lens"_a = false, "clean_logits"_a = false,
          "max_context_lens"_a = std::vector<int64_t>{0}, "out_bf16"_a = false, "has_indices"_a = false,
          "max_batch"_a = 1,
          "The kernels fp8_paged_mqa_logits launches for q [B, next_n, num_heads, head_dim] and a kv cache of\n"
          "block_kv keys a block, one call per logits width in max_context_lens (the config changes with it), and\n"
          "the schedule kernels get_paged_mqa_logits_metadata launches for 1 .. max_batch requests; planned as a\n"
          "launch plans them (DG_TUNE applies), no GPU needed. Returns [{family, source, values, first_plan_only}].\n"
          "Raises ValueError on a bad argument.");
    m.def("render_kernel", &render_kernel, "family"_a, "params"_a = pybind11::dict(),
          "The source compile_kernel(family, params) compiles (the family's rendering), without compiling it.\n"
          "Raises ValueError for an unknown family or parameter.");
    m.def("kernel_cache_entry", &kernel_cache_entry, "family"_a, "source"_a, "arch"_a = "sm_90a",
          "use_nvrtc"_a = pybind11::none(),
          "The disk-cache entry of a rendered kernel source for arch, with the compiler use_nvrtc selects (None:\n"
          "DG_JIT_USE_NVRTC), as a launch looks it up, without compiling: {entry_dir, key (the entry's folder name:\n"
          "<family>-<compiler>-<hash>), cached (a complete, verified entry is there)}. Reads DG_JIT_CACHE_DIR now.\n"
          "Raises ValueError on a bad arch, RuntimeError when the compiler cannot be found.");
}

}  // namespace dg::apis
