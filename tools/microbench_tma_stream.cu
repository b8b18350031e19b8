// Microbenchmark for the memory-bound FP8 GEMM (not part of the package; built and run by tools/gpu_run.sh with
// DG_GPU_RUN_MICRO=tma_stream): how fast can a persistent grid stream the weight matrix B [N, K] (1 byte per
// element, K-major) through a TMA + mbarrier ring, as the GEMM's producer does, with no math?
//   Each CTA takes units (a band of kRows rows over one of `splits` near-equal K ranges) as the GEMM's scheduler
//   does; a stage holds kBoxesPerStage boxes of kRows rows x kBoxBytes bytes, consecutive along K; the consumer
//   (one thread) waits for each stage, optionally spins `delay` SM cycles (a stand-in for the wgmmas and the
//   promotion), and releases it.
// The question (docs/perf/h200.md, run 34): the GEMM's stage reads 128 bytes of each of 64-80 rows that lie 7-16
// KB apart; is that access pattern what holds small-M GEMMs at ~43 % of DRAM peak, and do wider stages (512 bytes
// per row) or more bytes in flight stream faster? Compare the rows of the table: same bytes, different stages.
// Timing: CUDA events around each launch, after a 256 MiB zero fill (the bench's L2 flush); median of 15.
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I deep_gemm/include \
//            tools/microbench_tma_stream.cu -o /tmp/microbench_tma_stream
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <vector>

#include <deep_gemm/ptx/mbarrier.cuh>
#include <deep_gemm/ptx/tma.cuh>

using deep_gemm::TmaDescriptor;
namespace ptx = deep_gemm::ptx;

#define CHECK_CUDA(x)                                                                     \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            std::exit(1);                                                                 \
        }                                                                                 \
    } while (0)

template <int kRows, int kBoxBytes, int kBoxesPerStage, int kStages>
__global__ void __launch_bounds__(64, 1) stream_kernel(const __grid_constant__ TmaDescriptor map, int n, int k_bytes,
                                                       int splits, int delay, unsigned long long* sink) {
    constexpr int kBoxSize = kRows * kBoxBytes;
    constexpr int kStageBytes = kBoxSize * kBoxesPerStage;
    constexpr int kStepBytes = kBoxBytes * kBoxesPerStage;  // K bytes per stage
    extern __shared__ __align__(1024) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
    uint64_t* empty = full + kStages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            ptx::mbarrier_init(&full[s], 1);
            ptx::mbarrier_init(&empty[s], 1);
        }
        ptx::fence_barrier_init();
    }
    __syncthreads();
    const int steps_total = (k_bytes + kStepBytes - 1) / kStepBytes;
    const int units = (n + kRows - 1) / kRows * splits;
    if (threadIdx.x == 0) {
        // producer
        int stage = 0, phase = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            const int row = u / splits * kRows, split = u % splits;
            const int begin = steps_total * split / splits, end = steps_total * (split + 1) / splits;
            for (int step = begin; step < end; ++step) {
                ptx::mbarrier_wait(&empty[stage], phase ^ 1);
                ptx::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
                for (int b = 0; b < kBoxesPerStage; ++b)
                    ptx::tma_load_2d(smem + stage * kStageBytes + b * kBoxSize, &map, &full[stage],
                                     step * kStepBytes + b * kBoxBytes, row);
                if (++stage == kStages)
                    stage = 0, phase ^= 1;
            }
        }
    } else if (threadIdx.x == 32) {
        // consumer
        int stage = 0, phase = 0;
        unsigned long long touched = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            const int split = u % splits;
            const int begin = steps_total * split / splits, end = steps_total * (split + 1) / splits;
            for (int step = begin; step < end; ++step) {
                ptx::mbarrier_wait(&full[stage], phase);
                touched += smem[stage * kStageBytes];
                if (delay > 0) {
                    const long long t0 = clock64();
                    while (clock64() - t0 < delay) {
                    }
                }
                ptx::mbarrier_arrive(&empty[stage]);
                if (++stage == kStages)
                    stage = 0, phase ^= 1;
            }
        }
        if (touched == 0x7fffffffffffffffull)
            sink[blockIdx.x] = touched;
    }
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda needed)
using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeFn encode_fn() {
    static EncodeFn fn = nullptr;
    if (fn == nullptr) {
        cudaDriverEntryPointQueryResult status;
        CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn), 12000,
                                                    cudaEnableDefault, &status));
        if (status != cudaDriverEntryPointSuccess || fn == nullptr) {
            std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
            std::exit(1);
        }
    }
    return fn;
}

static TmaDescriptor make_map(void* base, int n, int k_bytes, int box_rows, int box_bytes, bool swizzle) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k_bytes), static_cast<cuuint64_t>(n)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k_bytes)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes), static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, elem_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
        std::exit(1);
    }
    TmaDescriptor out;
    static_assert(sizeof(out) == sizeof(map), "TmaDescriptor mirrors CUtensorMap");
    std::memcpy(&out, &map, sizeof(map));
    return out;
}

struct Problem {
    const char* name;
    int n, k_bytes, splits, ctas;
};

template <int kRows, int kBoxBytes, int kBoxesPerStage, int kStages>
static void run(const Problem& p, uint8_t* b, int* flush, size_t flush_ints, unsigned long long* sink, int delay,
                bool swizzle) {
    auto kernel = stream_kernel<kRows, kBoxBytes, kBoxesPerStage, kStages>;
    const int smem = kStages * kRows * kBoxBytes * kBoxesPerStage + 2 * kStages * 8;
    CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const TmaDescriptor map = make_map(b, p.n, p.k_bytes, kRows, kBoxBytes, swizzle);
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    std::vector<float> times;
    for (int i = 0; i < 17; ++i) {
        CHECK_CUDA(cudaMemsetAsync(flush, 0, flush_ints * sizeof(int)));
        CHECK_CUDA(cudaEventRecord(start));
        kernel<<<p.ctas, 64, smem>>>(map, p.n, p.k_bytes, p.splits, delay, sink);
        CHECK_CUDA(cudaEventRecord(stop));
        CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        if (i >= 2)
            times.push_back(ms * 1e3f);
    }
    CHECK_CUDA(cudaGetLastError());
    std::sort(times.begin(), times.end());
    const float us = times[times.size() / 2];
    const double bytes = static_cast<double>(p.n) * p.k_bytes;
    std::printf("%-18s ctas %3d rows %3d box %3d B x %d per stage, %2d stages (%6d B in flight)%s delay %4d: "
                "%7.1f us (min %7.1f) %6.0f GB/s\n",
                p.name, p.ctas, kRows, kBoxBytes, kBoxesPerStage, kStages, kStages * kRows * kBoxBytes * kBoxesPerStage,
                swizzle ? " sw128" : "      ", delay, us, times.front(), bytes / us * 1e-3);
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
}

int main() {
    const size_t b_bytes = static_cast<size_t>(7168) * 16384;
    const size_t flush_ints = (256u << 20) / sizeof(int);
    uint8_t* b;
    int* flush;
    unsigned long long* sink;
    CHECK_CUDA(cudaMalloc(&b, b_bytes));
    CHECK_CUDA(cudaMalloc(&flush, flush_ints * sizeof(int)));
    CHECK_CUDA(cudaMalloc(&sink, 1024 * sizeof(unsigned long long)));
    CHECK_CUDA(cudaMemset(b, 1, b_bytes));
    // The patterns of the GEMM's memory-bound configs (run 34): 64 x 4096 x 7168 (BLOCK_N 80, split 2, 104 CTAs)
    // and 64 x 7168 x 16384 (BLOCK_N 64, no split, 112 CTAs); then both on all 132 SMs.
    const Problem problems[] = {{"4096x7168 s2", 4096, 7168, 2, 104}, {"7168x16384 s1", 7168, 16384, 1, 112},
                                {"4096x7168 s3", 4096, 7168, 3, 132}, {"7168x16384 s2", 7168, 16384, 2, 132}};
    for (const auto& p: problems) {
        for (const int delay: {0, 600}) {
            if (p.n == 4096) {
                run<80, 128, 1, 8>(p, b, flush, flush_ints, sink, delay, true);   // the GEMM's ring
                run<80, 128, 1, 16>(p, b, flush, flush_ints, sink, delay, true);  // twice the bytes in flight
                run<80, 128, 4, 2>(p, b, flush, flush_ints, sink, delay, true);   // 512 B per row per stage
                run<80, 128, 4, 4>(p, b, flush, flush_ints, sink, delay, true);
                run<80, 256, 1, 8>(p, b, flush, flush_ints, sink, delay, false);  // 256-byte boxes (no swizzle)
            } else {
                run<64, 128, 1, 8>(p, b, flush, flush_ints, sink, delay, true);
                run<64, 128, 1, 16>(p, b, flush, flush_ints, sink, delay, true);
                run<64, 128, 4, 2>(p, b, flush, flush_ints, sink, delay, true);
                run<64, 128, 4, 4>(p, b, flush, flush_ints, sink, delay, true);
                run<64, 256, 1, 8>(p, b, flush, flush_ints, sink, delay, false);
            }
        }
    }
    return 0;
}
