"""The Mega MoE entry points as ``torch.library`` custom ops (namespace ``deep_gemm``), for ``torch.compile``.

As :mod:`deep_gemm.ops` does for the GEMMs: each public function (``fp8_mega_moe``, ``bf16_mega_moe``,
``fp8_fp4_mega_moe``, ``mega_moe_pre_dispatch_sm90``) calls its eager implementation (:mod:`deep_gemm.mega.moe`)
directly, and while ``torch.compiler.is_compiling()`` flattens its arguments and calls the op, whose implementation
is that same eager function. ``torch.compile(fullgraph=True)`` then traces a model calling them with no graph break.

Schemas. Weight pairs are flattened (``l1_weights = (w, sf)`` becomes ``l1_weights, l1_scales``). A
:class:`~deep_gemm.mega.SymmBuffer` is no tensor: the op takes its storage (``buffer``, declared mutated: the call
writes the buffer's internal regions) and its integer handle (``SymmBuffer.op_handle``), by which the implementation
finds the buffer object (its peers and barriers). ``y`` and ``cumulative_local_expert_recv_stats`` are mutated;
``mega_moe_pre_dispatch_sm90`` mutates its four buffer views; given a SymmBuffer's own views it calls
``mega_moe_pre_dispatch_sm90_buffer`` instead, which mutates the buffer's storage and takes each view as ints (views
of one storage with different dtypes are inputs AOT autograd cannot functionalize). Nothing is returned. Writes into
peers' buffers (the combine rows) are outside what a schema can state; they happen inside the op, between its group
barriers.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch

from deep_gemm import ops as _ops
from deep_gemm.mega import moe
from deep_gemm.mega.buffer import VIEW_REGION_ATTR, SymmBuffer, buffer_by_handle, buffer_owning

__all__ = [
    "bf16_mega_moe",
    "fp8_fp4_mega_moe",
    "fp8_mega_moe",
    "mega_moe_pre_dispatch_sm90",
    "MEGA_OP_NAMES",
    "MEGA_INTERNAL_OP_NAMES",
]

# The public functions' ops (each also in deep_gemm.ops.OP_NAMES)
MEGA_OP_NAMES = ("fp8_mega_moe", "bf16_mega_moe", "fp8_fp4_mega_moe", "mega_moe_pre_dispatch_sm90")
# The ops only the traced paths call (no public function of that name)
MEGA_INTERNAL_OP_NAMES = ("mega_moe_pre_dispatch_sm90_buffer",)


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


@contextlib.contextmanager
def _buffer(fn: str, buffer: torch.Tensor, handle: int) -> Iterator[SymmBuffer]:
    """The SymmBuffer an op call names, for the length of the call.

    ``buffer`` is its storage (eager calls, and compiled ones where Inductor reinplaced the op), or, under AOT
    autograd's functionalization, a copy of it holding the storage's current value: the writes the graph made into
    the buffer's views so far (the reference's callers fill ``x`` etc. with ``copy_``), which functionalization
    defers to the end of the graph. The kernels read and write the real storage (the peers reach it by address), so
    a copy is written into the storage before the call and the storage back into the copy after it: the graph then
    sees the call's writes, and the call sees the graph's. Raises naming ``buffer_handle`` when it names no live
    SymmBuffer, or when ``buffer`` is another SymmBuffer's storage or no copy of this one's (size, dtype, device)."""
    sym_buffer = buffer_by_handle(handle)
    if sym_buffer is None or sym_buffer.storage is None:
        raise ValueError(f"{fn}: buffer_handle {handle} names no live SymmBuffer")
    storage = sym_buffer.storage
    if storage.is_set_to(buffer):
        yield sym_buffer
        return
    if buffer_owning(buffer) is not None or buffer.shape != storage.shape or buffer.dtype != storage.dtype or (
        buffer.device != storage.device
    ):
        raise ValueError(
            f"{fn}: buffer_handle {handle} names a SymmBuffer whose storage is not the buffer passed (nor a copy of "
            f"it: uint8 [{storage.numel()}] on {storage.device}), got {buffer.dtype} {list(buffer.shape)} on "
            f"{buffer.device}"
        )
    storage.copy_(buffer)
    yield sym_buffer
    buffer.copy_(storage)


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
    with _buffer("fp8_mega_moe", buffer, buffer_handle) as sym_buffer:
        moe.fp8_mega_moe(y, (w1, s1), (w2, s2), sym_buffer, stats, tuple(recipe), activation, activation_clamp,
                         fast_math, num_tokens_bound)  # fmt: skip


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
    with _buffer("bf16_mega_moe", buffer, buffer_handle) as sym_buffer:
        moe.bf16_mega_moe(y, w1, w2, sym_buffer, stats, activation, activation_clamp, fast_math)


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
    with _buffer("fp8_fp4_mega_moe", buffer, buffer_handle) as sym_buffer:
        moe.fp8_fp4_mega_moe(y, (w1, s1), (w2, s2), sym_buffer, stats, tuple(recipe), activation, activation_clamp,
                             fast_math)  # fmt: skip


_ops._define(
    "fp8_fp4_mega_moe",
    "(Tensor(y!) y, Tensor l1_weights, Tensor l1_scales, Tensor l2_weights, Tensor l2_scales, Tensor(b!) buffer, "
    "int buffer_handle, Tensor(s!)? cumulative_local_expert_recv_stats=None, int[] recipe=[1, 1, 32], "
    'str activation="swiglu", float? activation_clamp=None, bool fast_math=True) -> ()',
    _fp8_fp4_impl,
    _ops._no_output,
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


# The four views' dtypes, fixed by the function (the op on the storage rebuilds the views with them)
_PRE_DISPATCH_VIEW_DTYPES = (torch.float8_e4m3fn, torch.float32, torch.int64, torch.float32)


def _view_dtypes(packed_x_sf: bool) -> tuple:
    """The four views' dtypes: x_sf int32 in a packed_x_sf buffer (packed UE8M0 1x32 scales), else FP32."""
    if not packed_x_sf:
        return _PRE_DISPATCH_VIEW_DTYPES
    return (_PRE_DISPATCH_VIEW_DTYPES[0], torch.int32, *_PRE_DISPATCH_VIEW_DTYPES[2:])
_PRE_DISPATCH_VIEW_NAMES = ("buf_x", "buf_x_sf", "buf_topk_idx", "buf_topk_weights")
# Each view's ints in the storage op's `views` list: byte offset, rows, cols, row stride, column stride (elements)
_VIEW_INTS = 5


def _rebuild_view(buffer: torch.Tensor, name: str, dtype: torch.dtype, ints: list) -> torch.Tensor:
    """The view ``name`` of ``buffer`` (uint8) that ``ints`` (byte offset, shape, strides) describe, checked to lie
    inside it."""
    fn = "mega_moe_pre_dispatch_sm90_buffer"
    offset, rows, cols, row_stride, col_stride = ints
    es = torch.empty((), dtype=dtype).element_size()
    if min(ints) < 0 or offset % es != 0:
        raise ValueError(f"{fn}: views ({name}): offset, shape and strides must be >= 0, the offset a multiple of "
                         f"{es} bytes, got {ints}")  # fmt: skip
    # (the bytes from the first element to one past the last; none for an empty view)
    span = ((rows - 1) * row_stride + (cols - 1) * col_stride + 1) * es if rows and cols else 0
    if offset + span > buffer.numel():
        raise ValueError(f"{fn}: views ({name}): {ints} reaches byte {offset + span}, past the buffer's "
                         f"{buffer.numel()}")  # fmt: skip
    return buffer[offset : offset + span].view(dtype).as_strided((rows, cols), (row_stride, col_stride))


def _pre_dispatch_buffer_impl(x, topk_idx, topk_weights, buffer, views, num_tokens, group_size,
                              routed_scaling_factor, packed_x_sf):  # fmt: skip
    fn = "mega_moe_pre_dispatch_sm90_buffer"
    if (
        not isinstance(buffer, torch.Tensor)
        or buffer.dtype != torch.uint8
        or buffer.dim() != 1
        or buffer.stride(0) != 1
    ):
        raise ValueError(f"{fn}: buffer must be a contiguous 1-D uint8 tensor (a SymmBuffer's storage), got "
                         f"{getattr(buffer, 'dtype', type(buffer).__name__)} {list(getattr(buffer, 'shape', []))}")  # fmt: skip
    if len(views) != _VIEW_INTS * 4:
        raise ValueError(f"{fn}: views must hold {_VIEW_INTS * 4} ints ({_VIEW_INTS} per view), got {len(views)}")
    rebuilt = [
        _rebuild_view(buffer, name, dtype, list(views[i * _VIEW_INTS : (i + 1) * _VIEW_INTS]))
        for i, (name, dtype) in enumerate(zip(_PRE_DISPATCH_VIEW_NAMES, _view_dtypes(packed_x_sf), strict=True))
    ]
    moe.mega_moe_pre_dispatch_sm90(x, topk_idx, topk_weights, *rebuilt, num_tokens, group_size,
                                   routed_scaling_factor)  # fmt: skip


# NOTES: the four views of a SymmBuffer alias one storage with different dtypes, and AOT autograd (aot_eager,
# Inductor) cannot functionalize mutations of such inputs. This op takes the storage itself (mutated) and each view
# as ints, and rebuilds the views inside. Internal: the traced path below calls it; it is no public function.
_ops._define(
    "mega_moe_pre_dispatch_sm90_buffer",
    "(Tensor x, Tensor topk_idx, Tensor topk_weights, Tensor(a!) buffer, SymInt[] views, int num_tokens, "
    "int group_size=128, float routed_scaling_factor=1.0, bool packed_x_sf=False) -> ()",
    _pre_dispatch_buffer_impl,
    _ops._no_output,
)


def _buffer_views(views: tuple) -> tuple[torch.Tensor, list, bool] | None:
    """(storage, the views' ints, whether x_sf is int32) when all four views are one SymmBuffer's (SymmBuffer.view
    marks them) with the function's dtypes; else None (then the op on the views themselves runs, and raises what the
    eager call does)."""
    storage, ints = None, []
    packed_x_sf = isinstance(views[1], torch.Tensor) and views[1].dtype == torch.int32
    for view, dtype in zip(views, _view_dtypes(packed_x_sf), strict=True):
        region = getattr(view, VIEW_REGION_ATTR, None)
        if region is None or not isinstance(view, torch.Tensor) or view.dim() != 2 or view.dtype != dtype:
            return None
        if storage is None:
            storage = region[0]
        elif region[0] is not storage:
            return None
        ints += [region[1], view.shape[0], view.shape[1], view.stride(0), view.stride(1)]
    return storage, ints, packed_x_sf


def _mega_moe_pre_dispatch_sm90(x, topk_idx, topk_weights, buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights,
                                num_tokens, group_size=128, routed_scaling_factor=1.0):  # fmt: skip
    views = (buf_x, buf_x_sf, buf_topk_idx, buf_topk_weights)
    on_buffer = _buffer_views(views)
    if on_buffer is not None:
        storage, ints, packed_x_sf = on_buffer
        torch.ops.deep_gemm.mega_moe_pre_dispatch_sm90_buffer(x, topk_idx, topk_weights, storage, ints, num_tokens,
                                                              group_size, float(routed_scaling_factor), packed_x_sf)  # fmt: skip
        return
    torch.ops.deep_gemm.mega_moe_pre_dispatch_sm90(x, topk_idx, topk_weights, *views, num_tokens, group_size,
                                                   float(routed_scaling_factor))  # fmt: skip


mega_moe_pre_dispatch_sm90 = _public(moe.mega_moe_pre_dispatch_sm90, _mega_moe_pre_dispatch_sm90)
