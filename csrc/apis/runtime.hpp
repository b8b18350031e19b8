// Runtime-settings API: SM limit, tensor-core utilization, PDL, contiguous-layout alignment.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "../jit/device_runtime.hpp"

namespace dg::apis {

inline int current_device_index() {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    return impl->getDevice().index();
}

inline void set_num_sms(int num_sms) { jit::DeviceRuntime::instance().set_num_sms(num_sms); }

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

}  // namespace dg::apis
