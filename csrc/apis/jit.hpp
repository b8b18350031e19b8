// The compile-only entry point: render a kernel family with given parameters (or take its rendered source) and
// compile it for a named arch, with no GPU needed. Returns where the cubin is and what ptxas reported.
#pragma once

#include <pybind11/pybind11.h>

#include "../jit/cache.hpp"
#include "../jit/ptxas_report.hpp"
#include "../jit_kernels/registry.hpp"

namespace dg::apis {

// `source`: an already rendered .cu of `family` (e.g. a cache entry's kernel.cu, to rebuild a cache elsewhere) in
// place of rendering it from `params`, which must then be empty.
inline pybind11::dict compile_kernel(const std::string& family, const kernels::KernelParams& params,
                                     const std::string& arch, std::optional<bool> use_nvrtc,
                                     const std::optional<std::string>& source_code) {
    const auto& registry = kernels::kernel_registry();
    const auto it = registry.find(family);
    if (it == registry.end()) {
        std::vector<std::string> names;
        for (const auto& [name, _]: registry)
            names.push_back(name);
        throw InputError(fmt::format("compile_kernel: unknown kernel family '{}'; known: {}", family, fmt::join(names, ", ")));
    }
    if (source_code.has_value() && !params.empty())
        throw InputError("compile_kernel: pass either params or source, not both");
    kernels::check_known_params(family, it->second, params);
    (void)jit::arch_number(arch);  // (the arch's spelling, checked before any compiler is looked for)
    const auto source = source_code.has_value() ? jit::KernelSource{family, *source_code} : it->second.render(params);
    const auto built = jit::build_kernel(source, arch, use_nvrtc);
    jit::check_ptxas_report(source.family, built.ptxas_report);
    const auto usage = jit::parse_ptxas_report(built.ptxas_report);
    pybind11::dict out;
    out["family"] = source.family;
    out["source"] = source.code;
    out["cubin_path"] = built.cubin_path.string();
    out["entry_dir"] = built.entry_dir.string();
    out["cache_hit"] = built.cache_hit;
    out["compiler"] = jit::get_compiler(use_nvrtc).name();
    out["ptxas_report"] = built.ptxas_report;
    out["registers"] = usage.registers;
    out["stack_frame_bytes"] = usage.stack_frame_bytes;
    out["spill_store_bytes"] = usage.spill_store_bytes;
    out["spill_load_bytes"] = usage.spill_load_bytes;
    return out;
}

}  // namespace dg::apis
