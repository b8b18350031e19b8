// Reading ptxas's `-v` resource report: registers, stack frame and spills of the compiled kernel.
#pragma once

#include <algorithm>
#include <string>

#include "../utils/env.hpp"
#include "../utils/exception.hpp"

namespace dg::jit {

struct ResourceUsage {
    int registers = -1;  // -1: not reported
    int stack_frame_bytes = 0;
    int spill_store_bytes = 0;
    int spill_load_bytes = 0;
    bool uses_local_memory() const { return stack_frame_bytes > 0 || spill_store_bytes > 0 || spill_load_bytes > 0; }
};

namespace detail {

// The integer just before `suffix` at or after `pos` ("... 168 registers"), or -1.
inline int number_before(const std::string& text, size_t suffix_pos) {
    size_t end = suffix_pos;
    while (end > 0 && text[end - 1] == ' ')
        --end;
    size_t start = end;
    while (start > 0 && text[start - 1] >= '0' && text[start - 1] <= '9')
        --start;
    return start == end ? -1 : std::stoi(text.substr(start, end - start));
}

// Largest value over all occurrences of "<number> <suffix>" in the report.
inline int max_of(const std::string& report, const std::string& suffix, int initial) {
    int best = initial;
    for (size_t pos = report.find(suffix); pos != std::string::npos; pos = report.find(suffix, pos + 1))
        best = std::max(best, number_before(report, pos));
    return best;
}

}  // namespace detail

// NOTES: string scanning rather than std::regex (see cache.hpp for why).
inline ResourceUsage parse_ptxas_report(const std::string& report) {
    ResourceUsage usage;
    usage.registers = detail::max_of(report, " registers", -1);
    usage.stack_frame_bytes = detail::max_of(report, " bytes stack frame", 0);
    usage.spill_store_bytes = detail::max_of(report, " bytes spill stores", 0);
    usage.spill_load_bytes = detail::max_of(report, " bytes spill loads", 0);
    return usage;
}

// DG_JIT_PTXAS_VERBOSE prints the report; DG_JIT_PTXAS_CHECK fails on local memory or spills.
inline void check_ptxas_report(const std::string& family, const std::string& report) {
    if (get_env_flag("DG_JIT_PTXAS_VERBOSE"))
        fmt::print(stderr, "[deep_gemm JIT] ptxas report of {}:\n{}\n", family, report);
    if (get_env_flag("DG_JIT_PTXAS_CHECK")) {
        const auto usage = parse_ptxas_report(report);
        DG_CHECK(!usage.uses_local_memory(),
                 "DG_JIT_PTXAS_CHECK: kernel {} uses local memory ({} bytes stack frame, {} bytes spill stores, "
                 "{} bytes spill loads)", family, usage.stack_frame_bytes, usage.spill_store_bytes,
                 usage.spill_load_bytes);
    }
}

}  // namespace dg::jit
