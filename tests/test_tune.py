"""DG_TUNE, the developer entry point for forced kernel configurations (docs/design.md, "Forcing kernel configurations"): its parser, and that each
GEMM family reads only its own section. CPU only (`_C.parse_tune`, `_C.get_gemm_config(tune=...)`); the GPU tests
that run forced configs are in test_fp8_gemm.py, test_bf16_gemm.py and test_mqa_logits.py."""

import pytest

import deep_gemm
from deep_gemm.testing import H200_CLUSTER_CTAS

parse = deep_gemm._C.parse_tune
config = deep_gemm._C.get_gemm_config


def test_parse_every_family() -> None:
    assert parse("") == {}
    assert parse(" ; ") == {}
    spec = (
        "fp8_gemm:block_m=128,block_n=112,split_k=2,fp32_buffers=3,stream_k=2,multicast=1,multicast_on_a=0,overlap=0;"
        " bf16_gemm: block_n = 64, einsum_batched=1 ;mqa_logits:kv_split=4096;paged_mqa_logits:math_wgs=2,stages=6;"
    )
    assert parse(spec) == {
        "fp8_gemm": dict(block_m=128, block_n=112, split_k=2, fp32_buffers=3, stream_k=2, multicast=1,
                         multicast_on_a=0, overlap=0),
        "bf16_gemm": dict(block_n=64, einsum_batched=1),
        "mqa_logits": dict(kv_split=4096),
        "paged_mqa_logits": dict(math_wgs=2, stages=6),
    }  # fmt: skip
    # (a family given in two sections: their keys together)
    assert parse("fp8_gemm:block_m=64;fp8_gemm:block_n=32") == {"fp8_gemm": dict(block_m=64, block_n=32)}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("fp16_gemm:block_m=128", "DG_TUNE: unknown kernel family 'fp16_gemm' (families: fp8_gemm, bf16_gemm"),
        ("paged_mqa:stages=4", "DG_TUNE: unknown kernel family 'paged_mqa'"),
        ("fp8_gemm:block_k=128", "DG_TUNE: fp8_gemm has no key 'block_k' (keys: block_m, block_n, split_k"),
        # (the overlapped promotion is FP8's: the BF16 family has no such key)
        ("bf16_gemm:overlap=1", "DG_TUNE: bf16_gemm has no key 'overlap'"),
        ("mqa_logits:stages=4", "DG_TUNE: mqa_logits has no key 'stages' (keys: kv_split)"),
        ("fp8_gemm:block_m=100", "DG_TUNE: fp8_gemm:block_m=100 must be a multiple of 64 in [64, 256]"),
        ("fp8_gemm:block_m=0", "DG_TUNE: fp8_gemm:block_m=0 must be a multiple of 64 in [64, 256]"),
        ("fp8_gemm:block_n=200", "DG_TUNE: fp8_gemm:block_n=200 must be a multiple of 16 in [16, 256]"),
        ("fp8_gemm:split_k=9", "DG_TUNE: fp8_gemm:split_k=9 must be an integer in [1, 8]"),
        ("fp8_gemm:split_k=two", "DG_TUNE: fp8_gemm:split_k=two must be an integer in [1, 8]"),
        ("fp8_gemm:split_k=-1", "DG_TUNE: fp8_gemm:split_k=-1 must be an integer in [1, 8]"),
        ("fp8_gemm:split_k=2x", "DG_TUNE: fp8_gemm:split_k=2x must be an integer in [1, 8]"),
        ("fp8_gemm:split_k=", "DG_TUNE: fp8_gemm:split_k= must be an integer in [1, 8]"),
        ("bf16_gemm:stream_k=3", "DG_TUNE: bf16_gemm:stream_k=3 must be an integer in [0, 2]"),
        ("bf16_gemm:multicast=2", "DG_TUNE: bf16_gemm:multicast=2 must be 0 or 1"),
        ("mqa_logits:kv_split=100", "DG_TUNE: mqa_logits:kv_split=100 must be a multiple of 64 in [64, 1048576]"),
        ("paged_mqa_logits:math_wgs=4", "DG_TUNE: paged_mqa_logits:math_wgs=4 must be 2 or 3"),
        ("paged_mqa_logits:stages=33", "DG_TUNE: paged_mqa_logits:stages=33 must be a multiple of 2 in [2, 32]"),
        ("fp8_gemm:block_m=128,block_m=64", "DG_TUNE: fp8_gemm:block_m is given twice"),
        ("fp8_gemm:block_m=128;fp8_gemm:block_m=64", "DG_TUNE: fp8_gemm:block_m is given twice"),
        ("block_m=128", "DG_TUNE: expected 'family:key=value[,key=value...]', got 'block_m=128'"),
        ("fp8_gemm:block_m", "DG_TUNE: fp8_gemm: expected 'key=value', got 'block_m'"),
        ("fp8_gemm:", "DG_TUNE: fp8_gemm: expected 'key=value', got ''"),
    ],
)
def test_parse_errors_name_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(spec)
    assert message in str(info.value)


# (M, N, K) with different default picks: split-K at small M, stream-K and 192-row tiles at large M
SHAPES = [(64, 2112, 7168), (128, 7168, 16384), (1024, 4096, 7168), (4096, 7168, 7168), (4096, 4096, 7168)]


def pick(m: int, n: int, k: int, **kwargs) -> dict:
    return config(m, n, k, cluster_ctas=H200_CLUSTER_CTAS, **kwargs)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp8", "bf16"])
def test_each_gemm_family_reads_only_its_section(bf16: bool) -> None:
    own, other = ("bf16_gemm", "fp8_gemm") if bf16 else ("fp8_gemm", "bf16_gemm")
    forced = "block_m=128,block_n=48,split_k=2,multicast=1,stream_k=0"
    for m, n, k in SHAPES:
        default = pick(m, n, k, bf16=bf16)
        # The other family's section (and the MQA ones) leave the pick as it is ...
        tune = f"{other}:{forced};mqa_logits:kv_split=64;paged_mqa_logits:stages=2"
        assert pick(m, n, k, bf16=bf16, tune=tune) == default, (m, n, k, tune)
        # ... its own forces it
        cfg = pick(m, n, k, bf16=bf16, tune=f"{own}:{forced}")
        assert (cfg["block_m"], cfg["block_n"], cfg["num_splits"], cfg["stream_k"]) == (128, 48, 2, 0), (m, n, k)
        assert pick(m, n, k, bf16=bf16, tune=f"{own}:block_n=48")["block_n"] == 48, (m, n, k)


def test_tune_keys_force_what_they_name() -> None:
    # multicast: the heuristic may pair tiles along M (off by default); 1024 x 7168 x 7168 pairs them when allowed
    assert pick(1024, 7168, 7168)["num_multicast"] == 1
    assert pick(1024, 7168, 7168, tune="fp8_gemm:multicast=1")["num_multicast"] == 2
    assert pick(1024, 7168, 7168, tune="fp8_gemm:multicast=0", allow_multicast=True)["num_multicast"] == 2
    # multicast_on_a: pairs along N sharing A, never picked otherwise
    cfg = pick(128, 7168, 16384, tune="fp8_gemm:multicast_on_a=1")
    assert (cfg["num_multicast"], cfg["is_multicast_on_a"]) == (2, True)
    # overlap, stream-K, FP32 staging buffers
    assert pick(64, 4096, 7168)["overlap_promotion"]
    assert not pick(64, 4096, 7168, tune="fp8_gemm:overlap=0")["overlap_promotion"]
    assert pick(4096, 4096, 7168)["stream_k"] == 1
    assert pick(4096, 4096, 7168, tune="fp8_gemm:stream_k=0")["stream_k"] == 0
    assert pick(4096, 4096, 7168, tune="fp8_gemm:stream_k=2")["stream_k"] == 2
    fp32 = dict(bf16=True, fp32_out=True)
    assert pick(1000, 1000, 1024, **fp32, tune="bf16_gemm:block_n=160")["fp32_buffers"] == 5
    assert pick(1000, 1000, 1024, **fp32, tune="bf16_gemm:block_n=160,fp32_buffers=2")["fp32_buffers"] == 2
    # Explicit arguments win over the tune
    assert pick(64, 2112, 7168, tune="fp8_gemm:block_n=48", block_n=64)["block_n"] == 64
    # A forced value no config takes raises, naming the family and the forced keys
    with pytest.raises(ValueError, match=r"no FP8 GEMM config fits .* split_k=8 \(DG_TUNE fp8_gemm section"):
        pick(64, 256, 512, tune="fp8_gemm:split_k=8")
    with pytest.raises(ValueError, match="forced overlap=1"):
        pick(4096, 7168, 7168, tune="fp8_gemm:overlap=1")
    # A malformed tune raises whichever family it names
    with pytest.raises(ValueError, match="DG_TUNE: paged_mqa_logits:stages=3"):
        pick(64, 2112, 7168, tune="paged_mqa_logits:stages=3")


def test_sweep_tool_builds_tune_sections() -> None:
    # tools/sweep_fp8_gemm.py turns a config into the DG_TUNE section of the suite's family, checked by the parser
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    try:
        import sweep_fp8_gemm as sweep
    finally:
        sys.path.pop(0)
    assert sweep.config_env("auto") == {}
    assert sweep.config_env("bm128-bn48-s2-sk0-ma1", sweep.tune_family("dense")) == {
        "DG_TUNE": "fp8_gemm:block_m=128,block_n=48,split_k=2,stream_k=0,multicast_on_a=1"
    }
    assert sweep.config_env("bn64-fb2-mc1", sweep.tune_family("bf16_masked")) == {
        "DG_TUNE": "bf16_gemm:block_n=64,fp32_buffers=2,multicast=1"
    }
    with pytest.raises(SystemExit, match="bf16_gemm has no key 'overlap'"):
        sweep.config_env("ov1", "bf16_gemm")
    with pytest.raises(SystemExit, match="fp8_gemm:split_k=9 must be an integer in"):
        sweep.config_env("s9", "fp8_gemm")
    with pytest.raises(SystemExit, match="bad config part 'xx3'"):
        sweep.config_env("xx3")
