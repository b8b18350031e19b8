"""JIT and host-overhead measurements (run on a GPU machine; docs/design.md gives the numbers they justify).

    python tools/measure_jit.py --json out.json

1. cold compile of one FP8 GEMM kernel, NVCC and NVRTC, each in a fresh process and empty cache;
2. warm cache hit of the same kernel in a new process;
3. host time of one call of a cached kernel from Python: 1000 back-to-back fp8_gemm_nt calls of
   64 x 256 x 512 (and, for comparison, torch._scaled_mm with block scales on the same shape).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

COMPILE = """
import json, sys, time
import deep_gemm
t = time.perf_counter()
r = deep_gemm.compile_kernel("sm90_gemm", dict(shape_n=7168, shape_k=7168, block_m=128, block_n=160,
                                                         num_stages=5), use_nvrtc=sys.argv[1] == "1")
print(json.dumps({"seconds": time.perf_counter() - t, "cache_hit": r["cache_hit"], "registers": r["registers"]}))
"""


def compile_once(cache: str, use_nvrtc: bool) -> dict:
    env = dict(os.environ, DG_JIT_CACHE_DIR=cache)
    out = subprocess.run(
        [sys.executable, "-c", COMPILE, "1" if use_nvrtc else "0"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def host_overhead(num_calls: int = 1000) -> dict:
    import torch

    import deep_gemm
    from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    m, n, k = 64, 256, 512
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    results = {}

    def time_loop(fn) -> float:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(num_calls):
            fn()
        host = (time.perf_counter() - t) / num_calls
        torch.cuda.synchronize()
        return host * 1e6

    results["deep_gemm_us_per_call"] = time_loop(lambda: deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d))
    # The same with all four tensors moving on every call (two sets of buffers in turn): every TMA
    # descriptor's base address is patched each time
    a2, sfa2, b2, d2 = a.clone(), sfa.clone(), b.clone(), d.clone()
    sfa2 = deep_gemm.get_mn_major_tma_aligned_tensor(sfa2)
    flip = [False]

    def alternate() -> None:
        flip[0] = not flip[0]
        if flip[0]:
            deep_gemm.fp8_gemm_nt((a2, sfa2), (b2, sfb), d2)
        else:
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)

    results["deep_gemm_moving_tensors_us_per_call"] = time_loop(alternate)
    # Where the host time goes: the floor of any call into the extension, and a call that checks every
    # argument but launches nothing (M = 0 returns after the checks)
    results["extension_floor_us_per_call"] = time_loop(deep_gemm.get_num_sms)
    a0, sfa0, d0 = a[:0], sfa[:0], d[:0]
    results["deep_gemm_checks_only_us_per_call"] = time_loop(lambda: deep_gemm.fp8_gemm_nt((a0, sfa0), (b, sfb), d0))
    # A launch's floor through PyTorch (one tiny kernel, torch's binding): what no call that launches can go under
    results["torch_sleep0_launch_us_per_call"] = time_loop(lambda: torch.cuda._sleep(0))
    scale_a = sfa.t().contiguous().t()
    scale_b = sfb.contiguous().t()
    try:
        results["torch_scaled_mm_blockwise_us_per_call"] = time_loop(
            lambda: torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=torch.bfloat16)
        )
    except RuntimeError as e:  # noqa: PERF203
        results["torch_scaled_mm_blockwise_us_per_call"] = f"unavailable: {e}"
    one = torch.tensor(1.0, device="cuda")
    results["torch_scaled_mm_per_tensor_us_per_call"] = time_loop(
        lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    results = {}
    for use_nvrtc in (False, True):
        name = "nvrtc" if use_nvrtc else "nvcc"
        with tempfile.TemporaryDirectory() as cache:
            results[f"cold_{name}"] = compile_once(cache, use_nvrtc)
            results[f"warm_{name}"] = compile_once(cache, use_nvrtc)
    results["host"] = host_overhead()
    print(json.dumps(results, indent=2))
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
