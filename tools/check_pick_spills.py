"""Compile the GEMM kernels the heuristic picks for every bench shape and report any that use local memory.

    python tools/check_pick_spills.py [--jobs 2] [--suites dense bf16 masked ...]

The picks are made on the CPU with the H200's measured cluster capacity (as `DG_PRINT_CONFIGS=1` prints
there), each distinct kernel is compiled once with NVCC for sm_90a, and ptxas' spill and stack-frame counts
are printed; the exit status is 1 when any pick spills. The tests check a fixed list of configs; this checks
the configs that actually run on the benchmarked shapes (ptxas' allocation near the register limit depends
on the stage count and the shape constants, so a neighbour of a clean config may spill).
"""

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor

import deep_gemm
from deep_gemm.bench.bf16_gemm import BF16_SHAPES
from deep_gemm.bench.bf16_grouped import BF16_CONTIGUOUS_SHAPES, BF16_MASKED_SHAPES
from deep_gemm.bench.fp8_gemm import DENSE_SHAPES
from deep_gemm.bench.grouped import CONTIGUOUS_SHAPES, MASKED_SHAPES
from deep_gemm.bench.k_grouped import K_GROUPED_SHAPES
from deep_gemm.testing import H200_CLUSTER_CTAS

_CONFIG_KEYS = (
    "block_m",
    "block_n",
    "num_stages",
    "num_splits",
    "stream_k",
    "num_multicast",
    "use_tma_store",
    "fp32_buffers",
)
ALL_SUITES = ["dense", "bf16", "masked", "bf16_masked", "grouped", "bf16_grouped", "kgrouped"]
_OPERAND_KEYS = ("per_row_sfb", "bf16", "mn_major_a", "mn_major_b", "fp32_out", "has_c")


def _pick(m: int, n: int, k: int, dims: str = "nk", **kwargs) -> dict[str, int]:
    """Compile-entry parameters of the heuristic's config for one problem, `dims` compiled in (the API's default
    compiled_dims: "nk", or "mn" for the tn / tt layouts and k-grouped GEMMs)."""
    cfg = deep_gemm._C.get_gemm_config(m, n, k, cluster_ctas=H200_CLUSTER_CTAS, **kwargs)
    params = {key: int(cfg[key]) for key in _CONFIG_KEYS}
    params["overlap_promotion"] = int(cfg["overlap_promotion"])
    params["gemm_type"] = int(cfg["gemm_type"])
    if cfg["is_multicast_on_a"]:  # (only when forced: DG_TUNE fp8_gemm:multicast_on_a=1)
        params["is_multicast_on_a"] = 1
    params.update({key: int(kwargs[key]) for key in _OPERAND_KEYS if kwargs.get(key)})
    params.update({f"shape_{dim}": {"m": m, "n": n, "k": k}[dim] for dim in dims})
    return params


def picks(suites: list[str]) -> dict[tuple, str]:
    """Distinct kernel parameter sets (as sorted tuples) -> the first shape that picks them."""
    out: dict[tuple, str] = {}

    def add(label: str, params: dict[str, int]) -> None:
        out.setdefault(tuple(sorted(params.items())), label)

    if "dense" in suites:
        for m, n, k in DENSE_SHAPES:
            add(f"dense {m}x{n}x{k}", _pick(m, n, k))
    if "bf16" in suites:
        for m, n, k in BF16_SHAPES:
            for layout in ("nt", "nn", "tn", "tt"):
                operands = dict(bf16=True, mn_major_a=layout[0] == "t", mn_major_b=layout[1] == "n")
                dims = "mn" if layout[0] == "t" else "nk"
                add(f"bf16 {layout} {m}x{n}x{k}", _pick(m, n, k, dims, **operands))
            add(f"bf16 nt+c {m}x{n}x{k}", _pick(m, n, k, bf16=True, fp32_out=True, has_c=True))
    for name, shapes, bf16 in (("masked", MASKED_SHAPES, False), ("bf16_masked", BF16_MASKED_SHAPES, True)):
        if name in suites:
            for g, m, n, k in shapes:
                # (the masked bench's max_m, 4096, takes 128-row alignment)
                kwargs = dict(gemm_type=3, grouped_alignment=128, num_groups=g, bf16=bf16)
                add(f"{name} {g}x{m}x{n}x{k}", _pick(g * m, n, k, **kwargs))
    for name, shapes, bf16 in (("grouped", CONTIGUOUS_SHAPES, False), ("bf16_grouped", BF16_CONTIGUOUS_SHAPES, True)):
        if name in suites:
            for g, m, n, k in shapes:
                add(f"{name} {g}x{m}x{n}x{k}", _pick(g * m, n, k, gemm_type=1, grouped_alignment=128, bf16=bf16))
    if "kgrouped" in suites:
        for g, m, n, k in K_GROUPED_SHAPES:
            if g == 0:  # the dense recipe (1, 1, 128) with C
                add(f"kgrouped dense {m}x{n}x{k}", _pick(m, n, k, per_row_sfb=True, has_c=True))
            else:  # (planned for a typical K of 4096; M and N compiled in)
                params = _pick(g * m, n, 4096, "", per_row_sfb=True, gemm_type=4)
                # (the capacities of k_grouped_capacity, csrc/jit_kernels/heuristics/sm90_gemm.hpp)
                capacity = next(c for c in (8, 16, 32, 64, 120) if g <= c)
                params.update(shape_m=m, shape_n=n, max_k_groups=capacity)
                add(f"kgrouped {g}x{m}x{n}x{k}", params)
    return out


def compile_one(key: tuple) -> tuple[tuple, dict]:
    """Compile one picked kernel (NVCC); returns (its parameters, compile_kernel's result)."""
    return key, deep_gemm.compile_kernel("sm90_gemm", dict(key), use_nvrtc=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=ALL_SUITES, choices=ALL_SUITES)
    parser.add_argument("--jobs", type=int, default=2, help="kernels compiled at once")
    args = parser.parse_args()
    todo = picks(args.suites)
    print(f"{len(todo)} distinct kernels", flush=True)

    spilled = 0
    # (processes: a compile holds the GIL while NVCC runs, so threads would compile one kernel at a time)
    with ProcessPoolExecutor(args.jobs) as pool:
        for key, result in pool.map(compile_one, todo):
            bad = result["spill_store_bytes"] or result["spill_load_bytes"] or result["stack_frame_bytes"]
            spilled += bool(bad)
            params = " ".join(f"{k}={v}" for k, v in key)
            print(
                f"{'SPILL' if bad else 'ok   '} {todo[key]:32s} regs={result['registers']} "
                f"spill={result['spill_store_bytes']}/{result['spill_load_bytes']} "
                f"stack={result['stack_frame_bytes']}  {params}",
                flush=True,
            )
    print(f"{spilled} of {len(todo)} picked kernels use local memory")
    return 1 if spilled else 0


if __name__ == "__main__":
    sys.exit(main())
