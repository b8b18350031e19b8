"""Fingerprint the SASS of every kernel the CPU tests compile and the heuristic picks, to prove a refactor is pure.

    python tools/sass_fingerprint.py OUT.json [--jobs 2] [--compare BEFORE.json]

Compiles (NVCC, sm_90a) the configs of tests/test_jit.py (helper kernels, FP8 and BF16 GEMMs) and the distinct
GEMM kernels the heuristic picks for every bench shape (tools/check_pick_spills.py), disassembles each cubin and
writes {kernel label: sha256 of its SASS instructions} to OUT.json. With --compare, prints the kernels whose SASS
differs from BEFORE.json (or is missing from either) and exits 1 if any does: a change that only moves code
between files or functions must leave every fingerprint as it was.
"""

import argparse
import hashlib
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(_ROOT / "tests"), str(_ROOT / "tools")]

import check_pick_spills  # noqa: E402
import test_jit  # noqa: E402
from jit_helpers import dump_sass  # noqa: E402

import deep_gemm  # noqa: E402

_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def kernels() -> dict[str, tuple[str, dict]]:
    """Label -> (family, compile parameters) for every kernel to fingerprint."""
    out: dict[str, tuple[str, dict]] = {}
    for family, params in test_jit.HELPER_KERNELS:
        out[f"helper {family} {json.dumps(params, sort_keys=True)}"] = (family, params)
    for cfg in test_jit.GEMM_CONFIGS:
        out[f"test fp8 {json.dumps(cfg, sort_keys=True)}"] = ("sm90_gemm", cfg)
    for cfg in test_jit.BF16_GEMM_CONFIGS:
        out[f"test bf16 {json.dumps(cfg, sort_keys=True)}"] = ("sm90_gemm", {"bf16": 1, **cfg})
    for key, label in check_pick_spills.picks(check_pick_spills.ALL_SUITES).items():
        out[f"pick {label}"] = ("sm90_gemm", dict(key))
    return out


def fingerprint(family: str, params: dict) -> str:
    """sha256 over the SASS instructions (addresses and encodings dropped) of one compiled kernel."""
    result = deep_gemm.compile_kernel(family, params, use_nvrtc=False)
    lines = [m.group(1) for line in dump_sass(result["cubin_path"]).splitlines() if (m := _INSTRUCTION.match(line))]
    assert lines, f"no SASS instructions found for {family} {params}"
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the fingerprints (JSON)")
    parser.add_argument("--jobs", type=int, default=2, help="kernels compiled at once")
    parser.add_argument("--compare", type=Path, help="fingerprints of the code before the change")
    args = parser.parse_args()
    todo = kernels()
    print(f"{len(todo)} kernels", flush=True)
    # (processes: a compile holds the GIL while NVCC runs, so threads would compile one kernel at a time)
    with ProcessPoolExecutor(args.jobs) as pool:
        families, params = zip(*todo.values(), strict=True)
        prints = dict(zip(todo, pool.map(fingerprint, families, params), strict=True))
    args.out.write_text(json.dumps(prints, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    changed = sorted(k for k in before.keys() | prints.keys() if before.get(k) != prints.get(k))
    for label in changed:
        print(f"changed: {label}")
    print(f"{len(changed)} of {len(prints)} kernels differ from {args.compare}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
