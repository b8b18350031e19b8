"""Probe stream-K results tile by tile (run on a GPU machine): for each case, D against a float64 reference of the
dequantized inputs, printing per (m_block, n_block) the count of non-finite elements and the worst relative error.

    DG_TUNE=fp8_gemm:stream_k=1 python tools/stream_k_probe.py 300 2112 7168 [--col-pad 3] [--calls 3]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import test_fp8_gemm as t  # noqa: E402

import deep_gemm  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("m", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("k", type=int)
    parser.add_argument("--col-pad", type=int, default=0)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--bm", type=int, default=128)
    parser.add_argument("--bn", type=int, default=128)
    args = parser.parse_args()
    m, n, k = args.m, args.n, args.k
    torch.manual_seed(1)
    _, _, a, sfa, b, sfb = t.make_inputs(m, n, k)
    ref = t.dequantized_reference(a, sfa, b, sfb)
    for call in range(args.calls):
        buf = torch.full((m, n + args.col_pad), float("nan"), device="cuda", dtype=torch.bfloat16)
        d = buf[:, :n]
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
        torch.cuda.synchronize()
        bad = ~torch.isfinite(d)
        err = ((d.double() - ref).abs() / (ref.abs() + ref.abs().mean())).nan_to_num(0)
        rows = []
        for mb in range((m + args.bm - 1) // args.bm):
            cells = []
            for nb in range((n + args.bn - 1) // args.bn):
                sl = (slice(mb * args.bm, (mb + 1) * args.bm), slice(nb * args.bn, (nb + 1) * args.bn))
                nan = int(bad[sl].sum())
                worst = float(err[sl].max())
                cells.append("." if nan == 0 and worst < 0.02 else (f"N{nan}" if nan else f"e{worst:.2f}"))
            rows.append(f"  mb{mb:3d} " + " ".join(cells))
        print(f"call {call}: non-finite {int(bad.sum())}, worst rel err {float(err.max()):.3g}")
        if int(bad.sum()) or float(err.max()) >= 0.02:
            print("\n".join(rows))


if __name__ == "__main__":
    main()
