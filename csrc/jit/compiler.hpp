// The two JIT compilers. Both turn one rendered `.cu` source into an sm_XXa cubin plus the ptxas
// resource report (`-Xptxas -v`), and name themselves (identity + version) for the cache key.
//   NVCC  (default): runs `nvcc -cubin` in the entry's build directory.
//   NVRTC (DG_JIT_USE_NVRTC=1): in-process; kernel code may include no host standard headers.
// A failed compile raises a RuntimeError carrying the compiler's full log.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../utils/env.hpp"
#include "../utils/exception.hpp"
#include "../utils/nvrtc.hpp"
#include "../utils/system.hpp"
#include "toolchain.hpp"

namespace dg::jit {

struct CompileOutput {
    std::string cubin;
    std::string ptxas_report;
};

// "sm_90a" -> "90a"; validates the spelling.
inline std::string arch_number(const std::string& arch) {
    DG_CHECK_INPUT(arch.size() >= 5 && arch.rfind("sm_", 0) == 0, "arch must look like 'sm_90a', got '{}'", arch);
    return arch.substr(3);
}

inline std::string cpp_standard() {
    const std::string std_version = get_env("DG_JIT_CPP_STANDARD", "20");
    DG_CHECK_INPUT(std_version == "17" || std_version == "20",
                   "DG_JIT_CPP_STANDARD must be 17 or 20, got '{}'", std_version);
    return std_version;
}

// Flags that change the generated code (they enter the cache key; include paths do not).
inline std::vector<std::string> codegen_flags() {
    std::vector<std::string> flags = {"-std=c++" + cpp_standard()};
    if (get_env_flag("DG_JIT_WITH_LINEINFO"))
        flags.emplace_back("-lineinfo");
    if (get_env_flag("DG_JIT_DEBUG"))
        flags.emplace_back("-DDG_JIT_DEBUG");
    return flags;
}

class Compiler {
public:
    virtual ~Compiler() = default;
    virtual std::string name() const = 0;
    // Identity and version of the compiler, e.g. "nvcc 13.0 V13.0.88 / cuda_13.0.r13.0/compiler.36424714_0".
    virtual std::string signature() const = 0;
    virtual CompileOutput compile(const std::string& source, const std::string& arch, const fs::path& build_dir) const = 0;
    // PTX of the same source (DG_JIT_DUMP_PTX), written to `build_dir/kernel.ptx`.
    virtual void dump_ptx(const std::string& source, const std::string& arch, const fs::path& build_dir) const = 0;

protected:
    static std::vector<std::string> include_flags() {
        return {"-I" + toolchain().package_include.string()};
    }
};

class NvccCompiler final : public Compiler {
public:
    std::string name() const override { return "nvcc"; }

    std::string signature() const override {
        static std::string cached;
        static std::once_flag once;
        std::call_once(once, [&] {
            const auto nvcc = toolchain().nvcc;
            const auto result = run_command(shell_quote(nvcc) + " --version");
            if (result.exit_code != 0)
                throw RuntimeError(fmt::format(
                    "JIT: NVCC not found or not runnable at '{}' (set DG_JIT_NVCC_COMPILER or CUDA_HOME, "
                    "or use DG_JIT_USE_NVRTC=1): {}", nvcc, result.output));
            // Keep only the release and build lines: they identify the compiler, not its install path.
            std::string identity;
            size_t pos = 0;
            while (pos < result.output.size()) {
                const size_t end = result.output.find('\n', pos);
                const std::string line = result.output.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
                if (line.find("release") != std::string::npos || line.rfind("Build", 0) == 0)
                    identity += line + ";";
                pos = end == std::string::npos ? result.output.size() : end + 1;
            }
            cached = "nvcc " + identity;
        });
        return cached;
    }

    CompileOutput compile(const std::string& source, const std::string& arch, const fs::path& build_dir) const override {
        const fs::path cubin = build_dir / "kernel.cubin";
        const std::string num = arch_number(arch);
        const std::string command = command_line(source, build_dir, "-cubin -Xptxas -v",
                                                 fmt::format("arch=compute_{},code=sm_{}", num, num), cubin);
        const auto result = run_command(command);
        if (result.exit_code != 0)
            throw RuntimeError(fmt::format("JIT: NVCC failed to compile {} (exit code {}):\n{}",
                                           (build_dir / "kernel.cu").string(), result.exit_code, result.output));
        auto binary = read_file(cubin);
        DG_CHECK(binary && !binary->empty(), "JIT: NVCC reported success but wrote no cubin at {}", cubin.string());
        return {*binary, result.output};
    }

    void dump_ptx(const std::string& source, const std::string& arch, const fs::path& build_dir) const override {
        const std::string num = arch_number(arch);
        const auto result = run_command(command_line(source, build_dir, "-ptx",
                                                     fmt::format("arch=compute_{},code=compute_{}", num, num),
                                                     build_dir / "kernel.ptx"));
        DG_CHECK(result.exit_code == 0, "JIT: NVCC failed to emit PTX:\n{}", result.output);
    }

private:
    // Write `source` to build_dir/kernel.cu and return the nvcc command producing `output` from it.
    static std::string command_line(const std::string& source, const fs::path& build_dir, const std::string& mode,
                                    const std::string& gencode, const fs::path& output) {
        const fs::path cu = build_dir / "kernel.cu";
        write_file(cu, source);
        std::string command = shell_quote(toolchain().nvcc) + " " + mode + " -O3 -gencode=" + gencode;
        for (const auto& flag: codegen_flags())
            command += " " + shell_quote(flag);
        for (const auto& flag: include_flags())
            command += " " + shell_quote(flag);
        command += " --expt-relaxed-constexpr --diag-suppress=177,550";
        command += " -o " + shell_quote(output.string()) + " " + shell_quote(cu.string());
        if (get_env_flag("DG_JIT_PRINT_COMPILER_COMMAND"))
            fmt::print(stderr, "[deep_gemm JIT] {}\n", command);
        return command;
    }
};

class NvrtcCompiler final : public Compiler {
public:
    std::string name() const override { return "nvrtc"; }

    std::string signature() const override {
        int major = 0, minor = 0;
        check(lib().nvrtcVersion(&major, &minor), "nvrtcVersion");
        return fmt::format("nvrtc {}.{}", major, minor);
    }

    CompileOutput compile(const std::string& source, const std::string& arch, const fs::path& build_dir) const override {
        write_file(build_dir / "kernel.cu", source);
        auto [binary, log] = run(source, arch, /*ptx=*/false);
        return {binary, log};
    }

    void dump_ptx(const std::string& source, const std::string& arch, const fs::path& build_dir) const override {
        auto [ptx, log] = run(source, arch, /*ptx=*/true);
        write_file(build_dir / "kernel.ptx", ptx);
    }

private:
    static const nvrtc::NvrtcApi& lib() { return nvrtc::api(toolchain().nvrtc_candidates); }

    static void check(nvrtc::nvrtcResult result, const char* what) {
        if (result != nvrtc::NVRTC_SUCCESS)
            throw RuntimeError(fmt::format("JIT: {} failed: {}", what, lib().nvrtcGetErrorString(result)));
    }

    std::pair<std::string, std::string> run(const std::string& source, const std::string& arch, bool ptx) const {
        const auto& api = lib();
        const std::string num = arch_number(arch);
        std::vector<std::string> options = codegen_flags();
        options.push_back(ptx ? "--gpu-architecture=compute_" + num : "--gpu-architecture=sm_" + num);
        options.emplace_back("-default-device");
        options.emplace_back("--ptxas-options=-v");
        options.emplace_back("--diag-suppress=177,550");
        for (const auto& flag: include_flags())
            options.push_back(flag);
        for (const auto& dir: toolchain().cuda_includes)
            options.push_back("-I" + dir.string());
        if (get_env_flag("DG_JIT_PRINT_COMPILER_COMMAND"))
            fmt::print(stderr, "[deep_gemm JIT] NVRTC ({}) {}\n", api.library_path, fmt::join(options, " "));

        std::vector<const char*> argv;
        for (const auto& o: options)
            argv.push_back(o.c_str());
        nvrtc::nvrtcProgram program = nullptr;
        check(api.nvrtcCreateProgram(&program, source.c_str(), "kernel.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
        const auto compile_result = api.nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
        size_t log_size = 0;
        api.nvrtcGetProgramLogSize(program, &log_size);
        std::string log(log_size, '\0');
        if (log_size > 0)
            api.nvrtcGetProgramLog(program, log.data());
        while (!log.empty() && log.back() == '\0')
            log.pop_back();
        if (compile_result != nvrtc::NVRTC_SUCCESS) {
            api.nvrtcDestroyProgram(&program);
            throw RuntimeError(fmt::format("JIT: NVRTC failed to compile ({}):\n{}",
                                           api.nvrtcGetErrorString(compile_result), log));
        }
        size_t size = 0;
        std::string binary;
        if (ptx) {
            check(api.nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize");
            binary.resize(size);
            check(api.nvrtcGetPTX(program, binary.data()), "nvrtcGetPTX");
        } else {
            check(api.nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
            binary.resize(size);
            check(api.nvrtcGetCUBIN(program, binary.data()), "nvrtcGetCUBIN");
        }
        api.nvrtcDestroyProgram(&program);
        DG_CHECK(!binary.empty(), "JIT: NVRTC reported success but produced no output");
        return {binary, log};
    }
};

// The compiler chosen by DG_JIT_USE_NVRTC (or forced by the caller).
inline const Compiler& get_compiler(std::optional<bool> use_nvrtc = std::nullopt) {
    static const NvccCompiler nvcc;
    static const NvrtcCompiler nvrtc;
    const bool want_nvrtc = use_nvrtc.value_or(get_env_flag("DG_JIT_USE_NVRTC"));
    return want_nvrtc ? static_cast<const Compiler&>(nvrtc) : static_cast<const Compiler&>(nvcc);
}

}  // namespace dg::jit
