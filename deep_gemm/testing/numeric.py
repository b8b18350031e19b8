"""Numeric comparison helpers for tests and benchmarks."""

import torch

__all__ = ["calc_diff"]


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """Return ``1 - 2 * sum(x * y) / sum(x * x + y * y)``, computed in float64.

    0 when ``x == y``, about ``(relative RMS error)**2 / 2`` when they are close, up to 2
    when ``x == -y``. Two all-zero tensors give 0. Any NaN or inf (in either tensor, even at
    matching positions) makes the result NaN: check inf/NaN positions separately.

    Args:
        x: any shape and float dtype, CPU or CUDA.
        y: same shape as ``x``, any float dtype, same device.

    Raises:
        TypeError: ``x`` or ``y`` is not a tensor.
        ValueError: the shapes differ.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"calc_diff: x and y must be tensors, got {type(x).__name__} and {type(y).__name__}")
    if x.shape != y.shape:
        raise ValueError(f"calc_diff: x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if not bool(torch.isfinite(x).all()) or not bool(torch.isfinite(y).all()):
        return float("nan")
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator.item() == 0.0:
        return 0.0
    return float(1.0 - 2.0 * (x * y).sum() / denominator)
