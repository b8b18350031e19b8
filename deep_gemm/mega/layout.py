"""The Mega MoE symmetric buffer's size and layout: one pure function of the problem's dims (no GPU, no torch device).

Every rank allocates the same layout, so a kernel finds a peer's region at ``peer_base + offset``. The regions:

========================  =========================================  ==============================================
name                      dtype and shape                            role
========================  =========================================  ==============================================
``num_tokens``            int32 ``[4]`` (entry 0 used)               this rank's T for the current call (peers read)
``x``                     FP8 e4m3 or BF16 ``[max_tokens, hidden]``  the caller's tokens (peers read)
``x_sf``                  ``[max_tokens, hidden / 128]``             their scales (FP8 dispatch; peers read): FP32 per
                                                                     1x128, or int32 words of four UE8M0 1x32 scales
``topk_idx``              int64 ``[max_tokens, num_topk]``           global expert ids, -1 for none (peers read)
``topk_weights``          FP32 ``[max_tokens, num_topk]``            routing weights (peers read)
``combine_row``           int32 ``[max_tokens, num_topk]``           written by each expert's owner: the output row
``l1_acts``               x's dtype ``[max_rows, hidden]``           the received rows, grouped by local expert
``l1_acts_sf``            FP32, MN-major ``[hidden / 128, rows']``   their scales (FP8), the GEMM's layout
``l1_out``                FP32 (FP8) or BF16 ``[max_rows, 2 * I]``   linear 1's output (gate/up interleaved by 8;
                                                                     FP8 x FP4 writes BF16 into its first half)
``l2_acts``               x's dtype ``[max_rows, I]``                SwiGLU x weight (quantized for FP8)
``l2_acts_sf``            FP32, MN-major ``[I / 128, rows']``        its scales (FP8)
``l2_out``                BF16 ``[max_rows, hidden]``                linear 2's output (the tokens' owners read)
``src_of_row``            int32 ``[max_rows]``                       each received row's source entry, -1: padding
``psum_ends``             int32 ``[num_local_experts]``              cumulative end rows (the GEMMs' psum layout)
========================  =========================================  ==============================================

``max_rows`` bounds the received rows: every rank's ``max_tokens * num_topk`` entries could land here, and every
non-empty local expert's segment is padded to the contiguous-layout alignment (:func:`received_rows_bound`).
``rows'`` is ``max_rows`` rounded up to 4 (16-byte TMA strides); a call with fewer rows uses a prefix with its own
stride inside the same region.
"""

from __future__ import annotations

from dataclasses import dataclass

from deep_gemm.utils.math import align

__all__ = ["MegaMoeBufferLayout", "Region", "mega_moe_buffer_layout", "received_rows_bound"]

# Every region starts at a multiple of this many bytes (TMA needs 16; 256 keeps rows of different regions apart in
# the memory system's sectors and is cheap).
REGION_ALIGNMENT = 256

# The dtypes a region can have, by name (torch-free, so the layout is testable anywhere), and their sizes.
DTYPE_SIZES = {"float8_e4m3fn": 1, "bfloat16": 2, "float32": 4, "int32": 4, "int64": 8}

# What the kernels' MegaMoeLayout struct lists, in its order (common/mega_moe_types.hpp).
KERNEL_LAYOUT_REGIONS = ("num_tokens", "x", "x_sf", "topk_idx", "topk_weights", "combine_row", "l2_out")


@dataclass(frozen=True)
class Region:
    """One region of the buffer: ``offset`` in bytes, ``shape`` and ``dtype`` (a torch dtype's name), and whether
    it is stored MN-major (``mn_major``: shape ``[rows, cols]`` stored as ``[cols, row_stride]``)."""

    offset: int
    shape: tuple[int, ...]
    dtype: str
    mn_major: bool = False
    row_stride: int = 0  # (MN-major regions: the stored row count, a multiple of 4)

    @property
    def nbytes(self) -> int:
        """The region's size in bytes."""
        if self.mn_major:
            return self.shape[1] * self.row_stride * DTYPE_SIZES[self.dtype]
        size = DTYPE_SIZES[self.dtype]
        for dim in self.shape:
            size *= dim
        return size


@dataclass(frozen=True)
class MegaMoeBufferLayout:
    """A rank's buffer: its regions by name (see the module docstring), its total size, and the dims it was sized
    for. Every rank of the group has the same one."""

    num_ranks: int
    num_experts: int
    num_local_experts: int
    num_max_tokens_per_rank: int
    num_topk: int
    hidden: int
    intermediate_hidden: int
    use_fp8: bool
    alignment: int
    max_rows: int
    regions: dict[str, Region]
    num_bytes: int
    packed_x_sf: bool = False  # x_sf holds UE8M0 1x32 scales packed four to an int32 (packed_x_sf=True)

    def kernel_layout(self, rank: int) -> list[int]:
        """The 15 integers the extension's Mega MoE steps take (the kernels' MegaMoeLayout, in its order)."""
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"kernel_layout: rank must be in [0, {self.num_ranks}), got {rank}")
        offsets = [self.regions[name].offset for name in KERNEL_LAYOUT_REGIONS]
        return offsets + [
            self.num_max_tokens_per_rank,
            self.num_topk,
            self.hidden,
            self.num_experts,
            self.num_local_experts,
            rank,
            self.num_ranks,
            # (the kernels' MegaMoeXFormat: BF16, FP8 with FP32 1x128 scales, FP8 with packed UE8M0 1x32 scales)
            2 if self.packed_x_sf else int(self.use_fp8),
        ]


def received_rows_bound(
    num_ranks: int, num_tokens_bound: int, num_topk: int, num_local_experts: int, alignment: int
) -> int:
    """Most rows one rank's experts can receive when no rank sends more than ``num_tokens_bound`` tokens.

    Every top-k entry of every rank may name one of this rank's experts (``num_ranks * num_tokens_bound *
    num_topk`` rows), and each non-empty expert's segment is padded to ``alignment`` (at most ``alignment - 1``
    rows each; an empty expert takes none). Rounded up to ``alignment``: the grouped GEMM's M.
    """
    entries = num_ranks * num_tokens_bound * num_topk
    padding = min(num_local_experts, entries) * (alignment - 1)
    return align(entries + padding, alignment)


def _check_positive_int(fn: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{fn}: {name} must be positive, got {value}")


def mega_moe_buffer_layout(
    num_ranks: int,
    num_experts: int,
    num_max_tokens_per_rank: int,
    num_topk: int,
    hidden: int,
    intermediate_hidden: int,
    use_fp8: bool,
    alignment: int,
    packed_x_sf: bool = False,
) -> MegaMoeBufferLayout:
    """Size and lay out one rank's Mega MoE buffer (see the module docstring for the regions).

    Args:
        num_ranks: ranks in the group (1 for a single process); must divide ``num_experts``.
        num_experts: experts of the layer, over all ranks.
        num_max_tokens_per_rank: most tokens any rank passes in one call.
        num_topk: experts per token.
        hidden: model dim, a multiple of 128.
        intermediate_hidden: the experts' intermediate dim I, a multiple of 128.
        use_fp8: FP8 e4m3 activations with scales (else BF16, no scales).
        alignment: the contiguous grouped layout's segment alignment
            (``get_mk_alignment_for_contiguous_layout()``), positive.
        packed_x_sf: FP8 only: ``x_sf`` holds UE8M0 1x32 scales packed four to an int32 (the reference's SM100
            buffer's input format) instead of FP32 1x128 scales. The internal activations keep FP32 1x128.

    Raises:
        TypeError / ValueError: naming the argument that is not a positive int, not a multiple of 128, or
            ``num_experts`` not divisible by ``num_ranks``.
    """
    fn = "mega_moe_buffer_layout"
    for name, value in (
        ("num_ranks", num_ranks),
        ("num_experts", num_experts),
        ("num_max_tokens_per_rank", num_max_tokens_per_rank),
        ("num_topk", num_topk),
        ("hidden", hidden),
        ("intermediate_hidden", intermediate_hidden),
        ("alignment", alignment),
    ):
        _check_positive_int(fn, name, value)
    if not isinstance(use_fp8, bool):
        raise TypeError(f"{fn}: use_fp8 must be a bool, got {type(use_fp8).__name__}")
    if not isinstance(packed_x_sf, bool):
        raise TypeError(f"{fn}: packed_x_sf must be a bool, got {type(packed_x_sf).__name__}")
    if packed_x_sf and not use_fp8:
        raise ValueError(f"{fn}: packed_x_sf needs FP8 activations (use_fp8=True)")
    if num_experts % num_ranks != 0:
        raise ValueError(f"{fn}: num_experts ({num_experts}) must be a multiple of the group size ({num_ranks})")
    for name, value in (("hidden", hidden), ("intermediate_hidden", intermediate_hidden)):
        if value % 128 != 0:
            raise ValueError(f"{fn}: {name} must be a multiple of 128, got {value}")
    num_local_experts = num_experts // num_ranks
    if num_local_experts > 1024:
        raise ValueError(f"{fn}: at most 1024 experts per rank, got num_experts / group size = {num_local_experts}")
    if num_ranks * num_max_tokens_per_rank * num_topk >= 2**31:
        raise ValueError(f"{fn}: group size * num_max_tokens_per_rank * num_topk must be below 2^31")

    act = "float8_e4m3fn" if use_fp8 else "bfloat16"
    max_tokens = num_max_tokens_per_rank
    max_rows = received_rows_bound(num_ranks, max_tokens, num_topk, num_local_experts, alignment)
    sf_rows = align(max_rows, 4)
    plan: list[tuple[str, tuple[int, ...], str, bool]] = [
        ("num_tokens", (4,), "int32", False),
        ("x", (max_tokens, hidden), act, False),
        ("x_sf", (max_tokens, hidden // 128 if use_fp8 else 0), "int32" if packed_x_sf else "float32", False),
        ("topk_idx", (max_tokens, num_topk), "int64", False),
        ("topk_weights", (max_tokens, num_topk), "float32", False),
        ("combine_row", (max_tokens, num_topk), "int32", False),
        ("l1_acts", (max_rows, hidden), act, False),
        ("l1_acts_sf", (max_rows, hidden // 128 if use_fp8 else 0), "float32", True),
        # (FP8: linear 1 runs once with per-row B scales, recipe (1, 1, 128), which writes FP32)
        ("l1_out", (max_rows, 2 * intermediate_hidden), "float32" if use_fp8 else "bfloat16", False),
        ("l2_acts", (max_rows, intermediate_hidden), act, False),
        ("l2_acts_sf", (max_rows, intermediate_hidden // 128 if use_fp8 else 0), "float32", True),
        ("l2_out", (max_rows, hidden), "bfloat16", False),
        ("src_of_row", (max_rows,), "int32", False),
        ("psum_ends", (num_local_experts,), "int32", False),
    ]
    regions: dict[str, Region] = {}
    offset = 0
    for name, shape, dtype, mn_major in plan:
        region = Region(offset, shape, dtype, mn_major, sf_rows if mn_major else 0)
        regions[name] = region
        offset = align(offset + region.nbytes, REGION_ALIGNMENT)
    return MegaMoeBufferLayout(
        num_ranks=num_ranks,
        num_experts=num_experts,
        num_local_experts=num_local_experts,
        num_max_tokens_per_rank=max_tokens,
        num_topk=num_topk,
        hidden=hidden,
        intermediate_hidden=intermediate_hidden,
        use_fp8=use_fp8,
        alignment=alignment,
        max_rows=max_rows,
        regions=regions,
        num_bytes=max(offset, REGION_ALIGNMENT),
        packed_x_sf=packed_x_sf,
    )
