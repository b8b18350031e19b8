// Reading DG_* environment variables (documented in the README).
#pragma once

#include <cstdlib>
#include <string>

namespace dg {

inline std::string get_env(const char* name, const std::string& fallback = "") {
    const char* value = std::getenv(name);
    return value == nullptr ? fallback : std::string(value);
}

// A flag is on when set to anything but "", "0", "false", "off" or "no".
inline bool get_env_flag(const char* name) {
    const std::string v = get_env(name);
    return !(v.empty() || v == "0" || v == "false" || v == "off" || v == "no" || v == "False");
}

}  // namespace dg
