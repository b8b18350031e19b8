// Named integer parameters of a kernel configuration: what the compile-only entry point (tests, precompilation)
// passes to a kernel family's renderer (registry.hpp) and to the config builders (`*_config_from_params`).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace dg::kernels {

using KernelParams = std::map<std::string, int64_t>;

// The parameter `key` as a 32-bit unsigned value, or `fallback` when it is not given
inline uint32_t param_or(const KernelParams& params, const char* key, uint32_t fallback) {
    const auto it = params.find(key);
    return it == params.end() ? fallback : static_cast<uint32_t>(it->second);
}

}  // namespace dg::kernels
