"""Which padding rows of an m-grouped contiguous GEMM's D a call zeroes (the GPU tests' expectation).

With ``ensure_zero_padding`` every padding row; without it, in the per-row layout, the padding rows of each
alignment-sized segment that starts with a group's row (what the reference's SM90 kernel, storing whole segment-sized
blocks, writes); in the psum layout none. Padding rows not zeroed keep what D held.
"""

import torch


def zeroed_padding_rows(per_row: torch.Tensor, num_groups: int, alignment: int, ensure_zero_padding: bool,
                        psum: bool) -> torch.Tensor:  # fmt: skip
    """Bool [M]: the rows a call zeroes. ``per_row``: the per-row group ids of the call's layout (for a psum call,
    the same segments as per-row ids, -1 for padding)."""
    padding = (per_row < 0) | (per_row >= num_groups)
    if ensure_zero_padding:
        return padding
    if psum:
        return torch.zeros_like(padding)
    rows = torch.arange(per_row.shape[0], device=per_row.device)
    first = per_row[rows - rows % alignment]
    return padding & (first >= 0) & (first < num_groups)


def check_padding_rows(d: torch.Tensor, written: torch.Tensor, zeroed: torch.Tensor, case: str) -> None:
    """Rows outside ``written`` (the groups' rows): zero where ``zeroed``, else still NaN (D was poisoned)."""
    padding = ~written
    assert (d[padding & zeroed].float() == 0).all(), f"{case}: padding rows that must be zero are not"
    assert d[padding & ~zeroed].isnan().all(), f"{case}: padding rows that must stay untouched were written"
