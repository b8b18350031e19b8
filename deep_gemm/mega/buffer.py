"""The Mega MoE symmetric buffer: one allocation per rank, laid out by :mod:`deep_gemm.mega.layout`, that every rank
of the group can read and write through the peers' base addresses.

PyTorch owns allocation, rendezvous and barriers (``torch.distributed._symmetric_memory``: ``empty`` +
``rendezvous`` give each rank its peers' pointers, the handle's ``barrier`` orders the ranks); deep_gemm writes no
communication layer. A group of size 1 (or ``group=None``) uses a plain device allocation and needs no barrier.
"""

from __future__ import annotations

import itertools
import weakref

import torch
import torch.distributed as dist

from deep_gemm._C import get_mk_alignment_for_contiguous_layout
from deep_gemm.mega.layout import MegaMoeBufferLayout, Region, mega_moe_buffer_layout

__all__ = [
    "SymmBuffer",
    "buffer_by_handle",
    "buffer_owning",
    "get_symm_buffer_for_mega_moe",
    "get_symm_buffer_for_sm90_mega_moe",
]

# Every SymmBuffer by its op handle (an int a torch.library op can take; deep_gemm.mega.ops), weakly.
_BUFFERS: weakref.WeakValueDictionary[int, SymmBuffer] = weakref.WeakValueDictionary()
_NEXT_HANDLE = itertools.count(1)


def buffer_by_handle(handle: int) -> SymmBuffer | None:
    """The live SymmBuffer with this ``op_handle``, or None."""
    return _BUFFERS.get(handle)


def buffer_owning(storage: torch.Tensor) -> SymmBuffer | None:
    """The live SymmBuffer whose storage ``storage`` is, or None."""
    for buffer in list(_BUFFERS.values()):
        if buffer.storage is not None and buffer.storage.is_set_to(storage):
            return buffer
    return None


MMA_TYPES = ("fp8xfp4", "fp8xfp8", "bf16xbf16")
ACTIVATIONS = ("swiglu",)

# Whether a group of size 1 still goes through symmetric memory (tests set it to exercise that path in one process).
_SYMMETRIC_FOR_SINGLE_RANK = False

_TORCH_DTYPES = {
    "float8_e4m3fn": torch.float8_e4m3fn,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "int32": torch.int32,
    "int64": torch.int64,
}


def _group_rank_and_size(fn: str, group: object) -> tuple[int, int]:
    if group is None:
        return 0, 1
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{fn}: group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")
    return dist.get_rank(group), dist.get_world_size(group)


def check_mma_and_activation(fn: str, mma_type: object, activation: object) -> None:
    """Raise naming ``mma_type`` or ``activation`` when it is not one deep_gemm serves."""
    if mma_type not in MMA_TYPES:
        raise ValueError(f"{fn}: mma_type must be one of {MMA_TYPES}, got {mma_type!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{fn}: activation must be one of {ACTIVATIONS}, got {activation!r}")


# The attribute SymmBuffer.view sets on each view: (the buffer's uint8 storage, the view's byte offset in it)
VIEW_REGION_ATTR = "_deep_gemm_buffer_region"


class SymmBuffer:
    """One rank's Mega MoE buffer, with the views the caller fills before each call.

    Views (this rank's; ``M = num_max_tokens_per_rank``): ``x`` ``[M, hidden]`` (FP8 e4m3 for FP8 dispatch, else
    BF16), ``x_sf`` ``[M, hidden / 128]``: for FP8 dispatch FP32 1x128 scales, whatever the FP8 ``mma_type`` (the
    SGLang fork's SM90 buffer, which its ``get_symm_buffer_for_mega_moe`` gives every ``fp8*`` type on Hopper), or
    with ``packed_x_sf=True`` int32, UE8M0 1x32 scales packed four to a word (the reference's SM100 format, what
    ``per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)`` returns); ``[M, 0]`` for
    BF16; ``topk_idx`` int64
    ``[M, num_topk]`` (global expert ids, -1 for none), ``topk_weights`` FP32 ``[M, num_topk]``; and the internal
    activations ``l1_acts``, ``l1_acts_sf``, ``l2_acts``, ``l2_acts_sf`` (the grouped GEMMs' inputs; see
    :mod:`deep_gemm.mega.layout`). A call reads the first T rows, T = ``y.shape[0]``.

    Args:
        group: the ranks sharing the experts (``torch.distributed.ProcessGroup``), or None for this process alone.
        num_experts: experts over all ranks, a multiple of the group size (rank r owns ``[r E/R, (r+1) E/R)``).
        num_max_tokens_per_rank: most tokens a rank passes in one call.
        num_topk: experts per token.
        hidden, intermediate_hidden: the model dim and the experts' intermediate dim, multiples of 128.
        num_ring_tokens: the reference sizes its receive ring with it; deep_gemm's stage-1 buffer holds every row a
            rank can receive (no ring), so it is checked (an int >= 0) and recorded, not used.
        mma_type: ``'fp8xfp4'``, ``'fp8xfp8'`` (FP8 dispatch) or ``'bf16xbf16'``. Every FP8 buffer serves
            ``fp8_mega_moe`` and ``fp8_fp4_mega_moe``.
        activation: ``'swiglu'``.
        packed_x_sf: (keyword only, not in the reference) FP8 dispatch with ``x_sf`` holding packed UE8M0 1x32
            scales; the dispatch folds them into 1x128 ones (exact to 2^-10 of a block's scale, docs/design.md).

    Raises:
        TypeError / ValueError: an argument of the wrong type or value (named).
        RuntimeError: no CUDA device, or PyTorch's symmetric-memory rendezvous fails.
    """

    def __init__(
        self,
        group,
        num_experts,
        num_max_tokens_per_rank,
        num_topk,
        hidden,
        intermediate_hidden,
        num_ring_tokens,
        mma_type="fp8xfp4",
        activation="swiglu",
        *,
        packed_x_sf=False,
    ):
        self._init(
            group,
            num_experts,
            num_max_tokens_per_rank,
            num_topk,
            hidden,
            intermediate_hidden,
            num_ring_tokens,
            mma_type,
            activation,
            mma_type.startswith("fp8") if isinstance(mma_type, str) else True,
            packed_x_sf,
        )

    def _init(
        self,
        group,
        num_experts,
        num_max_tokens_per_rank,
        num_topk,
        hidden,
        intermediate_hidden,
        num_ring_tokens,
        mma_type,
        activation,
        use_fp8_dispatch,
        packed_x_sf,
    ) -> None:
        fn = "SymmBuffer"
        check_mma_and_activation(fn, mma_type, activation)
        if not isinstance(packed_x_sf, bool):
            raise TypeError(f"{fn}: packed_x_sf must be a bool, got {type(packed_x_sf).__name__}")
        if packed_x_sf and not use_fp8_dispatch:
            raise ValueError(f"{fn}: packed_x_sf=True needs FP8 dispatch, got mma_type={mma_type!r}")
        if isinstance(num_ring_tokens, bool) or not isinstance(num_ring_tokens, int) or num_ring_tokens < 0:
            raise ValueError(f"{fn}: num_ring_tokens must be an int >= 0, got {num_ring_tokens!r}")
        rank, num_ranks = _group_rank_and_size(fn, group)
        alignment = get_mk_alignment_for_contiguous_layout()
        self.layout: MegaMoeBufferLayout = mega_moe_buffer_layout(
            num_ranks,
            num_experts,
            num_max_tokens_per_rank,
            num_topk,
            hidden,
            intermediate_hidden,
            use_fp8_dispatch,
            alignment,
            packed_x_sf=packed_x_sf,
        )
        self.group = group
        self.rank = rank
        self.num_ranks = num_ranks
        self.num_ring_tokens = num_ring_tokens
        self.mma_type = mma_type
        self.activation = activation
        self.use_fp8_dispatch = use_fp8_dispatch
        if not torch.cuda.is_available():
            raise RuntimeError(f"{fn}: the Mega MoE buffer lives on a CUDA device; none is available")
        device = torch.device("cuda", torch.cuda.current_device())
        self._handle = None
        if num_ranks > 1 or (group is not None and _SYMMETRIC_FOR_SINGLE_RANK):
            import torch.distributed._symmetric_memory as symm_mem

            self.storage = symm_mem.empty(self.layout.num_bytes, dtype=torch.uint8, device=device)
            self._handle = symm_mem.rendezvous(self.storage, group)
            peers = [int(p) for p in self._handle.buffer_ptrs]
        else:
            self.storage = torch.empty(self.layout.num_bytes, dtype=torch.uint8, device=device)
            peers = [self.storage.data_ptr()]
        self.peers = torch.tensor(peers, dtype=torch.int64, device=device)
        # NOTES: combine_row starts at zero so that a slot no route ever wrote points at a row inside the buffer.
        self.storage.zero_()
        for name in ("x", "x_sf", "topk_idx", "topk_weights", "l1_acts", "l1_acts_sf", "l2_acts", "l2_acts_sf"):
            setattr(self, name, self.view(name))
        self.num_tokens = self.view("num_tokens")
        # (the integer the Mega MoE custom ops name this buffer by)
        self.op_handle = next(_NEXT_HANDLE)
        _BUFFERS[self.op_handle] = self
        self.barrier()

    # The dims it was allocated for, under the reference's attribute names (callers size their calls with them)
    @property
    def num_experts(self) -> int:
        """Experts over all ranks."""
        return self.layout.num_experts

    @property
    def num_max_tokens_per_rank(self) -> int:
        """The most tokens a rank passes in one call."""
        return self.layout.num_max_tokens_per_rank

    @property
    def num_topk(self) -> int:
        """Experts per token."""
        return self.layout.num_topk

    @property
    def hidden(self) -> int:
        """The model dim."""
        return self.layout.hidden

    @property
    def intermediate_hidden(self) -> int:
        """The experts' intermediate dim."""
        return self.layout.intermediate_hidden

    @property
    def buffer(self) -> torch.Tensor | None:
        """This rank's whole buffer (uint8; the reference's name for it), None once destroyed."""
        return self.storage

    def view(self, name: str, rows: int | None = None) -> torch.Tensor:
        """The region ``name`` of this rank's buffer as a tensor (``rows``: a prefix of an MN-major scale region,
        with the row stride ``align(rows, 4)`` the GEMMs expect)."""
        region: Region = self.layout.regions[name]
        dtype = _TORCH_DTYPES[region.dtype]
        raw = self.storage[region.offset : region.offset + region.nbytes]
        if not region.mn_major:
            view = raw.view(dtype).view(region.shape)
        else:
            num_rows, cols = region.shape
            if rows is not None:
                num_rows = rows
            stride = (num_rows + 3) // 4 * 4 if rows is not None else region.row_stride
            view = raw.view(dtype).as_strided((num_rows, cols), (1, stride))
        # NOTES: the traced path of mega_moe_pre_dispatch_sm90 (deep_gemm/mega/ops.py) reads this to pass the storage
        # plus byte offsets instead of four aliasing views of different dtypes, which AOT autograd rejects; Dynamo
        # cannot trace storage_offset() or _base, but reads a tensor's Python attributes
        setattr(view, VIEW_REGION_ATTR, (self.storage, region.offset))
        return view

    def barrier(self) -> None:
        """Wait (on the current stream) until every rank of the group reaches this point; no-op for one rank."""
        if self._handle is not None:
            self._handle.barrier(channel=0)

    def destroy(self) -> None:
        """Release this rank's buffer (every rank must call it; the views become invalid)."""
        self.barrier()
        self._handle = None
        self.storage = None
        for name in (
            "x",
            "x_sf",
            "topk_idx",
            "topk_weights",
            "l1_acts",
            "l1_acts_sf",
            "l2_acts",
            "l2_acts_sf",
            "num_tokens",
            "peers",
        ):
            setattr(self, name, None)


def get_symm_buffer_for_mega_moe(
    group,
    num_experts,
    num_max_tokens_per_rank,
    num_topk,
    hidden,
    intermediate_hidden,
    use_fp8_dispatch=None,
    mma_type="fp8xfp4",
    activation="swiglu",
    *,
    packed_x_sf=False,
) -> SymmBuffer:
    """Allocate the Mega MoE buffer for these dims (a collective over ``group``: every rank calls it alike).

    ``use_fp8_dispatch`` (None: FP8 for the ``fp8*`` mma types, BF16 for ``'bf16xbf16'``) picks the dtype of the
    dispatched tokens ``x``; FP8 with BF16 experts is rejected. Every FP8 ``mma_type`` gets the SGLang fork's SM90
    buffer, ``x_sf`` FP32 1x128 (the fork routes ``fp8*`` types there on Hopper, and its callers copy FP32 scales
    in); ``packed_x_sf=True`` (keyword only, not in the reference) lays ``x_sf`` out as the reference's SM100
    buffer, UE8M0 1x32 scales packed four to an int32. Every FP8 buffer serves :func:`deep_gemm.mega.fp8_mega_moe`
    and :func:`deep_gemm.mega.fp8_fp4_mega_moe`, and :func:`deep_gemm.mega.mega_moe_pre_dispatch_sm90` writes the
    format of the buffer it is given. See :class:`SymmBuffer` for the other arguments, the views and what it raises.
    """
    fn = "get_symm_buffer_for_mega_moe"
    check_mma_and_activation(fn, mma_type, activation)
    if use_fp8_dispatch is None:
        use_fp8_dispatch = mma_type.startswith("fp8")
    if not isinstance(use_fp8_dispatch, bool):
        raise TypeError(f"{fn}: use_fp8_dispatch must be a bool or None, got {type(use_fp8_dispatch).__name__}")
    if use_fp8_dispatch and mma_type == "bf16xbf16":
        raise ValueError(f"{fn}: use_fp8_dispatch=True needs an fp8 mma_type, got mma_type={mma_type!r}")
    if not use_fp8_dispatch and mma_type.startswith("fp8"):
        raise ValueError(f"{fn}: mma_type={mma_type!r} needs FP8 dispatch (use_fp8_dispatch=True or None), got False")
    buffer = SymmBuffer.__new__(SymmBuffer)
    buffer._init(
        group,
        num_experts,
        num_max_tokens_per_rank,
        num_topk,
        hidden,
        intermediate_hidden,
        0,
        mma_type,
        activation,
        use_fp8_dispatch,
        packed_x_sf,
    )
    return buffer


def get_symm_buffer_for_sm90_mega_moe(
    group,
    num_experts,
    num_max_tokens_per_rank,
    num_topk,
    hidden,
    intermediate_hidden,
    use_fp8_dispatch=True,
    activation="swiglu",
) -> SymmBuffer:
    """The SGLang fork's name: the buffer of :func:`deep_gemm.mega.fp8_mega_moe` (FP8 x FP8, ``mma_type
    'fp8xfp8'``), or with ``use_fp8_dispatch=False`` of :func:`deep_gemm.mega.bf16_mega_moe` (``'bf16xbf16'``).
    See :class:`SymmBuffer` for the arguments, the views and what it raises."""
    if not isinstance(use_fp8_dispatch, bool):
        raise TypeError(
            f"get_symm_buffer_for_sm90_mega_moe: use_fp8_dispatch must be a bool, got {type(use_fp8_dispatch).__name__}"
        )
    return get_symm_buffer_for_mega_moe(
        group,
        num_experts,
        num_max_tokens_per_rank,
        num_topk,
        hidden,
        intermediate_hidden,
        use_fp8_dispatch,
        "fp8xfp8" if use_fp8_dispatch else "bf16xbf16",
        activation,
    )
