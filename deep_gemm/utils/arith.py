"""Integer helpers for tile counts and TMA alignment: plain arithmetic, as the reference API has them.

``ceil_div`` and ``align`` are the reference's formulas and nothing more, so they take Python
integers (negative ones too) and integer tensors alike (``deep_gemm.ceil_div(torch.tensor(...), 4)``
is an engine call).
"""

__all__ = ["align", "ceil_div", "get_tma_aligned_size"]

# TMA requires every global stride except the innermost to be a multiple of 16 bytes.
_TMA_ALIGNMENT_BYTES = 16


def ceil_div(x, y):
    """Return ``(x + y - 1) // y``: ``ceil(x / y)`` for integers with ``y > 0``.

    Plain arithmetic, the reference's formula: ``x`` and ``y`` may be Python integers of any sign or
    integer tensors (broadcast as ``+`` and ``//`` do). For ``y < 0`` the formula is not a ceiling
    (the reference's behaviour, kept). ``y == 0`` raises what ``//`` raises (``ZeroDivisionError``
    for Python integers).
    """
    return (x + y - 1) // y


def align(x, y):
    """Return ``ceil_div(x, y) * y``: ``x`` rounded up to a multiple of ``y`` (for ``y > 0``).

    Plain arithmetic, like :func:`ceil_div`: Python integers of any sign or integer tensors.
    """
    return ceil_div(x, y) * y


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round a number of elements up so that it spans a multiple of 16 bytes.

    This is the leading dimension TMA needs: e.g. ``get_tma_aligned_size(4097, 4) == 4100``
    for an FP32 scale tensor with 4097 rows. (The same function as ``deep_gemm.get_tma_aligned_size``
    of the extension, in Python.)

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
    if x < 0:
        raise ValueError(f"get_tma_aligned_size: x must be non-negative, got {x}")
    return align(x, _TMA_ALIGNMENT_BYTES // element_size)
