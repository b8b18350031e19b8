"""Process-group helpers of the reference API (``deep_gemm.utils.dist``) for multi-GPU tests, on ``torch.distributed``.

The environment names the node (as the reference reads it): ``MASTER_ADDR`` (default ``127.0.0.1``)
and ``MASTER_PORT`` (default ``8361``) the rendezvous, ``WORLD_SIZE`` the number of nodes (default
1) and ``RANK`` this node's index (default 0); each node runs ``num_local_ranks`` processes.
"""

import inspect
import os

import torch
import torch.distributed as dist

__all__ = ["dist_print", "init_dist", "uneven_all_gather"]

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 8361

# This process's rank within its node, set by init_dist (dist_print reads it)
_local_rank: int | None = None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"init_dist: environment variable {name} must be an integer, got {value!r}") from None


def _check_rank_args(local_rank: object, num_local_ranks: object) -> None:
    for name, value in (("local_rank", local_rank), ("num_local_ranks", num_local_ranks)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"init_dist: {name} must be an int, got {type(value).__name__}")
    if num_local_ranks <= 0:
        raise ValueError(f"init_dist: num_local_ranks must be positive, got {num_local_ranks}")
    if not 0 <= local_rank < num_local_ranks:
        raise ValueError(f"init_dist: local_rank must be in [0, {num_local_ranks}), got {local_rank}")


def init_dist(
    local_rank: int, num_local_ranks: int, backend: str = "nccl"
) -> tuple[int, int, dist.ProcessGroup]:
    """Join the job's process group and return ``(rank, world_size, group)``.

    The global rank is ``RANK * num_local_ranks + local_rank`` of ``WORLD_SIZE * num_local_ranks``
    (the environment of the module docstring), over a TCP rendezvous at ``MASTER_ADDR:MASTER_PORT``.
    With ``backend="nccl"`` (the reference's only backend) it also makes ``cuda:local_rank`` the current
    and the default torch device, as the reference does. ``group`` is a new group of all ranks.

    Args:
        local_rank: this process's index on its node, in ``[0, num_local_ranks)``.
        num_local_ranks: processes per node, positive.
        backend: the ``torch.distributed`` backend (a superset of the reference, for CPU tests:
            ``"gloo"`` leaves the torch devices alone).

    Raises:
        TypeError / ValueError: bad ranks, or a non-integer environment variable.
        RuntimeError: from ``torch.distributed`` when the rendezvous fails.
    """
    global _local_rank
    _check_rank_args(local_rank, num_local_ranks)
    if not isinstance(backend, str):
        raise TypeError(f"init_dist: backend must be a str, got {type(backend).__name__}")
    addr = os.environ.get("MASTER_ADDR") or DEFAULT_MASTER_ADDR
    port = _env_int("MASTER_PORT", DEFAULT_MASTER_PORT)
    num_nodes = _env_int("WORLD_SIZE", 1)
    node_rank = _env_int("RANK", 0)
    if num_nodes <= 0 or not 0 <= node_rank < num_nodes:
        raise ValueError(f"init_dist: RANK must be in [0, WORLD_SIZE), got RANK={node_rank}, WORLD_SIZE={num_nodes}")
    world_size = num_nodes * num_local_ranks
    kwargs = {
        "backend": backend,
        "init_method": f"tcp://{addr}:{port}",
        "world_size": world_size,
        "rank": node_rank * num_local_ranks + local_rank,
    }
    uses_cuda = backend == "nccl"
    # (newer torch binds the group to a device up front; older versions lack the argument)
    if uses_cuda and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = torch.device(f"cuda:{local_rank}")
    _local_rank = local_rank
    dist.init_process_group(**kwargs)
    if uses_cuda:
        torch.cuda.set_device(local_rank)
        torch.set_default_device(f"cuda:{local_rank}")
    return dist.get_rank(), dist.get_world_size(), dist.new_group(list(range(world_size)))


def uneven_all_gather(tensor: torch.Tensor, dim: int = 0, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Concatenate along ``dim`` every rank's ``tensor``, whose sizes along ``dim`` may differ.

    The other dims, the dtype and the device must agree across ranks. Each rank's size is exchanged
    first, the tensors are zero-padded to the largest and all-gathered, and the padding is cut off,
    so the result is ``torch.cat([tensor of rank 0, rank 1, ...], dim)`` on every rank.

    Args:
        tensor: this rank's part, any shape with at least one dim.
        dim: the dim to concatenate along (negative counts from the end).
        group: the process group; ``None`` for the default one.

    Raises:
        TypeError / ValueError: ``tensor`` not a tensor, 0-dim, or ``dim`` out of range.
        RuntimeError: no process group is initialized.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"uneven_all_gather: tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() == 0:
        raise ValueError("uneven_all_gather: tensor must have at least one dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -tensor.dim() <= dim < tensor.dim():
        raise ValueError(f"uneven_all_gather: dim must be an int in [{-tensor.dim()}, {tensor.dim()}), got {dim!r}")
    if not dist.is_initialized():
        raise RuntimeError("uneven_all_gather: torch.distributed is not initialized (call init_dist first)")
    dim %= tensor.dim()
    world_size = dist.get_world_size(group)
    local_size = torch.tensor([tensor.shape[dim]], dtype=torch.int64, device=tensor.device)
    sizes = [torch.empty_like(local_size) for _ in range(world_size)]
    dist.all_gather(sizes, local_size, group=group)
    sizes = [int(s.item()) for s in sizes]
    max_size = max(sizes)
    padded_shape = list(tensor.shape)
    padded_shape[dim] = max_size
    padded = torch.zeros(padded_shape, dtype=tensor.dtype, device=tensor.device)
    padded.narrow(dim, 0, tensor.shape[dim]).copy_(tensor)
    gathered = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(gathered, padded, group=group)
    return torch.cat([part.narrow(dim, 0, size) for part, size in zip(gathered, sizes, strict=True)], dim=dim)


def dist_print(s: str = "", once_in_node: bool = False) -> None:
    """Print ``s`` (flushed) on every rank, or with ``once_in_node`` on local rank 0 only; then a barrier.

    Raises:
        RuntimeError: :func:`init_dist` has not run in this process.
    """
    if _local_rank is None:
        raise RuntimeError("dist_print: call init_dist first (it records this process's local rank)")
    if not once_in_node or _local_rank == 0:
        print(s, flush=True)
    dist.barrier()
