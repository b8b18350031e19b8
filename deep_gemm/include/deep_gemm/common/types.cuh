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

// A TMA tensor map (CUtensorMap): 128 opaque bytes, built on the host, passed as a __grid_constant__
// kernel parameter. Declared here so that kernel code needs no host header (NVRTC).
struct alignas(64) TmaDescriptor {
    uint64_t opaque[16];
};

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
