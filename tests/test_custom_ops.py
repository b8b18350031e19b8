"""The kernel entry points as torch.library custom ops (deep_gemm/ops.py).

CPU tier: every op passes torch.library.opcheck on meta inputs (the schema, the fake implementation, AOT dispatch),
the paged-MQA schedule also against its real CPU implementation; fake CUDA tensors (FakeTensorMode works on a
CPU-only PyTorch) give the output shapes, strides and devices of the real functions, the TMA-aligned layouts checked
against the plain-PyTorch reference layout; torch.compile(fullgraph=True) traces functions calling the public API with
no graph break, the ops in the graph. GPU tier: the compiled path gives the eager results bit for bit (an FP8 MoE
block, the layout transforms, the MQA logits), the ops pass opcheck on CUDA tensors, and a compiled MoE block is
captured in a CUDA graph and replayed.
"""

import inspect
import os
import subprocess
import sys
import tempfile

import pytest
import torch
from jit_helpers import signature_params
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode

import deep_gemm
from deep_gemm import _C, ops
from deep_gemm.mega import moe as mega_moe
from deep_gemm.mega.ops import MEGA_INTERNAL_OP_NAMES, MEGA_OP_NAMES
from deep_gemm.testing import calc_diff
from deep_gemm.utils import mn_major_tma_aligned_reference, per_block_cast_to_fp8, per_token_cast_to_fp8

FP8 = torch.float8_e4m3fn
OUTSIDE = tempfile.gettempdir()
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")

# Every public kernel entry point (aliases are the same objects) and the op it calls
ENTRY_POINTS = {
    "fp8_gemm_nt": "fp8_gemm_nt", "fp8_gemm_nn": "fp8_gemm_nn", "fp8_gemm_tn": "fp8_gemm_tn",
    "fp8_gemm_tt": "fp8_gemm_tt", "fp8_fp4_gemm_nn": "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn": "fp8_fp4_gemm_tn",
    "fp8_fp4_gemm_tt": "fp8_fp4_gemm_tt",
    "m_grouped_fp8_gemm_nt_contiguous": "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nn_contiguous": "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_fp4_gemm_nn_contiguous": "m_grouped_fp8_fp4_gemm_nn_contiguous",
    "m_grouped_fp8_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous": "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_fp8_gemm_tn_contiguous": "k_grouped_fp8_gemm_tn_contiguous",
    "bf16_gemm_nt": "bf16_gemm_nt", "bf16_gemm_nn": "bf16_gemm_nn", "bf16_gemm_tn": "bf16_gemm_tn",
    "bf16_gemm_tt": "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous": "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nn_contiguous": "m_grouped_bf16_gemm_nn_contiguous",
    "m_grouped_bf16_gemm_nt_masked": "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous": "k_grouped_bf16_gemm_tn_contiguous",
    "cublaslt_gemm_nt": "cublaslt_gemm_nt", "cublaslt_gemm_nn": "cublaslt_gemm_nn",
    "cublaslt_gemm_tn": "cublaslt_gemm_tn", "cublaslt_gemm_tt": "cublaslt_gemm_tt",
    "fp8_mqa_logits": "fp8_fp4_mqa_logits", "fp8_fp4_mqa_logits": "fp8_fp4_mqa_logits",
    "fp8_paged_mqa_logits": "fp8_fp4_paged_mqa_logits", "fp8_fp4_paged_mqa_logits": "fp8_fp4_paged_mqa_logits",
    "get_paged_mqa_logits_metadata": "get_paged_mqa_logits_metadata",
    "get_mn_major_tma_aligned_tensor": "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout": "transform_sf_into_required_layout",
    "einsum": "einsum", "fp8_einsum": "fp8_einsum", "fp8_gemm_nt_skip_head_mid": "fp8_gemm_nt_skip_head_mid",
    "tf32_hc_prenorm_gemm": "tf32_hc_prenorm_gemm",
    "per_token_quant_fp8": "per_token_quant_fp8", "silu_and_mul_quant_fp8": "silu_and_mul_quant_fp8",
    "per_block_quant_fp8": "per_block_quant_fp8", "per_token_quant_fp4": "per_token_quant_fp4",
}  # fmt: skip
ALIASES = {
    "fp8_fp4_gemm_nt": "fp8_gemm_nt", "m_grouped_fp8_fp4_gemm_nt_contiguous": "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked": "m_grouped_fp8_gemm_nt_masked",
    "bf16_m_grouped_gemm_nt_masked": "m_grouped_bf16_gemm_nt_masked",
}  # fmt: skip
# The layouts SM90 cannot run: the op raises NotImplementedError, in its fake implementation too
SM100_ONLY = {"fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt", "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt",
              "m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous"}  # fmt: skip


def empty(*shape: int, dtype: torch.dtype = torch.float32, device: str = "meta") -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


def op_cases(device: str = "meta") -> dict[str, list[tuple]]:
    """Valid arguments of every op (flattened, as the schema takes them), one or more cases each."""

    def e(*shape, dtype=torch.float32):
        return empty(*shape, dtype=dtype, device=device)

    i32, bf16 = torch.int32, torch.bfloat16
    fp8_dims = ["nk", False]
    dense_fp8 = [
        (e(64, 256, dtype=FP8), e(64, 2), e(128, 256, dtype=FP8), e(1, 2), e(64, 128, dtype=bf16), None, None, None,
         None, *fp8_dims),
        (e(64, 256, dtype=FP8), e(64, 2), e(128, 256, dtype=FP8), e(128, 2), e(64, 128), e(64, 128), [1, 1, 128],
         None, None, *fp8_dims),
    ]  # fmt: skip
    grouped_fp8 = (e(256, 256, dtype=FP8), e(256, 2), e(2, 128, 256, dtype=FP8), e(2, 1, 2), e(256, 128, dtype=bf16),
                   e(256, dtype=i32), None, [1, 128], [128, 128], "nk", False, False, True)  # fmt: skip
    cases = {
        name: dense_fp8 for name in ("fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt", "fp8_fp4_gemm_nn",
                                     "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt")
    }  # fmt: skip
    cases["m_grouped_fp8_gemm_nt_contiguous"] = [(*grouped_fp8, None), (*grouped_fp8[:11], True, False, 256)]
    cases["m_grouped_fp8_gemm_nn_contiguous"] = [grouped_fp8]
    cases["m_grouped_fp8_fp4_gemm_nn_contiguous"] = [grouped_fp8]
    cases["m_grouped_fp8_gemm_nt_masked"] = [
        (e(2, 64, 256, dtype=FP8), e(2, 64, 2), e(2, 128, 256, dtype=FP8), e(2, 1, 2), e(2, 64, 128, dtype=bf16),
         e(2, dtype=i32), 32, None, None, None, "nk", False)
    ]  # fmt: skip
    k_grouped_fp8 = [
        (e(128 * 256, dtype=FP8), e(2, 128), e(128 * 256, dtype=FP8), e(2, 128), e(2, 128, 128), [128, 128],
         e(2, dtype=i32), e(2, 128, 128), [1, 1, 128], "mn", False)
    ]  # fmt: skip
    cases["k_grouped_fp8_gemm_nt_contiguous"] = k_grouped_fp8
    cases["k_grouped_fp8_gemm_tn_contiguous"] = k_grouped_fp8
    for layout in ("nt", "nn", "tn", "tt"):
        cases[f"bf16_gemm_{layout}"] = [
            (e(64, 128, dtype=bf16), e(128, 128, dtype=bf16), e(64, 128), e(64, 128), "nk"),
            (e(64, 128, dtype=bf16), e(128, 128, dtype=bf16), e(64, 128, dtype=bf16), None, "mn"),
        ]  # fmt: skip
        cases[f"cublaslt_gemm_{layout}"] = [
            (e(64, 128, dtype=bf16), e(128, 128, dtype=bf16), e(64, 128, dtype=bf16), None),
            (e(64, 128, dtype=bf16), e(128, 128, dtype=bf16), e(64, 128), e(64, 128)),
        ]  # fmt: skip
    grouped_bf16 = (e(256, 128, dtype=bf16), e(2, 128, 128, dtype=bf16), e(256, 128, dtype=bf16), e(256, dtype=i32),
                    "nk", False, True)  # fmt: skip
    cases["m_grouped_bf16_gemm_nt_contiguous"] = [(*grouped_bf16, None)]
    cases["m_grouped_bf16_gemm_nn_contiguous"] = [grouped_bf16]
    cases["m_grouped_bf16_gemm_nt_masked"] = [
        (e(2, 64, 128, dtype=bf16), e(2, 128, 128, dtype=bf16), e(2, 64, 128, dtype=bf16), e(2, dtype=i32), 16, "nk")
    ]
    cases["k_grouped_bf16_gemm_tn_contiguous"] = [
        (e(256, 128, dtype=bf16), e(256, 128, dtype=bf16), e(2, 128, 128), [128, 128], e(2, dtype=i32), None, "mn",
         False)
    ]  # fmt: skip
    mqa = (e(4, 16, 64, dtype=FP8), None, e(32, 64, dtype=FP8), e(32), e(4, 16), e(4, dtype=i32), e(4, dtype=i32))
    cases["fp8_fp4_mqa_logits"] = [(*mqa, True, 0, torch.float32), (*mqa, False, 8, torch.bfloat16)]
    paged = (e(2, 2, 16, 64, dtype=FP8), None, e(4, 64, 1, 68, dtype=torch.uint8), e(4, 16), e(2, 2, dtype=i32),
             e(2, 4, dtype=i32), e(9, 2, dtype=i32), 256, False)  # fmt: skip
    cases["fp8_fp4_paged_mqa_logits"] = [
        (*paged, torch.float32, None),
        (e(3, 1, 16, 64, dtype=FP8), None, *paged[2:3], e(3, 16), e(3, dtype=i32), e(2, 4, dtype=i32), *paged[6:],
         torch.bfloat16, e(3, dtype=i32)),
    ]  # fmt: skip
    cases["get_paged_mqa_logits_metadata"] = [(e(4, dtype=i32), 64, 8, None), (e(3, 2, dtype=i32), 32, 132, None)]
    cases["get_mn_major_tma_aligned_tensor"] = [(e(5, 3),), (e(2, 5, 3),), (e(8, 2),), (e(0, 2),)]
    cases["get_mn_major_tma_aligned_packed_ue8m0_tensor"] = [(e(5, 6), None), (e(2, 7, 9), e(2, dtype=i32))]
    cases["transform_sf_into_required_layout"] = [
        (e(5, 2), 5, 256, [1, 128, 128], None, True, False, None),
        (e(2, 5, 2), 5, 256, [1, 128], 2, None, False, None),
        (e(1, 2), 128, 256, [1, 128, 128], None, False, False, None),
        (e(5, 8), 5, 256, [1, 32], None, None, False, None),
        (e(3, 5, 8), 5, 256, [1, 1, 32], 3, False, True, None),
        (e(5, 2, dtype=i32), 5, 256, [1, 32], None, None, False, None),
    ]  # fmt: skip
    cases["einsum"] = [
        ("bhr,hdr->bhd", e(64, 128, 512, dtype=bf16), e(128, 128, 512, dtype=bf16), e(64, 128, 128, dtype=bf16), None,
         False),
        ("bmk,bnk->mn", e(4, 256, 128, dtype=bf16), e(4, 128, 128, dtype=bf16), e(256, 128), e(256, 128), False),
    ]  # fmt: skip
    cases["fp8_einsum"] = [
        ("bhr,hdr->bhd", e(64, 128, 512, dtype=FP8), e(64, 128, 4), e(128, 128, 512, dtype=FP8), e(128, 1, 4),
         e(64, 128, 128, dtype=bf16), None, [1, 128, 128])
    ]  # fmt: skip
    cases["fp8_gemm_nt_skip_head_mid"] = [
        (e(64, 256, dtype=FP8), e(64, 2), e(256, 256, dtype=FP8), e(2, 2), e(64, 320, dtype=bf16), [64, 32, 64], None,
         "nk", False)
    ]  # fmt: skip
    cases["tf32_hc_prenorm_gemm"] = [
        (e(64, 7168, dtype=bf16), e(24, 7168), e(64, 24), e(64), None),
        (e(64, 7168, dtype=bf16), e(32, 7168), e(4, 64, 32), e(4, 64), 4),
    ]  # fmt: skip
    cases["per_token_quant_fp8"] = [
        (e(5, 300, dtype=bf16), False, 128, False, False),
        (e(2, 7, 256), True, 32, True, True),
        (e(6, 1000, dtype=bf16), True, 128, False, True),
    ]  # fmt: skip
    cases["silu_and_mul_quant_fp8"] = [
        (e(5, 512, dtype=bf16), False, 128, False, None, None, None, True),
        (e(3, 9, 2000, dtype=bf16), True, 32, True, e(3, 9), 7.0, e(3, dtype=i32), True),
        (e(4, 256), False, 128, False, e(4), None, None, False),
    ]  # fmt: skip
    cases["per_block_quant_fp8"] = [(e(300, 1000, dtype=bf16), False), (e(2, 128, 256), True)]
    cases["per_token_quant_fp4"] = [(e(5, 300, dtype=bf16), False, 128, False, False), (e(7, 64), True, 32, True, True)]
    return cases


# ------------------------------------------------------------------------------------------------- the API
def test_every_entry_point_calls_its_op() -> None:
    assert sorted(set(ENTRY_POINTS.values()) | set(MEGA_OP_NAMES) | set(MEGA_INTERNAL_OP_NAMES)) == sorted(
        ops.OP_NAMES
    )
    for name, op_name in ENTRY_POINTS.items():
        fn = getattr(deep_gemm, name)
        assert fn is ops.PUBLIC_FUNCTIONS[name], name
        assert fn.__wrapped__ is getattr(_C, name), name  # the eager path
        assert hasattr(torch.ops.deep_gemm, op_name), op_name
        assert fn.__doc__ == getattr(_C, name).__doc__, name
    for alias, name in ALIASES.items():
        assert getattr(deep_gemm, alias) is getattr(deep_gemm, name), alias
    assert deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor is deep_gemm.get_mn_major_tma_aligned_tensor


# The extension's functions that launch no kernel (settings, the JIT, the config heuristic, integer helpers)
NOT_KERNEL_ENTRY_POINTS = {
    "set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_pdl", "get_pdl",
    "set_mk_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout", "set_ignore_compile_dims",
    "get_ignore_compile_dims", "set_block_size_multiple_of", "get_block_size_multiple_of", "get_tma_aligned_size",
    "set_deterministic", "get_deterministic", "get_hc_prenorm_plan",
    "get_gemm_config", "compile_kernel", "parse_tune", "kernel_families",
    # ahead-of-time builds (deep_gemm.precompile): render and look up kernels, launch nothing
    "render_gemm_kernels", "render_mqa_logits_kernels", "render_paged_mqa_logits_kernels", "render_kernel",
    "kernel_cache_entry",
}  # fmt: skip


def test_every_kernel_function_of_the_extension_is_an_op() -> None:
    # A new kernel entry point in _C needs its op in deep_gemm/ops.py (and its row in ENTRY_POINTS), or it breaks
    # torch.compile(fullgraph=True) for every model that calls it
    exported = {name for name, obj in vars(_C).items() if callable(obj) and not name.startswith("_")}
    exported -= {"NotImplementedError", "InputError"} | NOT_KERNEL_ENTRY_POINTS  # (exception classes)
    assert exported - set(ENTRY_POINTS) == set(), "kernel entry points without a torch.library op"


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_compile_path_has_the_signature_of_the_binding(name: str) -> None:
    # The compile path binds the arguments in Python: names, order and defaults must be the binding's
    fn = getattr(deep_gemm, name)
    traced = inspect.signature(fn.__deep_gemm_traced__).parameters.values()
    expected = [(p.name, None if p.default is inspect.Parameter.empty else repr(p.default)) for p in traced]
    assert signature_params(getattr(_C, name)) == expected


def test_schemas_declare_only_the_outputs_mutated() -> None:
    for name in ops.OP_NAMES:
        schema = getattr(torch.ops.deep_gemm, name).default._schema
        mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        # (the casts return a pair of new tensors: values and scales)
        returns_tensor = [str(r.type) for r in schema.returns] in (["Tensor"], ["Tensor", "Tensor"])
        expected = MUTATED.get(name, ["d"])
        assert mutated == ([] if returns_tensor else expected), (name, mutated)
        assert returns_tensor or not schema.returns, name
        assert torch.Tag.needs_exact_strides in getattr(torch.ops.deep_gemm, name).default.tags, name


# What each op writes in place (the GEMMs: d)
MUTATED = {
    "tf32_hc_prenorm_gemm": ["d", "sqr_sum"],  # (HC writes both in place)
    "fp8_mega_moe": ["y", "buffer", "cumulative_local_expert_recv_stats"],
    "bf16_mega_moe": ["y", "buffer", "cumulative_local_expert_recv_stats"],
    "fp8_fp4_mega_moe": ["y", "buffer", "cumulative_local_expert_recv_stats"],
    "mega_moe_pre_dispatch_sm90": ["buf_x", "buf_x_sf", "buf_topk_idx", "buf_topk_weights"],
    "mega_moe_pre_dispatch_sm90_buffer": ["buffer"],  # (a SymmBuffer's views: their storage, the views as ints)
}


# ------------------------------------------------------------------------------------------- Mega MoE ops
def test_mega_functions_call_their_ops() -> None:
    for name in MEGA_OP_NAMES:
        fn = getattr(deep_gemm.mega, name)
        assert fn is getattr(deep_gemm, name) and fn is ops.PUBLIC_FUNCTIONS[name], name
        assert fn.__wrapped__ is getattr(mega_moe, name), name  # the eager path
        assert fn.__doc__ == getattr(mega_moe, name).__doc__, name
        # The compile path binds the arguments in Python: names, order and defaults as the eager function's
        assert signature_params(fn.__deep_gemm_traced__) == signature_params(getattr(mega_moe, name)), name


def mega_cpu_buffer() -> "deep_gemm.mega.SymmBuffer":
    """A registered SymmBuffer held in CPU memory (the op path's plumbing; no kernel runs on it)."""
    from deep_gemm.mega import buffer as mega_buffer
    from deep_gemm.mega.layout import mega_moe_buffer_layout

    b = mega_buffer.SymmBuffer.__new__(mega_buffer.SymmBuffer)
    b.layout = mega_moe_buffer_layout(1, 4, 16, 2, 256, 128, True, 128)
    b.storage = torch.zeros(b.layout.num_bytes, dtype=torch.uint8)
    b.use_fp8_dispatch, b.mma_type, b.rank, b.num_ranks, b._handle = True, "fp8xfp8", 0, 1, None
    for name in ("x", "x_sf", "topk_idx", "topk_weights"):
        setattr(b, name, b.view(name))
    b.op_handle = next(mega_buffer._NEXT_HANDLE)
    mega_buffer._BUFFERS[b.op_handle] = b
    return b


def test_compile_fullgraph_traces_the_mega_ops() -> None:
    # A model step calling pre-dispatch and fp8_mega_moe the fork's way traces to one graph with both ops
    buffer = mega_cpu_buffer()
    l1 = (torch.zeros(4, 256, 256, dtype=FP8), torch.ones(4, 2, 2))
    l2 = (torch.zeros(4, 256, 128, dtype=FP8), torch.ones(4, 2, 1))
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: None  # (only the graph is checked: the CPU buffer cannot run the kernels)

    def step(x, idx, w, y):
        deep_gemm.mega.mega_moe_pre_dispatch_sm90(x, idx, w, buffer.x, buffer.x_sf, buffer.topk_idx,
                                                  buffer.topk_weights, x.shape[0], routed_scaling_factor=2.0)  # fmt: skip
        deep_gemm.mega.fp8_mega_moe(y, l1, l2, buffer, activation_clamp=7)

    x, y = torch.zeros(5, 256, dtype=torch.bfloat16), torch.zeros(5, 256, dtype=torch.bfloat16)
    torch.compile(step, fullgraph=True, backend=capture)(x, torch.zeros(5, 2, dtype=torch.int64), torch.ones(5, 2), y)
    assert len(graphs) == 1
    code = graphs[0].code
    # (the buffer's own views: the op on its storage, which AOT autograd can functionalize)
    assert "deep_gemm.mega_moe_pre_dispatch_sm90_buffer" in code and "deep_gemm.fp8_mega_moe" in code


def pre_dispatch_inputs(num_tokens: int = 5) -> tuple:
    torch.manual_seed(0)
    x = torch.randn(num_tokens + 2, 256, dtype=torch.bfloat16) * 3
    idx = torch.randint(-1, 4, (num_tokens + 2, 2), dtype=torch.int32)
    return x, idx, torch.rand(num_tokens + 2, 2, dtype=torch.bfloat16)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_pre_dispatch_into_the_buffer_views_matches_eager(backend: str) -> None:
    # The fork's call with a SymmBuffer's four views (one storage, four dtypes) through AOT autograd: the same
    # bytes in the whole buffer as the eager call (the CPU path: the PyTorch reference)
    buffer = mega_cpu_buffer()
    x, idx, w = pre_dispatch_inputs()

    def step(x, idx, w):
        deep_gemm.mega.mega_moe_pre_dispatch_sm90(x, idx, w, buffer.x, buffer.x_sf, buffer.topk_idx,
                                                  buffer.topk_weights, 5, routed_scaling_factor=2.5)  # fmt: skip

    step(x, idx, w)
    expected = buffer.storage.clone()
    assert expected.count_nonzero() > 0
    buffer.storage.fill_(7)
    step(x, idx, w)  # (eager overwrites exactly the regions the compiled call must)
    expected_over_sevens = buffer.storage.clone()
    buffer.storage.fill_(7)
    counter = CompileCounterWithBackend(backend)
    torch.compile(step, fullgraph=True, backend=counter)(x, idx, w)
    assert counter.frame_count == 1 and counter.op_count == 1
    assert torch.equal(buffer.storage, expected_over_sevens)
    # (from zeros too: the writes land in the buffer's own storage, not only in the copy AOT autograd makes)
    buffer.storage.zero_()
    torch.compile(step, fullgraph=True, backend=backend)(x, idx, w)
    assert torch.equal(buffer.storage, expected)


def test_compiled_pre_dispatch_into_separate_tensors_uses_the_view_op() -> None:
    # Tensors that are no SymmBuffer's views take the op on the four tensors (no aliasing: AOT handles it)
    x, idx, w = pre_dispatch_inputs()
    outs = [torch.zeros(8, 256, dtype=FP8), torch.zeros(8, 2), torch.zeros(8, 2, dtype=torch.int64), torch.zeros(8, 2)]
    expected = [t.clone() for t in outs]
    mega_moe.pre_dispatch_reference(x, idx, w, *expected, 5, 128, 2.5)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.code)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    def step(x, idx, w, a, b, c, d):
        deep_gemm.mega.mega_moe_pre_dispatch_sm90(x, idx, w, a, b, c, d, 5, routed_scaling_factor=2.5)

    torch.compile(step, fullgraph=True, backend=capture)(x, idx, w, *outs)
    assert "mega_moe_pre_dispatch_sm90(" in graphs[0] and "_buffer" not in graphs[0]
    for got, exp in zip(outs, expected, strict=True):
        assert torch.equal(got.view(torch.uint8), exp.view(torch.uint8))


def buffer_op_args(buffer) -> list:
    """The buffer op's `views` ints for the buffer's four views, as the traced path builds them."""
    ints = []
    for view in (buffer.x, buffer.x_sf, buffer.topk_idx, buffer.topk_weights):
        ints += [view.storage_offset() * view.element_size(), *view.shape, *view.stride()]
    return ints


def test_buffer_op_passes_opcheck_and_rejects_bad_views() -> None:
    buffer = mega_cpu_buffer()
    x, idx, w = pre_dispatch_inputs()
    op = torch.ops.deep_gemm.mega_moe_pre_dispatch_sm90_buffer.default
    ints = buffer_op_args(buffer)
    result = torch.library.opcheck(op, (x, idx, w, buffer.storage, ints, 5, 128, 2.0), test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result
    past_end = [*ints[:5], buffer.storage.numel() - 4, *ints[6:]]  # (buf_x_sf starting 4 bytes before the end)
    with pytest.raises(ValueError, match=r"views \(buf_x_sf\):.*past the buffer"):
        op(x, idx, w, buffer.storage, past_end, 5)
    misaligned = [*ints[:10], ints[10] + 1, *ints[11:]]
    with pytest.raises(ValueError, match=r"views \(buf_topk_idx\):.*multiple of 8 bytes"):
        op(x, idx, w, buffer.storage, misaligned, 5)
    with pytest.raises(ValueError, match="views must hold 20 ints"):
        op(x, idx, w, buffer.storage, ints[:15], 5)
    with pytest.raises(ValueError, match="buffer must be a contiguous 1-D uint8 tensor"):
        op(x, idx, w, buffer.storage.view(torch.int32), ints, 5)
    # (the rebuilt views go through the public function's checks)
    with pytest.raises(ValueError, match="num_tokens must be in"):
        op(x, idx, w, buffer.storage, ints, 17)


def test_mega_op_rejects_a_handle_of_another_buffer() -> None:
    a, b = mega_cpu_buffer(), mega_cpu_buffer()
    y = torch.zeros(1, 256, dtype=torch.bfloat16)
    l1 = (torch.zeros(4, 256, 256, dtype=FP8), torch.ones(4, 2, 2))
    l2 = (torch.zeros(4, 256, 128, dtype=FP8), torch.ones(4, 2, 1))
    # Another buffer's storage, or a tensor that cannot be a copy of this one's (AOT autograd's functionalization
    # passes copies: mega/ops.py, _buffer), or a handle of no buffer
    with pytest.raises(ValueError, match=r"names a SymmBuffer whose storage is not the buffer passed \(nor a copy"):
        torch.ops.deep_gemm.fp8_mega_moe(y, *l1, *l2, a.storage, b.op_handle)
    with pytest.raises(ValueError, match=r"nor a copy of it: uint8 \[\d+\] on cpu\), got torch.uint8 \[16\]"):
        torch.ops.deep_gemm.fp8_mega_moe(y, *l1, *l2, torch.zeros(16, dtype=torch.uint8), b.op_handle)
    with pytest.raises(ValueError, match=r"buffer_handle -3 names no live SymmBuffer"):
        torch.ops.deep_gemm.fp8_mega_moe(y, *l1, *l2, a.storage, -3)


# ------------------------------------------------------------------------------------------- opcheck on meta
@pytest.mark.parametrize("name", sorted(set(ENTRY_POINTS.values()) - SM100_ONLY))
def test_opcheck_on_meta(name: str) -> None:
    op = getattr(torch.ops.deep_gemm, name).default
    for args in op_cases()[name]:
        result = torch.library.opcheck(op, args, test_utils=OPCHECK_UTILS)
        assert all(v == "SUCCESS" for v in result.values()), (name, result)


@pytest.mark.parametrize("name", sorted(SM100_ONLY))
def test_sm100_layouts_raise_when_traced(name: str) -> None:
    op = getattr(torch.ops.deep_gemm, name).default
    with pytest.raises(NotImplementedError, match="K-major"):
        op(*op_cases()[name][0])
    with FakeTensorMode(), pytest.raises(NotImplementedError, match="K-major"):
        op(*op_cases("cuda")[name][0])


def test_opcheck_metadata_against_the_cpu_implementation() -> None:
    # The paged-MQA schedule has a real CPU implementation: opcheck compares the fake one against it
    gen = torch.Generator().manual_seed(0)
    op = torch.ops.deep_gemm.get_paged_mqa_logits_metadata.default
    for lens, block_kv, num_sms, indices in [
        (torch.randint(0, 5000, (7,), generator=gen, dtype=torch.int32), 64, 132, None),
        (torch.randint(0, 900, (5, 2), generator=gen, dtype=torch.int32), 32, 8, None),
        (torch.randint(0, 900, (6,), generator=gen, dtype=torch.int32), 64, 16, torch.tensor([0, 0, 1, 2, 2, 3],
                                                                                                dtype=torch.int32)),
        (torch.zeros(0, dtype=torch.int32), 64, 4, None),
    ]:  # fmt: skip
        result = torch.library.opcheck(op, (lens, block_kv, num_sms, indices), test_utils=OPCHECK_UTILS)
        assert all(v == "SUCCESS" for v in result.values()), result
        expected = _C.get_paged_mqa_logits_metadata(lens, block_kv, num_sms, indices)
        assert torch.equal(deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, num_sms, indices), expected)


# -------------------------------------------------------------------------------------- fake CUDA tensors
def test_fake_cuda_outputs() -> None:
    with FakeTensorMode():
        cases = op_cases("cuda")
        for name, all_args in cases.items():
            if name in SM100_ONLY:
                continue
            op = getattr(torch.ops.deep_gemm, name).default
            for args in all_args:
                out = op(*args)
                if out is None:
                    continue
                if isinstance(out, tuple):  # (the casts: values and scales, checked in tests/test_quant_kernels.py)
                    assert all(t.device == torch.device("cuda", 0) for t in out), name
                    continue
                assert out.device == torch.device("cuda", 0), name
                if name == "fp8_fp4_mqa_logits":
                    width = args[8] if args[8] > 0 else args[2].size(0)
                    assert (out.shape, out.dtype, out.is_contiguous()) == ((4, width), args[9], True)
                elif name == "fp8_fp4_paged_mqa_logits":
                    assert (out.shape, out.dtype, out.is_contiguous()) == ((args[0].size(0) * args[0].size(1), 256),
                                                                           args[9], True)  # fmt: skip
                elif name == "get_paged_mqa_logits_metadata":
                    assert (out.shape, out.dtype, out.is_contiguous()) == ((args[2] + 1, 2), torch.int32, True)


@pytest.mark.parametrize("shape", [(5, 3), (8, 2), (1, 1), (2, 5, 3), (3, 129, 7), (0, 4), (2, 0, 3)])
def test_fake_layout_strides_are_the_tma_aligned_ones(shape: tuple) -> None:
    expected = mn_major_tma_aligned_reference(torch.zeros(shape))
    with FakeTensorMode():
        out = deep_gemm.ops._tma_aligned_fake(torch.empty(shape, device="cuda"))
    assert (out.shape, out.stride(), out.dtype) == (expected.shape, expected.stride(), torch.float32)
    # Packed UE8M0: ceil(SF_K / 4) int32 columns, the same MN stride (4-byte elements)
    with FakeTensorMode():
        packed = torch.ops.deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.empty(shape, device="cuda"))
    expected = mn_major_tma_aligned_reference(torch.zeros(*shape[:-1], (shape[-1] + 3) // 4))
    assert (packed.shape, packed.stride(), packed.dtype) == (expected.shape, expected.stride(), torch.int32)


# --------------------------------------------------------------------------------------- torch.compile traces
def moe_block(x, w1, w2, grouped_layout):
    """quantize -> m-grouped FP8 GEMM -> SwiGLU -> quantize -> m-grouped FP8 GEMM (rows already grouped)."""
    m, n1 = x.size(0), w1[0].size(1)
    h = torch.empty(m, n1, dtype=torch.bfloat16, device=x.device)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(per_token_cast_to_fp8(x), w1, h, grouped_layout)
    gate, up = h.float().chunk(2, dim=-1)
    act = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)
    out = torch.empty(m, w2[0].size(1), dtype=torch.bfloat16, device=x.device)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(per_token_cast_to_fp8(act), w2, out, grouped_layout)
    return out


def moe_weights(num_groups: int, hidden: int, inter: int, device: str, seed: int = 0):
    gen = torch.Generator(device=device).manual_seed(seed)
    quantized = []
    for n, k in ((2 * inter, hidden), (hidden, inter)):
        w = torch.randn(num_groups, n, k, generator=gen, device=device, dtype=torch.float32) / k**0.5
        w_fp8 = torch.empty(num_groups, n, k, dtype=FP8, device=device)
        sf = torch.empty(num_groups, n // 128, k // 128, device=device)
        for g in range(num_groups):
            w_fp8[g], sf[g] = per_block_cast_to_fp8(w[g].to(torch.bfloat16))
        quantized.append((w_fp8, sf))
    return quantized


def test_compile_fullgraph_on_meta_inputs() -> None:
    # The whole MoE block plus the layout and MQA entry points in one graph: fullgraph=True raises on any break, the
    # counter sees one frame, and the graph calls the ops (meta inputs: the compiled graph runs the fake kernels)
    def fn(x, w1, w2, grouped_layout, sf, q, kv, weights, ks, ke, lens):
        out = moe_block(x, w1, w2, grouped_layout)
        sf_t = deep_gemm.get_mn_major_tma_aligned_tensor(sf)
        sf_r = deep_gemm.transform_sf_into_required_layout(sf, 5, 256, (1, 128, 128), is_sfa=True)
        logits = deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k=16)
        logits2 = deep_gemm.fp8_fp4_mqa_logits((q, None), kv, weights, ks, ke)
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 8)
        return out, sf_t, sf_r, logits, logits2, meta

    w1, w2 = [(torch.empty_like(w, device="meta"), torch.empty_like(s, device="meta"))
              for w, s in moe_weights(2, 256, 128, "cpu")]  # fmt: skip
    i32 = torch.int32
    args = (empty(256, 256, dtype=torch.bfloat16), w1, w2, empty(256, dtype=i32), empty(5, 2),
            empty(4, 16, 64, dtype=FP8), (empty(32, 64, dtype=FP8), empty(32)), empty(4, 16), empty(4, dtype=i32),
            empty(4, dtype=i32), empty(4, dtype=i32))  # fmt: skip
    counter = CompileCounterWithBackend("aot_eager")
    out, sf_t, sf_r, logits, logits2, meta = torch.compile(fn, fullgraph=True, backend=counter)(*args)
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    for op in ("m_grouped_fp8_gemm_nt_contiguous", "get_mn_major_tma_aligned_tensor",
               "transform_sf_into_required_layout", "fp8_fp4_mqa_logits", "get_paged_mqa_logits_metadata"):
        assert f"deep_gemm.{op}" in code, op
    assert (out.shape, out.dtype) == ((256, 256), torch.bfloat16)
    assert (sf_t.shape, sf_t.stride()) == ((5, 2), (1, 8))
    assert (sf_r.shape, sf_r.stride()) == ((5, 2), (1, 8))
    assert (logits.shape, logits2.shape, meta.shape) == ((4, 16), (4, 32), (9, 2))


@pytest.mark.parametrize("name", ["fp8_gemm_nt", "bf16_gemm_nt", "cublaslt_gemm_nn", "k_grouped_fp8_gemm_nt_contiguous",
                                  "m_grouped_bf16_gemm_nt_masked", "fp8_fp4_paged_mqa_logits"])
def test_compile_each_public_function_without_graph_break(name: str) -> None:
    # The public function called the reference's way (pairs, keywords, defaults) traces to exactly its op
    op_name = ENTRY_POINTS[name]
    flat = op_cases()[op_name][0]
    calls = {
        "fp8_gemm_nt": lambda: deep_gemm.fp8_gemm_nt((flat[0], flat[1]), (flat[2], flat[3]), flat[4]),
        "bf16_gemm_nt": lambda: deep_gemm.bf16_gemm_nt(*flat[:4]),
        "cublaslt_gemm_nn": lambda: deep_gemm.cublaslt_gemm_nn(*flat[:3], c=None),
        "k_grouped_fp8_gemm_nt_contiguous": lambda: deep_gemm.k_grouped_fp8_gemm_nt_contiguous(
            (flat[0], flat[1]), (flat[2], flat[3]), flat[4], [128, 128], flat[6], c=flat[7]),
        "m_grouped_bf16_gemm_nt_masked": lambda: deep_gemm.m_grouped_bf16_gemm_nt_masked(*flat[:5]),
        "fp8_fp4_paged_mqa_logits": lambda: deep_gemm.fp8_fp4_paged_mqa_logits(
            (flat[0], None), *flat[2:8], logits_dtype=torch.bfloat16),
    }  # fmt: skip
    counter = CompileCounterWithBackend("aot_eager")
    torch.compile(calls[name], fullgraph=True, backend=counter)()
    assert counter.frame_count == 1
    assert f"deep_gemm.{op_name}" in counter.graphs[0].code


def test_compile_dynamic_shapes() -> None:
    # Symbolic sizes through the fake implementations: the TMA-aligned stride is computed from a symbolic MN
    def fn(sf, q, kv, weights, ks, ke):
        return deep_gemm.get_mn_major_tma_aligned_tensor(sf), deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=counter)
    for mn, s, s_kv in ((5, 4, 32), (13, 7, 96), (30, 9, 40)):
        sf_t, logits = compiled(empty(mn, 3), empty(s, 16, 64, dtype=FP8), (empty(s_kv, 64, dtype=FP8), empty(s_kv)),
                                empty(s, 16), empty(s, dtype=torch.int32), empty(s, dtype=torch.int32))  # fmt: skip
        assert (sf_t.shape, sf_t.stride()) == ((mn, 3), (1, (mn + 3) // 4 * 4))
        assert logits.shape == (s, s_kv)
    assert counter.frame_count <= 2  # (the first call may specialize; then one dynamic graph serves all)


def test_transform_sf_fake_raises_as_the_extension() -> None:
    with pytest.raises(ValueError, match="is_sfa must be given"):
        torch.ops.deep_gemm.transform_sf_into_required_layout(empty(5, 2), 5, 256, [1, 128, 128])


def test_inductor_calls_the_op_with_its_real_cpu_implementation() -> None:
    # Inductor end to end on the CPU (the paged-MQA schedule has a real CPU implementation): generated kernels
    # around the op, the op called from Inductor's wrapper code, the result bit for bit the eager one
    def fn(lens):
        return deep_gemm.get_paged_mqa_logits_metadata(lens * 2 + 1, 64, 8) + 1

    lens = torch.randint(0, 3000, (9,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    counter = CompileCounterWithBackend("inductor")
    got = torch.compile(fn, fullgraph=True, backend=counter)(lens)
    assert counter.frame_count == 1 and "deep_gemm.get_paged_mqa_logits_metadata" in counter.graphs[0].code
    assert torch.equal(got, fn(lens))


def test_compile_in_place_accumulation_c_is_d() -> None:
    # c may be d itself (D += A @ B.T): an input aliasing the mutated one traces too
    a, sfa, b, sfb, d, c = op_cases()["fp8_gemm_nt"][1][:6]
    counter = CompileCounterWithBackend("aot_eager")

    def fn(a, sfa, b, sfb, d):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=(1, 1, 128))
        return d

    torch.compile(fn, fullgraph=True, backend=counter)(a, sfa, b, sfb, d)
    assert counter.frame_count == 1 and "deep_gemm.fp8_gemm_nt" in counter.graphs[0].code


@pytest.mark.parametrize("strict", [False, True])
def test_export(strict: bool) -> None:
    # torch.export, strict (Dynamo) and non-strict (the Python code run on fake tensors): the public functions take the
    # op path in both (torch.compiler.is_compiling() is true there), the exported graph holds the ops
    class Block(torch.nn.Module):
        def forward(self, sf, a, sfa, b, sfb, d):
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
            return deep_gemm.get_mn_major_tma_aligned_tensor(sf), d

    args = (empty(5, 3), *op_cases()["fp8_gemm_nt"][0][:5])
    exported = torch.export.export(Block(), args, strict=strict)
    targets = [str(node.target) for node in exported.graph.nodes if node.op == "call_function"]
    assert targets == ["deep_gemm.fp8_gemm_nt.default", "deep_gemm.get_mn_major_tma_aligned_tensor.default"]


def test_compile_path_keeps_the_pair_check() -> None:
    a, sfa, b, sfb, d = op_cases()["fp8_gemm_nt"][0][:5]
    with pytest.raises(Exception, match=r"a must be a pair \(tensor, scales\)"):
        torch.compile(lambda: deep_gemm.fp8_gemm_nt(a, (b, sfb), d), fullgraph=True, backend="eager")()


def test_eager_path_is_the_binding() -> None:
    # Outside torch.compile the public function is the binding's call: same errors (here the device check on CPU)
    a, sfa, b, sfb, d = op_cases("cpu")["fp8_gemm_nt"][0][:5]
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    with pytest.raises(TypeError, match="missing required argument 'd'"):
        deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb))


# ------------------------------------------------------------------------------------- C++ kernels of the ops
# The ops whose real kernels stay Python functions in deep_gemm/ops.py (csrc/op_kernels.hpp says why) and the mega
# ops (deep_gemm/mega/ops.py); every other op's CPU and CUDA kernel is C++
PYTHON_KERNELS = SM100_ONLY | {"get_mn_major_tma_aligned_tensor", "transform_sf_into_required_layout",
                               "fp8_gemm_nt_skip_head_mid"} | set(MEGA_OP_NAMES) | set(MEGA_INTERNAL_OP_NAMES)  # fmt: skip
# Where an op's flattened scales go back into the binding's (tensor, scales) pair: scale argument -> its tensor
PAIRED_SCALES = {"sfa": "a", "sfb": "b", "q_sf": "q", "kv_sf": "kv"}


def kernel_registrations(name: str) -> dict[str, str]:
    """Dispatch key -> the line torch._C._dispatch_dump gives for the op's kernel there."""
    lines = torch._C._dispatch_dump(f"deep_gemm::{name}").splitlines()
    return {line.split(":")[0]: line for line in lines if line.startswith(("CPU:", "CUDA:", "Meta:"))}


def test_the_hot_ops_have_cpp_kernels() -> None:
    assert set(_C._op_kernels_in_cpp()) == set(ops.OP_NAMES) - PYTHON_KERNELS
    assert len(ops.OP_NAMES) == len(set(ops.OP_NAMES))
    for name in ops.OP_NAMES:
        kernels = kernel_registrations(name)
        for key in ("CPU", "CUDA"):
            # (a C++ kernel is registered unboxed, at python_api.cpp; a Python one boxed only, at deep_gemm's .py file)
            cpp = "unboxed" in kernels[key] and "python_api.cpp" in kernels[key]
            assert cpp == (name not in PYTHON_KERNELS), (name, kernels[key])
        assert "unboxed" not in kernels["Meta"], (name, kernels["Meta"])  # (the fake implementation: Python)


def test_importing_registers_each_kernel_once() -> None:
    # A key registered twice (C++ and Python) makes the dispatcher warn "Overriding a previously registered kernel"
    code = "import warnings; warnings.simplefilter('always'); import deep_gemm, deep_gemm.mega"
    result = subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=OUTSIDE, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "verrid" not in result.stderr and "registered" not in result.stderr, result.stderr


def outcome(call) -> tuple:
    """(exception type, message) of call(), or ("returned", result)."""
    try:
        return "returned", call()
    except Exception as e:  # noqa: BLE001 (any exception: the two paths must raise the same one)
        return type(e), str(e)


def binding_args(name: str, args: tuple) -> list:
    """The op's flattened arguments as the _C binding takes them: each tensor and its scales as one pair."""
    names = [arg.name for arg in getattr(torch.ops.deep_gemm, name).default._schema.arguments]
    values = dict(zip(names, args, strict=True))
    return [(values[n], values[sf]) if (sf := next((k for k, v in PAIRED_SCALES.items() if v == n and k in values),
                                                   None)) else values[n]
            for n in names if n not in PAIRED_SCALES or PAIRED_SCALES[n] not in values]  # fmt: skip


@pytest.mark.parametrize("name", sorted(set(ENTRY_POINTS.values()) - PYTHON_KERNELS))
def test_cpp_kernel_raises_what_the_binding_raises(name: str) -> None:
    # Through the dispatcher into the C++ kernel, on CPU tensors (every kernel refuses them but the paged-MQA schedule):
    # the same exception type (ValueError, _C.NotImplementedError, ...) and message as the _C binding's own call
    op, binding = getattr(torch.ops.deep_gemm, name).default, getattr(_C, name)
    cases = op_cases("cpu")[name]
    if name == "fp8_einsum":  # (an expression SM90 does not serve: NotImplementedError, the module's subclass)
        cases = [*cases, ("bhd,hdr->bhr", *cases[0][1:])]
    for args in cases:
        via_op = outcome(lambda args=args: op(*args))
        direct = outcome(lambda args=args: binding(*binding_args(name, args)))
        if direct[0] == "returned":
            assert via_op[0] == "returned" and torch.equal(via_op[1], direct[1]), (name, via_op)
        else:
            assert via_op == direct, name
    if name == "fp8_einsum":
        assert direct[0] is _C.NotImplementedError


def test_cpp_kernel_checks_ks_cpu_as_the_binding() -> None:
    args = list(op_cases("cpu")["k_grouped_bf16_gemm_tn_contiguous"][0])
    args[3] = None
    with pytest.raises(ValueError, match="k_grouped_bf16_gemm_tn_contiguous: ks_cpu must be the list of the groups' K"):
        torch.ops.deep_gemm.k_grouped_bf16_gemm_tn_contiguous(*args)
    args = list(op_cases("cpu")["k_grouped_fp8_gemm_tn_contiguous"][0])
    args[5] = None
    with pytest.raises(ValueError, match="k_grouped_fp8_gemm_tn_contiguous: ks_cpu must be the list of the groups' K"):
        torch.ops.deep_gemm.k_grouped_fp8_gemm_tn_contiguous(*args)


# ------------------------------------------------------------------------------------------------ GPU tier
def moe_inputs(num_groups: int = 4, rows_per_group: int = 128, hidden: int = 512, inter: int = 256, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m = num_groups * rows_per_group
    x = torch.randn(m, hidden, generator=gen, device="cuda").to(torch.bfloat16)
    grouped_layout = torch.arange(num_groups, device="cuda", dtype=torch.int32).repeat_interleave(rows_per_group)
    grouped_layout[rows_per_group - 5 : rows_per_group] = -1  # padding rows in group 0's segment
    w1, w2 = moe_weights(num_groups, hidden, inter, "cuda", seed + 1)
    return x, w1, w2, grouped_layout


def assert_same_as_eager(got: torch.Tensor, expected: torch.Tensor, bitwise: bool) -> None:
    """Bit for bit where the compiled graph runs the same ATen kernels as eager (backend aot_eager); with Inductor the
    casts and SwiGLU around the GEMMs become generated kernels whose last-bit rounding may differ, which can flip an
    FP8 rounding, so there the results must only agree to well within FP8 precision (e4m3 rounds by up to 2^-4 of a
    value, and the FP8 GEMMs' own calc_diff against float64 is ~1e-3: a few flipped intermediates measured 1.2e-4 on
    an H100)."""
    torch.cuda.synchronize()
    if bitwise:
        assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
    else:
        assert float(calc_diff(got.double(), expected.double())) < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_moe_block_matches_eager(backend: str) -> None:
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(moe_block, fullgraph=True, backend=counter)
    for seed in (0, 1):  # (a second input: the compiled graph reads its inputs, nothing was baked in)
        x, w1, w2, layout = moe_inputs(seed=seed)
        expected = moe_block(x, w1, w2, layout)
        got = compiled(x, w1, w2, layout)
        assert_same_as_eager(got, expected, bitwise=backend == "aot_eager")
        assert got.abs().amax() > 0  # (not a vacuous comparison of zeros)
    assert counter.frame_count == 1


@pytest.mark.gpu
def test_compiled_in_place_accumulation_is_bitwise_eager() -> None:
    # fp8_gemm_nt(..., d, c=d): the compiled graph (functionalized: d copied, or re-inplaced) accumulates like eager
    torch._dynamo.reset()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(256, 512, generator=gen, device="cuda").to(torch.bfloat16)
    w = torch.randn(384, 512, generator=gen, device="cuda").to(torch.bfloat16)
    a, b = per_token_cast_to_fp8(x), per_token_cast_to_fp8(w)
    d0 = torch.randn(256, 384, generator=gen, device="cuda")

    def fn(a_fp8, sfa, b_fp8, sfb, d):
        deep_gemm.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=d, recipe=(1, 1, 128))
        deep_gemm.fp8_gemm_nt((a_fp8, sfa), (b_fp8, sfb), d, c=d, recipe=(1, 1, 128))
        return d

    expected = fn(*a, *b, d0.clone())
    for backend in ("aot_eager", "inductor"):
        d = d0.clone()
        got = torch.compile(fn, fullgraph=True, backend=backend)(*a, *b, d)
        torch.cuda.synchronize()
        assert torch.equal(got, expected) and torch.equal(d, expected), backend  # (d itself written, as in eager)


@pytest.mark.gpu
def test_compiled_moe_block_in_a_cuda_graph() -> None:
    torch._dynamo.reset()
    x, w1, w2, layout = moe_inputs()
    expected = moe_block(x, w1, w2, layout)
    compiled = torch.compile(moe_block, fullgraph=True, backend="aot_eager")
    static_x = x.clone()
    compiled(static_x, w1, w2, layout)  # (compile and JIT-build the kernels outside the capture)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = compiled(static_x, w1, w2, layout)
    static_out.fill_(float("nan"))
    graph.replay()
    assert_same_as_eager(static_out, expected, bitwise=True)
    x2 = moe_inputs(seed=3)[0]
    static_x.copy_(x2)
    static_out.fill_(float("nan"))
    graph.replay()
    assert_same_as_eager(static_out, moe_block(x2, w1, w2, layout), bitwise=True)


@pytest.mark.gpu
def test_compiled_moe_block_reduce_overhead_mode() -> None:
    # Inductor's CUDA graph trees capture the compiled block (outputs allocated inside: no mutated graph inputs)
    torch._dynamo.reset()
    x, w1, w2, layout = moe_inputs()
    expected = moe_block(x, w1, w2, layout)
    compiled = torch.compile(moe_block, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # (warm-up, record, replay)
        got = compiled(x, w1, w2, layout).clone()
    assert_same_as_eager(got, expected, bitwise=False)
    x2 = moe_inputs(seed=4)[0]
    x.copy_(x2)  # (the replayed graph reads the new values)
    assert_same_as_eager(compiled(x, w1, w2, layout).clone(), moe_block(x2, w1, w2, layout), bitwise=False)


@pytest.mark.gpu
def test_opcheck_on_cuda() -> None:
    # The fake implementations against the real kernels: shapes, strides, dtypes, devices, mutations
    gen = torch.Generator(device="cuda").manual_seed(0)
    sf = torch.rand(2, 133, 7, generator=gen, device="cuda") + 0.5
    ue8m0 = torch.exp2(torch.randint(-8, 8, (133, 9), generator=gen, device="cuda").float())
    lens = torch.randint(0, 4000, (9, 2), generator=gen, device="cuda", dtype=torch.int32)
    x, w1, _, layout = moe_inputs()
    a = per_token_cast_to_fp8(x)
    d = torch.empty(x.size(0), w1[0].size(1), dtype=torch.bfloat16, device="cuda")
    cases = [
        (torch.ops.deep_gemm.get_mn_major_tma_aligned_tensor.default, (sf,)),
        (torch.ops.deep_gemm.get_mn_major_tma_aligned_tensor.default, (sf[0],)),
        (torch.ops.deep_gemm.get_mn_major_tma_aligned_tensor.default, (deep_gemm.get_mn_major_tma_aligned_tensor(sf),)),
        (torch.ops.deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor.default, (ue8m0, None)),
        (torch.ops.deep_gemm.transform_sf_into_required_layout.default,
         (sf[0], 133, 7 * 128, [1, 128, 128], None, True, False, None)),
        (torch.ops.deep_gemm.transform_sf_into_required_layout.default,
         (sf[0, :2].contiguous(), 256, 7 * 128, [1, 128, 128], None, False, False, None)),
        (torch.ops.deep_gemm.get_paged_mqa_logits_metadata.default, (lens, 64, 132, None)),
        (torch.ops.deep_gemm.m_grouped_fp8_gemm_nt_contiguous.default,
         (*a, *w1, d, layout, None, None, None, "nk", False, False, True, None)),
        (torch.ops.deep_gemm.per_token_quant_fp8.default, (x, False, 128, False, True)),
        (torch.ops.deep_gemm.per_token_quant_fp8.default, (x[:, :96], True, 32, True, False)),
        (torch.ops.deep_gemm.silu_and_mul_quant_fp8.default, (x, True, 128, False, None, 3.0, None, True)),
        (torch.ops.deep_gemm.per_block_quant_fp8.default, (x, False)),
        (torch.ops.deep_gemm.per_token_quant_fp4.default, (x, True, 32, True, True)),
    ]  # fmt: skip
    for op, args in cases:
        # (opcheck's schema test compares inputs before and after with arithmetic PyTorch lacks for FP8 tensors:
        # "mul_cuda" not implemented for 'Float8_e4m3fn'; the meta-tier opcheck runs it on every op; the casts return
        # FP8 tensors)
        has_fp8 = any(isinstance(t, torch.Tensor) and t.dtype == torch.float8_e4m3fn for t in args) or "quant" in str(op)
        utils = ("test_faketensor",) if has_fp8 else ("test_schema", "test_faketensor")
        result = torch.library.opcheck(op, args, test_utils=utils)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


# A fresh process, an empty kernel cache: an op call in a thread (its C++ kernel runs without the GIL) resolves the JIT's
# toolchain and compiles while the main thread's eager call (holding the GIL) waits for the same JIT locks. Had the
# kernel taken the GIL under those locks (the JIT's sys.path read once did), the two would deadlock.
_OP_AND_EAGER_IN_THREADS = """
import threading
import torch
import deep_gemm
from deep_gemm.testing import calc_diff

def gemm(m, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, 256, generator=gen, device="cuda").bfloat16()
    b = torch.randn(384, 256, generator=gen, device="cuda").bfloat16()
    return a, b, torch.full((m, 384), float("nan"), device="cuda", dtype=torch.bfloat16)

op_args, eager_args = gemm(200, 0), gemm(136, 1)
errors = []

def through_op():
    try:
        torch.ops.deep_gemm.bf16_gemm_nt(*op_args)
    except Exception as e:
        errors.append(e)

thread = threading.Thread(target=through_op)
thread.start()
deep_gemm.bf16_gemm_nt(*eager_args)
thread.join(600)
assert not thread.is_alive() and not errors, errors
torch.cuda.synchronize()
for a, b, d in (op_args, eager_args):
    diff = calc_diff(d, a.double() @ b.double().T)
    assert diff < 1e-5, diff
print("ok")
"""


@pytest.mark.gpu
def test_op_in_a_thread_beside_an_eager_call_compiles_without_deadlock(tmp_path) -> None:
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", _OP_AND_EAGER_IN_THREADS], env=env, cwd=OUTSIDE, capture_output=True,
                            text=True, timeout=900)  # fmt: skip
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr


@pytest.mark.gpu
def test_cpp_kernel_raises_what_the_binding_raises_on_cuda() -> None:
    # The error path on CUDA tensors (a shape check after the device checks pass)
    a = torch.zeros(64, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(96, 256, device="cuda", dtype=torch.bfloat16)
    d = torch.zeros(64, 96, device="cuda", dtype=torch.bfloat16)
    via_op = outcome(lambda: torch.ops.deep_gemm.bf16_gemm_nt(a, b, d))
    assert via_op[0] is _C.InputError and via_op == outcome(lambda: _C.bf16_gemm_nt(a, b, d)), via_op


@pytest.mark.gpu
def test_compiled_layouts_and_logits_match_eager() -> None:
    # The op path returns the same values, shapes and strides as the eager call (a copy where eager returns sf)
    torch._dynamo.reset()
    gen = torch.Generator(device="cuda").manual_seed(0)
    sf = torch.rand(3, 130, 5, generator=gen, device="cuda")
    aligned = deep_gemm.get_mn_major_tma_aligned_tensor(sf)
    for t in (sf, aligned, sf[1]):
        expected = deep_gemm.get_mn_major_tma_aligned_tensor(t)
        got = torch.compile(deep_gemm.get_mn_major_tma_aligned_tensor, fullgraph=True, backend="aot_eager")(t)
        assert (got.shape, got.stride()) == (expected.shape, expected.stride())
        assert torch.equal(got, expected)
    s, s_kv, h, dim = 64, 300, 32, 64
    q = torch.randn(s, h, dim, generator=gen, device="cuda").to(FP8)
    kv = (torch.randn(s_kv, dim, generator=gen, device="cuda").to(FP8), torch.rand(s_kv, generator=gen, device="cuda"))
    weights = torch.randn(s, h, generator=gen, device="cuda")
    ks = torch.randint(0, 100, (s,), generator=gen, device="cuda", dtype=torch.int32)
    ke = ks + torch.randint(0, 200, (s,), generator=gen, device="cuda", dtype=torch.int32)
    expected = deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke)
    got = torch.compile(deep_gemm.fp8_fp4_mqa_logits, fullgraph=True, backend="aot_eager")((q, None), kv, weights,
                                                                                            ks, ke)  # fmt: skip
    assert torch.equal(got, expected)
