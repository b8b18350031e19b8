// Host side of deep_gemm/include/deep_gemm/impls/smxx_paged_mqa_schedule.cuh: render, load (once per device),
// launch on the current stream (one CTA).
#pragma once

#include <string>
#include <tuple>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"

namespace dg::kernels {

// One CTA of `threads` threads, each owning `items` consecutive requests per tile: batches of up to 256 requests take
// the small CTA (one warp per scheduler), larger ones the large CTA, one tile up to 4096 requests (their lengths read
// once from memory). Why, with the device times of both: the kernel's header (smxx_paged_mqa_schedule.cuh).
struct PagedMqaScheduleShape {
    uint32_t threads, items;
};
constexpr PagedMqaScheduleShape kPagedMqaScheduleSmall{128, 2};
constexpr PagedMqaScheduleShape kPagedMqaScheduleLarge{512, 8};

inline PagedMqaScheduleShape paged_mqa_schedule_shape(uint32_t batch) {
    return batch <= kPagedMqaScheduleSmall.threads * kPagedMqaScheduleSmall.items ? kPagedMqaScheduleSmall
                                                                                  : kPagedMqaScheduleLarge;
}

inline jit::KernelSource render_paged_mqa_schedule(PagedMqaScheduleShape shape) {
    return {"smxx_paged_mqa_schedule",
            fmt::format("#include <deep_gemm/impls/smxx_paged_mqa_schedule.cuh>\n\n"
                        "using namespace deep_gemm;\n\n"
                        "static void __instantiate_kernel() {{\n"
                        "    auto ptr = reinterpret_cast<void*>(&paged_mqa_schedule_kernel<{}, {}>);\n"
                        "}}\n",
                        shape.threads, shape.items)};
}

// schedule (int32 [num_sms + 1, 2], contiguous) = the paged decode schedule of the int32 context lengths
// [batch, next_n] at `context_lens` (element strides stride_b, stride_t; next_n = 1 for a 1-D [batch]), in kv
// blocks of block_kv keys. batch < 2^31; batch == 0 or next_n == 0 give rows (batch, 0).
inline void launch_paged_mqa_schedule(int device_index, const int32_t* context_lens, int64_t stride_b,
                                      int64_t stride_t, uint32_t batch, uint32_t next_n, uint32_t block_kv,
                                      uint32_t num_sms, int32_t* schedule) {
    static jit::KernelCache<std::tuple<int, uint32_t, uint32_t>> kernels;  // by device and CTA shape
    const PagedMqaScheduleShape shape = paged_mqa_schedule_shape(batch);
    const auto stream = jit::current_stream(device_index);
    const jit::Kernel& kernel = kernels.get({device_index, shape.threads, shape.items}, [&]() -> const jit::Kernel& {
        const auto arch = jit::DeviceRuntime::instance().properties(device_index).arch();
        return jit::get_kernel(render_paged_mqa_schedule(shape), arch, device_index, stream);
    });
    jit::LaunchConfig config;
    config.num_threads = shape.threads;
    config.stream = stream;
    kernel.launch(device_index, config, context_lens, stride_b, stride_t, batch, next_n, block_kv, num_sms, schedule);
}

}  // namespace dg::kernels
