// Does compute-sanitizer's racecheck order shared-memory accesses through mbarriers? (run on a GPU machine)
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -I deep_gemm/include tools/racecheck_mbarrier_probe.cu \
//       -o /tmp/racecheck_probe && compute-sanitizer --tool racecheck /tmp/racecheck_probe
//
// One CTA, two warps, a one-slot ring handed back and forth with mbarriers, the way the kernels hand over data that
// threads (not TMA) write: warp 0 writes the slot with plain stores and arrives on `full` (release); warp 1 waits on
// `full` (acquire), reads the slot, and arrives on `empty`; warp 0 waits on `empty` before writing the next round.
// Every access is ordered by the barriers (PTX memory model), and the sums printed must be the expected ones. If
// racecheck reports hazards here, it does not model mbarrier ordering, and its reports on this pattern in the kernels
// (e.g. the paged MQA kernel's piece scales, written by the pieces warps and read by the math warpgroups, run 83)
// are false positives; if it reports none, such a report is a real missing order.
#include <cstdio>

#include <deep_gemm/ptx/mbarrier.cuh>

constexpr int kRounds = 64, kSlotFloats = 64;

__global__ void probe(float* out) {
    __shared__ float slot[kSlotFloats];
    __shared__ uint64_t full, empty;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        deep_gemm::ptx::mbarrier_init(&full, 1);
        deep_gemm::ptx::mbarrier_init(&empty, 1);
        deep_gemm::ptx::fence_barrier_init();
    }
    __syncthreads();
    float sum = 0.0f;
    for (int round = 0; round < kRounds; ++round) {
        const uint32_t phase = round & 1;
        if (warp == 0) {
            if (round > 0)
                deep_gemm::ptx::mbarrier_wait(&empty, phase ^ 1);
            for (int i = lane; i < kSlotFloats; i += 32)
                slot[i] = static_cast<float>(round * kSlotFloats + i);
            __syncwarp();
            if (lane == 0)
                deep_gemm::ptx::mbarrier_arrive(&full);
        } else {
            deep_gemm::ptx::mbarrier_wait(&full, phase);
            for (int i = lane; i < kSlotFloats; i += 32)
                sum += slot[i];
            __syncwarp();
            if (lane == 0)
                deep_gemm::ptx::mbarrier_arrive(&empty);
        }
    }
    if (warp == 1)
        out[lane] = sum;
}

int main() {
    float* out = nullptr;
    cudaMalloc(&out, 32 * sizeof(float));
    probe<<<1, 64>>>(out);
    float host[32];
    cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
    // lane l reads i = l and l + 32 of every round: sum over rounds of (r * 64 + l) + (r * 64 + l + 32)
    int wrong = 0;
    for (int l = 0; l < 32; ++l) {
        double expected = 0;
        for (int r = 0; r < kRounds; ++r)
            expected += (r * kSlotFloats + l) + (r * kSlotFloats + l + 32);
        wrong += host[l] != static_cast<float>(expected);
    }
    std::printf("racecheck mbarrier probe: %s (%s)\n", wrong == 0 ? "sums correct" : "SUMS WRONG",
                cudaGetErrorString(cudaGetLastError()));
    return wrong == 0 ? 0 : 1;
}
