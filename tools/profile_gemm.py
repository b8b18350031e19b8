"""Run fp8_gemm_nt on one shape a few times (for ncu / compute-sanitizer) and check it once.

python tools/profile_gemm.py M N K [--calls 3]
"""

import argparse

import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("m", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("k", type=int)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    a_bf16 = torch.randn(args.m, args.k, device="cuda", dtype=torch.bfloat16)
    b_bf16 = torch.randn(args.n, args.k, device="cuda", dtype=torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(a_bf16)
    b, sfb = per_block_cast_to_fp8(b_bf16)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(args.m, args.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(args.calls):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()
    diff = calc_diff(d, a_bf16.float() @ b_bf16.float().t())
    print(f"m={args.m} n={args.n} k={args.k} calc_diff vs BF16 product: {diff:.2e}")
    if not diff < 1e-3:
        raise SystemExit(f"calc_diff {diff} exceeds 1e-3")


if __name__ == "__main__":
    main()
