"""The public API: every name is documented, `_C.pyi` matches the extension, errors are clear on a
machine without a GPU."""

import ast
import inspect
from pathlib import Path

import pytest
import torch
from jit_helpers import signature_params

import deep_gemm
from deep_gemm import _C

ENGINE_NAMES = [
    "set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_pdl", "get_pdl",
    "set_mk_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout",
    "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout", "fp8_gemm_nt", "fp8_fp4_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn",
    "fp8_gemm_tt",
]  # fmt: skip


def stub_functions() -> set[str]:
    tree = ast.parse((Path(_C.__file__).parent / "_C.pyi").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_engine_names_exist_and_are_documented() -> None:
    for name in ENGINE_NAMES:
        fn = getattr(deep_gemm, name)
        assert callable(fn), name
        assert (fn.__doc__ or "").strip(), f"{name} has no docstring"


@pytest.mark.parametrize("module", ["deep_gemm", "deep_gemm.utils", "deep_gemm.testing"])
def test_every_public_function_has_a_docstring(module: str) -> None:
    mod = __import__(module, fromlist=["__all__"])
    for name in mod.__all__:
        obj = getattr(mod, name)
        if callable(obj) and not inspect.isclass(obj):
            assert (obj.__doc__ or "").strip(), f"{module}.{name} has no docstring"


def test_stub_matches_extension() -> None:
    exported = {name for name, obj in vars(_C).items() if callable(obj) and not name.startswith("_")}
    exported -= {"NotImplementedError", "InputError"}  # (the exception classes: checked below)
    assert stub_functions() == exported


def test_input_errors_are_value_and_runtime_errors() -> None:
    # A bad argument raises _C.InputError: a ValueError (ours) that is also a RuntimeError (what the reference raises
    # for a failed host check, and what engines written for it catch), here and through the ops
    assert deep_gemm.InputError is _C.InputError
    assert issubclass(_C.InputError, ValueError) and issubclass(_C.InputError, RuntimeError)
    bad = (torch.ones(4, 4), torch.ones(4, 1))
    for call in (lambda: deep_gemm.fp8_gemm_nt(bad, bad, torch.ones(4, 4)),
                 lambda: torch.ops.deep_gemm.fp8_gemm_nt(bad[0], bad[1], bad[0], bad[1], torch.ones(4, 4))):  # fmt: skip
        with pytest.raises(RuntimeError, match=r"a\[0\] \(A\) must have dtype torch.float8_e4m3fn") as info:
            call()
        assert type(info.value) is _C.InputError


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "fp8_gemm_nt",
            [("a", None), ("b", None), ("d", None), ("c", "None"), ("recipe", "None"), ("recipe_a", "None"),
             ("recipe_b", "None"), ("compiled_dims", "'nk'"), ("disable_ue8m0_cast", "False")],
        ),
        (
            "transform_sf_into_required_layout",
            [("sf", None), ("mn", None), ("k", None), ("recipe", None), ("num_groups", "None"), ("is_sfa", "None"),
             ("disable_ue8m0_cast", "False"), ("psum_layout", "None")],
        ),
        ("get_tma_aligned_size", [("x", None), ("element_size", None)]),
        # (ours: the FP8 cast kernels, tests/test_quant_kernels.py)
        ("per_token_quant_fp8",
         [("x", None), ("use_ue8m0", "False"), ("gran_k", "128"), ("use_packed_ue8m0", "False"),
          ("sf_mn_major", "False")]),
        ("silu_and_mul_quant_fp8",
         [("x", None), ("use_ue8m0", "False"), ("gran_k", "128"), ("use_packed_ue8m0", "False"),
          ("row_weights", "None"), ("activation_clamp", "None"), ("masked_m", "None"), ("sf_mn_major", "True")]),
        ("per_block_quant_fp8", [("x", None), ("use_ue8m0", "False")]),
        ("per_token_quant_fp4",
         [("x", None), ("use_ue8m0", "False"), ("gran_k", "128"), ("use_packed_ue8m0", "False"),
          ("sf_mn_major", "False")]),
    ],
)  # fmt: skip
def test_signatures_match_engines(name: str, expected: list[tuple[str, str | None]]) -> None:
    # Engines call positionally and by keyword: names, order and defaults must match exactly
    assert signature_params(getattr(deep_gemm, name)) == expected


def fp8_operands() -> tuple:
    a = torch.zeros(4, 128, dtype=torch.float8_e4m3fn)
    b = torch.zeros(8, 128, dtype=torch.float8_e4m3fn)
    return (a, torch.zeros(4, 1)), (b, torch.zeros(1, 1)), torch.zeros(4, 8, dtype=torch.bfloat16)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b), TypeError, "missing required argument 'd'"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, bogus=1), TypeError, "unexpected keyword argument 'bogus'"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, a=a), TypeError, "multiple values for argument 'a'"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, None, None, None, None, "nk", False, 1), TypeError,
         "at most 9 arguments"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a[0], b, d), TypeError, r"a must be a pair \(tensor, scales\)"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt((a[0], 1.0), b, d), TypeError, r"a\[1\] must be a torch.Tensor"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, "d"), TypeError, "d must be a torch.Tensor"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, c=3), TypeError, "c must be a torch.Tensor"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, recipe=(1, "x", 128)), TypeError, "item 1 is a str"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, recipe=128), TypeError, "recipe must be None or a tuple"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, compiled_dims=1), TypeError, "compiled_dims must be a str"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, disable_ue8m0_cast="no"), TypeError,
         "disable_ue8m0_cast must be a bool"),
        # (past the binding: the API's checks, positional and keyword arguments alike)
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(a, b, d, None, (1, 128, 128), (1, 128), (128, 128)), ValueError,
         "either recipe or recipe_a/recipe_b"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(d=d, b=b, a=a, compiled_dims="q"), ValueError, "letters m, n, k"),
        (lambda a, b, d: deep_gemm.fp8_gemm_nt(list(a), b, d, recipe=[1, 128, 128], disable_ue8m0_cast=0), ValueError,
         "must be on a CUDA device"),
    ],
)  # fmt: skip
def test_fp8_gemm_nt_binding(call, error: type, pattern: str) -> None:
    # fp8_gemm_nt binds its arguments itself (a vectorcall binding, for the host cost): Python's rules, clear errors
    with pytest.raises(error, match=pattern):
        call(*fp8_operands())


def test_settings_round_trip() -> None:
    deep_gemm.set_tc_util(75)
    assert deep_gemm.get_tc_util() == 75
    deep_gemm.set_tc_util(100)
    deep_gemm.set_pdl(True)
    assert deep_gemm.get_pdl()
    deep_gemm.set_pdl(False)
    deep_gemm.set_mk_alignment_for_contiguous_layout(256)
    assert deep_gemm.get_m_alignment_for_contiguous_layout() == 256
    deep_gemm.set_mk_alignment_for_contiguous_layout(128)
    with pytest.raises(ValueError, match="tc_util must be in"):
        deep_gemm.set_tc_util(101)
    with pytest.raises(ValueError, match="new_num_sms must be 0"):
        deep_gemm.set_num_sms(-1)
    with pytest.raises(ValueError, match="multiple of 64"):
        deep_gemm.set_mk_alignment_for_contiguous_layout(100)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_gpu_call_without_driver_raises_clearly() -> None:
    with pytest.raises(RuntimeError, match="libcuda.so.1|cuInit failed"):
        deep_gemm.get_num_sms()
