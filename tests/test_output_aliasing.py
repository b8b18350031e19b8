"""CPU tier: every GEMM API rejects an output that shares bytes with one of its inputs (ValueError naming both),
before anything touches a device; an output right next to an input in the same buffer, and `c is d` where
documented, are accepted (the call then stops at the device check of CPU tensors)."""

from collections.abc import Callable

import pytest
import torch

import deep_gemm
from deep_gemm.utils import ceil_div

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
ON_CPU = r"must be on a CUDA device"


def fp8_dense():
    m, n, k = 64, 128, 256
    ops = dict(a=torch.zeros(m, k, dtype=FP8), sfa=torch.ones(m, 2), b=torch.zeros(n, k, dtype=FP8),
               sfb=torch.ones(1, 2), d=torch.empty(m, n, dtype=BF16))
    return ops, lambda o: deep_gemm.fp8_gemm_nt((o["a"], o["sfa"]), (o["b"], o["sfb"]), o["d"])


def fp8_contiguous():
    m, n, k, g = 256, 128, 256, 2
    ops = dict(a=torch.zeros(m, k, dtype=FP8), sfa=torch.ones(m, 2), b=torch.zeros(g, n, k, dtype=FP8),
               sfb=torch.ones(g, 1, 2), d=torch.empty(m, n, dtype=BF16),
               grouped_layout=torch.zeros(m, dtype=torch.int32))
    return ops, lambda o: deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
        (o["a"], o["sfa"]), (o["b"], o["sfb"]), o["d"], o["grouped_layout"])


def fp8_masked():
    g, max_m, n, k = 2, 128, 128, 256
    ops = dict(a=torch.zeros(g, max_m, k, dtype=FP8), sfa=torch.ones(g, max_m, 2), b=torch.zeros(g, n, k, dtype=FP8),
               sfb=torch.ones(g, 1, 2), d=torch.empty(g, max_m, n, dtype=BF16),
               masked_m=torch.zeros(g, dtype=torch.int32))
    return ops, lambda o: deep_gemm.m_grouped_fp8_gemm_nt_masked(
        (o["a"], o["sfa"]), (o["b"], o["sfb"]), o["d"], o["masked_m"], 64)


def fp8_k_grouped(layout: str):
    ks, m, n = [256, 128], 128, 64
    total, sf_rows = sum(ks), sum(ceil_div(k, 128) for k in ks)
    if layout == "nt":
        a, b = torch.zeros(m * total, dtype=FP8), torch.zeros(n * total, dtype=FP8)
    else:
        a, b = torch.zeros(total, m, dtype=FP8), torch.zeros(total, n, dtype=FP8)
    ops = dict(a=a, sfa=torch.ones(sf_rows, m), b=b, sfb=torch.ones(sf_rows, n), d=torch.empty(len(ks), m, n),
               grouped_layout=torch.tensor(ks, dtype=torch.int32))
    fn = getattr(deep_gemm, f"k_grouped_fp8_gemm_{layout}_contiguous")
    return ops, lambda o: fn((o["a"], o["sfa"]), (o["b"], o["sfb"]), o["d"], ks, o["grouped_layout"])


def bf16_dense(name: str):
    m, n, k = 64, 128, 256
    ops = dict(a=torch.zeros(m, k, dtype=BF16), b=torch.zeros(n, k, dtype=BF16), d=torch.empty(m, n, dtype=BF16))
    return ops, lambda o: getattr(deep_gemm, name)(o["a"], o["b"], o["d"])


def bf16_contiguous():
    m, n, k, g = 128, 64, 256, 2
    ops = dict(a=torch.zeros(m, k, dtype=BF16), b=torch.zeros(g, n, k, dtype=BF16), d=torch.empty(m, n, dtype=BF16),
               grouped_layout=torch.zeros(m, dtype=torch.int32))
    return ops, lambda o: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(o["a"], o["b"], o["d"], o["grouped_layout"])


def bf16_masked():
    g, max_m, n, k = 2, 128, 64, 256
    ops = dict(a=torch.zeros(g, max_m, k, dtype=BF16), b=torch.zeros(g, n, k, dtype=BF16),
               d=torch.empty(g, max_m, n, dtype=BF16), masked_m=torch.zeros(g, dtype=torch.int32))
    return ops, lambda o: deep_gemm.m_grouped_bf16_gemm_nt_masked(o["a"], o["b"], o["d"], o["masked_m"], 64)


def bf16_k_grouped():
    ks, m, n = [256, 128], 128, 64
    ops = dict(a=torch.zeros(sum(ks), m, dtype=BF16), b=torch.zeros(sum(ks), n, dtype=BF16),
               d=torch.empty(len(ks), m, n), grouped_layout=torch.tensor(ks, dtype=torch.int32))
    return ops, lambda o: deep_gemm.k_grouped_bf16_gemm_tn_contiguous(o["a"], o["b"], o["d"], ks, o["grouped_layout"])


# (case id, builder, the input d is made to overlap, its name in the message)
CASES: list[tuple[str, Callable, str, str]] = [
    ("fp8_gemm_nt-a", fp8_dense, "a", r"a\[0\] \(A\)"),
    ("fp8_gemm_nt-b", fp8_dense, "b", r"b\[0\] \(B\)"),
    ("fp8_gemm_nt-sfa", fp8_dense, "sfa", r"a\[1\] \(sfa\)"),
    ("fp8_contiguous-a", fp8_contiguous, "a", r"a\[0\] \(A\)"),
    ("fp8_contiguous-b", fp8_contiguous, "b", r"b\[0\] \(B\)"),
    ("fp8_contiguous-layout", fp8_contiguous, "grouped_layout", r"grouped_layout"),
    ("fp8_masked-a", fp8_masked, "a", r"a\[0\] \(A\)"),
    ("fp8_masked-masked_m", fp8_masked, "masked_m", r"masked_m"),
    ("fp8_k_grouped_nt-a", lambda: fp8_k_grouped("nt"), "a", r"a\[0\] \(A\)"),
    ("fp8_k_grouped_nt-sfb", lambda: fp8_k_grouped("nt"), "sfb", r"b\[1\] \(sfb\)"),
    ("fp8_k_grouped_tn-b", lambda: fp8_k_grouped("tn"), "b", r"b\[0\] \(B\)"),
    ("bf16_gemm_nt-a", lambda: bf16_dense("bf16_gemm_nt"), "a", r"a"),
    ("bf16_gemm_nt-b", lambda: bf16_dense("bf16_gemm_nt"), "b", r"b"),
    ("cublaslt_gemm_nt-a", lambda: bf16_dense("cublaslt_gemm_nt"), "a", r"a"),
    ("bf16_contiguous-b", bf16_contiguous, "b", r"b"),
    ("bf16_masked-a", bf16_masked, "a", r"a"),
    ("bf16_k_grouped-a", bf16_k_grouped, "a", r"a"),
]


def place(t: torch.Tensor, buffer: torch.Tensor, byte_offset: int) -> torch.Tensor:
    """A contiguous tensor of t's dtype and shape whose bytes start `byte_offset` bytes into `buffer` (uint8)."""
    nbytes = t.numel() * t.element_size()
    return buffer[byte_offset : byte_offset + nbytes].view(t.dtype).view(t.shape)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@pytest.mark.parametrize(("build", "target", "name"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("where", ["same_start", "input_starts_inside_d", "d_starts_inside_input", "adjacent"])
def test_output_overlapping_an_input_raises(build: Callable, target: str, name: str, where: str) -> None:
    ops, call = build()
    d, x = ops["d"], ops[target]
    buffer = torch.zeros(nbytes(d) + nbytes(x) + 64, dtype=torch.uint8)
    # (byte offsets of the input and of d in one buffer; multiples of 16, as TMA wants its operands)
    x_offset, d_offset = {
        "same_start": (0, 0),
        "input_starts_inside_d": (16, 0),
        "d_starts_inside_input": (0, 16),
        "adjacent": (0, (nbytes(x) + 15) // 16 * 16),  # d from the first 16-byte boundary past the input's end
    }[where]
    overlapping = where != "adjacent" and not (where == "d_starts_inside_input" and nbytes(x) <= 16)
    ops[target], ops["d"] = place(x, buffer, x_offset), place(d, buffer, d_offset)
    pattern = rf"d must not overlap {name} \(an output may not alias an input\)" if overlapping else ON_CPU
    with pytest.raises(ValueError, match=pattern):
        call(ops)


def test_c_is_d_stays_allowed() -> None:
    # FP32 D accumulated in place (recipe (1, 1, 128)): accepted, then the CPU tensors stop at the device check
    m, n, k = 64, 128, 256
    a, b = torch.zeros(m, k, dtype=FP8), torch.zeros(n, k, dtype=FP8)
    d = torch.zeros(m, n)
    with pytest.raises(ValueError, match=ON_CPU):
        deep_gemm.fp8_gemm_nt((a, torch.ones(m, 2)), (b, torch.ones(n, 2)), d, c=d)
    with pytest.raises(ValueError, match=ON_CPU):
        deep_gemm.bf16_gemm_nt(torch.zeros(m, k, dtype=BF16), torch.zeros(n, k, dtype=BF16), d, c=d)
    ks = [128]
    dk = torch.zeros(1, m, n)
    with pytest.raises(ValueError, match=ON_CPU):
        deep_gemm.k_grouped_fp8_gemm_nt_contiguous(
            (torch.zeros(m * 128, dtype=FP8), torch.ones(1, m)), (torch.zeros(n * 128, dtype=FP8), torch.ones(1, n)),
            dk, ks, torch.tensor(ks, dtype=torch.int32), c=dk)


def test_c_overlapping_d_partially_raises() -> None:
    m, n, k = 64, 128, 256
    buffer = torch.zeros(m * n + n, dtype=torch.float32)
    d, c = buffer[: m * n].view(m, n), buffer[n:].view(m, n)
    with pytest.raises(ValueError, match=r"c must be d itself or not overlap d"):
        deep_gemm.bf16_gemm_nt(torch.zeros(m, k, dtype=BF16), torch.zeros(n, k, dtype=BF16), d, c=c)
