"""Plain-PyTorch references for the scale-factor layout kernels.

The SM90 kernels read the LHS scales with TMA along MN, so the scales must be stored
MN-major with the MN stride padded to 16 bytes (:func:`get_tma_aligned_size`). These
functions build that layout with ordinary tensor ops; tests compare the CUDA layout
kernels against them.
"""

import torch
import torch.nn.functional as F

from deep_gemm.utils.casts import pack_ue8m0_to_int
from deep_gemm.utils.math import align, get_tma_aligned_size

__all__ = ["mn_major_tma_aligned_reference", "packed_ue8m0_reference"]


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
