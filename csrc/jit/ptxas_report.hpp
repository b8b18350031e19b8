// Reading ptxas's `-v` resource report: registers, stack frame and spills of the compiled kernel.
#pragma once

#include <algorithm>
#include <regex>
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

inline ResourceUsage parse_ptxas_report(const std::string& report) {
    ResourceUsage usage;
    static const std::regex registers_re(R"(Used (\d+) registers)");
    static const std::regex frame_re(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
    for (auto it = std::sregex_iterator(report.begin(), report.end(), registers_re); it != std::sregex_iterator(); ++it)
        usage.registers = std::max(usage.registers, std::stoi((*it)[1].str()));
    for (auto it = std::sregex_iterator(report.begin(), report.end(), frame_re); it != std::sregex_iterator(); ++it) {
        usage.stack_frame_bytes = std::max(usage.stack_frame_bytes, std::stoi((*it)[1].str()));
        usage.spill_store_bytes = std::max(usage.spill_store_bytes, std::stoi((*it)[2].str()));
        usage.spill_load_bytes = std::max(usage.spill_load_bytes, std::stoi((*it)[3].str()));
    }
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
