// The CUDA driver API, loaded lazily from libcuda.so.1 on first use, so that the extension
// builds and imports on machines with no GPU, no driver and no CUDA headers.
// Only the few types and constants deep_gemm uses are declared here; their values are the
// ones of the driver's public ABI (cuda.h, CUDA 12/13).
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "exception.hpp"

namespace dg::driver {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUlibrary = struct CUlib_st*;
using CUkernel = struct CUkern_st*;
using CUfunction = struct CUfunc_st*;
using cuuint32_t = uint32_t;
using cuuint64_t = uint64_t;

constexpr CUresult CUDA_SUCCESS = 0;

// CUdevice_attribute
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUfunction_attribute
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// CUstreamCaptureStatus
constexpr int CU_STREAM_CAPTURE_STATUS_NONE = 0;

// CUlaunchAttributeID
constexpr int CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

// Tensor maps (TMA descriptors): 128 opaque bytes, 64-byte aligned.
struct alignas(64) CUtensorMap {
    cuuint64_t opaque[16];
};
enum CUtensorMapDataType : int {
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
    CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
    CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
    CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
    CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
};
enum CUtensorMapSwizzle : int {
    CU_TENSOR_MAP_SWIZZLE_NONE = 0,
    CU_TENSOR_MAP_SWIZZLE_32B = 1,
    CU_TENSOR_MAP_SWIZZLE_64B = 2,
    CU_TENSOR_MAP_SWIZZLE_128B = 3,
};
constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
constexpr int CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3;
constexpr int CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;

struct CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        char raw[64];
        struct {
            unsigned int x, y, z;
        } cluster_dim;
        int programmatic_stream_serialization_allowed;
    } value;
};
static_assert(sizeof(CUlaunchAttribute) == 72);

struct CUlaunchConfig {
    unsigned int grid_dim_x, grid_dim_y, grid_dim_z;
    unsigned int block_dim_x, block_dim_y, block_dim_z;
    unsigned int shared_mem_bytes;
    CUstream stream;
    CUlaunchAttribute* attrs;
    unsigned int num_attrs;
};

// One function pointer per driver entry point we call.
#define DG_DRIVER_FUNCTIONS(X)                                                                              \
    X(cuInit, CUresult, (unsigned int))                                                                  \
    X(cuGetErrorString, CUresult, (CUresult, const char**))                                              \
    X(cuDeviceGet, CUresult, (CUdevice*, int))                                                           \
    X(cuDeviceGetAttribute, CUresult, (int*, int, CUdevice))                                             \
    X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext*, CUdevice))                                       \
    X(cuCtxGetCurrent, CUresult, (CUcontext*))                                                           \
    X(cuCtxSetCurrent, CUresult, (CUcontext))                                                            \
    X(cuLibraryLoadData, CUresult, (CUlibrary*, const void*, void*, void**, unsigned int, void*, void**, \
                                      unsigned int))                                                        \
    X(cuLibraryUnload, CUresult, (CUlibrary))                                                            \
    X(cuLibraryGetKernelCount, CUresult, (unsigned int*, CUlibrary))                                     \
    X(cuLibraryEnumerateKernels, CUresult, (CUkernel*, unsigned int, CUlibrary))                         \
    X(cuKernelSetAttribute, CUresult, (int, int, CUkernel, CUdevice))                                    \
    X(cuKernelGetFunction, CUresult, (CUfunction*, CUkernel))                                              \
    X(cuOccupancyMaxActiveClusters, CUresult, (int*, CUfunction, const CUlaunchConfig*))                                    \
    X(cuLaunchKernelEx, CUresult, (const CUlaunchConfig*, CUfunction, void**, void**))                   \
    X(cuStreamIsCapturing, CUresult, (CUstream, int*))                                                   \
    X(cuMemsetD32Async, CUresult, (cuuint64_t, unsigned int, size_t, CUstream))                          \
    X(cuTensorMapEncodeTiled, CUresult, (CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,            \
                                           const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,         \
                                           const cuuint32_t*, int, CUtensorMapSwizzle, int, int))           \
    X(cuTensorMapReplaceAddress, CUresult, (CUtensorMap*, void*))

struct DriverApi {
#define DG_DECLARE_POINTER(name, ret, args) ret(*name) args = nullptr;
    DG_DRIVER_FUNCTIONS(DG_DECLARE_POINTER)
#undef DG_DECLARE_POINTER
};

// The loaded driver; raises a RuntimeError naming libcuda.so.1 when there is none.
inline const DriverApi& api() {
    static DriverApi table;
    static std::string load_error;
    static std::once_flag once;
    std::call_once(once, [] {
        void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (handle == nullptr) {
            const char* err = ::dlerror();
            load_error = fmt::format("deep_gemm needs the NVIDIA driver (libcuda.so.1), which could not be loaded: {}",
                                     err ? err : "unknown error");
            return;
        }
#define DG_LOAD_POINTER(name, ret, args)                                                             \
    table.name = reinterpret_cast<decltype(table.name)>(::dlsym(handle, #name));                                \
    if (table.name == nullptr && load_error.empty())                                            \
        load_error = fmt::format("the NVIDIA driver is too old: libcuda.so.1 lacks {}", #name);
        DG_DRIVER_FUNCTIONS(DG_LOAD_POINTER)
#undef DG_LOAD_POINTER
        if (load_error.empty() && table.cuInit(0) != CUDA_SUCCESS)
            load_error = "cuInit failed: no usable CUDA device";
    });
    if (!load_error.empty())
        throw RuntimeError(load_error);
    return table;
}

inline std::string error_string(CUresult result) {
    const char* text = nullptr;
    if (api().cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr)
        return fmt::format("CUDA driver error {}", result);
    return fmt::format("{} (CUDA driver error {})", text, result);
}

}  // namespace dg::driver

// Call a driver function and raise a RuntimeError with its message on failure.
#define DG_CUDA_DRIVER_CHECK(call)                                                                   \
    do {                                                                                            \
        const ::dg::driver::CUresult dg_result_ = (call);                                          \
        if (dg_result_ != ::dg::driver::CUDA_SUCCESS) [[unlikely]]                                 \
            throw ::dg::RuntimeError(::fmt::format("{} failed: {} ({}:{})", #call,                  \
                                                   ::dg::driver::error_string(dg_result_),         \
                                                   __FILE__, __LINE__));                            \
    } while (0)
