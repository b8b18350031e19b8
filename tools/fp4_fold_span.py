"""How often folding the four 1x32 UE8M0 scales of a 128-wide K block into an e4m3 conversion is inexact.

The SM90 FP8 x FP4 GEMM converts each e2m1 value v of 1x32 group i to e4m3(v * 2^(e_i - e_max)), where e_max is
the largest of the block's four scale exponents, and applies 2^e_max in the FP32 promotion. That is exact while
every nonzero v * 2^(e_i - e_max) is an e4m3 value (shift e_max - e_i <= 8: e4m3 subnormals reach 2^-9). This
script quantizes weight-like rows with deep_gemm.utils.per_token_cast_to_fp4 (UE8M0, gran_k 32) and counts the
blocks whose shift exceeds 8, the blocks where a nonzero value actually rounds, and the rounding error relative to
the block's largest magnitude and to a row's dot product with a random activation. CPU only:
`python tools/fp4_fold_span.py`.
"""

import torch

from deep_gemm.utils import per_token_cast_to_fp4
from deep_gemm.utils.fp4_casts import _decode_e2m1, _unpack_nibbles


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    return x.float().to(torch.float8_e4m3fn).double()


def measure(name: str, w: torch.Tensor) -> None:
    packed, sf = per_token_cast_to_fp4(w, use_ue8m0=True, gran_k=32)
    rows, k = w.shape
    values = _decode_e2m1(_unpack_nibbles(packed)).double().view(rows, k // 128, 4, 32)
    exps = torch.log2(sf.double()).round().view(rows, k // 128, 4)
    e_max = exps.amax(dim=-1, keepdim=True)
    shift = e_max - exps  # [rows, blocks, 4]
    exact = values * sf.double().view(rows, k // 128, 4, 1)
    folded = e4m3_round(values * torch.exp2(-shift).unsqueeze(-1)) * torch.exp2(e_max).unsqueeze(-1)
    over = (shift > 8).any(dim=-1)
    rounded = ((folded != exact) & (values != 0)).any(dim=-1).any(dim=-1)
    err = (folded - exact).abs().amax(dim=(-1, -2))
    block_amax = exact.abs().amax(dim=(-1, -2)).clamp(min=1e-300)
    x = torch.randn(k, dtype=torch.float64)
    dot_exact, dot_folded = exact.reshape(rows, k) @ x, folded.reshape(rows, k) @ x
    # (relative to sum |w| |x|, the scale of the dot product's rounding: a plain relative error blows up where the
    # dot product cancels)
    dot_err = ((dot_folded - dot_exact).abs() / (exact.reshape(rows, k).abs() @ x.abs())).max().item()
    print(
        f"{name:34s} blocks {over.numel():8d}  shift>8 {over.float().mean().item() * 100:8.4f} %  "
        f"rounded {rounded.float().mean().item() * 100:8.4f} %  max err/block amax {(err / block_amax).max().item():.2e}"
        f"  max dot err/sum|w||x| {dot_err:.2e}"
    )


def main() -> None:
    torch.manual_seed(0)
    rows, k = 2048, 7168
    measure("normal", torch.randn(rows, k))
    w = torch.randn(rows, k)
    w[torch.rand(rows, k) < 0.001] *= 100.0
    measure("normal, 0.1 % outliers x100", w)
    w = torch.randn(rows, k)
    w[torch.rand(rows, k) < 0.0001] *= 1000.0
    measure("normal, 0.01 % outliers x1000", w)
    measure("student-t (3 dof)", torch.distributions.StudentT(3.0).sample((rows, k)))
    w = torch.randn(rows, k) * torch.exp2(torch.randint(-12, 1, (rows, k // 32, 1)).float()).repeat_interleave(
        32, 1
    ).view(rows, k)
    measure("groups scaled 2^-12 .. 1 at random", w)
    w = torch.randn(rows, k)
    w[:, 32:64] = 0.0
    measure("normal, one all-zero group a row", w)


if __name__ == "__main__":
    main()
