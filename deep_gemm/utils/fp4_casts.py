"""Reference FP4 (E2M1) quantization with UE8M0 scales, packed two values to a byte.

The format, as the reference API (``deep_gemm.utils.math`` of DeepGEMM 2.6.1) has it:

* Values: E2M1, magnitudes ``{0, 0.5, 1, 1.5, 2, 3, 4, 6}`` (codes 0..7 in that order) and a sign
  bit (bit 3 of the 4-bit code). A value that rounds to 0 gets code 0 (no negative zero).
* Rounding: to the nearest grid value, ties to the code with an even index (round-to-nearest-even
  on the E2M1 grid: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4);
  magnitudes above 6 saturate to 6. (The reference rounds ties towards zero; the two differ only
  for scaled values exactly on a midpoint.)
* Packing: along K, two values per byte, the even-index element in the low nibble and the
  odd-index one in the high nibble; the bytes are returned as ``torch.int8``.
* Scales: one per ``1 x gran_k`` block of a row, ``amax / 6`` with amax clamped at 1e-4, rounded up
  to a power of two with ``use_ue8m0`` (UE8M0), optionally packed four to an ``int32`` along K
  (:func:`deep_gemm.utils.casts.pack_scales_along_k`).
"""

import torch
import torch.nn.functional as F

from deep_gemm.utils.arith import align, ceil_div
from deep_gemm.utils.casts import (
    AMAX_CLAMP_MIN,
    _kernel_serves,
    ceil_to_ue8m0,
    pack_scales_along_k,
    unpack_ue8m0_from_int,
)

__all__ = ["FP4_E2M1_GRID", "cast_back_from_fp4", "per_token_cast_to_fp4", "transpose_packed_fp4"]

FP4_E2M1_MAX = 6.0
# Magnitude of each 3-bit E2M1 code
FP4_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_SIGN_BIT = 0x8
_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def _check_bool(fn: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be a bool, got {type(value).__name__}")


def _check_gran_k(fn: str, gran_k: int) -> None:
    if isinstance(gran_k, bool) or not isinstance(gran_k, int):
        raise TypeError(f"{fn}: gran_k must be an int, got {type(gran_k).__name__}")
    if gran_k <= 0:
        raise ValueError(f"{fn}: gran_k must be positive, got {gran_k}")


def _check_packed(fn: str, name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int8, torch.uint8):
        raise TypeError(f"{fn}: {name} must be torch.int8 (or torch.uint8) packed FP4 bytes, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{fn}: {name} must be 2D [rows, cols / 2], got shape {tuple(t.shape)}")


def _e2m1_codes(scaled: torch.Tensor) -> torch.Tensor:
    """4-bit E2M1 codes (``int32``, 0..15) of ``scaled`` (float32), round-to-nearest-even, saturating at 6."""
    grid = torch.tensor(FP4_E2M1_GRID, dtype=torch.float32, device=scaled.device)
    midpoints = (grid[1:] + grid[:-1]) / 2  # exact in FP32
    magnitude = scaled.abs().clamp(max=FP4_E2M1_MAX)
    # Off a midpoint both searches agree; on one they give the two neighbours, exactly one of them even.
    below = torch.bucketize(magnitude, midpoints, right=False)
    above = torch.bucketize(magnitude, midpoints, right=True)
    index = torch.where(below % 2 == 0, below, above).to(torch.int32)
    negative = (scaled < 0) & (index != 0)
    return index | (negative.to(torch.int32) * _SIGN_BIT)


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """``[R, 2 * C]`` codes 0..15 -> ``[R, C]`` ``int8`` bytes, element ``2j`` in the low nibble."""
    pairs = codes.view(codes.shape[0], -1, 2)
    byte = pairs[..., 0] | (pairs[..., 1] << 4)
    return byte.to(torch.uint8).view(torch.int8).contiguous()


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """``[R, C]`` bytes -> ``[R, 2 * C]`` ``int32`` codes 0..15 (inverse of :func:`_pack_nibbles`)."""
    byte = packed.view(torch.uint8).to(torch.int32) if packed.dtype == torch.int8 else packed.to(torch.int32)
    return torch.stack([byte & 0xF, byte >> 4], dim=-1).view(packed.shape[0], -1)


def _decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    grid = torch.tensor(FP4_E2M1_GRID, dtype=torch.float32, device=codes.device)
    magnitude = grid[(codes & 0x7).long()]
    return torch.where((codes & _SIGN_BIT) != 0, -magnitude, magnitude)


def per_token_cast_to_fp4(
    x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [M, K]`` to packed E2M1 with one scale per row per ``gran_k`` columns.

    Runs :func:`per_token_cast_to_fp4_reference` (the kernel :func:`deep_gemm.per_token_quant_fp4` serves CUDA
    inputs by its own name; see deep_gemm.utils.casts).

    See the module docstring for the code, rounding and packing. ``x ≈ cast_back_from_fp4(...)``.

    Args:
        x: ``[M, K]``, a float dtype, any strides, CPU or CUDA; ``K`` even (two values to a byte),
            not necessarily a multiple of ``gran_k`` (the last block of a row is zero-padded).
        use_ue8m0: round every scale up to a power of two.
        gran_k: columns per scale.
        use_packed_ue8m0: return the scales as UE8M0 bytes packed four to an ``int32`` (needs
            ``use_ue8m0``).

    Returns:
        ``(packed, sf)``: ``packed`` is ``[M, K / 2]`` ``torch.int8``, contiguous; ``sf`` is
        ``[M, ceil(K / gran_k)]`` ``torch.float32``, or with ``use_packed_ue8m0``
        ``[M, ceil(ceil(K / gran_k) / 4)]`` ``torch.int32``.

    Raises:
        TypeError: ``x`` is not a float tensor, or an argument has the wrong type.
        ValueError: ``x`` is not 2D, ``K`` is odd, ``gran_k <= 0``, or ``use_packed_ue8m0``
            without ``use_ue8m0``.
    """
    _check_fp4_args(x, use_ue8m0, gran_k, use_packed_ue8m0)
    if _kernel_serves(x, (32, 128), gran_k) and x.dim() == 2:
        from deep_gemm import ops

        return ops.per_token_quant_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0)
    return per_token_cast_to_fp4_reference(x, use_ue8m0, gran_k, use_packed_ue8m0)


def _check_fp4_args(x: torch.Tensor, use_ue8m0: bool, gran_k: int, use_packed_ue8m0: bool) -> None:
    fn = "per_token_cast_to_fp4"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"{fn}: x must be a float tensor (bfloat16, float16, float32, float64), got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{fn}: x must be 2D [M, K], got shape {tuple(x.shape)}")
    if x.shape[1] % 2 != 0:
        raise ValueError(f"{fn}: K (x.shape[1]) must be even (two FP4 values to a byte), got {x.shape[1]}")
    _check_bool(fn, "use_ue8m0", use_ue8m0)
    _check_gran_k(fn, gran_k)
    _check_bool(fn, "use_packed_ue8m0", use_packed_ue8m0)
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError(f"{fn}: use_packed_ue8m0=True needs use_ue8m0=True (power-of-two scales)")


def per_token_cast_to_fp4_reference(
    x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PyTorch form of :func:`per_token_cast_to_fp4` (same arguments, results and errors), on any device: what
    the kernel :func:`deep_gemm.per_token_quant_fp4` is checked against, and what runs for inputs it does not serve."""
    _check_fp4_args(x, use_ue8m0, gran_k, use_packed_ue8m0)
    m, k = x.shape
    padded_k = align(k, gran_k)
    blocks = F.pad(x.float(), (0, padded_k - k)).view(m, padded_k // gran_k, gran_k)
    amax = blocks.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_CLAMP_MIN)
    # (a tensor divisor: CUDA turns division by a Python scalar into a multiplication by its reciprocal)
    sf = amax / torch.full((), FP4_E2M1_MAX, dtype=torch.float32, device=x.device)
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    codes = _e2m1_codes(blocks / sf).view(m, padded_k)[:, :k]
    sf = sf.squeeze(-1)
    return _pack_nibbles(codes.contiguous()), pack_scales_along_k(sf) if use_packed_ue8m0 else sf.contiguous()


def transpose_packed_fp4(a: torch.Tensor) -> torch.Tensor:
    """Transpose a packed FP4 matrix: ``[M, K / 2]`` (packed along K) -> ``[K, M / 2]`` (packed along M).

    Element ``(i, j)`` of the unpacked ``[M, K]`` matrix becomes element ``(j, i)`` of the unpacked
    ``[K, M]`` result, packed with the module's nibble order.

    Args:
        a: ``[M, K / 2]`` ``torch.int8`` (or ``torch.uint8``), any strides, CPU or CUDA; ``M`` even.

    Returns:
        ``[K, M / 2]`` ``torch.int8``, contiguous.

    Raises:
        TypeError: ``a`` is not an int8/uint8 tensor.
        ValueError: ``a`` is not 2D, or ``M`` is odd.
    """
    _check_packed("transpose_packed_fp4", "a", a)
    if a.shape[0] % 2 != 0:
        raise ValueError(f"transpose_packed_fp4: M (a.shape[0]) must be even to pack along it, got {a.shape[0]}")
    return _pack_nibbles(_unpack_nibbles(a).t().contiguous())


def cast_back_from_fp4(
    packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> torch.Tensor:
    """Dequantize packed E2M1 values: ``value * scale`` per ``1 x gran_k`` block, as ``torch.float32``.

    Args:
        packed: ``[M, K / 2]`` ``torch.int8`` (or ``torch.uint8``) from :func:`per_token_cast_to_fp4`.
        sf: ``[M, ceil(K / gran_k)]`` ``torch.float32`` scales, or with ``use_packed_ue8m0``
            ``[M, ceil(ceil(K / gran_k) / 4)]`` ``torch.int32`` packed UE8M0 scales; same device.
        gran_k: columns per scale.
        use_packed_ue8m0: ``sf`` is packed UE8M0.

    Returns:
        ``[M, K]`` ``torch.float32``.

    Raises:
        TypeError: a tensor has the wrong type or dtype, or ``gran_k``/``use_packed_ue8m0`` the wrong type.
        ValueError: a shape does not match, ``gran_k <= 0``, or the devices differ.
    """
    fn = "cast_back_from_fp4"
    _check_packed(fn, "packed", packed)
    _check_gran_k(fn, gran_k)
    _check_bool(fn, "use_packed_ue8m0", use_packed_ue8m0)
    if not isinstance(sf, torch.Tensor):
        raise TypeError(f"{fn}: sf must be a torch.Tensor, got {type(sf).__name__}")
    m, k = packed.shape[0], packed.shape[1] * 2
    sf_k = ceil_div(k, gran_k)
    expected_dtype, expected_shape = (
        (torch.int32, (m, ceil_div(sf_k, 4))) if use_packed_ue8m0 else (torch.float32, (m, sf_k))
    )
    if sf.dtype != expected_dtype:
        raise TypeError(f"{fn}: sf must be {expected_dtype} (use_packed_ue8m0={use_packed_ue8m0}), got {sf.dtype}")
    if tuple(sf.shape) != expected_shape:
        raise ValueError(f"{fn}: sf must have shape {expected_shape} for packed {tuple(packed.shape)} and "
                         f"gran_k={gran_k}, got {tuple(sf.shape)}")  # fmt: skip
    if sf.device != packed.device:
        raise ValueError(f"{fn}: sf must be on the device of packed ({packed.device}), got {sf.device}")
    scales = unpack_ue8m0_from_int(sf)[:, :sf_k] if use_packed_ue8m0 else sf
    values = _decode_e2m1(_unpack_nibbles(packed))
    return values * scales.repeat_interleave(gran_k, dim=1)[:, :k]
