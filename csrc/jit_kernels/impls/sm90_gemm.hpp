// Host side of deep_gemm/include/deep_gemm/impls/sm90_gemm.cuh: plan a shape (config, kernel from
// sm90_gemm_source.hpp, TMA descriptors from sm90_gemm_tma_maps.hpp), launch. Everything that depends only on the shape signature
// (config, loaded kernel, descriptor templates) is memoized, so a repeated call renders, hashes and
// encodes nothing: it patches the base addresses that moved since this thread's last call of the
// same plan (cuTensorMapReplaceAddress), and launches.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "../../jit/device_runtime.hpp"
#include "../../jit/kernel_runtime.hpp"
#include "../../jit/tma.hpp"
#include "../../utils/env.hpp"
#include "../heuristics/sm90_gemm.hpp"
#include "../heuristics/sm90_gemm_plan.hpp"
#include "sm90_gemm_source.hpp"
#include "sm90_gemm_tma_maps.hpp"

namespace dg::kernels {

// Arguments of one call, already validated by the API layer. A and B are given as logical [M, K] and
// [N, K] (or [G, N, K]) views: K-major (stride 1 along K) or, for BF16, MN-major (stride 1 along M / N:
// the transposed view of a [K, M] / [K, N] tensor).
struct GemmArgs {
    const at::Tensor& a;    // [M, K] e4m3 K-major, or BF16
    const at::Tensor& b;    // [N, K] (m-grouped: [G, N, K], groups stacked densely) e4m3 K-major, or BF16
    const at::Tensor& d;    // [M, N] BF16 or FP32, row stride `d.stride(0)`
    const at::Tensor* c;    // of D's type and shape, accumulated into D, may be `d`; or null
    const at::Tensor* sfa;  // FP8: [M, ceil(K/128)] FP32, MN-major, TMA-aligned; BF16: null
    const at::Tensor* sfb;  // FP8 recipe (1, 128, 128): [ceil(N/128), ceil(K/128)] FP32, contiguous;
                            // recipe (1, 1, 128): [N, ceil(K/128)] FP32, MN-major, TMA-aligned (m-grouped:
                            // [G, N, ceil(K/128)], each group's K-block rows after the previous group's); BF16: null
    GemmOperands operands;  // (has_c: set from `c`)
    bool compile_m, compile_n, compile_k;
    // M-grouped contiguous (then B is [G, N, K] and sfb [G, ceil(N/128), ceil(K/128)]; FP32 D without C): the layout tensor
    // (int32 [M] group ids, or [G] cumulative ends) and the segment alignment
    // Masked (A [G * max_m, K], D [G * max_m, N]): the layout tensor is masked_m [G]; config_m is the row
    // count the heuristic plans for (G x expected_m), 0 for the real one. Batched (operands.batched): A [rows, G, K]
    // and D [rows, G, N] as they are (each group's rows `rows`, the tensors' strides), every masked_m = rows.
    // K-batched (operands.k_batched, a normal GEMM): A [S, M, K] and B [S, N, K], D = sum_s A[s] @ B[s]^T; num_groups
    // is S.
    GemmType gemm_type = GemmType::kNormal;
    const at::Tensor* grouped_layout = nullptr;
    uint32_t num_groups = 1;
    uint32_t grouped_alignment = 128;
    uint32_t max_m = 0;
    uint32_t config_m = 0;
    // Contiguous: GroupedLayout::zero_padding (the GEMM zeroes D's padding rows itself; 0: it leaves them)
    uint32_t zero_padding = 0;
};

// K-grouped GEMM (MoE weight gradients), validated by the API layer: per group g, D[g] = C[g] + A_g @ B_g^T over
// the group's K_g, starting at k_starts[g].
//   FP8 (recipe (1, 1, 128)): A_g [M, K_g] at element M * k_starts[g] of the flat `a`, B_g [N, K_g] likewise
//     (K-major); scales [sum_g ceil(K_g / 128), M or N], each group's rows following the previous group's.
//   BF16: `a` [sum K, M] and `b` [sum K, N] MN-major (row stride a.stride(0) / b.stride(0)), A_g^T the rows
//     [k_starts[g], k_starts[g] + K_g); no scales.
struct KGroupedGemmArgs {
    const at::Tensor& a;
    const at::Tensor& b;
    const at::Tensor& d;    // FP32 [G, M, N], contiguous
    const at::Tensor* c;    // FP32 [G, M, N], contiguous, may be `d`; or null
    const at::Tensor* sfa;  // FP8: FP32 [sum of K blocks, M], row stride sfa.stride(0) (a multiple of 4); BF16: null
    const at::Tensor* sfb;  // FP8: FP32 [sum of K blocks, N], row stride sfb.stride(0) (a multiple of 4); BF16: null
    uint32_t m, n;
    const std::vector<int64_t>& ks;        // K_g
    const std::vector<int64_t>& k_starts;  // where group g's K starts in the flat buffers
    bool compile_m, compile_n;
};

// The buffer of a k-grouped GEMM's kernel parameter deep_gemm::KGroupedParams<capacity>, for any capacity up to
// kMaxKGroups. Passed by address like any kernel argument; the driver copies as many bytes as the kernel's
// parameter has.
struct alignas(64) KGroupedParamBuffer {
    std::array<uint8_t, sizeof(deep_gemm::KGroupedParams<kMaxKGroups>)> bytes;
    static_assert(sizeof(jit::CUtensorMap) == sizeof(deep_gemm::TmaDescriptor));

    void set(uint32_t capacity, uint32_t group, const jit::CUtensorMap& a, const jit::CUtensorMap& b, uint32_t k_blocks,
             uint32_t sf_row) {
        using Offsets = deep_gemm::KGroupedParamsOffsets;
        std::memcpy(bytes.data() + Offsets::a(capacity, group), &a, sizeof(a));
        std::memcpy(bytes.data() + Offsets::b(capacity, group), &b, sizeof(b));
        std::memcpy(bytes.data() + Offsets::k_blocks(capacity, group), &k_blocks, 4);
        std::memcpy(bytes.data() + Offsets::sf_row(capacity, group), &sf_row, 4);
    }
};

class Sm90GemmRunner : private Sm90GemmMaps {
public:
    static void run(const GemmArgs& args) {
        const int device = args.a.device().index();
        const bool batched = args.operands.batched, k_batched = args.operands.k_batched;
        // (batched: the scheduler's rows, max_m per group; the tensors hold `rows` per group)
        const uint32_t m = batched ? args.num_groups * args.max_m : args.a.size(-2);
        const uint32_t k = args.a.size(-1), n = args.b.size(args.b.dim() - 2);
        GemmOperands operands = args.operands;
        operands.has_c = args.c != nullptr;
        const bool fp8 = operands.is_fp8(), sfb_by_tma = operands.sfb_by_tma();
        const int64_t ldd_bytes = args.d.stride(0) * args.d.element_size();
        const int64_t ldc = args.c != nullptr ? args.c->stride(0) : 0;
        const bool c_by_tma = args.c != nullptr && c_loaded_by_tma(args.c->data_ptr(), ldc);
        const bool enable_pdl = jit::DeviceRuntime::instance().pdl();
        const bool use_tma_store = dense_tma_store_fits(operands, n, args.d.element_size(), ldd_bytes,
                                                        reinterpret_cast<uintptr_t>(args.d.data_ptr()));
        const int num_sms = jit::DeviceRuntime::instance().num_sms(device);

        // With one K block the stride of an MN-major scale tensor's K dimension is meaningless: use the
        // aligned row length
        const int64_t sfa_stride = !fp8 ? 0 : args.sfa->size(1) > 1 ? args.sfa->stride(1) : (m + 3) / 4 * 4;
        // (FP8 x FP4 m-grouped: [G, N, ceil(K/128)] MN-major, the K-block stride the last dimension's)
        const int64_t sfb_stride = !sfb_by_tma ? 0 : args.sfb->size(-1) > 1 ? args.sfb->stride(-1) : (n + 3) / 4 * 4;
        // Row strides: between K rows of an MN-major operand, between MN rows of a K-major one
        const uint32_t num_groups = args.b.dim() == 3 ? static_cast<uint32_t>(args.b.size(0)) : 1;
        const int64_t lda = operands.mn_major_a ? row_stride(args.a, 1, k, m)
                            : batched           ? row_stride(args.a, 0, args.a.size(0), k)
                                                : row_stride(args.a, args.a.dim() - 2, m, k);
        // (FP8 x FP4: B's rows hold K / 2 bytes)
        // (K-batched: B [S, N, K], N rows an entry)
        const int64_t ldb = operands.mn_major_b ? row_stride(args.b, args.b.dim() - 1, int64_t(k) * num_groups, n)
                                                : row_stride(args.b, args.b.dim() - 2,
                                                             int64_t(n) * (k_batched ? 1 : num_groups),
                                                             operands.fp4_b() ? k / 2 : k);
        const Signature sig{device, m, n, k, lda, ldb, args.d.stride(0), ldc, sfa_stride, sfb_stride,
                            num_sms, use_tma_store, c_by_tma, operands, args.compile_m, args.compile_n,
                            // (K-batched: the kernel's shape_k is one entry's K, the planned K all entries': not
                            // compiled in)
                            args.compile_k && !k_batched, args.gemm_type,
                            args.num_groups, args.grouped_alignment, args.max_m, args.config_m,
                            jit::DeviceRuntime::instance().gemm_settings_key(),
                            batched ? batched_strides(args, lda) : k_batched ? k_batched_strides(args, lda, ldb)
                                                                             : BatchedStrides{}};
        Plan& plan = get_plan(sig, &args);

        // The descriptors this thread last launched this plan with: only moved tensors are patched
        thread_local LastDescriptors last;
        if (last.plan != &plan) {
            last.plan = &plan;
            last.maps = plan.tma;
            last.bases = plan.tma_bases;
        }
        const std::array<const void*, kNumTma> bases = {
            args.a.data_ptr(), args.b.data_ptr(), fp8 ? args.sfa->data_ptr() : nullptr,
            sfb_by_tma ? args.sfb->data_ptr() : nullptr, plan.config.use_tma_store ? args.d.data_ptr() : nullptr,
            plan.tma_bases[5] != nullptr ? args.c->data_ptr() : nullptr};
        for (size_t i = 0; i < bases.size(); ++i) {
            if (bases[i] != last.bases[i]) {
                jit::replace_tma_address(last.maps[i], bases[i]);
                last.bases[i] = bases[i];
            }
        }
        auto& [tma_a, tma_b, tma_sfa, tma_sfb, tma_d, tma_c] = last.maps;

        jit::LaunchConfig launch = plan.launch;
        launch.stream = jit::current_stream(device);
        launch.enable_pdl = enable_pdl;
        uint32_t shape_m = m, shape_n = n, shape_k = k;
        const float* sfb = operands.block_sfb() ? args.sfb->data_ptr<float>() : nullptr;
        void* d = args.d.data_ptr();
        uint32_t ldd = static_cast<uint32_t>(args.d.stride(0));
        const void* c = args.c != nullptr ? args.c->data_ptr() : nullptr;
        uint32_t ldc_param = static_cast<uint32_t>(ldc);
        deep_gemm::GroupedLayout grouped_layout{
            args.grouped_layout != nullptr ? args.grouped_layout->data_ptr<int32_t>() : nullptr, args.num_groups,
            args.grouped_alignment, args.max_m, args.zero_padding};
        // Stream-K: a workspace from PyTorch's allocator on this stream (so that concurrent streams and CUDA graphs
        // each get their own), its flags cleared before the kernel
        at::Tensor workspace;
        deep_gemm::StreamKParams stream_k{nullptr, nullptr, plan.stream_k_tiles};
        if (plan.stream_k_tiles > 0) {
            const uint64_t flag_bytes = (uint64_t(plan.stream_k_tiles) * 4 + 255) / 256 * 256;
            const uint64_t slot_bytes = uint64_t(plan.config.block_m) * plan.config.block_n * 4;
            workspace = at::empty({static_cast<int64_t>(flag_bytes + launch.grid[0] * slot_bytes)},
                                  args.d.options().dtype(at::kByte));
            auto* base = static_cast<uint8_t*>(workspace.data_ptr());
            stream_k.flags = reinterpret_cast<uint32_t*>(base);
            stream_k.partials = reinterpret_cast<float*>(base + flag_bytes);
            DG_CUDA_DRIVER_CHECK(driver::api().cuMemsetD32Async(reinterpret_cast<uintptr_t>(base), 0,
                                                                plan.stream_k_tiles, launch.stream));
        }
        // (split-K included: the splits of a tile reduce inside their cluster, in this one kernel)
        plan.kernel->launch(device, launch, shape_m, shape_n, shape_k, sfb, d, ldd, c, ldc_param, grouped_layout,
                            stream_k, tma_a, tma_b, tma_sfa, tma_sfb, tma_d, tma_c, kNoKGroups);
    }

    // K-grouped: the plan (config, kernel, grid) is keyed without K, which changes from call to call; the
    // per-group maps of A and B and the scale maps are encoded for each call.
    static void run_k_grouped(const KGroupedGemmArgs& args, const GemmOperands& given) {
        const int device = args.a.device().index();
        const uint32_t m = args.m, n = args.n, num_groups = static_cast<uint32_t>(args.ks.size());
        const int num_sms = jit::DeviceRuntime::instance().num_sms(device);
        GemmOperands operands = given;
        operands.has_c = args.c != nullptr;
        const bool fp8 = operands.is_fp8();
        const int64_t sfa_stride = fp8 ? args.sfa->stride(0) : 0, sfb_stride = fp8 ? args.sfb->stride(0) : 0;
        const bool use_tma_store = k_grouped_tma_store_fits(n, reinterpret_cast<uintptr_t>(args.d.data_ptr()));
        const Signature sig{device, m, n, 0, 0, 0, static_cast<int64_t>(n), args.c != nullptr ? n : 0, sfa_stride, sfb_stride, num_sms,
                            use_tma_store, args.c != nullptr && c_loaded_by_tma(args.c->data_ptr(), n), operands,
                            args.compile_m, args.compile_n, false, GemmType::kKGroupedContiguous,
                            num_groups, 0, 0, num_groups * m, jit::DeviceRuntime::instance().gemm_settings_key()};
        const Plan& plan = get_plan(sig, nullptr);
        const auto& c = plan.config;

        thread_local KGroupedParamBuffer params;
        uint32_t sf_rows = 0;
        const auto* a = static_cast<const uint8_t*>(args.a.data_ptr());
        const auto* b = static_cast<const uint8_t*>(args.b.data_ptr());
        const uint32_t block_k = operands.block_k();
        for (uint32_t g = 0; g < num_groups; ++g) {
            const uint64_t k = args.ks[g], start = args.k_starts[g];
            const uint32_t k_blocks = static_cast<uint32_t>((k + block_k - 1) / block_k);
            jit::CUtensorMap map_a{}, map_b{};  // (an empty group's maps are never used)
            if (k > 0 && fp8) {
                map_a = k_major_map(a + start * m, operands, k, m, k, c.block_m);
                map_b = k_major_map(b + start * n, operands, k, n, k, c.block_n);
            } else if (k > 0) {
                // BF16 tn: the group's rows [start, start + K_g) of the MN-major [sum K, M] / [sum K, N]
                const uint64_t lda = row_stride(args.a, 0, args.a.size(0), m), ldb = row_stride(args.b, 0, args.b.size(0), n);
                map_a = mn_major_map(a + start * lda * 2, m, k, lda, 1);
                map_b = mn_major_map(b + start * ldb * 2, n, k, ldb, 1);
            }
            params.set(c.max_k_groups, g, map_a, map_b, k_blocks, sf_rows);
            sf_rows += fp8 ? k_blocks : 0;
        }
        jit::CUtensorMap tma_sfa{}, tma_sfb{}, tma_d{}, tma_c{}, unused{};
        if (c.use_tma_store)
            tma_d = fp32_d_map(args.d.data_ptr(), m, n, n, num_groups, c);
        if (c.use_tma_store && args.c != nullptr && c_loaded_by_tma(args.c->data_ptr(), n))
            tma_c = fp32_d_map(args.c->data_ptr(), m, n, n, num_groups, c);
        if (sf_rows > 0) {
            tma_sfa = scale_map(args.sfa->data_ptr(), m, sf_rows, sfa_stride, c.block_m);
            tma_sfb = scale_map(args.sfb->data_ptr(), n, sf_rows, sfb_stride, c.block_n);
        }

        jit::LaunchConfig launch = plan.launch;
        launch.stream = jit::current_stream(device);
        launch.enable_pdl = jit::DeviceRuntime::instance().pdl();
        uint32_t shape_m = m, shape_n = n, shape_k = 0, ldd = n, ldc = n;
        const float* sfb = nullptr;
        void* d = args.d.data_ptr();
        const void* c_ptr = args.c != nullptr ? args.c->data_ptr() : nullptr;
        deep_gemm::GroupedLayout grouped_layout{nullptr, num_groups, 0, 0, 0, nullptr};
        deep_gemm::StreamKParams no_stream_k{nullptr, nullptr, 0};
        plan.kernel->launch(device, launch, shape_m, shape_n, shape_k, sfb, d, ldd, c_ptr, ldc, grouped_layout,
                            no_stream_k, unused, unused, tma_sfa, tma_sfb, tma_d, tma_c, params);
    }

private:
    static constexpr size_t kNumTma = 6;  // A, B, sfa, sfb (per-row recipe), D (TMA store), C (FP32 D by TMA)
    static inline deep_gemm::KGroupedParams<0> kNoKGroups{};  // (not k-grouped)
    // The 3-D layouts (elements): a batched masked GEMM (GemmOperands::batched) has each group's rows, A's group
    // stride and D's; a K-batched one (GemmOperands::k_batched) A's and B's batch-entry strides (rows unused); zeros
    // otherwise.
    struct BatchedStrides {
        uint32_t rows = 0;
        int64_t a_stride = 0, other_stride = 0;
        bool operator==(const BatchedStrides&) const = default;
    };
    // (a single group's stride is meaningless, as a single row's: the group's rows then, 16-byte aligned already)
    static BatchedStrides batched_strides(const GemmArgs& args, int64_t lda) {
        const int64_t rows = args.a.size(0), groups = args.a.size(1);
        return {static_cast<uint32_t>(rows), groups > 1 ? args.a.stride(1) : lda * rows,
                groups > 1 ? args.d.stride(1) : args.d.stride(0) * rows};
    }
    static BatchedStrides k_batched_strides(const GemmArgs& args, int64_t lda, int64_t ldb) {
        const int64_t entries = args.a.size(0);
        return {0, entries > 1 ? args.a.stride(0) : lda * args.a.size(1),
                entries > 1 ? args.b.stride(0) : ldb * args.b.size(1)};
    }
    struct Signature {
        int device;
        uint32_t m, n, k;
        int64_t lda, ldb, ldd, ldc, sfa_stride, sfb_stride;
        int num_sms;
        bool use_tma_store;
        bool c_by_tma;  // a C whose rows TMA can address (see c_loaded_by_tma)
        GemmOperands operands;
        bool compile_m, compile_n, compile_k;
        GemmType gemm_type;
        uint32_t num_groups, grouped_alignment, max_m, config_m;
        uint32_t settings = 0;  // DeviceRuntime::gemm_settings_key (block size multiples, deterministic)
        BatchedStrides batched;
        bool operator==(const Signature&) const = default;
    };
    struct SignatureHash {
        size_t operator()(const Signature& s) const {
            size_t h = 1469598103934665603ull;
            const auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
            mix(s.device), mix(s.m), mix(s.n), mix(s.k), mix(s.lda), mix(s.ldb), mix(s.ldd), mix(s.ldc), mix(s.sfa_stride);
            mix(s.sfb_stride), mix(s.num_sms), mix(static_cast<uint32_t>(s.gemm_type)), mix(s.num_groups);
            mix(s.grouped_alignment), mix(s.max_m), mix(s.config_m), mix(s.settings);
            mix(s.use_tma_store | (s.compile_m << 1) | (s.compile_n << 2) | (s.compile_k << 3) | (s.c_by_tma << 4));
            mix(static_cast<uint32_t>(s.operands.kind) | (s.operands.mn_major_a << 4) | (s.operands.mn_major_b << 5) |
                (s.operands.fp32_out << 6) | (s.operands.has_c << 7) | (s.operands.batched << 8) |
                (s.operands.k_batched << 9));
            mix(s.operands.head_left | (uint64_t(s.operands.head_mid) << 20) | (uint64_t(s.operands.head_right) << 40));
            mix(s.batched.rows), mix(s.batched.a_stride), mix(s.batched.other_stride);
            return h;
        }
    };
    // Everything that depends only on the signature; never modified after creation (shared by threads).
    struct Plan {
        GemmConfig config;
        const jit::Kernel* kernel;
        jit::LaunchConfig launch;                   // without the stream
        uint32_t stream_k_tiles = 0;                // stream-K: the last tiles, shared by all CTAs along K
        std::array<jit::CUtensorMap, kNumTma> tma{};   // A, B, sfa, sfb, D, C (unused ones zero)
        std::array<const void*, kNumTma> tma_bases{};  // the addresses they were encoded with
    };
    struct LastDescriptors {
        const Plan* plan = nullptr;
        std::array<jit::CUtensorMap, kNumTma> maps;
        std::array<const void*, kNumTma> bases;
    };

    // The descriptor templates of a plan (not k-grouped), encoded with the first call's addresses.
    static void encode_maps(Plan& plan, const Signature& sig, const GemmArgs& args) {
        const auto& c = plan.config;
        const auto& operands = c.operands;
        const uint32_t sf_k = (sig.k + 127) / 128;
        // The multicast operand is loaded in halves, one by each CTA of the pair
        const bool halve_a = c.num_multicast > 1 && c.is_multicast_on_a;
        const bool halve_b = c.num_multicast > 1 && !c.is_multicast_on_a;
        plan.tma[0] = operands.batched
                          ? batched_map(args.a.data_ptr(), operands.element_bytes(), sig.k, sig.batched.rows,
                                        sig.num_groups, sig.lda, sig.batched.a_stride, operands.block_k(),
                                        small_m_box_rows(c, sig.m, 8), driver::CU_TENSOR_MAP_SWIZZLE_128B)
                      : operands.k_batched
                          ? batched_map(args.a.data_ptr(), 2, sig.k, sig.m, sig.num_groups, sig.lda,
                                        sig.batched.a_stride, operands.block_k(), small_m_box_rows(c, sig.m, 8),
                                        driver::CU_TENSOR_MAP_SWIZZLE_128B)
                          : operand_map(args.a.data_ptr(), operands, operands.mn_major_a, sig.k, sig.m, 1, sig.lda,
                                        halve_a ? c.block_m / 2 : small_m_box_rows(c, sig.m, 8));
        // (m-grouped: B's groups stacked densely, [G * N, K] or [G][K][N]; the API checked that they are)
        plan.tma[1] = operands.k_batched
                          ? batched_map(args.b.data_ptr(), 2, sig.k, sig.n, sig.num_groups, sig.ldb,
                                        sig.batched.other_stride, operands.block_k(), c.block_n,
                                        driver::CU_TENSOR_MAP_SWIZZLE_128B)
                      : operands.fp4_b()
                          ? packed_fp4_map(args.b.data_ptr(), sig.k, uint64_t(sig.n) * sig.num_groups, sig.ldb, c.block_n)
                          : operand_map(args.b.data_ptr(), operands, operands.mn_major_b, sig.k, sig.n, sig.num_groups,
                                        sig.ldb, halve_b ? c.block_n / 2 : c.block_n);
        plan.tma_bases = {args.a.data_ptr(), args.b.data_ptr(), nullptr, nullptr, nullptr, nullptr};
        if (operands.is_fp8()) {
            plan.tma[2] = scale_map(args.sfa->data_ptr(), sig.m, sf_k, sig.sfa_stride, small_m_box_rows(c, sig.m, 4));
            plan.tma_bases[2] = args.sfa->data_ptr();
        }
        if (operands.sfb_by_tma()) {
            // (m-grouped, per-row sfb or FP8 x FP4's words: the groups' K-block rows one after another)
            plan.tma[3] = scale_map(args.sfb->data_ptr(), sig.n, sf_k * (is_m_grouped(sig.gemm_type) ? sig.num_groups : 1),
                                    sig.sfb_stride, c.block_n);
            plan.tma_bases[3] = args.sfb->data_ptr();
        }
        if (c.use_tma_store && operands.batched) {
            plan.tma[4] = batched_map(args.d.data_ptr(), 2, sig.n, sig.batched.rows, sig.num_groups, sig.ldd,
                                      sig.batched.other_stride, c.store_chunk_n, c.block_m / c.num_math_warpgroups,
                                      jit::swizzle_for_bytes(c.store_chunk_n * 2));
            plan.tma_bases[4] = args.d.data_ptr();
        } else if (c.use_tma_store) {
            // (skip-head-mid: D has every head's mid columns too)
            const uint64_t d_cols = operands.skip_head_mid()
                                        ? uint64_t(sig.n) / (operands.head_left + operands.head_right) *
                                              (operands.head_left + operands.head_mid + operands.head_right)
                                        : sig.n;
            plan.tma[4] = operands.fp32_out ? fp32_d_map(args.d.data_ptr(), sig.m, sig.n, sig.ldd, 1, c)
                                            : jit::make_tma_2d(args.d.data_ptr(), driver::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                                               d_cols, sig.m, sig.ldd * 2, c.store_chunk_n,
                                                               c.block_m / c.num_math_warpgroups,
                                                               jit::swizzle_for_bytes(c.store_chunk_n * 2));
            plan.tma_bases[4] = args.d.data_ptr();
        }
        // (encoded also when C is D, where the kernel adds by TMA reduce instead and never reads this map)
        if (c.use_tma_store && operands.fp32_out && sig.c_by_tma) {
            plan.tma[5] = fp32_d_map(args.c->data_ptr(), sig.m, sig.n, sig.ldc, 1, c);
            plan.tma_bases[5] = args.c->data_ptr();
        }
    }

    // (`args` null: k-grouped, whose maps are built for each call)
    // Per device: how many CTAs whole clusters of each size occupy (ClusterCapacity), once measured
    static std::optional<ClusterCapacity>& device_cluster_capacity(int device) {
        static std::map<int, std::optional<ClusterCapacity>> capacities;  // (under get_plan's lock)
        return capacities[device];
    }
    static ClusterCapacity measure_cluster_capacity(const jit::Kernel& kernel, int device, uint32_t num_sms,
                                                    uint32_t num_threads, uint32_t smem_bytes) {
        ClusterCapacity capacity;
        capacity.ctas[1] = num_sms;
        for (uint32_t size = 2; size <= kMaxSplits; ++size) {
            jit::LaunchConfig launch;
            launch.grid = {size, 1, 1};
            launch.num_threads = num_threads;
            launch.smem_bytes = smem_bytes;
            launch.cluster_dim = size;
            // (a size the device cannot form counts as none)
            int clusters = 0;
            try {
                clusters = kernel.max_active_clusters(device, launch);
            } catch (const std::exception&) {
                clusters = 0;
            }
            capacity.ctas[size] = static_cast<uint32_t>(std::max(clusters, 0)) * size;
        }
        return capacity;
    }

    static Plan& get_plan(const Signature& sig, const GemmArgs* args) {
        static std::unordered_map<Signature, std::unique_ptr<Plan>, SignatureHash> plans;
        static std::mutex mutex;
        std::lock_guard lock(mutex);
        if (auto it = plans.find(sig); it != plans.end()) [[likely]]
            return *it->second;

        auto plan = std::make_unique<Plan>();
        auto& c = plan->config;
        const bool k_grouped = sig.gemm_type == GemmType::kKGroupedContiguous;
        // (DG_TUNE's section of this GEMM's family: fp8_gemm or bf16_gemm)
        const GemmOverrides forced = with_gemm_settings(gemm_overrides_for(sig.operands), sig.settings);
        // (K-batched: the K loop runs over every entry's K blocks, S x ceil(K / BLOCK_K) of them)
        const uint64_t num_k_blocks = (uint64_t(sig.k) + sig.operands.block_k() - 1) / sig.operands.block_k() *
                                      (sig.operands.k_batched ? sig.num_groups : 1);
        const uint32_t k_total = !sig.operands.k_batched
                                     ? sig.k
                                     : static_cast<uint32_t>(std::min<uint64_t>(num_k_blocks * sig.operands.block_k(),
                                                                                UINT32_MAX));
        const GemmProblem problem{sig.m, sig.n, k_total, static_cast<uint32_t>(sig.num_sms), sig.use_tma_store,
                                  sig.operands, sig.compile_m, sig.compile_n, sig.compile_k, sig.gemm_type,
                                  sig.num_groups, sig.grouped_alignment, sig.config_m};
        const auto choose = [&](const ClusterCapacity* capacity) {
            return plan_gemm_config(problem, capacity, forced);
        };
        const auto stream = jit::current_stream(sig.device);
        const auto& props = jit::DeviceRuntime::instance().properties(sig.device);
        const auto arch = props.arch();
        const auto compile = [&](const GemmConfig& config) {
            DG_CHECK(config.smem_bytes <= static_cast<uint32_t>(props.smem_optin_bytes),
                     "GEMM config needs {} bytes of shared memory, device {} allows {}", config.smem_bytes, sig.device,
                     props.smem_optin_bytes);
            return &jit::get_kernel(render_sm90_gemm(config), arch, sig.device, stream);
        };
        // The clusters' capacity is measured with the first GEMM kernel loaded on the device; the first plan there
        // is chosen again with it (and compiled again if that changes it)
        std::optional<ClusterCapacity>& measured = device_cluster_capacity(sig.device);
        std::optional<ClusterCapacity> capacity;
        if (measured)
            capacity = capacity_for(*measured, sig.num_sms);
        c = choose(capacity ? &*capacity : nullptr);
        plan->kernel = compile(c);
        if (!measured) {
            measured = measure_cluster_capacity(*plan->kernel, sig.device, props.num_sms, c.num_threads(), c.smem_bytes);
            capacity = capacity_for(*measured, sig.num_sms);
            if (get_env_flag("DG_PRINT_CONFIGS")) {
                std::string sizes;
                for (uint32_t size = 2; size <= kMaxSplits; ++size)
                    sizes += fmt::format(" {}:{}", size, measured->ctas[size]);
                fmt::print(stderr, "[deep_gemm] device {}: CTAs that whole clusters of each size fill (size:CTAs){}\n",
                           sig.device, sizes);
            }
            const GemmConfig again = choose(&*capacity);
            if (again.describe() != c.describe()) {
                c = again;
                plan->kernel = compile(c);
            }
        }

        if (args != nullptr)
            encode_maps(*plan, sig, *args);

        // Persistent grid: one CTA per SM at most, no more CTAs (clusters) than tiles (tile pairs)
        const uint64_t m_blocks = (sig.m + c.block_m - 1) / c.block_m, n_blocks = (sig.n + c.block_n - 1) / c.block_n;
        const uint64_t units = gemm_num_units(m_blocks, n_blocks, c.num_multicast, c.is_multicast_on_a) * c.num_splits *
                               (k_grouped ? sig.num_groups : 1);
        plan->launch.num_threads = c.num_threads();
        plan->launch.smem_bytes = c.smem_bytes;
        // Clusters: 2-CTA pairs sharing an operand (multicast), or the splits of one tile (split-K); one of the two
        // is 1. A cluster works on a tile pair or on one tile's splits: units / splits of them.
        // NOTES: not every SM can host a CTA of a cluster (GPCs' SM counts need not divide by the cluster size): the
        // grid holds as many clusters as the measured capacity, which the heuristic planned with, so that none runs
        // in a second, serial wave.
        const uint32_t cluster = c.num_multicast * c.num_splits;
        plan->launch.cluster_dim = cluster;
        const uint64_t slots = capacity->ctas[cluster] / cluster;
        DG_CHECK(slots > 0, "no {}-CTA cluster of the GEMM fits on device {}", cluster, sig.device);
        plan->launch.grid = {static_cast<unsigned>(std::min<uint64_t>(units / c.num_splits, slots) * cluster), 1, 1};
        // Stream-K: every CTA takes a share of the stream-K tiles' K blocks (the heuristic checked that each gets
        // kMinStreamKBlocksPerCta; the scheduler relies on every range holding one)
        if (c.stream_k > 0) {
            DG_CHECK(!k_grouped && cluster == 1, "stream-K runs on normal GEMMs without clusters");
            DG_CHECK(gemm_stream_k_fits(units, slots, c.stream_k, num_k_blocks), "stream-K mode {} does not fit {} "
                     "tiles of {} K blocks on {} CTAs", c.stream_k, units, num_k_blocks, slots);
            plan->launch.grid[0] = static_cast<unsigned>(slots);
            plan->stream_k_tiles = static_cast<uint32_t>(gemm_stream_k_tiles(units, slots, c.stream_k));
        }
        if (get_env_flag("DG_PRINT_CONFIGS"))
            fmt::print(stderr, "[deep_gemm] sm90_gemm m={} n={} k={}: {} grid={} stream_k_tiles={}\n", sig.m, sig.n,
                       sig.k, c.describe(), plan->launch.grid[0], plan->stream_k_tiles);
        return *plans.emplace(sig, std::move(plan)).first->second;
    }
};

}  // namespace dg::kernels
