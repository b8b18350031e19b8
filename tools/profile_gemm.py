"""Run one GEMM shape a few times (for ncu / compute-sanitizer) and check it once.

python tools/profile_gemm.py M N K [--calls 3] [--bf16 | --per-row] [--fp32-c [--in-place]]

Default: fp8_gemm_nt, recipe (1, 128, 128), BF16 D. --per-row: fp8_gemm_nt with recipe (1, 1, 128), FP32 D.
--bf16: bf16_gemm_nt instead (BF16 D, or FP32 D). --fp32-c (with --bf16 or --per-row): FP32 D = C + A @ B.T
with a distinct C; --in-place: the same with C = D (each call adds A @ B.T into D once more).
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
    parser.add_argument("--bf16", action="store_true", help="bf16_gemm_nt instead of fp8_gemm_nt")
    parser.add_argument("--per-row", action="store_true", help="fp8_gemm_nt with recipe (1, 1, 128), FP32 D")
    parser.add_argument("--fp32-c", action="store_true", help="(with --bf16 or --per-row) FP32 D = C + A @ B.T")
    parser.add_argument("--in-place", action="store_true", help="(with --fp32-c) C is D: D += A @ B.T per call")
    args = parser.parse_args()
    if args.fp32_c and not (args.bf16 or args.per_row):
        parser.error("--fp32-c needs --bf16 or --per-row")
    if args.in_place and not args.fp32_c:
        parser.error("--in-place needs --fp32-c")
    if args.bf16 and args.per_row:
        parser.error("--bf16 and --per-row exclude each other")
    a_bf16 = torch.randn(args.m, args.k, device="cuda", dtype=torch.bfloat16)
    b_bf16 = torch.randn(args.n, args.k, device="cuda", dtype=torch.bfloat16)
    ref = a_bf16.float() @ b_bf16.float().t()
    c = torch.randn(args.m, args.n, device="cuda") if args.fp32_c else None
    if c is not None:
        # (in place: D starts as C and every call adds the product once more)
        ref = c + ref * (args.calls if args.in_place else 1)
    suffix = " + c" + (" (in place)" if args.in_place else "") if c is not None else ""
    # D: FP32 with recipe (1, 1, 128) or a C (C itself in place), else BF16
    d_dtype = torch.float32 if args.per_row or args.fp32_c else torch.bfloat16
    d = c.clone() if args.in_place else torch.empty(args.m, args.n, device="cuda", dtype=d_dtype)
    c_arg = d if args.in_place else c
    if args.bf16:
        for _ in range(args.calls):
            deep_gemm.bf16_gemm_nt(a_bf16, b_bf16, d, c_arg)
        name = "bf16_gemm_nt" + suffix
    elif args.per_row:
        (a, sfa), (b, sfb) = per_token_cast_to_fp8(a_bf16), per_token_cast_to_fp8(b_bf16)
        sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        sfb = deep_gemm.get_mn_major_tma_aligned_tensor(sfb)
        for _ in range(args.calls):
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c_arg, recipe=(1, 1, 128))
        name = "fp8_gemm_nt (1, 1, 128)" + suffix
    else:
        a, sfa = per_token_cast_to_fp8(a_bf16)
        b, sfb = per_block_cast_to_fp8(b_bf16)
        sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        for _ in range(args.calls):
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
        name = "fp8_gemm_nt"
    torch.cuda.synchronize()
    diff = calc_diff(d, ref)
    print(f"{name} m={args.m} n={args.n} k={args.k} calc_diff vs FP32 product of the inputs: {diff:.2e}")
    if not diff < 1e-3:
        raise SystemExit(f"calc_diff {diff} exceeds 1e-3")


if __name__ == "__main__":
    main()
