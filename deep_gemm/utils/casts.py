"""FP8 quantization (the DeepSeek-V3 recipe) and UE8M0 scale packing.

Every cast here has a plain PyTorch form that runs on the CPU and on CUDA alike (the ``*_reference`` functions).
The JIT-compiled cast kernels (``deep_gemm.per_token_quant_fp8``, ``deep_gemm.per_block_quant_fp8``: the same bits
by design) are reached by their own names; the casts here will hand them BF16/FP32 CUDA inputs on SM90 once the GPU
tests have confirmed them bit-exact (``_CASTS_RUN_KERNELS``), and run the PyTorch form until then. The recipe:
split the operand into blocks, take ``amax = max(|x|)`` of each block (clamped at 1e-4 so
an all-zero block gets a finite scale), set ``scale = amax / 448`` (448 is the largest
``float8_e4m3fn`` value) and store ``x / scale`` as ``float8_e4m3fn``. With
``use_ue8m0=True`` the scale is first rounded up to a power of two, which is what SM100
kernels consume (as UE8M0 exponents packed four to an ``int32``).

The signatures are the reference API's (``deep_gemm.utils.math``, DeepGEMM 2.6.1), as supersets:
``use_ue8m0`` defaults to False, inputs may be 2D or 3D (a leading group dim), any float dtype, and
``K`` (or the blocked dims) need not be multiples of the granularity. One difference in the bits:
this module divides by the scale where the reference multiplies by its FP32 reciprocal, so with
FP32 (non-power-of-two) scales an element exactly at an FP8 rounding boundary may round the other
way; with ``use_ue8m0=True`` the two are identical.
"""

import os

import torch
import torch.nn.functional as F

from deep_gemm.utils.arith import align

__all__ = [
    "ceil_to_ue8m0",
    "pack_ue8m0_to_int",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "per_custom_dims_cast_to_fp8",
    "per_token_cast_to_fp8",
    "unpack_ue8m0_from_int",
]
# (the PyTorch forms, for tests and for inputs the kernels do not serve; not re-exported by deep_gemm.utils:
# per_block_cast_to_fp8_reference, per_token_cast_to_fp8_reference, silu_and_mul_reference)

FP8_E4M3_MAX = 448.0
AMAX_CLAMP_MIN = 1e-4

_FP32_EXPONENT_SHIFT = 23
_FP32_MANTISSA_MASK = (1 << _FP32_EXPONENT_SHIFT) - 1
_FP32_SIGN_AND_MANTISSA_MASK = -(1 << 31) | _FP32_MANTISSA_MASK  # (as an int32: 0x807FFFFF)
_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def _check_cast_args(fn: str, x: torch.Tensor, use_ue8m0: bool, gran_k: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"{fn}: x must be a float tensor (bfloat16, float16, float32, float64), got {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(f"{fn}: x must be 2D, or 3D with a leading group dim, got shape {tuple(x.shape)}")
    if not isinstance(use_ue8m0, bool):
        raise TypeError(f"{fn}: use_ue8m0 must be a bool, got {type(use_ue8m0).__name__}")
    if isinstance(gran_k, bool) or not isinstance(gran_k, int):
        raise TypeError(f"{fn}: gran_k must be an int, got {type(gran_k).__name__}")
    if gran_k <= 0:
        raise ValueError(f"{fn}: gran_k must be positive, got {gran_k}")


def _check_bool(fn: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be a bool, got {type(value).__name__}")


def _sm90_or_newer(device_index: int) -> bool:
    """Whether CUDA device device_index can run the cast kernels (a constant while torch.compile traces)."""
    if device_index not in _SM90_OR_NEWER:
        _SM90_OR_NEWER[device_index] = torch.cuda.get_device_capability(device_index)[0] >= 9
    return _SM90_OR_NEWER[device_index]


# What torch.compiler.assume_constant_result sets (Dynamo calls the function while tracing and keeps its result as a
# constant); set here directly because that decorator imports torch._dynamo, which made `import deep_gemm` take
# 1.0 s instead of 0.05 s
_sm90_or_newer._dynamo_marked_constant = True  # type: ignore[attr-defined]
_SM90_OR_NEWER: dict[int, bool] = {}


# Whether the utils casts hand CUDA inputs to the cast kernels. Off in this release: the kernels have not yet been
# run on a GPU (their bit-exactness tests are written, not passed), so the reference casts keep their PyTorch form
# and the kernels are reached only by their own names (deep_gemm.per_token_quant_fp8, ...). Turned on, and this
# constant removed, once the GPU tier passes.
_CASTS_RUN_KERNELS = False


def _kernel_serves(x: torch.Tensor, gran_ks: tuple[int, ...], gran_k: int) -> bool:
    """Whether the cast kernels take this call: BF16/FP32 CUDA x of an SM90-or-newer GPU, a gran_k they serve."""
    return (_CASTS_RUN_KERNELS and x.is_cuda and x.dtype in (torch.bfloat16, torch.float32) and x.dim() in (2, 3) and gran_k in gran_ks
            and _sm90_or_newer(x.device.index if x.device.index is not None else torch.cuda.current_device()))


# Values of an env flag that mean "off", as the extension reads them (csrc/utils/env.hpp, get_env_flag)
_ENV_FLAG_OFF = ("", "0", "false", "off", "no", "False")


def debug_checks_enabled() -> bool:
    """Whether ``DG_DEBUG_CHECKS`` is on (as the extension reads it): value checks on CUDA tensors, which need a
    device sync, run only then."""
    return os.environ.get("DG_DEBUG_CHECKS", "") not in _ENV_FLAG_OFF


def pack_scales_along_k(sf: torch.Tensor) -> torch.Tensor:
    """Pack FP32 power-of-two scales ``[..., SF_K]`` into ``int32`` words ``[..., ceil(SF_K / 4)]``.

    ``SF_K`` is zero-padded to a multiple of 4 first (a padding scale packs to exponent byte 0), then
    :func:`pack_ue8m0_to_int` packs each 4 consecutive scales, the first in the low byte.
    """
    sf_k = sf.shape[-1]
    return pack_ue8m0_to_int(F.pad(sf, (0, align(sf_k, 4) - sf_k)))


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
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a K-major operand with one scale per row per ``gran_k`` columns (the LHS recipe).

    Runs :func:`per_token_cast_to_fp8_reference` (see the module docstring: the kernel
    :func:`deep_gemm.per_token_quant_fp8`, which can also write the scales in the GEMMs' MN-major layout, serves
    CUDA inputs by its own name).

    Args:
        x: ``[M, K]`` (or ``[G, M, K]``), ``torch.bfloat16`` or ``torch.float32``, any
            strides, CPU or CUDA. ``K`` need not be a multiple of ``gran_k``: the last
            group of a row is zero-padded internally.
        use_ue8m0: round every scale up to a power of two.
        gran_k: columns per scale.
        use_packed_ue8m0: return the scales packed as UE8M0 bytes, four to an ``int32`` (needs
            ``use_ue8m0``): see :func:`pack_scales_along_k`.

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` is ``[M, K]`` ``torch.float8_e4m3fn``, contiguous;
        ``sf`` is ``[M, ceil(K / gran_k)]`` ``torch.float32``, contiguous (K-major), or with
        ``use_packed_ue8m0`` ``[M, ceil(ceil(K / gran_k) / 4)]`` ``torch.int32``. A leading group
        dim is kept on both. ``x ≈ x_fp8 * sf`` broadcast over each group.

    Raises:
        TypeError: ``x`` is not a tensor of a supported dtype, or ``use_ue8m0``/``gran_k``/
            ``use_packed_ue8m0`` have the wrong type.
        ValueError: ``x`` is not 2D/3D, ``gran_k <= 0``, or ``use_packed_ue8m0`` without ``use_ue8m0``.
    """
    _check_per_token_args("per_token_cast_to_fp8", x, use_ue8m0, gran_k, use_packed_ue8m0)
    if _kernel_serves(x, (32, 128), gran_k):
        from deep_gemm import ops

        return ops.per_token_quant_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0)
    return per_token_cast_to_fp8_reference(x, use_ue8m0, gran_k, use_packed_ue8m0)


def _check_per_token_args(fn: str, x: torch.Tensor, use_ue8m0: bool, gran_k: int, use_packed_ue8m0: bool) -> None:
    _check_cast_args(fn, x, use_ue8m0, gran_k)
    _check_bool(fn, "use_packed_ue8m0", use_packed_ue8m0)
    if use_packed_ue8m0 and not use_ue8m0:
        raise ValueError(f"{fn}: use_packed_ue8m0=True needs use_ue8m0=True (power-of-two scales)")


def per_token_cast_to_fp8_reference(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128, use_packed_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PyTorch form of :func:`per_token_cast_to_fp8` (same arguments, results and errors), on any device: what
    the kernel is checked against, and what runs for the inputs it does not serve."""
    _check_per_token_args("per_token_cast_to_fp8", x, use_ue8m0, gran_k, use_packed_ue8m0)
    x_fp8, sf = _cast_blocks(x, 1, gran_k, use_ue8m0)
    return x_fp8, pack_scales_along_k(sf) if use_packed_ue8m0 else sf


def silu_and_mul_reference(
    x: torch.Tensor, row_weights: torch.Tensor | None = None, activation_clamp: float | None = None
) -> torch.Tensor:
    """The SwiGLU of the MoE intermediate in FP32, as :func:`deep_gemm.silu_and_mul_quant_fp8` computes it before
    quantizing: ``silu(gate) * up`` (gate the first half of each row, up the second), with ``gate`` clamped to
    ``<= activation_clamp`` and ``up`` to ``[-activation_clamp, activation_clamp]`` first when given, then times
    ``row_weights`` (one per row) when given. ``silu(g) = g / (1 + exp(-g))``, computed as those three operations
    (each rounded to FP32): ``torch.nn.functional.silu`` is one fused kernel whose rounding depends on how PyTorch
    was compiled (an FMA contraction of the add), so it is not a reproducible reference for a bit-exact kernel.

    Args:
        x: ``[..., M, 2 * I]``, a float dtype, any device.
        row_weights: None, or ``[..., M]`` (x's shape without the last dim), converted to FP32.
        activation_clamp: None or a float.

    Returns:
        ``[..., M, I]`` ``torch.float32``.
    """
    gate, up = x.float().chunk(2, dim=-1)
    if activation_clamp is not None:
        gate = gate.clamp(max=activation_clamp)
        up = up.clamp(min=-activation_clamp, max=activation_clamp)
    y = gate / (1 + torch.exp(-gate)) * up
    if row_weights is not None:
        y = y * row_weights.float().unsqueeze(-1)
    return y


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
    """Quantize a K-major operand with one scale per ``gran_k x gran_k`` block (the RHS recipe).

    Runs :func:`per_block_cast_to_fp8_reference` (the kernel :func:`deep_gemm.per_block_quant_fp8` serves CUDA
    inputs by its own name; see the module docstring).

    Args:
        x: ``[N, K]`` (or ``[G, N, K]``), ``torch.bfloat16`` or ``torch.float32``, any
            strides, CPU or CUDA. Neither ``N`` nor ``K`` need be block multiples: partial
            blocks are zero-padded internally.
        use_ue8m0: round every scale up to a power of two.
        gran_k: rows and columns per block (square blocks, as the reference; 128 is the SM90
            recipe's 128x128).

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` is ``[N, K]`` ``torch.float8_e4m3fn``, contiguous;
        ``sf`` is ``[ceil(N / gran_k), ceil(K / gran_k)]`` ``torch.float32``, contiguous. A
        leading group dim is kept on both.

    Raises:
        TypeError: ``x`` is not a tensor of a supported dtype, or ``use_ue8m0``/``gran_k``
            have the wrong type.
        ValueError: ``x`` is not 2D/3D, or ``gran_k <= 0``.
    """
    _check_cast_args("per_block_cast_to_fp8", x, use_ue8m0, gran_k)
    if _kernel_serves(x, (128,), gran_k):
        from deep_gemm import ops

        return ops.per_block_quant_fp8(x, use_ue8m0)
    return _cast_blocks(x, gran_k, gran_k, use_ue8m0)


def per_block_cast_to_fp8_reference(
    x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PyTorch form of :func:`per_block_cast_to_fp8` (same arguments, results and errors), on any device."""
    _check_cast_args("per_block_cast_to_fp8", x, use_ue8m0, gran_k)
    return _cast_blocks(x, gran_k, gran_k, use_ue8m0)


def per_custom_dims_cast_to_fp8(
    x: torch.Tensor, dims: tuple[int, ...], use_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize with one scale per index of the kept ``dims`` (the amax runs over every other dim).

    E.g. ``dims=(0,)`` on ``[T, H, D]`` gives one scale per token; ``dims=(0, 1)`` one per token
    and head.

    Args:
        x: any shape (at least 1D), a float dtype, any strides, CPU or CUDA.
        dims: the dims that keep their own scales: a tuple (or list) of distinct ints in
            ``[-x.dim(), x.dim())``; empty means one scale for the whole tensor.
        use_ue8m0: round every scale up to a power of two.

    Returns:
        ``(x_fp8, sf)``: ``x_fp8`` has the shape of ``x``, ``torch.float8_e4m3fn``, contiguous;
        ``sf`` is ``torch.float32`` with the sizes of the kept dims in their order in ``x``, with
        size-1 dims squeezed away (the reference's ``squeeze()``; a 0-dim tensor when all are 1).

    Raises:
        TypeError: ``x`` is not a float tensor, ``dims`` is not a tuple/list of ints, or
            ``use_ue8m0`` is not a bool.
        ValueError: ``x`` is 0-dim, or a dim is out of range or repeated.
    """
    fn = "per_custom_dims_cast_to_fp8"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"{fn}: x must be a float tensor (bfloat16, float16, float32, float64), got {x.dtype}")
    if x.dim() == 0:
        raise ValueError(f"{fn}: x must have at least one dim")
    if not isinstance(dims, (tuple, list)) or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        raise TypeError(f"{fn}: dims must be a tuple of ints, got {dims!r}")
    _check_bool(fn, "use_ue8m0", use_ue8m0)
    if any(not -x.dim() <= d < x.dim() for d in dims):
        raise ValueError(f"{fn}: dims must be in [{-x.dim()}, {x.dim()}) for a {x.dim()}D x, got {tuple(dims)}")
    kept = {d % x.dim() for d in dims}
    if len(kept) != len(dims):
        raise ValueError(f"{fn}: dims must be distinct, got {tuple(dims)}")
    reduced = tuple(d for d in range(x.dim()) if d not in kept)
    xf = x.float()
    amax = xf.abs().amax(dim=reduced, keepdim=True) if reduced else xf.abs()
    sf = amax.clamp(min=AMAX_CLAMP_MIN) / torch.full((), FP8_E4M3_MAX, dtype=torch.float32, device=x.device)
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    x_fp8 = (xf / sf).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).contiguous()
    return x_fp8, sf.squeeze()


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round magnitudes up to powers of two: ``2 ** ceil(log2(|x|))``, exactly.

    Works on the FP32 bit pattern: a value whose mantissa bits are not all zero gets its
    exponent bumped by one. Zero stays zero, ``inf`` stays ``inf``, NaN stays NaN, values
    above ``2**127`` become ``inf``, subnormals become ``2**-126``. The sign is dropped.

    Args:
        x: any shape, any float dtype (converted to ``torch.float32`` first, as the reference
            does), any strides, CPU or CUDA.

    Returns:
        A new ``torch.float32`` tensor of the same shape (contiguous).

    Raises:
        TypeError: ``x`` is not a float tensor.

    NOTES: the reference clamps the exponent to [1, 254], so there 0 becomes ``2**-126`` and inf
    ``2**127``; here they stay 0 and inf (no cast produces either: amax is clamped at 1e-4).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"ceil_to_ue8m0: x must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point or x.dtype.itemsize == 1:
        raise TypeError(f"ceil_to_ue8m0: x must be a float tensor (16 bits or more), got {x.dtype}")
    magnitude = x.float().abs().contiguous()
    bits = magnitude.view(torch.int32)
    exponent = bits >> _FP32_EXPONENT_SHIFT
    exponent = exponent + ((bits & _FP32_MANTISSA_MASK) != 0).to(torch.int32)
    rounded = (exponent << _FP32_EXPONENT_SHIFT).view(torch.float32)
    return torch.where(torch.isnan(magnitude), magnitude, rounded)


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """Pack FP32 powers of two into UE8M0 exponent bytes, four to an ``int32``.

    Byte ``i`` (little-endian) of output element ``j`` along the last dim is the biased
    FP32 exponent ``(bits >> 23) & 0xff`` of input element ``4 * j + i``. Sign and
    mantissa bits must be zero (powers of two, zero or inf: values from :func:`ceil_to_ue8m0`);
    this is checked on CPU tensors always and on CUDA tensors with ``DG_DEBUG_CHECKS=1`` (it
    needs a device sync). ``0.0`` packs to byte 0.

    Args:
        x: ``[..., 4 * n]`` ``torch.float32``, any strides, CPU or CUDA.

    Returns:
        ``[..., n]`` ``torch.int32``, contiguous.

    Raises:
        TypeError: ``x`` is not a ``torch.float32`` tensor.
        ValueError: ``x`` is 0-dim, its last dim is not a multiple of 4, or (checked as above) a
            value has sign or mantissa bits.
    """
    _check_fp32("pack_ue8m0_to_int", x)
    if x.dim() == 0 or x.shape[-1] % 4 != 0:
        raise ValueError(f"pack_ue8m0_to_int: the last dim of x must be a multiple of 4, got shape {tuple(x.shape)}")
    if x.shape[-1] == 0:
        return torch.empty(x.shape, dtype=torch.int32, device=x.device)
    bits = _row_major(x).view(torch.int32)
    # (a set sign bit would be dropped: -2.0 packed as 2.0)
    if (not x.is_cuda or debug_checks_enabled()) and bool(((bits & _FP32_SIGN_AND_MANTISSA_MASK) != 0).any()):
        raise ValueError(
            "pack_ue8m0_to_int: x must hold non-negative powers of two (zero sign and mantissa bits), e.g. from "
            "ceil_to_ue8m0"
        )
    exponent = (bits >> _FP32_EXPONENT_SHIFT) & 0xFF
    # NOTES: a uint8 -> int32 view reads bytes in memory order, i.e. little-endian on every CUDA host.
    return exponent.to(torch.uint8).view(torch.int32)


def unpack_ue8m0_from_int(packed_sf: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_ue8m0_to_int`: ``int32`` words back to FP32 powers of two.

    Each byte ``e`` becomes the FP32 value with biased exponent ``e`` and zero mantissa:
    ``2 ** (e - 127)`` for ``1 <= e <= 254``, ``0.0`` for ``e == 0`` and ``inf`` for
    ``e == 255``.

    Args:
        packed_sf: ``[..., n]`` ``torch.int32``, any strides, CPU or CUDA.

    Returns:
        ``[..., 4 * n]`` ``torch.float32``, contiguous.

    Raises:
        TypeError: ``packed_sf`` is not a ``torch.int32`` tensor.
        ValueError: ``packed_sf`` is 0-dim.
    """
    fn = "unpack_ue8m0_from_int"
    if not isinstance(packed_sf, torch.Tensor):
        raise TypeError(f"{fn}: packed_sf must be a torch.Tensor, got {type(packed_sf).__name__}")
    if packed_sf.dtype != torch.int32:
        raise TypeError(f"{fn}: packed_sf must be torch.int32, got {packed_sf.dtype}")
    if packed_sf.dim() == 0:
        raise ValueError(f"{fn}: packed_sf must have at least one dim")
    if packed_sf.shape[-1] == 0:
        return torch.empty(packed_sf.shape, dtype=torch.float32, device=packed_sf.device)
    exponent = _row_major(packed_sf).view(torch.uint8).to(torch.int32)
    return (exponent << _FP32_EXPONENT_SHIFT).view(torch.float32)
