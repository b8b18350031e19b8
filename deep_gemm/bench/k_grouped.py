"""The ``kgrouped`` suite: MoE weight-gradient GEMMs (``k_grouped_fp8_gemm_nt_contiguous``, recipe (1, 1, 128),
FP32 D = C + A_g @ B_g.T) and the dense ``fp8_gemm_nt`` with recipe (1, 1, 128) and C, against cuBLASLt.

A shape is ``GxMxNxK``: G groups of about K tokens each (U(0.7, 1.3) x K rounded to 128, seeded by the
shape), D ``[G, M, N]``; ``G = 0`` is the dense call ``fp8_gemm_nt`` on ``[M, K] x [N, K]`` with C.

Baselines, on the same FP8 data, group by group: cuBLASLt through ``torch._scaled_mm`` with the same
1x128 scales on both operands and FP32 output, then the addition of C; and per-tensor scales with fast
accumulation, then C. For G > 0 also ``k_grouped_fp8_gemm_tn_contiguous`` on the MN-major operands (its
transposing pre-pass plus the nt kernel; printed above the shape's row, JSON key ``tn_prepass``). The "rows"
column is the total K (tokens); TFLOPS count 2 x M x N x sum(K), bytes A, B, their scales, C read and D
written once.
"""

import random
from typing import Any

import torch

from deep_gemm.bench.common import parse_int_shape
from deep_gemm.bench.grouped import measure_baselines, measure_ours, run_grouped_suite
from deep_gemm.bench.registry import BenchOptions, Suite, SuiteReport, register_suite
from deep_gemm.testing import calc_diff
from deep_gemm.utils import align, ceil_div, per_channel_cast_to_fp8

__all__ = ["K_GROUPED_SHAPES", "parse_k_grouped_shape", "run_k_grouped"]

K_GROUPED_SHAPES = (
    (4, 4096, 7168, 8192),
    (8, 7168, 2048, 4096),
    (16, 4096, 7168, 2048),
    (0, 4096, 7168, 7168),
    (0, 7168, 2048, 16384),
)


def parse_k_grouped_shape(text: str) -> tuple[int, int, int, int]:
    """Parse ``"GxMxNxK"`` (G >= 0, the others positive; G = 0 is the dense per-row call).

    Raises:
        ValueError: not four integers separated by ``x`` with G >= 0 and M, N, K > 0.
    """
    return parse_int_shape(text, 4, "GxMxNxK (G >= 0; 0 = dense)", "4x4096x7168x8192", min_first=0)


def _baselines(pairs: list[tuple], c: torch.Tensor, scratch: torch.Tensor) -> dict[str, Any]:
    """cuBLASLt group by group into ``scratch`` (FP32), then C added: ``pairs[g]`` = (A_g [M, K_g] FP8,
    B_g [N, K_g] FP8, sfa_g [K_g / 128, M], sfb_g [K_g / 128, N]) or None for an empty group."""
    one = torch.ones((), dtype=torch.float32, device="cuda")

    def blockwise() -> object:
        for g, pair in enumerate(pairs):
            if pair is not None:
                a_g, b_g, sfa_g, sfb_g = pair
                # (1x128 on both: scale_a [M, K/128] with strides (1, M); scale_b the [K/128, N] row-major tensor,
                # whose transpose is the [N, K/128] MN-major scale of B [N, K])
                out = torch._scaled_mm(a_g, b_g.t(), sfa_g.t(), sfb_g, out_dtype=torch.float32)
                torch.add(c[g], out, out=scratch[g])
        return scratch

    def fast_accum() -> object:
        for g, pair in enumerate(pairs):
            if pair is not None:
                out = torch._scaled_mm(pair[0], pair[1].t(), one, one, out_dtype=torch.float32, use_fast_accum=True)
                torch.add(c[g], out, out=scratch[g])
        return scratch

    return {"blockwise": blockwise, "fast_accum": fast_accum}


def _bench(g: int, m: int, n: int, k: int, options: BenchOptions) -> dict[str, Any]:
    import deep_gemm

    dense = g == 0
    rng = random.Random(g * 7919 + m + n + k)
    ks = [k] if dense else [align(int(k * rng.uniform(0.7, 1.3)), 128) for _ in range(g)]
    groups, total = len(ks), sum(ks)
    a_src = torch.randn(total, m, device="cuda", dtype=torch.bfloat16)
    b_src = torch.randn(total, n, device="cuda", dtype=torch.bfloat16)
    a_flat = torch.empty(m * total, device="cuda", dtype=torch.float8_e4m3fn)
    b_flat = torch.empty(n * total, device="cuda", dtype=torch.float8_e4m3fn)
    sfa, sfb, pairs, start = [], [], [], 0
    for k_g in ks:
        a_q, a_sf = per_channel_cast_to_fp8(a_src[start : start + k_g])
        b_q, b_sf = per_channel_cast_to_fp8(b_src[start : start + k_g])
        a_g = a_flat[start * m : (start + k_g) * m].view(m, k_g)
        b_g = b_flat[start * n : (start + k_g) * n].view(n, k_g)
        a_g.copy_(a_q.t())
        b_g.copy_(b_q.t())
        sfa.append(a_sf)
        sfb.append(b_sf)
        pairs.append((a_g, b_g, a_sf, b_sf))
        start += k_g
    sfa, sfb = torch.cat(sfa), torch.cat(sfb)
    c = torch.randn(groups, m, n, device="cuda")
    d = torch.full_like(c, float("nan"))
    layout = torch.tensor(ks, device="cuda", dtype=torch.int32)

    def ours() -> torch.Tensor:
        if dense:
            # (the dense call takes sfa [M, K blocks] and sfb [N, K blocks]: the transposed views)
            deep_gemm.fp8_gemm_nt((a_flat.view(m, k), sfa.t()), (b_flat.view(n, k), sfb.t()), d[0], c=c[0])
        else:
            deep_gemm.k_grouped_fp8_gemm_nt_contiguous((a_flat, sfa), (b_flat, sfb), d, ks, layout, c=c)
        return d

    row = {
        "g": g,
        "m": m,
        "n": n,
        "k": k,
        "valid_rows": total,
        "flops": 2 * m * n * total,
        "bytes": (m + n) * total + 4 * (m + n) * sum(ceil_div(k_g, 128) for k_g in ks) + 8 * groups * m * n,
    }

    def diffs() -> list[float]:
        out, begin = [], 0
        for i, k_g in enumerate(ks):
            ref = c[i] + a_src[begin : begin + k_g].float().t() @ b_src[begin : begin + k_g].float()
            out.append(float(calc_diff(d[i], ref)))
            begin += k_g
        return out

    measure_ours(row, ours, diffs, options)
    calls = _baselines(pairs, c, torch.empty_like(c))
    if not dense:
        # The tn entry point on the MN-major operands: its transposing pre-pass plus the nt kernel (JSON key
        # "tn_prepass"; printed below the table)
        a_mn = torch.empty(total, m, device="cuda", dtype=torch.float8_e4m3fn)
        b_mn = torch.empty(total, n, device="cuda", dtype=torch.float8_e4m3fn)
        begin = 0
        for a_g, b_g, _, _ in pairs:
            k_g = a_g.shape[1]
            a_mn[begin : begin + k_g].view(torch.uint8).copy_(a_g.t().view(torch.uint8))
            b_mn[begin : begin + k_g].view(torch.uint8).copy_(b_g.t().view(torch.uint8))
            begin += k_g
        d_tn = torch.empty_like(c)

        def tn() -> object:
            deep_gemm.k_grouped_fp8_gemm_tn_contiguous((a_mn, sfa), (b_mn, sfb), d_tn, ks, layout, c=c)
            return d_tn

        calls["tn_prepass"] = tn
    measure_baselines(row, calls, options)
    if row.get("tn_prepass") and row.get("ours"):
        tn_us, nt_us = row["tn_prepass"]["median_us"], row["ours"]["median_us"]
        print(f"    (G={g} M={m} N={n} K={k}: tn with its pre-pass {tn_us:.1f} us, {tn_us / nt_us:.2f}x the nt call)")
    return row


def run_k_grouped(options: BenchOptions) -> SuiteReport:
    """Run the ``kgrouped`` suite, print its table, return the JSON-ready report."""
    return run_grouped_suite("kgrouped", K_GROUPED_SHAPES, _bench, options, parse_k_grouped_shape)


K_GROUPED_SUITE = register_suite(
    Suite(
        name="kgrouped",
        description="MoE k-grouped (weight-gradient) FP8 GEMM and dense recipe (1, 1, 128) with C vs cuBLASLt",
        shape_help="GxMxNxK (groups x M x N x tokens per group; G = 0: dense), e.g. 4x4096x7168x8192",
        parse_shape=parse_k_grouped_shape,
        run=run_k_grouped,
    )
)
