// DG_TUNE: the one developer entry point for forcing kernel configurations (tuning sweeps, reproducing a
// config); docs/design.md, "Forcing kernel configurations" lists every key. Not a user setting: unset, every kernel runs the heuristic's pick.
//
//   DG_TUNE="fp8_gemm:block_m=128,split_k=2;paged_mqa_logits:stages=4"
//
// Sections are separated by ';', each `family:key=value[,key=value...]`; a family's keys apply to that family's
// kernels only (the BF16 GEMMs read bf16_gemm, never fp8_gemm). Values are unsigned integers in each key's range.
// Anything else (an unknown family or key, a value out of range, a key given twice) raises ValueError naming it.
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "env.hpp"
#include "exception.hpp"
#include "format.hpp"

namespace dg {

enum class TuneFamily : uint32_t { kFp8Gemm = 0, kBf16Gemm, kMqaLogits, kPagedMqaLogits };
constexpr uint32_t kNumTuneFamilies = 4;

// One key of a family: the values it takes are the multiples of `step` in [lo, hi].
struct TuneKey {
    const char* name;
    uint32_t lo, hi, step;
};

struct TuneFamilyKeys {
    const char* name;
    std::vector<TuneKey> keys;
};

// The families and their keys (docs/design.md, "Forcing kernel configurations" says what each forces).
inline const std::array<TuneFamilyKeys, kNumTuneFamilies>& tune_families() {
    static const std::array<TuneFamilyKeys, kNumTuneFamilies> families = [] {
        const std::vector<TuneKey> gemm = {
            {"block_m", 64, 256, 64},  {"block_n", 16, 256, 16}, {"split_k", 1, 8, 1},  {"fp32_buffers", 1, 8, 1},
            {"stream_k", 0, 2, 1},     {"multicast", 0, 1, 1},   {"multicast_on_a", 0, 1, 1},
            {"einsum_batched", 0, 1, 1},       {"zero_padding_in_gemm", 0, 1, 1},
        };
        std::vector<TuneKey> fp8_gemm = gemm;
        fp8_gemm.push_back({"overlap", 0, 1, 1});  // (the overlapped promotion exists for FP8 only)
        fp8_gemm.push_back({"skip_head_mid_fused", 0, 1, 1});  // (fp8_gemm_nt_skip_head_mid is FP8 only)
        return std::array<TuneFamilyKeys, kNumTuneFamilies>{{
            {"fp8_gemm", fp8_gemm},
            {"bf16_gemm", gemm},
            {"mqa_logits", {{"kv_split", 64, 1u << 20, 64}}},
            {"paged_mqa_logits", {{"math_wgs", 2, 3, 1}, {"stages", 2, 32, 2}}},
        }};
    }();
    return families;
}

// The forced values of one family (key -> value); an absent key leaves the heuristic's choice.
struct TuneSettings {
    std::map<std::string, uint32_t> values;

    std::optional<uint32_t> get(const char* key) const {
        const auto it = values.find(key);
        return it == values.end() ? std::nullopt : std::optional<uint32_t>(it->second);
    }
    bool empty() const { return values.empty(); }
};

struct TuneSpec {
    std::array<TuneSettings, kNumTuneFamilies> families;

    const TuneSettings& of(TuneFamily family) const { return families[static_cast<uint32_t>(family)]; }
};

namespace detail {

inline std::string tune_trim(const std::string& s) {
    const auto first = s.find_first_not_of(" \t");
    if (first == std::string::npos)
        return "";
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

inline std::vector<std::string> tune_split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + 1)
        parts.push_back(s.substr(start, pos - start));
    parts.push_back(s.substr(start));
    return parts;
}

inline std::string tune_range(const TuneKey& key) {
    if (key.step == 1)
        return key.hi - key.lo == 1 ? fmt::format("{} or {}", key.lo, key.hi)
                                    : fmt::format("an integer in [{}, {}]", key.lo, key.hi);
    return fmt::format("a multiple of {} in [{}, {}]", key.step, key.lo, key.hi);
}

}  // namespace detail

// Parses a DG_TUNE value (empty: nothing forced). Raises InputError (ValueError) naming the family, key or value.
inline TuneSpec parse_tune(const std::string& spec) {
    TuneSpec out;
    const auto& families = tune_families();
    for (const std::string& raw_section: detail::tune_split(spec, ';')) {
        const std::string section = detail::tune_trim(raw_section);
        if (section.empty())
            continue;
        const auto colon = section.find(':');
        DG_CHECK_INPUT(colon != std::string::npos, "DG_TUNE: expected 'family:key=value[,key=value...]', got '{}'",
                       section);
        const std::string family = detail::tune_trim(section.substr(0, colon));
        uint32_t index = 0;
        while (index < kNumTuneFamilies && family != families[index].name)
            ++index;
        DG_CHECK_INPUT(index < kNumTuneFamilies,
                       "DG_TUNE: unknown kernel family '{}' (families: fp8_gemm, bf16_gemm, mqa_logits, "
                       "paged_mqa_logits)", family);
        const TuneFamilyKeys& keys = families[index];
        for (const std::string& raw_item: detail::tune_split(section.substr(colon + 1), ',')) {
            const std::string item = detail::tune_trim(raw_item);
            const auto eq = item.find('=');
            DG_CHECK_INPUT(eq != std::string::npos, "DG_TUNE: {}: expected 'key=value', got '{}'", family, item);
            const std::string name = detail::tune_trim(item.substr(0, eq));
            const std::string value = detail::tune_trim(item.substr(eq + 1));
            const TuneKey* key = nullptr;
            std::vector<std::string> names;
            for (const TuneKey& k: keys.keys) {
                names.push_back(k.name);
                if (name == k.name)
                    key = &k;
            }
            DG_CHECK_INPUT(key != nullptr, "DG_TUNE: {} has no key '{}' (keys: {})", family, name,
                           fmt::join(names, ", "));
            char* end = nullptr;
            const unsigned long parsed = value.empty() || value[0] == '-' ? 0 : std::strtoul(value.c_str(), &end, 10);
            const bool is_number = end != nullptr && end != value.c_str() && *end == 0;
            DG_CHECK_INPUT(is_number && parsed >= key->lo && parsed <= key->hi && parsed % key->step == 0,
                           "DG_TUNE: {}:{}={} must be {}", family, name, value, detail::tune_range(*key));
            const bool fresh = out.families[index].values.emplace(name, static_cast<uint32_t>(parsed)).second;
            DG_CHECK_INPUT(fresh, "DG_TUNE: {}:{} is given twice", family, name);
        }
    }
    return out;
}

// The DG_TUNE of the environment now, parsed (again only when the variable changed; per thread).
inline const TuneSpec& current_tune() {
    thread_local std::optional<std::string> parsed_from;
    thread_local TuneSpec spec;
    const std::string raw = get_env("DG_TUNE");
    if (!parsed_from.has_value() || *parsed_from != raw) {
        spec = parse_tune(raw);
        parsed_from = raw;
    }
    return spec;
}

// The forced values of one family from the environment's DG_TUNE.
inline const TuneSettings& tune_settings(TuneFamily family) {
    return current_tune().of(family);
}

}  // namespace dg
