"""Print the rows of a ``python -m deep_gemm.bench --json`` file as a Markdown table (for docs/perf).

python tools/bench_to_markdown.py bench.json
"""

import argparse
import json


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _us(entry) -> str:
    return _num(entry["median_us"], ".1f") if entry else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_path")
    data = json.load(open(parser.parse_args().json_path))
    rows = data["rows"]
    grouped = "g" in rows[0]
    shape = ["G", "M", "N", "K", "rows"] if grouped else ["M", "N", "K"]
    baselines = [key for key in ("blockwise", "fast_accum", "grouped_mm") if any(r.get(key) for r in rows)]
    header = [*shape, "ours median µs", "ours min µs", "TFLOPS", "GB/s", "% copy BW"]
    for key in baselines:
        header += [f"{key} µs", "speedup"]
    if not grouped:
        header.append("SM MHz")
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for r in rows:
        cells = (
            [str(r["g"]), str(r["m"]), str(r["n"]), str(r["k"]), str(r["valid_rows"])]
            if grouped
            else [
                str(r["m"]),
                str(r["n"]),
                str(r["k"]),
            ]
        )
        ours = r.get("ours")
        cells += [
            _us(ours),
            _num(ours["min_us"], ".1f") if ours else "-",
            _num(r.get("tflops"), ".0f"),
            _num(r.get("gbps"), ".0f"),
            _num(r.get("pct_copy_bandwidth"), ".0f"),
        ]
        for key in baselines:
            cells += [_us(r.get(key)), _num(r.get(f"speedup_vs_{key}"), ".2f")]
        if not grouped:
            cells.append(str(r.get("sm_clock_mhz", "-")))
        print("| " + " | ".join(cells) + " |")
    geomeans = data.get("geomean_speedup", {})
    if geomeans:
        print()
        print("Geomean speedups: " + ", ".join(f"{k} {_num(v, '.3f')}" for k, v in geomeans.items()))


if __name__ == "__main__":
    main()
