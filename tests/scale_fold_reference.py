"""The float64 model of folding 1x32 power-of-two scales into one scale per 128 of K (common/scale_fold.cuh), shared
by the FP8 x FP4 GEMM tests (A and B with 1x32 scales) and the Mega MoE tests (the dispatch and the SwiGLU fold).

Per row and 128-wide block of K, with e_g the exponents of its groups inside K and e_max their largest: each value
becomes e4m3(v * 2^(e_g - e_max)) (round to nearest even) and the block is scaled by 2^e_max.
"""

from __future__ import annotations

import torch

from deep_gemm.utils import ceil_div


def _fold(values: torch.Tensor, sf: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The folded e4m3 values ``[rows, K]`` and each 128-block's largest exponent ``[rows, ceil(K/128)]`` (float64)."""
    rows, blocks = values.shape[0], ceil_div(k, 128)
    exps = torch.log2(sf.double()).round()
    # (groups past K take no part in the block's largest exponent: padded below every UE8M0 exponent)
    exps = torch.nn.functional.pad(exps, (0, blocks * 4 - exps.shape[1]), value=-1000.0).view(rows, blocks, 4)
    e_max = exps.amax(dim=-1, keepdim=True)
    shift = torch.exp2(exps - e_max).repeat_interleave(32, dim=-1).view(rows, blocks * 128)[:, :k]
    return (values.double() * shift).float().to(torch.float8_e4m3fn), e_max[..., 0]


def fold_1x32(values: torch.Tensor, sf: torch.Tensor, k: int) -> torch.Tensor:
    """float64 ``[rows, K]``: ``values`` (the unscaled e2m1 or e4m3 values, any float dtype) with their FP32
    power-of-two 1x32 scales ``sf [rows, ceil(K/32)]`` folded as the kernels fold them."""
    folded, e_max = _fold(values, sf, k)
    return folded.double() * torch.exp2(e_max).repeat_interleave(128, dim=-1)[:, :k]


def fold_1x32_fp8(x: torch.Tensor, sf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' bytes: e4m3 ``x [rows, K]`` with FP32 power-of-two 1x32 scales -> (e4m3 ``[rows, K]``, FP32 1x128
    scales ``[rows, ceil(K/128)]``), bit for bit."""
    folded, e_max = _fold(x, sf, x.shape[1])
    return folded, torch.exp2(e_max).float()
