"""Layout API: validation on any machine; the JIT layout kernels against the PyTorch references on a GPU."""

import pytest
import torch

import deep_gemm
from deep_gemm.utils import ceil_to_ue8m0, mn_major_tma_aligned_reference, packed_ue8m0_reference

gpu = pytest.mark.gpu


@pytest.mark.parametrize(
    ("x", "element_size", "expected"), [(0, 4, 0), (1, 4, 4), (4097, 4, 4100), (7, 2, 8), (17, 1, 32), (5, 16, 5)]
)
def test_get_tma_aligned_size(x: int, element_size: int, expected: int) -> None:
    assert deep_gemm.get_tma_aligned_size(x, element_size) == expected


@pytest.mark.parametrize("element_size", [0, 3, 32])
def test_get_tma_aligned_size_rejects_bad_element_size(element_size: int) -> None:
    with pytest.raises(ValueError, match="element_size must divide 16"):
        deep_gemm.get_tma_aligned_size(128, element_size)


@pytest.mark.parametrize("fn", ["get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor"])
def test_layout_rejects_bad_inputs_without_gpu(fn: str) -> None:
    f = getattr(deep_gemm, fn)
    with pytest.raises(ValueError, match="sf must have dtype torch.float32"):
        f(torch.ones(4, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="sf must be 2-D"):
        f(torch.ones(4, dtype=torch.float32))
    with pytest.raises(ValueError, match="sf must be on a CUDA device"):
        f(torch.ones(4, 4, dtype=torch.float32))


def test_transform_rejects_bad_inputs_without_gpu() -> None:
    sf = torch.ones(256, 4)
    with pytest.raises(ValueError, match="is_sfa must be given"):
        deep_gemm.transform_sf_into_required_layout(sf, 256, 512, (1, 128, 128))
    with pytest.raises(ValueError, match=r"sf must have shape \[2, 4\]"):
        deep_gemm.transform_sf_into_required_layout(sf, 256, 512, (128, 128))
    with pytest.raises(ValueError, match=r"granularity must be \(1 or 128, 128\) or.*got \(1, 64\)"):
        deep_gemm.transform_sf_into_required_layout(sf, 256, 512, (1, 64))
    with pytest.raises(ValueError, match=r"got \(128, 32\)"):  # 1x32 scales are per row
        deep_gemm.transform_sf_into_required_layout(sf, 256, 512, (128, 32))
    # 1x32: FP32 [MN, ceil(K/32)] or packed int32 [MN, ceil(K/128)]
    with pytest.raises(ValueError, match=r"sf must have shape \[256, 16\] .*\(1, 32\), got"):
        deep_gemm.transform_sf_into_required_layout(sf, 256, 512, (1, 32))
    with pytest.raises(ValueError, match=r"sf must have shape \[256, 1\] .*as packed UE8M0 int32"):
        deep_gemm.transform_sf_into_required_layout(torch.ones(256, 4, dtype=torch.int32), 256, 128, (1, 32))
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        deep_gemm.transform_sf_into_required_layout(torch.ones(256, 1, dtype=torch.int32), 256, 128, (1, 1, 32),
                                                    is_sfa=False)
    with pytest.raises(ValueError, match=r"float32 on SM90 \(packed UE8M0 scales: recipe \(1, 32\)\)"):
        deep_gemm.transform_sf_into_required_layout(torch.ones(256, 4, dtype=torch.int32), 256, 512, (1, 128))
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        deep_gemm.transform_sf_into_required_layout(sf, 256, 512, (1, 128, 128), is_sfa=True)


def random_sf(shape: tuple[int, ...], k_major: bool = True) -> torch.Tensor:
    """Positive FP32 scales, K-major (row-major) or in some other strided layout."""
    sf = torch.rand(shape, device="cuda") + 0.01
    return sf if k_major else sf.transpose(-1, -2).contiguous().transpose(-1, -2)


SHAPES = [(1, 1), (7, 3), (128, 56), (4097, 57), (4096, 128), (33, 1)]


@gpu
@pytest.mark.parametrize("groups", [None, 1, 2, 4], ids=lambda g: f"g{g}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"mn{s[0]}-k{s[1]}")
def test_mn_major_transform_matches_reference(shape: tuple[int, int], groups: int | None) -> None:
    full = shape if groups is None else (groups, *shape)
    for layout in ("k_major", "strided"):
        sf = random_sf(full, k_major=layout == "k_major")
        out = deep_gemm.get_mn_major_tma_aligned_tensor(sf)
        ref = mn_major_tma_aligned_reference(sf)
        assert out.shape == ref.shape and out.stride() == ref.stride(), (out.stride(), ref.stride())
        assert torch.equal(out, sf)
        # An aligned input comes back as is (no copy, no kernel)
        assert deep_gemm.get_mn_major_tma_aligned_tensor(out).data_ptr() == out.data_ptr()


@gpu
@pytest.mark.parametrize("groups", [None, 1, 2, 4], ids=lambda g: f"g{g}")
@pytest.mark.parametrize("shape", SHAPES + [(4097, 7296 // 128)], ids=lambda s: f"mn{s[0]}-k{s[1]}")
def test_packed_ue8m0_matches_reference(shape: tuple[int, int], groups: int | None) -> None:
    full = shape if groups is None else (groups, *shape)
    sf = ceil_to_ue8m0(random_sf(full) * 2.0 ** torch.randint(-20, 20, full, device="cuda"))
    out = deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    ref = packed_ue8m0_reference(sf)
    assert out.dtype == torch.int32
    assert out.shape == ref.shape and out.stride() == ref.stride()
    assert torch.equal(out, ref)


@gpu
def test_transform_sf_per_recipe() -> None:
    m, n, k = 1000, 576, 7168
    sfa = random_sf((m, k // 128))
    sfb = random_sf((n // 128 + 1, k // 128))
    out_a = deep_gemm.transform_sf_into_required_layout(sfa, m, k, (1, 128, 128), is_sfa=True)
    assert out_a.stride() == (1, deep_gemm.get_tma_aligned_size(m, 4)) and torch.equal(out_a, sfa)
    out_b = deep_gemm.transform_sf_into_required_layout(sfb, n, k, (1, 128, 128), is_sfa=False)
    assert out_b.is_contiguous() and torch.equal(out_b, sfb)
    sfg = random_sf((4, m, k // 128))
    out_g = deep_gemm.transform_sf_into_required_layout(sfg, m, k, (1, 128), num_groups=4)
    assert torch.equal(out_g, sfg) and out_g.stride(1) == 1


@gpu
@pytest.mark.parametrize("groups", [None, 3], ids=lambda g: f"g{g}")
def test_transform_sf_1x32_packs_into_the_fp4_gemm_layout(groups: int | None) -> None:
    # FP4 weights' 1x32 UE8M0 scales (the reference's test_mega_moe / FP8 x FP4 call): FP32 powers of two are packed
    # four to an int32, MN-major, TMA-aligned; packed words are only moved there; disable_ue8m0_cast keeps FP32
    n, k = 577, 7168
    full = (n, k // 32) if groups is None else (groups, n, k // 32)
    sf = ceil_to_ue8m0(random_sf(full) * 2.0 ** torch.randint(-20, 20, full, device="cuda"))
    out = deep_gemm.transform_sf_into_required_layout(sf, n, k, (1, 32), num_groups=groups)
    ref = packed_ue8m0_reference(sf)
    assert out.dtype == torch.int32 and out.shape == ref.shape and out.stride() == ref.stride()
    assert torch.equal(out, ref)
    again = deep_gemm.transform_sf_into_required_layout(ref.contiguous(), n, k, (1, 1, 32), num_groups=groups,
                                                        is_sfa=False)
    assert again.stride() == ref.stride() and torch.equal(again, ref)
    kept = deep_gemm.transform_sf_into_required_layout(sf, n, k, (1, 32), num_groups=groups, disable_ue8m0_cast=True)
    assert kept.dtype == torch.float32 and kept.stride(-2) == 1 and torch.equal(kept, sf)


@gpu
def test_layout_kernel_in_cuda_graph_after_warmup() -> None:
    sf = random_sf((300, 20))
    deep_gemm.get_mn_major_tma_aligned_tensor(sf)  # warm-up: compile and load
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = deep_gemm.get_mn_major_tma_aligned_tensor(sf)
    sf.copy_(random_sf((300, 20)))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, sf)
