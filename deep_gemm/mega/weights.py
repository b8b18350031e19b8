"""Mega MoE expert weights: the one-time transform into the layout the Mega MoE kernels read.

Linear 1's weight ``[E_local, 2 I, hidden]`` holds the gate rows then the up rows. The transform interleaves them in
groups of 8 (gate rows 8q..8q+7, then up rows 8q..8q+7, for q = 0 .. I/8 - 1), so that every tile of linear 1's
output holds the gate and up columns its SwiGLU needs side by side: the layout the fused SwiGLU epilogue of stage 2
reads, and the one stage 1's SwiGLU kernel already reads. Linear 2's weight is unchanged.
"""

from __future__ import annotations

import torch

from deep_gemm.mega.buffer import ACTIVATIONS
from deep_gemm.utils.arith import align
from deep_gemm.utils.casts import pack_ue8m0_to_int

__all__ = [
    "GATE_UP_INTERLEAVE",
    "deinterleave_gate_up",
    "fp4_scale_words",
    "interleave_gate_up",
    "interleaved_row_scales",
    "transform_weights_for_mega_moe",
    "transform_weights_for_mega_moe_sm90",
]

# Gate and up rows alternate in groups of this many (the SGLang fork's SM90 layout).
GATE_UP_INTERLEAVE = 8


def _check_rows(fn: str, name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 3:
        raise ValueError(f"{fn}: {name} must be 3-D [E_local, 2 * I, ...], got shape {tuple(t.shape)}")
    if t.shape[1] % (2 * GATE_UP_INTERLEAVE) != 0:
        raise ValueError(
            f"{fn}: {name} must have 2 * I rows with I a multiple of {GATE_UP_INTERLEAVE}, got {t.shape[1]} rows"
        )
    return t


def interleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """Rows ``[gate (I rows); up (I rows)]`` of ``t [E, 2 I, ...]`` -> gate and up alternating by 8 (a new tensor).

    Raises:
        TypeError / ValueError: ``t`` is not a 3-D tensor whose row count is ``2 I`` with ``I % 8 == 0``.
    """
    _check_rows("interleave_gate_up", "t", t)
    e, rows, cols = t.shape
    return (
        t.reshape(e, 2, rows // (2 * GATE_UP_INTERLEAVE), GATE_UP_INTERLEAVE, cols)
        .transpose(1, 2)
        .reshape(e, rows, cols)
    )


def deinterleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`interleave_gate_up` (a new tensor)."""
    _check_rows("deinterleave_gate_up", "t", t)
    e, rows, cols = t.shape
    return (
        t.reshape(e, rows // (2 * GATE_UP_INTERLEAVE), 2, GATE_UP_INTERLEAVE, cols)
        .transpose(1, 2)
        .reshape(e, rows, cols)
    )


def interleaved_row_scales(block_scales: torch.Tensor) -> torch.Tensor:
    """The 128 x 128 block scales of linear 1's original rows as one scale per row of the interleaved weight.

    Row r of the interleaved weight (:func:`interleave_gate_up`) gets the scale of the 128-row block its original
    row belongs to, for every 128 of K. A 128-row block of the interleaved weight holds 64 gate and 64 up rows whose
    blocks' scales differ, so this is what lets linear 1 run once, on the grouped GEMM's recipe (1, 1, 128).

    Args:
        block_scales: FP32 ``[E_local, 2 I / 128, hidden / 128]``.

    Returns:
        FP32 ``[E_local, 2 I, hidden / 128]``, MN-major (stride 1 along the rows): the grouped GEMM's per-row scale
        layout, so that a call needs no layout kernel.

    Raises:
        ValueError: ``block_scales`` is not a 3-D FP32 tensor.
    """
    fn = "interleaved_row_scales"
    if not isinstance(block_scales, torch.Tensor) or block_scales.dim() != 3 or block_scales.dtype != torch.float32:
        raise ValueError(
            f"{fn}: block_scales must be a 3-D FP32 tensor [E_local, 2 I / 128, hidden / 128], got "
            f"{getattr(block_scales, 'dtype', type(block_scales).__name__)} {list(getattr(block_scales, 'shape', []))}"
        )
    e, blocks, sf_k = block_scales.shape
    rows = interleave_gate_up(block_scales.repeat_interleave(128, dim=1))
    out = torch.empty(e, sf_k, blocks * 128, dtype=torch.float32, device=block_scales.device).transpose(1, 2)
    out.copy_(rows)
    return out


def _transform_l1(fn: str, l1_weights, keep_block_scales: bool):
    if isinstance(l1_weights, torch.Tensor):
        return interleave_gate_up(_check_rows(fn, "l1_weights", l1_weights))
    if not isinstance(l1_weights, (tuple, list)) or len(l1_weights) != 2:
        raise TypeError(
            f"{fn}: l1_weights must be a tensor or a (weights, scales) pair, got {type(l1_weights).__name__}"
        )
    data, sf = l1_weights
    _check_rows(fn, "l1_weights[0]", data)
    if not isinstance(sf, torch.Tensor) or sf.dim() != 3 or sf.shape[0] != data.shape[0]:
        raise ValueError(
            f"{fn}: l1_weights[1] must be a 3-D scale tensor with l1_weights[0]'s E_local = "
            f"{data.shape[0]}, got {getattr(sf, 'shape', type(sf).__name__)}"
        )
    if sf.shape[1] == data.shape[1]:
        # Per-row scales (1 x 32 or 1 x 128 along K): the rows move with the weights
        return interleave_gate_up(data), _kernel_scales(fn, "l1_weights[1]", data, interleave_gate_up(sf))
    if keep_block_scales and sf.shape[1] * 128 == data.shape[1]:
        # 128 x 128 block scales: unchanged (the kernels read the gate and up blocks' scales separately)
        return interleave_gate_up(data), sf
    raise ValueError(
        f"{fn}: l1_weights[1] must have one row per weight row ({data.shape[1]}) or, for 128 x 128 "
        f"blocks, {data.shape[1] // 128}; got {sf.shape[1]}"
    )


def _is_fp4(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.int8, torch.uint8)


def fp4_scale_words(sf: torch.Tensor, fn: str = "fp4_scale_words", name: str = "sf") -> torch.Tensor:
    """FP4 weights' 1x32 scales ``[E, N, K / 32]`` (FP32 powers of two) or ``[E, N, K / 128]`` (packed UE8M0 int32)
    as the FP8 x FP4 GEMM reads them: UE8M0 words, four to an int32, MN-major with the N stride aligned to 4 (so a
    call runs no layout kernel on them). Same values, another layout: ``[E, N, K / 128]`` int32 with strides
    ``(K / 128 * align(N, 4), 1, align(N, 4))``.

    Raises:
        ValueError: naming ``name`` (errors say ``fn``): ``sf`` is not a 3-D FP32 or int32 tensor, its FP32 scales'
            count is no multiple of 4, or (FP32, checked as :func:`pack_ue8m0_to_int` checks) they are not powers of
            two.
    """
    if not isinstance(sf, torch.Tensor) or sf.dim() != 3 or sf.dtype not in (torch.float32, torch.int32):
        raise ValueError(
            f"{fn}: {name} must be a 3-D FP32 or int32 scale tensor, got "
            f"{getattr(sf, 'dtype', type(sf).__name__)} {list(getattr(sf, 'shape', []))}"
        )
    try:
        words = pack_ue8m0_to_int(sf) if sf.dtype == torch.float32 else sf
    except ValueError as error:
        raise ValueError(f"{fn}: {name}: {error}") from None
    e, n, cols = words.shape
    aligned = align(n, 4)
    out = torch.empty(e, cols, aligned, dtype=torch.int32, device=sf.device).transpose(1, 2)[:, :n]
    out.copy_(words)
    return out


def _kernel_scales(fn: str, name: str, data: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """FP4 weights' scales in the GEMM's layout (:func:`fp4_scale_words`); other weights' as they are."""
    return fp4_scale_words(sf, fn, name) if _is_fp4(data) else sf


def transform_weights_for_mega_moe(l1_weights, l2_weights, activation="swiglu"):
    """Return ``(l1_weights, l2_weights)`` in the Mega MoE layout (``bf16_mega_moe``, ``fp8_fp4_mega_moe``).

    Args:
        l1_weights: ``[E_local, 2 I, hidden]`` BF16, or a ``(weights, scales)`` pair: gate rows then up rows.
            Per-row scales (``[E_local, 2 I, ...]``) are interleaved with the rows; 128 x 128 block scales
            (``[E_local, 2 I / 128, ...]``) are kept as they are.
        l2_weights: ``[E_local, hidden, I]`` (or a pair), returned unchanged.
        activation: ``'swiglu'``.

    Returns:
        ``(l1, l2)``: ``l1`` a new tensor (or pair) with gate and up rows alternating in groups of 8. FP4 weights
        (int8/uint8, for ``fp8_fp4_mega_moe``): both pairs' scales come back as packed UE8M0 words in the FP8 x FP4
        GEMM's layout (:func:`fp4_scale_words`), so that a call moves no scales.

    Raises:
        TypeError / ValueError: naming the argument of the wrong type or shape.
    """
    fn = "transform_weights_for_mega_moe"
    if activation not in ACTIVATIONS:
        raise ValueError(f"{fn}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    l1 = _transform_l1(fn, l1_weights, keep_block_scales=True)
    if isinstance(l2_weights, (tuple, list)) and len(l2_weights) == 2 and _is_fp4(l2_weights[0]):
        l2_weights = (l2_weights[0], fp4_scale_words(l2_weights[1], fn, "l2_weights[1]"))
    return l1, l2_weights


def transform_weights_for_mega_moe_sm90(l1_weights, l2_weights):
    """The SGLang fork's SM90 form: FP8 weights with 128 x 128 block scales, for ``fp8_mega_moe``.

    Args:
        l1_weights: ``(weights FP8 [E_local, 2 I, hidden], scales FP32 [E_local, 2 I / 128, hidden / 128])``.
        l2_weights: ``(weights FP8 [E_local, hidden, I], scales FP32 [E_local, hidden / 128, I / 128])``.

    Returns:
        ``(l1, l2)``: ``l1``'s weight rows with gate and up alternating in groups of 8, its scales unchanged;
        ``l2`` unchanged.

    Raises:
        TypeError / ValueError: naming the argument of the wrong type or shape.
    """
    fn = "transform_weights_for_mega_moe_sm90"
    if not isinstance(l1_weights, (tuple, list)):
        raise TypeError(f"{fn}: l1_weights must be a (weights, scales) pair, got {type(l1_weights).__name__}")
    if len(l1_weights) == 2 and isinstance(l1_weights[1], torch.Tensor) and l1_weights[1].dim() == 3:
        if l1_weights[1].shape[1] * 128 != getattr(l1_weights[0], "shape", (0, 0))[1]:
            raise ValueError(
                f"{fn}: l1_weights[1] must be 128 x 128 block scales [E_local, 2 I / 128, hidden / 128],"
                f" got shape {tuple(l1_weights[1].shape)}"
            )
    return _transform_l1(fn, l1_weights, keep_block_scales=True), l2_weights
