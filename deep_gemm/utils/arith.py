"""Integer helpers for tile counts and alignment: plain arithmetic, as the reference API has them.

``ceil_div`` and ``align`` are the reference's formulas and nothing more, so they take Python
integers (negative ones too) and integer tensors alike (``deep_gemm.ceil_div(torch.tensor(...), 4)``
is an engine call).
"""

__all__ = ["align", "ceil_div"]


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
