"""Rebuild here, with no GPU, the kernel-cache entries that a GPU run compiled, so the next run starts warm.

    python tools/prebuild_jit_cache.py [SOURCES...] [--bench-picks] [--out .jit-prebuilt/kernels.tar.gz] [--jobs 2]

SOURCES: `jit-sources.tgz` files that `tools/gpu_run.sh` packs into its logs (each entry
`<family>-<compiler>-<key>/kernel.cu` of the run's cache), or cache `kernels/` folders. Each rendered source is
compiled again through `deep_gemm.compile_kernel(family, source=...)` with the same compiler into a fresh cache, and
the new entries are packed into `--out`. `tools/gpu_run.sh` unpacks `.jit-prebuilt/kernels.tar.gz` into its cache
before the first kernel when it is there (copy `.jit-prebuilt` to the GPU machine with the tree), so the tests and
benches load cubins instead of compiling them.

The cache key covers the headers and the compiler's identity, not the machine: an entry built
here is a hit there only with the same nvcc (`nvcc --version` is in the run's env.txt) and the headers as they are
now. A source whose key comes out as recorded was built from the same headers; a different key means the headers
changed since that run, and the entry serves the current code (the source itself is what the run rendered: a
changed heuristic or renderer asks for kernels this list lacks, and those compile on the GPU machine as before).
--bench-picks adds, with no recorded run, the GEMM kernels the heuristic picks for every bench shape on the H200
(`tools/check_pick_spills.py`'s list, rendered from their parameters: a hit there as far as those parameters are
the whole config the launcher renders).
"""

import argparse
import os
import sys
import tarfile
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def read_sources(paths: list[str]) -> dict[str, str]:
    """Entry name -> rendered kernel.cu, from tarballs or cache `kernels/` folders (the first of a name wins)."""
    sources: dict[str, str] = {}
    for path in map(Path, paths):
        if path.is_dir():
            for cu in sorted(path.glob("*/kernel.cu")):
                sources.setdefault(cu.parent.name, cu.read_text())
            continue
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if member.isfile() and len(parts) >= 2 and parts[-1] == "kernel.cu":
                    sources.setdefault(parts[-2], tar.extractfile(member).read().decode())
    return sources


def split_entry_name(name: str) -> tuple[str, str, str]:
    """`<family>-<compiler>-<key>` -> (family, compiler, key); family names may hold '-', the other two do not."""
    family, compiler, key = name.rsplit("-", 2)
    if compiler not in ("nvcc", "nvrtc"):
        raise ValueError(f"cache entry {name!r}: expected <family>-<nvcc|nvrtc>-<key>")
    return family, compiler, key


def bench_picks() -> list[dict[str, int]]:
    """Parameters of each GEMM kernel the heuristic picks for the bench shapes on the H200 (sm90_gemm, NVCC)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_pick_spills import ALL_SUITES, picks

    return [dict(key) for key in picks(ALL_SUITES)]


def compile_one(item: tuple[str, str | dict]) -> tuple[str, str, str]:
    """Compile one recorded source (or sm90_gemm parameters) into DG_JIT_CACHE_DIR; returns (recorded name, new
    entry name, error or '')."""
    import deep_gemm

    name, what = item
    family, compiler, _ = split_entry_name(name)
    try:
        if isinstance(what, dict):
            result = deep_gemm.compile_kernel(family, what, use_nvrtc=False)
        else:
            result = deep_gemm.compile_kernel(family, source=what, use_nvrtc=compiler == "nvrtc")
    except Exception as error:  # noqa: BLE001 (reported per entry, the others still build)
        return name, "", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return name, Path(result["entry_dir"]).name, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help="jit-sources.tgz files or cache kernels/ folders")
    parser.add_argument("--bench-picks", action="store_true", help="also the GEMM kernels of every bench shape")
    parser.add_argument("--out", default=".jit-prebuilt/kernels.tar.gz", help="tarball of the rebuilt entries")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiler processes at once")
    args = parser.parse_args()

    sources = read_sources(args.sources)
    if not sources and not args.bench_picks:
        print("no kernel.cu found in the sources (and no --bench-picks)", file=sys.stderr)
        return 1
    import deep_gemm

    known = set(deep_gemm.kernel_families())
    unknown = sorted({split_entry_name(name)[0] for name in sources} - known)
    if unknown:
        print(f"skipping families this build does not know: {', '.join(unknown)}")
    todo: list[tuple[str, str | dict]] = sorted(
        (name, code) for name, code in sources.items() if split_entry_name(name)[0] in known
    )
    num_recorded = len(todo)
    if args.bench_picks:  # (their keys are not known beforehand: named pick<i>, never "the recorded key")
        todo += [(f"sm90_gemm-nvcc-pick{i}", params) for i, params in enumerate(bench_picks())]
    print(f"{num_recorded} recorded sources, {len(todo) - num_recorded} bench picks", flush=True)

    # The fresh cache lives only as long as this function: its entries end up in the tarball.
    with tempfile.TemporaryDirectory(prefix="dg_prebuild_") as cache_name:
        cache = Path(cache_name)
        os.environ["DG_JIT_CACHE_DIR"] = str(cache)  # (read at each compile; the workers inherit it)
        same_key = failed = 0
        with ProcessPoolExecutor(args.jobs) as pool:
            for done, (name, entry, error) in enumerate(pool.map(compile_one, todo), 1):
                if error:
                    failed += 1
                    print(f"FAILED {name}: {error}", flush=True)
                same_key += entry == name
                if done % 25 == 0 or done == len(todo):
                    print(f"{done}/{len(todo)} compiled ({failed} failed)", flush=True)

        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        entries = sorted(p for p in (cache / "kernels").iterdir() if (p / "manifest").is_file())
        with tarfile.open(out, "w:gz") as tar:
            for entry in entries:
                tar.add(entry, arcname=entry.name)
    size_mb = out.stat().st_size / 2**20
    print(
        f"{len(entries)} entries ({same_key} of the {num_recorded} recorded sources with the recorded key) -> {out} "
        f"({size_mb:.1f} MiB)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
