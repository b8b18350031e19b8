// Host side of the FP8 casts, deep_gemm/include/deep_gemm/impls/smxx_quant_per_token.cuh and smxx_quant_per_block.cuh:
// render, load (once per device and variant), launch on the current stream.
#pragma once

#include <algorithm>
#include <utility>

#include <deep_gemm/common/host_device_types.hpp>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../../utils/exception.hpp"

namespace dg::kernels {

constexpr uint32_t kPerTokenQuantThreads = 256;
// CTAs per SM the per-token grid is sized for (at most): 2048 resident threads, enough 16-byte loads in flight
constexpr uint32_t kPerTokenQuantCtasPerSm = 8;

// The compile-time variant of the per-token cast.
struct PerTokenQuantVariant {
    uint32_t gran_k = 128;      // 32 or 128
    bool fp32_input = false;    // FP32 x (else BF16)
    bool ue8m0 = false;         // power-of-two scales
    bool packed_ue8m0 = false;  // scales as UE8M0 bytes, four to an int32 (needs ue8m0)
    bool swiglu = false;        // x rows are [gate, up]: silu(gate) * up is cast
    bool aligned = true;        // rows 16-byte aligned and K a multiple of 8: vector loads and stores
    bool fp4 = false;           // e2m1 codes two to a byte (scale amax / 6) instead of e4m3

    uint32_t key() const {
        return gran_k | (fp32_input << 8) | (ue8m0 << 9) | (packed_ue8m0 << 10) | (swiglu << 11) | (aligned << 12) |
               (fp4 << 13);
    }
};

inline jit::KernelSource render_per_token_quant(const PerTokenQuantVariant& v) {
    DG_CHECK_INPUT(v.gran_k == 32 || v.gran_k == 128, "smxx_quant_per_token: gran_k must be 32 or 128, got {}",
                   v.gran_k);
    DG_CHECK_INPUT(!v.packed_ue8m0 || v.ue8m0, "smxx_quant_per_token: packed_ue8m0 needs ue8m0");
    const auto b = [](bool x) { return x ? "true" : "false"; };
    return {"smxx_quant_per_token",
            fmt::format("#include <deep_gemm/impls/smxx_quant_per_token.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&per_token_quant_kernel<{}, {}, {}, {}, {}, {}, {}, {}>);\n"
                        "}}\n",
                        kPerTokenQuantThreads, v.gran_k, b(v.fp32_input), b(v.ue8m0), b(v.packed_ue8m0), b(v.swiglu),
                        b(v.aligned), b(v.fp4))};
}

// The grid of a per-token cast: enough CTAs for every chunk of one batch's rows (8 values a chunk, one or two per
// lane per step), at most what kPerTokenQuantCtasPerSm per SM hold (the CTAs stride over the rest), shared among
// the batches.
inline uint32_t per_token_quant_grid_x(uint64_t num_chunks_per_batch, uint32_t num_batches, int num_sms, bool swiglu) {
    const uint64_t per_cta_step = kPerTokenQuantThreads * deep_gemm::per_token_quant_chunks_per_lane(swiglu);
    const uint64_t needed = (num_chunks_per_batch + per_cta_step - 1) / per_cta_step;
    const uint64_t resident = static_cast<uint64_t>(num_sms) * kPerTokenQuantCtasPerSm;
    const uint64_t per_batch = std::max<uint64_t>(1, resident / std::max<uint32_t>(1, num_batches));
    return static_cast<uint32_t>(std::max<uint64_t>(1, std::min(needed, per_batch)));
}

inline void launch_per_token_quant(int device_index, const PerTokenQuantVariant& variant,
                                   const deep_gemm::PerTokenQuantParams& params) {
    const uint64_t chunks_per_row = static_cast<uint64_t>(params.num_sf_k) * (variant.gran_k / 8);
    const uint64_t num_chunks = static_cast<uint64_t>(params.num_rows) * chunks_per_row;
    // (the kernel walks the chunks with 32-bit indices: below 2^31, its grid's stride stays far from overflowing)
    DG_CHECK_INPUT(num_chunks < (1ull << 31),
                   "x: too many elements per batch for the FP8 cast ({} rows of {} groups)", params.num_rows,
                   params.num_sf_k);
    DG_CHECK_INPUT(params.num_batches <= 65535, "x: at most 65535 batches (the leading dim), got {}",
                   params.num_batches);
    if (num_chunks == 0 || params.num_batches == 0)
        return;
    static jit::KernelCache<std::pair<int, uint32_t>> kernels;
    const auto stream = jit::current_stream(device_index);
    const jit::Kernel& kernel = kernels.get({device_index, variant.key()}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_per_token_quant(variant), arch, device_index, stream);
    });
    jit::LaunchConfig config;
    config.grid = {per_token_quant_grid_x(num_chunks, params.num_batches,
                                          jit::DeviceRuntime::instance().num_sms(device_index), variant.swiglu),
                   params.num_batches, 1};
    config.num_threads = kPerTokenQuantThreads;
    config.stream = stream;
    kernel.launch(device_index, config, params);
}

// The compile-time variant of the 128 x 128 block cast.
struct PerBlockQuantVariant {
    bool fp32_input = false;
    bool ue8m0 = false;
    bool aligned = true;  // rows 16-byte aligned and K a multiple of 8

    uint32_t key() const { return fp32_input | (ue8m0 << 1) | (aligned << 2); }
};

inline jit::KernelSource render_per_block_quant(const PerBlockQuantVariant& v) {
    const auto b = [](bool x) { return x ? "true" : "false"; };
    return {"smxx_quant_per_block",
            fmt::format("#include <deep_gemm/impls/smxx_quant_per_block.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&per_block_quant_kernel<{}, {}, {}>);\n"
                        "}}\n",
                        b(v.fp32_input), b(v.ue8m0), b(v.aligned))};
}

inline void launch_per_block_quant(int device_index, const PerBlockQuantVariant& variant,
                                   const deep_gemm::PerBlockQuantParams& params) {
    const uint32_t blocks_k = (params.num_cols + 127) / 128, blocks_n = (params.num_rows + 127) / 128;
    if (blocks_k == 0 || blocks_n == 0 || params.num_batches == 0)
        return;
    DG_CHECK_INPUT(blocks_n <= 65535 && params.num_batches <= 65535,
                   "x: at most 65535 row blocks of 128 and 65535 batches, got {} and {}", blocks_n, params.num_batches);
    static jit::KernelCache<std::pair<int, uint32_t>> kernels;
    const auto stream = jit::current_stream(device_index);
    const jit::Kernel& kernel = kernels.get({device_index, variant.key()}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_per_block_quant(variant), arch, device_index, stream);
    });
    jit::LaunchConfig config;
    config.grid = {blocks_k, blocks_n, params.num_batches};
    config.num_threads = 256;
    config.stream = stream;
    kernel.launch(device_index, config, params);
}

}  // namespace dg::kernels
