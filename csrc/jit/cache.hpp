// The on-disk kernel cache: `$DG_JIT_CACHE_DIR` (default `~/.deep_gemm`), read when used.
//
// Entry: `<cache>/kernels/<family>-<key>/` with kernel.cu, kernel.cubin, ptxas.log and, written last,
// `manifest` (cubin size and SHA-256). The key is the SHA-256 of: the rendered source, the path and
// contents of every project header it includes (transitively), the compiler's identity and version,
// the code-generating flags and the arch. No absolute path enters the key, so a cache directory is
// portable between installs.
//
// Writes are atomic and process-safe: an entry is built in `<cache>/tmp/<unique>/` and renamed into
// place; rename(2) of a directory onto an existing non-empty one fails, so when several processes
// compile one kernel the first rename wins and the others discard their copy. An entry whose
// manifest is missing or does not match its cubin (truncated, corrupt, half-deleted) is moved
// aside and rebuilt.
#pragma once

#include <stdio.h>

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "../utils/env.hpp"
#include "../utils/exception.hpp"
#include "../utils/hash.hpp"
#include "../utils/system.hpp"
#include "compiler.hpp"
#include "toolchain.hpp"

namespace dg::jit {

struct KernelSource {
    std::string family;  // e.g. "sm90_gemm"; names the cache entry
    std::string code;    // the rendered .cu
};

struct BuildResult {
    fs::path entry_dir;
    fs::path cubin_path;
    std::string cubin;
    std::string ptxas_report;
    bool cache_hit = false;
};

inline fs::path cache_root() {
    const std::string env = get_env("DG_JIT_CACHE_DIR");
    if (!env.empty())
        return fs::path(env);
    const std::string home = get_env("HOME");
    DG_CHECK(!home.empty(), "JIT: neither DG_JIT_CACHE_DIR nor HOME is set; cannot place the kernel cache");
    return fs::path(home) / ".deep_gemm";
}

namespace detail {

// `#include <deep_gemm/...>` or `#include "deep_gemm/..."` targets of one file.
// NOTES: plain string scanning, not std::regex (see read_file in utils/system.hpp).
inline std::vector<std::string> project_includes(const std::string& text) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = text.find("#", pos)) != std::string::npos) {
        size_t i = text.find_first_not_of(" \t", pos + 1);
        pos += 1;
        if (i == std::string::npos || text.compare(i, 7, "include") != 0)
            continue;
        i = text.find_first_not_of(" \t", i + 7);
        if (i == std::string::npos || (text[i] != '<' && text[i] != '"'))
            continue;
        const char close = text[i] == '<' ? '>' : '"';
        const size_t end = text.find(close, i + 1);
        if (end == std::string::npos)
            continue;
        const std::string target = text.substr(i + 1, end - i - 1);
        if (target.rfind("deep_gemm/", 0) == 0)
            out.push_back(target);
    }
    return out;
}

// Hash of one header's relative path and contents plus those of everything it includes (memoized:
// headers do not change while a process runs).
inline void collect_headers(const std::string& code, std::set<std::string>& seen) {
    for (const auto& rel: project_includes(code)) {
        if (!seen.insert(rel).second)
            continue;
        static std::map<std::string, std::string> contents;
        static std::mutex mutex;
        std::string text;
        {
            std::lock_guard lock(mutex);
            auto it = contents.find(rel);
            if (it == contents.end()) {
                const auto file = read_file(toolchain().package_include / rel);
                DG_CHECK(file.has_value(), "JIT: kernel header {} not found under {}", rel,
                         toolchain().package_include.string());
                it = contents.emplace(rel, *file).first;
            }
            text = it->second;
        }
        collect_headers(text, seen);
    }
}

inline std::string header_digest(const std::string& code) {
    std::set<std::string> headers;
    collect_headers(code, headers);
    Sha256 h;
    for (const auto& rel: headers)
        h.update_field(rel).update_field(*read_file(toolchain().package_include / rel));
    return h.hex_digest();
}

struct Manifest {
    size_t cubin_size = 0;
    std::string cubin_sha256;
};

inline std::string render_manifest(const std::string& cubin) {
    return fmt::format("cubin_size={}\ncubin_sha256={}\n", cubin.size(), sha256_hex(cubin));
}

// The entry's cubin when its manifest matches, else nothing.
inline std::optional<std::string> read_valid_entry(const fs::path& dir) {
    const auto manifest = read_file(dir / "manifest");
    const auto cubin = read_file(dir / "kernel.cubin");
    if (!manifest || !cubin || cubin->empty() || *manifest != render_manifest(*cubin))
        return std::nullopt;
    return cubin;
}

// Move a bad entry out of the way (atomically) and delete it; losing a race here is fine.
inline void discard_entry(const fs::path& dir, const fs::path& root) {
    const fs::path trash = make_unique_dir(root / "tmp", "trash-");
    ::rename(dir.c_str(), (trash / "entry").c_str());
    remove_tree(trash);
}

}  // namespace detail

// The cache key of `source` for `arch` with `compiler`.
inline std::string cache_key(const KernelSource& source, const std::string& arch, const Compiler& compiler) {
    Sha256 h;
    h.update_field("deep_gemm-jit-v1");
    h.update_field(source.family).update_field(source.code);
    h.update_field(detail::header_digest(source.code));
    h.update_field(compiler.signature());
    for (const auto& flag: codegen_flags())
        h.update_field(flag);
    h.update_field(arch);
    return h.hex_digest().substr(0, 32);
}

// Where the cache entry of `source` for `arch` with `compiler` lives (whether or not it exists yet).
inline fs::path cache_entry_dir(const KernelSource& source, const std::string& arch, const Compiler& compiler) {
    return cache_root() / "kernels" / fmt::format("{}-{}-{}", source.family, compiler.name(),
                                                  cache_key(source, arch, compiler));
}

// DG_JIT_DUMP_SASS (or DG_JIT_DUMP_ASM, which also dumps the PTX): disassemble the entry's cubin to stderr and to
// `kernel.sass` next to it.
inline void dump_sass(const BuildResult& built) {
    const auto& tc = toolchain();
    std::string command = shell_quote(tc.cuobjdump) + " --dump-sass " + shell_quote(built.cubin_path.string());
    if (!tc.nvdisasm_dir.empty())
        command = "PATH=" + shell_quote(tc.nvdisasm_dir) + ":\"$PATH\" " + command;
    const auto sass = run_command(command);
    DG_CHECK(sass.exit_code == 0, "DG_JIT_DUMP_SASS: {} failed:\n{}", tc.cuobjdump, sass.output);
    fmt::print(stderr, "[deep_gemm JIT] SASS of {}:\n{}\n", built.cubin_path.string(), sass.output);
    write_file(built.entry_dir / "kernel.sass", sass.output);
}

// The cached entry for `source` (verified), compiling and publishing it first on a miss.
inline BuildResult find_or_compile(const KernelSource& source, const std::string& arch, std::optional<bool> use_nvrtc) {
    const Compiler& compiler = get_compiler(use_nvrtc);
    const fs::path root = cache_root();
    const fs::path entry = cache_entry_dir(source, arch, compiler);

    BuildResult result;
    result.entry_dir = entry;
    result.cubin_path = entry / "kernel.cubin";

    // Hit: a complete, verified entry
    if (fs::exists(entry)) {
        if (auto cubin = detail::read_valid_entry(entry)) {
            result.cubin = std::move(*cubin);
            result.ptxas_report = read_file(entry / "ptxas.log").value_or("");
            result.cache_hit = true;
            return result;
        }
        if (get_env_flag("DG_JIT_DEBUG"))
            fmt::print(stderr, "[deep_gemm JIT] discarding corrupt cache entry {}\n", entry.string());
        detail::discard_entry(entry, root);
    }

    // Miss: build in a private directory, then publish with one rename
    const fs::path build_dir = make_unique_dir(root / "tmp", source.family + "-");
    try {
        auto output = compiler.compile(source.code, arch, build_dir);
        if (get_env_flag("DG_JIT_DUMP_PTX") || get_env_flag("DG_JIT_DUMP_ASM"))
            compiler.dump_ptx(source.code, arch, build_dir);
        write_file(build_dir / "kernel.cubin", output.cubin);
        write_file(build_dir / "ptxas.log", output.ptxas_report);
        write_file(build_dir / "manifest", detail::render_manifest(output.cubin));
        result.cubin = std::move(output.cubin);
        result.ptxas_report = std::move(output.ptxas_report);
    } catch (...) {
        remove_tree(build_dir);
        throw;
    }

    fs::create_directories(entry.parent_path());
    if (::rename(build_dir.c_str(), entry.c_str()) != 0) {
        // Another process published first: use its entry if it is valid, else rebuild.
        remove_tree(build_dir);
        if (!detail::read_valid_entry(entry)) {
            detail::discard_entry(entry, root);
            return find_or_compile(source, arch, use_nvrtc);
        }
    }
    return result;
}

// Returns the cached cubin for `source`, compiling and publishing it first on a miss.
inline BuildResult build_kernel(const KernelSource& source, const std::string& arch,
                                std::optional<bool> use_nvrtc = std::nullopt) {
    auto built = find_or_compile(source, arch, use_nvrtc);
    if (get_env_flag("DG_JIT_DUMP_SASS") || get_env_flag("DG_JIT_DUMP_ASM"))
        dump_sass(built);
    return built;
}

}  // namespace dg::jit
