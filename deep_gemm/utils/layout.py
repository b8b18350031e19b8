"""Scale-factor layouts: the extension's layout kernels at the reference path, and plain-PyTorch layouts.

``deep_gemm.utils.layout`` is where the reference API (DeepGEMM 2.6.1) keeps the layout functions,
and engines import them from here (``from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor``),
so the extension's functions are re-exported (the layout kernels through ``deep_gemm.ops``: the binding
in eager mode, the custom op while ``torch.compile`` traces). The SM90 kernels read the LHS scales with
TMA along MN, so the scales must be stored MN-major with the MN stride padded to 16 bytes
(:func:`get_tma_aligned_size`). The ``*_reference`` functions build those layouts with ordinary tensor
ops; tests compare the CUDA layout kernels against them.
"""

import torch
import torch.nn.functional as F

from deep_gemm._C import (
    _pack_ue8m0_k_grouped,
    get_mk_alignment_for_contiguous_layout,
    get_tma_aligned_size,
    set_mk_alignment_for_contiguous_layout,
)
from deep_gemm.ops import get_mn_major_tma_aligned_packed_ue8m0_tensor, get_mn_major_tma_aligned_tensor
from deep_gemm.utils.arith import align, ceil_div
from deep_gemm.utils.casts import debug_checks_enabled, pack_scales_along_k, pack_ue8m0_to_int

__all__ = [
    "get_k_alignment_for_contiguous_layout",
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_m_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_tma_aligned_size",
    "mn_major_tma_aligned_reference",
    "packed_ue8m0_reference",
    "set_mk_alignment_for_contiguous_layout",
]

# The reference's names for the one M/K alignment of the contiguous grouped layouts
get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout

# The M (or K) alignment the SM90 grouped kernels are built for: their largest block along M is 128 rows.
SM90_THEORETICAL_MK_ALIGNMENT = 128


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None) -> int:
    """The alignment of each group's rows in the contiguous grouped layouts that the kernels need in theory.

    On SM90 (the only architecture this library serves) it is 128 whatever ``expected_m`` is, as in
    the reference; the reference's SM100 path picks a smaller one from ``expected_m``. Needs no GPU.

    Args:
        expected_m: the expected rows per group, or ``None``; a non-negative int.

    Raises:
        TypeError: ``expected_m`` is neither ``None`` nor an int.
        ValueError: ``expected_m`` is negative.
    """
    if expected_m is not None:
        if isinstance(expected_m, bool) or not isinstance(expected_m, int):
            raise TypeError(
                "get_theoretical_mk_alignment_for_contiguous_layout: expected_m must be None or an int, "
                f"got {type(expected_m).__name__}"
            )
        if expected_m < 0:
            raise ValueError(
                f"get_theoretical_mk_alignment_for_contiguous_layout: expected_m must be non-negative, got {expected_m}"
            )
    return SM90_THEORETICAL_MK_ALIGNMENT


def _check_sf(fn: str, sf: torch.Tensor) -> None:
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"{fn}: sf must be a torch.Tensor, got {type(sf).__name__}")
    if sf.dtype != torch.float32:
        raise TypeError(f"{fn}: sf must be torch.float32, got {sf.dtype}")
    if sf.dim() not in (2, 3):
        raise ValueError(f"{fn}: sf must be [MN, SF_K] or [G, MN, SF_K], got shape {tuple(sf.shape)}")


def _to_mn_major_tma_aligned(t: torch.Tensor) -> torch.Tensor:
    """Copy ``t [MN, K]`` or ``[G, MN, K]`` (4-byte elements) into MN-major, TMA-aligned storage."""
    batched = t.dim() == 3
    t3 = t if batched else t.unsqueeze(0)
    groups, mn, k = t3.shape
    aligned_mn = get_tma_aligned_size(mn, t.element_size())
    # Storage [G, K, aligned_MN]; the padding rows are zeroed so results are deterministic.
    storage = torch.zeros((groups, k, aligned_mn), dtype=t.dtype, device=t.device)
    out = storage.transpose(1, 2)[:, :mn, :]
    out.copy_(t3)
    return out if batched else out.squeeze(0)


def mn_major_tma_aligned_reference(sf: torch.Tensor) -> torch.Tensor:
    """Reference for ``get_mn_major_tma_aligned_tensor``: same values, MN-major TMA-aligned storage.

    Args:
        sf: ``[MN, SF_K]`` or ``[G, MN, SF_K]`` ``torch.float32``, any strides, CPU or CUDA.

    Returns:
        A new ``torch.float32`` tensor equal to ``sf`` with strides ``(1, aligned_mn)`` (2D)
        or ``(SF_K * aligned_mn, 1, aligned_mn)`` (3D), where
        ``aligned_mn = get_tma_aligned_size(MN, 4)``. Storage past ``MN`` is zero.

    Raises:
        TypeError: ``sf`` is not a ``torch.float32`` tensor.
        ValueError: ``sf`` is not 2D or 3D.
    """
    _check_sf("mn_major_tma_aligned_reference", sf)
    return _to_mn_major_tma_aligned(sf)


def packed_ue8m0_reference(sf: torch.Tensor) -> torch.Tensor:
    """Reference for the packed-UE8M0 layout kernel (SM100 scales).

    ``SF_K`` is zero-padded to a multiple of 4 (padding packs to exponent byte 0), each
    group of 4 consecutive scales along ``SF_K`` is packed into one ``int32`` as in
    :func:`pack_ue8m0_to_int`, and the result is laid out MN-major and TMA-aligned.

    Args:
        sf: ``[MN, SF_K]`` or ``[G, MN, SF_K]`` ``torch.float32`` powers of two (e.g. from
            ``use_ue8m0=True`` casts), any strides, CPU or CUDA. Mantissa and sign bits are
            ignored, not checked.

    Returns:
        ``[MN, ceil(SF_K / 4)]`` or ``[G, MN, ceil(SF_K / 4)]`` ``torch.int32`` with strides
        ``(1, aligned_mn)`` or ``(ceil(SF_K / 4) * aligned_mn, 1, aligned_mn)``, where
        ``aligned_mn = get_tma_aligned_size(MN, 4)``. Storage past ``MN`` is zero.

    Raises:
        TypeError: ``sf`` is not a ``torch.float32`` tensor.
        ValueError: ``sf`` is not 2D or 3D.
    """
    _check_sf("packed_ue8m0_reference", sf)
    sf_k = sf.shape[-1]
    padded = F.pad(sf, (0, align(sf_k, 4) - sf_k))
    return _to_mn_major_tma_aligned(pack_ue8m0_to_int(padded))


def _check_positive_int(fn: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{fn}: {name} must be positive, got {value}")


def _k_grouped_ranges(
    fn: str, grouped_layout: torch.Tensor, ks_cpu: list[int] | None, k_alignment: int, use_psum_layout: bool
) -> list[tuple[int, int]]:
    """``(start, end)`` of each group along the concatenated K, from ``ks_cpu`` or (psum only) ``grouped_layout``."""
    num_groups = grouped_layout.numel()
    if ks_cpu is not None and not isinstance(ks_cpu, (list, tuple)):
        raise TypeError(f"{fn}: ks_cpu must be a list of ints or None, got {type(ks_cpu).__name__}")
    if ks_cpu:
        if any(isinstance(k, bool) or not isinstance(k, int) for k in ks_cpu):
            raise TypeError(f"{fn}: ks_cpu must be a list of ints, got {ks_cpu!r}")
        if len(ks_cpu) != num_groups:
            raise ValueError(f"{fn}: ks_cpu must have one K per group ({num_groups}, grouped_layout.numel()), "
                             f"got {len(ks_cpu)}")  # fmt: skip
        if any(k < 0 for k in ks_cpu):
            raise ValueError(f"{fn}: every K in ks_cpu must be non-negative, got {list(ks_cpu)}")
        ks = list(ks_cpu)
        if not use_psum_layout and any(k % k_alignment != 0 for k in ks):
            raise ValueError(f"{fn}: every K in ks_cpu must be a multiple of k_alignment={k_alignment} without the "
                             f"psum layout, got {ks}")  # fmt: skip
        # (grouped_layout repeats ks_cpu: K per group, or its prefix sums with the psum layout)
        if not grouped_layout.is_cuda or debug_checks_enabled():
            expected, end = [], 0
            for k in ks:
                start = align(end, k_alignment) if use_psum_layout else end
                end = start + k
                expected.append(end if use_psum_layout else k)
            if grouped_layout.tolist() != expected:
                raise ValueError(f"{fn}: grouped_layout {grouped_layout.tolist()} does not match ks_cpu {ks} "
                                 f"({'the psum ends' if use_psum_layout else 'K per group'} {expected} expected)")  # fmt: skip
    elif use_psum_layout:
        # (a device sync where grouped_layout is on the GPU: this is a reference helper)
        ends = grouped_layout.tolist()
        ks, previous_end = [], 0
        for end in ends:
            start = align(previous_end, k_alignment)
            if end < start:
                raise ValueError(f"{fn}: grouped_layout must hold non-decreasing psum ends of K, got {ends}")
            ks.append(end - start)
            previous_end = end
    else:
        raise ValueError(f"{fn}: ks_cpu must be given (a list of K per group) without the psum layout")
    ranges, end = [], 0
    for k in ks:
        start = align(end, k_alignment) if use_psum_layout else end
        end = start + k
        ranges.append((start, end))
    return ranges


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
    sf: torch.Tensor,
    grouped_layout: torch.Tensor,
    ks_cpu: list[int] | None,
    gran_k: int,
    k_alignment: int,
    use_psum_layout: bool = False,
) -> torch.Tensor:
    """Pack the FP32 power-of-two scales of a K-grouped operand into UE8M0 words, MN-major and TMA-aligned.

    The scales of the K-grouped SM100 recipe (the SM90 kernels use FP32 scales): CUDA tensors are packed by the
    layout kernel (one launch per group), CPU tensors in PyTorch. The operand is ``[sum K, MN]`` with the groups concatenated along K, and ``sf`` its
    per-channel scales (:func:`deep_gemm.utils.per_channel_cast_to_fp8` with ``gran_k``): row ``r``
    of ``sf`` scales K rows ``[r * gran_k, (r + 1) * gran_k)``.

    Group ``g`` spans K rows ``[start_g, end_g)``: without the psum layout the groups follow each
    other (``start_g = end_{g-1}``, every ``K_g`` a multiple of ``k_alignment``); with it each group
    starts at ``align(end_{g-1}, k_alignment)``. Its scales are the rows
    ``[start_g / gran_k, ceil(end_g / gran_k))`` of ``sf``; they are packed four to an ``int32``
    (the first in the low byte; a last partial word padded with byte 0), giving
    ``ceil(ceil(K_g / gran_k) / 4)`` rows per group. The result concatenates the groups' rows in
    group order: ``[sum_g ceil(ceil(K_g / gran_k) / 4), MN]`` ``torch.int32`` with strides
    ``(get_tma_aligned_size(MN, 4), 1)`` (MN contiguous, each row starting 16-byte aligned; the
    padding is zero).

    Args:
        sf: ``[SF_K, MN]`` ``torch.float32`` powers of two, any strides, CPU or CUDA.
        grouped_layout: ``torch.int32`` ``[G]`` on ``sf``'s device: ``K_g`` per group, or with the psum
            layout the end of each group along K (``end_g``).
        ks_cpu: ``K_g`` per group (a list of G ints); may be ``None`` or empty with the psum layout,
            where the groups are then read from ``grouped_layout`` (a device sync).
        gran_k: K rows per scale, positive.
        k_alignment: alignment of each group's start along K; a positive multiple of ``gran_k``.
        use_psum_layout: ``grouped_layout`` holds psum ends (see above).

    Returns:
        The packed scales as described.

    Raises:
        TypeError: a tensor or argument has the wrong type or dtype.
        ValueError: a shape, count or value is inconsistent (``sf`` too short for the groups,
            ``ks_cpu`` not matching ``grouped_layout``, which is checked when ``grouped_layout`` is
            on the CPU or ``DG_DEBUG_CHECKS=1``, a K not aligned, devices differ), or a scale is
            not a power of two (checked as :func:`deep_gemm.utils.pack_ue8m0_to_int` does).
    """
    fn = "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor"
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"{fn}: sf must be a torch.Tensor, got {type(sf).__name__}")
    if sf.dtype != torch.float32:
        raise TypeError(f"{fn}: sf must be torch.float32, got {sf.dtype}")
    if sf.dim() != 2:
        raise ValueError(f"{fn}: sf must be 2D [SF_K, MN], got shape {tuple(sf.shape)}")
    if not isinstance(grouped_layout, torch.Tensor):
        raise TypeError(f"{fn}: grouped_layout must be a torch.Tensor, got {type(grouped_layout).__name__}")
    if grouped_layout.dtype != torch.int32 or grouped_layout.dim() != 1:
        raise TypeError(f"{fn}: grouped_layout must be a 1D torch.int32 tensor, got {grouped_layout.dtype} "
                        f"of shape {tuple(grouped_layout.shape)}")  # fmt: skip
    if grouped_layout.device != sf.device:
        raise ValueError(f"{fn}: grouped_layout must be on sf's device ({sf.device}), got {grouped_layout.device}")
    _check_positive_int(fn, "gran_k", gran_k)
    _check_positive_int(fn, "k_alignment", k_alignment)
    if not isinstance(use_psum_layout, bool):
        raise TypeError(f"{fn}: use_psum_layout must be a bool, got {type(use_psum_layout).__name__}")
    if k_alignment % gran_k != 0:
        raise ValueError(f"{fn}: k_alignment must be a multiple of gran_k={gran_k}, got {k_alignment}")
    ranges = _k_grouped_ranges(fn, grouped_layout, ks_cpu, k_alignment, use_psum_layout)
    needed_rows = max((ceil_div(end, gran_k) for _, end in ranges), default=0)
    if sf.shape[0] < needed_rows:
        raise ValueError(f"{fn}: sf must have at least {needed_rows} rows (ceil(last group end / gran_k)) for the "
                         f"groups {ranges}, got {sf.shape[0]}")  # fmt: skip
    mn = sf.shape[1]
    if sf.is_cuda:
        # One launch of the layout kernel per group, into the output rows (the scales' mantissa and sign bits are
        # checked as pack_ue8m0_to_int checks CUDA tensors: with DG_DEBUG_CHECKS=1)
        if debug_checks_enabled():
            for start, end in ranges:
                pack_scales_along_k(sf[start // gran_k : ceil_div(end, gran_k)].t())
        row_start = [start // gran_k for start, _ in ranges]
        num_rows = [ceil_div(end, gran_k) - start // gran_k for start, end in ranges]
        return _pack_ue8m0_k_grouped(sf, row_start, num_rows)
    # Per group: its scales [SF_K_g, MN] -> [MN, SF_K_g] -> packed along SF_K -> back to [words, MN]
    words = [
        pack_scales_along_k(sf[start // gran_k : ceil_div(end, gran_k)].t()).t()
        for start, end in ranges
    ]
    num_words = sum(w.shape[0] for w in words)
    storage = torch.zeros((num_words, get_tma_aligned_size(mn, 4)), dtype=torch.int32, device=sf.device)
    out = storage[:, :mn]
    row = 0
    for w in words:
        out[row : row + w.shape[0]] = w
        row += w.shape[0]
    return out
