// Loading compiled kernels and launching them.
//
// A cubin holds exactly one kernel (each rendered source instantiates one template), so it is
// loaded context-independently with cuLibraryLoadData and its kernel taken by enumeration: no
// mangled names to look up. `get_kernel` goes: in-memory map -> disk cache -> compile. Compiling or
// loading while the current stream captures a CUDA graph raises (warm up first). Launches go through
// cuLaunchKernelEx with optional cluster dimensions and programmatic dependent launch.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../utils/cuda_driver.hpp"
#include "../utils/env.hpp"
#include "cache.hpp"
#include "ptxas_report.hpp"

namespace dg::jit {

using driver::CUstream;

// PyTorch's current stream on `device_index`, through the device-guard interface (so that the
// extension needs no CUDA build of PyTorch to compile).
inline CUstream current_stream(int device_index) {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    const c10::Stream stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)));
    return reinterpret_cast<CUstream>(stream.native_handle());
}

// Makes `device_index` PyTorch's current CUDA device for the scope of one API call (what
// c10::cuda::CUDAGuard does, through the device-guard interface), so that launches on a tensor's
// device work whatever device the caller had current.
class DeviceScope {
public:
    explicit DeviceScope(int device_index)
        : impl_(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)),
          previous_(impl_->exchangeDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)))),
          device_index_(device_index) {}
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;
    ~DeviceScope() {
        if (previous_.index() != device_index_)
            impl_->uncheckedSetDevice(previous_);
    }

private:
    const c10::impl::DeviceGuardImplInterface* impl_;
    c10::Device previous_;
    int device_index_;
};

// Make sure the calling thread has device `device_index`'s primary context current.
inline void ensure_context(int device_index) {
    const auto& api = driver::api();
    driver::CUcontext ctx = nullptr;
    DG_CUDA_DRIVER_CHECK(api.cuCtxGetCurrent(&ctx));
    if (ctx == nullptr) {
        driver::CUdevice dev = 0;
        DG_CUDA_DRIVER_CHECK(api.cuDeviceGet(&dev, device_index));
        DG_CUDA_DRIVER_CHECK(api.cuDevicePrimaryCtxRetain(&ctx, dev));
        DG_CUDA_DRIVER_CHECK(api.cuCtxSetCurrent(ctx));
    }
}

inline void check_not_capturing(CUstream stream, const std::string& what) {
    int status = driver::CU_STREAM_CAPTURE_STATUS_NONE;
    DG_CUDA_DRIVER_CHECK(driver::api().cuStreamIsCapturing(stream, &status));
    if (status != driver::CU_STREAM_CAPTURE_STATUS_NONE)
        throw RuntimeError(fmt::format(
            "deep_gemm: kernel {} must be compiled/loaded, but the current stream is capturing a CUDA graph; "
            "run the same call once before capture (warm-up) so that the kernel is ready", what));
}

struct LaunchConfig {
    std::array<unsigned int, 3> grid{1, 1, 1};
    unsigned int num_threads = 128;
    unsigned int smem_bytes = 0;
    unsigned int cluster_dim = 1;  // CTAs per cluster along x (1: no cluster)
    bool enable_pdl = false;
    CUstream stream = nullptr;
};

class Kernel {
public:
    Kernel(std::string family, const std::string& cubin) : family_(std::move(family)) {
        const auto& api = driver::api();
        DG_CUDA_DRIVER_CHECK(api.cuLibraryLoadData(&library_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
        unsigned int count = 0;
        DG_CUDA_DRIVER_CHECK(api.cuLibraryGetKernelCount(&count, library_));
        DG_CHECK(count == 1, "JIT: cubin of {} holds {} kernels, expected exactly one", family_, count);
        DG_CUDA_DRIVER_CHECK(api.cuLibraryEnumerateKernels(&kernel_, 1, library_));
    }
    Kernel(const Kernel&) = delete;
    Kernel& operator=(const Kernel&) = delete;
    ~Kernel() {
        // Libraries live for the process; unloading at interpreter exit races with driver teardown.
    }

    // Launch with `args` passed by address (types must match the kernel's parameters exactly).
    template <typename... Args>
    void launch(int device_index, const LaunchConfig& config, Args&... args) const {
        std::array<void*, sizeof...(Args)> params = {const_cast<void*>(static_cast<const void*>(&args))...};
        launch_raw(device_index, config, params.data());
    }

    const std::string& family() const { return family_; }

    // How many clusters of `config.cluster_dim` CTAs can be resident at once (the GPCs' SM counts can
    // leave SMs that no cluster can use, so this may be below #SMs / cluster_dim).
    int max_active_clusters(int device_index, const LaunchConfig& config) const {
        const auto& api = driver::api();
        ensure_smem_limit(device_index, config.smem_bytes);
        driver::CUfunction function = nullptr;
        DG_CUDA_DRIVER_CHECK(api.cuKernelGetFunction(&function, kernel_));
        driver::CUlaunchAttribute attr{};
        attr.id = driver::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.cluster_dim = {config.cluster_dim, 1, 1};
        driver::CUlaunchConfig launch{};
        launch.grid_dim_x = config.grid[0], launch.grid_dim_y = 1, launch.grid_dim_z = 1;
        launch.block_dim_x = config.num_threads, launch.block_dim_y = 1, launch.block_dim_z = 1;
        launch.shared_mem_bytes = config.smem_bytes;
        launch.attrs = &attr;
        launch.num_attrs = 1;
        int num_clusters = 0;
        DG_CUDA_DRIVER_CHECK(api.cuOccupancyMaxActiveClusters(&num_clusters, function, &launch));
        return num_clusters;
    }

private:
    void launch_raw(int device_index, const LaunchConfig& config, void** params) const {
        const auto& api = driver::api();
        ensure_smem_limit(device_index, config.smem_bytes);
        driver::CUlaunchAttribute attrs[2]{};
        unsigned int num_attrs = 0;
        if (config.cluster_dim > 1) {
            attrs[num_attrs].id = driver::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[num_attrs].value.cluster_dim = {config.cluster_dim, 1, 1};
            ++num_attrs;
        }
        if (config.enable_pdl) {
            attrs[num_attrs].id = driver::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[num_attrs].value.programmatic_stream_serialization_allowed = 1;
            ++num_attrs;
        }
        driver::CUlaunchConfig launch{};
        launch.grid_dim_x = config.grid[0], launch.grid_dim_y = config.grid[1], launch.grid_dim_z = config.grid[2];
        launch.block_dim_x = config.num_threads, launch.block_dim_y = 1, launch.block_dim_z = 1;
        launch.shared_mem_bytes = config.smem_bytes;
        launch.stream = config.stream;
        launch.attrs = num_attrs ? attrs : nullptr;
        launch.num_attrs = num_attrs;
        const auto result = api.cuLaunchKernelEx(&launch, function(device_index), params, nullptr);
        if (result != driver::CUDA_SUCCESS) [[unlikely]]
            throw RuntimeError(fmt::format("deep_gemm: launching {} (grid {}x{}x{}, {} threads, {} bytes smem, cluster {}) "
                                           "failed: {}", family_, config.grid[0], config.grid[1], config.grid[2],
                                           config.num_threads, config.smem_bytes, config.cluster_dim,
                                           driver::error_string(result)));
    }

    // The kernel's function handle in the current (device's primary) context, resolved once per device:
    // launching through the context-independent CUkernel makes the driver resolve it on every launch.
    driver::CUfunction function(int device_index) const {
        auto& slot = functions_[device_index & 63];
        driver::CUfunction f = slot.load(std::memory_order_acquire);
        if (f == nullptr) [[unlikely]] {
            DG_CUDA_DRIVER_CHECK(driver::api().cuKernelGetFunction(&f, kernel_));
            slot.store(f, std::memory_order_release);
        }
        return f;
    }

    // Raise the kernel's dynamic shared-memory limit on this device once (needed above 48 KiB).
    void ensure_smem_limit(int device_index, unsigned int smem_bytes) const {
        if (smem_bytes <= 48 * 1024 || smem_configured_[device_index & 63] >= smem_bytes) [[likely]]
            return;
        driver::CUdevice dev = 0;
        DG_CUDA_DRIVER_CHECK(driver::api().cuDeviceGet(&dev, device_index));
        DG_CUDA_DRIVER_CHECK(driver::api().cuKernelSetAttribute(driver::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                                static_cast<int>(smem_bytes), kernel_, dev));
        smem_configured_[device_index & 63] = smem_bytes;
    }

    std::string family_;
    driver::CUlibrary library_ = nullptr;
    driver::CUkernel kernel_ = nullptr;
    mutable std::array<unsigned int, 64> smem_configured_{};
    mutable std::array<std::atomic<driver::CUfunction>, 64> functions_{};
};

// The loaded kernel for `source` on the current arch: memory, then disk cache, then compile.
// Not for the hot path: callers memoize the returned pointer per shape signature.
inline const Kernel& get_kernel(const KernelSource& source, const std::string& arch, int device_index, CUstream stream) {
    static std::unordered_map<std::string, std::unique_ptr<Kernel>> loaded;  // by family + source
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    const std::string id = source.family + '\n' + arch + '\n' + source.code;
    if (auto it = loaded.find(id); it != loaded.end())
        return *it->second;
    check_not_capturing(stream, source.family);
    ensure_context(device_index);
    const auto start = std::chrono::steady_clock::now();
    const auto built = build_kernel(source, arch);
    check_ptxas_report(source.family, built.ptxas_report);
    auto kernel = std::make_unique<Kernel>(source.family, built.cubin);
    // DG_JIT_PRINT_LOAD_TIME: how long this kernel took to become launchable (disk-cache read or compile, then the
    // driver's load), so that a slow first call can be told apart from a slow kernel
    if (get_env_flag("DG_JIT_PRINT_LOAD_TIME")) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        fmt::print(stderr, "[deep_gemm JIT] {} ready in {:.1f} ms ({})\n", source.family, ms,
                   built.cache_hit ? "disk cache hit" : "compiled");
    }
    return *loaded.emplace(id, std::move(kernel)).first->second;
}

// A launcher's memo of its loaded kernels by shape signature (the hot path's lookup, before get_kernel's render
// and hash): `get(key, load)` returns the kernel of `key`, calling `load()` (which returns get_kernel's result) the
// first time only. Thread-safe; one static instance per launcher.
template <typename Key>
class KernelCache {
public:
    template <typename Load>
    const Kernel& get(const Key& key, const Load& load) {
        std::lock_guard lock(mutex_);
        const Kernel*& slot = kernels_[key];
        if (slot == nullptr)
            slot = &load();
        return *slot;
    }

private:
    std::map<Key, const Kernel*> kernels_;
    std::mutex mutex_;
};

}  // namespace dg::jit
