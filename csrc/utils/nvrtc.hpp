// NVRTC, loaded lazily (dlopen) on first use: from the CUDA toolkit (`<cuda_home>/lib64`), from
// the `nvidia-cuda-nvrtc` wheel that PyTorch installs (`site-packages/nvidia/cu13/lib`), or from
// the loader's search path, in that order. Types are declared here (nvrtc.h is not needed).
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "exception.hpp"

namespace dg::nvrtc {

using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
constexpr nvrtcResult NVRTC_SUCCESS = 0;

#define DG_NVRTC_FUNCTIONS(X)                                                                                    \
    X(nvrtcVersion, nvrtcResult, (int*, int*))                                                                \
    X(nvrtcGetErrorString, const char*, (nvrtcResult))                                                       \
    X(nvrtcCreateProgram, nvrtcResult, (nvrtcProgram*, const char*, const char*, int, const char* const*,     \
                                          const char* const*))                                                  \
    X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram*))                                                      \
    X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char* const*))                              \
    X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t*))                                           \
    X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char*))                                                 \
    X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t*))                                                \
    X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char*))                                                      \
    X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram, size_t*))                                                  \
    X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram, char*))

struct NvrtcApi {
#define DG_DECLARE_POINTER(name, ret, args) ret(*name) args = nullptr;
    DG_NVRTC_FUNCTIONS(DG_DECLARE_POINTER)
#undef DG_DECLARE_POINTER
    std::string library_path;
};

// libnvrtc opens libnvrtc-builtins.so.X.Y by name; when NVRTC comes from a folder that is not on
// the loader's path (the pip wheel), load the builtins from that folder first.
inline void preload_builtins_next_to(const std::string& library_path) {
    std::error_code ec;
    const auto dir = std::filesystem::path(library_path).parent_path();
    if (dir.empty() || !std::filesystem::is_directory(dir, ec))
        return;
    for (const auto& entry: std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("libnvrtc-builtins.so.", 0) == 0)
            ::dlopen(entry.path().c_str(), RTLD_NOW | RTLD_GLOBAL);
    }
}

// Load NVRTC from the first candidate path that opens; raises with every path tried.
inline const NvrtcApi& api(const std::vector<std::string>& candidates) {
    static NvrtcApi table;
    static std::string load_error;
    static std::once_flag once;
    std::call_once(once, [&] {
        std::string tried;
        void* handle = nullptr;
        for (const auto& path: candidates) {
            preload_builtins_next_to(path);
            handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (handle != nullptr) {
                table.library_path = path;
                break;
            }
            const char* err = ::dlerror();
            tried += fmt::format("\n  {}: {}", path, err ? err : "not loadable");
        }
        if (handle == nullptr) {
            load_error = "DG_JIT_USE_NVRTC=1 but NVRTC could not be loaded (install the CUDA toolkit or "
                         "`pip install nvidia-cuda-nvrtc`); tried:" + tried;
            return;
        }
#define DG_LOAD_POINTER(name, ret, args)                                                  \
    table.name = reinterpret_cast<decltype(table.name)>(::dlsym(handle, #name));                     \
    if (table.name == nullptr && load_error.empty())                                 \
        load_error = fmt::format("{} lacks {}", table.library_path, #name);
        DG_NVRTC_FUNCTIONS(DG_LOAD_POINTER)
#undef DG_LOAD_POINTER
    });
    if (!load_error.empty())
        throw RuntimeError(load_error);
    return table;
}

}  // namespace dg::nvrtc
