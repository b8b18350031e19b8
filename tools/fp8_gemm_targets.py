"""Score a `python -m deep_gemm.bench --json` result against the speed targets of the FP8 GEMM issue.

    python tools/fp8_gemm_targets.py bench.json

Dense set: M in {64, 128, 4096} x the six DeepSeek (N, K) pairs without (576, 7168) and (129280, 7168).
Prints each target with the measured value and whether it is met (host cost is in measure_jit's JSON).
"""

import json
import math
import sys

PAIRS = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_MS = (64, 128, 4096)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    with open(sys.argv[1]) as f:
        data = json.load(f)
    rows = {(r["m"], r["n"], r["k"]): r for r in data["rows"]}
    dense = [rows[(m, n, k)] for m in DENSE_MS for n, k in PAIRS if (m, n, k) in rows]
    if len(dense) != len(DENSE_MS) * len(PAIRS):
        print(f"warning: {len(dense)} of {len(DENSE_MS) * len(PAIRS)} dense shapes in the file")
    blockwise = [r["speedup_vs_blockwise"] for r in dense if r.get("speedup_vs_blockwise")]
    fast = [r["speedup_vs_fast_accum"] for r in dense if r.get("speedup_vs_fast_accum")]
    worst = min(dense, key=lambda r: r.get("speedup_vs_blockwise") or math.inf)
    print(
        f"dense geomean vs cuBLASLt blockwise: {geomean(blockwise):.3f} (target >= 1.35), "
        f"worst {worst['speedup_vs_blockwise']:.2f} at {worst['m']}x{worst['n']}x{worst['k']} (target >= 1.0)"
    )
    print(f"dense geomean vs cuBLASLt per-tensor fast-accum: {geomean(fast):.3f} (target >= 1.05)")
    large = [r for r in dense if r["m"] == 4096]
    over = sum(r["tflops"] >= 1300 for r in large)
    print(
        "M = 4096 TFLOPS: "
        + ", ".join(f"{r['n']}x{r['k']}: {r['tflops']:.0f}" for r in large)
        + f" ({over} of {len(large)} >= 1300; target: 4)"
    )
    cube = rows.get((8192, 8192, 8192))
    if cube:
        print(f"8192^3: {cube['tflops']:.0f} TFLOPS (target >= 1400)")
    memory = [r for r in dense if r["m"] <= 128 and r["k"] >= 7168]
    print(
        "memory-bound M <= 128, K >= 7168, % of copy bandwidth (target >= 75): "
        + ", ".join(f"{r['m']}x{r['n']}x{r['k']}: {r['pct_copy_bandwidth']:.0f}" for r in memory)
    )
    on_device = [r for r in memory if r.get("pct_copy_bandwidth_device") is not None]
    if on_device:  # (benches since run 80: the kernel's device time against the copy's, without the launch)
        print(
            "  the same on device time: "
            + ", ".join(f"{r['m']}x{r['n']}x{r['k']}: {r['pct_copy_bandwidth_device']:.0f}" for r in on_device)
        )


if __name__ == "__main__":
    main()
