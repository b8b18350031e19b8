// HyperConnection pre-norm GEMM (SM90): D = A @ B.T on TF32 tensor cores and sqr_sum[m] = sum_k A[m, k]^2 in FP32,
// both from one pass over A. A BF16 [M, K] K-major (row stride lda elements), B FP32 [kN, K] K-major (row stride
// ldb), kN in {8, 16, 24, 32}, K a multiple of BLOCK_K = 64. BLOCK_M = kBlockM, 128 or 64 (the host picks 64 when
// 128-row blocks would leave SMs idle). Grid (S, ceil(M / BLOCK_M)): CTA (s, y) owns rows [BLOCK_M y, BLOCK_M (y + 1))
// and the K blocks [s * KB / S, (s + 1) * KB / S) of KB = K / 64. Without a cluster it writes the FP32 partials
// D[s] [M, kN] and sqr_sum[s] [M] (contiguous; S = 1 is the whole result); launched with clusters of S CTAs along x
// (S <= 8), the cluster adds its partials through distributed shared memory and writes D [M, kN] and sqr_sum [M]
// once. Deterministic either way: no atomics, every sum in a fixed order (slices, then splits 0..S-1).
// A row's sums do not depend on BLOCK_M (each row's k order is the same in every tiling); they depend on S only.
//
// Math: BF16 is exactly TF32 (its 8-bit mantissa fits TF32's 10 bits), so A goes to mma as its FP32 bits (a shift);
// B is rounded to TF32 by cvt.rna (nearest, ties away from zero) on its way from shared memory to the fragments.
// Each product bf16 x tf32 is exact in FP32; the tensor core accumulates in FP32. So D is the float64 product of A and
// tf32_rna(B) up to FP32 accumulation error. sqr_sum accumulates FP32 fma's of the same A values.
//
// Pipeline per CTA (256 threads, 8 warps, no warp specialization: every thread loads and computes):
//   ring:   kNumStages stages, each A [BLOCK_M rows][64 k] BF16 (16 or 8 KB) + B [kN rows][64 k] FP32 (kN x 256 B), by
//           cp.async.cg (16-byte copies, L2 only; A rows >= M zero-filled by a 0-byte source). A classic cp.async
//           ring: kNumStages - 1 groups in flight, wait_group + __syncthreads per K block, then the slot consumed
//           in the previous block is refilled (one commit group per block, empty ones included).
//   warps:  warp w = (k_slice = w % 4, m_half = w / 4): rows WARP_M m_half .. + WARP_M (WARP_M = BLOCK_M / 2: four or
//           two m16 tiles) x k 16 k_slice .. + 16 of each stage (two k8 mma steps), all kN / 8 n8 tiles. Splitting
//           the stage's K over warps (not M) reads each B element from shared memory by two warps only (one per
//           m_half).
//   k map:  the k of an mma step is a sum, so its 8 logical k may be any 8 physical ones as long as A and B agree:
//           lane (g = lane / 4, t = lane % 4) holds physical k 16 k_slice + 4t .. + 4; step i in {0, 1} maps logical
//           k t to physical 4t + 2i and logical t + 4 to 4t + 2i + 1. So a lane reads A with one 8-byte load per row
//           (rows g and g + 8 of each m16 tile: fragments a0..a3 of m16n8k8 .tf32) and B with one 16-byte load per
//           n8 tile (row 8j + g: b0, b1), instead of scalar loads.
//   smem:   A rows of 128 B, 16-byte chunk c stored at c ^ ((row & 3) << 1): the 8-byte fragment loads of rows
//           g .. g + 3 (one phase of 16 lanes) hit 16 distinct bank pairs. B rows of 256 B, chunk c at
//           c ^ ((n & 1) << 2): the 16-byte loads of rows 8j + {0, 1} (one phase of 8 lanes) hit 8 distinct bank quads.
//   regs:   per thread (BLOCK_M / 32) x (kN / 8) x 4 FP32 accumulators (64 at kN = 32, BLOCK_M = 128) and
//           BLOCK_M / 16 row sums of squares (rows g, g + 8 of its m16 tiles, over its k).
//   epilogue: after the ring drains, its shared memory holds per k_slice warp the [BLOCK_M][kN + 4] FP32 partial D
//           and the [BLOCK_M] row sums (each lane quad's sums reduced by two xor shuffles first); the 256 threads add
//           the four k slices in order. Without a cluster they write D (coalesced rows of kN floats) and sqr_sum,
//           rows < M.
//           In a cluster each CTA stores its sums in shared memory, the cluster syncs, CTA r adds rows
//           [r BLOCK_M / S, (r + 1) BLOCK_M / S) of all S CTAs (ld.shared::cluster, ranks in order) and writes
//           them, and a last cluster sync keeps every CTA's shared memory alive until its peers have read it.
// Limits: kN % 8 == 0 and kN <= 32, K % 64 == 0, A and B rows 16-byte aligned; ceil(M / BLOCK_M) <= 65535.
#pragma once

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/ptx/cluster.cuh>

namespace deep_gemm {

namespace hc_prenorm {

constexpr uint32_t BLOCK_K = 64;
constexpr uint32_t kNumKSlices = 4, kNumMHalves = 2;         // warps along K within a stage, along M
constexpr uint32_t kNumThreads = 32 * kNumKSlices * kNumMHalves;  // 256
constexpr uint32_t SLICE_K = BLOCK_K / kNumKSlices;          // 16: two k8 steps per warp and stage
constexpr uint32_t kMaxClusterSplits = 8;                     // the portable cluster size

// The row-block tiling: BLOCK_M = 128 (four m16 tiles per warp) or 64 (two), the latter for twice the row blocks
template <uint32_t kBlockM>
struct HcPrenormTile {
    static_assert(kBlockM == 64 || kBlockM == 128, "BLOCK_M must be 64 or 128");
    static constexpr uint32_t BLOCK_M = kBlockM;
    static constexpr uint32_t WARP_M = BLOCK_M / kNumMHalves;            // rows per warp
    static constexpr uint32_t kNumMTiles = WARP_M / 16;                  // m16 tiles per warp
    static constexpr uint32_t SMEM_A_PER_STAGE = BLOCK_M * BLOCK_K * 2;  // 16 KB (8 KB) of BF16
};

template <uint32_t kN, uint32_t kBlockM>
struct HcPrenormSmem {
    static constexpr uint32_t BLOCK_M = kBlockM;
    static constexpr uint32_t SMEM_A_PER_STAGE = HcPrenormTile<kBlockM>::SMEM_A_PER_STAGE;
    static constexpr uint32_t SMEM_B_PER_STAGE = kN * BLOCK_K * 4;
    static constexpr uint32_t SMEM_PER_STAGE = SMEM_A_PER_STAGE + SMEM_B_PER_STAGE;
    static constexpr uint32_t D_PITCH = kN + 4;  // floats per row of the epilogue's partial D
    static constexpr uint32_t SMEM_REDUCE_D = kNumKSlices * BLOCK_M * D_PITCH * 4;
    static constexpr uint32_t SMEM_REDUCE_SQ = kNumKSlices * BLOCK_M * 4;
    static constexpr uint32_t SMEM_CLUSTER_D = BLOCK_M * kN * 4;  // the CTA's sums, read by its cluster peers
    static constexpr uint32_t SMEM_CLUSTER_SQ = BLOCK_M * 4;
    static constexpr uint32_t SMEM_REDUCE = SMEM_REDUCE_D + SMEM_REDUCE_SQ + SMEM_CLUSTER_D + SMEM_CLUSTER_SQ;

    static constexpr uint32_t bytes(uint32_t num_stages) {
        return num_stages * SMEM_PER_STAGE > SMEM_REDUCE ? num_stages * SMEM_PER_STAGE : SMEM_REDUCE;
    }
};

// Byte offset of A's 16-byte chunk `chunk` (0..7) of tile row `row` in a stage (swizzled, see the pipeline comment)
__device__ __forceinline__ uint32_t a_chunk_offset(uint32_t row, uint32_t chunk) {
    return row * (BLOCK_K * 2) + ((chunk ^ ((row & 3) << 1)) * 16);
}

// Byte offset of B's 16-byte chunk `chunk` (0..15) of row `n` in a stage's B part
__device__ __forceinline__ uint32_t b_chunk_offset(uint32_t n, uint32_t chunk) {
    return n * (BLOCK_K * 4) + ((chunk ^ ((n & 1) << 2)) * 16);
}

__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(src), "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <uint32_t kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// CTAs in this CTA's cluster (1 when launched without clusters)
__device__ __forceinline__ uint32_t cluster_num_ctas() {
    uint32_t n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}

// A float at a cluster shared-memory address (ptx::map_to_cta: this CTA's or a peer's)
__device__ __forceinline__ float ld_cluster_f32(uint32_t addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

// Four floats at a 16-byte aligned cluster shared-memory address
__device__ __forceinline__ float4 ld_cluster_f32x4(uint32_t addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

__device__ __forceinline__ uint32_t to_tf32_rna(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c (16 x 8 FP32) += a (16 x 8 TF32) x b (8 x 8 TF32); PTX ISA fragments of m16n8k8 .tf32
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Issue the copies of K block `k_block` (A rows m_begin .. + kBlockM, B all kN rows) into the stage at `stage_addr`
template <uint32_t kN, uint32_t kBlockM>
__device__ __forceinline__ void load_stage(uint32_t stage_addr, const uint8_t* a, uint64_t lda_bytes, const float* b,
                                           uint64_t ldb, uint32_t m, uint32_t m_begin, uint32_t k_block) {
    constexpr uint32_t SMEM_A_PER_STAGE = HcPrenormTile<kBlockM>::SMEM_A_PER_STAGE;
    constexpr uint32_t kAChunks = kBlockM * BLOCK_K * 2 / 16, kBChunks = kN * BLOCK_K * 4 / 16;
    static_assert(kAChunks % kNumThreads == 0, "every thread copies the same number of A chunks");
    #pragma unroll
    for (uint32_t i = 0; i < kAChunks / kNumThreads; ++i) {
        const uint32_t idx = threadIdx.x + i * kNumThreads, row = idx / 8, chunk = idx % 8;
        const bool valid = m_begin + row < m;
        // (rows past M copy 0 bytes from row 0, which exists, and are zero-filled)
        const uint8_t* src = a + (valid ? static_cast<uint64_t>(m_begin + row) * lda_bytes : 0) +
                             static_cast<uint64_t>(k_block) * (BLOCK_K * 2) + chunk * 16;
        cp_async_16(stage_addr + a_chunk_offset(row, chunk), src, valid ? 16 : 0);
    }
    #pragma unroll
    for (uint32_t i = 0; i < ceil_div(kBChunks, kNumThreads); ++i) {
        const uint32_t idx = threadIdx.x + i * kNumThreads, n = idx / 16, chunk = idx % 16;
        if (idx < kBChunks) {
            const float* src = b + n * ldb + static_cast<uint64_t>(k_block) * BLOCK_K + chunk * 4;
            cp_async_16(stage_addr + SMEM_A_PER_STAGE + b_chunk_offset(n, chunk), src, 16);
        }
    }
}

// One stage's mma steps of this warp (rows WARP_M m_half .., k 16 k_slice ..) and its rows' sums of squares
template <uint32_t kN, uint32_t kBlockM>
__device__ __forceinline__ void compute_stage(const uint8_t* stage, uint32_t m_half, uint32_t k_slice, uint32_t lane,
                                              float (&acc)[HcPrenormTile<kBlockM>::kNumMTiles][kN / 8][4],
                                              float (&sq)[HcPrenormTile<kBlockM>::kNumMTiles][2]) {
    using Tile = HcPrenormTile<kBlockM>;
    constexpr uint32_t SMEM_A_PER_STAGE = Tile::SMEM_A_PER_STAGE, WARP_M = Tile::WARP_M;
    constexpr uint32_t kNumMTiles = Tile::kNumMTiles;
    const uint32_t g = lane / 4, t = lane % 4;
    const uint32_t chunk = 4 * k_slice + t;  // B: this lane's 16-byte chunk (4 floats, physical k 16 k_slice + 4t ..)

    // B fragments of both k8 steps, rounded to TF32: [j][0..1] step 0 (b0, b1), [j][2..3] step 1
    uint32_t b_frag[kN / 8][4];
    #pragma unroll
    for (uint32_t j = 0; j < kN / 8; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(stage + SMEM_A_PER_STAGE + b_chunk_offset(8 * j + g, chunk));
        b_frag[j][0] = to_tf32_rna(v.x), b_frag[j][1] = to_tf32_rna(v.y);
        b_frag[j][2] = to_tf32_rna(v.z), b_frag[j][3] = to_tf32_rna(v.w);
    }

    #pragma unroll
    for (uint32_t mt = 0; mt < kNumMTiles; ++mt) {
        // A rows g and g + 8 of this m16 tile: 4 BF16 each (physical k 16 k_slice + 4t ..), one 8-byte unit
        const uint32_t row0 = m_half * WARP_M + mt * 16 + g, row1 = row0 + 8;
        const uint32_t unit = 4 * k_slice + t;  // 8-byte unit of the 128-byte row
        const uint2 w0 = *reinterpret_cast<const uint2*>(stage + a_chunk_offset(row0, unit / 2) + (unit % 2) * 8);
        const uint2 w1 = *reinterpret_cast<const uint2*>(stage + a_chunk_offset(row1, unit / 2) + (unit % 2) * 8);
        #pragma unroll
        for (uint32_t step = 0; step < 2; ++step) {
            // A word: BF16 of physical k 4t + 2 step in the low half, 4t + 2 step + 1 in the high half; their FP32
            // (= TF32) bits are the halves moved to the top
            const uint32_t x0 = step == 0 ? w0.x : w0.y, x1 = step == 0 ? w1.x : w1.y;
            const uint32_t a0 = x0 << 16, a2 = x0 & 0xffff0000u;  // row g: logical k t, t + 4
            const uint32_t a1 = x1 << 16, a3 = x1 & 0xffff0000u;  // row g + 8
            const float f0 = __uint_as_float(a0), f2 = __uint_as_float(a2);
            const float f1 = __uint_as_float(a1), f3 = __uint_as_float(a3);
            sq[mt][0] = fmaf(f0, f0, sq[mt][0]), sq[mt][0] = fmaf(f2, f2, sq[mt][0]);
            sq[mt][1] = fmaf(f1, f1, sq[mt][1]), sq[mt][1] = fmaf(f3, f3, sq[mt][1]);
            #pragma unroll
            for (uint32_t j = 0; j < kN / 8; ++j)
                mma_tf32_m16n8k8(acc[mt][j], a0, a1, a2, a3, b_frag[j][2 * step], b_frag[j][2 * step + 1]);
        }
    }
}

}  // namespace hc_prenorm

template <uint32_t kN, uint32_t kBlockM, uint32_t kNumStages>
__global__ void __launch_bounds__(hc_prenorm::kNumThreads, 1)
sm90_tf32_hc_prenorm_gemm_kernel(const uint8_t* __restrict__ a, uint64_t lda, const float* __restrict__ b,
                                 uint64_t ldb, float* __restrict__ d, float* __restrict__ sqr_sum, uint32_t m,
                                 uint32_t num_k_blocks) {
    using namespace hc_prenorm;
    using Smem = HcPrenormSmem<kN, kBlockM>;
    using Tile = HcPrenormTile<kBlockM>;
    constexpr uint32_t BLOCK_M = Tile::BLOCK_M, WARP_M = Tile::WARP_M, kNumMTiles = Tile::kNumMTiles;
    static_assert(kN % 8 == 0 && kN >= 8 && kN <= 32, "N must be a multiple of 8 in [8, 32]");
    static_assert(kNumStages >= 2, "a ring needs two stages");
    extern __shared__ __align__(128) uint8_t smem[];

    const uint32_t warp_idx = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t k_slice = warp_idx % kNumKSlices, m_half = warp_idx / kNumKSlices;
    const uint32_t m_begin = blockIdx.y * BLOCK_M, split = blockIdx.x, num_splits = gridDim.x;
    const uint32_t kb_begin = static_cast<uint32_t>(static_cast<uint64_t>(split) * num_k_blocks / num_splits);
    const uint32_t kb_end = static_cast<uint32_t>(static_cast<uint64_t>(split + 1) * num_k_blocks / num_splits);
    const uint32_t num_local = kb_end - kb_begin;
    const uint64_t lda_bytes = lda * 2;
    const uint32_t smem_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

    float acc[kNumMTiles][kN / 8][4];
    float sq[kNumMTiles][2];
    #pragma unroll
    for (uint32_t mt = 0; mt < kNumMTiles; ++mt) {
        sq[mt][0] = sq[mt][1] = 0.0f;
        #pragma unroll
        for (uint32_t j = 0; j < kN / 8; ++j)
            acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
    }

    // Ring prologue: the first kNumStages - 1 K blocks in flight (one commit group each, empty past the range)
    #pragma unroll
    for (uint32_t i = 0; i + 1 < kNumStages; ++i) {
        if (i < num_local)
            load_stage<kN, kBlockM>(smem_addr + i * Smem::SMEM_PER_STAGE, a, lda_bytes, b, ldb, m, m_begin,
                                    kb_begin + i);
        cp_async_commit();
    }

    // Main loop: wait for block i, refill the slot block i - 1 used, compute block i
    for (uint32_t i = 0; i < num_local; ++i) {
        cp_async_wait<kNumStages - 2>();
        __syncthreads();
        const uint32_t next = i + kNumStages - 1;
        if (next < num_local)
            load_stage<kN, kBlockM>(smem_addr + (next % kNumStages) * Smem::SMEM_PER_STAGE, a, lda_bytes, b, ldb, m,
                                    m_begin, kb_begin + next);
        cp_async_commit();
        compute_stage<kN, kBlockM>(smem + (i % kNumStages) * Smem::SMEM_PER_STAGE, m_half, k_slice, lane, acc, sq);
    }
    cp_async_wait<0>();
    __syncthreads();

    // Epilogue, step 1: each warp's partial D and row sums into shared memory (the ring is free now)
    float* red_d = reinterpret_cast<float*>(smem);                        // [kNumKSlices][BLOCK_M][D_PITCH]
    float* red_sq = reinterpret_cast<float*>(smem + Smem::SMEM_REDUCE_D);  // [kNumKSlices][BLOCK_M]
    const uint32_t g = lane / 4, t = lane % 4;
    #pragma unroll
    for (uint32_t mt = 0; mt < kNumMTiles; ++mt) {
        const uint32_t row0 = m_half * WARP_M + mt * 16 + g;
        float* out0 = red_d + (k_slice * BLOCK_M + row0) * Smem::D_PITCH;
        float* out1 = out0 + 8 * Smem::D_PITCH;
        #pragma unroll
        for (uint32_t j = 0; j < kN / 8; ++j) {
            // C fragment: c0, c1 at (row g, columns 2t, 2t + 1), c2, c3 at row g + 8
            *reinterpret_cast<float2*>(out0 + 8 * j + 2 * t) = make_float2(acc[mt][j][0], acc[mt][j][1]);
            *reinterpret_cast<float2*>(out1 + 8 * j + 2 * t) = make_float2(acc[mt][j][2], acc[mt][j][3]);
        }
        #pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            // The quad's four lanes hold the same row's sums over disjoint k: reduce them
            float s = sq[mt][h];
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if (t == 0)
                red_sq[k_slice * BLOCK_M + row0 + 8 * h] = s;
        }
    }
    __syncthreads();

    // Epilogue, step 2: the k slices added in order
    const auto slice_sum_d = [&](uint32_t idx) {  // idx = row * kN + col
        float sum = 0.0f;
        #pragma unroll
        for (uint32_t s = 0; s < kNumKSlices; ++s)
            sum += red_d[(s * BLOCK_M + idx / kN) * Smem::D_PITCH + idx % kN];
        return sum;
    };
    const auto slice_sum_sq = [&](uint32_t row) {
        float sum = 0.0f;
        #pragma unroll
        for (uint32_t s = 0; s < kNumKSlices; ++s)
            sum += red_sq[s * BLOCK_M + row];
        return sum;
    };
    const uint32_t cluster_size = cluster_num_ctas();
    if (cluster_size == 1) {
        // This split's partial (rows < M; D rows of kN floats, contiguous)
        float* d_out = d + static_cast<uint64_t>(split) * m * kN;
        float* sq_out = sqr_sum + static_cast<uint64_t>(split) * m;
        for (uint32_t idx = threadIdx.x; idx < BLOCK_M * kN; idx += kNumThreads) {
            if (m_begin + idx / kN >= m)
                break;  // (idx grows with the row)
            d_out[static_cast<uint64_t>(m_begin) * kN + idx] = slice_sum_d(idx);
        }
        if (threadIdx.x < BLOCK_M && m_begin + threadIdx.x < m)
            sq_out[m_begin + threadIdx.x] = slice_sum_sq(threadIdx.x);
        return;
    }

    // Epilogue, step 3 (cluster of the S splits of these rows): the CTA's sums into shared memory for its peers
    float* part_d = reinterpret_cast<float*>(smem + Smem::SMEM_REDUCE_D + Smem::SMEM_REDUCE_SQ);  // [BLOCK_M][kN]
    float* part_sq = part_d + BLOCK_M * kN;                                                         // [BLOCK_M]
    for (uint32_t idx = threadIdx.x; idx < BLOCK_M * kN; idx += kNumThreads)
        part_d[idx] = slice_sum_d(idx);
    if (threadIdx.x < BLOCK_M)
        part_sq[threadIdx.x] = slice_sum_sq(threadIdx.x);
    ptx::cluster_sync();

    // Epilogue, step 4: CTA r adds its share of the rows over the cluster's CTAs 0..S-1 (a fixed order) and writes it
    const uint32_t rank = ptx::cluster_cta_rank();
    const uint32_t row_begin = rank * BLOCK_M / cluster_size, row_end = (rank + 1) * BLOCK_M / cluster_size;
    const uint32_t part_d_addr = static_cast<uint32_t>(__cvta_generic_to_shared(part_d));
    const uint32_t part_sq_addr = static_cast<uint32_t>(__cvta_generic_to_shared(part_sq));
    // NOTES: four columns per thread (kN % 8 == 0: one row) and every peer's load issued before the adds, so that a
    // thread waits for the distributed shared memory's latency once per group of four, not once per peer and column
    for (uint32_t idx = row_begin * kN + threadIdx.x * 4; idx < row_end * kN; idx += kNumThreads * 4) {
        if (m_begin + idx / kN >= m)
            break;
        float4 parts[kMaxClusterSplits];
        #pragma unroll
        for (uint32_t q = 0; q < kMaxClusterSplits; ++q) {
            if (q < cluster_size)
                parts[q] = ld_cluster_f32x4(ptx::map_to_cta(part_d_addr + idx * 4, q));
        }
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        #pragma unroll
        for (uint32_t q = 0; q < kMaxClusterSplits; ++q) {
            if (q < cluster_size)
                sum.x += parts[q].x, sum.y += parts[q].y, sum.z += parts[q].z, sum.w += parts[q].w;
        }
        // (four scalar stores: d need only be 4-byte aligned)
        float* out = d + static_cast<uint64_t>(m_begin) * kN + idx;
        out[0] = sum.x, out[1] = sum.y, out[2] = sum.z, out[3] = sum.w;
    }
    const uint32_t row = row_begin + threadIdx.x;
    if (row < row_end && m_begin + row < m) {
        float parts[kMaxClusterSplits];
        #pragma unroll
        for (uint32_t q = 0; q < kMaxClusterSplits; ++q) {
            if (q < cluster_size)
                parts[q] = ld_cluster_f32(ptx::map_to_cta(part_sq_addr + row * 4, q));
        }
        float sum = 0.0f;
        #pragma unroll
        for (uint32_t q = 0; q < kMaxClusterSplits; ++q) {
            if (q < cluster_size)
                sum += parts[q];
        }
        sqr_sum[m_begin + row] = sum;
    }
    // (peers may still be reading this CTA's sums)
    ptx::cluster_sync();
}

}  // namespace deep_gemm
