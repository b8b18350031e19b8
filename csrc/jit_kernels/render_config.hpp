// A kernel config (deep_gemm/common/host_device_types.hpp) as C++ source: a braced list of designated initializers,
// one `.field = value` per field in the config's visit_fields order, so that the rendered kernel source names
// every value it sets.
#pragma once

#include <string>
#include <type_traits>

#include <deep_gemm/common/host_device_types.hpp>

#include "../utils/format.hpp"

namespace dg::kernels {

// One field's value as C++ source.
inline std::string render_config_value(bool value) { return value ? "true" : "false"; }
inline std::string render_config_value(uint32_t value) { return fmt::format("{}", value); }
inline std::string render_config_value(deep_gemm::GemmType value) { return deep_gemm::gemm_type_name(value); }
inline std::string render_config_value(deep_gemm::OperandKind value) { return deep_gemm::operand_kind_name(value); }

// `{.a = 1, .b = true, ...};` over several lines, each indented by `indent` plus four spaces.
template <typename Config>
std::string render_designated_init(const Config& config, const std::string& indent) {
    std::string out = "{\n";
    config.visit_fields([&](const char* name, const auto& value) {
        out += fmt::format("{}    .{} = {},\n", indent, name, render_config_value(value));
    });
    return out + indent + "};";
}

}  // namespace dg::kernels
