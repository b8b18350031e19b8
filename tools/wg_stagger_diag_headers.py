"""Kernel headers for a timing-only experiment: math warpgroups offset in time (results stay correct).

    python tools/wg_stagger_diag_headers.py OUTDIR    # writes OUTDIR/include-stagger-{start,tile}-<cycles>.tar.gz

Question (docs/perf/h200.md, the M = 4096 rows): the 192 x 128 kernel loses ~0.6 us per tile beyond its K blocks
(run 63: 4096 x 24576 x 1536, 12 K blocks a tile, 0.638 us per K block against 0.587 at K = 16384), and its three
math warpgroups reach each tile's epilogue within a fraction of a K block of one another, so the tensor pipe idles
through it. If warpgroup w ran w x C cycles behind warpgroup 0, the others' wgmmas would cover each epilogue.
  start-C: before its first tile, math warpgroup w spins w x C cycles (does the offset survive the shared ring?);
  tile-C:  before each tile, math warpgroup w spins w x C cycles (the offset renewed at every tile boundary).
Each tarball is deep_gemm/include with impls/sm90_gemm.cuh changed, for tools/with_old_headers.sh (DG_GPU_RUN_OLD_INCLUDE).
"""

import sys
from pathlib import Path

from header_variants import read_header, write_include_tarball

_HEADER = "deep_gemm/include/deep_gemm/impls/sm90_gemm.cuh"
_LANE_LINE = "        const uint32_t lane = threadIdx.x % 32;\n"  # (the spin goes after it, before the scheduler)
_START_ANCHOR = _LANE_LINE + "\n        Scheduler scheduler("
_TILE_ANCHOR = "            const uint32_t boundary = TileSfb(tile.n_block, shape_n).boundary;\n"
_SPIN = (
    "{indent}{{  // (diagnostic: math warpgroup w waits w x {cycles} cycles)\n"
    "{indent}    const long long spin_start = clock64();\n"
    "{indent}    while (clock64() - spin_start < static_cast<long long>(wg_idx) * {cycles}) {{}}\n"
    "{indent}}}\n"
)


def patched(text: str, where: str, cycles: int) -> str:
    """sm90_gemm.cuh with the spin inserted at the start of math() ("start") or of each unit ("tile")."""
    assert text.count(_START_ANCHOR) == 1 and text.count(_TILE_ANCHOR) == 1, "sm90_gemm.cuh changed: update this tool"
    if where == "start":
        spin = _SPIN.format(indent="        ", cycles=cycles)
        return text.replace(_START_ANCHOR, _LANE_LINE + spin + _START_ANCHOR[len(_LANE_LINE):])
    if where == "tile":
        return text.replace(_TILE_ANCHOR, _TILE_ANCHOR + _SPIN.format(indent="            ", cycles=cycles))
    raise ValueError(where)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    original = read_header(_HEADER)
    for where, cycles in (("start", 600), ("start", 1500), ("tile", 500)):
        name = f"include-stagger-{where}-{cycles}.tar.gz"
        print(write_include_tarball(out / name, {_HEADER: patched(original, where, cycles)}))


if __name__ == "__main__":
    main()
