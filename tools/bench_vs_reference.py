"""Times the reference-API calls of engines' DeepSeek shape set (dense, grouped, weight-gradient, MQA and paged MQA
calls) with whichever `deep_gemm` package is importable, so the same script, run twice on one GPU in one session
(ours; the reference wheel in its own folder on PYTHONPATH, in a separate process), gives a same-GPU comparison. Then --compare renders the ratio table.

    python3 tools/bench_vs_reference.py --label ours --json OUT/ours.json [--families dense,masked]
    PYTHONPATH=/tmp/ref DG_JIT_CACHE_DIR=/tmp/ref-cache python3 tools/bench_vs_reference.py --label reference \
        --json OUT/ref.json
    python3 tools/bench_vs_reference.py --warm-only --families mqa   (compile only: run families in parallel first)
    python3 tools/bench_vs_reference.py --compare OUT/ref.json OUT/ours.json [--markdown OUT/vs-reference.md]

Only torch and the public `deep_gemm` API (the reference's signatures) are used, with inputs built here from a
fixed seed, so both packages run identical calls. Each call is timed alone: the L2 is flushed (a 256 MiB write)
before it, CUDA events bracket it, and the median over --calls calls is kept (the event time includes any host
synchronization or extra kernel the call makes). The GPU idles --idle-ms before each shape (power cap). Scale
factors are passed already in the MN-major TMA-aligned layout the kernels read, so no library pays a layout
transform. A call the package does not support is recorded with its error.
"""

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable

import torch

# issue #48's shapes
DENSE_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
DENSE = tuple((m, n, k) for m in (64, 128, 4096) for n, k in DENSE_NK) + ((8192, 8192, 8192),)
GROUPED_NK = ((4096, 7168), (7168, 2048))
CONTIGUOUS = tuple((g, m, n, k) for g, m in ((4, 8192), (8, 4096)) for n, k in GROUPED_NK)
MASKED = tuple((g, m, n, k) for g, m in ((1, 1024), (2, 512), (4, 256)) for n, k in GROUPED_NK)
MASKED_CAPACITY = 4096
WGRAD = ((7168, 2112, 4096), (2048, 7168, 4096), (7168, 4096, 8192), (4096, 7168, 7168), (7168, 2048, 16384))
K_GROUPED = ((4, 4096, 7168, 8192), (8, 7168, 2048, 4096), (16, 4096, 7168, 2048))
MQA = ((2048, 8192), (4096, 16384), (8192, 8192), (4096, 32768))  # (queries, keys), H 64, D 128, causal
PAGED = tuple((b, nn, ctx) for b in (64, 256) for nn in (1, 2) for ctx in (8192, 65536))
FAMILIES = ("dense", "contiguous", "masked", "wgrad", "kgrouped", "mqa", "paged", "bf16_contiguous", "bf16_masked")


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def fp8_per_token(x: torch.Tensor, gran: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] (K % gran == 0) -> FP8 values and FP32 scales [..., K / gran] (amax / 448 per 1 x gran)."""
    v = x.float().unflatten(-1, (-1, gran))
    sf = v.abs().amax(-1).clamp(min=1e-4) / 448.0
    return (v / sf.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2), sf


def fp8_per_block(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., N, K] (N, K % 128 == 0) -> FP8 values and FP32 scales [..., N / 128, K / 128]."""
    *lead, n, k = x.shape
    v = x.float().view(*lead, n // 128, 128, k // 128, 128)
    sf = v.abs().amax(dim=(-3, -1)).clamp(min=1e-4) / 448.0
    q = (v / sf[..., :, None, :, None]).to(torch.float8_e4m3fn).view(*lead, n, k)
    return q, sf


class Timer:
    def __init__(self, calls: int, idle_ms: float) -> None:
        self.calls, self.idle_ms = calls, idle_ms
        self.flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> dict:
        fn()  # compile / warm
        torch.cuda.synchronize()
        time.sleep(self.idle_ms / 1000)
        times = []
        for _ in range(self.calls):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000)
        return {"median_us": statistics.median(times), "min_us": min(times)}


def sf_layout(dg, sf: torch.Tensor) -> torch.Tensor:
    return dg.get_mn_major_tma_aligned_tensor(sf)


def dense_calls(dg, shapes):
    for m, n, k in shapes:
        torch.manual_seed(m + n + k)
        a, sfa = fp8_per_token(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        b, sfb = fp8_per_block(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        sfa = sf_layout(dg, sfa)
        yield (
            f"{m}x{n}x{k}",
            2 * m * n * k,
            lambda a=a, sfa=sfa, b=b, sfb=sfb, d=d: dg.fp8_gemm_nt((a, sfa), (b, sfb), d),
        )


def contiguous_calls(dg, shapes):
    for g, m, n, k in shapes:
        torch.manual_seed(g + m + n + k)
        a, sfa = fp8_per_token(torch.randn(g * m, k, device="cuda", dtype=torch.bfloat16))
        b, sfb = fp8_per_block(torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16))
        layout = torch.arange(g, device="cuda", dtype=torch.int32).repeat_interleave(m)
        d = torch.empty(g * m, n, device="cuda", dtype=torch.bfloat16)
        sfa = sf_layout(dg, sfa)
        yield f"{g}x{m}x{n}x{k}", 2 * g * m * n * k, (
            lambda a=a, sfa=sfa, b=b, sfb=sfb, d=d, layout=layout:
            dg.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout))  # fmt: skip


def masked_calls(dg, shapes):
    for g, m, n, k in shapes:
        torch.manual_seed(g + m + n + k)
        a, sfa = fp8_per_token(torch.randn(g, MASKED_CAPACITY, k, device="cuda", dtype=torch.bfloat16))
        b, sfb = fp8_per_block(torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16))
        masked = torch.full((g,), m, device="cuda", dtype=torch.int32)
        d = torch.empty(g, MASKED_CAPACITY, n, device="cuda", dtype=torch.bfloat16)
        sfa = sf_layout(dg, sfa)
        yield f"{g}x{m}x{n}x{k}", 2 * g * m * n * k, (
            lambda a=a, sfa=sfa, b=b, sfb=sfb, d=d, masked=masked, m=m:
            dg.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked, m))  # fmt: skip


def wgrad_calls(dg, shapes):
    for m, n, k in shapes:
        torch.manual_seed(m + n + k)
        a, sfa = fp8_per_token(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        b, sfb = fp8_per_token(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        d = torch.randn(m, n, device="cuda", dtype=torch.float32)
        sfa, sfb = sf_layout(dg, sfa), sf_layout(dg, sfb)
        yield (
            f"{m}x{n}x{k}",
            2 * m * n * k,
            (lambda a=a, sfa=sfa, b=b, sfb=sfb, d=d: dg.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=(1, 1, 128))),
        )


def kgrouped_calls(dg, shapes):
    for g, m, n, k in shapes:
        torch.manual_seed(g + m + n + k)
        ks = [k] * g
        total = g * k
        # tn: A [sum K, M] and B [sum K, N] MN-major; scales per 128 of K per column: [sum K / 128, M]
        a, sfa = fp8_per_token(torch.randn(m, total, device="cuda", dtype=torch.bfloat16))
        b, sfb = fp8_per_token(torch.randn(n, total, device="cuda", dtype=torch.bfloat16))
        a_t, b_t = a.t().contiguous(), b.t().contiguous()
        sfa_t, sfb_t = sfa.t().contiguous(), sfb.t().contiguous()
        c = torch.randn(g, m, n, device="cuda", dtype=torch.float32)
        d = torch.empty_like(c)
        layout = torch.tensor(ks, device="cuda", dtype=torch.int32)
        yield f"{g}x{m}x{n}x{k}", 2 * m * n * total, (
            lambda a=a_t, sfa=sfa_t, b=b_t, sfb=sfb_t, d=d, c=c, ks=ks, layout=layout:
            dg.k_grouped_fp8_gemm_tn_contiguous((a, sfa), (b, sfb), d, ks, layout, c=c))  # fmt: skip


def mqa_calls(dg, shapes, h: int = 64, dim: int = 128):
    for s, s_kv in shapes:
        torch.manual_seed(s + s_kv)
        q = torch.randn(s, h, dim, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        kv, kv_sf = fp8_per_token(torch.randn(s_kv, dim, device="cuda", dtype=torch.bfloat16), dim)
        kv_sf = kv_sf[:, 0].contiguous()
        weights = torch.randn(s, h, device="cuda", dtype=torch.float32)
        # causal: query i of the last s queries sees keys [0, s_kv - s + i]
        ke = torch.arange(s_kv - s + 1, s_kv + 1, device="cuda", dtype=torch.int32)
        ks = torch.zeros(s, device="cuda", dtype=torch.int32)
        pairs = int((ke - ks).sum())
        yield (
            f"{s}x{s_kv}",
            2 * h * dim * pairs,
            (lambda q=q, kv=kv, kv_sf=kv_sf, w=weights, ks=ks, ke=ke: dg.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke)),
        )


def paged_calls(dg, shapes, h: int = 64, dim: int = 128, block_kv: int = 64):
    for batch, next_n, ctx in shapes:
        torch.manual_seed(batch + next_n + ctx)
        lens = torch.randint(ctx // 2, ctx * 3 // 2, (batch,), device="cuda", dtype=torch.int32)
        max_len = int(lens.max())
        per_req = ceil_div(max_len, block_kv)
        num_blocks = batch * per_req
        table = torch.randperm(num_blocks, device="cuda").int().view(batch, per_req)
        cache = torch.randint(0, 256, (num_blocks, block_kv * (dim + 4)), device="cuda", dtype=torch.uint8)
        cache[:, block_kv * dim :] = (
            torch.rand(num_blocks, block_kv, device="cuda").add_(0.5).view(torch.uint8).view(num_blocks, -1)
        )
        cache[:, : block_kv * dim] &= 0xF7
        cache = cache.view(num_blocks, block_kv, 1, dim + 4)
        q = torch.randn(batch, next_n, h, dim, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        weights = torch.randn(batch * next_n, h, device="cuda", dtype=torch.float32)
        pairs = int(sum(next_n * int(x) for x in lens.tolist()))
        num_sms = dg.get_num_sms()

        def call(q=q, cache=cache, w=weights, lens=lens, table=table, max_len=max_len, num_sms=num_sms):
            meta = dg.get_paged_mqa_logits_metadata(lens, block_kv, num_sms)
            return dg.fp8_paged_mqa_logits(q, cache, w, lens, table, meta, max_len, False)

        yield f"B{batch}/n{next_n}/ctx{ctx}", 2 * h * dim * pairs, call


def bf16_contiguous_calls(dg, shapes):
    for g, m, n, k in shapes:
        torch.manual_seed(g + m + n + k)
        a = torch.randn(g * m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
        layout = torch.arange(g, device="cuda", dtype=torch.int32).repeat_interleave(m)
        d = torch.empty(g * m, n, device="cuda", dtype=torch.bfloat16)
        yield (
            f"{g}x{m}x{n}x{k}",
            2 * g * m * n * k,
            (lambda a=a, b=b, d=d, layout=layout: dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)),
        )


def bf16_masked_calls(dg, shapes):
    for g, m, n, k in shapes:
        torch.manual_seed(g + m + n + k)
        a = torch.randn(g, MASKED_CAPACITY, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
        masked = torch.full((g,), m, device="cuda", dtype=torch.int32)
        d = torch.empty(g, MASKED_CAPACITY, n, device="cuda", dtype=torch.bfloat16)
        yield (
            f"{g}x{m}x{n}x{k}",
            2 * g * m * n * k,
            (lambda a=a, b=b, d=d, masked=masked, m=m: dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, m)),
        )


SUITES = {
    "dense": (dense_calls, DENSE),
    "contiguous": (contiguous_calls, CONTIGUOUS),
    "masked": (masked_calls, MASKED),
    "wgrad": (wgrad_calls, WGRAD),
    "kgrouped": (kgrouped_calls, K_GROUPED),
    "mqa": (mqa_calls, MQA),
    "paged": (paged_calls, PAGED),
    "bf16_contiguous": (bf16_contiguous_calls, CONTIGUOUS),
    "bf16_masked": (bf16_masked_calls, MASKED),
}


def run(args: argparse.Namespace) -> None:
    import deep_gemm as dg

    timer = Timer(args.calls, args.idle_ms)
    report = {"label": args.label, "package": getattr(dg, "__file__", "?"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "rows": {}}  # fmt: skip
    for family in args.families.split(","):
        make, shapes = SUITES[family]
        try:
            gen = make(dg, shapes)
            for name, flops, fn in gen:
                key = f"{family}/{name}"
                try:
                    if args.warm_only:  # compile and check the call only (parallel warm-up processes)
                        fn()
                        torch.cuda.synchronize()
                        row = {"warmed": True}
                    else:
                        row = timer(fn)
                    row["tflops"] = flops / row["median_us"] / 1e6
                except Exception as exc:  # recorded, not fatal: a package may lack a call
                    row = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
                report["rows"][key] = row
                print(key, row, flush=True)
                torch.cuda.empty_cache()
        except Exception as exc:
            report["rows"][f"{family}/*"] = {"error": f"{type(exc).__name__}: {exc}"}
            print(family, "failed:", exc, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


def compare(ref_path: str, ours_path: str, markdown: str | None) -> None:
    ref, ours = (json.load(open(p)) for p in (ref_path, ours_path))
    lines = [f"Reference ({ref['label']}) vs ours on {ours['gpu']}, torch {ours['torch']}; ratio = reference time / "
             "our time (above 1: ours faster); median call, L2 flushed.", "",
             "| shape | reference µs | ours µs | ours TFLOPS | ratio |", "|---|---|---|---|---|"]  # fmt: skip
    by_family: dict[str, list[float]] = {}
    for key, row in ours["rows"].items():
        r = ref["rows"].get(key, {})
        if "median_us" in row and "median_us" in r:
            ratio = r["median_us"] / row["median_us"]
            by_family.setdefault(key.split("/")[0], []).append(ratio)
            lines.append(f"| {key} | {r['median_us']:.1f} | {row['median_us']:.1f} | {row['tflops']:.0f} | "
                         f"{ratio:.3f} |")  # fmt: skip
        else:
            lines.append(f"| {key} | {r.get('median_us', r.get('error', '-'))} | "
                         f"{row.get('median_us', row.get('error', '-'))} | | |")  # fmt: skip
    lines += ["", "| family | geomean ratio | min | max |", "|---|---|---|---|"]
    for fam, ratios in by_family.items():
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"| {fam} | {gm:.3f} | {min(ratios):.3f} | {max(ratios):.3f} |")
    text = "\n".join(lines)
    print(text)
    if markdown:
        with open(markdown, "w") as f:
            f.write(text + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="ours")
    p.add_argument("--json")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--idle-ms", type=float, default=300)
    p.add_argument("--warm-only", action="store_true", help="call each shape once (JIT warm-up), time nothing")
    p.add_argument("--compare", nargs=2, metavar=("REFERENCE_JSON", "OURS_JSON"))
    p.add_argument("--markdown")
    args = p.parse_args()
    if args.compare:
        compare(*args.compare, args.markdown)
    elif args.json or args.warm_only:
        for fam in args.families.split(","):
            if fam not in SUITES:
                sys.exit(f"unknown family {fam!r}; expected some of {', '.join(FAMILIES)}")
        run(args)
    else:
        p.error("give --json OUT (to time) or --compare REF OURS")


if __name__ == "__main__":
    main()
