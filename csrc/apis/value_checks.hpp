// When the APIs may read a tensor's values on the host (DG_DEBUG_CHECKS=1): shared by every API family.
#pragma once

#include <ATen/ATen.h>

#include "../jit/device_runtime.hpp"
#include "../jit/kernel_runtime.hpp"
#include "../utils/env.hpp"

namespace dg::apis {

// Whether to check a tensor's values on the host: only with DG_DEBUG_CHECKS=1 (for CUDA tensors that is a
// reduction, a device-to-host copy and a synchronization per call), and never while the stream captures a CUDA
// graph (a synchronization is not allowed there). Off, the kernels clamp every index and range instead, so bad
// values give defined output and never read or write out of bounds.
inline bool wants_value_check(const at::Tensor& t) {
    if (!debug_checks_enabled())
        return false;
    if (!t.is_cuda())
        return true;
    int status = driver::CU_STREAM_CAPTURE_STATUS_NONE;
    DG_CUDA_DRIVER_CHECK(driver::api().cuStreamIsCapturing(jit::current_stream(t.device().index()), &status));
    return status == driver::CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace dg::apis
