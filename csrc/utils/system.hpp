// Files, directories and subprocesses for the JIT: whole-file reads/writes, unique temporary
// directories, and running a command with its combined output captured.
#pragma once

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

#include "exception.hpp"

namespace dg {

namespace fs = std::filesystem;

// NOTES: POSIX I/O keeps the JIT off libstdc++'s locale machinery, which the extension shares with PyTorch's
// process: an extension built with -fvisibility=hidden got private copies of the facet ids, and std::regex
// crashed there. That flag is gone; the plain calls stayed.
inline std::optional<std::string> read_file(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return std::nullopt;
    std::string data;
    char buffer[65536];
    ssize_t n;
    while ((n = ::read(fd, buffer, sizeof(buffer))) > 0)
        data.append(buffer, static_cast<size_t>(n));
    ::close(fd);
    if (n < 0)
        return std::nullopt;
    return data;
}

inline void write_file(const fs::path& path, const std::string& data) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    DG_CHECK(fd >= 0, "JIT: cannot open {} for writing", path.string());
    size_t written = 0;
    while (written < data.size()) {
        const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
        if (n <= 0)
            break;
        written += static_cast<size_t>(n);
    }
    const bool ok = written == data.size() && ::close(fd) == 0;
    DG_CHECK(ok, "JIT: failed to write {}", path.string());
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

// Delete a directory tree; missing paths are fine. Returns false if something could not be removed.
// NOTES: nftw rather than std::filesystem::remove_all, which crashed on the H200 image while the
// extension was built with -fvisibility=hidden (see read_file).
inline bool remove_tree(const fs::path& path) {
    const auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
    struct stat st{};
    if (::lstat(path.c_str(), &st) != 0)
        return true;
    return ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0;
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
