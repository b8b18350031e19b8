"""CPU tier: error messages name dtypes as Python spells them (torch.int8, torch.float8_e5m2), never as the C++
enumerators (Char, Float8_e5m2)."""

import warnings

import pytest
import torch

import deep_gemm

# Every dtype PyTorch names (those it cannot create on the CPU are left out below, at run time)
DTYPE_NAMES = [
    "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bfloat16", "bool", "complex32",
    "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn_x2", "uint16", "uint32", "uint64", "bits8", "bits16",
]  # fmt: skip


def creatable_dtypes() -> list[torch.dtype]:
    out = []
    for name in DTYPE_NAMES:
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (complex32: "experimental")
                torch.empty(64, 256, dtype=dtype)
        except (RuntimeError, TypeError):
            continue
        out.append(dtype)
    return out


def test_the_dtypes_of_the_defect_are_covered() -> None:
    assert {torch.int8, torch.float8_e5m2, torch.int16, torch.float16} <= set(creatable_dtypes())


@pytest.mark.parametrize("dtype", creatable_dtypes(), ids=str)
def test_wrong_dtype_is_named_as_in_python(dtype: torch.dtype) -> None:
    # A of the wrong dtype: the message names what it got as str(dtype) ("torch.int8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = torch.empty(64, 256, dtype=dtype)
    b, d = torch.zeros(128, 256, dtype=torch.bfloat16), torch.empty(64, 128, dtype=torch.bfloat16)
    expected = "a must be on a CUDA device" if dtype == torch.bfloat16 else "a must have dtype torch.bfloat16"
    with pytest.raises(ValueError, match=expected) as error:
        deep_gemm.bf16_gemm_nt(a, b, d)
    assert f"got a {dtype} tensor of shape 64x256" in str(error.value), str(error.value)
