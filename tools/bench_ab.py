"""Compare two ``python -m deep_gemm.bench --json`` files of the same suite and shapes, row by row (ours only).

python tools/bench_ab.py bench.json bench-ab.json [--names new old]

Prints each row's median µs in both files and the ratio (second / first: above 1, the first file's kernels
are faster), then the geomean ratio, optionally over a subset of rows (``--only-m 64 128``).
"""

import argparse
import json
import math


def row_key(row: dict) -> tuple:
    return tuple(row.get(key) for key in ("g", "m", "n", "k", "variant", "label"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--names", nargs=2, default=["first", "second"])
    parser.add_argument("--only-m", type=int, nargs="*", default=None, help="rows with these M only")
    args = parser.parse_args()
    first = {row_key(r): r for r in json.load(open(args.first))["rows"]}
    second = {row_key(r): r for r in json.load(open(args.second))["rows"]}
    print(f"{'shape':>28} | {args.names[0]:>10} µs | {args.names[1]:>10} µs | ratio")
    logs = []
    for key, row in first.items():
        other = second.get(key)
        if other is None or not row.get("ours") or not other.get("ours"):
            continue
        if args.only_m is not None and row.get("m") not in args.only_m:
            continue
        a, b = row["ours"]["median_us"], other["ours"]["median_us"]
        logs.append(math.log(b / a))
        shape = "x".join(str(v) for v in key if v is not None)
        print(f"{shape:>28} | {a:13.1f} | {b:13.1f} | {b / a:.3f}")
    if logs:
        print(
            f"geomean ratio {args.names[1]} / {args.names[0]} over {len(logs)} rows: {math.exp(sum(logs) / len(logs)):.3f}"
        )


if __name__ == "__main__":
    main()
