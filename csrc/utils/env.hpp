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

namespace dg {

// DG_DEBUG_CHECKS=1: the one debug switch of every API. On, APIs also check the *values* of index and range
// tensors (ks/ke ranges, block ids, context lengths, group ids) on the host, which for CUDA tensors costs a
// device-to-host copy and a synchronization per call. Off (the default), no API synchronizes the device or
// launches an extra kernel for a check; the kernels clamp or skip out-of-range values instead. Read on every
// call (a getenv), so tests and debuggers may flip it inside one process.
inline bool debug_checks_enabled() {
    return get_env_flag("DG_DEBUG_CHECKS");
}

}  // namespace dg
