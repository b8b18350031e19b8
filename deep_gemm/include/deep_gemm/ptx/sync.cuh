// Warp-specialization and synchronization primitives: register reallocation, named barriers,
// stmatrix, programmatic dependent launch, GPU-scope flags, an L2 prefetch, and the packing conversions (BF16, e4m3).
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/mbarrier.cuh>

namespace deep_gemm::ptx {

template <uint32_t kNumRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kNumRegs));
}

template <uint32_t kNumRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kNumRegs));
}

// The lane index from %laneid: opaque to the compiler (a branch on `lane_id() < 32` stays a branch).
__device__ __forceinline__ uint32_t lane_id() {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// Barrier `id` (1..15; 0 is __syncthreads) over `num_threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// Arrive at barrier `id` without waiting (the threads that bar.sync on it wait for these arrivals too).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// Store four 8x8 b16 matrices; lane l gives the row address of matrix l/8, row l%8.
__device__ __forceinline__ void stmatrix_x4(void* smem, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(smem_addr(smem)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// Programmatic dependent launch: wait for the previous grid's memory, let the next grid start.
__device__ __forceinline__ void grid_dependency_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void grid_dependency_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// GPU-scope flags between CTAs (stream-K): publish after a fence.acq_rel.gpu, read with acquire semantics, reset.
__device__ __forceinline__ void fence_acq_rel_gpu() {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

__device__ __forceinline__ void red_add_relaxed_gpu(uint32_t* ptr, uint32_t value) {
    asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* ptr) {
    uint32_t value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
    return value;
}

__device__ __forceinline__ void st_relaxed_gpu(uint32_t* ptr, uint32_t value) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

// Bring the line holding `ptr` into L2 (a hint: no result, no fault on an address inside an allocation)
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<uint64_t>(ptr)));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t out;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
    return out;
}

// Two floats to a packed e4m3 pair (round to nearest even, saturating to +-448): lo in the low byte
__device__ __forceinline__ uint16_t pack_e4m3x2(float lo, float hi) {
    uint16_t out;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(out) : "f"(hi), "f"(lo));
    return out;
}

// A packed e4m3 pair back to two floats (exact): .x from the low byte
__device__ __forceinline__ float2 unpack_e4m3x2(uint16_t pair) {
    float2 out;
    asm("{\n.reg .b32 h2;\n.reg .f16 lo, hi;\n"
        "cvt.rn.f16x2.e4m3x2 h2, %2;\nmov.b32 {lo, hi}, h2;\n"
        "cvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}"
        : "=f"(out.x), "=f"(out.y) : "h"(pair));
    return out;
}

}  // namespace deep_gemm::ptx
