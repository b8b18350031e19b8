"""Time fp8_gemm_nt (or, with --suite bf16, bf16_gemm_*; with --suite kgrouped, the k-grouped FP8 GEMMs and the
dense recipe (1, 1, 128); with --suite grouped / masked / bf16_grouped / bf16_masked, the m-grouped GEMMs, shapes
GxMxNxK) under forced configs, to calibrate the heuristic (run on a GPU machine).

    python tools/sweep_fp8_gemm.py --shapes 64x2112x7168 1x4096x7168 --configs bm64-bn64-s4 bn128-s1 auto \
        --json sweep.json
    python tools/sweep_fp8_gemm.py --suite bf16 --shapes 128x2112x7168@nt 128x2112x7168@nt+c --configs auto bn128-s7
    python tools/sweep_fp8_gemm.py --suite kgrouped --shapes 0x4096x7168x7168 4x4096x7168x8192 --configs auto bm256-bn64

A config is `auto` (the heuristic's choice) or dash-separated forced values: bmN (BLOCK_M), bnN
(BLOCK_N), sN (split-K), mc0/mc1 (multicast off/on), ov0/ov1 (overlapped promotion off/on), fbN (FP32 D's
staging buffers per math warpgroup), sk0/sk1/sk2 (stream-K off / the last wave / the last two waves), ma1 (2-CTA
pairs along N sharing A). A config becomes the DG_TUNE section of the suite's GEMM family (docs/design.md, "Forcing kernel configurations"):
fp8_gemm, or bf16_gemm for the bf16 suites; e.g. bm128-s2 is DG_TUNE="fp8_gemm:block_m=128,split_k=2". Each config
runs in its own process (DG_TUNE is read when a shape's plan is made) through `python -m deep_gemm.bench
--no-baselines`; shapes a config does not fit are reported as errors. Prints a table of median microseconds, the
fastest config per shape marked with '*', and what the heuristic picked. A config's process gets
DG_SWEEP_CONFIG_TIMEOUT seconds (default 300); one that runs longer is reported as an error for its shapes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

# config part prefix -> DG_TUNE key of the GEMM families
KEYS = {
    "bm": "block_m",
    "bn": "block_n",
    "s": "split_k",
    "mc": "multicast",
    "ov": "overlap",
    "fb": "fp32_buffers",
    "sk": "stream_k",
    "ma": "multicast_on_a",
}


def tune_family(suite: str) -> str:
    """The DG_TUNE family whose section steers the GEMMs of a bench suite."""
    return "bf16_gemm" if suite.startswith("bf16") else "fp8_gemm"


def config_env(config: str, family: str = "fp8_gemm") -> dict[str, str]:
    """The environment that forces `config` ("auto" or dash-separated parts such as bm128-s2) on `family`'s
    GEMMs: {"DG_TUNE": "family:block_m=128,split_k=2"}, checked by the extension's parser (a ValueError names a
    bad key or value, e.g. overlap for bf16_gemm)."""
    if config == "auto":
        return {}
    items = []
    for part in config.split("-"):
        key = part.rstrip("0123456789")
        if key not in KEYS or key == part:
            raise SystemExit(
                f"bad config part {part!r} in {config!r}: expected bmN, bnN, sN, mcN, ovN, fbN, skN or maN"
            )
        items.append(f"{KEYS[key]}={part[len(key) :]}")
    tune = f"{family}:{','.join(items)}"
    import deep_gemm

    try:
        deep_gemm._C.parse_tune(tune)
    except ValueError as e:
        raise SystemExit(f"config {config!r}: {e}") from None
    return {"DG_TUNE": tune}


def row_key(row: dict) -> str:
    """The --shapes entry a bench row answers: MxNxK (and @variant for the bf16 suite; GxMxNxK for kgrouped)."""
    groups = f"{row['g']}x" if "g" in row else ""
    return groups + f"{row['m']}x{row['n']}x{row['k']}" + (f"@{row['variant']}" if "variant" in row else "")


def run_config(config: str, shapes: list[str], extra: list[str], family: str) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        cmd = [sys.executable, "-m", "deep_gemm.bench", "--no-baselines", "--json", path, "--shapes", *shapes, *extra]
        # (the caller's own DG_TUNE never leaks into a config: "auto" is the heuristic's pick)
        env = {key: value for key, value in os.environ.items() if key != "DG_TUNE"}
        env.update(config_env(config, family))
        timeout = int(os.environ.get("DG_SWEEP_CONFIG_TIMEOUT", "300"))
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {s: {"error": f"timed out after {timeout} s (DG_SWEEP_CONFIG_TIMEOUT)"} for s in shapes}
        if not os.path.exists(path):
            return {s: {"error": (out.stdout + out.stderr).strip()[-300:]} for s in shapes}
        with open(path) as f:
            rows = json.load(f)["rows"]
    result = {}
    for row in rows:
        shape = row_key(row)
        if row["ours"]:
            result[shape] = {
                "median_us": row["ours"]["median_us"],
                "min_us": row["ours"]["min_us"],
                "accurate": row.get("ours_accurate", row.get("ours_error") is None),
                "sm_clock_mhz": row.get("sm_clock_mhz"),  # (the bf16 suite does not record it)
            }
        else:
            result[shape] = {"error": row["ours_error"]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--configs", nargs="+", required=True)
    parser.add_argument("--json")
    parser.add_argument("--num-tests", default="20")
    parser.add_argument(
        "--suite",
        default="dense",
        choices=["dense", "bf16", "kgrouped", "grouped", "masked", "bf16_grouped", "bf16_masked"],
    )
    args = parser.parse_args()
    extra = ["--num-tests", args.num_tests, "--idle", "0.1", "--suite", args.suite]
    family = tune_family(args.suite)
    for config in args.configs:  # (every config checked before the first one runs)
        config_env(config, family)
    results = {config: run_config(config, args.shapes, extra, family) for config in args.configs}

    # The heuristic's choice for each shape, to print next to the timings (on the CPU: with clusters estimated as
    # whole clusters of 132 SMs, not the device's measured capacity, which `auto` used)
    import deep_gemm

    width = max(len(c) for c in args.configs) + 2
    print("shape".ljust(22) + "".join(c.rjust(width) for c in args.configs) + "   heuristic (CPU estimate)")
    for shape in args.shapes:
        times = {c: results[c].get(shape, {}).get("median_us") for c in args.configs}
        best = min((t for t in times.values() if t is not None), default=None)
        cells = []
        for c in args.configs:
            t = times[c]
            text = (
                "err"
                if t is None
                else f"{t:.1f}" + ("*" if t == best else "") + ("" if results[c][shape]["accurate"] else "!")
            )
            cells.append(text.rjust(width))
        mnk, _, variant = shape.partition("@")
        dims = [int(v) for v in mnk.split("x")]
        if args.suite == "kgrouped":
            g, m, n, k = dims
            kind = dict(per_row_sfb=True, gemm_type=4 if g else 0)
            m *= max(g, 1)
        elif args.suite in ("grouped", "masked", "bf16_grouped", "bf16_masked"):
            # (contiguous: G groups of about M rows, segments aligned to 128; masked: G groups of max_m = 4096 rows,
            # planned for M expected rows each, as the bench calls it)
            g, m, n, k = dims
            kind = dict(gemm_type=1) if args.suite.endswith("grouped") else dict(gemm_type=3, num_groups=g)
            kind.update(bf16=args.suite.startswith("bf16"))
            m *= g
        else:
            m, n, k = dims
            kind = {}
            if args.suite == "bf16":
                kind = dict(bf16=True, mn_major_a=variant[:1] == "t", mn_major_b=variant[1:2] == "n")
                if variant.startswith("nt+c"):
                    kind.update(fp32_out=True, has_c=True)
        cfg = deep_gemm._C.get_gemm_config(m, n, k, **kind)
        pick = f"bm{cfg['block_m']}-bn{cfg['block_n']}-s{cfg['num_splits']}-sk{cfg['stream_k']}"
        print(shape.ljust(22) + "".join(cells) + f"   {pick}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
