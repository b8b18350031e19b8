"""The kernel entry points as ``torch.library`` custom ops (namespace ``deep_gemm``), for ``torch.compile``.

Every public kernel entry point of ``deep_gemm`` (the FP8, BF16 and cuBLASLt GEMMs, the MQA logits, the
paged-MQA schedule, the scale-layout transforms and the FP8 casts) is an op ``torch.ops.deep_gemm.<name>`` with a fake
(meta) implementation, so ``torch.compile(fullgraph=True)`` (and ``torch.export``) traces a model calling
them with no graph break, and CUDA graphs capture the compiled code (the kernels never synchronize).

Schemas. Arguments the Python API takes as pairs are flattened: ``a = (A, sfa)`` becomes ``a, sfa``
(``q = (values, scales or None)`` becomes ``q, q_sf``), recipes are ``int[]?``, optional arguments are
``?`` types. The GEMMs write ``d`` in place and return nothing: ``d`` is declared mutated (``Tensor(d!)``),
nothing else is. The functions returning a tensor return a new one, never a view of an input.

How the public functions call them. ``deep_gemm.fp8_gemm_nt`` and the rest keep their names, signatures,
defaults and error messages: each is a thin function that, while ``torch.compiler.is_compiling()`` (Dynamo
tracing, ``torch.export``), flattens its arguments and calls the op, and otherwise calls the ``_C`` binding
directly. Both paths run the same C++ function; the eager path skips the dispatcher because an op call costs
microseconds of host time (torch.ops converts every argument and the dispatcher boxes them), while the check costs
one Python call (figures below). The ops are defined here with the low-level ``torch.library.Library`` API
(``define`` + ``register_fake``) rather than ``torch.library.custom_op``, whose wrapper adds Python work to every
call of a compiled graph. Their CPU and CUDA kernels are C++ (csrc/op_kernels.hpp, registered by the extension when
it loads: no call back into Python), except for the few ops that list names, whose kernels are Python functions
registered here with ``impl`` (``_C._op_kernels_in_cpp()`` names the C++ ones). A C++ kernel raises what the
``_C`` binding raises (the same exception type, ``_C.NotImplementedError`` included, and message). CPU tensors
reach the same function too, so errors read the same (and the paged-MQA schedule, which has a CPU path, runs there).

Measured on the 2-core CPU machine (tools/measure_op_overhead.py, PyTorch 2.13, fp8_gemm_nt's eleven arguments
around a no-op body): the eager wrapper adds 0.2-0.5 µs to a call. The op path costs 2.0-2.3 µs more than the direct
binding call, of which 1.8-2.0 µs is PyTorch's own floor for calling an op of this schema from Python (the same op
with a C++ kernel that ignores its arguments); with a Python kernel calling the binding, as before, it cost
3.4-4.2 µs more. So the op path cannot come within 1 µs of the direct call: PyTorch's floor alone is above that.
Compiled code pays the op path per call unless CUDA graphs replay it (mode="reduce-overhead").

The fake implementations compute output shapes and strides only; the GEMMs' shape and dtype checks run in the
real call (same messages as eager).

Differences under tracing: ``get_mn_major_tma_aligned_tensor`` and ``transform_sf_into_required_layout``
return a new tensor even when the eager call would return ``sf`` itself (a custom op may not return an alias
of an input); values, shape and strides are the same.
"""

import functools
import re
from collections.abc import Callable, Sequence

import torch

from deep_gemm import _C

__all__ = ["PUBLIC_FUNCTIONS", "OP_NAMES"]

_LIB = torch.library.Library("deep_gemm", "DEF")

# The kernels check strides (K-major operands, TMA-aligned scales, 16-byte row strides): Inductor must pass every
# tensor with the strides it had when traced, not a layout of its choosing (older PyTorch: the same stride order)
_LAYOUT_TAGS = tuple(
    tag for tag in (getattr(torch.Tag, "needs_exact_strides", None) or getattr(torch.Tag, "needs_fixed_stride_order",
                                                                                None),) if tag is not None
)  # fmt: skip

# Op name -> the public function that calls it (filled by _public below)
PUBLIC_FUNCTIONS: dict[str, Callable] = {}
OP_NAMES: list[str] = []


# The ops whose CPU and CUDA kernels the extension registered in C++ when it loaded (csrc/op_kernels.hpp)
_CPP_KERNELS = frozenset(_C._op_kernels_in_cpp())


def _define(name: str, schema_text: str, impl: Callable | None, fake: Callable) -> None:
    """Define deep_gemm::name with its schema, the real implementation for CPU and CUDA and the fake one.
    impl None: the op's kernels are C++ (registered by the extension; the dispatcher checked their signature against
    this schema when it was defined)."""
    if (impl is None) != (name in _CPP_KERNELS):
        raise RuntimeError(f"deep_gemm::{name}: a Python kernel must be given exactly when the extension registers "
                           f"none (C++ kernels: {sorted(_CPP_KERNELS)})")
    _LIB.define(name + schema_text, tags=_LAYOUT_TAGS)
    schema = getattr(torch.ops.deep_gemm, name).default._schema
    dtype_args = set(re.findall(r"ScalarType (\w+)", schema_text))
    defaults, num_args = _schema_defaults(schema, dtype_args), len(schema.arguments)
    if impl is not None:
        impl = _with_defaults(impl, defaults, num_args)
        _LIB.impl(name, impl, "CPU")
        _LIB.impl(name, impl, "CUDA")
    torch.library.register_fake(f"deep_gemm::{name}", _with_defaults(fake, defaults, num_args), lib=_LIB)
    OP_NAMES.append(name)


def _schema_defaults(schema: torch.FunctionSchema, dtype_args: set[str]) -> tuple:
    """The default values of the schema's trailing arguments, as Python values (dtype_args: the ScalarType ones)."""
    defaults = []
    for arg in schema.arguments:
        if not arg.has_default_value():
            defaults = []
            continue
        value = arg.default_value
        if arg.name in dtype_args:  # (the schema keeps a dtype default as its enum number; ours is float32)
            if value != 6:
                raise RuntimeError(f"{schema.name}: {arg.name}: only a float32 dtype default is mapped, got {value}")
            value = torch.float32
        defaults.append(value)
    return tuple(defaults)


def _with_defaults(fn: Callable, defaults: tuple, num_args: int) -> Callable:
    """fn called with all num_args arguments: the dispatcher leaves out the trailing arguments that equal their
    defaults when it calls a Python kernel, so they are filled in from the schema's defaults."""
    if not defaults:
        return fn
    first_default = num_args - len(defaults)

    def call(*args):
        if len(args) < num_args:
            args += defaults[len(args) - first_default :]
        return fn(*args)

    return call


def _public(c_fn: Callable, traced_fn: Callable) -> Callable:
    """The public function: the op path (traced_fn) while compiling, else the _C binding itself."""
    is_compiling = torch.compiler.is_compiling

    def public(*args, **kwargs):
        if is_compiling():
            return traced_fn(*args, **kwargs)
        return c_fn(*args, **kwargs)

    functools.update_wrapper(public, c_fn)  # name, docstring and __wrapped__ (inspect.signature reads the binding's)
    public.__module__ = "deep_gemm"
    public.__deep_gemm_traced__ = traced_fn  # (for tests: the compile path's Python signature)
    PUBLIC_FUNCTIONS[c_fn.__name__] = public
    return public


def _pair(x: object, name: str) -> tuple:
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise TypeError(f"{name} must be a pair (tensor, scales), got {type(x).__name__}")
    return x[0], x[1]


def _ints(recipe: Sequence[int] | None) -> list[int] | None:
    return None if recipe is None else list(recipe)


def _no_output(*args, **kwargs) -> None:
    """Fake implementation of an op that only writes its mutated arguments."""
    return None


def _tma_aligned_size(x, element_size: int):
    alignment = 16 // element_size
    return (x + alignment - 1) // alignment * alignment


def _new_mn_major_tma_aligned(sf: torch.Tensor, out_k, dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor laid out as the layout kernels write: [G?, MN, out_k], MN-major, MN stride padded to 16 bytes
    (storage [G, out_k, align(MN)], viewed transposed and narrowed to MN, as csrc/apis/layout.hpp allocates)."""
    batched = sf.dim() == 3
    groups = sf.size(0) if batched else 1
    mn = sf.size(-2)
    storage = torch.empty((groups, out_k, _tma_aligned_size(mn, 4)), dtype=dtype, device=sf.device)
    view = storage.transpose(1, 2).narrow(1, 0, mn)
    return view if batched else view.squeeze(0)


def _check_sf(sf: torch.Tensor, fn: str) -> None:
    if sf.dim() not in (2, 3) or sf.dtype != torch.float32:
        raise ValueError(f"{fn}: sf must be float32 [MN, SF_K] or [G, MN, SF_K], got {sf.dtype} {list(sf.shape)}")


def _fresh(out: torch.Tensor, sf: torch.Tensor, like: Callable[[], torch.Tensor]) -> torch.Tensor:
    """out, or a copy in the layout like() gives when out shares sf's storage (an op may not return an alias)."""
    if out.untyped_storage().data_ptr() != sf.untyped_storage().data_ptr() or out.numel() == 0:
        return out
    return like().copy_(out)


# ------------------------------------------------------------------------------------------------ FP8 GEMMs
# (schema defaults as the Python API's, for engines that call the ops directly)
_FP8_RECIPES = ("int[]? recipe=None, int[]? recipe_a=None, int[]? recipe_b=None, str compiled_dims=\"{dims}\", "
                "bool disable_ue8m0_cast=False")
_FP8_DENSE = "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor? c=None, " + _FP8_RECIPES + ") -> ()"


def _fp8_dense_op(name: str, c_fn: Callable, default_dims: str, sm90: bool = True) -> Callable:
    """An FP8 dense GEMM op. sm90=False: a layout SM90 cannot run, whose binding raises NotImplementedError before
    reading any argument; its fake implementation is that call too, so tracing raises what the eager call raises."""

    def unsupported(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast):
        c_fn((a, sfa), (b, sfb), d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)

    # (sm90: the kernel is C++, csrc/op_kernels.hpp)
    _define(name, _FP8_DENSE.format(dims=default_dims), None if sm90 else unsupported,
            _no_output if sm90 else unsupported)
    op = getattr(torch.ops.deep_gemm, name)

    def traced(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims=default_dims,
               disable_ue8m0_cast=False):
        (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
        op(a, sfa, b, sfb, d, c, _ints(recipe), _ints(recipe_a), _ints(recipe_b), compiled_dims, disable_ue8m0_cast)

    return _public(c_fn, traced)


fp8_gemm_nt = _fp8_dense_op("fp8_gemm_nt", _C.fp8_gemm_nt, "nk")
# (SM100 layouts: each raises NotImplementedError naming the K-major call to use)
fp8_gemm_nn = _fp8_dense_op("fp8_gemm_nn", _C.fp8_gemm_nn, "nk", sm90=False)
fp8_gemm_tn = _fp8_dense_op("fp8_gemm_tn", _C.fp8_gemm_tn, "mn", sm90=False)
fp8_gemm_tt = _fp8_dense_op("fp8_gemm_tt", _C.fp8_gemm_tt, "mn", sm90=False)
fp8_fp4_gemm_nn = _fp8_dense_op("fp8_fp4_gemm_nn", _C.fp8_fp4_gemm_nn, "nk", sm90=False)
fp8_fp4_gemm_tn = _fp8_dense_op("fp8_fp4_gemm_tn", _C.fp8_fp4_gemm_tn, "mn", sm90=False)
fp8_fp4_gemm_tt = _fp8_dense_op("fp8_fp4_gemm_tt", _C.fp8_fp4_gemm_tt, "mn", sm90=False)


_define("m_grouped_fp8_gemm_nt_contiguous",
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor grouped_layout, "
        + _FP8_RECIPES.format(dims="nk") + ", bool use_psum_layout=False, bool ensure_zero_padding=True, "
        "int? expected_m_for_psum_layout=None) -> ()",
        None, _no_output)


def _m_grouped_fp8_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                      compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                      ensure_zero_padding=True, expected_m_for_psum_layout=None):
    (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
    torch.ops.deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
        a, sfa, b, sfb, d, grouped_layout, _ints(recipe), _ints(recipe_a), _ints(recipe_b), compiled_dims,
        disable_ue8m0_cast, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)


m_grouped_fp8_gemm_nt_contiguous = _public(_C.m_grouped_fp8_gemm_nt_contiguous, _m_grouped_fp8_gemm_nt_contiguous)


def _m_grouped_fp8_nn_op(name: str, c_fn: Callable) -> Callable:
    def impl(a, sfa, b, sfb, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
             use_psum_layout, ensure_zero_padding):
        c_fn((a, sfa), (b, sfb), d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
             use_psum_layout, ensure_zero_padding)

    _define(name, "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor grouped_layout, "
            + _FP8_RECIPES.format(dims="nk") + ", bool use_psum_layout=False, bool ensure_zero_padding=True) -> ()",
            impl, impl)  # (raises NotImplementedError)
    op = getattr(torch.ops.deep_gemm, name)

    def traced(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
               disable_ue8m0_cast=False, use_psum_layout=False, ensure_zero_padding=True):
        (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
        op(a, sfa, b, sfb, d, grouped_layout, _ints(recipe), _ints(recipe_a), _ints(recipe_b), compiled_dims,
           disable_ue8m0_cast, use_psum_layout, ensure_zero_padding)

    return _public(c_fn, traced)


m_grouped_fp8_gemm_nn_contiguous = _m_grouped_fp8_nn_op("m_grouped_fp8_gemm_nn_contiguous",
                                                        _C.m_grouped_fp8_gemm_nn_contiguous)
m_grouped_fp8_fp4_gemm_nn_contiguous = _m_grouped_fp8_nn_op("m_grouped_fp8_fp4_gemm_nn_contiguous",
                                                            _C.m_grouped_fp8_fp4_gemm_nn_contiguous)


_define("m_grouped_fp8_gemm_nt_masked",
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor masked_m, int expected_m, "
        + _FP8_RECIPES.format(dims="nk") + ") -> ()", None, _no_output)


def _m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                  compiled_dims="nk", disable_ue8m0_cast=False):
    (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
    torch.ops.deep_gemm.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, d, masked_m, expected_m, _ints(recipe),
                                                     _ints(recipe_a), _ints(recipe_b), compiled_dims,
                                                     disable_ue8m0_cast)


m_grouped_fp8_gemm_nt_masked = _public(_C.m_grouped_fp8_gemm_nt_masked, _m_grouped_fp8_gemm_nt_masked)


def _k_grouped_fp8_op(name: str, c_fn: Callable) -> Callable:
    _define(name, "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, int[]? ks_cpu, Tensor grouped_layout, "
            "Tensor? c=None, int[]? recipe=None, str compiled_dims=\"mn\", bool use_psum_layout=False) -> ()", None,
            _no_output)
    op = getattr(torch.ops.deep_gemm, name)

    def traced(a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128), compiled_dims="mn",
               use_psum_layout=False):
        (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
        op(a, sfa, b, sfb, d, _ints(ks_cpu), grouped_layout, c, _ints(recipe), compiled_dims, use_psum_layout)

    return _public(c_fn, traced)


k_grouped_fp8_gemm_nt_contiguous = _k_grouped_fp8_op("k_grouped_fp8_gemm_nt_contiguous",
                                                     _C.k_grouped_fp8_gemm_nt_contiguous)
k_grouped_fp8_gemm_tn_contiguous = _k_grouped_fp8_op("k_grouped_fp8_gemm_tn_contiguous",
                                                     _C.k_grouped_fp8_gemm_tn_contiguous)


# ------------------------------------------------------------------------------------ BF16 and cuBLASLt GEMMs
def _dense_op(name: str, c_fn: Callable, default_dims: str | None) -> Callable:
    """bf16_gemm_* (with compiled_dims) and cublaslt_gemm_* (default_dims None: no compiled_dims)."""
    if default_dims is None:
        _define(name, "(Tensor a, Tensor b, Tensor(d!) d, Tensor? c=None) -> ()", None, _no_output)
        op = getattr(torch.ops.deep_gemm, name)

        def traced(a, b, d, c=None):
            op(a, b, d, c)
    else:
        _define(name, f"(Tensor a, Tensor b, Tensor(d!) d, Tensor? c=None, str compiled_dims=\"{default_dims}\") -> ()",
                None, _no_output)
        op = getattr(torch.ops.deep_gemm, name)

        def traced(a, b, d, c=None, compiled_dims=default_dims):
            op(a, b, d, c, compiled_dims)

    return _public(c_fn, traced)


bf16_gemm_nt = _dense_op("bf16_gemm_nt", _C.bf16_gemm_nt, "nk")
bf16_gemm_nn = _dense_op("bf16_gemm_nn", _C.bf16_gemm_nn, "nk")
bf16_gemm_tn = _dense_op("bf16_gemm_tn", _C.bf16_gemm_tn, "mn")
bf16_gemm_tt = _dense_op("bf16_gemm_tt", _C.bf16_gemm_tt, "mn")
cublaslt_gemm_nt = _dense_op("cublaslt_gemm_nt", _C.cublaslt_gemm_nt, None)
cublaslt_gemm_nn = _dense_op("cublaslt_gemm_nn", _C.cublaslt_gemm_nn, None)
cublaslt_gemm_tn = _dense_op("cublaslt_gemm_tn", _C.cublaslt_gemm_tn, None)
cublaslt_gemm_tt = _dense_op("cublaslt_gemm_tt", _C.cublaslt_gemm_tt, None)


_define("m_grouped_bf16_gemm_nt_contiguous",
        "(Tensor a, Tensor b, Tensor(d!) d, Tensor grouped_layout, str compiled_dims=\"nk\", "
        "bool use_psum_layout=False, bool ensure_zero_padding=True, int? expected_m_for_psum_layout=None) -> ()",
        None,
        _no_output)


def _m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                       ensure_zero_padding=True, expected_m_for_psum_layout=None):
    torch.ops.deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims, use_psum_layout,
                                                          ensure_zero_padding, expected_m_for_psum_layout)


m_grouped_bf16_gemm_nt_contiguous = _public(_C.m_grouped_bf16_gemm_nt_contiguous, _m_grouped_bf16_gemm_nt_contiguous)


_define("m_grouped_bf16_gemm_nn_contiguous",
        "(Tensor a, Tensor b, Tensor(d!) d, Tensor grouped_layout, str compiled_dims=\"nk\", "
        "bool use_psum_layout=False, bool ensure_zero_padding=True) -> ()", None,
        _no_output)


def _m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
                                       ensure_zero_padding=True):
    torch.ops.deep_gemm.m_grouped_bf16_gemm_nn_contiguous(a, b, d, grouped_layout, compiled_dims, use_psum_layout,
                                                          ensure_zero_padding)


m_grouped_bf16_gemm_nn_contiguous = _public(_C.m_grouped_bf16_gemm_nn_contiguous, _m_grouped_bf16_gemm_nn_contiguous)


_define("m_grouped_bf16_gemm_nt_masked",
        "(Tensor a, Tensor b, Tensor(d!) d, Tensor masked_m, int expected_m, str compiled_dims=\"nk\") -> ()",
        None, _no_output)


def _m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims="nk"):
    torch.ops.deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims)


m_grouped_bf16_gemm_nt_masked = _public(_C.m_grouped_bf16_gemm_nt_masked, _m_grouped_bf16_gemm_nt_masked)


_define("k_grouped_bf16_gemm_tn_contiguous",
        "(Tensor a, Tensor b, Tensor(d!) d, int[]? ks_cpu, Tensor grouped_layout, Tensor? c=None, "
        "str compiled_dims=\"mn\", bool use_psum_layout=False) -> ()", None, _no_output)


def _k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout, c=None, compiled_dims="mn",
                                       use_psum_layout=False):
    torch.ops.deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, _ints(ks_cpu), grouped_layout, c, compiled_dims,
                                                          use_psum_layout)


k_grouped_bf16_gemm_tn_contiguous = _public(_C.k_grouped_bf16_gemm_tn_contiguous, _k_grouped_bf16_gemm_tn_contiguous)


# ------------------------------------------------------------------------------------------------- MQA logits
_MQA = ("(Tensor q, Tensor? q_sf, Tensor kv, Tensor kv_sf, Tensor weights, Tensor cu_seq_len_k_start, "
        "Tensor cu_seq_len_k_end, bool clean_logits=True, int max_seqlen_k=0, ScalarType logits_dtype=float) -> Tensor")


def _mqa_fake(q, q_sf, kv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k,
              logits_dtype):
    # [S, max_seqlen_k] when compressed (max_seqlen_k > 0), else [S, S_kv]; contiguous
    width = max_seqlen_k if max_seqlen_k > 0 else kv.size(0)
    return q.new_empty((q.size(0), width), dtype=logits_dtype)


_define("fp8_fp4_mqa_logits", _MQA, None, _mqa_fake)


def _fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                    logits_dtype=torch.float32):
    kv, kv_sf = _pair(kv, "kv")
    return torch.ops.deep_gemm.fp8_fp4_mqa_logits(q, None, kv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                                                  clean_logits, max_seqlen_k, logits_dtype)


def _fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                        logits_dtype=torch.float32):
    (q, q_sf), (kv, kv_sf) = _pair(q, "q"), _pair(kv, "kv")
    return torch.ops.deep_gemm.fp8_fp4_mqa_logits(q, q_sf, kv, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                                                  clean_logits, max_seqlen_k, logits_dtype)


# (fp8_mqa_logits(q, ...) is fp8_fp4_mqa_logits((q, None), ...) in the extension too: one op serves both)
fp8_mqa_logits = _public(_C.fp8_mqa_logits, _fp8_mqa_logits)
fp8_fp4_mqa_logits = _public(_C.fp8_fp4_mqa_logits, _fp8_fp4_mqa_logits)


_PAGED = ("(Tensor q, Tensor? q_sf, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, "
          "Tensor schedule_meta, int max_context_len, bool clean_logits=False, ScalarType logits_dtype=float, "
          "Tensor? indices=None) "
          "-> Tensor")


def _paged_fake(q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                logits_dtype, indices):
    # [B * next_n, max_context_len], contiguous
    return q.new_empty((q.size(0) * q.size(1), max_context_len), dtype=logits_dtype)


_define("fp8_fp4_paged_mqa_logits", _PAGED, None, _paged_fake)


def _fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                          clean_logits=False, indices=None, logits_dtype=torch.float32):
    return torch.ops.deep_gemm.fp8_fp4_paged_mqa_logits(q, None, kv_cache, weights, context_lens, block_table,
                                                        schedule_meta, max_context_len, clean_logits, logits_dtype,
                                                        indices)


def _fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                              clean_logits=False, logits_dtype=torch.float32, indices=None):
    q, q_sf = _pair(q, "q")
    return torch.ops.deep_gemm.fp8_fp4_paged_mqa_logits(q, q_sf, kv_cache, weights, context_lens, block_table,
                                                        schedule_meta, max_context_len, clean_logits, logits_dtype,
                                                        indices)


fp8_paged_mqa_logits = _public(_C.fp8_paged_mqa_logits, _fp8_paged_mqa_logits)
fp8_fp4_paged_mqa_logits = _public(_C.fp8_fp4_paged_mqa_logits, _fp8_fp4_paged_mqa_logits)


def _metadata_fake(context_lens, block_kv, num_sms, indices):
    # [num_sms + 1, 2] int32, contiguous, on context_lens' device
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


_define("get_paged_mqa_logits_metadata",
        "(Tensor context_lens, int block_kv, int num_sms, Tensor? indices=None) -> Tensor",
        None, _metadata_fake)


def _get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    return torch.ops.deep_gemm.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices)


get_paged_mqa_logits_metadata = _public(_C.get_paged_mqa_logits_metadata, _get_paged_mqa_logits_metadata)


# ---------------------------------------------------------------------------------------------- scale layouts
def _tma_aligned_fake(sf):
    _check_sf(sf, "get_mn_major_tma_aligned_tensor")
    return _new_mn_major_tma_aligned(sf, sf.size(-1), torch.float32)


def _tma_aligned_impl(sf):
    return _fresh(_C.get_mn_major_tma_aligned_tensor(sf), sf, lambda: _tma_aligned_fake(sf))


_define("get_mn_major_tma_aligned_tensor", "(Tensor sf) -> Tensor", _tma_aligned_impl, _tma_aligned_fake)


def _get_mn_major_tma_aligned_tensor(sf):
    return torch.ops.deep_gemm.get_mn_major_tma_aligned_tensor(sf)


get_mn_major_tma_aligned_tensor = _public(_C.get_mn_major_tma_aligned_tensor, _get_mn_major_tma_aligned_tensor)


def _packed_ue8m0_fake(sf, psum_layout):
    _check_sf(sf, "get_mn_major_tma_aligned_packed_ue8m0_tensor")
    return _new_mn_major_tma_aligned(sf, (sf.size(-1) + 3) // 4, torch.int32)


_define("get_mn_major_tma_aligned_packed_ue8m0_tensor", "(Tensor sf, Tensor? psum_layout=None) -> Tensor",
        None, _packed_ue8m0_fake)


def _get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout=None):
    return torch.ops.deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout)


get_mn_major_tma_aligned_packed_ue8m0_tensor = _public(_C.get_mn_major_tma_aligned_packed_ue8m0_tensor,
                                                       _get_mn_major_tma_aligned_packed_ue8m0_tensor)


def _gran_mn(recipe: Sequence[int], is_sfa: bool | None) -> int:
    """The scale granularity along MN of a (gran_mn, gran_k) or (gran_m, gran_n, gran_k) recipe (the extension
    checks the recipe; this only picks the output layout)."""
    if len(recipe) == 3:
        if is_sfa is None:  # (the extension's message: tracing raises what the call would)
            raise ValueError("is_sfa must be given with a 3-value recipe (gran_m, gran_n, gran_k)")
        return recipe[0] if is_sfa else recipe[1]
    return recipe[0]


def _transform_sf_fake(sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast, psum_layout):
    gran_mn = _gran_mn(recipe, is_sfa)
    if recipe[-1] == 32 and gran_mn == 1:  # 1x32 UE8M0 scales (the extension raises for other 1x32 recipes)
        if sf.dtype == torch.int32:  # packed words: MN-major, TMA-aligned
            return _new_mn_major_tma_aligned(sf, sf.size(-1), torch.int32)
        if not disable_ue8m0_cast:  # FP32 scales packed into UE8M0 words
            return _packed_ue8m0_fake(sf, psum_layout)
    if gran_mn == 1:  # per-row scales: MN-major, TMA-aligned
        return _tma_aligned_fake(sf)
    return torch.empty_like(sf, memory_format=torch.contiguous_format)  # 128x128 blocks: K-major, contiguous


def _transform_sf_impl(sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast, psum_layout):
    out = _C.transform_sf_into_required_layout(sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast, psum_layout)
    return _fresh(out, sf, lambda: _transform_sf_fake(sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast,
                                                      psum_layout))


_define("transform_sf_into_required_layout",
        "(Tensor sf, int mn, int k, int[] recipe, int? num_groups=None, bool? is_sfa=None, "
        "bool disable_ue8m0_cast=False, Tensor? psum_layout=None) -> Tensor", _transform_sf_impl, _transform_sf_fake)


def _transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
                                       psum_layout=None):
    return torch.ops.deep_gemm.transform_sf_into_required_layout(sf, mn, k, list(recipe), num_groups, is_sfa,
                                                                 disable_ue8m0_cast, psum_layout)


transform_sf_into_required_layout = _public(_C.transform_sf_into_required_layout, _transform_sf_into_required_layout)


# ------------------------------------------------------------------------------- einsum, skip-head-mid, HC
_define("einsum", "(str expr, Tensor a, Tensor b, Tensor(d!) d, Tensor? c=None, bool use_cublaslt=False) -> ()",
        None, _no_output)


def _einsum(expr, a, b, d, c=None, use_cublaslt=False):
    torch.ops.deep_gemm.einsum(expr, a, b, d, c, use_cublaslt)


einsum = _public(_C.einsum, _einsum)


_define("fp8_einsum", "(str expr, Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor? c=None, "
        "int[] recipe=[1, 128, 128]) -> ()", None, _no_output)


def _fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128)):
    (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
    torch.ops.deep_gemm.fp8_einsum(expr, a, sfa, b, sfb, d, c, list(recipe))


fp8_einsum = _public(_C.fp8_einsum, _fp8_einsum)


def _skip_head_mid_impl(a, sfa, b, sfb, d, head_splits, recipe, compiled_dims, disable_ue8m0_cast):
    _C.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, tuple(head_splits), recipe, compiled_dims, disable_ue8m0_cast)


_define("fp8_gemm_nt_skip_head_mid", "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, int[] head_splits, "
        "int[]? recipe=None, str compiled_dims=\"nk\", bool disable_ue8m0_cast=False) -> ()", _skip_head_mid_impl,
        _no_output)


def _fp8_gemm_nt_skip_head_mid(a, b, d, head_splits, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    (a, sfa), (b, sfb) = _pair(a, "a"), _pair(b, "b")
    torch.ops.deep_gemm.fp8_gemm_nt_skip_head_mid(a, sfa, b, sfb, d, list(head_splits), _ints(recipe), compiled_dims,
                                                  disable_ue8m0_cast)


fp8_gemm_nt_skip_head_mid = _public(_C.fp8_gemm_nt_skip_head_mid, _fp8_gemm_nt_skip_head_mid)


# (the one op with two outputs: d and sqr_sum are both written in place)
_define("tf32_hc_prenorm_gemm", "(Tensor a, Tensor b, Tensor(d!) d, Tensor(s!) sqr_sum, int? num_splits=None) -> ()",
        None, _no_output)


def _tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None):
    torch.ops.deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)


tf32_hc_prenorm_gemm = _public(_C.tf32_hc_prenorm_gemm, _tf32_hc_prenorm_gemm)


# ------------------------------------------------------------------------------------------------- FP8 casts
def _check_cast_fake(fn: str, x: torch.Tensor, gran_k: int, use_ue8m0: bool, use_packed_ue8m0: bool) -> None:
    """The extension's argument checks that decide the output shapes (tracing raises what the call would)."""
    if gran_k not in (32, 128):
        raise ValueError(f"{fn}: gran_k must be 32 or 128 for the kernels, got {gran_k}")
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError(f"{fn}: use_packed_ue8m0=True needs use_ue8m0=True (power-of-two scales)")
    if x.dtype not in (torch.bfloat16, torch.float32) or x.dim() not in (2, 3):
        raise ValueError(f"{fn}: x must be torch.bfloat16 or torch.float32, 2-D [M, K] or 3-D [G, M, K], got "
                         f"{x.dtype} {list(x.shape)}")  # fmt: skip


def _per_token_outputs(x: torch.Tensor, k, gran_k: int, packed: bool, mn_major: bool):
    """(x_fp8, sf) as the per-token cast kernels allocate them: x_fp8 [G?, M, k] contiguous; sf [G?, M, words]
    K-major contiguous, or MN-major with the M stride padded to 16 bytes (storage [G, words, align(M, 4)])."""
    batched = x.dim() == 3
    m = x.size(-2)
    sf_k = (k + gran_k - 1) // gran_k
    words = (sf_k + 3) // 4 if packed else sf_k
    dtype = torch.int32 if packed else torch.float32
    out = x.new_empty((*x.shape[:-1], k), dtype=torch.float8_e4m3fn)
    if mn_major:
        groups = x.size(0) if batched else 1
        storage = x.new_empty((groups, words, _tma_aligned_size(m, 4)), dtype=dtype)
        sf = storage.transpose(1, 2).narrow(1, 0, m)
        return out, sf if batched else sf.squeeze(0)
    return out, x.new_empty((*x.shape[:-1], words), dtype=dtype)


def _per_token_quant_fake(x, use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major):
    _check_cast_fake("per_token_quant_fp8", x, gran_k, use_ue8m0, use_packed_ue8m0)
    return _per_token_outputs(x, x.size(-1), gran_k, use_packed_ue8m0, sf_mn_major)


_define("per_token_quant_fp8", "(Tensor x, bool use_ue8m0=False, int gran_k=128, bool use_packed_ue8m0=False, "
        "bool sf_mn_major=False) -> (Tensor, Tensor)", None, _per_token_quant_fake)


def _per_token_quant_fp8(x, use_ue8m0=False, gran_k=128, use_packed_ue8m0=False, sf_mn_major=False):
    return torch.ops.deep_gemm.per_token_quant_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major)


per_token_quant_fp8 = _public(_C.per_token_quant_fp8, _per_token_quant_fp8)


def _per_token_quant_fp4_fake(x, use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major):
    _check_cast_fake("per_token_quant_fp4", x, gran_k, use_ue8m0, use_packed_ue8m0)
    if x.size(-1) % 2 != 0:
        raise ValueError(f"per_token_quant_fp4: x: K must be even (two FP4 values to a byte), got {list(x.shape)}")
    _, sf = _per_token_outputs(x, x.size(-1), gran_k, use_packed_ue8m0, sf_mn_major)
    return x.new_empty((*x.shape[:-1], x.size(-1) // 2), dtype=torch.int8), sf


_define("per_token_quant_fp4", "(Tensor x, bool use_ue8m0=False, int gran_k=128, bool use_packed_ue8m0=False, "
        "bool sf_mn_major=False) -> (Tensor, Tensor)", None, _per_token_quant_fp4_fake)


def _per_token_quant_fp4(x, use_ue8m0=False, gran_k=128, use_packed_ue8m0=False, sf_mn_major=False):
    return torch.ops.deep_gemm.per_token_quant_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0, sf_mn_major)


per_token_quant_fp4 = _public(_C.per_token_quant_fp4, _per_token_quant_fp4)


def _silu_and_mul_quant_fake(x, use_ue8m0, gran_k, use_packed_ue8m0, row_weights, activation_clamp, masked_m,
                             sf_mn_major):
    _check_cast_fake("silu_and_mul_quant_fp8", x, gran_k, use_ue8m0, use_packed_ue8m0)
    if x.size(-1) % 2 != 0:
        raise ValueError(f"silu_and_mul_quant_fp8: x must be [..., 2 * I] (gate then up), its last dim must be even, "
                         f"got {list(x.shape)}")
    return _per_token_outputs(x, x.size(-1) // 2, gran_k, use_packed_ue8m0, sf_mn_major)


_define("silu_and_mul_quant_fp8", "(Tensor x, bool use_ue8m0=False, int gran_k=128, bool use_packed_ue8m0=False, "
        "Tensor? row_weights=None, float? activation_clamp=None, Tensor? masked_m=None, bool sf_mn_major=True) -> "
        "(Tensor, Tensor)", None, _silu_and_mul_quant_fake)


def _silu_and_mul_quant_fp8(x, use_ue8m0=False, gran_k=128, use_packed_ue8m0=False, row_weights=None,
                            activation_clamp=None, masked_m=None, sf_mn_major=True):
    return torch.ops.deep_gemm.silu_and_mul_quant_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, row_weights,
                                                      activation_clamp, masked_m, sf_mn_major)


silu_and_mul_quant_fp8 = _public(_C.silu_and_mul_quant_fp8, _silu_and_mul_quant_fp8)


def _per_block_quant_fake(x, use_ue8m0):
    _check_cast_fake("per_block_quant_fp8", x, 128, use_ue8m0, False)
    n, k = x.size(-2), x.size(-1)
    sf = x.new_empty((*x.shape[:-2], (n + 127) // 128, (k + 127) // 128), dtype=torch.float32)
    return torch.empty_like(x, dtype=torch.float8_e4m3fn, memory_format=torch.contiguous_format), sf


_define("per_block_quant_fp8", "(Tensor x, bool use_ue8m0=False) -> (Tensor, Tensor)", None,
        _per_block_quant_fake)


def _per_block_quant_fp8(x, use_ue8m0=False):
    return torch.ops.deep_gemm.per_block_quant_fp8(x, use_ue8m0)


per_block_quant_fp8 = _public(_C.per_block_quant_fp8, _per_block_quant_fp8)
