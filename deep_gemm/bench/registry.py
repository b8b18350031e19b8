"""The registry of benchmark suites behind ``python -m deep_gemm.bench --suite NAME``."""

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["BenchOptions", "Suite", "SuiteReport", "get_suite", "register_suite", "suite_names"]


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """Options shared by every suite (parsed from the command line)."""

    shapes: tuple[str, ...] | None = None  # raw shape strings; each suite parses its own format
    num_warmups: int = 5
    num_tests: int = 30
    idle_s: float = 0.3
    flush_l2: bool = True
    l2_flush_mode: str = "read"  # deep_gemm.testing.bench_kernel: "read" (L2 left clean) or "write"
    baselines: bool = True  # also time the vendor baselines (cuBLASLt); off for config sweeps


@dataclasses.dataclass(frozen=True)
class SuiteReport:
    """What a suite returns: JSON-ready data and whether every shape ran and was accurate."""

    data: dict[str, Any]
    ok: bool


@dataclasses.dataclass(frozen=True)
class Suite:
    """A named benchmark: ``run`` prints its table and returns a :class:`SuiteReport`.

    ``parse_shape`` turns one ``--shapes`` entry into the suite's shape tuple, raising
    ``ValueError`` on bad input; ``shape_help`` describes the format.
    """

    name: str
    description: str
    shape_help: str
    parse_shape: Callable[[str], tuple[int, ...]]
    run: Callable[[BenchOptions], SuiteReport]


_SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite) -> Suite:
    """Add a suite to the registry.

    Raises:
        ValueError: a suite with the same name is already registered.
    """
    if suite.name in _SUITES:
        raise ValueError(f"register_suite: a suite named {suite.name!r} is already registered")
    _SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    """Look a suite up by name.

    Raises:
        KeyError: no such suite (the message lists the registered ones).
    """
    if name not in _SUITES:
        raise KeyError(f"no benchmark suite named {name!r}; known: {', '.join(suite_names())}")
    return _SUITES[name]


def suite_names() -> list[str]:
    """Names of the registered suites, sorted."""
    return sorted(_SUITES)
