"""CPU tier: the device tile scheduler (gemm_scheduler.cuh), built for the host with its CUDA built-ins
stubbed (tests/host/scheduler_host.cpp), must hand out every tile that has rows to compute exactly once
over a persistent grid, skip padding, and bound the rows the epilogue may write — for the normal GEMM
and the m-grouped contiguous (per-row ids, psum) and masked layouts, valid and invalid device data."""

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from deep_gemm.utils import align, ceil_div

ROOT = Path(__file__).resolve().parent.parent
NORMAL, CONTIGUOUS, PSUM, MASKED, SPLIT_K3, PAIRS, K_GROUPED = 0, 1, 2, 3, 4, 5, 6
PAIRS_ALONG_N = 8


def cuda_include_dirs() -> list[str]:
    """The toolkit's include folders, found as the JIT finds them ($CUDA_HOME, $CUDA_PATH, nvcc, /usr/local/cuda)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    if shutil.which("nvcc"):
        candidates.append(str(Path(shutil.which("nvcc")).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for home in (Path(c) for c in candidates if c):
        dirs = [home / "include" / "cccl", home / "include"]
        if any((d / "cuda" / "std" / "cstdint").exists() for d in dirs):
            return [str(d) for d in dirs]
    pytest.skip(f"needs the CUDA toolkit's CCCL headers (cuda/std/cstdint): not found under any of {candidates}; "
                "install a CUDA 13 toolkit or set CUDA_HOME")


@pytest.fixture(scope="module")
def scheduler_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scheduler") / "scheduler_host"
    include = ["-I", str(ROOT / "deep_gemm" / "include")]
    for d in cuda_include_dirs():
        include += ["-I", d]
    cxx = os.environ.get("CXX", "g++")
    subprocess.run(
        [cxx, "-std=c++20", "-O1", *include, str(ROOT / "tests" / "host" / "scheduler_host.cpp"), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


def walk(
    binary: Path,
    gemm_type: int,
    bm: int,
    bn: int,
    m: int,
    n: int,
    grid: int,
    groups: int = 1,
    alignment: int = 128,
    max_m: int = 0,
    data: list[int] = (),
) -> list[tuple[int, ...]]:
    text = f"{gemm_type} {bm} {bn} {m} {n} 4 {grid} {groups} {alignment} {max_m} {len(data)} " + " ".join(
        map(str, data)
    )
    out = subprocess.run([str(binary)], input=text, capture_output=True, text=True, check=True).stdout
    return [tuple(int(v) for v in line.split()) for line in out.splitlines()]


def tiles_of(lines) -> list[tuple[int, int, int, int]]:
    """(m_block, n_block, group, row_end) of each handed-out tile, and each CTA's k range checked."""
    assert all((k0, k1) == (0, 4) for *_, k0, k1 in lines)
    return [(mb, nb, g, end) for _, mb, nb, g, end, _, _ in lines]


def check_exactly(expected: set, lines) -> None:
    tiles = tiles_of(lines)
    assert len(tiles) == len(set(tiles)), "a tile was handed out twice"
    assert set(tiles) == expected


@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 112)])
@pytest.mark.parametrize("seed", range(4))
def test_normal(scheduler_binary: Path, bm: int, bn: int, seed: int) -> None:
    rng = random.Random(seed)
    m, n, grid = rng.randint(1, 2000), rng.randint(1, 3000), rng.choice([1, 7, 132])
    expected = {(mb, nb, 0, m) for mb in range(ceil_div(m, bm)) for nb in range(ceil_div(n, bn))}
    check_exactly(expected, walk(scheduler_binary, NORMAL, bm, bn, m, n, grid))


@pytest.mark.parametrize("num_k_blocks", [3, 4, 7, 56])
def test_split_k_ranges_partition_k(scheduler_binary: Path, num_k_blocks: int) -> None:
    m, n = 200, 300
    text = f"{SPLIT_K3} 128 128 {m} {n} {num_k_blocks} 132 1 128 0 0"
    out = subprocess.run([str(scheduler_binary)], input=text, capture_output=True, text=True, check=True).stdout
    ranges = {}
    for line in out.splitlines():
        _, mb, nb, _, _, k0, k1 = (int(v) for v in line.split())
        ranges.setdefault((mb, nb), []).append((k0, k1))
    assert set(ranges) == {(mb, nb) for mb in range(2) for nb in range(3)}
    for parts in ranges.values():
        # Three consecutive, non-overlapping ranges covering [0, K blocks), each non-empty when K allows
        parts.sort()
        assert len(parts) == 3 and parts[0][0] == 0 and parts[-1][1] == num_k_blocks
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
        assert all(k1 > k0 for k0, k1 in parts)


@pytest.mark.parametrize(
    "along,m,n",
    [("m", 128, 700), ("m", 384, 700), ("m", 1000, 700), ("m", 4096, 700)]
    + [("n", 1000, 128), ("n", 1000, 700), ("n", 1000, 896), ("n", 1000, 4104)],
)
def test_multicast_pairs(scheduler_binary: Path, along: str, m: int, n: int) -> None:
    # Pairs along M (multicast on B) or along N (on A): the two CTAs of a cluster take blocks 2i and 2i + 1 of the
    # paired dimension with the same block of the other; an odd count leaves a phantom block past the matrix (still
    # run, so that it loads its half of the shared operand)
    grid = 132
    lines = walk(scheduler_binary, PAIRS if along == "m" else PAIRS_ALONG_N, 128, 128, m, n, grid)
    tiles = tiles_of(lines)
    assert len(tiles) == len(set(tiles))
    m_blocks, n_blocks = ceil_div(m, 128), ceil_div(n, 128)
    if along == "m":
        m_blocks = align(m_blocks, 2)
    else:
        n_blocks = align(n_blocks, 2)
    assert set(tiles) == {(mb, nb, 0, m) for mb in range(m_blocks) for nb in range(n_blocks)}
    by_cta = {}
    for cta, mb, nb, *_ in lines:
        assert (mb if along == "m" else nb) % 2 == cta % 2  # rank r takes tile r of each pair
        by_cta.setdefault(cta, []).append((mb, nb))
    step = (1, 0) if along == "m" else (0, 1)
    for cta in range(0, grid, 2):  # a pair's CTAs walk the same units, side by side
        assert [(mb + step[0], nb + step[1]) for mb, nb in by_cta.get(cta, [])] == by_cta.get(cta + 1, [])


def contiguous_case(rng: random.Random, groups: int, bm: int, alignment: int):
    sizes = [0 if rng.random() < 0.25 else rng.randint(1, 3 * alignment) for _ in range(groups)]
    starts, ends, row = [], [], 0
    for size in sizes:
        starts.append(row)
        ends.append(row + size)
        row = align(row + size, alignment)
    return max(row, alignment), starts, ends


@pytest.mark.parametrize("bm,bn,alignment", [(128, 128, 128), (64, 112, 128), (64, 112, 64), (128, 128, 256)])
@pytest.mark.parametrize("seed", range(4))
def test_contiguous_per_row_and_psum(scheduler_binary: Path, bm: int, bn: int, alignment: int, seed: int) -> None:
    rng = random.Random(seed * 31 + bm + alignment)
    groups, n, grid = rng.randint(1, 12), rng.randint(1, 600), rng.choice([1, 5, 132])
    m, starts, ends = contiguous_case(rng, groups, bm, alignment)
    per_row = [-1] * m
    for g, (s, e) in enumerate(zip(starts, ends, strict=False)):
        per_row[s:e] = [g] * (e - s)
    # A block is computed when its first row belongs to a group (segments start aligned to the alignment,
    # a multiple of BLOCK_M, so a block never spans two groups)
    n_blocks = ceil_div(n, bn)
    per_row_expected = {
        (mb, nb, per_row[mb * bm], m) for mb in range(m // bm) if per_row[mb * bm] >= 0 for nb in range(n_blocks)
    }
    check_exactly(
        per_row_expected, walk(scheduler_binary, CONTIGUOUS, bm, bn, m, n, grid, groups, alignment, data=per_row)
    )
    psum_expected = {
        (mb, nb, g, min(ends[g], m))
        for g in range(groups)
        for mb in range(m // bm)
        if starts[g] <= mb * bm < ends[g]
        for nb in range(n_blocks)
    }
    check_exactly(psum_expected, walk(scheduler_binary, PSUM, bm, bn, m, n, grid, groups, alignment, data=ends))


def test_contiguous_invalid_ids_are_padding(scheduler_binary: Path) -> None:
    # Ids outside [0, G) on the device: the block is skipped, nothing is read or written for it
    per_row = [0] * 128 + [7] * 128 + [-3] * 128 + [1] * 128
    expected = {(0, 0, 0, 512), (3, 0, 1, 512)}
    check_exactly(expected, walk(scheduler_binary, CONTIGUOUS, 128, 128, 512, 100, 3, 2, 128, data=per_row))


CONTIGUOUS_WRITTEN_ROWS = 9


@pytest.mark.parametrize("seed", range(4))
def test_contiguous_padding_rows_of_any_id_are_not_written(scheduler_binary: Path, seed: int) -> None:
    # The padding rows after each group's rows, up to the next aligned start, hold ids outside [0, G): -1, G,
    # larger ones and other negatives, mixed. The row-by-row epilogue writes exactly the rows whose id is their
    # tile's group, and a block whose first row is such an id is skipped whole.
    rng = random.Random(seed)
    groups, grid = rng.randint(1, 6), rng.choice([1, 5, 132])
    m, starts, ends = contiguous_case(rng, groups, 128, 128)
    per_row = [rng.choice([-1, groups, groups + 3, -7, 2**31 - 1, -(2**31)]) for _ in range(m)]
    for g, (s, e) in enumerate(zip(starts, ends, strict=False)):
        per_row[s:e] = [g] * (e - s)
    check_written_rows(scheduler_binary, per_row, groups, grid)


def test_contiguous_padding_rows_of_id_g_are_not_written(scheduler_binary: Path) -> None:
    # G = 2: group 0's 100 rows, padding alternating G and -1; group 1's 172 rows, padding G; a block all G
    per_row = [0] * 100 + [2, -1] * 14 + [1] * 172 + [2] * 84 + [2] * 128
    check_written_rows(scheduler_binary, per_row, 2, 3)


def check_written_rows(binary: Path, per_row: list[int], groups: int, grid: int) -> None:
    lines = walk(binary, CONTIGUOUS_WRITTEN_ROWS, 128, 128, len(per_row), 300, grid, groups, 128, data=per_row)
    assert len(lines) == len(set(lines)), "a row was written twice"
    assert sorted(lines) == [(row, g) for row, g in enumerate(per_row) if 0 <= g < groups]


@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 112)])
@pytest.mark.parametrize("seed", range(4))
def test_masked(scheduler_binary: Path, bm: int, bn: int, seed: int) -> None:
    rng = random.Random(seed * 17 + bm)
    groups, max_m, n, grid = rng.randint(1, 20), 128 * rng.randint(1, 6), rng.randint(1, 500), rng.choice([1, 9, 132])
    # Counts past max_m and negative ones are clamped on the device
    counts = [rng.choice([0, -5, rng.randint(1, max_m), max_m + 77, rng.randint(1, 40)]) for _ in range(groups)]
    expected = set()
    for g, c in enumerate(counts):
        rows = max(0, min(c, max_m))
        for mb in range(ceil_div(rows, bm)):
            for nb in range(ceil_div(n, bn)):
                expected.add((g * (max_m // bm) + mb, nb, g, g * max_m + rows))
    check_exactly(
        expected, walk(scheduler_binary, MASKED, bm, bn, groups * max_m, n, grid, groups, max_m=max_m, data=counts)
    )


@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 112)])
@pytest.mark.parametrize("seed", range(3))
def test_k_grouped(scheduler_binary: Path, bm: int, bn: int, seed: int) -> None:
    rng = random.Random(seed * 31 + bm)
    groups, m, n, grid = rng.randint(1, 12), rng.randint(1, 700), rng.randint(1, 500), rng.choice([1, 9, 132])
    k_blocks = [rng.choice([0, 1, rng.randint(2, 70)]) for _ in range(groups)]
    lines = walk(scheduler_binary, K_GROUPED, bm, bn, m, n, grid, groups, data=k_blocks)
    # Every group's whole tile grid, each tile once, over the group's own K blocks (none for an empty group)
    tiles = [(mb, nb, g, end, k0, k1) for _, mb, nb, g, end, k0, k1 in lines]
    assert len(tiles) == len(set(tiles)), "a tile was handed out twice"
    expected = {
        (mb, nb, g, m, 0, k_blocks[g])
        for g in range(groups)
        for mb in range(ceil_div(m, bm))
        for nb in range(ceil_div(n, bn))
    }
    assert set(tiles) == expected


STREAM_K = 7


@pytest.mark.parametrize("seed", range(8))
def test_stream_k(scheduler_binary: Path, seed: int) -> None:
    # Whole tiles first, then the last `sk` tiles' K blocks spread over every CTA: each tile's K range covered
    # exactly once; one owner per stream-K tile (the segment from K block 0), its contributors the CTAs right
    # after it in K order, each contributing at most once and only with its range's first segment
    rng = random.Random(seed)
    bm, bn = rng.choice([(128, 128), (64, 112)])
    m, n, grid, kb = rng.randint(1, 3000), rng.randint(1, 3000), rng.choice([7, 66, 132]), rng.randint(1, 70)
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    if tiles * kb < grid:
        kb = ceil_div(grid, tiles)
    sk = rng.randint(min(tiles, ceil_div(grid, kb)), tiles)
    text = f"{STREAM_K} {bm} {bn} {m} {n} {kb} {grid} 1 128 {sk} 0"
    out = subprocess.run([str(scheduler_binary)], input=text, capture_output=True, text=True, check=True).stdout
    lines = [tuple(int(v) for v in line.split()) for line in out.splitlines()]
    segments: dict[tuple[int, int], list[tuple]] = {}
    lines_of_cta: dict[int, int] = {}
    contributions_by_cta: dict[int, int] = {}
    for cta, mb, nb, g, end, k0, k1, sk_tile, contributors, is_contribution in lines:
        assert (g, end) == (0, m) and 0 <= k0 < k1 <= kb
        segments.setdefault((mb, nb), []).append((k0, k1, cta, sk_tile, contributors, is_contribution))
        # (the CTA's whole tiles come first: units cta, cta + grid, ... below tiles - sk)
        whole_before = max(0, (tiles - sk - cta + grid - 1) // grid)
        if is_contribution:
            contributions_by_cta[cta] = contributions_by_cta.get(cta, 0) + 1
            assert lines_of_cta.get(cta, 0) == whole_before, "a contribution after the CTA's first stream-K segment"
            assert k0 > 0
        lines_of_cta[cta] = lines_of_cta.get(cta, 0) + 1
    assert set(segments) == {(mb, nb) for mb in range(ceil_div(m, bm)) for nb in range(ceil_div(n, bn))}
    assert all(c == 1 for c in contributions_by_cta.values())
    whole = [t for t, parts in segments.items() if len(parts) == 1 and parts[0][:2] == (0, kb) and not parts[0][5]]
    assert len(whole) >= tiles - sk
    for parts in segments.values():
        parts.sort()
        # consecutive, non-overlapping, covering [0, K blocks)
        assert parts[0][0] == 0 and parts[-1][1] == kb
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
        owner = parts[0]
        assert not owner[5] and all(p[5] for p in parts[1:])
        assert owner[4] == len(parts) - 1
        assert [p[2] for p in parts] == list(range(owner[2], owner[2] + len(parts)))
