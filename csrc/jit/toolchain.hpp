// Where the JIT finds what it compiles with, resolved once per process at first use:
//   - deep_gemm's own kernel headers: `<package>/include` (next to the loaded _C module);
//   - the CUDA toolkit: $CUDA_HOME, $CUDA_PATH, the nvcc on $PATH, /usr/local/cuda;
//     NVCC is $DG_JIT_NVCC_COMPILER or `<cuda_home>/bin/nvcc`;
//   - CUDA headers for NVRTC: `<cuda_home>/include` plus `include/cccl` (CUDA 13 moved CCCL there),
//     or the `nvidia/cu13/include` folder of the CUDA wheels when there is no toolkit;
//   - NVRTC: the toolkit's libnvrtc, else the `nvidia-cuda-nvrtc` wheel's, else the loader's;
//   - cuobjdump/nvdisasm (DG_JIT_DUMP_SASS): the toolkit's, else the nvidia-cuda-* wheels'.
// No kernel includes CUTLASS/CuTe, so it is neither searched for nor on the include path.
// Python's sys.path is read to find the wheels (without the GIL, as at the extension's import: python_sys_path).
#pragma once

#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../utils/env.hpp"
#include "../utils/exception.hpp"
#include "../utils/system.hpp"

namespace dg::jit {

struct Toolchain {
    fs::path package_include;           // .../deep_gemm/include
    std::optional<fs::path> cuda_home;  // toolkit root, if any
    std::string nvcc;                   // path of nvcc (may not exist)
    std::vector<fs::path> cuda_includes;
    std::vector<std::string> nvrtc_candidates;
    std::string cuobjdump;              // for DG_JIT_DUMP_SASS: the toolkit's, the wheel's, or from PATH
    std::string nvdisasm_dir;           // folder of nvdisasm (cuobjdump runs it), empty: PATH
};

namespace detail {

inline fs::path this_module_dir() {
    Dl_info info{};
    DG_CHECK(::dladdr(reinterpret_cast<void*>(&this_module_dir), &info) != 0 && info.dli_fname != nullptr,
             "JIT: cannot locate the deep_gemm extension module");
    return fs::canonical(fs::path(info.dli_fname)).parent_path();
}

// sys.path as it was when the extension was imported (set by python_api.cpp's module init).
inline std::vector<fs::path>& python_sys_path_at_import() {
    static std::vector<fs::path> paths;
    return paths;
}

// sys.path: read live when this thread holds the GIL (the _C bindings), else as it was at import. The op kernels
// (csrc/op_kernels.hpp) run without the GIL, and taking it here, under the JIT's locks, could deadlock against a
// thread that holds the GIL and waits for those locks.
inline std::vector<fs::path> python_sys_path() {
    std::vector<fs::path> out;
    namespace py = pybind11;
    if (!Py_IsInitialized())
        return out;
    if (!PyGILState_Check())
        return python_sys_path_at_import();
    py::gil_scoped_acquire gil;
    for (const auto& entry: py::module_::import("sys").attr("path")) {
        const auto text = py::str(entry).cast<std::string>();
        if (!text.empty())
            out.emplace_back(text);
    }
    return out;
}

inline std::optional<fs::path> find_cuda_home() {
    for (const char* name: {"CUDA_HOME", "CUDA_PATH"}) {
        const std::string value = get_env(name);
        if (!value.empty() && fs::exists(fs::path(value) / "include" / "cuda.h"))
            return fs::path(value);
    }
    const auto which = run_command("command -v nvcc");
    if (which.exit_code == 0) {
        std::string line = which.output.substr(0, which.output.find('\n'));
        std::error_code ec;
        const fs::path nvcc = fs::canonical(line, ec);
        if (!ec && fs::exists(nvcc.parent_path().parent_path() / "include" / "cuda.h"))
            return nvcc.parent_path().parent_path();
    }
    if (fs::exists("/usr/local/cuda/include/cuda.h"))
        return fs::path("/usr/local/cuda");
    return std::nullopt;
}

inline Toolchain discover() {
    Toolchain tc;
    tc.package_include = this_module_dir() / "include";
    DG_CHECK(fs::exists(tc.package_include / "deep_gemm"),
             "JIT: kernel headers not found at {} (is the package installed completely?)",
             tc.package_include.string());

    const auto sys_path = python_sys_path();
    tc.cuda_home = find_cuda_home();
    const std::string nvcc_override = get_env("DG_JIT_NVCC_COMPILER");
    tc.nvcc = !nvcc_override.empty() ? nvcc_override
              : tc.cuda_home       ? (*tc.cuda_home / "bin" / "nvcc").string()
                                   : std::string("nvcc");

    // CUDA headers (for NVRTC; NVCC knows its own)
    if (tc.cuda_home) {
        tc.cuda_includes.push_back(*tc.cuda_home / "include");
        if (fs::exists(*tc.cuda_home / "include" / "cccl"))
            tc.cuda_includes.push_back(*tc.cuda_home / "include" / "cccl");
    } else {
        for (const auto& dir: sys_path) {
            const fs::path inc = dir / "nvidia" / "cu13" / "include";
            if (fs::exists(inc / "cuda_runtime.h")) {
                tc.cuda_includes.push_back(inc);
                if (fs::exists(inc / "cccl"))
                    tc.cuda_includes.push_back(inc / "cccl");
                break;
            }
        }
    }

    // NVRTC libraries, best first
    if (tc.cuda_home) {
        for (const char* name: {"libnvrtc.so.13", "libnvrtc.so"}) {
            for (const char* lib: {"lib64", "lib"}) {
                const fs::path p = *tc.cuda_home / lib / name;
                if (fs::exists(p))
                    tc.nvrtc_candidates.push_back(p.string());
            }
        }
    }
    for (const auto& dir: sys_path) {
        const fs::path p = dir / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13";
        if (fs::exists(p))
            tc.nvrtc_candidates.push_back(p.string());
    }
    tc.nvrtc_candidates.push_back("libnvrtc.so.13");

    // Disassembler (DG_JIT_DUMP_SASS): toolkit first, then the nvidia-cuda-cuobjdump/nvdisasm wheels
    std::vector<fs::path> bin_dirs;
    if (tc.cuda_home)
        bin_dirs.push_back(*tc.cuda_home / "bin");
    for (const auto& dir: sys_path)
        bin_dirs.push_back(dir / "nvidia" / "cu13" / "bin");
    tc.cuobjdump = "cuobjdump";
    for (const auto& dir: bin_dirs) {
        if (tc.cuobjdump == "cuobjdump" && fs::exists(dir / "cuobjdump"))
            tc.cuobjdump = (dir / "cuobjdump").string();
        if (tc.nvdisasm_dir.empty() && fs::exists(dir / "nvdisasm"))
            tc.nvdisasm_dir = dir.string();
    }
    return tc;
}

}  // namespace detail

inline const Toolchain& toolchain() {
    static std::optional<Toolchain> cached;
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    if (!cached)
        cached = detail::discover();
    return *cached;
}

}  // namespace dg::jit
