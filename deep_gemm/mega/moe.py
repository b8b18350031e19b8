"""The Mega MoE calls: ``fp8_mega_moe`` (SM90, FP8 x FP8), ``fp8_fp4_mega_moe`` (FP8 activations x FP4 weights),
``bf16_mega_moe`` and the SGLang fork's ``mega_moe_pre_dispatch_sm90``.

Stage 1 (this module): route + gather (one extension step, impls/smxx_mega_moe.cuh; 1x32 activation scales folded to
1x128), linear 1 through the m-grouped contiguous GEMM (psum layout, the expert segments' ends computed on the device;
FP8 x FP8: one pass with per-row weight scales and FP32 output; FP8 x FP4: the FP4 mode, BF16 output), SwiGLU +
routing weight (+ FP8 quantization: FP32 1x128 scales, or UE8M0 1x32 folded to 1x128 for FP4 weights) in a small
kernel, linear 2 through the grouped GEMM again, and a combine kernel; group barriers
(PyTorch symmetric memory) between the steps that read what peers wrote. No host synchronization (the expert-id
check runs only with ``DG_DEBUG_CHECKS=1``), so a call can be captured in a CUDA graph. docs/design.md ("Mega MoE") gives the plan
of stage 2, the fused kernel.
"""

from __future__ import annotations

import torch

from deep_gemm import _C
from deep_gemm.mega.buffer import ACTIVATIONS, SymmBuffer
from deep_gemm.mega.layout import received_rows_bound
from deep_gemm.mega.weights import interleaved_row_scales
from deep_gemm.utils.casts import debug_checks_enabled, per_token_cast_to_fp8

__all__ = ["bf16_mega_moe", "fp8_fp4_mega_moe", "fp8_mega_moe", "mega_moe_pre_dispatch_sm90"]

FP8_SM90_RECIPE = (128, 128, 128)


# ------------------------------------------------------------------------------------------------ argument checks
def _check_tensor(fn: str, name: str, t: object, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{fn}: {name} must have dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{fn}: {name} must have shape {list(shape)}, got {list(t.shape)}")
    return t


def _check_devices(fn: str, sym_buffer: SymmBuffer, tensors: dict[str, torch.Tensor | None]) -> None:
    """Devices last (as the extension's checks): every tensor on the buffer's CUDA device."""
    device = sym_buffer.storage.device
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{fn}: {name} must be on the buffer's device {device}, got {t.device}")
    if device.type != "cuda":
        raise ValueError(f"{fn}: sym_buffer must be on a CUDA device, got {device}")


def _check_pair(fn: str, name: str, pair: object) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{fn}: {name} must be a (weights, scales) pair, got {type(pair).__name__}")
    return pair[0], pair[1]


def _check_common(
    fn: str, y, sym_buffer, cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math, use_fp8: bool
) -> int:
    """Check what every Mega MoE call shares; return T."""
    if not isinstance(sym_buffer, SymmBuffer):
        raise TypeError(f"{fn}: sym_buffer must be a deep_gemm.mega.SymmBuffer, got {type(sym_buffer).__name__}")
    if sym_buffer.storage is None:
        raise ValueError(f"{fn}: sym_buffer was destroyed")
    if sym_buffer.use_fp8_dispatch != use_fp8:
        types = "'fp8xfp4' or 'fp8xfp8'" if use_fp8 else "'bf16xbf16'"
        raise ValueError(
            f"{fn}: sym_buffer must be allocated with use_fp8_dispatch={use_fp8} (mma_type "
            f"{types}), got mma_type={sym_buffer.mma_type!r}, "
            f"use_fp8_dispatch={sym_buffer.use_fp8_dispatch}"
        )
    layout = sym_buffer.layout
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"{fn}: y must be a torch.Tensor, got {type(y).__name__}")
    if y.dtype != torch.bfloat16 or y.dim() != 2 or y.shape[1] != layout.hidden:
        raise ValueError(f"{fn}: y must be BF16 [T, hidden={layout.hidden}], got {y.dtype} {list(y.shape)}")
    if y.shape[0] > layout.num_max_tokens_per_rank:
        raise ValueError(
            f"{fn}: y has T = {y.shape[0]} rows, more than the buffer's num_max_tokens_per_rank = "
            f"{layout.num_max_tokens_per_rank}"
        )
    if y.shape[0] > 0 and (y.stride(1) != 1 or y.stride(0) % 8 != 0 or y.data_ptr() % 16 != 0):
        raise ValueError(f"{fn}: y must be row-major with 16-byte aligned rows, got strides {y.stride()}")
    if cumulative_local_expert_recv_stats is not None:
        _check_tensor(
            fn,
            "cumulative_local_expert_recv_stats",
            cumulative_local_expert_recv_stats,
            torch.int32,
            (layout.num_local_experts,),
        )
        if not cumulative_local_expert_recv_stats.is_contiguous():
            raise ValueError(f"{fn}: cumulative_local_expert_recv_stats must be contiguous")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{fn}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    if activation_clamp is not None:
        if (
            isinstance(activation_clamp, bool)
            or not isinstance(activation_clamp, (int, float))
            or not activation_clamp > 0
        ):
            raise ValueError(f"{fn}: activation_clamp must be None or a positive number, got {activation_clamp!r}")
    if not isinstance(fast_math, bool):
        raise TypeError(f"{fn}: fast_math must be a bool, got {type(fast_math).__name__}")
    return y.shape[0]


def _check_pair_devices(fn: str, sym_buffer: SymmBuffer, y, l1: tuple, l2: tuple, stats) -> None:
    """:func:`_check_devices` of a call with (weights, scales) pairs."""
    tensors = {"y": y, "l1_weights[0]": l1[0], "l1_weights[1]": l1[1], "l2_weights[0]": l2[0], "l2_weights[1]": l2[1]}
    _check_devices(fn, sym_buffer, {**tensors, "cumulative_local_expert_recv_stats": stats})


def _reads_values(t: torch.Tensor) -> bool:
    """Whether a check may read ``t``'s values on the host: a CPU tensor always; a CUDA one (a host synchronization)
    only with ``DG_DEBUG_CHECKS=1`` and never while a CUDA graph is captured."""
    return not t.is_cuda or (debug_checks_enabled() and not torch.cuda.is_current_stream_capturing())


def _check_expert_ids(fn: str, sym_buffer: SymmBuffer, num_tokens: int) -> None:
    """Raise when this rank's top-k ids hold a value outside [-1, E). Reading them is a host synchronization, so, as
    every deep_gemm API does (docs/design.md, "No host synchronization on default paths"), CUDA buffers are checked
    only with ``DG_DEBUG_CHECKS=1`` and never while a CUDA graph is captured; the kernels ignore such ids (the slot
    routes nowhere), so bad values give defined output either way."""
    if num_tokens == 0:
        return
    ids = sym_buffer.topk_idx[:num_tokens]
    if not _reads_values(ids):
        return
    num_experts = sym_buffer.layout.num_experts
    bad = ((ids < -1) | (ids >= num_experts)).any()
    if bool(bad):
        raise ValueError(
            f"{fn}: sym_buffer.topk_idx (the first T = {num_tokens} rows) must hold expert ids in "
            f"[0, num_experts = {num_experts}) or -1, got values in [{int(ids.min())}, {int(ids.max())}]"
        )


# An FP32 1x128 scale at or past this is no activation's (amax / 448 of 7.5e9): it is a packed UE8M0 word copied in
# as a number (its top byte, the fourth scale's exponent, puts it at 2^24 or more)
_FP32_SCALE_LIMIT = float(2**24)


def _check_x_scales(fn: str, sym_buffer: SymmBuffer, num_tokens: int) -> None:
    """With ``DG_DEBUG_CHECKS=1`` (a host sync; never during CUDA-graph capture): raise when an FP32 ``x_sf`` holds a
    value no 1x128 scale takes, which is what copying the reference's packed UE8M0 words (int32) into it gives (the
    copy converts each word to a number); such a call runs on wrong scales without an error otherwise."""
    x_sf = sym_buffer.x_sf
    if num_tokens == 0 or x_sf is None or x_sf.dtype != torch.float32:
        return
    if not _reads_values(x_sf):
        return
    sf = x_sf[:num_tokens]
    if bool(((sf >= _FP32_SCALE_LIMIT) | (sf < 0) | sf.isnan()).any()):
        raise ValueError(
            f"{fn}: sym_buffer.x_sf (the first T = {num_tokens} rows) must hold FP32 1x128 scales (non-negative, below "
            f"2^24), got values up to {float(sf.max())}: packed UE8M0 words copied in? Use "
            "get_symm_buffer_for_mega_moe(..., packed_x_sf=True) for per_token_cast_to_fp8(x, use_ue8m0=True, "
            "gran_k=32, use_packed_ue8m0=True)'s scales"
        )


def _check_tokens_bound(fn: str, sym_buffer: SymmBuffer, num_tokens: int, num_tokens_bound) -> None:
    if num_tokens_bound is None:
        return
    if isinstance(num_tokens_bound, bool) or not isinstance(num_tokens_bound, int):
        raise TypeError(f"{fn}: num_tokens_bound must be an int or None, got {type(num_tokens_bound).__name__}")
    limit = sym_buffer.layout.num_max_tokens_per_rank
    if not num_tokens <= num_tokens_bound <= limit:
        raise ValueError(
            f"{fn}: num_tokens_bound must be in [T = {num_tokens}, num_max_tokens_per_rank = {limit}], "
            f"got {num_tokens_bound}"
        )


def _rows_for_call(fn: str, sym_buffer: SymmBuffer, num_tokens: int, num_tokens_bound) -> int:
    layout = sym_buffer.layout
    # One rank: its own T bounds what it receives. Several: any peer may send up to the bound.
    bound = num_tokens if sym_buffer.num_ranks == 1 else (num_tokens_bound or layout.num_max_tokens_per_rank)
    alignment = _C.get_mk_alignment_for_contiguous_layout()
    rows = received_rows_bound(sym_buffer.num_ranks, bound, layout.num_topk, layout.num_local_experts, alignment)
    if rows > layout.max_rows:
        raise ValueError(
            f"{fn}: get_mk_alignment_for_contiguous_layout() is {alignment} but sym_buffer was sized for "
            f"{layout.alignment}: allocate the buffer after setting the alignment"
        )
    return rows


# ------------------------------------------------------------------------------------------------ the pipeline
_ROW_SCALES_ATTR = "_deep_gemm_mega_l1_row_scales"


def _l1_row_scales(block_scales: torch.Tensor) -> torch.Tensor:
    """:func:`interleaved_row_scales` of linear 1's block scales, computed once per scale tensor: kept on the tensor
    object with its version counter, so an in-place change of the scales recomputes them. (Keyed on the object, not on
    its address: a freed tensor's address may come back holding other scales.) Inference-mode tensors have no version
    counter: theirs are computed once, so scales created under ``torch.inference_mode()`` and then changed in place
    (inside it) keep their first expansion; pass a new scale tensor instead."""
    version = None if block_scales.is_inference() else block_scales._version
    cached = getattr(block_scales, _ROW_SCALES_ATTR, None)
    if cached is not None and cached[0] == version:
        return cached[1]
    rows = interleaved_row_scales(block_scales)
    setattr(block_scales, _ROW_SCALES_ATTR, (version, rows))
    return rows


def _swiglu_and_quantize(
    sym_buffer: SymmBuffer, rows: int, l1_out: torch.Tensor, activation_clamp, fast_math: bool, ue8m0_x32: bool
) -> None:
    """SwiGLU(gate, up) x routing weight of every received row of l1_out (FP32 on the FP8 x FP8 path, BF16 otherwise;
    gate and up interleaved by 8) into l2_acts (FP8 + FP32 1x128 scales, FP8 quantized per 1x32 with UE8M0 scales
    and folded to 1x128 with ``ue8m0_x32``, or BF16).

    The one place stage 1 computes the activation: a fused silu_and_mul + quantize kernel can replace this body."""
    layout = sym_buffer.layout
    l2_acts = sym_buffer.view("l2_acts")[:rows]
    l2_sf = sym_buffer.view("l2_acts_sf", rows) if layout.use_fp8 else None
    _C._mega_moe_swiglu(
        sym_buffer.peers,
        layout.kernel_layout(sym_buffer.rank),
        rows,
        layout.intermediate_hidden,
        sym_buffer.view("src_of_row"),
        l1_out,
        l2_acts,
        l2_sf,
        None if activation_clamp is None else float(activation_clamp),
        fast_math,
        ue8m0_x32,
    )


def _fp8_gemm_step(gemm, b_pair, **kwargs):
    """A stage-1 linear of the FP8 paths: ``gemm((a, a_sf), b_pair, d, ends)`` (an m-grouped contiguous FP8 or FP8 x
    FP4 GEMM) on the received rows' psum layout, their padding rows left as they are."""

    def step(a, a_sf, d, ends):
        gemm((a, a_sf), b_pair, d, ends, use_psum_layout=True, ensure_zero_padding=False, **kwargs)

    return step


def _bf16_gemm_step(b):
    """A stage-1 linear of the BF16 path (as :func:`_fp8_gemm_step`; no scales)."""

    def step(a, a_sf, d, ends):
        _C.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True, ensure_zero_padding=False)

    return step


def _run_mega_moe(
    fn: str,
    y,
    l1_gemm,
    l2_gemm,
    sym_buffer: SymmBuffer,
    stats,
    activation_clamp,
    fast_math,
    num_tokens_bound,
    fp4_weights: bool = False,
) -> None:
    """The stage-1 pipeline of one call (see the module docstring); l1_gemm(a, a_sf, d, ends) and
    l2_gemm(a, a_sf, d, ends) run the grouped GEMMs on the received rows. ``fp4_weights``: linear 1 writes BF16 into
    the (FP32-sized) l1_out region, and the SwiGLU quantizes per 1x32 with UE8M0 scales."""
    num_tokens = y.shape[0]
    rows = _rows_for_call(fn, sym_buffer, num_tokens, num_tokens_bound)
    _check_expert_ids(fn, sym_buffer, num_tokens)
    _check_x_scales(fn, sym_buffer, num_tokens)
    if rows == 0:  # (one rank, no tokens: nothing is received or sent)
        return
    layout = sym_buffer.layout
    kernel_layout = layout.kernel_layout(sym_buffer.rank)
    sym_buffer.num_tokens[0].fill_(num_tokens)
    sym_buffer.barrier()

    psum_ends = sym_buffer.view("psum_ends")
    l1_acts = sym_buffer.view("l1_acts")[:rows]
    l1_sf = sym_buffer.view("l1_acts_sf", rows) if layout.use_fp8 else None
    _C._mega_moe_dispatch(
        sym_buffer.peers,
        kernel_layout,
        _C.get_mk_alignment_for_contiguous_layout(),
        rows,
        sym_buffer.view("src_of_row"),
        psum_ends,
        stats,
        l1_acts,
        l1_sf,
    )

    l1_out = sym_buffer.view("l1_out")
    if fp4_weights:
        # (the FP8 x FP4 GEMM writes BF16: the first rows * 2I BF16 values of the region, row-major)
        l1_out = l1_out.view(-1).view(torch.bfloat16)[: rows * l1_out.shape[1]].view(rows, l1_out.shape[1])
    else:
        l1_out = l1_out[:rows]
    l1_gemm(l1_acts, l1_sf, l1_out, psum_ends)
    _swiglu_and_quantize(sym_buffer, rows, l1_out, activation_clamp, fast_math, fp4_weights)

    l2_acts = sym_buffer.view("l2_acts")[:rows]
    l2_sf = sym_buffer.view("l2_acts_sf", rows) if layout.use_fp8 else None
    l2_gemm(l2_acts, l2_sf, sym_buffer.view("l2_out")[:rows], psum_ends)
    sym_buffer.barrier()
    _C._mega_moe_combine(sym_buffer.peers, kernel_layout, y)
    sym_buffer.barrier()


def fp8_mega_moe(
    y,
    l1_weights,
    l2_weights,
    sym_buffer,
    cumulative_local_expert_recv_stats=None,
    recipe=FP8_SM90_RECIPE,
    activation="swiglu",
    activation_clamp=None,
    fast_math=True,
    num_tokens_bound=None,
):
    """One MoE layer on SM90 with FP8 weights and activations: ``y[t] = sum_j L2_e(w[t, j] * SwiGLU(L1_e(x_t)))``.

    Before the call each rank fills its buffer's first T rows (T = ``y.shape[0]``): ``x`` (FP8 e4m3) and ``x_sf``
    (FP32 1x128 scales), ``topk_idx`` (global ids, -1 for none) and ``topk_weights`` (FP32), e.g. with
    :func:`mega_moe_pre_dispatch_sm90`. Rank r owns experts ``[r E/R, (r+1) E/R)``. ``SwiGLU(g, u) = silu(g) * u``,
    with ``activation_clamp`` c: g clamped to at most c and u to [-c, c] first. The SwiGLU output times the
    routing weight is quantized to FP8 with FP32 1x128 scales (amax / 448, amax floored at 1e-4) before linear 2.

    Args:
        y: BF16 ``[T, hidden]``, row-major, written (tokens routed nowhere get zeros).
        l1_weights: from :func:`transform_weights_for_mega_moe_sm90`: ``(FP8 [E_local, 2 I, hidden] with gate/up
            rows interleaved by 8, FP32 [E_local, 2 I / 128, hidden / 128] block scales of the original rows)``.
        l2_weights: ``(FP8 [E_local, hidden, I], FP32 [E_local, hidden / 128, I / 128])``.
        sym_buffer: from :func:`get_symm_buffer_for_sm90_mega_moe` (FP8 dispatch).
        cumulative_local_expert_recv_stats: None, or int32 ``[E_local]``: += the rows each local expert received.
        recipe: ``(128, 128, 128)``: 128 x 128 weight blocks, 1 x 128 activation groups.
        activation: ``'swiglu'``.
        activation_clamp: None or a positive number (see above).
        fast_math: approximate exp and division in SiLU.
        num_tokens_bound: None, or an upper bound on every rank's T this call (sizes the grouped GEMMs' M; with a
            group of one, T itself is used). Rows past it are dropped, never written out of bounds.

    Raises:
        TypeError / ValueError: naming the argument of the wrong type, dtype, shape or device; T above the
            buffer's ``num_max_tokens_per_rank``; with ``DG_DEBUG_CHECKS=1`` (a host sync; never during CUDA-graph
            capture), expert ids outside ``[-1, E)`` in ``sym_buffer.topk_idx``. Without it such ids route nowhere.
        NotImplementedError: off SM90 (from the kernels).
    """
    fn = "fp8_mega_moe"
    num_tokens = _check_common(
        fn, y, sym_buffer, cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math, use_fp8=True
    )
    _check_tokens_bound(fn, sym_buffer, num_tokens, num_tokens_bound)
    if not isinstance(recipe, (tuple, list)) or tuple(recipe) != FP8_SM90_RECIPE:
        raise ValueError(
            f"{fn}: recipe must be {FP8_SM90_RECIPE} (128 x 128 weight blocks, 1 x 128 activations), got {recipe!r}"
        )
    layout = sym_buffer.layout
    e_local, hidden, inter = layout.num_local_experts, layout.hidden, layout.intermediate_hidden
    w1, s1 = _check_pair(fn, "l1_weights", l1_weights)
    w2, s2 = _check_pair(fn, "l2_weights", l2_weights)
    _check_tensor(fn, "l1_weights[0]", w1, torch.float8_e4m3fn, (e_local, 2 * inter, hidden))
    _check_tensor(fn, "l1_weights[1]", s1, torch.float32, (e_local, 2 * inter // 128, hidden // 128))
    _check_tensor(fn, "l2_weights[0]", w2, torch.float8_e4m3fn, (e_local, hidden, inter))
    _check_tensor(fn, "l2_weights[1]", s2, torch.float32, (e_local, hidden // 128, inter // 128))
    _check_pair_devices(fn, sym_buffer, y, (w1, s1), (w2, s2), cumulative_local_expert_recv_stats)

    # NOTES: a 128-row block of the interleaved L1 weight holds 64 gate rows and 64 up rows, whose scales differ, so
    # L1 runs once on the grouped GEMM's recipe (1, 1, 128): every interleaved row scaled by its original block's
    # scale (computed once per scale tensor, _l1_row_scales), FP32 output (docs/design.md, "Mega MoE").
    s1_rows = _l1_row_scales(s1)

    gemm = _C.m_grouped_fp8_gemm_nt_contiguous
    l1_gemm, l2_gemm = _fp8_gemm_step(gemm, (w1, s1_rows), recipe=(1, 1, 128)), _fp8_gemm_step(gemm, (w2, s2))
    _run_mega_moe(fn, y, l1_gemm, l2_gemm, sym_buffer, cumulative_local_expert_recv_stats, activation_clamp, fast_math,
                  num_tokens_bound)  # fmt: skip


def bf16_mega_moe(
    y,
    l1_weights,
    l2_weights,
    sym_buffer,
    cumulative_local_expert_recv_stats=None,
    activation="swiglu",
    activation_clamp=None,
    fast_math=True,
):
    """One MoE layer with BF16 weights and activations: ``y[t] = sum_j L2_e(w[t, j] * SwiGLU(L1_e(x_t)))``.

    As :func:`fp8_mega_moe` without scales: the buffer's ``x`` is BF16, and the SwiGLU output times the routing
    weight is rounded to BF16 before linear 2.

    Args:
        y: BF16 ``[T, hidden]``, row-major, written.
        l1_weights: BF16 ``[E_local, 2 I, hidden]`` from :func:`transform_weights_for_mega_moe` (gate/up rows
            interleaved by 8).
        l2_weights: BF16 ``[E_local, hidden, I]``.
        sym_buffer: from :func:`get_symm_buffer_for_mega_moe` with ``mma_type='bf16xbf16'``.
        cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math: as :func:`fp8_mega_moe`.

    Raises:
        TypeError / ValueError: as :func:`fp8_mega_moe`.
        NotImplementedError: off SM90.
    """
    fn = "bf16_mega_moe"
    _check_common(
        fn, y, sym_buffer, cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math, use_fp8=False
    )
    layout = sym_buffer.layout
    e_local, hidden, inter = layout.num_local_experts, layout.hidden, layout.intermediate_hidden
    _check_tensor(fn, "l1_weights", l1_weights, torch.bfloat16, (e_local, 2 * inter, hidden))
    _check_tensor(fn, "l2_weights", l2_weights, torch.bfloat16, (e_local, hidden, inter))
    _check_devices(
        fn,
        sym_buffer,
        {
            "y": y,
            "l1_weights": l1_weights,
            "l2_weights": l2_weights,
            "cumulative_local_expert_recv_stats": cumulative_local_expert_recv_stats,
        },
    )

    _run_mega_moe(fn, y, _bf16_gemm_step(l1_weights), _bf16_gemm_step(l2_weights), sym_buffer,
                  cumulative_local_expert_recv_stats, activation_clamp, fast_math, None)  # fmt: skip


def _check_fp4_weight(fn: str, name: str, pair, rows: int, k: int, e_local: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An FP4 weight ``(int8/uint8 [E_local, rows, k / 2], scales)``, the scales per row and 1x32 of K: FP32
    ``[E_local, rows, k / 32]`` or UE8M0 packed four to an int32 ``[E_local, rows, k / 128]`` (any strides)."""
    w, sf = _check_pair(fn, name, pair)
    for part, t in (("[0]", w), ("[1]", sf)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name}{part} must be a torch.Tensor, got {type(t).__name__}")
    if w.dtype not in (torch.int8, torch.uint8):
        raise ValueError(
            f"{fn}: {name}[0] must be packed FP4 (int8 or uint8, two e2m1 values a byte), got "
            f"{getattr(w, 'dtype', type(w).__name__)}"
        )
    _check_tensor(fn, f"{name}[0]", w, w.dtype, (e_local, rows, k // 2))
    if sf.dtype not in (torch.float32, torch.int32):
        raise ValueError(
            f"{fn}: {name}[1] must be FP32 1x32 scales or packed UE8M0 int32 words, got "
            f"{getattr(sf, 'dtype', type(sf).__name__)}"
        )
    cols = k // 32 if sf.dtype == torch.float32 else k // 128
    _check_tensor(fn, f"{name}[1]", sf, sf.dtype, (e_local, rows, cols))
    return w, sf


def fp8_fp4_mega_moe(
    y,
    l1_weights,
    l2_weights,
    sym_buffer,
    cumulative_local_expert_recv_stats=None,
    recipe=(1, 1, 32),
    activation="swiglu",
    activation_clamp=None,
    fast_math=True,
):
    """One MoE layer with FP8 activations and FP4 expert weights: ``y[t] = sum_j L2_e(w[t, j] * SwiGLU(L1_e(x_t)))``.

    Before the call each rank fills its buffer's first T rows (T = ``y.shape[0]``): ``x`` (FP8 e4m3) and ``x_sf``
    (FP32 1x128 scales; a ``packed_x_sf`` buffer takes UE8M0 1x32 scales packed four to an int32, from
    ``per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)``),
    ``topk_idx`` and ``topk_weights``, as for :func:`fp8_mega_moe`. On SM90 the FP4 weights stay FP4 in memory and
    become e4m3 in shared memory on their way to the tensor cores (the FP8 x FP4 grouped GEMM); the activations'
    1x32 scales are folded into 1x128 ones (exact except for values below 2^-6 of their 128-block's scale, which
    round to e4m3's subnormal grid: docs/design.md). The SwiGLU output times the routing weight is quantized per
    1x32 with UE8M0 scales (amax floored at 1e-4, scale ``2^ceil(log2(amax / 448))``) and folded the same way before
    linear 2. Linear 1's output is rounded to BF16 before the SwiGLU.

    Args:
        y: BF16 ``[T, hidden]``, row-major, written (tokens routed nowhere get zeros).
        l1_weights: from :func:`transform_weights_for_mega_moe`: ``(FP4 int8/uint8 [E_local, 2 I, hidden / 2] with
            gate/up rows interleaved by 8, scales per row and 1x32: FP32 [E_local, 2 I, hidden / 32] or packed UE8M0
            int32 [E_local, 2 I, hidden / 128])``. FP32 scales must be powers of two (UE8M0).
        l2_weights: ``(FP4 [E_local, hidden, I / 2], scales [E_local, hidden, I / 32] FP32 or [.., I / 128] int32)``.
        sym_buffer: an FP8-dispatch buffer (:func:`get_symm_buffer_for_mega_moe`).
        cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math: as :func:`fp8_mega_moe`.
        recipe: ``(1, 1, 32)``: per-row 1x32 scales of activations and weights.

    Raises:
        TypeError / ValueError: as :func:`fp8_mega_moe`, naming the argument.
        NotImplementedError: off SM90 (from the kernels).
    """
    fn = "fp8_fp4_mega_moe"
    _check_common(
        fn, y, sym_buffer, cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math, use_fp8=True
    )
    if not isinstance(recipe, (tuple, list)) or tuple(recipe) != (1, 1, 32):
        raise ValueError(f"{fn}: recipe must be (1, 1, 32) (1x32 scales of activations and weights), got {recipe!r}")
    layout = sym_buffer.layout
    e_local, hidden, inter = layout.num_local_experts, layout.hidden, layout.intermediate_hidden
    w1, s1 = _check_fp4_weight(fn, "l1_weights", l1_weights, 2 * inter, hidden, e_local)
    w2, s2 = _check_fp4_weight(fn, "l2_weights", l2_weights, hidden, inter, e_local)
    _check_pair_devices(fn, sym_buffer, y, (w1, s1), (w2, s2), cumulative_local_expert_recv_stats)

    # (the activations arrive with FP32 1x128 scales: the dispatch and the SwiGLU fold 1x32 ones; the extension's
    # m-grouped FP8 GEMM takes a packed FP4 B, as the reference's m_grouped_fp8_fp4_gemm_nt_contiguous name does)
    gemm = _C.m_grouped_fp8_gemm_nt_contiguous
    _run_mega_moe(fn, y, _fp8_gemm_step(gemm, (w1, s1)), _fp8_gemm_step(gemm, (w2, s2)), sym_buffer,
                  cumulative_local_expert_recv_stats, activation_clamp, fast_math, None, fp4_weights=True)  # fmt: skip


def mega_moe_pre_dispatch_sm90(
    x,
    topk_idx,
    topk_weights,
    buf_x,
    buf_x_sf,
    buf_topk_idx,
    buf_topk_weights,
    num_tokens,
    group_size=128,
    routed_scaling_factor=1.0,
):
    """Quantize ``x[:num_tokens]`` to FP8 into ``buf_x`` / ``buf_x_sf`` in the buffer's format, and copy the routing
    into ``buf_topk_idx`` / ``buf_topk_weights`` (the weights times ``routed_scaling_factor``).

    The format is ``buf_x_sf``'s: FP32 (an FP8 buffer's default) takes FP32 1 x ``group_size`` scales; int32 (a
    ``packed_x_sf`` buffer) takes UE8M0 1x32 scales packed four to a word, whatever ``group_size`` (32 or the default
    128) says, since that buffer has one format. On CUDA tensors one kernel (impls/smxx_mega_moe.cuh, step 0) does it
    all, with the bytes of :func:`deep_gemm.utils.per_token_cast_to_fp8` (``use_ue8m0=True, gran_k=32,
    use_packed_ue8m0=True`` for the packed format) and of ``topk_weights.float() * routed_scaling_factor`` (an FP32
    product); CPU tensors (the buffer emulated in tests) take those PyTorch ops.

    Args:
        x: BF16 ``[>= num_tokens, hidden]``, unit column stride. topk_idx: int64 or int32 ``[>= num_tokens, k]``.
            topk_weights: FP32, BF16 or FP16 ``[>= num_tokens, k]``.
        buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights: the buffer's views (``SymmBuffer.x`` and so on).
        num_tokens: T, an int in ``[0, buf_x.shape[0]]``.
        group_size: 128 (the SM90 activation recipe); with an int32 ``buf_x_sf`` also 32.
        routed_scaling_factor: multiplies the routing weights (in FP32).

    Raises:
        TypeError / ValueError: naming the argument of the wrong type, dtype, shape, stride or device.
        NotImplementedError: CUDA tensors off SM90.
    """
    fn = "mega_moe_pre_dispatch_sm90"
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int):
        raise TypeError(f"{fn}: num_tokens must be an int, got {type(num_tokens).__name__}")
    packed = isinstance(buf_x_sf, torch.Tensor) and buf_x_sf.dtype == torch.int32
    if group_size != 128 and not (packed and group_size == 32):
        raise ValueError(
            f"{fn}: group_size must be 128 on SM90 (or 32 with an int32 buf_x_sf, packed UE8M0 1x32), got "
            f"{group_size!r}"
        )
    for name, t in (
        ("x", x),
        ("topk_idx", topk_idx),
        ("topk_weights", topk_weights),
        ("buf_x", buf_x),
        ("buf_x_sf", buf_x_sf),
        ("buf_topk_idx", buf_topk_idx),
        ("buf_topk_weights", buf_topk_weights),
    ):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise TypeError(f"{fn}: {name} must be a 2-D torch.Tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if not 0 <= num_tokens <= buf_x.shape[0]:
        raise ValueError(f"{fn}: num_tokens must be in [0, {buf_x.shape[0]}] (the buffer's rows), got {num_tokens}")
    hidden, k = buf_x.shape[1], buf_topk_idx.shape[1]
    if x.dtype != torch.bfloat16 or x.shape[0] < num_tokens or x.shape[1] != hidden:
        raise ValueError(f"{fn}: x must be BF16 [>= {num_tokens}, {hidden}], got {x.dtype} {list(x.shape)}")
    if topk_idx.shape[0] < num_tokens or topk_idx.shape[1] != k or topk_idx.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{fn}: topk_idx must be int64 or int32 [>= {num_tokens}, {k}], got {topk_idx.dtype} {list(topk_idx.shape)}"
        )
    if (
        topk_weights.shape[0] < num_tokens
        or topk_weights.shape[1] != k
        or topk_weights.dtype not in (torch.float32, torch.bfloat16, torch.float16)
    ):
        raise ValueError(
            f"{fn}: topk_weights must be FP32, BF16 or FP16 [>= {num_tokens}, {k}], got {topk_weights.dtype} "
            f"{list(topk_weights.shape)}"
        )
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
        raise TypeError(f"{fn}: routed_scaling_factor must be a number, got {type(routed_scaling_factor).__name__}")
    if buf_topk_idx.dtype != torch.int64 or buf_topk_weights.dtype != torch.float32:
        raise ValueError(
            f"{fn}: buf_topk_idx must be int64 and buf_topk_weights FP32 (the buffer's views), got "
            f"{buf_topk_idx.dtype} and {buf_topk_weights.dtype}"
        )
    devices = {t.device for t in (x, topk_idx, topk_weights, buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights)}
    if len(devices) != 1:
        raise ValueError(f"{fn}: every tensor must be on one device (the buffer's), got {sorted(map(str, devices))}")
    if (
        buf_x.dtype != torch.float8_e4m3fn
        or buf_x_sf.dtype not in (torch.float32, torch.int32)
        or buf_x_sf.shape[1] != hidden // 128
    ):
        raise ValueError(
            f"{fn}: buf_x must be FP8 and buf_x_sf FP32 or int32 [*, hidden / 128] (an FP8 SymmBuffer's views), got "
            f"{buf_x.dtype} and {buf_x_sf.dtype} {list(buf_x_sf.shape)}"
        )
    if buf_x.is_cuda:
        _C._mega_moe_pre_dispatch(
            x,
            topk_idx,
            topk_weights,
            buf_x,
            buf_x_sf,
            buf_topk_idx,
            buf_topk_weights,
            num_tokens,
            float(routed_scaling_factor),
        )
        return
    pre_dispatch_reference(
        x,
        topk_idx,
        topk_weights,
        buf_x,
        buf_x_sf,
        buf_topk_idx,
        buf_topk_weights,
        num_tokens,
        group_size,
        routed_scaling_factor,
    )


def pre_dispatch_reference(
    x,
    topk_idx,
    topk_weights,
    buf_x,
    buf_x_sf,
    buf_topk_idx,
    buf_topk_weights,
    num_tokens,
    group_size=128,
    routed_scaling_factor=1.0,
) -> None:
    """:func:`mega_moe_pre_dispatch_sm90` as PyTorch ops (arguments already checked): the CPU path, and what the
    kernel is tested against bit for bit."""
    if num_tokens == 0:
        return
    if buf_x_sf.dtype == torch.int32:
        x_fp8, x_sf = per_token_cast_to_fp8(x[:num_tokens], use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    else:
        x_fp8, x_sf = per_token_cast_to_fp8(x[:num_tokens], use_ue8m0=False, gran_k=group_size)
    buf_x[:num_tokens].copy_(x_fp8)
    buf_x_sf[:num_tokens].copy_(x_sf)
    buf_topk_idx[:num_tokens].copy_(topk_idx[:num_tokens])
    buf_topk_weights[:num_tokens].copy_(topk_weights[:num_tokens].float() * routed_scaling_factor)
