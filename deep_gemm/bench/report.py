"""Formatting helpers shared by the benchmark suites: fixed-width tables and geomeans."""

import math
from collections.abc import Iterable, Sequence

__all__ = ["Column", "Table", "fmt", "geomean"]


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values, skipping ``None``; ``None`` if there are none."""
    kept = [v for v in values if v is not None and v > 0]
    if not kept:
        return None
    return math.exp(sum(math.log(v) for v in kept) / len(kept))


def fmt(value: float | int | str | None, spec: str = "") -> str:
    """Format a value for a table cell; ``None`` becomes ``-``."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return format(value, spec)


class Column:
    """One table column: a header and a width; cells are right-aligned."""

    def __init__(self, header: str, width: int | None = None) -> None:
        self.header = header
        self.width = max(len(header), width or 0)


class Table:
    """A fixed-width text table printed row by row (so long runs show progress)."""

    def __init__(self, columns: Sequence[Column], separator: str = "  ") -> None:
        self.columns = list(columns)
        self.separator = separator

    def header(self) -> str:
        """The header line and a rule under it."""
        line = self.separator.join(c.header.rjust(c.width) for c in self.columns)
        return f"{line}\n{'-' * len(line)}"

    def row(self, cells: Sequence[str]) -> str:
        """One line of right-aligned cells.

        Raises:
            ValueError: the number of cells differs from the number of columns.
        """
        if len(cells) != len(self.columns):
            raise ValueError(f"Table.row: expected {len(self.columns)} cells, got {len(cells)}")
        return self.separator.join(cell.rjust(c.width) for cell, c in zip(cells, self.columns, strict=True))
