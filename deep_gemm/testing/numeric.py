"""Numeric comparison helpers for tests and benchmarks."""

import torch

__all__ = ["assert_bitwise_equal", "calc_diff"]


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return ``1 - 2 * sum(x * y) / sum(x * x + y * y)``, computed in float64, as a 0-dim tensor.

    The reference API's return type: a 0-dim ``torch.float64`` tensor on the inputs' device, so
    ``.item()``, ``float(...)``, comparisons and format specs all work (no device sync until the
    value is read). 0 when ``x == y``, about ``(relative RMS error)**2 / 2`` when they are close,
    up to 2 when ``x == -y``. Two all-zero tensors give 0 (the reference: NaN). Any inf or NaN in
    either tensor makes the result NaN: check inf/NaN positions separately.

    Args:
        x: any shape and float dtype, CPU or CUDA.
        y: same shape as ``x``, any float dtype, same device.

    Raises:
        TypeError: ``x`` or ``y`` is not a tensor.
        ValueError: the shapes or the devices differ.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"calc_diff: x and y must be tensors, got {type(x).__name__} and {type(y).__name__}")
    if x.shape != y.shape:
        raise ValueError(f"calc_diff: x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.device != y.device:
        raise ValueError(f"calc_diff: x and y must be on the same device, got {x.device} and {y.device}")
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    # inf or NaN anywhere reaches both sums (inf * 0 and inf / inf are NaN), so the result is NaN.
    diff = 1.0 - 2.0 * (x * y).sum() / denominator
    return torch.where(denominator == 0, torch.zeros_like(diff), diff)


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor, label: str = "") -> None:
    """Assert that ``x`` and ``y`` hold the same bits: same shape and dtype, every element's bytes equal.

    NaNs compare equal when their bits do; ``0.0`` and ``-0.0`` differ. Strides may differ.

    Raises:
        TypeError: ``x`` or ``y`` is not a tensor.
        AssertionError: dtype, shape or device differ, or some elements differ; the message starts
            with ``label`` and gives the count of differing elements and the first of them.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"assert_bitwise_equal: x and y must be tensors, got {type(x).__name__} and {type(y).__name__}")
    prefix = f"{label}: " if label else ""
    if x.dtype != y.dtype:
        raise AssertionError(f"{prefix}dtypes differ: {x.dtype} vs {y.dtype}")
    if x.shape != y.shape:
        raise AssertionError(f"{prefix}shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}")
    if x.device != y.device:
        raise AssertionError(f"{prefix}devices differ: {x.device} vs {y.device}")
    numel, itemsize = x.numel(), x.element_size()
    if numel == 0:
        return
    x_bytes = x.contiguous().reshape(-1).view(torch.uint8).view(numel, itemsize)
    y_bytes = y.contiguous().reshape(-1).view(torch.uint8).view(numel, itemsize)
    differs = (x_bytes != y_bytes).any(dim=1)
    num_differ = int(differs.sum())
    if num_differ:
        first = int(differs.nonzero()[0, 0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), x.shape))
        x_first, y_first = x.reshape(-1)[first].item(), y.reshape(-1)[first].item()
        raise AssertionError(
            f"{prefix}{num_differ} of {numel} elements differ bitwise; first at {index}: {x_first!r} vs {y_first!r}"
        )
