"""The call sites an ahead-of-time build covers (GEMM, MQA-logits shapes) and the kernels they need.

Each shape names the public API it calls and its fixed dimensions; the token-dependent dimension (M) is enumerated
over its range and every value is planned by the extension exactly as a launch plans it (`_C.render_gemm_kernels`,
`_C.render_mqa_logits_kernels`, `_C.render_paged_mqa_logits_kernels`): the result is the set of distinct rendered
kernel sources, each with the call sites that need it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from deep_gemm import _C


@dataclass(frozen=True)
class _GemmApi:
    """How a GEMM entry point maps onto the SM90 GEMM kernel's modes."""

    bf16: bool
    gemm_type: int  # 0 normal, 1 m-grouped contiguous (3 masked, 4 k-grouped; psum: 2)
    mn_major_a: bool = False
    mn_major_b: bool = False
    compiled_dims: str = "nk"  # the API's default
    out_dtypes: tuple[str, ...] = ("bf16",)
    fp8_scale_transform: bool = False  # the scales may go through the smxx_transpose_sf layout kernel
    transposes_operands: bool = False  # k_grouped_fp8_gemm_tn: operands transposed by smxx_transpose_fp8 first


_FP8 = dict(bf16=False, fp8_scale_transform=True)
_K_GROUPED = dict(gemm_type=4, compiled_dims="mn", out_dtypes=("fp32",))
GEMM_APIS: dict[str, _GemmApi] = {
    "fp8_gemm_nt": _GemmApi(gemm_type=0, out_dtypes=("bf16", "fp32"), **_FP8),
    "m_grouped_fp8_gemm_nt_contiguous": _GemmApi(gemm_type=1, **_FP8),
    "m_grouped_fp8_gemm_nt_masked": _GemmApi(gemm_type=3, **_FP8),
    "k_grouped_fp8_gemm_nt_contiguous": _GemmApi(**_FP8, **_K_GROUPED),
    "k_grouped_fp8_gemm_tn_contiguous": _GemmApi(transposes_operands=True, **_FP8, **_K_GROUPED),
    "bf16_gemm_nt": _GemmApi(True, 0, out_dtypes=("bf16", "fp32")),
    "bf16_gemm_nn": _GemmApi(True, 0, mn_major_b=True, out_dtypes=("bf16", "fp32")),
    "bf16_gemm_tn": _GemmApi(True, 0, True, True, "mn", ("bf16", "fp32")),
    "bf16_gemm_tt": _GemmApi(True, 0, mn_major_a=True, compiled_dims="mn", out_dtypes=("bf16", "fp32")),
    "m_grouped_bf16_gemm_nt_contiguous": _GemmApi(True, 1),
    "m_grouped_bf16_gemm_nn_contiguous": _GemmApi(True, 1, mn_major_b=True),
    "m_grouped_bf16_gemm_nt_masked": _GemmApi(True, 3),
    "k_grouped_bf16_gemm_tn_contiguous": _GemmApi(True, mn_major_a=True, mn_major_b=True, **_K_GROUPED),
}
# The aliases the package exports for the same entry points
GEMM_API_ALIASES = {
    "fp8_fp4_gemm_nt": "fp8_gemm_nt",
    "m_grouped_fp8_fp4_gemm_nt_contiguous": "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "bf16_m_grouped_gemm_nt_masked": "m_grouped_bf16_gemm_nt_masked",
}


@dataclass(frozen=True)
class GemmShape:
    """One GEMM call site: the API it calls (a name of deep_gemm's GEMM entry points), its fixed sizes and options.

    n, k: the output columns and the reduction length (k-grouped: k unused, give 0; K changes per call there).
    num_groups: the groups (experts) of m-grouped and k-grouped GEMMs (1 otherwise).
    max_m: masked layout only: A's rows per group (a multiple of 64; it decides the block alignment).
    out_dtype: "bf16" or "fp32", D's dtype (FP8 "fp32" is recipe (1, 1, 128)); None: "bf16", or "fp32" for the
        k-grouped GEMMs. has_c: a C is accumulated.
    compiled_dims: None for the API's default ("nk", or "mn" for the tn / tt / k-grouped ones).
    use_psum_layout: m-grouped contiguous with cumulative group ends; ensure_zero_padding: as the API's argument.
    m_values: the M values to build for (masked: expected_m; k-grouped: each group's M, required); None: every M in
        1 .. max_rows (contiguous: the multiples of get_mk_alignment_for_contiguous_layout()).
    max_rows: the largest M (contiguous: total rows, masked: expected_m) this site sees; None: the max_tokens given
        to precompile.
    fp4_b: FP8 APIs only: B packed FP4 (the FP8 x FP4 mode); with it, a_1x32: A's scales per 1x32, fp4_a: A packed
        FP4 (either folded to 1x128 by a pre-pass kernel before the GEMM).
    """

    api: str
    n: int
    k: int
    num_groups: int = 1
    max_m: int = 0
    out_dtype: str | None = None
    has_c: bool = False
    compiled_dims: str | None = None
    use_psum_layout: bool = False
    ensure_zero_padding: bool = True
    m_values: tuple[int, ...] | None = None
    max_rows: int | None = None
    fp4_b: bool = False
    a_1x32: bool = False
    fp4_a: bool = False

    def label(self) -> str:
        """A one-line name of this call site for the progress bar and the summary."""
        groups = f" G={self.num_groups}" if self.num_groups != 1 else ""
        fp4 = " fp4" if self.fp4_b else ""
        return f"{self.api} n={self.n} k={self.k}{groups}{fp4}"


@dataclass(frozen=True)
class MqaLogitsShape:
    """An fp8_mqa_logits call site (the lightning indexer's prefill): q [S, num_heads, head_dim].

    compressed: max_seqlen_k > 0; logits_dtype: "fp32" or "bf16".
    """

    num_heads: int
    head_dim: int
    compressed: bool = False
    clean_logits: bool = True
    logits_dtype: str = "fp32"

    def label(self) -> str:
        """A one-line name of this call site for the progress bar and the summary."""
        return f"fp8_mqa_logits H={self.num_heads} D={self.head_dim} clean={int(self.clean_logits)}"


@dataclass(frozen=True)
class PagedMqaLogitsShape:
    """An fp8_paged_mqa_logits call site (the indexer's decode), with get_paged_mqa_logits_metadata's schedule.

    q [B, next_n, num_heads, head_dim]; block_kv: keys per kv-cache block; context_lens_2d: context_lens [B, next_n];
    max_context_len: the largest logits width (max_context_len argument) a call passes: the config changes with it,
    so every power of two up to it is planned; indices: the per-token form; max_batch: the most requests (tokens
    with indices) a call has (None: precompile's max_tokens).
    """

    next_n: int
    num_heads: int
    head_dim: int
    block_kv: int = 64
    context_lens_2d: bool = False
    clean_logits: bool = False
    max_context_len: int = 65536
    logits_dtype: str = "fp32"
    indices: bool = False
    max_batch: int | None = None

    def label(self) -> str:
        """A one-line name of this call site for the progress bar and the summary."""
        return f"fp8_paged_mqa_logits next_n={self.next_n} H={self.num_heads} D={self.head_dim}"


@dataclass(frozen=True)
class RenderedKernel:
    """A kernel source already rendered (e.g. a cache entry's kernel.cu), built as it is."""

    family: str
    source: str

    def label(self) -> str:
        """A one-line name of this call site for the progress bar and the summary."""
        return f"{self.family} (rendered source)"


Shape = GemmShape | MqaLogitsShape | PagedMqaLogitsShape | RenderedKernel
SHAPE_TYPES = {"fp8_mqa_logits": MqaLogitsShape, "fp8_paged_mqa_logits": PagedMqaLogitsShape}


@dataclass
class PlannedKernel:
    """A distinct kernel source and the call sites (with their M values) that need it."""

    family: str
    source: str
    needed_by: list[str] = dataclasses.field(default_factory=list)


def _values_text(values: list[int]) -> str:
    """Compact text of sorted values: '1-64', '128', '128-4096 (12 values)'."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if lo == hi:
        return str(lo)
    dense = len(values) == hi - lo + 1
    return f"{lo}-{hi}" if dense else f"{lo}-{hi} ({len(values)} values)"


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _check_positive(value: Any, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")


def gemm_m_values(shape: GemmShape, api: _GemmApi, max_tokens: int) -> list[int]:
    """The M values (masked: expected_m) a GEMM call site is built for."""
    where = shape.label()
    if shape.m_values is not None:
        if not shape.m_values:
            raise ValueError(f"{where}: m_values must hold at least one value")
        for m in shape.m_values:
            _check_positive(m, f"{where}: m_values[...]")
        return sorted(set(shape.m_values))
    if api.gemm_type == 4:
        raise ValueError(f"{where}: k-grouped GEMMs need m_values (each group's M: the weight's rows)")
    bound = shape.max_rows if shape.max_rows is not None else max_tokens
    _check_positive(bound, f"{where}: max_rows (or max_tokens)")
    dims = api.compiled_dims if shape.compiled_dims is None else shape.compiled_dims
    if "m" in dims and not _C.get_ignore_compile_dims():
        raise ValueError(f"{where}: compiled_dims {dims!r} compiles M into the kernel (one kernel per M): give "
                         "m_values, or drop 'm'")
    if api.gemm_type == 1 and not shape.use_psum_layout:
        alignment = _C.get_mk_alignment_for_contiguous_layout()
        return list(range(alignment, _round_up(bound, alignment) + 1, alignment))
    if api.gemm_type == 3:
        return list(range(1, min(bound, shape.max_m) + 1))
    return list(range(1, bound + 1))


def _gemm_kernels(shape: GemmShape, max_tokens: int, num_sms: int, cluster_ctas: list[int]) -> list[dict]:
    where = shape.label()
    name = GEMM_API_ALIASES.get(shape.api, shape.api)
    if name not in GEMM_APIS:
        raise ValueError(f"{where}: api must be one of {sorted(GEMM_APIS) + sorted(GEMM_API_ALIASES)}")
    api = GEMM_APIS[name]
    _check_positive(shape.n, f"{where}: n")
    if api.gemm_type != 4:
        _check_positive(shape.k, f"{where}: k")
    _check_positive(shape.num_groups, f"{where}: num_groups")
    if api.gemm_type == 0 and shape.num_groups != 1:
        raise ValueError(f"{where}: num_groups must be 1 for {shape.api}, got {shape.num_groups}")
    if api.gemm_type == 3 and (not isinstance(shape.max_m, int) or shape.max_m <= 0 or shape.max_m % 64):
        raise ValueError(f"{where}: max_m (A's rows per group) must be a positive multiple of 64, got {shape.max_m!r}")
    out_dtype = api.out_dtypes[0] if shape.out_dtype is None else shape.out_dtype
    if out_dtype not in api.out_dtypes:
        raise ValueError(f"{where}: out_dtype must be one of {list(api.out_dtypes)}, got {shape.out_dtype!r}")
    if shape.has_c and out_dtype != "fp32" and not api.bf16:
        raise ValueError(f"{where}: has_c needs out_dtype 'fp32' with FP8 operands (recipe (1, 1, 128))")
    if shape.use_psum_layout and api.gemm_type != 1:
        raise ValueError(f"{where}: use_psum_layout applies to m-grouped contiguous GEMMs only")
    if shape.fp4_b and (api.bf16 or api.gemm_type == 4 or out_dtype != "bf16" or shape.has_c or shape.k % 32):
        raise ValueError(f"{where}: fp4_b (a packed FP4 B) needs an FP8 dense or m-grouped API, BF16 D, no C and k a "
                         f"multiple of 32")
    if (shape.a_1x32 or shape.fp4_a) and not shape.fp4_b:
        raise ValueError(f"{where}: a_1x32 and fp4_a describe the A of an FP8 x FP4 GEMM: set fp4_b too")
    fp32 = out_dtype == "fp32"
    m_values = gemm_m_values(shape, api, max_tokens)
    kernels = _C.render_gemm_kernels(
        m_values, shape.n, shape.k, num_sms=num_sms, cluster_ctas=cluster_ctas, per_row_sfb=fp32 and not api.bf16,
        bf16=api.bf16, mn_major_a=api.mn_major_a, mn_major_b=api.mn_major_b, fp32_out=fp32 and api.bf16,
        has_c=shape.has_c, gemm_type=2 if shape.use_psum_layout else api.gemm_type, num_groups=shape.num_groups,
        max_m=shape.max_m, compiled_dims=api.compiled_dims if shape.compiled_dims is None else shape.compiled_dims,
        fp4_b=shape.fp4_b)
    what = "expected_m" if api.gemm_type == 3 else "M"
    out = [dict(k, label=f"{where}, {what} {_values_text(k['values'])}"
                         f"{' (the first GEMM of a process)' if k['first_plan_only'] else ''}") for k in kernels]
    # The small kernels the API launches around the GEMM
    helpers: list[tuple[str, dict]] = []
    if api.fp8_scale_transform:
        helpers.append(("smxx_transpose_sf", {}))  # scales not yet MN-major and TMA-aligned
    if api.gemm_type == 1 and shape.ensure_zero_padding:
        helpers.append(("smxx_zero_padding_rows", {"psum_layout": int(shape.use_psum_layout)}))
    elif api.gemm_type == 1 and not shape.use_psum_layout:  # (per-row without it: the group segments' padding rows)
        helpers.append(("smxx_zero_padding_rows", {"group_segments": 1}))
    if shape.fp4_b:
        helpers.append(("smxx_pack_ue8m0", {}))  # FP32 1x32 scales packed into the kernel's exponent words
    if shape.a_1x32 or shape.fp4_a:
        helpers.append(("smxx_fold_scales", {"fp4_in": int(shape.fp4_a)}))
    if api.transposes_operands:
        for mn in sorted({*m_values, shape.n}):
            helpers.append(("smxx_transpose_fp8", {"aligned": int(mn % 16 == 0)}))
    for family, params in helpers:
        out.append(dict(family=family, source=_C.render_kernel(family, params), label=f"{where} ({family})"))
    return out


def _mqa_kernels(shape: MqaLogitsShape) -> list[dict]:
    if shape.logits_dtype not in ("fp32", "bf16"):
        raise ValueError(f"{shape.label()}: logits_dtype must be 'fp32' or 'bf16', got {shape.logits_dtype!r}")
    kernels = _C.render_mqa_logits_kernels(shape.num_heads, shape.head_dim, is_compressed=shape.compressed,
                                           clean_logits=shape.clean_logits, out_bf16=shape.logits_dtype == "bf16")
    return [dict(k, label=shape.label()) for k in kernels]


def _paged_mqa_kernels(shape: PagedMqaLogitsShape, max_tokens: int) -> list[dict]:
    where = shape.label()
    if shape.logits_dtype not in ("fp32", "bf16"):
        raise ValueError(f"{where}: logits_dtype must be 'fp32' or 'bf16', got {shape.logits_dtype!r}")
    _check_positive(shape.max_context_len, f"{where}: max_context_len")
    max_batch = shape.max_batch if shape.max_batch is not None else max_tokens
    _check_positive(max_batch, f"{where}: max_batch (or max_tokens)")
    # (the config changes with the logits width at thresholds: every power of two up to it, and it)
    widths = [1 << i for i in range(shape.max_context_len.bit_length()) if 1 << i < shape.max_context_len]
    widths.append(shape.max_context_len)
    kernels = _C.render_paged_mqa_logits_kernels(
        shape.next_n, shape.num_heads, shape.head_dim, block_kv=shape.block_kv,
        is_2d_context_lens=shape.context_lens_2d, clean_logits=shape.clean_logits, max_context_lens=widths,
        out_bf16=shape.logits_dtype == "bf16", has_indices=shape.indices, max_batch=max_batch)
    return [dict(k, label=where) for k in kernels]


def plan_kernels(shapes: list[Shape], max_tokens: int, num_sms: int, cluster_ctas: list[int]) -> list[PlannedKernel]:
    """The distinct kernels (by family and rendered source) the call sites need, in order of first appearance."""
    planned: dict[tuple[str, str], PlannedKernel] = {}
    for shape in shapes:
        if isinstance(shape, GemmShape):
            kernels = _gemm_kernels(shape, max_tokens, num_sms, cluster_ctas)
        elif isinstance(shape, MqaLogitsShape):
            kernels = _mqa_kernels(shape)
        elif isinstance(shape, PagedMqaLogitsShape):
            kernels = _paged_mqa_kernels(shape, max_tokens)
        elif isinstance(shape, RenderedKernel):
            kernels = [dict(family=shape.family, source=shape.source, label=shape.label())]
        else:
            raise TypeError(f"shapes: expected GemmShape, MqaLogitsShape, PagedMqaLogitsShape or RenderedKernel, got "
                            f"{type(shape).__name__}")
        for k in kernels:
            entry = planned.setdefault((k["family"], k["source"]), PlannedKernel(k["family"], k["source"]))
            if k["label"] not in entry.needed_by:
                entry.needed_by.append(k["label"])
    return list(planned.values())


def _convert(value: Any, annotation: str, where: str) -> Any:
    """A field value from JSON or CLI text, by the field's declared type."""
    text = isinstance(value, str)
    if value is None and "None" in annotation:
        return None
    if "tuple" in annotation:
        items = value.split("/") if text else value
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"{where} must be a list of integers, got {value!r}")
        return tuple(_convert(item, "int", f"{where}[{i}]") for i, item in enumerate(items))
    if "bool" in annotation:
        if text and value.lower() in ("1", "true", "yes"):
            return True
        if text and value.lower() in ("0", "false", "no"):
            return False
        if isinstance(value, bool):
            return value
        raise ValueError(f"{where} must be a boolean (true/false or 1/0), got {value!r}")
    if "int" in annotation:
        try:
            number = int(value) if text else value
        except ValueError:
            number = None
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ValueError(f"{where} must be a non-negative integer, got {value!r}")
        return number
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}")
    return value


def shape_from_fields(api: str, fields: dict[str, Any], where: str) -> Shape:
    """A shape of `api` from named fields (a JSON object or CLI key=value pairs); errors name `where` and the field."""
    cls = SHAPE_TYPES.get(api, GemmShape)
    hints = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    if cls is GemmShape:
        if GEMM_API_ALIASES.get(api, api) not in GEMM_APIS:
            raise ValueError(f"{where}: unknown api {api!r}; known: {sorted(GEMM_APIS) + sorted(SHAPE_TYPES)}")
        fields = {"api": api, **fields}
    kwargs = {}
    for name, value in fields.items():
        if name not in hints:
            raise ValueError(f"{where}: unknown field {name!r} for {api}; it takes {sorted(set(hints) - {'api'})}")
        kwargs[name] = _convert(value, hints[name], f"{where}.{name}")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.name not in kwargs]
    if required:
        raise ValueError(f"{where}: field {required[0]!r} is missing for {api}")
    return cls(**kwargs)


def parse_shape_text(text: str) -> Shape:
    """A shape from the command line's form 'api:field=value,field=value' (lists as 1/64/128)."""
    api, sep, rest = text.partition(":")
    fields = {}
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--shapes {text!r}: expected field=value, got {item!r}")
        fields[name.strip()] = value.strip()
    return shape_from_fields(api.strip(), fields, f"--shapes {text!r}")

