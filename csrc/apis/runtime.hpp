// Runtime-settings API: SM limit, tensor-core utilization, PDL, contiguous-layout alignment.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <utility>
#include <variant>
#include <vector>

#include "../jit/device_runtime.hpp"
#include "../utils/exception.hpp"

namespace dg::apis {

inline int current_device_index() {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    return impl->getDevice().index();
}

// 0: all SMs again; otherwise at most the current device's SM count (queried only then, so set_num_sms(0) needs
// no GPU).
inline void set_num_sms(int num_sms) {
    if (num_sms > 0)
        driver::api();  // a clear error when there is no driver, before asking PyTorch for a CUDA device
    jit::DeviceRuntime::instance().set_num_sms(num_sms, num_sms > 0 ? current_device_index() : 0);
}

inline int get_num_sms() {
    auto& runtime = jit::DeviceRuntime::instance();
    driver::api();  // a clear error when there is no driver, before asking PyTorch for a CUDA device
    return runtime.num_sms(current_device_index());
}

inline void set_tc_util(int tc_util) { jit::DeviceRuntime::instance().set_tc_util(tc_util); }
inline int get_tc_util() { return jit::DeviceRuntime::instance().tc_util(); }
inline void set_pdl(bool enable) { jit::DeviceRuntime::instance().set_pdl(enable); }
inline bool get_pdl() { return jit::DeviceRuntime::instance().pdl(); }
inline void set_mk_alignment_for_contiguous_layout(int alignment) {
    jit::DeviceRuntime::instance().set_mk_alignment(alignment);
}
inline int get_mk_alignment_for_contiguous_layout() { return jit::DeviceRuntime::instance().mk_alignment(); }
inline void set_ignore_compile_dims(bool ignore) { jit::DeviceRuntime::instance().set_ignore_compile_dims(ignore); }
inline bool get_ignore_compile_dims() { return jit::DeviceRuntime::instance().ignore_compile_dims(); }

// set_block_size_multiple_of(n) or ((m, n)): an int is the BLOCK_N multiple (the one the reference's SM90 heuristic
// reads), a pair (BLOCK_M multiple, BLOCK_N multiple).
inline void set_block_size_multiple_of(const std::variant<int64_t, std::vector<int64_t>>& multiple) {
    int64_t m_multiple = 0, n_multiple = 0;
    if (const auto* single = std::get_if<int64_t>(&multiple)) {
        n_multiple = *single;
    } else {
        const auto& pair = std::get<std::vector<int64_t>>(multiple);
        DG_CHECK_INPUT(pair.size() == 2, "set_block_size_multiple_of: new_value must be an int or a pair of ints "
                       "(block_m multiple, block_n multiple), got {} values", pair.size());
        m_multiple = pair[0];
        n_multiple = pair[1];
    }
    DG_CHECK_INPUT(m_multiple >= 0 && m_multiple <= 256 && n_multiple >= 0 && n_multiple <= 256,
                   "set_block_size_multiple_of: the multiples must be in [0, 256] (0: no constraint), got ({}, {})",
                   m_multiple, n_multiple);
    jit::DeviceRuntime::instance().set_block_size_multiple_of(static_cast<int>(m_multiple), static_cast<int>(n_multiple));
}
inline std::pair<int, int> get_block_size_multiple_of() { return jit::DeviceRuntime::instance().block_size_multiple_of(); }

inline void set_deterministic(bool deterministic) { jit::DeviceRuntime::instance().set_deterministic(deterministic); }
inline bool get_deterministic() { return jit::DeviceRuntime::instance().deterministic(); }

// For the APIs that cannot fix their reduction order (cuBLAS picks its own algorithm, split-K included, per shape)
inline void check_not_deterministic(const char* fn) {
    if (jit::DeviceRuntime::instance().deterministic()) [[unlikely]]
        throw NotImplementedError(fmt::format("{}: set_deterministic(True) is on, and cuBLAS chooses its own reduction "
                                              "order per shape (split-K included), so this call cannot promise "
                                              "M-independent results; call set_deterministic(False) to use it", fn));
}

}  // namespace dg::apis
