// Host side of deep_gemm/include/deep_gemm/impls/smxx_transpose_fp8.cuh: render, load (once per device and
// variant), launch on the current stream.
#pragma once

#include <utility>
#include <vector>

#include <deep_gemm/common/host_device_types.hpp>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../heuristics/sm90_gemm.hpp"

namespace dg::kernels {

constexpr uint32_t kTransposeFp8Tile = 64;

// aligned: src and its row stride are multiples of 16 bytes (16-byte loads).
inline jit::KernelSource render_transpose_fp8(bool aligned) {
    return {"smxx_transpose_fp8",
            fmt::format("#include <deep_gemm/impls/smxx_transpose_fp8.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&transpose_fp8_groups_kernel<{}, {}>);\n"
                        "}}\n",
                        kMaxKGroups, aligned ? "true" : "false")};
}

// Per group g (ks[g] > 0 rows of K from starts[g], both multiples of 16): the rows [starts[g], starts[g] + ks[g]) of
// the MN-major FP8 src [sum K, mn] (row stride `ld` bytes) into dst at byte mn * starts[g] as [mn, ks[g]] K-major.
inline void launch_transpose_fp8_groups(int device_index, const void* src, void* dst, uint32_t mn, uint64_t ld,
                                        const std::vector<int64_t>& ks, const std::vector<int64_t>& starts) {
    DG_CHECK(ks.size() == starts.size() && ks.size() <= kMaxKGroups, "transpose_fp8_groups: {} groups", ks.size());
    deep_gemm::TransposeGroups<kMaxKGroups> groups{};  // (common/host_device_types.hpp)
    uint32_t tiles = 0;
    for (size_t g = 0; g < ks.size(); ++g) {
        DG_CHECK(ks[g] % 16 == 0 && starts[g] % 16 == 0 && starts[g] + ks[g] <= UINT32_MAX,
                 "transpose_fp8_groups: group {} (K {} from row {}) must be 16-row aligned", g, ks[g], starts[g]);
        groups.tile_begin[groups.num_groups] = tiles;
        groups.start[groups.num_groups] = static_cast<uint32_t>(starts[g]);
        groups.k[groups.num_groups] = static_cast<uint32_t>(ks[g]);
        // (empty groups are left out: they own no tile)
        if (ks[g] > 0) {
            tiles += static_cast<uint32_t>((ks[g] + kTransposeFp8Tile - 1) / kTransposeFp8Tile);
            ++groups.num_groups;
        }
    }
    if (tiles == 0 || mn == 0)
        return;
    DG_CHECK_INPUT(tiles <= 65535, "transpose_fp8_groups: sum K = {} rows is too many (at most {} tiles of {})",
                   starts.back() + ks.back(), 65535, kTransposeFp8Tile);
    const bool aligned = reinterpret_cast<uintptr_t>(src) % 16 == 0 && ld % 16 == 0;
    static jit::KernelCache<std::pair<int, bool>> kernels;
    const auto stream = jit::current_stream(device_index);
    const jit::Kernel& kernel = kernels.get({device_index, aligned}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_transpose_fp8(aligned), arch, device_index, stream);
    });
    jit::LaunchConfig config;
    config.grid = {(mn + kTransposeFp8Tile - 1) / kTransposeFp8Tile, tiles, 1};
    config.num_threads = 256;
    config.stream = stream;
    kernel.launch(device_index, config, src, dst, mn, ld, groups);
}

}  // namespace dg::kernels
