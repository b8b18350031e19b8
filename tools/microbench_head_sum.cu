// Microbenchmark for the MQA head-sum design choices on SM90 (not part of the package; built by
// tools/mqa_gpu_run.sh, step "micro"): per-SM throughput of the instructions a head reduction could use.
//   cvt_relu   cvt.rn.relu.bf16x2.f32 (F2FP.BF16.F32.PACK_AB.RELU): relu and BF16 packing of two FP32 values
//   fmnmx      max.f32 against a register (FMNMX, the relu of the current reduction)
//   ffma       fma.rn.f32 (FFMA)
//   rs_n8      wgmma m64n8k16 BF16 with A from registers (the head sum on the tensor core), back to back
//   ss_n256    wgmma m64n256k32 FP8 with both operands in shared memory (the scoring GEMM), for calibration
// CUDA-core modes: one CTA of 512 threads per SM (4 warps per scheduler), 8 independent chains per thread;
// wgmma modes: 1 or 2 warpgroups per SM issuing into one accumulator each. Timed with clock64 inside the
// kernel (cycles of the SM clock, so power capping does not matter); prints results per cycle per SM.
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -I deep_gemm/include tools/microbench_head_sum.cu
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#include <deep_gemm/ptx/wgmma.cuh>

constexpr int kChains = 8;

// End of a timed region: the block's cycles (thread 0), and the values kept alive by a store that never happens
template <int kCount>
__device__ __forceinline__ void finish(unsigned long long t0, const float (&values)[kCount],
                                       unsigned long long* cycles, float* sink) {
    __syncthreads();
    const unsigned long long t1 = clock64();
    if (threadIdx.x == 0)
        cycles[blockIdx.x] = t1 - t0;
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < kCount; ++i)
        s += values[i];
    if (s == 12345.678f)
        sink[threadIdx.x] = s;
}

template <int kMode>
__global__ void __launch_bounds__(512, 1) alu_kernel(int iters, float p, float q, unsigned long long* cycles,
                                                     float* sink) {
    float x[kChains];
    #pragma unroll
    for (int c = 0; c < kChains; ++c)
        x[c] = 1.0f + 0.001f * (threadIdx.x + c);
    __syncthreads();
    const unsigned long long t0 = clock64();
    #pragma unroll 1
    for (int i = 0; i < iters; ++i) {
        #pragma unroll
        for (int r = 0; r < 8; ++r) {
            #pragma unroll
            for (int c = 0; c < kChains; ++c) {
                if constexpr (kMode == 0) {
                    uint32_t packed;
                    asm volatile("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(x[c]), "f"(p));
                    x[c] = __uint_as_float(packed);
                } else if constexpr (kMode == 1) {
                    asm volatile("max.f32 %0, %0, %1;" : "+f"(x[c]) : "f"(r % 2 == 0 ? p : q));
                } else {
                    asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(x[c]) : "f"(p), "f"(q));
                }
            }
        }
    }
    finish(t0, x, cycles, sink);
}

__device__ __forceinline__ uint64_t plain_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
    const uint64_t addr = deep_gemm::ptx::smem_addr(smem);
    return ((addr & 0x3ffffull) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}

// kMode 0: m64n8k16 BF16, A from registers; kMode 1: m64n256k32 FP8, A and B from shared memory. Each
// warpgroup issues `iters` x 16 wgmmas, committing and waiting every 16 (as a k-loop of 16 steps would).
template <int kMode>
__global__ void __launch_bounds__(256, 1) wgmma_kernel(int iters, unsigned long long* cycles, float* sink) {
    __shared__ __align__(1024) uint8_t smem[16384];
    for (int i = threadIdx.x; i < 16384; i += blockDim.x)
        smem[i] = static_cast<uint8_t>(i * 7);
    __syncthreads();
    float acc[128];
    #pragma unroll
    for (int i = 0; i < 128; ++i)
        acc[i] = 0.0f;
    uint32_t a[4];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        a[i] = 0x3f803f80u + threadIdx.x;
    const uint64_t desc_b8 = plain_desc(smem, 128, 256);
    const uint64_t desc_a = plain_desc(smem, 128, 256);
    const uint64_t desc_b256 = plain_desc(smem + 4096, 128, 256);
    __syncthreads();
    const unsigned long long t0 = clock64();
    #pragma unroll 1
    for (int i = 0; i < iters; ++i) {
        deep_gemm::ptx::wgmma_fence();
        #pragma unroll
        for (int k = 0; k < 16; ++k) {
            if constexpr (kMode == 0) {
                asm volatile(
                    "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                    "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, "
                    "p, 1, 1, 0;\n}\n"
                    : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b8), "r"(1));
            } else {
                deep_gemm::ptx::WgmmaFp8E4m3<256>::mma(desc_a, desc_b256, acc, true);
            }
        }
        deep_gemm::ptx::wgmma_commit();
        deep_gemm::ptx::wgmma_wait<0>();
        #pragma unroll
        for (int j = 0; j < 128; ++j)
            deep_gemm::ptx::wgmma_fence_operand(acc[j]);
    }
    finish(t0, acc, cycles, sink);
}

static double mean_cycles(unsigned long long* d_cycles, int n) {
    unsigned long long h[1024];
    cudaMemcpy(h, d_cycles, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    double s = 0;
    for (int i = 0; i < n; ++i)
        s += static_cast<double>(h[i]);
    return s / n;
}

int main() {
    int num_sms = 0;
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0);
    unsigned long long* d_cycles;
    float* d_sink;
    cudaMalloc(&d_cycles, 1024 * sizeof(unsigned long long));
    cudaMalloc(&d_sink, 1024 * sizeof(float));
    const int iters = 4096;
    const char* alu_names[3] = {"cvt_relu (F2FP.BF16.PACK_AB.RELU)", "fmnmx", "ffma"};
    for (int mode = 0; mode < 3; ++mode) {
        for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
            if (mode == 0) alu_kernel<0><<<num_sms, 512>>>(iters, 0.5f, -0.25f, d_cycles, d_sink);
            if (mode == 1) alu_kernel<1><<<num_sms, 512>>>(iters, 0.5f, -0.25f, d_cycles, d_sink);
            if (mode == 2) alu_kernel<2><<<num_sms, 512>>>(iters, 0.5f, -0.25f, d_cycles, d_sink);
        }
        cudaError_t err = cudaDeviceSynchronize();
        const double cyc = mean_cycles(d_cycles, num_sms);
        const double per_sm = 512.0 * iters * 8 * kChains / cyc;
        printf("%-36s %8.1f thread-ops/cycle/SM  (%.2f cycles per warp instruction per scheduler) %s\n",
               alu_names[mode], per_sm, 128.0 / per_sm * 1.0, cudaGetErrorString(err));
    }
    const int witers = 512;
    for (int mode = 0; mode < 2; ++mode) {
        for (int wgs = 1; wgs <= 2; ++wgs) {
            for (int rep = 0; rep < 2; ++rep) {
                if (mode == 0) wgmma_kernel<0><<<num_sms, 128 * wgs>>>(witers, d_cycles, d_sink);
                else wgmma_kernel<1><<<num_sms, 128 * wgs>>>(witers, d_cycles, d_sink);
            }
            cudaError_t err = cudaDeviceSynchronize();
            const double cyc = mean_cycles(d_cycles, num_sms);
            const double per_wgmma = cyc / (witers * 16.0 * wgs);
            printf("%-36s %d warpgroup(s): %7.1f cycles per wgmma per SM %s\n",
                   mode == 0 ? "rs_n8 (m64n8k16 bf16, A regs)" : "ss_n256 (m64n256k32 e4m3, smem)", wgs, per_wgmma,
                   cudaGetErrorString(err));
        }
    }
    return 0;
}
