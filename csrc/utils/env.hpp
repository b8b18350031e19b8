// Reading DG_* environment variables (documented in the README).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "exception.hpp"

namespace dg {

inline std::string get_env(const char* name, const std::string& fallback = "") {
    const char* value = std::getenv(name);
    return value == nullptr ? fallback : std::string(value);
}

// A flag is on when set to anything but "", "0", "false", "off" or "no"; unset (or empty), it is `fallback`.
inline bool get_env_flag(const char* name, bool fallback = false) {
    const std::string v = get_env(name);
    if (v.empty())
        return fallback;
    return !(v == "0" || v == "false" || v == "off" || v == "no" || v == "False");
}

// An unsigned integer in [lo, hi] (0 when unset, for overrides where 0 means "the heuristic's"); anything else
// raises "<name> must be <expected>, got '<value>'".
inline uint32_t get_env_uint(const char* name, uint32_t lo, uint32_t hi, const char* expected) {
    const std::string v = get_env(name);
    if (v.empty())
        return 0;
    char* end = nullptr;
    const unsigned long value = std::strtoul(v.c_str(), &end, 10);
    DG_CHECK_INPUT(end != v.c_str() && *end == 0 && value >= lo && value <= hi, "{} must be {}, got '{}'", name,
                   expected, v);
    return static_cast<uint32_t>(value);
}

}  // namespace dg
