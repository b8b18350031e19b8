// Does compute-sanitizer's racecheck order shared-memory accesses through mbarriers? (run on a GPU machine)
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -I deep_gemm/include tools/racecheck_mbarrier_probe.cu \
//       -o /tmp/racecheck_probe && compute-sanitizer --tool racecheck /tmp/racecheck_probe
//
// One CTA, two warps, a one-slot ring handed back and forth with mbarriers, the way the kernels hand over data that
// threads (not TMA) write: warp 0 writes the slot with plain stores and arrives on `full` (release); warp 1 waits on
// `full` (acquire), reads the slot, and arrives on `empty`; warp 0 waits on `empty` before writing the next round.
// Every access is ordered by the barriers (PTX memory model), and the sums printed must be the expected ones.
// A second kernel, probe_tma_chain, orders the rewrite of the slot as the paged MQA kernel orders its piece scales
// (run 83's report): the reader (math) arrives on q_empty; the producer waits on it and issues a bulk copy (TMA)
// that completes q_full by its transaction count; the writer (pieces warps) waits on q_full, writes the slot and
// arrives on pieces_full, which the reader waits on. Racecheck names the kernel of each hazard it reports: hazards
// in probe_thread_handover mean it does not model mbarrier ordering at all; hazards only in probe_tma_chain mean it
// does not carry the order through a TMA's complete_tx (an edge the PTX memory model has). Either way the report on
// the kernel is the tool's; no hazard in either kernel makes run 83's report a real missing order.
// A third kernel, probe_lane0_release, is probe_thread_handover with the reader's __syncwarp left out: its lanes read
// the slot and lane 0 alone arrives on `empty`, so lanes 1-31's reads are not ordered before that release (PTX
// memory model: an mbarrier arrive releases the executing thread's accesses; a warp barrier is what orders the other
// lanes' before it). That is a real missing order (write-after-read), which the branch's math warps had before they
// waited on a warp barrier ahead of their lane-0 q_empty arrival; racecheck should flag it, and if it flags only this
// kernel, it models mbarriers and the warp barrier, and run 83's report was this order.
#include <cstdio>

#include <deep_gemm/ptx/mbarrier.cuh>

constexpr int kRounds = 64, kSlotFloats = 64;

// Thread 0 initializes the barriers (one arrival each), then the CTA syncs.
template <typename... Barriers>
__device__ __forceinline__ void init_barriers(Barriers*... barriers) {
    if (threadIdx.x == 0) {
        (deep_gemm::ptx::mbarrier_init(barriers, 1), ...);
        deep_gemm::ptx::fence_barrier_init();
    }
    __syncthreads();
}

// The writer's round, once its wait has passed: slot[i] = value(i), then arrive on `full` (release).
template <typename Value>
__device__ __forceinline__ void write_round(float* slot, uint64_t* full, int lane, const Value& value) {
    for (int i = lane; i < kSlotFloats; i += 32)
        slot[i] = value(i);
    __syncwarp();
    if (lane == 0)
        deep_gemm::ptx::mbarrier_arrive(full);
}

// The reader's round: wait for `full`'s phase, add the slot to `sum`, hand the slot back on `empty` (after a warp
// barrier unless kLane0Only: then lane 0's arrival does not order the other lanes' reads).
template <bool kLane0Only = false>
__device__ __forceinline__ void read_round(const float* slot, uint64_t* full, uint64_t* empty, uint32_t phase,
                                           int lane, float& sum) {
    deep_gemm::ptx::mbarrier_wait(full, phase);
    for (int i = lane; i < kSlotFloats; i += 32)
        sum += slot[i];
    if constexpr (!kLane0Only)
        __syncwarp();
    if (lane == 0)
        deep_gemm::ptx::mbarrier_arrive(empty);
}

template <bool kLane0Only>
__device__ __forceinline__ void thread_handover(float* out) {
    __shared__ float slot[kSlotFloats];
    __shared__ uint64_t full, empty;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    init_barriers(&full, &empty);
    float sum = 0.0f;
    for (int round = 0; round < kRounds; ++round) {
        const uint32_t phase = round & 1;
        if (warp == 0) {
            if (round > 0)
                deep_gemm::ptx::mbarrier_wait(&empty, phase ^ 1);
            write_round(slot, &full, lane, [&](int i) { return static_cast<float>(round * kSlotFloats + i); });
        } else {
            read_round<kLane0Only>(slot, &full, &empty, phase, lane, sum);
        }
    }
    if (warp == 1)
        out[lane] = sum;
}

__global__ void probe_thread_handover(float* out) { thread_handover<false>(out); }
__global__ void probe_lane0_release(float* out) { thread_handover<true>(out); }

// Bulk copy (TMA, no descriptor) of `bytes` from global memory into shared memory, completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(deep_gemm::ptx::smem_addr(dst)), "l"(src), "r"(bytes), "r"(deep_gemm::ptx::smem_addr(bar))
                 : "memory");
}

constexpr int kQFloats = 32;

// Warp 0 the producer, warp 1 the writer (pieces warps), warp 2 the reader (math); one slot, one Q buffer.
__global__ void probe_tma_chain(const float* q_src, float* out) {
    __shared__ alignas(128) float q[kQFloats];
    __shared__ float slot[kSlotFloats];
    __shared__ uint64_t q_full, q_empty, pieces_full;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    init_barriers(&q_full, &q_empty, &pieces_full);
    float sum = 0.0f;
    for (int round = 0; round < kRounds; ++round) {
        const uint32_t phase = round & 1;
        if (warp == 0) {
            if (lane == 0) {
                if (round > 0)
                    deep_gemm::ptx::mbarrier_wait(&q_empty, phase ^ 1);
                deep_gemm::ptx::mbarrier_arrive_expect_tx(&q_full, kQFloats * sizeof(float));
                bulk_load(q, q_src + round * kQFloats, kQFloats * sizeof(float), &q_full);
            }
        } else if (warp == 1) {
            deep_gemm::ptx::mbarrier_wait(&q_full, phase);
            write_round(slot, &pieces_full, lane, [&](int i) { return q[i % kQFloats] + static_cast<float>(i); });
        } else {
            read_round(slot, &pieces_full, &q_empty, phase, lane, sum);
        }
    }
    if (warp == 2)
        out[lane] = sum;
}

// The reader's 32 sums of the kernel just launched, copied back and checked (lane l reads i = l and l + 32 of every
// round; value(r, i) is slot[i] of round r); prints the verdict, returns how many sums are wrong.
static int check_sums(const char* kernel, const float* out, double (*value)(int round, int i)) {
    float host[32];
    cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int l = 0; l < 32; ++l) {
        double expected = 0;
        for (int r = 0; r < kRounds; ++r)
            expected += value(r, l) + value(r, l + 32);
        wrong += host[l] != static_cast<float>(expected);
    }
    std::printf("%s: %s (%s)\n", kernel, wrong == 0 ? "sums correct" : "SUMS WRONG",
                cudaGetErrorString(cudaGetLastError()));
    return wrong;
}

int main() {
    float *out = nullptr, *q_src = nullptr;
    cudaMalloc(&out, 32 * sizeof(float));
    cudaMalloc(&q_src, kRounds * kQFloats * sizeof(float));
    float host_q[kRounds * kQFloats];
    for (int i = 0; i < kRounds * kQFloats; ++i)
        host_q[i] = static_cast<float>(i);
    cudaMemcpy(q_src, host_q, sizeof(host_q), cudaMemcpyHostToDevice);

    const auto handover_value = [](int r, int i) { return double(r * kSlotFloats + i); };
    int wrong = 0;
    probe_thread_handover<<<1, 64>>>(out);
    wrong += check_sums("probe_thread_handover", out, handover_value);
    probe_lane0_release<<<1, 64>>>(out);
    wrong += check_sums("probe_lane0_release", out, handover_value);
    probe_tma_chain<<<1, 96>>>(q_src, out);
    // slot[i] of round r = q_src[r * 32 + i % 32] + i
    wrong += check_sums("probe_tma_chain", out, [](int r, int i) { return double(r * kQFloats + i % kQFloats + i); });
    return wrong == 0 ? 0 : 1;
}
