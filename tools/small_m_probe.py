"""Where the time of a memory-bound fp8_gemm_nt call goes (run on a GPU machine; issue 3's small-M target).

    python tools/small_m_probe.py --json probe.json

Three measurements, all with the bench's L2 flush (a 256 MiB zero fill) before each call:
1. Copies of 4 ... 512 MiB (`Tensor.copy_`, read + write counted): CUDA-event time as `bench_kernel` takes it,
   and device time from the profiler. Shows the fixed cost a call of a few MiB pays in this harness, next to
   the 2 GiB copy bandwidth the bench divides by.
2. The memory-bound GEMM shapes (M in {1, 64, 128} x (N, K) with K >= 7168), ours and cuBLASLt per-tensor
   fast-accum: event time, and the profiler's device time per kernel (ours: one GEMM kernel; before run 38 a split-K
   reduction kernel followed it).
3. The same GEMMs after a flush that leaves L2 clean (a read of the flush buffer instead of a zero fill): how
   much of the event time is the write-back of the flush's dirty lines.
"""

import argparse
import json
import statistics
import warnings

import torch

import deep_gemm
from deep_gemm.testing import count_bytes, d2d_copy_bandwidth, gpu_idle
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

FLUSH_BYTES = 256 << 20
SHAPES = [(m, n, k) for m in (1, 64, 128) for n, k in ((2112, 7168), (4096, 7168), (7168, 16384))]


def device_times(fn, flush, num_tests: int = 20) -> dict[str, float]:
    """Mean device microseconds per call of each kernel (or memcpy) seen while `flush` then `fn` run `num_tests` times,
    by name; the flush's own kernels are among them (the caller drops their names, profiled on their own)."""
    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(num_tests):
                flush()
                fn()
            torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.time_range.elapsed_us()
    return {name: us / num_tests for name, us in totals.items()}


def event_times(fn, flush, num_tests: int = 20) -> tuple[float, float]:
    """Median and fastest CUDA-event microseconds of `fn` after `flush` and a 100 us GPU spin (as bench_kernel)."""
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends, strict=True):
        flush()
        torch.cuda._sleep(200_000)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]
    return statistics.median(samples), min(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    flush_buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty(1, dtype=torch.int32, device="cuda")

    def dirty_flush() -> None:
        flush_buffer.zero_()

    def clean_flush() -> None:
        torch.amax(flush_buffer, dim=0, keepdim=True, out=sink)

    flush_names = set(device_times(dirty_flush, lambda: None, 2)) | set(device_times(clean_flush, lambda: None, 2))
    result: dict = {"copy_bandwidth_gbps": d2d_copy_bandwidth() * 1e-9, "copies": [], "gemms": []}
    print(f"copy bandwidth (2 GiB): {result['copy_bandwidth_gbps']:.0f} GB/s")

    print("\ncopy MiB | event us (median/min) | device us | event GB/s | device GB/s")
    for mib in (4, 16, 32, 64, 128, 512):
        src = torch.ones(mib << 18, dtype=torch.int32, device="cuda")
        dst = torch.empty_like(src)

        def copy(src=src, dst=dst) -> None:
            dst.copy_(src)

        gpu_idle(0.2)
        median, fastest = event_times(copy, dirty_flush)
        dev = sum(us for name, us in device_times(copy, dirty_flush).items() if name not in flush_names)
        moved = 2 * src.numel() * 4
        result["copies"].append({"mib": mib, "event_us": median, "event_min_us": fastest, "device_us": dev})
        print(
            f"{mib:8d} | {median:8.1f} / {fastest:8.1f} | {dev:8.1f} | {moved / median * 1e-3:8.0f} | "
            f"{moved / dev * 1e-3:8.0f}"
        )

    print(
        "\nM N K | bytes MB | ours event us (dirty / clean flush) | ours device us per kernel | "
        "cuBLASLt fast-accum event us (dirty / clean) | its device us"
    )
    one = torch.ones((), dtype=torch.float32, device="cuda")
    for m, n, k in SHAPES:
        a, sfa = per_token_cast_to_fp8(torch.randn((m, k), dtype=torch.bfloat16, device="cuda"))
        b, sfb = per_block_cast_to_fp8(torch.randn((n, k), dtype=torch.bfloat16, device="cuda"))
        sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        d = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        num_bytes = count_bytes(a, sfa, b, sfb, d)

        def ours(a=a, sfa=sfa, b=b, sfb=sfb, d=d) -> None:
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)

        def cublas(a=a, b=b) -> None:
            torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)

        row = {"m": m, "n": n, "k": k, "bytes": num_bytes}
        for name, fn in (("ours", ours), ("fast_accum", cublas)):
            gpu_idle(0.2)
            row[name + "_event_dirty"] = event_times(fn, dirty_flush)
            gpu_idle(0.2)
            row[name + "_event_clean"] = event_times(fn, clean_flush)
            row[name + "_device"] = {
                kernel: us for kernel, us in device_times(fn, dirty_flush).items() if kernel not in flush_names
            }
        result["gemms"].append(row)
        dev = " + ".join(f"{us:.1f} ({kernel[:24]})" for kernel, us in row["ours_device"].items())
        cub = sum(row["fast_accum_device"].values())
        print(
            f"{m} {n} {k} | {num_bytes / 1e6:.1f} | {row['ours_event_dirty'][0]:.1f} / {row['ours_event_clean'][0]:.1f}"
            f" | {dev} | {row['fast_accum_event_dirty'][0]:.1f} / {row['fast_accum_event_clean'][0]:.1f} | {cub:.1f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
