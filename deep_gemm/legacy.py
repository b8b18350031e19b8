"""The reference's ``deep_gemm.legacy`` functions (its Triton kernels), served by deep_gemm's SM90 kernels.

Same names, arguments and results as the reference; each is a composition of a deep_gemm grouped GEMM with, for
the ``*_fused`` forms, a row gather in PyTorch (the reference reads the gathered rows inside its kernel):

- ``m_grouped_bf16_gemm_{nt,nn}_contiguous_tl(a, b, d, m_indices)``: the m-grouped contiguous GEMM with per-row
  group ids (rows of id < 0 are padding, written as zeros).
- ``a_fused_m_grouped_bf16_gemm_{nt,nn}_contiguous_tl(a, b, d, mappings)``: ``mappings = (m_indices,
  m_row_indices)``: row i of D is ``a[m_row_indices[i]]`` (zeros where ``m_row_indices[i] < 0``) times group
  ``m_indices[i]``'s weights.
- ``{a,b}_fused_k_grouped_bf16_gemm_tn_contiguous_tl(a, b, d, handle, acc)``: ``handle = (k_indices, k_start,
  k_end)``: ``d[g] (+)= sum over k in [k_start[g], k_end[g]) of x[k].T @ y[k]`` where the fused operand's row k is
  its row ``k_indices[k]`` (zeros where negative) and the other operand's row is k itself; ``acc`` adds into d.
  These read ``k_start`` / ``k_end`` on the host (one synchronization per call): deep_gemm's k-grouped kernel takes
  the groups' K from the host.

Speed: the gathers and the host read cost what the reference's fused loads do not; these exist so that code written
against ``deep_gemm.legacy`` runs unmodified, not as the fast path (use the m-grouped / k-grouped APIs directly).
"""

import torch

import deep_gemm

__all__ = [
    "a_fused_k_grouped_bf16_gemm_tn_contiguous_tl",
    "a_fused_m_grouped_bf16_gemm_nn_contiguous_tl",
    "a_fused_m_grouped_bf16_gemm_nt_contiguous_tl",
    "b_fused_k_grouped_bf16_gemm_tn_contiguous_tl",
    "m_grouped_bf16_gemm_nn_contiguous_tl",
    "m_grouped_bf16_gemm_nt_contiguous_tl",
]


def _check_int32_vector(t: torch.Tensor, name: str) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        raise ValueError(f"{name} must be a 1-D torch.int32 tensor, got {_describe(t)}")


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} tensor of shape {tuple(t.shape)}"
    return type(t).__name__


def _gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x[rows], with zero rows where rows < 0 (rows must index x's first dimension)."""
    valid = rows >= 0
    out = x.index_select(0, rows.clamp(min=0).long())
    return out * valid.unsqueeze(1).to(out.dtype)


def m_grouped_bf16_gemm_nt_contiguous_tl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                         m_indices: torch.Tensor) -> None:
    """D[i] = A[i] @ B[m_indices[i]].T for the rows of id >= 0, zeros for the others (padding).

    a: BF16 [M, K]; b: BF16 [G, N, K] (K-major, or its MN-major view); d: BF16 [M, N]; m_indices: int32 [M].
    """
    _check_int32_vector(m_indices, "m_indices")
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)


def m_grouped_bf16_gemm_nn_contiguous_tl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                         m_indices: torch.Tensor) -> None:
    """D[i] = A[i] @ B[m_indices[i]] for the rows of id >= 0, zeros for the others; b: BF16 [G, K, N]."""
    _check_int32_vector(m_indices, "m_indices")
    deep_gemm.m_grouped_bf16_gemm_nn_contiguous(a, b, d, m_indices)


def _mappings(mappings: object, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(mappings, (tuple, list)) or len(mappings) != 2:
        raise ValueError(f"mappings must be a pair (m_indices, m_row_indices), got {_describe(mappings)}")
    m_indices, m_row_indices = mappings
    _check_int32_vector(m_indices, "mappings[0] (m_indices)")
    _check_int32_vector(m_row_indices, "mappings[1] (m_row_indices)")
    if m_indices.numel() != num_rows or m_row_indices.numel() != num_rows:
        raise ValueError(f"mappings: m_indices and m_row_indices must both have d's {num_rows} rows, got "
                         f"{m_indices.numel()} and {m_row_indices.numel()}")
    return m_indices, m_row_indices


def a_fused_m_grouped_bf16_gemm_nt_contiguous_tl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                                 mappings: tuple[torch.Tensor, torch.Tensor]) -> None:
    """D[i] = a[m_row_indices[i]] @ B[m_indices[i]].T (zeros where either index is negative).

    a: BF16 [M_a, K] (any number of rows); b: BF16 [G, N, K]; d: BF16 [M, N]; mappings: (m_indices,
    m_row_indices), int32 [M] each. The rows of a are gathered into a temporary [M, K] first.
    """
    if not isinstance(d, torch.Tensor) or d.dim() != 2:
        raise ValueError(f"d must be a 2-D tensor [M, N], got {_describe(d)}")
    m_indices, m_row_indices = _mappings(mappings, d.size(0))
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(_gather_rows(a, m_row_indices), b, d, m_indices)


def a_fused_m_grouped_bf16_gemm_nn_contiguous_tl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                                 mappings: tuple[torch.Tensor, torch.Tensor]) -> None:
    """As ``a_fused_m_grouped_bf16_gemm_nt_contiguous_tl`` with b: BF16 [G, K, N]."""
    if not isinstance(d, torch.Tensor) or d.dim() != 2:
        raise ValueError(f"d must be a 2-D tensor [M, N], got {_describe(d)}")
    m_indices, m_row_indices = _mappings(mappings, d.size(0))
    deep_gemm.m_grouped_bf16_gemm_nn_contiguous(_gather_rows(a, m_row_indices), b, d, m_indices)


def _k_grouped_fused(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, handle: object, acc: bool,
                     fused: str) -> None:
    if not isinstance(handle, (tuple, list)) or len(handle) != 3:
        raise ValueError(f"handle must be a triple (k_indices, k_start, k_end), got {_describe(handle)}")
    k_indices, k_start, k_end = handle
    for t, name in ((k_indices, "k_indices"), (k_start, "k_start"), (k_end, "k_end")):
        _check_int32_vector(t, f"handle ({name})")
    if not isinstance(d, torch.Tensor) or d.dim() != 3 or d.dtype != torch.float32:
        raise ValueError(f"d must be a torch.float32 tensor [G, M, N], got {_describe(d)}")
    if k_start.numel() != d.size(0) or k_end.numel() != d.size(0):
        raise ValueError(f"handle: k_start and k_end must have d's {d.size(0)} groups, got {k_start.numel()} and "
                         f"{k_end.numel()}")
    other = b if fused == "a" else a
    if k_indices.numel() != other.size(0):
        raise ValueError(f"handle (k_indices) must have one entry per row of {'b' if fused == 'a' else 'a'} "
                         f"({other.size(0)}), got {k_indices.numel()}")
    # (one host read: the k-grouped kernel takes every group's K from the host)
    starts, ends = k_start.tolist(), k_end.tolist()
    if any(s < 0 or e < s or e > other.size(0) for s, e in zip(starts, ends, strict=True)):
        raise ValueError(f"handle: every group needs 0 <= k_start <= k_end <= {other.size(0)}, got k_start "
                         f"{starts} and k_end {ends}")
    order = torch.cat([torch.arange(s, e, device=k_indices.device) for s, e in zip(starts, ends, strict=True)] +
                      [torch.zeros(0, dtype=torch.long, device=k_indices.device)])
    fused_rows = k_indices.index_select(0, order)
    if fused == "a":
        a_rows, b_rows = _gather_rows(a, fused_rows), b.index_select(0, order)
    else:
        a_rows, b_rows = a.index_select(0, order), _gather_rows(b, fused_rows)
    ks_cpu = [e - s for s, e in zip(starts, ends, strict=True)]
    layout = torch.tensor(ks_cpu, dtype=torch.int32, device=d.device)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a_rows.contiguous(), b_rows.contiguous(), d, ks_cpu, layout,
                                                d if acc else None)


def a_fused_k_grouped_bf16_gemm_tn_contiguous_tl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                                 handle: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                                                 acc: bool) -> None:
    """d[g] (+)= sum over k in [k_start[g], k_end[g]) of a[k_indices[k]].T @ b[k] (outer products of rows).

    a: BF16 [K_a, M] (rows gathered by k_indices; negative: zeros); b: BF16 [K, N]; d: FP32 [G, M, N];
    handle: (k_indices int32 [K], k_start int32 [G], k_end int32 [G]); acc: add into d instead of overwriting it.
    Reads k_start / k_end on the host (one synchronization).
    """
    _k_grouped_fused(a, b, d, handle, acc, "a")


def b_fused_k_grouped_bf16_gemm_tn_contiguous_tl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                                 handle: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                                                 acc: bool) -> None:
    """d[g] (+)= sum over k in [k_start[g], k_end[g]) of a[k].T @ b[k_indices[k]].

    a: BF16 [K, M]; b: BF16 [K_b, N] (rows gathered by k_indices; negative: zeros); d: FP32 [G, M, N]; handle and
    acc as in ``a_fused_k_grouped_bf16_gemm_tn_contiguous_tl``.
    """
    _k_grouped_fused(a, b, d, handle, acc, "b")
