"""Probe on a GPU: would the paged decode's SMs finish closer together if the schedule charged each request a fixed
cost on top of its kv blocks (entering a request loads its Q tile, weights, length and block-table window)?

For each ``BxNEXT_NxCONTEXT`` shape, builds the paged bench's inputs (``deep_gemm.bench.mqa.make_paged_inputs``),
then for each cost c of ``--costs`` (in kv blocks) builds on the host the schedule that minimizes the largest CTA's
blocks plus c per request it enters (``weighted_schedule``), beside ``get_paged_mqa_logits_metadata``'s even split
of the blocks (``meta``). Each schedule's call is timed on the device alone (CUPTI, L2 flushed before each call), in
rounds over the schedules (``--rounds``), and its clean logits must equal the even split's bit for bit.

Usage: python tools/paged_schedule_probe.py --shapes 64x2x65536 64x1x65536 --costs 0 4 8 16 32 [--rounds 2]
"""

import argparse
import statistics

import torch

import deep_gemm
from deep_gemm.bench.common import pct_of_copy_bandwidth
from deep_gemm.bench.mqa import make_paged_inputs
from deep_gemm.testing import d2d_copy_bandwidth, gpu_idle, kineto_kernel_times

KERNEL = "sm90_fp8_paged_mqa_logits_kernel"


def _greedy_rows(blocks: list[int], num_sms: int, cost: int, budget: int) -> list[tuple[int, int]] | None:
    """Rows (request, block) of CTAs filled in order up to ``budget`` units each (every request a CTA enters costs
    ``cost``, each block 1), or None when num_sms CTAs do not cover every block."""
    b, k, rows = 0, 0, []

    def skip_empty() -> None:
        nonlocal b
        while b < len(blocks) and blocks[b] == 0:
            b += 1

    skip_empty()
    for _ in range(num_sms):
        rows.append((b, k) if b < len(blocks) else (len(blocks), 0))
        left = budget
        while b < len(blocks) and left > cost:
            left -= cost
            take = min(blocks[b] - k, left)
            k, left = k + take, left - take
            if k < blocks[b]:
                break
            b, k = b + 1, 0
            skip_empty()
    if b < len(blocks):
        return None
    return rows + [(len(blocks), 0)]


def weighted_schedule(blocks: list[int], num_sms: int, cost: int, device: str = "cuda") -> torch.Tensor:
    """int32 [num_sms + 1, 2] rows (request, block) that minimize the largest CTA's blocks plus ``cost`` per request
    it enters (its first one included): the smallest per-CTA budget that greedy filling fits into num_sms CTAs
    (binary search)."""
    lo, hi = max(1, -(-sum(blocks) // num_sms)), sum(blocks) + cost * (len(blocks) + num_sms) + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _greedy_rows(blocks, num_sms, cost, mid + cost) is None:
            lo = mid + 1
        else:
            hi = mid
    rows = _greedy_rows(blocks, num_sms, cost, lo + cost)
    assert rows is not None
    return torch.tensor(rows, dtype=torch.int32, device=device)


def probe_shape(shape: str, args: argparse.Namespace, block_kv: int, num_sms: int, copy_bw: float) -> None:
    """Time one shape's call under each cost's schedule and print a line per cost."""
    batch, next_n, ctx = (int(x) for x in shape.split("x"))
    inputs = make_paged_inputs(batch, next_n, ctx, block_kv=block_kv)
    q, cache, weights, lens, table = (inputs[k] for k in ("q", "cache", "weights", "lens", "table"))
    blocks = [(int(n) + block_kv - 1) // block_kv for n in lens.tolist()]
    default = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, num_sms)
    schedules: dict[int | str, torch.Tensor] = {"meta": default}
    schedules.update({c: weighted_schedule(blocks, num_sms, c) for c in args.costs})

    def call(meta: torch.Tensor, clean: bool = False) -> torch.Tensor:
        return deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, ctx, clean_logits=clean)

    # (clean logits: without, the positions past a query's end are left as torch.empty found them)
    reference = call(default, True)
    same = {c: bool(torch.equal(call(m, True), reference)) for c, m in schedules.items()}
    times: dict[int | str, list[float]] = {c: [] for c in schedules}
    for _ in range(args.rounds):
        for c, meta in schedules.items():
            gpu_idle(0.3)
            seconds = kineto_kernel_times(lambda meta=meta: call(meta), KERNEL, num_tests=args.num_tests)
            times[c].append(seconds[KERNEL] * 1e6)
    for c in schedules:
        median = statistics.median(times[c])
        pct = pct_of_copy_bandwidth(inputs["bytes"], median, copy_bw)
        rounds = " ".join(f"{t:.1f}" for t in times[c])
        print(f"{shape:>12} {c:>5} {rounds:>28} {median:>8.1f} {pct:>10.1f} {str(same[c]):>5}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["64x2x65536", "64x1x65536", "256x2x65536", "64x2x8192"])
    parser.add_argument("--costs", nargs="+", type=int, default=[0, 4, 8, 16, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--num-tests", type=int, default=20)
    args = parser.parse_args()

    block_kv, num_sms = 64, deep_gemm.get_num_sms()
    copy_bw = d2d_copy_bandwidth(device_time=True)
    print(f"device-to-device copy on the device alone: {copy_bw * 1e-9:.0f} GB/s; {num_sms} SMs")
    print(f"{'shape':>12} {'cost':>5} {'device us (rounds)':>28} {'median':>8} {'% copy dev':>10} {'same':>5}")
    for shape in args.shapes:
        probe_shape(shape, args, block_kv, num_sms, copy_bw)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
