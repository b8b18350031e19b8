"""Integer helpers for tile counts and TMA alignment."""

__all__ = ["align", "ceil_div", "get_tma_aligned_size"]

# TMA requires every global stride except the innermost to be a multiple of 16 bytes.
_TMA_ALIGNMENT_BYTES = 16


def ceil_div(x: int, y: int) -> int:
    """Return ``ceil(x / y)`` for integers.

    Args:
        x: the dividend, ``x >= 0``.
        y: the divisor, ``y > 0``.

    Raises:
        ValueError: if ``y <= 0`` or ``x < 0``.
    """
    if y <= 0:
        raise ValueError(f"ceil_div: divisor y must be positive, got {y}")
    if x < 0:
        raise ValueError(f"ceil_div: dividend x must be non-negative, got {x}")
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """Round ``x`` up to the nearest multiple of ``y``.

    Args:
        x: the value to round, ``x >= 0``.
        y: the alignment, ``y > 0``.

    Raises:
        ValueError: if ``y <= 0`` or ``x < 0``.
    """
    return ceil_div(x, y) * y


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round a number of elements up so that it spans a multiple of 16 bytes.

    This is the leading dimension TMA needs: e.g. ``get_tma_aligned_size(4097, 4) == 4100``
    for an FP32 scale tensor with 4097 rows.

    Args:
        x: the number of elements, ``x >= 0``.
        element_size: the size of one element in bytes; must divide 16 (1, 2, 4, 8 or 16).

    Raises:
        ValueError: if ``element_size`` does not divide 16, or ``x < 0``.
    """
    if element_size <= 0 or _TMA_ALIGNMENT_BYTES % element_size != 0:
        raise ValueError(
            f"get_tma_aligned_size: element_size must divide {_TMA_ALIGNMENT_BYTES} bytes, got {element_size}"
        )
    return align(x, _TMA_ALIGNMENT_BYTES // element_size)
