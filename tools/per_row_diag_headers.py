"""Kernel headers for a timing-only diagnostic of the per-row recipe's promotion (wrong results by design).

    python tools/per_row_diag_headers.py OUTDIR     # writes OUTDIR/include-perrow-{nolds,noscale}.tar.gz

Question (docs/perf/h200.md, per-row recipe): is the recipe-(1, 1, 128) K loop held by the shared-memory wavefronts
of its column-scale loads (16 LDS.64 per warp and K block, 40 % of the kernel's wavefronts in run 20)? Each tarball
is deep_gemm/include with common/fp8_promotion.cuh's promote_per_row changed, for tools/with_old_headers.sh:
  nolds:   the column scales come from a register (this K block's first row scale, its low mantissa bits flipped per
           column pair: one LOP3 per value, not hoistable out of the K loop) instead of shared memory; the FMUL of
           the two scales and the FFMA stay, so only the loads go;
  noscale: no column scale at all: FFMA with the row scale, the block-scaled recipe's work per accumulator.
Timing the kgrouped suite with each (`--no-baselines`; every row is reported inaccurate, as it must be) against
the real headers in the same run separates the loads' cost from the FMULs'.
"""

import sys
from pathlib import Path

from header_variants import read_header, write_include_tarball

_HEADER = "deep_gemm/include/deep_gemm/common/fp8_promotion.cuh"
_LOAD = "sfb_pairs(sfb_stage, lane)[(j + kSfbAhead) * 4]"
_LOAD_AHEAD = "sfb_pairs(sfb_stage, lane)[j * 4]"
_PRODUCT = "scales.sfa[im][{r}] * sfb.{c}"


def _patched(text: str, variant: str) -> str:
    assert text.count(_LOAD) == 1 and text.count(_LOAD_AHEAD) == 1, "fp8_promotion.cuh changed: update this tool"
    if variant == "nolds":
        fake = (
            "float2{{__uint_as_float(__float_as_uint(scales.sfa[0][0]) ^ ({i} * 2u + 1u)), "
            "__uint_as_float(__float_as_uint(scales.sfa[0][0]) ^ ({i} * 2u + 2u))}}"
        )
        text = text.replace(_LOAD, fake.format(i="(j + kSfbAhead)"))
        # (load_sfb_ahead has no scales: it runs before the wgmma wait; its pairs come from the lane instead)
        text = text.replace(
            _LOAD_AHEAD, "float2{__uint_as_float(0x3f800000u + lane + j), __uint_as_float(0x3f800000u + j)}"
        )
    elif variant == "noscale":
        text = text.replace(_LOAD, "float2{1.0f, 1.0f}").replace(_LOAD_AHEAD, "float2{1.0f, 1.0f}")
        for r in (0, 1):
            for c in ("x", "y"):
                assert _PRODUCT.format(r=r, c=c) in text
                text = text.replace(_PRODUCT.format(r=r, c=c), f"scales.sfa[im][{r}]")
    else:
        raise ValueError(variant)
    return text


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    original = read_header(_HEADER)
    for variant in ("nolds", "noscale"):
        print(write_include_tarball(out / f"include-perrow-{variant}.tar.gz", {_HEADER: _patched(original, variant)}))


if __name__ == "__main__":
    main()
