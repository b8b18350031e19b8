"""Run a function on N ranks of one machine, one process per rank, and gather what each returns.

Used by the multi-GPU tests (``tests/test_mega_moe_dist.py``, NCCL) and the ``mega_moe_dist`` bench suite, and by
the CPU tier with the gloo backend. The parent hosts the rendezvous store (a ``TCPStore`` on a port the OS picks, so
concurrent runs never collide), starts the ranks with ``torch.multiprocessing``, and waits. NCCL ranks are spawned
(CUDA cannot be forked); gloo ranks are forked by default, which saves each rank the ~3 s of importing torch and
deep_gemm again (the CPU tier runs on 2 cores). A rank that raises sends its traceback back; the parent then gives the other ranks a short grace period (they
are usually blocked in a collective waiting for the failed one), terminates them, and raises :class:`RankError`
with every failed rank's traceback. A rank that dies without a word (a crash) is reported by its exit code.

NVLink SHARP (multicast) stays off in every rank (``NCCL_NVLS_ENABLE=0``): the machines these runs use do not lend
it reliably, and no deep_gemm path relies on it.
"""

from __future__ import annotations

import datetime
import io
import os
import queue as queue_module
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["RankError", "run_ranks"]

BACKENDS = ("gloo", "nccl")

# What every rank's environment gets (before the process group exists) unless the caller's env overrides it.
RANK_ENV = {"NCCL_NVLS_ENABLE": "0"}

# How long the other ranks may take to finish (or fail) after the first rank failed, before they are terminated.
FAILURE_GRACE_S = 5.0


class RankError(RuntimeError):
    """One or more ranks failed: ``failures`` maps each failed rank to its traceback (or exit-code text)."""

    def __init__(self, failures: dict[int, str]):
        self.failures = dict(sorted(failures.items()))
        parts = [f"--- rank {rank} ---\n{text.rstrip()}" for rank, text in self.failures.items()]
        super().__init__(f"{len(self.failures)} rank(s) failed: {sorted(self.failures)}\n" + "\n".join(parts))


def _rank_main(
    rank: int,
    num_ranks: int,
    store_port: int,
    backend: str,
    fn: Callable[..., Any],
    args: tuple,
    env: dict[str, str],
    timeout_s: float,
    results,
    forked: bool,
) -> None:
    """One rank's process: environment, process group, ``fn(rank, num_ranks, *args)``, result or traceback."""
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    if forked:
        # A forked rank inherits the parent's OpenMP thread pool in a state it cannot use (libgomp is not fork-safe:
        # the first parallel region hangs once the parent has run one); one intra-op thread never enters it
        torch.set_num_threads(1)

    try:
        store = dist.TCPStore(
            "127.0.0.1",
            store_port,
            num_ranks,
            is_master=False,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kwargs["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=num_ranks,
            timeout=datetime.timedelta(seconds=timeout_s),
            **kwargs,
        )
        result = fn(rank, num_ranks, *args)
        # (serialized here, by value: a tensor shared through memory would die with this process)
        payload = io.BytesIO()
        torch.save(result, payload)
        results.put((rank, True, payload.getvalue()))
    except BaseException:  # noqa: BLE001 -- every failure, KeyboardInterrupt included, goes to the parent
        results.put((rank, False, traceback.format_exc()))
        return
    if dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(
    fn: Callable[..., Any],
    num_ranks: int,
    args: Sequence[Any] = (),
    backend: str = "gloo",
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(rank, num_ranks, *args)`` in ``num_ranks`` new processes that form one ``torch.distributed`` group.

    Each process joins the default process group (``backend``; with ``"nccl"`` rank r also makes ``cuda:r`` its
    current device) before ``fn`` runs, and leaves it after. With the spawn start method ``fn`` and ``args`` must be
    picklable (a module-level function); what ``fn`` returns goes back through ``torch.save``: return CPU tensors and
    plain data.

    Args:
        fn: the function every rank runs.
        num_ranks: the group size, positive.
        args: extra positional arguments, the same for every rank.
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (one GPU per rank; needs ``num_ranks`` visible GPUs).
        timeout_s: the longest the whole run may take, and the process group's collective timeout.
        env: environment variables for the ranks, on top of this process's and ``NCCL_NVLS_ENABLE=0``.
        start_method: ``"spawn"``, ``"fork"`` or ``"forkserver"``; None: spawn for NCCL, fork for gloo where the
            platform has it. Fork only a process that has not initialized CUDA.

    Returns:
        What each rank's ``fn`` returned, in rank order.

    Raises:
        TypeError / ValueError: a bad argument (named).
        RankError: a rank raised (its traceback is in the message) or exited without a result.
        TimeoutError: the ranks did not all finish within ``timeout_s`` (they are terminated).
    """
    if not callable(fn):
        raise TypeError(f"run_ranks: fn must be callable, got {type(fn).__name__}")
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks <= 0:
        raise ValueError(f"run_ranks: num_ranks must be a positive int, got {num_ranks!r}")
    if backend not in BACKENDS:
        raise ValueError(f"run_ranks: backend must be one of {BACKENDS}, got {backend!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"run_ranks: timeout_s must be a positive number, got {timeout_s!r}")
    if start_method is not None and start_method not in ("spawn", "fork", "forkserver"):
        raise ValueError(f"run_ranks: start_method must be 'spawn', 'fork', 'forkserver' or None, got {start_method!r}")
    if backend == "nccl" and start_method == "fork":
        raise ValueError("run_ranks: start_method 'fork' cannot start NCCL ranks (CUDA cannot be forked); use 'spawn'")
    if env is not None and not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise TypeError("run_ranks: env must be a dict of str to str or None")
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if backend == "nccl" and torch.cuda.device_count() < num_ranks:
        raise ValueError(
            f"run_ranks: backend 'nccl' needs one GPU per rank: num_ranks = {num_ranks}, "
            f"{torch.cuda.device_count()} visible"
        )
    rank_env = {**RANK_ENV, **(env or {})}
    # The parent hosts the store: port 0 lets the OS pick a free one, which no other run can take.
    store = dist.TCPStore(
        "127.0.0.1", 0, num_ranks, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
    )  # fmt: skip
    if start_method is None:
        start_method = "fork" if backend == "gloo" and "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    processes = [
        ctx.Process(
            target=_rank_main,
            args=(
                rank,
                num_ranks,
                store.port,
                backend,
                fn,
                tuple(args),
                rank_env,
                float(timeout_s),
                results,
                start_method == "fork",
            ),
            daemon=True,
        )
        for rank in range(num_ranks)
    ]
    for process in processes:
        process.start()
    outputs: dict[int, Any] = {}
    failures: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    first_failure = 0.0  # (when the first failure arrived)
    try:
        while len(outputs) + len(failures) < num_ranks:
            now = time.monotonic()
            if failures and now > first_failure + FAILURE_GRACE_S:
                break
            if now > deadline:
                if failures:
                    break
                missing = [r for r in range(num_ranks) if r not in outputs]
                raise TimeoutError(f"run_ranks: ranks {missing} did not finish within {timeout_s} s")
            try:
                rank, ok, payload = results.get(timeout=0.1)
            except queue_module.Empty:
                # A rank that exited without a result crashed (killed, segfault, os._exit).
                for rank, process in enumerate(processes):
                    if rank not in outputs and rank not in failures and process.exitcode not in (None, 0):
                        failures[rank] = f"the process exited with code {process.exitcode} and sent no result"
                        if len(failures) == 1:
                            first_failure = time.monotonic()
                continue
            if ok:
                outputs[rank] = torch.load(io.BytesIO(payload), weights_only=False)
            else:
                failures[rank] = payload
                if len(failures) == 1:
                    first_failure = time.monotonic()
    finally:
        for process in processes:
            process.join(timeout=FAILURE_GRACE_S if not failures else 0.5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        results.close()
        del store
    if failures:
        for rank in range(num_ranks):
            if rank not in outputs and rank not in failures:
                failures[rank] = "terminated after another rank failed (likely blocked in a collective)"
        raise RankError(failures)
    return [outputs[rank] for rank in range(num_ranks)]
