"""Reference FP8 quantization (the DeepSeek-V3 recipe) and UE8M0 scale packing.

Every cast here is plain PyTorch, so it runs on the CPU and on CUDA alike. The recipe:
split the operand into blocks, take ``amax = max(|x|)`` of each block (clamped at 1e-4 so
an all-zero block gets a finite scale), set ``scale = amax / 448`` (448 is the largest
``float8_e4m3fn`` value) and store ``x / scale`` as ``float8_e4m3fn``. With
``use_ue8m0=True`` the scale is first rounded up to a power of two, which is what SM100
kernels consume (as UE8M0 exponents packed four to an ``int32``).
"""

import torch
import torch.nn.functional as F

from deep_gemm.utils.math import align

__all__ = [
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_token_cast_to_fp8",
    "unpack_ue8m0_from_int",
]

FP8_E4M3_MAX = 448.0
AMAX_CLAMP_MIN = 1e-4
# Rows (or columns) of B that share one scale in the SM90 recipe: 128x128 blocks.
BLOCK_MN = 128

_FP32_EXPONENT_SHIFT = 23
_FP32_MANTISSA_MASK = (1 << _FP32_EXPONENT_SHIFT) - 1
_INPUT_DTYPES = (torch.bfloat16, torch.float32)


def _check_cast_args(fn: str, x: torch.Tensor, use_ue8m0: bool, gran_k: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"{fn}: x must be torch.bfloat16 or torch.float32, got {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(f"{fn}: x must be 2D, or 3D with a leading group dim, got shape {tuple(x.shape)}")
    if not isinstance(use_ue8m0, bool):
        raise TypeError(f"{fn}: use_ue8m0 must be a bool, got {type(use_ue8m0).__name__}")
    if isinstance(gran_k, bool) or not isinstance(gran_k, int):
        raise TypeError(f"{fn}: gran_k must be an int, got {type(gran_k).__name__}")
    if gran_k <= 0:
        raise ValueError(f"{fn}: gran_k must be positive, got {gran_k}")


def _check_fp32(fn: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{fn}: x must be torch.float32, got {x.dtype}")


def _row_major(x: torch.Tensor) -> torch.Tensor:
    """``x`` with row-major strides, copying only if needed.

    NOTES: ``contiguous()`` is not enough before a dtype view that changes the element size:
    it keeps any stride on size-1 dims (e.g. ``(1, 4)`` for a ``[1, 1]`` MN-major tensor).
    """
    if x.is_contiguous() and (x.dim() == 0 or x.stride(-1) == 1):
        return x
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)


def _cast_blocks(
    x: torch.Tensor, block_rows: int, block_cols: int, use_ue8m0: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [..., R, C]`` with one scale per ``block_rows x block_cols`` block.

    Returns ``(x_fp8 [..., R, C], sf [..., ceil(R/block_rows), ceil(C/block_cols)])``.
    """
    *lead, rows, cols = x.shape
    padded_rows, padded_cols = align(rows, block_rows), align(cols, block_cols)
    # NOTES: zero padding never raises a block's amax, so partial blocks keep the scale of their real values.
    padded = F.pad(x.float(), (0, padded_cols - cols, 0, padded_rows - rows))
    blocks = padded.view(*lead, padded_rows // block_rows, block_rows, padded_cols // block_cols, block_cols)
    amax = blocks.abs().amax(dim=(-3, -1), keepdim=True).clamp(min=AMAX_CLAMP_MIN)
    # NOTES: divide by a tensor, not a Python float: CUDA turns division by a CPU scalar into a
    # multiplication by its reciprocal, which rounds differently from the CPU's true division.
    sf = amax / torch.full((), FP8_E4M3_MAX, dtype=torch.float32, device=amax.device)
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    # The clamp only guards rounding of x / (amax / 448) a hair above 448.
    x_fp8 = (blocks / sf).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    x_fp8 = x_fp8.view(*lead, padded_rows, padded_cols)[..., :rows, :cols].contiguous()
    return x_fp8, sf.squeeze(-1).squeeze(-2)


def per_token_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a K-major operand with one scale per row per ``gran_k`` columns (the LHS recipe).

    Args:
        x: ``[M, K]`` (or ``[G, M, K]``), ``torch.bfloat16`` or ``torch.float32``, any
            strides, CPU or CUDA. ``K`` need not be a multiple of ``gran_k``: the last
            group of a row is zero-padded internally.
        use_ue8m0: round every scale up to a power of two.
        gran_k: columns per scale.

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` is ``[M, K]`` ``torch.float8_e4m3fn``, contiguous;
        ``sf`` is ``[M, ceil(K / gran_k)]`` ``torch.float32``, contiguous (K-major). A
        leading group dim is kept on both. ``x ≈ x_fp8 * sf`` broadcast over each group.

    Raises:
        TypeError: ``x`` is not a tensor of a supported dtype, or ``use_ue8m0``/``gran_k``
            have the wrong type.
        ValueError: ``x`` is not 2D/3D, or ``gran_k <= 0``.
    """
    _check_cast_args("per_token_cast_to_fp8", x, use_ue8m0, gran_k)
    return _cast_blocks(x, 1, gran_k, use_ue8m0)


def per_channel_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize an MN-major operand with one scale per column per ``gran_k`` rows.

    This is the layout of the operands of weight-gradient GEMMs, where ``K`` (the token
    dim) is the outer dim.

    Args:
        x: ``[K, N]`` (or ``[G, K, N]``), ``torch.bfloat16`` or ``torch.float32``, any
            strides, CPU or CUDA. ``K`` need not be a multiple of ``gran_k``.
        use_ue8m0: round every scale up to a power of two.
        gran_k: rows per scale.

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` is ``[K, N]`` ``torch.float8_e4m3fn``, contiguous;
        ``sf`` is ``[ceil(K / gran_k), N]`` ``torch.float32``, contiguous. A leading group
        dim is kept on both.

    Raises:
        TypeError: ``x`` is not a tensor of a supported dtype, or ``use_ue8m0``/``gran_k``
            have the wrong type.
        ValueError: ``x`` is not 2D/3D, or ``gran_k <= 0``.
    """
    _check_cast_args("per_channel_cast_to_fp8", x, use_ue8m0, gran_k)
    return _cast_blocks(x, gran_k, 1, use_ue8m0)


def per_block_cast_to_fp8(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a K-major operand with one scale per ``128 x gran_k`` block (the RHS recipe).

    Args:
        x: ``[N, K]`` (or ``[G, N, K]``), ``torch.bfloat16`` or ``torch.float32``, any
            strides, CPU or CUDA. Neither ``N`` nor ``K`` need be block multiples: partial
            blocks are zero-padded internally.
        use_ue8m0: round every scale up to a power of two.
        gran_k: columns per block (rows per block are always 128).

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` is ``[N, K]`` ``torch.float8_e4m3fn``, contiguous;
        ``sf`` is ``[ceil(N / 128), ceil(K / gran_k)]`` ``torch.float32``, contiguous. A
        leading group dim is kept on both.

    Raises:
        TypeError: ``x`` is not a tensor of a supported dtype, or ``use_ue8m0``/``gran_k``
            have the wrong type.
        ValueError: ``x`` is not 2D/3D, or ``gran_k <= 0``.
    """
    _check_cast_args("per_block_cast_to_fp8", x, use_ue8m0, gran_k)
    return _cast_blocks(x, BLOCK_MN, gran_k, use_ue8m0)


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round magnitudes up to powers of two: ``2 ** ceil(log2(|x|))``, exactly.

    Works on the FP32 bit pattern: a value whose mantissa bits are not all zero gets its
    exponent bumped by one. Zero stays zero, ``inf`` stays ``inf``, NaN stays NaN, values
    above ``2**127`` become ``inf``, subnormals become ``2**-126``. The sign is dropped.

    Args:
        x: any shape, ``torch.float32``, any strides, CPU or CUDA.

    Returns:
        A new ``torch.float32`` tensor of the same shape (contiguous).

    Raises:
        TypeError: ``x`` is not a ``torch.float32`` tensor.
    """
    _check_fp32("ceil_to_ue8m0", x)
    magnitude = x.abs()
    bits = magnitude.view(torch.int32)
    exponent = bits >> _FP32_EXPONENT_SHIFT
    exponent = exponent + ((bits & _FP32_MANTISSA_MASK) != 0).to(torch.int32)
    rounded = (exponent << _FP32_EXPONENT_SHIFT).view(torch.float32)
    return torch.where(torch.isnan(magnitude), magnitude, rounded)


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """Pack FP32 powers of two into UE8M0 exponent bytes, four to an ``int32``.

    Byte ``i`` (little-endian) of output element ``j`` along the last dim is the biased
    FP32 exponent ``(bits >> 23) & 0xff`` of input element ``4 * j + i``. Sign and
    mantissa bits are ignored (not checked): pass values from :func:`ceil_to_ue8m0`.
    ``0.0`` packs to byte 0.

    Args:
        x: ``[..., 4 * n]`` ``torch.float32``, any strides, CPU or CUDA.

    Returns:
        ``[..., n]`` ``torch.int32``, contiguous.

    Raises:
        TypeError: ``x`` is not a ``torch.float32`` tensor.
        ValueError: ``x`` is 0-dim or its last dim is not a multiple of 4.
    """
    _check_fp32("pack_ue8m0_to_int", x)
    if x.dim() == 0 or x.shape[-1] % 4 != 0:
        raise ValueError(f"pack_ue8m0_to_int: the last dim of x must be a multiple of 4, got shape {tuple(x.shape)}")
    if x.shape[-1] == 0:
        return torch.empty(x.shape, dtype=torch.int32, device=x.device)
    exponent = (_row_major(x).view(torch.int32) >> _FP32_EXPONENT_SHIFT) & 0xFF
    # NOTES: a uint8 -> int32 view reads bytes in memory order, i.e. little-endian on every CUDA host.
    return exponent.to(torch.uint8).view(torch.int32)


def unpack_ue8m0_from_int(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_ue8m0_to_int`: ``int32`` words back to FP32 powers of two.

    Each byte ``e`` becomes the FP32 value with biased exponent ``e`` and zero mantissa:
    ``2 ** (e - 127)`` for ``1 <= e <= 254``, ``0.0`` for ``e == 0`` and ``inf`` for
    ``e == 255``.

    Args:
        x: ``[..., n]`` ``torch.int32``, any strides, CPU or CUDA.

    Returns:
        ``[..., 4 * n]`` ``torch.float32``, contiguous.

    Raises:
        TypeError: ``x`` is not a ``torch.int32`` tensor.
        ValueError: ``x`` is 0-dim.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"unpack_ue8m0_from_int: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.int32:
        raise TypeError(f"unpack_ue8m0_from_int: x must be torch.int32, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("unpack_ue8m0_from_int: x must have at least one dim")
    if x.shape[-1] == 0:
        return torch.empty(x.shape, dtype=torch.float32, device=x.device)
    exponent = _row_major(x).view(torch.uint8).to(torch.int32)
    return (exponent << _FP32_EXPONENT_SHIFT).view(torch.float32)
