// Files, directories and subprocesses for the JIT: whole-file reads/writes, unique temporary
// directories, and running a command with its combined output captured.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "exception.hpp"

namespace dg {

namespace fs = std::filesystem;

inline std::optional<std::string> read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline void write_file(const fs::path& path, const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    DG_CHECK(out.good(), "JIT: failed to write {}", path.string());
}

// A fresh directory `<parent>/<prefix><pid>-<random>`, created exclusively.
inline fs::path make_unique_dir(const fs::path& parent, const std::string& prefix) {
    fs::create_directories(parent);
    static thread_local std::mt19937_64 rng(std::random_device{}() ^ (uint64_t(::getpid()) << 32));
    for (int attempt = 0; attempt < 64; ++attempt) {
        const fs::path path = parent / fmt::format("{}{}-{:016x}", prefix, ::getpid(), rng());
        std::error_code ec;
        if (fs::create_directory(path, ec))
            return path;
    }
    throw RuntimeError(fmt::format("JIT: cannot create a temporary directory under {}", parent.string()));
}

// Quote one argument for /bin/sh.
inline std::string shell_quote(const std::string& arg) {
    std::string out = "'";
    for (const char c: arg)
        out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

struct CommandResult {
    int exit_code;
    std::string output;  // stdout and stderr, interleaved
};

inline CommandResult run_command(const std::string& command) {
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    DG_CHECK(pipe != nullptr, "cannot run command: {}", command);
    std::string output;
    std::array<char, 4096> buffer{};
    size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
        output.append(buffer.data(), n);
    const int status = ::pclose(pipe);
    const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return {exit_code, output};
}

}  // namespace dg
