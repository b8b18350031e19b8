"""The Mega MoE entry points as ``torch.library`` custom ops (namespace ``deep_gemm``), for ``torch.compile``.

As :mod:`deep_gemm.ops` does for the GEMMs: each public function (``fp8_mega_moe``, ``bf16_mega_moe``,
``fp8_fp4_mega_moe``, ``mega_moe_pre_dispatch_sm90``) calls its eager implementation (:mod:`deep_gemm.mega.moe`)
directly, and while ``torch.compiler.is_compiling()`` flattens its arguments and calls the op, whose implementation
is that same eager function. ``torch.compile(fullgraph=True)`` then traces a model calling them with no graph break.

Schemas. Weight pairs are flattened (``l1_weights = (w, sf)`` becomes ``l1_weights, l1_scales``). A
:class:`~deep_gemm.mega.SymmBuffer` is no tensor: the op takes its storage (``buffer``, declared mutated: the call
writes the buffer's internal regions) and its integer handle (``SymmBuffer.op_handle``), by which the implementation
finds the buffer object (its peers and barriers). ``y`` and ``cumulative_local_expert_recv_stats`` are mutated;
``mega_moe_pre_dispatch_sm90`` mutates its four buffer views. Nothing is returned. Writes into peers' buffers (the
combine rows) are outside what a schema can state; they happen inside the op, between its group barriers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from deep_gemm import ops as _ops
from deep_gemm.mega import moe
from deep_gemm.mega.buffer import SymmBuffer, buffer_by_handle

__all__ = ["bf16_mega_moe", "fp8_fp4_mega_moe", "fp8_mega_moe", "mega_moe_pre_dispatch_sm90", "MEGA_OP_NAMES"]

# The ops this module defines (each also in deep_gemm.ops.OP_NAMES)
MEGA_OP_NAMES = ("fp8_mega_moe", "bf16_mega_moe", "fp8_fp4_mega_moe", "mega_moe_pre_dispatch_sm90")


def _public(eager: Callable, traced: Callable) -> Callable:
    """The public function: the op path (traced) while compiling, else the eager implementation itself."""
    is_compiling = torch.compiler.is_compiling

    def public(*args, **kwargs):
        if is_compiling():
            return traced(*args, **kwargs)
        return eager(*args, **kwargs)

    functools.update_wrapper(public, eager)
    public.__module__ = "deep_gemm.mega"
    public.__deep_gemm_traced__ = traced  # (for tests: the compile path's Python signature)
    _ops.PUBLIC_FUNCTIONS[eager.__name__] = public
    return public


def _buffer(fn: str, buffer: torch.Tensor, handle: int) -> SymmBuffer:
    """The SymmBuffer an op call names, checked to own ``buffer``."""
    sym_buffer = buffer_by_handle(handle)
    if sym_buffer is None or sym_buffer.storage is None or not sym_buffer.storage.is_set_to(buffer):
        raise ValueError(f"{fn}: buffer_handle {handle} names no live SymmBuffer whose storage is the buffer passed")
    return sym_buffer


def _flat_buffer(fn: str, sym_buffer: object) -> tuple[torch.Tensor, int]:
    if not isinstance(sym_buffer, SymmBuffer):
        raise TypeError(f"{fn}: sym_buffer must be a deep_gemm.mega.SymmBuffer, got {type(sym_buffer).__name__}")
    if sym_buffer.storage is None:
        raise ValueError(f"{fn}: sym_buffer was destroyed")
    return sym_buffer.storage, sym_buffer.op_handle


def _pair(fn: str, name: str, pair: object) -> tuple:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{fn}: {name} must be a (weights, scales) pair, got {type(pair).__name__}")
    return pair[0], pair[1]


def _clamp(value):
    return None if value is None else float(value)


# ------------------------------------------------------------------------------------------------ fp8_mega_moe
def _fp8_impl(y, w1, s1, w2, s2, buffer, buffer_handle, stats, recipe, activation, activation_clamp, fast_math,
              num_tokens_bound):  # fmt: skip
    moe.fp8_mega_moe(y, (w1, s1), (w2, s2), _buffer("fp8_mega_moe", buffer, buffer_handle), stats, tuple(recipe),
                     activation, activation_clamp, fast_math, num_tokens_bound)  # fmt: skip


_ops._define(
    "fp8_mega_moe",
    "(Tensor(y!) y, Tensor l1_weights, Tensor l1_scales, Tensor l2_weights, Tensor l2_scales, Tensor(b!) buffer, "
    "int buffer_handle, Tensor(s!)? cumulative_local_expert_recv_stats=None, int[] recipe=[128, 128, 128], "
    'str activation="swiglu", float? activation_clamp=None, bool fast_math=True, int? num_tokens_bound=None) -> ()',
    _fp8_impl,
    _ops._no_output,
)


def _fp8_mega_moe(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats=None,
                  recipe=moe.FP8_SM90_RECIPE, activation="swiglu", activation_clamp=None, fast_math=True,
                  num_tokens_bound=None):  # fmt: skip
    fn = "fp8_mega_moe"
    (w1, s1), (w2, s2) = _pair(fn, "l1_weights", l1_weights), _pair(fn, "l2_weights", l2_weights)
    buffer, handle = _flat_buffer(fn, sym_buffer)
    torch.ops.deep_gemm.fp8_mega_moe(y, w1, s1, w2, s2, buffer, handle, cumulative_local_expert_recv_stats,
                                     list(recipe), activation, _clamp(activation_clamp), fast_math, num_tokens_bound)  # fmt: skip


fp8_mega_moe = _public(moe.fp8_mega_moe, _fp8_mega_moe)


# ------------------------------------------------------------------------------------------------ bf16_mega_moe
def _bf16_impl(y, w1, w2, buffer, buffer_handle, stats, activation, activation_clamp, fast_math):
    moe.bf16_mega_moe(y, w1, w2, _buffer("bf16_mega_moe", buffer, buffer_handle), stats, activation,
                      activation_clamp, fast_math)  # fmt: skip


_ops._define(
    "bf16_mega_moe",
    "(Tensor(y!) y, Tensor l1_weights, Tensor l2_weights, Tensor(b!) buffer, int buffer_handle, "
    'Tensor(s!)? cumulative_local_expert_recv_stats=None, str activation="swiglu", float? activation_clamp=None, '
    "bool fast_math=True) -> ()",
    _bf16_impl,
    _ops._no_output,
)


def _bf16_mega_moe(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats=None,
                   activation="swiglu", activation_clamp=None, fast_math=True):  # fmt: skip
    buffer, handle = _flat_buffer("bf16_mega_moe", sym_buffer)
    torch.ops.deep_gemm.bf16_mega_moe(y, l1_weights, l2_weights, buffer, handle, cumulative_local_expert_recv_stats,
                                      activation, _clamp(activation_clamp), fast_math)  # fmt: skip


bf16_mega_moe = _public(moe.bf16_mega_moe, _bf16_mega_moe)


# ------------------------------------------------------------------------------------------------ fp8_fp4_mega_moe
def _fp8_fp4_impl(y, w1, s1, w2, s2, buffer, buffer_handle, stats, recipe, activation, activation_clamp, fast_math):
    moe.fp8_fp4_mega_moe(y, (w1, s1), (w2, s2), _buffer("fp8_fp4_mega_moe", buffer, buffer_handle), stats,
                         tuple(recipe), activation, activation_clamp, fast_math)  # fmt: skip


def _fp8_fp4_fake(*args) -> None:
    # (as the real call: no SM90 kernel yet, so tracing fails where running would)
    raise NotImplementedError("fp8_fp4_mega_moe: FP4 weights are not supported on SM90 yet; use fp8_mega_moe")


_ops._define(
    "fp8_fp4_mega_moe",
    "(Tensor(y!) y, Tensor l1_weights, Tensor l1_scales, Tensor l2_weights, Tensor l2_scales, Tensor(b!) buffer, "
    "int buffer_handle, Tensor(s!)? cumulative_local_expert_recv_stats=None, int[] recipe=[1, 1, 32], "
    'str activation="swiglu", float? activation_clamp=None, bool fast_math=True) -> ()',
    _fp8_fp4_impl,
    _fp8_fp4_fake,
)


def _fp8_fp4_mega_moe(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats=None,
                      recipe=(1, 1, 32), activation="swiglu", activation_clamp=None, fast_math=True):  # fmt: skip
    fn = "fp8_fp4_mega_moe"
    (w1, s1), (w2, s2) = _pair(fn, "l1_weights", l1_weights), _pair(fn, "l2_weights", l2_weights)
    buffer, handle = _flat_buffer(fn, sym_buffer)
    torch.ops.deep_gemm.fp8_fp4_mega_moe(y, w1, s1, w2, s2, buffer, handle, cumulative_local_expert_recv_stats,
                                         list(recipe), activation, _clamp(activation_clamp), fast_math)  # fmt: skip


fp8_fp4_mega_moe = _public(moe.fp8_fp4_mega_moe, _fp8_fp4_mega_moe)


# ------------------------------------------------------------------------------------------------ pre-dispatch
def _pre_dispatch_impl(x, topk_idx, topk_weights, buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights, num_tokens,
                       group_size, routed_scaling_factor):  # fmt: skip
    moe.mega_moe_pre_dispatch_sm90(x, topk_idx, topk_weights, buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights,
                                   num_tokens, group_size, routed_scaling_factor)  # fmt: skip


_ops._define(
    "mega_moe_pre_dispatch_sm90",
    "(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor(a!) buf_x, Tensor(b!) buf_x_sf, "
    "Tensor(c!) buf_topk_idx, Tensor(d!) buf_topk_weights, int num_tokens, int group_size=128, "
    "float routed_scaling_factor=1.0) -> ()",
    _pre_dispatch_impl,
    _ops._no_output,
)


def _mega_moe_pre_dispatch_sm90(x, topk_idx, topk_weights, buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights,
                                num_tokens, group_size=128, routed_scaling_factor=1.0):  # fmt: skip
    torch.ops.deep_gemm.mega_moe_pre_dispatch_sm90(x, topk_idx, topk_weights, buf_x, buf_x_sf, buf_topk_idx,
                                                   buf_topk_weights, num_tokens, group_size,
                                                   float(routed_scaling_factor))  # fmt: skip


mega_moe_pre_dispatch_sm90 = _public(moe.mega_moe_pre_dispatch_sm90, _mega_moe_pre_dispatch_sm90)
