// Basic device-side types and helpers shared by every kernel. NVRTC-safe: no host standard headers.
#pragma once

#include <cuda/std/cstdint>

namespace deep_gemm {

using cuda::std::int32_t;
using cuda::std::int64_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::uint8_t;
using cuda::std::uintptr_t;

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
    return (a + b - 1) / b;
}

template <typename T>
__host__ __device__ constexpr T align_up(T a, T b) {
    return ceil_div(a, b) * b;
}

template <typename T>
__host__ __device__ constexpr T gcd(T a, T b) {
    return b == 0 ? a : gcd(b, a % b);
}

}  // namespace deep_gemm

// What the host and the kernels share (TmaDescriptor, GemmType, kernel parameters, configs): after the
// fixed-width integer names above, which it uses under NVRTC
#include <deep_gemm/common/host_device_types.hpp>
