"""deep_gemm.legacy: the reference's Triton functions by name and arguments, served by the grouped GEMMs.

Oracle: float64 products of the same BF16 values, rows gathered by the mappings in Python (negative indices:
zero rows), D poisoned before each call; padding rows must come out zero as the reference's kernels write them."""

import inspect

import pytest
import torch

import deep_gemm
from deep_gemm import legacy
from deep_gemm.testing import calc_diff

gpu = pytest.mark.gpu

REFERENCE = {
    "m_grouped_bf16_gemm_nt_contiguous_tl": ["a", "b", "d", "m_indices"],
    "m_grouped_bf16_gemm_nn_contiguous_tl": ["a", "b", "d", "m_indices"],
    "a_fused_m_grouped_bf16_gemm_nt_contiguous_tl": ["a", "b", "d", "mappings"],
    "a_fused_m_grouped_bf16_gemm_nn_contiguous_tl": ["a", "b", "d", "mappings"],
    "a_fused_k_grouped_bf16_gemm_tn_contiguous_tl": ["a", "b", "d", "handle", "acc"],
    "b_fused_k_grouped_bf16_gemm_tn_contiguous_tl": ["a", "b", "d", "handle", "acc"],
}


def test_names_and_parameters_as_reference() -> None:
    assert deep_gemm.legacy is legacy and sorted(legacy.__all__) == sorted(REFERENCE)
    for name, params in REFERENCE.items():
        assert list(inspect.signature(getattr(legacy, name)).parameters) == params, name
        assert getattr(legacy, name).__doc__


def test_bad_arguments_name_them() -> None:
    a, b = torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(2, 64, 64, dtype=torch.bfloat16)
    d = torch.zeros(128, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="m_indices must be a 1-D torch.int32"):
        legacy.m_grouped_bf16_gemm_nt_contiguous_tl(a, b, d, torch.zeros(128, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"mappings must be a pair"):
        legacy.a_fused_m_grouped_bf16_gemm_nt_contiguous_tl(a, b, d, torch.zeros(128, dtype=torch.int32))
    ids = torch.zeros(128, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"must both have d's 128 rows"):
        legacy.a_fused_m_grouped_bf16_gemm_nt_contiguous_tl(a, b, d, (ids, ids[:64]))
    kb = torch.zeros(256, 64, dtype=torch.bfloat16)
    handle = (torch.arange(256, dtype=torch.int32), torch.tensor([0, 128], dtype=torch.int32),
              torch.tensor([128, 256], dtype=torch.int32))  # fmt: skip
    with pytest.raises(ValueError, match="d must be a torch.float32 tensor"):
        legacy.a_fused_k_grouped_bf16_gemm_tn_contiguous_tl(kb, kb, torch.zeros(2, 64, 64, dtype=torch.bfloat16),
                                                            handle, False)  # fmt: skip
    with pytest.raises(ValueError, match=r"handle must be a triple"):
        legacy.b_fused_k_grouped_bf16_gemm_tn_contiguous_tl(kb, kb, torch.zeros(2, 64, 64), handle[:2], False)
    bad = (handle[0], handle[1], torch.tensor([128, 300], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"0 <= k_start <= k_end <= 256"):
        legacy.b_fused_k_grouped_bf16_gemm_tn_contiguous_tl(kb, kb, torch.zeros(2, 64, 64), bad, False)


def gathered(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    out = x.double()[rows.clamp(min=0).long()]
    out[rows < 0] = 0
    return out


@gpu
@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "a_fused"])
def test_m_grouped_against_float64(layout: str, fused: bool) -> None:
    torch.manual_seed(0)
    align = deep_gemm.get_mk_alignment_for_contiguous_layout()
    num_groups, n, k = 3, 256, 512
    counts = [align - 7, 2 * align, align + 33]
    ids = torch.cat([torch.cat([torch.full((c,), g, dtype=torch.int32),
                                torch.full((-c % align,), -1, dtype=torch.int32)]) for g, c in enumerate(counts)])
    ids = ids.cuda()
    m = ids.numel()
    b = torch.randn(num_groups, n, k, device="cuda", dtype=torch.bfloat16)
    b_arg = b if layout == "nt" else b.transpose(1, 2).contiguous()
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if fused:
        a_src = torch.randn(m + 50, k, device="cuda", dtype=torch.bfloat16)
        rows = torch.randperm(m + 50, device="cuda")[:m].int()
        rows[::11] = -1  # (zero rows inside groups too)
        getattr(legacy, f"a_fused_m_grouped_bf16_gemm_{layout}_contiguous_tl")(a_src, b_arg, d, (ids, rows))
        a64 = gathered(a_src, rows)
    else:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        getattr(legacy, f"m_grouped_bf16_gemm_{layout}_contiguous_tl")(a, b_arg, d, ids)
        a64 = a.double()
    torch.cuda.synchronize()
    for g in range(num_groups):
        rows_g = ids == g
        ref = a64[rows_g] @ b[g].double().t()
        assert calc_diff(d[rows_g].double(), ref) < 1e-5, g
    assert (d[ids < 0] == 0).all(), "padding rows must be zero"


@gpu
@pytest.mark.parametrize("fused", ["a", "b"])
@pytest.mark.parametrize("acc", [False, True])
def test_k_grouped_against_float64(fused: str, acc: bool) -> None:
    torch.manual_seed(1)
    m, n, ks = 128, 256, [384, 0, 1000]
    total = sum(ks)
    starts = torch.tensor([sum(ks[:i]) for i in range(len(ks))], dtype=torch.int32, device="cuda")
    ends = starts + torch.tensor(ks, dtype=torch.int32, device="cuda")
    src_rows = total + 64
    k_indices = torch.randperm(src_rows, device="cuda")[:total].int()
    k_indices[::13] = -1
    if fused == "a":
        a, b = torch.randn(src_rows, m, device="cuda").bfloat16(), torch.randn(total, n, device="cuda").bfloat16()
        a64, b64 = gathered(a, k_indices), b.double()
    else:
        a, b = torch.randn(total, m, device="cuda").bfloat16(), torch.randn(src_rows, n, device="cuda").bfloat16()
        a64, b64 = a.double(), gathered(b, k_indices)
    base = torch.randn(len(ks), m, n, device="cuda")
    d = base.clone()
    getattr(legacy, f"{fused}_fused_k_grouped_bf16_gemm_tn_contiguous_tl")(a, b, d, (k_indices, starts, ends), acc)
    torch.cuda.synchronize()
    for g, (s, kg) in enumerate(zip(starts.tolist(), ks, strict=True)):
        ref = a64[s : s + kg].t() @ b64[s : s + kg] + (base[g].double() if acc else 0)
        if kg == 0 and not acc:
            assert (d[g] == 0).all(), g
        else:
            assert calc_diff(d[g].double(), ref) < 1e-5, g
