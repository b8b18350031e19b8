"""CPU tier: the header the extension shares with the kernels (deep_gemm/common/host_device_types.hpp) is plain
C++ (g++ without any CUDA include path), and the JIT renders each kernel's config by field name, so that a value
under the wrong name or a field out of order does not compile."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import deep_gemm

INCLUDE = Path(deep_gemm.__file__).resolve().parent / "include"

# Values worked out by hand from the kernels' shared-memory maps (deep_gemm/impls/sm90_gemm.cuh,
# sm90_fp8_mqa_logits.cuh, sm90_fp8_paged_mqa_logits.cuh) and the parameter structs' layouts
PLAIN_CPP_CHECKS = r"""
#include <deep_gemm/common/host_device_types.hpp>

using namespace deep_gemm;

// FP8 1d2d, 128 x 128, 5 stages, BF16 D through TMA: staging 128 x 128 x 2; per stage A, B 16 KiB, sfa 512, sfb 8,
// two barriers
constexpr Sm90GemmKernelConfig kFp8{.block_m = 128, .block_n = 128, .num_stages = 5, .num_math_warpgroups = 2,
                                    .use_tma_store = true, .num_splits = 1,
                                    .operands = OperandKind::kFp8BlockScaled};
static_assert(sm90_gemm_smem(kFp8).total == 1024 + 32768 + 5 * (16384 + 16384 + 512 + 8 + 16));
// FP8 x FP4, 128 x 128, 4 stages, BF16 D through TMA: per stage A, B (the e4m3 tile) 16 KiB, sfa 512, the rows'
// exponent words 512, the packed B tile 128 x 64, three barriers (full, empty, b_loaded)
constexpr Sm90GemmKernelConfig kFp4{.block_m = 128, .block_n = 128, .num_stages = 4, .num_math_warpgroups = 2,
                                    .use_tma_store = true, .num_splits = 1, .operands = OperandKind::kFp8Fp4};
static_assert(sm90_gemm_smem(kFp4).total == 1024 + 32768 + 4 * (16384 + 16384 + 512 + 512 + 8192 + 24));
// Split-K 3 of a 64 x 112 tile (one math warpgroup): 56 accumulators = 28 pairs per thread, 10 per owner,
// 3 slots of 10 x 128 threads x 8 bytes
constexpr Sm90GemmKernelConfig kSplit{.block_m = 64, .block_n = 112, .num_stages = 8, .num_math_warpgroups = 1,
                                      .num_splits = 3, .operands = OperandKind::kFp8BlockScaled};
static_assert(sm90_gemm_smem(kSplit).split == 3 * 10 * 128 * 8 && sm90_gemm_smem(kSplit).num_split_barriers == 2);
// BF16, FP32 D through TMA with 4 staging buffers per math warpgroup: 4 x 128-byte chunks per row, 8 C barriers
constexpr Sm90GemmKernelConfig kBf16{.block_m = 128, .block_n = 256, .num_stages = 4, .num_math_warpgroups = 2,
                                     .fp32_buffers = 4, .use_tma_store = true, .num_splits = 1,
                                     .operands = OperandKind::kBf16, .fp32_out = true};
static_assert(sm90_gemm_smem(kBf16).total == 1024 + 128 * 4 * 128 + 4 * (16384 + 32768 + 16) + 8 * 8);
// The small-M box rule: a plain K-major GEMM keeps only the rows that exist; an m-grouped one the whole block
static_assert(sm90_gemm_small_m_box_rows(sm90_gemm_small_m_box_may_shrink(kFp8), 128, 5, 8) == 8);
static_assert(sm90_gemm_small_m_box_rows(sm90_gemm_small_m_box_may_shrink(kFp8), 128, 0, 4) == 4);
constexpr Sm90GemmKernelConfig kGrouped{.block_m = 128, .gemm_type = GemmType::kMGroupedMasked};
static_assert(sm90_gemm_small_m_box_rows(sm90_gemm_small_m_box_may_shrink(kGrouped), 128, 5, 8) == 128);
// MQA prefill at H = 64, D = 128, 8 stages with the pieces: Q 2 x 256 x 128, pieces 8 queries x 4 x 128
static_assert(sm90_mqa_logits_smem_bytes({.num_heads = 64, .head_dim = 128, .num_stages = 8,
                                          .signed_sum_wgmma = true}) ==
              1024 + 65536 + 4096 + 8 * 8192 + 17 * 8 + 16);
// H = 16, D = 32, 12 stages, no pieces: Q 2 x 256 x 32, stages of 64 x 32
static_assert(sm90_mqa_logits_smem_bytes({.num_heads = 16, .head_dim = 32, .num_stages = 12}) ==
              1024 + 16384 + 12 * 2048 + 25 * 8 + 16);
static_assert(sm90_mqa_logits_block_q(16) == 32 && sm90_mqa_logits_block_q(64) == 8);
// Paged at T = 1, H = 64, D = 128, 10 stages with the pieces: two Q slots of 64 x 128, stages of 64 x 128 + 64
// scales, per Q slot a 16 x 128 piece tile and 16 scales, 2 x 10 stage barriers + 3 x 2 slot barriers
static_assert(sm90_paged_mqa_logits_smem_bytes(1, 64, 128, 10, true) ==
              1024 + 16384 + 10 * (8192 + 256) + 2 * (2048 + 64) + 26 * 8);
// T = 4, H = 32, D = 64, 6 stages, no pieces
static_assert(sm90_paged_mqa_logits_smem_bytes(4, 32, 64, 6, false) == 1024 + 16384 + 6 * (4096 + 256) + 16 * 8);
// FP4 modes: packed Q (and, prefill, two e4m3 kv tiles per math warpgroup; paged, per math warpgroup), half-size stages
static_assert(sm90_mqa_logits_smem_bytes({.num_heads = 64, .head_dim = 128, .num_stages = 16, .fp4_operands = true}) ==
              1024 + 65536 + 2 * (8192 * 2 + 2 * 8192) + 16 * 4096 + 33 * 8 + 16);
static_assert(sm90_paged_mqa_logits_smem_bytes(4, 64, 128, 8, false, 2, true) ==
              1024 + 65536 + 8 * (4096 + 256) + 2 * 16384 + 2 * 2 * 8192 + 22 * 8);
// The by-value kernel parameters: 4 + 3 x 4 x 4 bytes; the paged problem's 14 fields with their padding
static_assert(sizeof(KGroupedParams<8>) == 8 * 256 + 8 * 8 && sizeof(TransposeGroups<4>) == 52 &&
              sizeof(PagedMqaProblem) == 104);

int main() { return 0; }
"""


def test_shared_header_is_plain_cpp(tmp_path: Path) -> None:
    """g++ -std=c++20 compiles it with only the package include path: no CUDA header is needed."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        pytest.skip(f"no host C++ compiler ({cxx})")
    src = tmp_path / "plain.cpp"
    src.write_text(PLAIN_CPP_CHECKS)
    run = subprocess.run(
        [cxx, "-std=c++20", "-Wall", "-Werror", "-fsyntax-only", "-I", str(INCLUDE), str(src)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(path))
    return path


# The header's config struct each family's kernel is compiled with
CONFIG_STRUCTS = {
    "sm90_gemm": "Sm90GemmKernelConfig",
    "sm90_fp8_mqa_logits": "Sm90MqaLogitsKernelConfig",
    "sm90_fp8_paged_mqa_logits": "Sm90PagedMqaLogitsKernelConfig",
}


def config_fields(struct: str) -> list[str]:
    """The field names the header's `struct` lists in its visit_fields, in order."""
    header = (INCLUDE / "deep_gemm" / "common" / "host_device_types.hpp").read_text()
    body = re.search(rf"^struct {struct} {{(.*?)^}};", header, re.M | re.S)
    assert body, struct
    visit = body.group(1)[body.group(1).index("visit_fields") :]
    names = re.findall(r'f\("(\w+)", (\w+)\)', visit)
    assert names and all(name == member for name, member in names), names
    return [name for name, _ in names]


def swap_lines(source: str, first: str, second: str) -> str:
    """The rendered source with the initializer lines of fields `first` and `second` exchanged."""
    a = re.search(rf"^\s*\.{first} = .*$", source, re.M)
    b = re.search(rf"^\s*\.{second} = .*$", source, re.M)
    assert a and b, (first, second, source)
    lines = source.splitlines()
    i, j = source[: a.start()].count("\n"), source[: b.start()].count("\n")
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("family", "params", "fields", "swapped"),
    [
        (
            "sm90_gemm",
            dict(bf16=1, mn_major_a=1, block_m=64, block_n=128, num_stages=8),
            {"block_m": "64", "block_n": "128", "num_stages": "8", "mn_major_a": "true", "mn_major_b": "false",
             "operands": "OperandKind::kBf16", "gemm_type": "GemmType::kNormal"},
            ("mn_major_a", "mn_major_b"),
        ),
        (
            "sm90_fp8_mqa_logits",
            {"num_heads": 64, "head_dim": 128, "out_bf16": 1},
            {"num_heads": "64", "head_dim": "128", "clean_logits": "true", "is_compressed": "false",
             "out_bf16": "true", "split_halves": "false"},
            ("is_compressed", "clean_logits"),
        ),
        (
            "sm90_fp8_mqa_logits",
            {"num_heads": 32, "head_dim": 32, "clean_logits": 0},
            {"num_heads": "32", "head_dim": "32", "clean_logits": "false", "out_bf16": "false"},
            ("out_bf16", "split_halves"),
        ),
        (
            "sm90_fp8_paged_mqa_logits",
            {"next_n": 2, "num_heads": 64, "head_dim": 128},
            {"next_n": "2", "num_heads": "64", "head_dim": "128", "block_kv": "64", "out_bf16": "false",
             "has_indices": "false"},
            ("is_2d_context_lens", "clean_logits"),
        ),
        (
            "sm90_fp8_paged_mqa_logits",
            {"next_n": 1, "num_heads": 32, "head_dim": 32, "block_kv": 32, "out_bf16": 1, "has_indices": 1},
            {"next_n": "1", "num_heads": "32", "head_dim": "32", "block_kv": "32", "out_bf16": "true",
             "has_indices": "true"},
            ("out_bf16", "has_indices"),
        ),
    ],
    ids=["gemm", "mqa", "mqa_d32", "paged_mqa", "paged_mqa_bf16_indices"],
)
def test_configs_rendered_by_field_name(
    cache_dir: Path, family: str, params: dict, fields: dict, swapped: tuple[str, str]
) -> None:
    """The rendered source names each value; the same source with two fields exchanged does not compile."""
    result = deep_gemm.compile_kernel(family, params, use_nvrtc=False)
    source = result["source"]
    # every field of the config, in its declaration order (visit_fields), each under its own name
    assert re.findall(r"^\s*\.(\w+) = ", source, re.M) == config_fields(CONFIG_STRUCTS[family]), source
    for name, value in fields.items():
        assert re.search(rf"^\s*\.{name} = {re.escape(value)},$", source, re.M), (name, value, source)
    with pytest.raises(RuntimeError, match="out-of-order"):
        deep_gemm.compile_kernel(family, source=swap_lines(source, *swapped), use_nvrtc=False)
