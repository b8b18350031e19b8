// The deep_gemm._C module: Python bindings of csrc/apis, nothing else.
#include <torch/python.h>

#include <initializer_list>
#include <string>
#include <tuple>

#include "apis/attention.hpp"
#include "apis/bf16_gemm.hpp"
#include "apis/cublaslt_gemm.hpp"
#include "apis/einsum.hpp"
#include "apis/fp8_gemm_nt_binding.hpp"
#include "apis/gemm.hpp"
#include "apis/grouped_gemm.hpp"
#include "apis/hc_prenorm.hpp"
#include "apis/jit.hpp"
#include "apis/k_grouped_gemm.hpp"
#include "apis/layout.hpp"
#include "apis/mega_moe.hpp"
#include "apis/precompile.hpp"
#include "apis/quant.hpp"
#include "apis/runtime.hpp"
#include "apis/skip_head_mid.hpp"
#include "op_kernels.hpp"
#include "utils/tune.hpp"

namespace py = pybind11;
using namespace py::literals;

// The C++ kernels of the deep_gemm:: ops (csrc/op_kernels.hpp), the same function for both keys: CPU tensors reach the
// apis function too (its checks name the device expected; get_paged_mqa_logits_metadata has a CPU path).
TORCH_LIBRARY_IMPL(deep_gemm, CPU, m) {
    dg::op_kernels::for_each_op_kernel([&](const char* name, auto kernel) { m.impl(name, std::move(kernel)); });
}

TORCH_LIBRARY_IMPL(deep_gemm, CUDA, m) {
    dg::op_kernels::for_each_op_kernel([&](const char* name, auto kernel) { m.impl(name, std::move(kernel)); });
}

// What the two k-grouped entry points' docstrings share (pybind11 copies docstrings when binding).
static const std::string k_grouped_doc =
    "ks_cpu: list of the G groups' K (each a multiple of 16; 0 for an empty group: D[g] = C[g], or zeros).\n"
    "grouped_layout: int32 [G] on the device (the same K values, or with use_psum_layout=True the groups'\n"
    "    cumulative ends); checked for shape and device only: ks_cpu is what the kernel follows.\n"
    "use_psum_layout: group g's K starts at align(end of group g-1, get_mk_alignment_for_contiguous_layout())\n"
    "    instead of right after it (the scale rows stay back to back either way).\n"
    "d: FP32 [G, M, N] contiguous. c: None or FP32 [G, M, N] contiguous, accumulated (may be d: in place).\n"
    "recipe: (1, 1, 128) only (the default; None means the same). compiled_dims: which of m, n are compile-time\n"
    "constants.\n"
    "Raises ValueError on a bad dtype, shape, stride, alignment or device, NotImplementedError off SM90.";

// The k-grouped GEMMs as bound: ks_cpu may be None in the reference's signature (dg::apis::require_ks_cpu).
template <typename A, typename B, typename... Rest>
static auto with_ks_cpu(void (*fn)(const A&, const B&, const at::Tensor&, const std::vector<int64_t>&, Rest...),
                        const char* name) {
    return [fn, name](const A& a, const B& b, const at::Tensor& d, const std::optional<std::vector<int64_t>>& ks_cpu,
                      Rest... rest) { fn(a, b, d, dg::apis::require_ks_cpu(ks_cpu, name), rest...); };
}

// What the dense BF16 GEMMs' docstrings share.
static const std::string bf16_doc =
    "The layout letters fix the shapes a and b are given in; as in the reference, each operand's storage major is\n"
    "read from its strides: stride 1 along K (K-major) or along M / N (MN-major, e.g. an x.T.contiguous().T view),\n"
    "read in place either way (no transposing copy), so bf16_gemm_nt with MN-major views runs as nn / tn / tt.\n"
    "Row strides must be multiples of 16 bytes; any M, N, K >= 0 (K = 0 gives d = c or zeros; M or N = 0 is a\n"
    "no-op).\n"
    "d: BF16 or FP32 [M, N], row-major, any row stride, written in place. c: None, or of d's dtype and shape,\n"
    "    accumulated (D = C + ...; c may be d itself for in place, but may not otherwise overlap it).\n"
    "compiled_dims: which of m, n, k are compile-time constants.\n"
    "Raises ValueError on a bad dtype, shape, stride, alignment, overlap or device; NotImplementedError off SM90.";

// What the m-grouped contiguous BF16 GEMMs' docstrings share.
static const std::string bf16_grouped_doc =
    "\na: BF16 [M, K], K-major: the groups' row segments concatenated, each starting at a multiple of\n"
    "    get_mk_alignment_for_contiguous_layout() (padding rows between them).\n"
    "b: its storage major read from its strides (K-major or N-major, read in place), groups stacked densely.\n"
    "d: BF16 [M, N], row-major. ensure_zero_padding=True (the default): its padding rows are written as zeros\n"
    "    (one small kernel after the GEMM, writing only those rows); False: in the per-row layout those of\n"
    "    alignment-sized segments that start with a group's row (which the reference's SM90 kernel writes), else none.\n"
    "grouped_layout: int32 on the device: [M], each row's group id or -1 for padding (M then a multiple of\n"
    "    the alignment); with use_psum_layout=True, [G] cumulative end rows: group g spans\n"
    "    [align(end[g-1], alignment), end[g]). Ids outside [0, G) are treated as padding; ends past M clamped.\n"
    "compiled_dims: which of m, n, k are compile-time constants. expected_m_for_psum_layout (nt only): accepted\n"
    "for API compatibility (the config follows the total row count).\n"
    "Raises ValueError on a bad dtype, shape, stride, alignment or device (K must be positive).";

// fp8_gemm_nt, the hot path of every FP8 linear layer, through a vectorcall binding (utils/fast_call.hpp): its
// nine arguments are read from the Python objects directly, the tensors borrowed (apis/fp8_gemm_nt_binding.hpp).
static void fp8_gemm_nt_call(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dg::apis::bind_fp8_gemm_nt("fp8_gemm_nt", args, nargs, kwnames, dg::apis::fp8_gemm_nt);
}

static PyMethodDef fp8_gemm_nt_def = {
    "fp8_gemm_nt", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&dg::fast_call::entry<fp8_gemm_nt_call>)),
    METH_FASTCALL | METH_KEYWORDS,
    // (the first lines: the signature, as inspect.signature reads it from a built-in's docstring)
    "fp8_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims='nk', "
    "disable_ue8m0_cast=False)\n--\n\n"
    "D = A @ B.T with fine-grained FP8 scaling, written into d in place (SM90).\n\n"
    "a = (A, sfa): A float8_e4m3fn [M, K], K-major (row stride a multiple of 16 bytes); sfa FP32\n"
    "    [M, ceil(K / 128)], one scale per token per 128 of K, any layout (pass it MN-major and\n"
    "    TMA-aligned, from get_mn_major_tma_aligned_tensor, to skip the layout kernel on every call).\n"
    "b = (B, sfb): B float8_e4m3fn [N, K], K-major; sfb FP32 [ceil(N / 128), ceil(K / 128)], one scale\n"
    "    per 128x128 block (recipe (1, 128, 128)), or [N, ceil(K / 128)], one per row per 128 of K\n"
    "    (recipe (1, 1, 128); any layout, like sfa).\n"
    "    Or FP4 (fp8_fp4_gemm_nt): B int8/uint8 [N, K / 2], two e2m1 values a byte along K (low nibble first);\n"
    "    sfb FP32 [N, ceil(K / 32)] powers of two (UE8M0), or packed UE8M0 int32 [N, ceil(K / 128)]; BF16 d,\n"
    "    no c, K a multiple of 32. A then takes 1x128 scales (FP32, or packed UE8M0 int32 [M, ceil(K / 512)]) or\n"
    "    1x32 ones (FP32 powers of two [M, ceil(K / 32)], or packed int32 [M, ceil(K / 128)]), or A is packed\n"
    "    FP4 [M, K / 2] with 1x32 scales (FP4 x FP4); recipe None (read from sfa's shape), (1, 1, 32), or\n"
    "    recipe_a=(1, 128) or (1, 32) with recipe_b=(1, 32). B is converted to e4m3 in shared memory with its\n"
    "    1x32 scales folded per 128 of K; an A with 1x32 scales is folded so by a pre-pass (docs/design.md).\n"
    "d: BF16 [M, N] for recipe (1, 128, 128), c must be None; FP32 [M, N] for recipe (1, 1, 128), with\n"
    "    an optional FP32 c [M, N] accumulated (D = C + A @ B.T; c may be d itself for in place, but may\n"
    "    not otherwise overlap it). Row-major, any row stride.\n"
    "recipe: (1, 128, 128) (the default with BF16 d) or (1, 1, 128) (the default with FP32 d); or\n"
    "    recipe_a=(1, 128) with recipe_b=(128, 128) or (1, 128).\n"
    "compiled_dims: which of m, n, k are compile-time constants (default 'nk': one kernel per weight).\n"
    "disable_ue8m0_cast: accepted for API compatibility; SM90 takes FP32 scales.\n"
    "Any M, N >= 0 (0 is a no-op); K a multiple of 16 (K = 0 gives d = c or zeros). Raises ValueError on\n"
    "a bad dtype, shape, stride, alignment, overlap or device; NotImplementedError off SM90."};

PYBIND11_MODULE(_C, m) {
    m.doc() = "deep_gemm C++ extension: input validation, the CUDA JIT runtime and kernel launches";

    // (one mapping for these bindings and the vectorcall ones: dg::fast_call::set_dg_python_error)
    dg::fast_call::not_implemented_error_type() =
        py::register_exception<dg::NotImplementedError>(m, "NotImplementedError", PyExc_NotImplementedError).ptr();
    {
        // A bad argument: a ValueError, and a RuntimeError too, which is what the reference raises for its failed
        // host checks (engines written for it catch RuntimeError around a call, e.g. to fall back on a shape)
        PyObject* bases = PyTuple_Pack(2, PyExc_ValueError, PyExc_RuntimeError);
        PyObject* type = PyErr_NewExceptionWithDoc(
            "deep_gemm._C.InputError",
            "A bad argument (dtype, shape, stride, alignment, device, layout, value): a ValueError and a "
            "RuntimeError.",
            bases, nullptr);
        Py_XDECREF(bases);
        if (type == nullptr)
            throw py::error_already_set();
        m.add_object("InputError", py::reinterpret_steal<py::object>(type));
        dg::fast_call::input_error_type() = type;  // (the module holds the reference)
    }
    py::register_exception_translator([](std::exception_ptr p) {
        if (p && !dg::fast_call::set_dg_python_error(p))
            std::rethrow_exception(p);
    });

    dg::jit::detail::python_sys_path_at_import() = dg::jit::detail::python_sys_path();
    m.def("_op_kernels_in_cpp", &dg::op_kernels::op_kernels_in_cpp,
          "The deep_gemm ops whose CPU and CUDA kernels the extension registers in C++ (csrc/op_kernels.hpp);\n"
          "deep_gemm.ops registers Python kernels for the others.");

    // Runtime settings
    m.def("set_num_sms", &dg::apis::set_num_sms, "new_num_sms"_a,
          "Limit the number of SMs deep_gemm kernels use (persistent grids) to new_num_sms, at most the current\n"
          "device's SM count; 0 removes the limit (all SMs). Raises ValueError on a negative value or one above the\n"
          "device's count.");
    m.def("get_num_sms", &dg::apis::get_num_sms,
          "SMs deep_gemm kernels use on the current device: the set_num_sms limit, else all of them.");
    m.def("set_tc_util", &dg::apis::set_tc_util, "new_tc_util"_a,
          "Set the tensor-core utilization hint in percent, 0..100 (0 means the default, 100; ValueError otherwise).");
    m.def("get_tc_util", &dg::apis::get_tc_util, "The tensor-core utilization hint in percent (default 100).");
    m.def("set_pdl", &dg::apis::set_pdl, "new_enable_pdl"_a,
          "Enable or disable programmatic dependent launch for the kernels launched from now on.");
    m.def("get_pdl", &dg::apis::get_pdl, "Whether programmatic dependent launch is enabled (default False).");
    m.def("set_mk_alignment_for_contiguous_layout", &dg::apis::set_mk_alignment_for_contiguous_layout, "alignment"_a,
          "Set the row alignment of each group in M/K-grouped contiguous layouts (a multiple of 64, at most 1024).");
    m.def("get_mk_alignment_for_contiguous_layout", &dg::apis::get_mk_alignment_for_contiguous_layout,
          "Row alignment of each group's segment in M/K-grouped contiguous layouts (default 128).");
    m.def("set_ignore_compile_dims", &dg::apis::set_ignore_compile_dims, "new_value"_a,
          "True: every GEMM compiles M, N and K as runtime values, whatever its compiled_dims (fewer kernels, one\n"
          "per config instead of one per shape; compiled_dims is still checked). False (the default): compiled_dims\n"
          "is followed.");
    m.def("get_ignore_compile_dims", &dg::apis::get_ignore_compile_dims,
          "Whether set_ignore_compile_dims(True) is in effect (default False).");
    m.def("set_block_size_multiple_of", &dg::apis::set_block_size_multiple_of, "new_value"_a,
          "Ask for GEMM block sizes that are multiples of new_value: an int (the BLOCK_N multiple, as the reference's\n"
          "SM90 heuristic reads it) or a pair (BLOCK_M multiple, BLOCK_N multiple), each in [0, 256] (0: no\n"
          "constraint). The FP8 and BF16 GEMM heuristics then pick only such tiles (for GEMMs first planned after the\n"
          "call; a shape that no such tile fits raises ValueError naming the multiples). Raises ValueError on a\n"
          "negative or too large value or a pair of another length.");
    m.def("get_block_size_multiple_of", &dg::apis::get_block_size_multiple_of,
          "The (BLOCK_M multiple, BLOCK_N multiple) set by set_block_size_multiple_of (default (0, 0)).");
    m.def("set_deterministic", &dg::apis::set_deterministic, "new_value"_a,
          "True: every kernel adds each output's partial sums in an order that depends on the problem's N and K only,\n"
          "never on M, the SM count or timing, so results are bitwise repeatable and each row's result is the same\n"
          "whatever M is (batch-invariant). The GEMMs then use neither split-K nor stream-K, tf32_hc_prenorm_gemm\n"
          "(without num_splits) splits K by K alone, and the cuBLAS-served calls (cublaslt_gemm_*, einsum with\n"
          "use_cublaslt=True) raise NotImplementedError. False (the default): the fastest configs.");
    m.def("get_deterministic", &dg::apis::get_deterministic,
          "Whether set_deterministic(True) is in effect (default False).");

    // Layouts
    m.def("get_tma_aligned_size", &dg::apis::get_tma_aligned_size, "x"_a, "element_size"_a,
          "Round x up so that x * element_size is a multiple of 16 bytes (TMA stride alignment).\n"
          "element_size must divide 16; raises ValueError otherwise.");
    m.def("get_mn_major_tma_aligned_tensor", &dg::apis::get_mn_major_tma_aligned_tensor, "sf"_a,
          "Return FP32 scales sf ([MN, SF_K] or [G, MN, SF_K], CUDA, any strides) with the same values, stored\n"
          "MN-major with the MN stride padded to 16 bytes: strides (1, align(MN, 4)) or (SF_K * align(MN, 4), 1,\n"
          "align(MN, 4)). Returns sf itself when it already has that layout; otherwise runs a JIT-compiled\n"
          "transpose kernel on the current stream. Raises ValueError on a bad dtype, rank or device.");
    m.def("_pack_ue8m0_k_grouped", &dg::apis::pack_ue8m0_k_grouped, "sf"_a, "row_start"_a, "num_rows"_a,
          "Internal: get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor's packing on a CUDA sf [SF_K, MN], one\n"
          "launch of the pack kernel per group (scale rows [row_start[g], row_start[g] + num_rows[g])).");
    m.def("get_mn_major_tma_aligned_packed_ue8m0_tensor", &dg::apis::get_mn_major_tma_aligned_packed_ue8m0_tensor,
          "sf"_a, "psum_layout"_a = py::none(),
          "Pack FP32 power-of-two scales sf ([MN, SF_K] or [G, MN, SF_K], CUDA) into UE8M0 bytes, four per int32\n"
          "(byte i of word j = biased exponent of sf[..., 4j + i], 0 past SF_K): int32 [.., MN, ceil(SF_K / 4)],\n"
          "MN-major and TMA-aligned. Runs a JIT-compiled kernel. psum_layout: None, or the int32 [G] cumulative end\n"
          "rows of an m-grouped psum layout whose rows sf scales (checked; the packing is per row, so the result is\n"
          "the same). Raises ValueError on bad input.");
    m.def("transform_sf_into_required_layout", &dg::apis::transform_sf_into_required_layout, "sf"_a, "mn"_a, "k"_a,
          "recipe"_a, "num_groups"_a = py::none(), "is_sfa"_a = py::none(), "disable_ue8m0_cast"_a = false,
          "psum_layout"_a = py::none(),
          "Bring scales into the layout the GEMM kernels read. recipe is (gran_mn, gran_k) or (gran_m, gran_n,\n"
          "gran_k) with is_sfa choosing the operand. sf: FP32 [ceil(mn / gran_mn), ceil(k / gran_k)] (with a\n"
          "leading num_groups dimension when given). On SM90 per-row scales (gran_mn = 1) become MN-major\n"
          "TMA-aligned FP32; 128x128 block scales stay K-major and contiguous. Recipe (1, 32), the 1x32 UE8M0 scales of\n"
          "FP4 operands: FP32 powers of two [.., ceil(k / 32)] are packed four to an int32 along K, MN-major and\n"
          "TMA-aligned (what the FP8 x FP4 GEMMs read; disable_ue8m0_cast keeps them FP32, MN-major), and packed int32\n"
          "[.., ceil(k / 128)] are laid out MN-major and TMA-aligned. psum_layout: None, or the int32 [G]\n"
          "cumulative end rows of an m-grouped psum layout (checked; on SM90 FP32 per-row scales follow A's rows one\n"
          "to one, so it changes nothing). Raises ValueError on a shape or dtype mismatch, NotImplementedError off\n"
          "SM90.");

    // FP8 casts as kernels (the fast path of deep_gemm.utils.per_token_cast_to_fp8 / per_block_cast_to_fp8)
    m.def("per_token_quant_fp8", &dg::apis::per_token_quant_fp8, "x"_a, "use_ue8m0"_a = false, "gran_k"_a = 128,
          "use_packed_ue8m0"_a = false, "sf_mn_major"_a = false,
          "Quantize x to FP8 e4m3 with one scale per row per gran_k columns, in one JIT-compiled kernel on the\n"
          "current stream; bit-exact with deep_gemm.utils.casts' PyTorch per_token_cast_to_fp8 (amax clamped at 1e-4,\n"
          "scale = amax / 448, optionally rounded up to a power of two, value = x / scale rounded to nearest even).\n"
          "x: torch.bfloat16 or torch.float32 [M, K] or [G, M, K] on a CUDA device of SM90 or newer, any strides\n"
          "    (a copy is made when K is not the stride-1 dim); any K >= 0 (the last group of a row is zero-padded).\n"
          "use_ue8m0: power-of-two scales. gran_k: 128 or 32. use_packed_ue8m0: the scales as UE8M0 bytes packed\n"
          "    four to an int32 along K (byte i of word j is group 4j + i, 0 past the last group); needs use_ue8m0.\n"
          "sf_mn_major: write the scales MN-major with the M stride padded to 16 bytes, the layout the FP8 GEMMs read\n"
          "    (what get_mn_major_tma_aligned_tensor / get_mn_major_tma_aligned_packed_ue8m0_tensor return, padding\n"
          "    rows zeroed), instead of K-major contiguous.\n"
          "Returns (x_fp8, sf): x_fp8 torch.float8_e4m3fn [G?, M, K] contiguous; sf torch.float32 [G?, M,\n"
          "ceil(K / gran_k)] (or torch.int32 [G?, M, ceil(ceil(K / gran_k) / 4)] packed).\n"
          "Raises ValueError naming the argument on a bad dtype, rank, device or gran_k; NotImplementedError below\n"
          "SM90.");
    m.def("silu_and_mul_quant_fp8", &dg::apis::silu_and_mul_quant_fp8, "x"_a, "use_ue8m0"_a = false,
          "gran_k"_a = 128, "use_packed_ue8m0"_a = false, "row_weights"_a = py::none(),
          "activation_clamp"_a = py::none(), "masked_m"_a = py::none(), "sf_mn_major"_a = true,
          "The MoE intermediate in one kernel: y = silu(gate) * up (optionally clamped first: gate <= c, up in\n"
          "[-c, c]; optionally times a per-row weight), quantized per row per gran_k columns as per_token_quant_fp8.\n"
          "All in FP32: y = silu(g) * u * w with silu(g) = g / (1 + exp(-g)), bit-exact with the PyTorch\n"
          "deep_gemm.utils.casts.silu_and_mul_reference followed by per_token_cast_to_fp8.\n"
          "x: torch.bfloat16 or torch.float32 [M, 2 * I] (contiguous layout) or [G, M_max, 2 * I] (masked layout),\n"
          "    each row gate (the first I columns) then up; CUDA, SM90 or newer.\n"
          "use_ue8m0, gran_k (128 or 32), use_packed_ue8m0: as per_token_quant_fp8.\n"
          "row_weights: None, or torch.float32 [M] ([G, M_max] for a 3-D x), contiguous: y of row m times\n"
          "    row_weights[m] (the routing weight), after the SwiGLU.\n"
          "activation_clamp: None, or c >= 0 (finite): gate clamped to <= c and up to [-c, c] before the SwiGLU.\n"
          "masked_m: None, or torch.int32 [G] (3-D x only): group g's first masked_m[g] rows are computed (values\n"
          "    above M_max count as M_max); the other rows of x_fp8 and sf are left unwritten.\n"
          "sf_mn_major: True (the default) writes the scales in the GEMMs' MN-major TMA-aligned layout, ready for\n"
          "    m_grouped_fp8_gemm_nt_masked / _contiguous; False K-major contiguous.\n"
          "Returns (x_fp8, sf): x_fp8 torch.float8_e4m3fn [G?, M, I]; sf as per_token_quant_fp8's for K = I.\n"
          "Raises ValueError naming the argument on a bad dtype, shape, device or value; NotImplementedError below\n"
          "SM90.");
    m.def("per_token_quant_fp4", &dg::apis::per_token_quant_fp4, "x"_a, "use_ue8m0"_a = false, "gran_k"_a = 128,
          "use_packed_ue8m0"_a = false, "sf_mn_major"_a = false,
          "Quantize x to FP4 e2m1 with one scale per row per gran_k columns, in one JIT-compiled kernel on the\n"
          "current stream; bit-exact with deep_gemm.utils.fp4_casts' PyTorch per_token_cast_to_fp4 (scale = amax / 6,\n"
          "amax clamped at 1e-4, optionally rounded up to a power of two; values rounded to the nearest e2m1 value,\n"
          "ties to the even code, saturating at 6; two codes a byte, element 2j in the low nibble). NaN inputs are\n"
          "not matched (they saturate here).\n"
          "x: torch.bfloat16 or torch.float32 [M, K] or [G, M, K] on a CUDA device of SM90 or newer, any strides;\n"
          "    K even. use_ue8m0, gran_k (128 or 32), use_packed_ue8m0, sf_mn_major: as per_token_quant_fp8.\n"
          "Returns (packed, sf): packed torch.int8 [G?, M, K / 2] contiguous; sf as per_token_quant_fp8's.\n"
          "Raises ValueError naming the argument on a bad dtype, rank, device, K or gran_k; NotImplementedError\n"
          "below SM90.");
    m.def("per_block_quant_fp8", &dg::apis::per_block_quant_fp8, "x"_a, "use_ue8m0"_a = false,
          "Quantize x to FP8 e4m3 with one scale per 128 x 128 block (the weight recipe), in one JIT-compiled kernel\n"
          "on the current stream; bit-exact with deep_gemm.utils.casts' PyTorch per_block_cast_to_fp8 at gran_k=128.\n"
          "x: torch.bfloat16 or torch.float32 [N, K] or [G, N, K] on a CUDA device of SM90 or newer, any strides;\n"
          "    any N, K (edge blocks count their real elements only). use_ue8m0: power-of-two scales.\n"
          "Returns (x_fp8, sf): x_fp8 torch.float8_e4m3fn of x's shape, contiguous; sf torch.float32 [G?,\n"
          "ceil(N / 128), ceil(K / 128)], contiguous.\n"
          "Raises ValueError naming the argument on a bad dtype, rank or device; NotImplementedError below SM90.");

    // cuBLASLt passthrough: the vendor library behind the same API, as a baseline
    {
        const std::string head =
            "by cuBLAS(Lt) through PyTorch (at::mm / at::addmm; at::_scaled_mm for FP8) on the current stream, as a\n"
            "vendor baseline behind deep_gemm's API. No JIT.\n\n"
            "The layout letters fix the shapes a and b are given in; as in the reference, each operand's storage\n"
            "major is read from its strides (stride 1 along K, or along M / N: e.g. an x.T.contiguous().T view), so\n"
            "cublaslt_gemm_nt with MN-major views runs as nn / tn / tt.\n";
        const std::string tail =
            "Operands: BF16 (d BF16 or FP32: with FP32 d the products accumulate in FP32 and are added to C without\n"
            "    rounding to BF16 first); FP32 (d FP32); or FP8 (torch.float8_e4m3fn / float8_e5m2, not both E5M2),\n"
            "    both K-major, K and N multiples of 16, per-tensor scale 1 as the reference's call applies none\n"
            "    (d BF16 or FP32; SM89 and later).\n"
            "d: [M, N], row-major (stride 1 along N), any row stride; written in place.\n"
            "c: None, or d's dtype and shape [M, N], row-major, accumulated (D = C + the product); may be d itself\n"
            "    (in place) but may not otherwise overlap it.\n"
            "Any M, N, K >= 0 (M or N = 0: no-op; K = 0: d = c, or zeros); no alignment needed for BF16 / FP32.\n"
            "set_num_sms does not apply: the call goes through PyTorch's matmuls, whose only SM-count control is\n"
            "torch._C._set_sm_carveout_experimental (cuBLASLt's SM_COUNT_TARGET, on PyTorch's cuBLASLt paths only).\n"
            "Raises ValueError on a bad dtype, rank, shape, layout, overlap or device; NotImplementedError under\n"
            "set_deterministic(True) (cuBLAS picks its own reduction order per shape).";
        m.def("cublaslt_gemm_nt", &dg::apis::cublaslt_gemm_nt, "a"_a, "b"_a, "d"_a, "c"_a = py::none(),
              ("D = C + A @ B.T " + head + "a: [M, K]. b: [N, K].\n" + tail).c_str());
        m.def("cublaslt_gemm_nn", &dg::apis::cublaslt_gemm_nn, "a"_a, "b"_a, "d"_a, "c"_a = py::none(),
              ("D = C + A @ B " + head + "a: [M, K]. b: [K, N].\n" + tail).c_str());
        m.def("cublaslt_gemm_tn", &dg::apis::cublaslt_gemm_tn, "a"_a, "b"_a, "d"_a, "c"_a = py::none(),
              ("D = C + A.T @ B " + head + "a: [K, M]. b: [K, N].\n" + tail).c_str());
        m.def("cublaslt_gemm_tt", &dg::apis::cublaslt_gemm_tt, "a"_a, "b"_a, "d"_a, "c"_a = py::none(),
              ("D = C + A.T @ B.T " + head + "a: [K, M]. b: [N, K].\n" + tail).c_str());
    }

    // FP8 GEMMs
    dg::fast_call::add_function(m, fp8_gemm_nt_def);
    m.def("m_grouped_fp8_gemm_nt_contiguous", &dg::apis::m_grouped_fp8_gemm_nt_contiguous, "a"_a, "b"_a, "d"_a,
          "grouped_layout"_a, "recipe"_a = py::none(), "recipe_a"_a = py::none(), "recipe_b"_a = py::none(),
          "compiled_dims"_a = "nk", "disable_ue8m0_cast"_a = false, "use_psum_layout"_a = false,
          "ensure_zero_padding"_a = true, "expected_m_for_psum_layout"_a = py::none(),
          "MoE forward GEMM over groups (experts) of rows: for each group g, D[rows of g] = A[rows of g] @ B[g].T\n"
          "(SM90; alias m_grouped_fp8_fp4_gemm_nt_contiguous).\n\n"
          "a = (A, sfa): A float8_e4m3fn [M, K], the groups' row segments concatenated, each starting at a\n"
          "    multiple of get_mk_alignment_for_contiguous_layout() (padding rows between them); sfa FP32\n"
          "    [M, ceil(K / 128)] (any layout, as for fp8_gemm_nt).\n"
          "b = (B, sfb): B float8_e4m3fn [G, N, K], K-major, groups stacked densely; sfb FP32\n"
          "    [G, ceil(N / 128), ceil(K / 128)] (recipe (1, 128, 128)), or per row [G, N, ceil(K / 128)] with recipe\n"
          "    (1, 1, 128) and an FP32 d. Or packed FP4 (as for fp8_gemm_nt): B int8/uint8 [G, N, K / 2], sfb FP32\n"
          "    [G, N, ceil(K / 32)] or packed UE8M0 int32 [G, N, ceil(K / 128)]; A then e4m3 with 1x128 or 1x32\n"
          "    scales, or packed FP4 with 1x32 scales (recipe None or (1, 1, 32), or recipe_a / recipe_b).\n"
          "d: BF16 [M, N] (FP32 with recipe (1, 1, 128)), row-major (padding rows: see ensure_zero_padding).\n"
          "grouped_layout: int32 on the device: [M], each row's group id or -1 for padding (M then a multiple of\n"
          "    the alignment); with use_psum_layout=True, [G] cumulative end rows: group g spans\n"
          "    [align(end[g-1], alignment), end[g]). Read on the device: ids outside [0, G) are treated as\n"
          "    padding (nothing read or written for their rows); ends past M are clamped to M.\n"
          "recipe: None, (1, 128, 128) or (1, 1, 128) (see b). compiled_dims, disable_ue8m0_cast: as for fp8_gemm_nt.\n"
          "ensure_zero_padding=True (the default): D's padding rows are written as zeros (one small kernel after the\n"
          "GEMM, writing only those rows); False: in the per-row layout those of alignment-sized segments that start\n"
          "with a group's row (which the reference's SM90 kernel writes), else none. expected_m_for_psum_layout:\n"
          "accepted for API compatibility (the config follows the total row count).\n"
          "Raises ValueError on a bad dtype, shape, stride, alignment or device (K must be positive).");
    m.def("m_grouped_fp8_gemm_nt_masked", &dg::apis::m_grouped_fp8_gemm_nt_masked, "a"_a, "b"_a, "d"_a, "masked_m"_a,
          "expected_m"_a, "recipe"_a = py::none(), "recipe_a"_a = py::none(), "recipe_b"_a = py::none(),
          "compiled_dims"_a = "nk", "disable_ue8m0_cast"_a = false,
          "MoE decode GEMM over groups (experts) with per-group row counts on the device: for each group g,\n"
          "D[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g].T (SM90; aliases fp8_m_grouped_gemm_nt_masked,\n"
          "m_grouped_fp8_fp4_gemm_nt_masked).\n\n"
          "a = (A, sfa): A float8_e4m3fn [G, max_m, K] (max_m a multiple of 64), K-major, groups stacked densely;\n"
          "    sfa FP32 [G, max_m, ceil(K / 128)].\n"
          "b = (B, sfb): B float8_e4m3fn [G, N, K], K-major; sfb FP32 [G, ceil(N / 128), ceil(K / 128)] (recipe\n"
          "    (1, 128, 128)), or per row [G, N, ceil(K / 128)] with recipe (1, 1, 128) and an FP32 d. Or packed FP4\n"
          "    (as for fp8_gemm_nt): B int8/uint8 [G, N, K / 2], sfb FP32 [G, N, ceil(K / 32)] or packed UE8M0 int32\n"
          "    [G, N, ceil(K / 128)]; A then e4m3 with 1x128 or 1x32 scales, or packed FP4 [G, max_m, K / 2] with\n"
          "    1x32 scales (recipe None or (1, 1, 32), or recipe_a / recipe_b).\n"
          "d: BF16 [G, max_m, N]; rows at or past masked_m[g] are not written.\n"
          "masked_m: int32 [G] on the device, read by the kernel (no host sync, so the call can be captured in a\n"
          "    CUDA graph and replayed with new counts); values are clamped to [0, max_m].\n"
          "expected_m: a host hint of the typical rows per group, used only to choose the config.\n"
          "recipe: None, (1, 128, 128) or (1, 1, 128) (see b). compiled_dims, disable_ue8m0_cast: as for fp8_gemm_nt.\n"
          "Raises ValueError on a bad dtype, shape, stride or device (K must be positive).");
    m.def("k_grouped_fp8_gemm_nt_contiguous", with_ks_cpu(&dg::apis::k_grouped_fp8_gemm_nt_contiguous, "k_grouped_fp8_gemm_nt_contiguous"), "a"_a, "b"_a, "d"_a,
          "ks_cpu"_a, "grouped_layout"_a, "c"_a = py::none(), "recipe"_a = py::make_tuple(1, 1, 128), "compiled_dims"_a = "mn",
          "use_psum_layout"_a = false,
          std::string("MoE weight-gradient GEMM over groups of K: for each group g, D[g] = C[g] + A_g @ B_g.T with A_g [M, K_g]\n"
          "and B_g [N, K_g] (SM90, recipe (1, 1, 128)).\n\n"
          "a = (A, sfa): A float8_e4m3fn, a contiguous 1-D buffer holding the groups' A_g [M, K_g] K-major back to\n"
          "    back (group g at element M * start_g, start_g = sum of the previous groups' K); sfa FP32\n"
          "    [sum_g ceil(K_g / 128), M] (one scale per row per 128 of the group's K; the groups' rows back to\n"
          "    back) or its transpose [M, sum_g ceil(K_g / 128)].\n"
          "b = (B, sfb): the same for B_g [N, K_g].\n" + k_grouped_doc).c_str());
    m.def("k_grouped_fp8_gemm_tn_contiguous", with_ks_cpu(&dg::apis::k_grouped_fp8_gemm_tn_contiguous, "k_grouped_fp8_gemm_tn_contiguous"), "a"_a, "b"_a, "d"_a,
          "ks_cpu"_a, "grouped_layout"_a, "c"_a = py::none(), "recipe"_a = py::make_tuple(1, 1, 128), "compiled_dims"_a = "mn",
          "use_psum_layout"_a = false,
          std::string("k_grouped_fp8_gemm_nt_contiguous with the MN-major operands training frameworks hold: A float8_e4m3fn\n"
          "[sum(K), M] and B [sum(K), N] (stride 1 along M / N), group g's rows from start_g. On SM90 FP8 wgmma\n"
          "reads K-major operands only: every group is first transposed into the nt layout by one kernel per operand\n"
          "(temporary copies of A and B; on the H200 the call costs 1.1-1.2x the nt call).\n\n"
          "a = (A, sfa), b = (B, sfb): sfa FP32 [sum_g ceil(K_g / 128), M], sfb the same with N (or transposes).\n" +
           k_grouped_doc).c_str());
    // The FP8 layouts SM90 cannot run (FP8 wgmma reads K-major operands only), with the reference's signatures:
    // each call raises NotImplementedError naming the reason and the K-major entry point to use instead.
    using UnsupportedLayout = std::tuple<std::string, const char*, const char*>;  // (name, compiled_dims, hint)
    for (const auto& [name, dims, hint]: std::initializer_list<UnsupportedLayout>{
             {"fp8_gemm_nn", "nk", "transpose B to [N, K] K-major"},
             {"fp8_gemm_tn", "mn", "transpose A to [M, K] K-major"},
             {"fp8_gemm_tt", "mn", "transpose A and B to K-major"},
             {"fp8_fp4_gemm_nn", "nk", "transpose B to [N, K] K-major"},
             {"fp8_fp4_gemm_tn", "mn", "transpose A to [M, K] K-major"},
             {"fp8_fp4_gemm_tt", "mn", "transpose A and B to K-major"}}) {
        const std::string fn_name = name, fn_hint = hint;
        m.def(name.c_str(),
              [fn_name, fn_hint](py::object, py::object, py::object, py::object, py::object, py::object, py::object,
                                 const std::string&, bool) { dg::apis::fp8_gemm_unsupported_layout(fn_name, fn_hint); },
              "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "recipe"_a = py::none(), "recipe_a"_a = py::none(),
              "recipe_b"_a = py::none(), "compiled_dims"_a = dims, "disable_ue8m0_cast"_a = false,
              ("Not available on SM90: raises NotImplementedError (FP8 wgmma reads K-major operands only; " + fn_hint +
               " and call fp8_gemm_nt). The reference serves this layout on SM100 only.").c_str());
    }
    for (const std::string name: {"m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous"}) {
        m.def(name.c_str(),
              [name](py::object, py::object, py::object, py::object, py::object, py::object, py::object,
                     const std::string&, bool, bool, bool) {
                  throw dg::NotImplementedError(fmt::format(
                      "{}: FP8 wgmma on SM90 reads only K-major operands; transpose B to [G, N, K] K-major and call "
                      "m_grouped_fp8_gemm_nt_contiguous", name));
              },
              "a"_a, "b"_a, "d"_a, "grouped_layout"_a, "recipe"_a = py::none(), "recipe_a"_a = py::none(),
              "recipe_b"_a = py::none(), "compiled_dims"_a = "nk", "disable_ue8m0_cast"_a = false,
              "use_psum_layout"_a = false, "ensure_zero_padding"_a = true,
              "Not available on SM90: raises NotImplementedError (FP8 wgmma reads K-major operands only; transpose B\n"
              "to [G, N, K] K-major and call m_grouped_fp8_gemm_nt_contiguous). The reference serves this layout on\n"
              "SM100 only.");
    }
    m.def("get_gemm_config",
          [](uint32_t m, uint32_t n, uint32_t k, uint32_t num_sms, bool use_tma_store, uint32_t block_m, uint32_t block_n, uint32_t num_splits, bool per_row_sfb, uint32_t gemm_type,
             uint32_t grouped_alignment, bool bf16, bool mn_major_a, bool mn_major_b, bool fp32_out, bool has_c,
             int32_t overlap, const std::vector<uint32_t>& cluster_ctas, uint32_t num_groups, int32_t stream_k,
             bool multicast_on_a, std::optional<bool> allow_multicast_arg, const std::string& tune,
             const std::pair<uint32_t, uint32_t>& block_size_multiple_of, bool deterministic,
             bool fp4_b) {
              DG_CHECK_INPUT(cluster_ctas.empty() || cluster_ctas.size() == dg::kernels::kMaxSplits,
                             "cluster_ctas must list the CTAs that whole clusters of 1 .. {} CTAs fill ({} values), got {}",
                             dg::kernels::kMaxSplits, dg::kernels::kMaxSplits, cluster_ctas.size());
              dg::kernels::ClusterCapacity capacity = dg::kernels::ClusterCapacity::estimate(num_sms);
              for (size_t i = 0; i < cluster_ctas.size(); ++i)
                  capacity.ctas[i + 1] = cluster_ctas[i];
              DG_CHECK_INPUT(overlap >= -1 && overlap <= 1, "overlap must be -1 (the heuristic), 0 or 1, got {}", overlap);
              DG_CHECK_INPUT(stream_k >= -1 && stream_k <= 2, "stream_k must be -1 (the heuristic), 0, 1 or 2, got {}",
                             stream_k);
              DG_CHECK_INPUT(gemm_type <= 4, "gemm_type must be 0, 1, 2, 3 or 4, got {}", gemm_type);
              DG_CHECK_INPUT(!(bf16 && per_row_sfb), "per_row_sfb (FP8 recipe (1, 1, 128)) and bf16 exclude each other");
              DG_CHECK_INPUT(bf16 || (!mn_major_a && !mn_major_b && !fp32_out),
                             "mn_major_a, mn_major_b and fp32_out describe BF16 GEMMs (bf16=True)");
              DG_CHECK_INPUT(!fp4_b || (!bf16 && !per_row_sfb && !has_c), "fp4_b (FP8 x FP4, BF16 D) excludes bf16, "
                             "per_row_sfb and has_c");
              const auto operands = bf16    ? dg::kernels::GemmOperands{dg::kernels::OperandKind::kBf16, mn_major_a,
                                                                          mn_major_b, fp32_out, has_c}
                                    : fp4_b ? dg::kernels::fp8_fp4_operands()
                                            : dg::kernels::fp8_operands(per_row_sfb, has_c);
              // DG_TUNE-style `tune`: its section of this GEMM's family, then the explicit arguments over it
              auto forced = dg::kernels::gemm_overrides(dg::parse_tune(tune).of(
                  bf16 ? dg::TuneFamily::kBf16Gemm : dg::TuneFamily::kFp8Gemm));
              forced.block_m = block_m ? block_m : forced.block_m;
              forced.block_n = block_n ? block_n : forced.block_n;
              forced.num_splits = num_splits ? num_splits : forced.num_splits;
              forced.overlap = overlap >= 0 ? overlap : forced.overlap;
              forced.stream_k = stream_k >= 0 ? stream_k : forced.stream_k;
              forced.multicast_on_a = multicast_on_a || forced.multicast_on_a;
              forced.block_m_multiple = block_size_multiple_of.first;
              forced.block_n_multiple = block_size_multiple_of.second;
              forced.fixed_reduction = deterministic;
              const bool allow_multicast = allow_multicast_arg.value_or(forced.allow_multicast());
              const auto c = dg::kernels::get_gemm_config(
                  m, n, k, num_sms, use_tma_store, false, true, true, allow_multicast, forced,
                  operands, static_cast<dg::kernels::GemmType>(gemm_type), grouped_alignment, &capacity, num_groups);
              return py::dict("block_m"_a = c.block_m, "block_n"_a = c.block_n, "num_stages"_a = c.num_stages,
                              "num_math_warpgroups"_a = c.num_math_warpgroups, "num_group_n"_a = c.num_group_n,
                              "store_chunk_n"_a = c.store_chunk_n, "fp32_buffers"_a = c.fp32_buffers,
                              "smem_bytes"_a = c.smem_bytes,
                              "num_multicast"_a = c.num_multicast, "is_multicast_on_a"_a = c.is_multicast_on_a,
                              "num_splits"_a = c.num_splits, "stream_k"_a = c.stream_k, "overlap_promotion"_a = c.overlap_promotion, "use_tma_store"_a = c.use_tma_store,
                              "per_row_sfb"_a = c.operands.per_row_sfb(), "bf16"_a = !c.operands.is_fp8(),
                              "gemm_type"_a = static_cast<uint32_t>(c.gemm_type));
          },
          "m"_a, "n"_a, "k"_a, "num_sms"_a = 132, "use_tma_store"_a = true, "block_m"_a = 0, "block_n"_a = 0, "num_splits"_a = 0,
          "per_row_sfb"_a = false, "gemm_type"_a = 0, "grouped_alignment"_a = 128, "bf16"_a = false,
          "mn_major_a"_a = false, "mn_major_b"_a = false, "fp32_out"_a = false, "has_c"_a = false, "overlap"_a = -1,
          "cluster_ctas"_a = std::vector<uint32_t>{}, "num_groups"_a = 1, "stream_k"_a = -1, "multicast_on_a"_a = false,
          "allow_multicast"_a = py::none(), "tune"_a = "",
          "block_size_multiple_of"_a = std::pair<uint32_t, uint32_t>{0, 0}, "deterministic"_a = false, "fp4_b"_a = false,
          "The config the SM90 GEMM heuristic picks for an (m, n, k) problem on num_sms SMs (no GPU needed).\n"
          "block_m, block_n, num_splits force those choices (0: the heuristic decides); per_row_sfb: FP8 recipe\n"
          "(1, 1, 128); bf16: BF16 operands (mn_major_a / mn_major_b: A stored [K, M] / B stored [K, N];\n"
          "fp32_out: FP32 D); has_c: a C is accumulated (BF16 D: direct stores); gemm_type: 0 normal, 1 m-grouped\n"
          "contiguous, 2 the same with the psum layout, 3 m-grouped masked (m is then the total, or groups x\n"
          "expected, row count; grouped_alignment the segment alignment or the masked rows per group's;\n"
          "num_groups: the masked groups, each planned with its own row blocks and B; 1 for other layouts),\n"
          "4 k-grouped (m: groups x M, k: a typical K per group; FP32 D); overlap: 1 forces the FP8 overlapped\n"
          "promotion (block k + 1's wgmmas during block k's promotion), 0 turns it off, -1 lets the heuristic\n"
          "decide; cluster_ctas: the CTAs that whole clusters of 1 .. 8 CTAs fill on the device (8 values;\n"
          "empty: whole clusters of num_sms), which sizes the split-K and multicast clusters' waves; stream_k:\n"
          "1 / 2 forces stream-K of that mode where the plan can take it (1: the last wave's tiles shared by all\n"
          "CTAs along K; 2: the last two waves'), 0 turns it off, -1 lets the heuristic decide; multicast_on_a:\n"
          "only 2-CTA tile pairs along N sharing A; allow_multicast: let the heuristic pair tiles along M into\n"
          "2-CTA clusters sharing B (None: the tune's multicast key, else the library's default, off).\n"
          "tune: a DG_TUNE value (docs/design.md, 'Forcing kernel configurations') whose fp8_gemm or bf16_gemm section (by `bf16`) forces\n"
          "choices as it does at run time; the explicit arguments above win over it; other families' sections\n"
          "are parsed but do not apply. The environment's DG_TUNE is not read. block_size_multiple_of: (BLOCK_M\n"
          "multiple, BLOCK_N multiple) as set_block_size_multiple_of applies them (0: none); deterministic: as\n"
          "set_deterministic(True) (no split-K, no stream-K). fp4_b: FP8 A x packed FP4 B (fp8_fp4_gemm_nt's SM90\n"
          "mode, BF16 D). Raises ValueError when no config fits or `tune` is malformed.");
    m.def("get_hc_prenorm_plan",
          [](int64_t m, int64_t n, int64_t k, int num_sms, bool deterministic) {
              DG_CHECK_INPUT(m >= 1 && k >= 64 && k % 64 == 0 && num_sms >= 1 && n % 8 == 0 && n >= 8 && n <= 32,
                             "get_hc_prenorm_plan: need m >= 1, n a multiple of 8 in [8, 32], k a positive multiple "
                             "of 64, num_sms >= 1; got m = {}, n = {}, k = {}, num_sms = {}", m, n, k, num_sms);
              const auto p = dg::kernels::hc_prenorm_plan(m, n, k, num_sms, deterministic);
              const char* reduction = p.reduction == dg::kernels::HcPrenormReduction::kNone      ? "none"
                                      : p.reduction == dg::kernels::HcPrenormReduction::kCluster ? "cluster"
                                                                                                 : "second_pass";
              return py::dict("block_m"_a = p.block_m, "num_splits"_a = p.num_splits, "reduction"_a = reduction,
                              "cost_bytes"_a = p.cost_bytes);
          },
          "m"_a, "n"_a, "k"_a, "num_sms"_a = 132, "deterministic"_a = false,
          "The tiling tf32_hc_prenorm_gemm picks without num_splits for a [m, k] x [n, k] problem on num_sms SMs (no\n"
          "GPU needed): block_m (64 or 128), num_splits (K splits per row block), reduction ('none', 'cluster': the\n"
          "splits added in a thread-block cluster, 'second_pass': partials summed by a second pass) and the cost\n"
          "model's estimate in bytes per SM. deterministic: as under set_deterministic(True).");

    // BF16 GEMMs
    m.def("bf16_gemm_nt", &dg::apis::bf16_gemm_nt, "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "compiled_dims"_a = "nk",
          ("D = C + A @ B.T with BF16 operands (SM90): a BF16 [M, K], b BF16 [N, K] (both K-major).\n\n" + bf16_doc).c_str());
    m.def("bf16_gemm_nn", &dg::apis::bf16_gemm_nn, "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "compiled_dims"_a = "nk",
          ("D = C + A @ B with BF16 operands (SM90): a BF16 [M, K] (K-major), b BF16 [K, N] (N-major), read in\n"
           "place (no transposing copy).\n\n" + bf16_doc).c_str());
    m.def("bf16_gemm_tn", &dg::apis::bf16_gemm_tn, "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "compiled_dims"_a = "mn",
          ("D = C + A.T @ B with BF16 operands (SM90): a BF16 [K, M] (M-major), b BF16 [K, N] (N-major), read in\n"
           "place (no transposing copy).\n\n" + bf16_doc).c_str());
    m.def("bf16_gemm_tt", &dg::apis::bf16_gemm_tt, "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "compiled_dims"_a = "mn",
          ("D = C + A.T @ B.T with BF16 operands (SM90): a BF16 [K, M] (M-major), b BF16 [N, K] (K-major).\n\n" +
           bf16_doc).c_str());
    m.def("m_grouped_bf16_gemm_nt_contiguous", &dg::apis::m_grouped_bf16_gemm_nt_contiguous, "a"_a, "b"_a, "d"_a,
          "grouped_layout"_a, "compiled_dims"_a = "nk", "use_psum_layout"_a = false, "ensure_zero_padding"_a = true,
          "expected_m_for_psum_layout"_a = py::none(),
          ("MoE forward GEMM over groups of rows with BF16 operands (SM90): for each group g,\n"
           "D[rows of g] = A[rows of g] @ B[g].T. b: BF16 [G, N, K].\n" +
           bf16_grouped_doc).c_str());
    m.def("m_grouped_bf16_gemm_nn_contiguous", &dg::apis::m_grouped_bf16_gemm_nn_contiguous, "a"_a, "b"_a, "d"_a,
          "grouped_layout"_a, "compiled_dims"_a = "nk", "use_psum_layout"_a = false, "ensure_zero_padding"_a = true,
          ("MoE forward GEMM over groups of rows with BF16 operands (SM90): for each group g,\n"
           "D[rows of g] = A[rows of g] @ B[g]. b: BF16 [G, K, N].\n" +
           bf16_grouped_doc).c_str());
    m.def("m_grouped_bf16_gemm_nt_masked", &dg::apis::m_grouped_bf16_gemm_nt_masked, "a"_a, "b"_a, "d"_a,
          "masked_m"_a, "expected_m"_a, "compiled_dims"_a = "nk",
          "MoE decode GEMM with BF16 operands and per-group row counts on the device (SM90; alias\n"
          "bf16_m_grouped_gemm_nt_masked): for each group g, D[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g].T.\n\n"
          "a: BF16 [G, max_m, K] (max_m a multiple of 64), K-major, groups stacked densely.\n"
          "b: BF16 [G, N, K], K-major. d: BF16 [G, max_m, N]; rows at or past masked_m[g] are not written.\n"
          "masked_m: int32 [G] on the device, read by the kernel (no host sync: graph-capturable), clamped to\n"
          "    [0, max_m]. expected_m: a host hint of the typical rows per group (config only).\n"
          "Raises ValueError on a bad dtype, shape, stride or device (K must be positive).");
    m.def("k_grouped_bf16_gemm_tn_contiguous",
          with_ks_cpu(&dg::apis::k_grouped_bf16_gemm_tn_contiguous, "k_grouped_bf16_gemm_tn_contiguous"), "a"_a, "b"_a, "d"_a,
          "ks_cpu"_a, "grouped_layout"_a, "c"_a = py::none(), "compiled_dims"_a = "mn", "use_psum_layout"_a = false,
          "MoE weight-gradient GEMM over groups of K with BF16 operands (SM90): for each group g,\n"
          "D[g] = C[g] + a[start_g : start_g + K_g].T @ b[start_g : start_g + K_g], read in place (MN-major).\n\n"
          "a: BF16 [sum(K), M] and b: BF16 [sum(K), N], row-major (stride 1 along M / N, row strides multiples of\n"
          "    16 bytes); group g's rows start at start_g = the sum of the previous groups' K (or, with\n"
          "    use_psum_layout=True, at align(end of group g-1, get_mk_alignment_for_contiguous_layout())).\n"
          "ks_cpu: list of the G groups' K (any K >= 0; 0 for an empty group: D[g] = C[g], or zeros).\n"
          "grouped_layout: int32 [G] on the device (checked for shape and device only: ks_cpu is what the kernel\n"
          "    follows). d: FP32 [G, M, N] contiguous. c: None or FP32 [G, M, N] contiguous (may be d: in place).\n"
          "compiled_dims: which of m, n are compile-time constants.\n"
          "Raises ValueError on a bad dtype, shape, stride, alignment or device, NotImplementedError off SM90.");

    // Attention: the DeepSeek-V3.2 lightning indexer
    m.def("fp8_mqa_logits", &dg::apis::fp8_mqa_logits, "q"_a, "kv"_a, "weights"_a, "cu_seq_len_k_start"_a,
          "cu_seq_len_k_end"_a, "clean_logits"_a = true, "max_seqlen_k"_a = 0, "logits_dtype"_a = at::kFloat,
          "FP8 MQA logits of the lightning indexer (prefill, SM90; fp8_fp4_mqa_logits takes q as a pair):\n"
          "logits[i, j] = sum_h relu(q[i, h, :] . kv[j, :] * kv_scale[j]) * weights[i, h] for ks[i] <= j < ke[i].\n\n"
          "q: float8_e4m3fn [S, H, D], H in {16, 32, 64}, D in {32, 64, 128}; D contiguous, heads stacked densely\n"
          "    (stride 0 = H * stride 1), strides multiples of 16 bytes.\n"
          "kv = (kv, kv_scales): kv float8_e4m3fn [S_kv, D], D contiguous, row stride a multiple of 16 bytes;\n"
          "    kv_scales FP32 [S_kv], contiguous (any sign: relu is applied after the scale).\n"
          "weights: FP32 [S, H], contiguous along H.\n"
          "cu_seq_len_k_start, cu_seq_len_k_end: int32 [S] (ks, ke), contiguous, 0 <= ks <= ke <= S_kv.\n"
          "clean_logits: write -inf at every position outside [ks[i], ke[i]) (else those are left unwritten).\n"
          "max_seqlen_k: 0 gives logits [S, S_kv]; > 0 gives compressed logits [S, max_seqlen_k] with key j of row\n"
          "    i at column j - ks[i] (needs ke - ks <= max_seqlen_k).\n"
          "logits_dtype: torch.float32 (default) or torch.bfloat16 (rounded from the FP32 sums in the kernel).\n"
          "Accuracy: FP32 accumulation of the FP8 products. At D = 128, H = 32 or 64 the signed half of\n"
          "    relu(y) = (y + |y|) / 2 comes from the tensor core, so a key whose every head scores negative gives\n"
          "    ~2^-12 of |s| sum_h |x_h w_h| instead of exactly 0.\n"
          "No host synchronization and no checking kernel (CUDA-graph capturable): ks/ke values are not read on the\n"
          "host; the kernel clamps ks into [0, S_kv], ke into [ks, S_kv] (and, compressed, ke - ks to max_seqlen_k),\n"
          "so bad values give defined output, never an out-of-bounds access. DG_DEBUG_CHECKS=1 checks them on the\n"
          "host (one synchronization per call).\n"
          "Returns the new logits tensor, row-major and contiguous. Raises ValueError on a bad dtype, shape, stride,\n"
          "alignment or device (and, with DG_DEBUG_CHECKS=1, on ks/ke values out of range); NotImplementedError off\n"
          "SM90.");
    m.def("fp8_fp4_mqa_logits", &dg::apis::fp8_fp4_mqa_logits, "q"_a, "kv"_a, "weights"_a, "cu_seq_len_k_start"_a,
          "cu_seq_len_k_end"_a, "clean_logits"_a = true, "max_seqlen_k"_a = 0, "logits_dtype"_a = at::kFloat,
          "fp8_mqa_logits with q as a pair q = (values, scales or None), the reference's FP8/FP4 form.\n\n"
          "q = (q_fp8, None): FP8 q, exactly fp8_mqa_logits(q_fp8, kv, ...) (see its docstring).\n"
          "q = (q_fp4, q_scales): FP4 q and kv, the reference's format: q int8 (or uint8) [S, H, D / 2] and kv int8\n"
          "    [S_kv, D / 2], two e2m1 values a byte along D (low nibble first), D in {64, 128}; q_scales int32 [S, H]\n"
          "    and kv = (kv, kv_scales) with kv_scales int32 [S_kv], contiguous: the UE8M0 exponents of each row's\n"
          "    D / 32 groups of 32 (group g in byte g; byte e is 2^(e - 127), 0 is 0). The kernel makes them e4m3 in\n"
          "    shared memory, group g scaled by 2^(e_g - e_max) (exact while a row's exponents span <= 8 binades;\n"
          "    beyond, rounded to nearest even), and applies each row's 2^e_max in FP32. Not yet run on a GPU.\n"
          "Raises TypeError when q is not a 2-sequence (Tensor, Tensor or None).");

    m.def("fp8_paged_mqa_logits", &dg::apis::fp8_paged_mqa_logits, "q"_a, "kv_cache"_a, "weights"_a, "context_lens"_a,
          "block_table"_a, "schedule_meta"_a, "max_context_len"_a, "clean_logits"_a = false, "indices"_a = py::none(),
          "logits_dtype"_a = at::kFloat,
          "FP8 MQA logits of the lightning indexer over a paged kv cache (decode, SM90; fp8_fp4_paged_mqa_logits\n"
          "takes q as a pair):\n"
          "logits[b * next_n + t, j] = sum_h relu(q[b, t, h, :] . kv[b, j, :] * kv_scale[b, j]) * weights[b * next_n + t, h]\n"
          "for the keys j that query token t of request b sees: j <= context_lens[b] - next_n + t (context_lens [B]),\n"
          "or j < context_lens[b, t] (context_lens [B, next_n]).\n\n"
          "q: float8_e4m3fn [B, next_n, H, D], contiguous; next_n in {1, 2, 4}, H in {16, 32, 64},\n"
          "    D in {32, 64, 128}.\n"
          "kv_cache: uint8 [num_blocks, block_kv, 1, D + 4], block_kv in {32, 64}; per block, the block_kv x D FP8\n"
          "    E4M3 values, then block_kv FP32 scales (any sign). Each block packed (stride 3 = 1, stride 1 = D + 4);\n"
          "    blocks any multiple of 16 bytes apart (stride 0 >= block_kv (D + 4): a view of a larger pool is read\n"
          "    in place). Key j of request b is row j % block_kv of block block_table[b, j // block_kv].\n"
          "weights: FP32 [B * next_n, H], contiguous along H.\n"
          "context_lens: int32 [B] or [B, next_n], contiguous, 0 <= context_lens <= max_context_len.\n"
          "block_table: int32 [B, max_blocks], contiguous along max_blocks (rows may be strided, e.g.\n"
          "    block_tables[::next_n], read in place); the ids a request uses in [0, num_blocks).\n"
          "schedule_meta: int32 [num_sms + 1, 2] from get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms,\n"
          "    indices) for these context_lens (one CTA per SM of the schedule).\n"
          "max_context_len: the logits' width W.\n"
          "clean_logits: write -inf at every invalid position of each row (else those are left unwritten).\n"
          "indices: None, or int32 [N] (contiguous) for a variable number of tokens per request: q is [N, 1, H, D]\n"
          "    (q row t is token t), weights [N, H], context_lens [N] or [N, 1] is token t's own key count (it sees\n"
          "    keys j < context_lens[t]), and block_table is [R, max_blocks] for R requests: token t reads the\n"
          "    blocks of row indices[t] (0 <= indices[t] < R; the tokens of one request need not be adjacent).\n"
          "    Each token is scheduled as its own unit (tokens of one request do not share kv loads).\n"
          "logits_dtype: torch.float32 (default) or torch.bfloat16 (rounded from the FP32 sums in the kernel).\n"
          "No host synchronization and no kernel besides the logits' (CUDA-graph capturable): context lengths,\n"
          "block ids and indices are not read on the host; the kernel clamps every index (lengths to [0, W] and the\n"
          "table's columns, block ids to the cache, indices to the table's rows), so bad values give defined output,\n"
          "never an out-of-bounds access. DG_DEBUG_CHECKS=1 checks them on the host (one synchronization).\n"
          "Returns logits [B * next_n, max_context_len] of logits_dtype, new and contiguous. Raises ValueError on a\n"
          "bad dtype, shape, stride or device (and, with DG_DEBUG_CHECKS=1, on bad values: negative context, context\n"
          "longer than max_context_len, too few block_table columns, block ids or request indices out of range);\n"
          "NotImplementedError off SM90.");
    m.def("fp8_fp4_paged_mqa_logits", &dg::apis::fp8_fp4_paged_mqa_logits, "q"_a, "kv_cache"_a, "weights"_a,
          "context_lens"_a, "block_table"_a, "schedule_meta"_a, "max_context_len"_a, "clean_logits"_a = false,
          "logits_dtype"_a = at::kFloat, "indices"_a = py::none(),
          "fp8_paged_mqa_logits with q as a pair q = (values, scales or None), the reference's FP8/FP4 form (note\n"
          "the order: logits_dtype before indices, as in the reference).\n\n"
          "q = (q_fp8, None): FP8 q, exactly fp8_paged_mqa_logits(q_fp8, kv_cache, ...) (see its docstring).\n"
          "q = (q_fp4, q_scales): FP4 q and cache, the reference's format: q int8 (or uint8) [B, next_n, H, D / 2]\n"
          "    (two e2m1 values a byte along D, low nibble first; D in {64, 128}) with q_scales int32 [B, next_n, H],\n"
          "    contiguous; kv_cache uint8 [num_blocks, block_kv, 1, D / 2 + 4]: per block block_kv x D / 2 packed\n"
          "    bytes, then block_kv int32 words. Each word holds the UE8M0 exponents of its row's D / 32 groups of 32\n"
          "    (group g in byte g; byte e is 2^(e - 127), 0 is 0). Made e4m3 in shared memory, exact while a row's\n"
          "    exponents span <= 8 binades (beyond, rounded to nearest even). Not yet run on a GPU.\n"
          "Raises TypeError when q is not a 2-sequence (Tensor, Tensor or None).");
    m.def("get_paged_mqa_logits_metadata", &dg::apis::get_paged_mqa_logits_metadata, "context_lens"_a, "block_kv"_a,
          "num_sms"_a, "indices"_a = py::none(),
          "The SM schedule of the paged decode MQA logits (lightning indexer decode, SM90).\n\n"
          "context_lens: int32 [B] (keys per request) or [B, next_n] (per query token; a request counts its\n"
          "    longest), on any device; negative lengths count as 0.\n"
          "block_kv: keys per kv-cache block, 32 or 64. num_sms: SMs to balance over (> 0).\n"
          "indices: None, or int32 [N] (the request of each token, as for fp8_paged_mqa_logits): context_lens must\n"
          "    then be the tokens' own lengths, [N] or [N, 1]; each token is a unit, so the schedule is that of\n"
          "    context_lens (indices is checked for dtype, shape and device only).\n"
          "Returns int32 [num_sms + 1, 2] on context_lens' device: row i = (first request, first kv block within\n"
          "it) of SM i's share of the sum_b ceil(context_len[b] / block_kv) kv blocks (shares differ by at most\n"
          "one block; SM i works up to row i + 1, and row num_sms = (B, 0)). On a CUDA device (SM >= 90): one JIT\n"
          "kernel launch (one CTA); on the CPU: a few tensor ops. No host synchronization (CUDA-graph capturable;\n"
          "the first CUDA call compiles or loads the kernel, so make one before capture). Raises ValueError on a bad\n"
          "dtype, rank or size (B, next_n < 2^31), block_kv, num_sms or indices.");

    // HyperConnection
    m.def("tf32_hc_prenorm_gemm", &dg::apis::tf32_hc_prenorm_gemm, "a"_a, "b"_a, "d"_a, "sqr_sum"_a,
          "num_splits"_a = py::none(),
          "The HyperConnection pre-norm in one pass over a (SM90): d = a @ b.T on TF32 tensor cores and\n"
          "sqr_sum[m] = sum_k a[m, k]^2 in FP32.\n\n"
          "a: BF16 [M, K], K-major (row stride a multiple of 8 elements, 16-byte aligned); K a positive multiple\n"
          "    of 64. BF16 is exactly TF32, so a enters the tensor cores unchanged.\n"
          "b: FP32 [N, K], K-major (row stride a multiple of 4 elements, 16-byte aligned), N a multiple of 8 in\n"
          "    [8, 32]. Rounded to TF32 (to nearest, ties away from zero) on its way to the tensor cores; products\n"
          "    are exact and accumulate in FP32.\n"
          "d, sqr_sum: FP32, contiguous. num_splits=None: d [M, N], sqr_sum [M] get the results. When the\n"
          "    blocks of 128 rows would leave SMs idle (ceil(M / 128) < SMs / 2), K is split automatically into\n"
          "    S = min(8, SMs // ceil(M / 128), K // 128) parts (lowered while that many clusters of S CTAs do not\n"
          "    fit on the device at once), and each block's S CTAs, one thread-block cluster, add their partials\n"
          "    in split order through distributed shared memory: one launch, deterministic, no workspace.\n"
          "num_splits=S in [1, K / 64]: d [S, M, N], sqr_sum [S, M] get partials for the caller to sum: split\n"
          "    s covers the K blocks of 64 [s * KB // S, (s + 1) * KB // S), KB = K // 64 (no reduction kernel).\n"
          "M = 0 is a no-op. Deterministic (no atomics); no host synchronization (CUDA-graph capturable after\n"
          "a first call has compiled the kernel). Raises ValueError naming the argument on a bad dtype, shape,\n"
          "N, K, num_splits, stride, alignment, overlap or device; NotImplementedError off SM90.");
    // Einsum and skip-head-mid (compositions on the SM90 GEMM kernel: csrc/apis/einsum.hpp, skip_head_mid.hpp)
    m.def("einsum", &dg::apis::einsum, "expr"_a, "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "use_cublaslt"_a = false,
          "Einstein sums with BF16 operands (SM90), for these expressions, written exactly so:\n"
          "'bmk,bnk->mn': D = sum_b A[b] @ B[b].T. a BF16 [b, m, k], b BF16 [b, n, k] (last dimensions contiguous,\n"
          "    other strides multiples of 16 bytes); d BF16 or FP32 [m, n], row-major. Accumulated in FP32 (BF16 d\n"
          "    is rounded once at the end). c: None, or d itself with FP32 d: D += sum_b A[b] @ B[b].T in place.\n"
          "'bhr,hdr->bhd': per head h, D[:, h, :] = A[:, h, :] @ B[h].T. a BF16 [b, h, r], b BF16 [h, d, r],\n"
          "    d BF16 [b, h, d].\n"
          "'bhd,hdr->bhr': per head h, D[:, h, :] = A[:, h, :] @ B[h]. a BF16 [b, h, d], b BF16 [h, d, r],\n"
          "    d BF16 [b, h, r].\n"
          "For the per-head expressions every tensor needs only its last dimension contiguous (the others' strides\n"
          "multiples of 16 bytes, 16-byte aligned start; d: any strides), and c must be None. They run one\n"
          "m-grouped masked GEMM over the heads, A copied heads-first into scratch ([h, b rounded up to 64, .]) and\n"
          "the result copied into d; 'bmk,bnk->mn' runs one GEMM launch per batch entry (FP32 D in place).\n"
          "use_cublaslt=True: the per-head expressions through PyTorch's batched matmul (cuBLAS), written into d;\n"
          "with 'bmk,bnk->mn' it raises ValueError.\n"
          "Raises ValueError naming the argument on another expr, a bad dtype, shape, stride, alignment or device,\n"
          "NotImplementedError off SM90.");
    m.def("fp8_einsum", &dg::apis::fp8_einsum, "expr"_a, "a"_a, "b"_a, "d"_a, "c"_a = py::none(),
          "recipe"_a = py::make_tuple(1, 128, 128),
          "Einstein sum 'bhr,hdr->bhd' with FP8 operands (SM90): per head h,\n"
          "D[:, h, :] = (A[:, h, :] * sfa) @ (B[h] * sfb).T, accumulated as fp8_gemm_nt does (FP32, per 128 of r).\n\n"
          "a = (A, sfa): A float8_e4m3fn [b, h, r] (last dimension contiguous, other strides multiples of 16\n"
          "    bytes); sfa FP32 [b, h, ceil(r / 128)] (per 1 x 128).\n"
          "b = (B, sfb): B float8_e4m3fn [h, d, r], same rule; sfb FP32 [h, ceil(d / 128), ceil(r / 128)]\n"
          "    (per 128 x 128 block of each head).\n"
          "d: BF16 [b, h, d], last dimension contiguous. c: must be None. recipe: (1, 128, 128) only.\n"
          "Runs as the BF16 per-head expressions do: one m-grouped masked FP8 GEMM over the heads, A and sfa\n"
          "copied heads-first into scratch, the result copied into d.\n"
          "'bhd,hdr->bhr' and 'bhd,bhr->hdr' raise NotImplementedError (SM100 only, as in the reference); any\n"
          "other expr, a bad dtype, shape, stride or device raises ValueError naming the argument.");
    m.def("fp8_gemm_nt_skip_head_mid", &dg::apis::fp8_gemm_nt_skip_head_mid, "a"_a, "b"_a, "d"_a, "head_splits"_a,
          "recipe"_a = py::none(), "compiled_dims"_a = "nk", "disable_ue8m0_cast"_a = false,
          "fp8_gemm_nt whose output skips a middle band of every head (SM90, recipe (1, 128, 128), BF16 d).\n\n"
          "a = (A, sfa), b = (B, sfb): as for fp8_gemm_nt; B [N, K] holds H heads of left + right rows\n"
          "    (N = H * (left + right)).\n"
          "d: BF16 [M, H * (left + mid + right)], row-major. Column j of head h's rows of B lands in d column\n"
          "    h * (left + mid + right) + (j if j < left else j + mid); each head's mid columns are never written.\n"
          "head_splits: (left, mid, right), non-negative, left + right > 0 and dividing N; no alignment needed.\n"
          "recipe: None or (1, 128, 128). compiled_dims, disable_ue8m0_cast: as for fp8_gemm_nt.\n"
          "With mid > 0 the GEMM writes an [M, N] BF16 scratch tensor that two strided copies place in d.\n"
          "Raises ValueError naming the argument on bad head_splits, dtype, shape, stride or device.");

    // JIT
    // (pybind11 keeps the pointer: the text must outlive the module)
    static const std::string compile_kernel_doc =
        "Render kernel `family` with integer `params` and compile it for `arch` (no GPU needed), through the\n"
        "disk cache. source: the family's already rendered .cu (a cache entry's kernel.cu) instead of params,\n"
        "e.g. to rebuild elsewhere the entries a run needed (tools/prebuild_jit_cache.py).\n"
        "use_nvrtc: None follows DG_JIT_USE_NVRTC. Returns a dict: cubin_path, entry_dir,\n"
        "cache_hit, compiler, source, ptxas_report, registers, stack_frame_bytes, spill_store_bytes,\n"
        "spill_load_bytes. Raises ValueError for an unknown family, a parameter the family does not take,\n"
        "both params and source, a parameter value out of range, or a configuration that needs more shared\n"
        "memory than an SM90 block has (the message gives both sizes); RuntimeError with the compiler log on a\n"
        "failed compile.\n"
        "params, by family (a parameter left out takes its default):\n" + dg::kernels::kernel_params_doc();
    m.def("compile_kernel", &dg::apis::compile_kernel, "family"_a, "params"_a = py::dict(), "arch"_a = "sm_90a",
          "use_nvrtc"_a = py::none(), "source"_a = py::none(), compile_kernel_doc.c_str());
    m.def("parse_tune",
          [](const std::string& spec) {
              const dg::TuneSpec parsed = dg::parse_tune(spec);
              py::dict out;
              for (uint32_t i = 0; i < dg::kNumTuneFamilies; ++i) {
                  if (parsed.families[i].empty())
                      continue;
                  py::dict keys;
                  for (const auto& [key, value]: parsed.families[i].values)
                      keys[py::str(key)] = value;
                  out[dg::tune_families()[i].name] = keys;
              }
              return out;
          },
          "spec"_a,
          "Parse a DG_TUNE value (the developer entry point for forcing kernel configurations, docs/design.md, 'Forcing kernel configurations'):\n"
          "'family:key=value[,key=value...][;family:...]', families fp8_gemm, bf16_gemm, mqa_logits,\n"
          "paged_mqa_logits. Returns {family: {key: value}} for the families it sets. Raises ValueError naming\n"
          "the unknown family or key, or the value out of its range.");
    // Mega MoE stage 1: internal steps, called by deep_gemm.mega (which checks the public arguments)
    m.def("_mega_moe_dispatch", &dg::apis::mega_moe_dispatch, "peers"_a, "layout"_a, "alignment"_a, "num_rows"_a,
          "src_of_row"_a, "psum_ends"_a, "recv_stats"_a, "l1_acts"_a, "l1_acts_sf"_a,
          "Internal (deep_gemm.mega): route every rank's top-k entries to this rank's experts (psum_ends, src_of_row,\n"
          "the source ranks' combine rows, recv_stats) and gather the routed rows into l1_acts (+ l1_acts_sf).");
    m.def("_mega_moe_swiglu", &dg::apis::mega_moe_swiglu, "peers"_a, "layout"_a, "num_rows"_a, "intermediate"_a,
          "src_of_row"_a, "l1_out"_a, "l2_acts"_a, "l2_acts_sf"_a, "activation_clamp"_a,
          "fast_math"_a, "ue8m0_x32"_a = false,
          "Internal (deep_gemm.mega): SwiGLU of L1's gate/up-interleaved output, clamped, times the routing weight,\n"
          "quantized to FP8 with FP32 1x128 scales (l2_acts_sf given; l1_out FP32), or per 1x32 with UE8M0 scales\n"
          "folded to 1x128 (ue8m0_x32; l1_out BF16), or rounded to BF16 (no l2_acts_sf; l1_out BF16).");
    m.def("_mega_moe_pre_dispatch", &dg::apis::mega_moe_pre_dispatch, "x"_a, "topk_idx"_a, "topk_weights"_a,
          "buf_x"_a, "buf_x_sf"_a, "buf_topk_idx"_a, "buf_topk_weights"_a, "num_tokens"_a,
          "routed_scaling_factor"_a,
          "Internal (deep_gemm.mega): mega_moe_pre_dispatch_sm90's kernel on CUDA tensors.");
    m.def("_mega_moe_combine", &dg::apis::mega_moe_combine, "peers"_a, "layout"_a, "y"_a,
          "Internal (deep_gemm.mega): y[t] = the sum of token t's expert outputs, read from the experts' ranks.");
    dg::apis::bind_precompile(m);  // (the ahead-of-time builds' renderers and cache lookup)
    m.def("kernel_families", [] {
              std::vector<std::string> names;
              for (const auto& [name, _]: dg::kernels::kernel_registry())
                  names.push_back(name);
              return names;
          },
          "Names of the kernel families compile_kernel knows.");
}
