// Per-process runtime settings (set_num_sms, set_tc_util, set_pdl, the contiguous-layout alignment)
// and cached device properties (SM count, arch, shared memory), read from the driver once per device.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>

#include "../utils/cuda_driver.hpp"
#include "../utils/exception.hpp"

namespace dg::jit {

struct DeviceProperties {
    int num_sms = 0;
    int major = 0;
    int minor = 0;
    int smem_optin_bytes = 0;
    // The arch-specific target the JIT compiles for, e.g. "sm_90a".
    std::string arch() const { return fmt::format("sm_{}{}{}", major, minor, major >= 9 ? "a" : ""); }
};

class DeviceRuntime {
public:
    static DeviceRuntime& instance() {
        static DeviceRuntime runtime;
        return runtime;
    }

    // Read once per device under the lock; later calls (every GEMM call) only load a flag.
    const DeviceProperties& properties(int device_index) {
        DG_CHECK_INPUT(device_index >= 0 && device_index < kMaxDevices, "device index {} out of range", device_index);
        if (ready_[device_index].load(std::memory_order_acquire)) [[likely]]
            return properties_[device_index];
        std::lock_guard lock(mutex_);
        if (!ready_[device_index].load(std::memory_order_relaxed)) {
            const auto& api = driver::api();
            driver::CUdevice dev = 0;
            DG_CUDA_DRIVER_CHECK(api.cuDeviceGet(&dev, device_index));
            DeviceProperties& p = properties_[device_index];
            DG_CUDA_DRIVER_CHECK(api.cuDeviceGetAttribute(&p.num_sms, driver::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
            DG_CUDA_DRIVER_CHECK(api.cuDeviceGetAttribute(&p.major, driver::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
            DG_CUDA_DRIVER_CHECK(api.cuDeviceGetAttribute(&p.minor, driver::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
            DG_CUDA_DRIVER_CHECK(api.cuDeviceGetAttribute(&p.smem_optin_bytes,
                                                          driver::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
            ready_[device_index].store(true, std::memory_order_release);
        }
        return properties_[device_index];
    }

    // SMs kernels may use on `device_index`: the user's limit if set, else all of them.
    int num_sms(int device_index) {
        const int available = properties(device_index).num_sms;
        return num_sms_limit_ > 0 ? std::min(num_sms_limit_, available) : available;
    }

    // 0 removes the limit (all SMs); otherwise at most the SMs of `device_index` (the current device), as the
    // reference asserts.
    void set_num_sms(int num_sms, int device_index) {
        DG_CHECK_INPUT(num_sms >= 0, "set_num_sms: new_num_sms must be 0 (all SMs) or positive, got {}", num_sms);
        if (num_sms > 0) {
            const int available = properties(device_index).num_sms;
            DG_CHECK_INPUT(num_sms <= available, "set_num_sms: new_num_sms must be at most the {} SMs of device {}, "
                           "got {}", available, device_index, num_sms);
        }
        num_sms_limit_ = num_sms;
    }
    // 0 means the default, 100.
    void set_tc_util(int percent) {
        DG_CHECK_INPUT(percent >= 0 && percent <= 100,
                       "set_tc_util: new_tc_util must be in [0, 100] (0: the default, 100), got {}", percent);
        tc_util_ = percent == 0 ? 100 : percent;
    }
    int tc_util() const { return tc_util_; }

    void set_pdl(bool enable) { pdl_ = enable; }
    bool pdl() const { return pdl_; }

    void set_mk_alignment(int alignment) {
        DG_CHECK_INPUT(alignment > 0 && alignment % 64 == 0 && alignment <= 1024,
                       "set_mk_alignment_for_contiguous_layout: alignment must be a multiple of 64 in [64, 1024], got {}",
                       alignment);
        mk_alignment_ = alignment;
    }
    int mk_alignment() const { return mk_alignment_; }

    // set_ignore_compile_dims(True): every GEMM compiles its kernel with M, N and K as runtime values, whatever its
    // compiled_dims (one kernel per config instead of one per shape).
    void set_ignore_compile_dims(bool ignore) { ignore_compile_dims_ = ignore; }
    bool ignore_compile_dims() const { return ignore_compile_dims_; }

    // set_block_size_multiple_of: the BLOCK_M / BLOCK_N multiples the GEMM heuristics keep to (0: no constraint;
    // GemmOverrides::block_m_multiple / block_n_multiple, through gemm_settings_key).
    void set_block_size_multiple_of(int block_m_multiple, int block_n_multiple) {
        DG_CHECK_INPUT(block_m_multiple >= 0 && block_n_multiple >= 0,
                       "set_block_size_multiple_of: the multiples must be non-negative, got ({}, {})", block_m_multiple,
                       block_n_multiple);
        block_m_multiple_ = block_m_multiple;
        block_n_multiple_ = block_n_multiple;
    }
    std::pair<int, int> block_size_multiple_of() const { return {block_m_multiple_, block_n_multiple_}; }

    // set_deterministic(True): every kernel adds each output's partial sums in an order fixed by the problem's N and K
    // alone (never by M, the SM count or timing): no split-K or stream-K in the GEMMs, the HC pre-norm's split count
    // fixed by K; APIs that cannot promise it (cuBLASLt) raise.
    void set_deterministic(bool deterministic) { deterministic_ = deterministic; }
    bool deterministic() const { return deterministic_; }

    // The settings a GEMM plan depends on, packed into one key (part of each plan's cache key): the BLOCK_M and
    // BLOCK_N multiples (9 bits each, at most 256) and the deterministic bit
    uint32_t gemm_settings_key() const {
        return static_cast<uint32_t>(block_m_multiple_) | (static_cast<uint32_t>(block_n_multiple_) << 9) |
               (static_cast<uint32_t>(deterministic_) << 18);
    }

private:
    static constexpr int kMaxDevices = 64;
    std::mutex mutex_;
    std::array<DeviceProperties, kMaxDevices> properties_{};
    std::array<std::atomic<bool>, kMaxDevices> ready_{};
    int num_sms_limit_ = 0;
    int tc_util_ = 100;
    bool pdl_ = false;
    int mk_alignment_ = 128;
    bool ignore_compile_dims_ = false;
    int block_m_multiple_ = 0, block_n_multiple_ = 0;
    bool deterministic_ = false;
};

}  // namespace dg::jit
