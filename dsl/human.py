"""Human-readable numbers: decimal GB beside binary GiB, times in ns/us/ms/s.

Everything infest computes is in base units; only this module turns them into text,
and every string it returns names its unit.
"""
from __future__ import annotations

import math

_DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """`16.06 GB`, `17.2 GFLOP`, `989 TFLOP/s`: decimal prefixes, 3 significant digits."""
    if value is None or not math.isfinite(value):
        return "n/a"
    for factor, prefix in _DECIMAL:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def gib(value: float | None) -> str:
    """Bytes as binary GiB (2^30)."""
    if value is None:
        return "n/a"
    return f"{value / 2**30:.3g} GiB"


def bytes_both(value: float | None) -> str:
    """`16.1 GB (15 GiB)`: decimal and binary side by side."""
    return f"{si(value, 'B')} ({gib(value)})"


def duration(seconds: float | None) -> str:
    """`4.79 ms`, `12.3 us`, `850 ns`; from 1,000 s whole seconds, `1,290 s` (not 1.29e+03)."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if abs(seconds) >= 1000:
        return f"{seconds:,.0f} s"
    for factor, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(seconds) >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def count(value: float | None) -> str:
    """`8.03 B` params style (B = billion here, spelled out in headers)."""
    if value is None:
        return "n/a"
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:g}"


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """An aligned plain-text table; columns in `right` are right-aligned."""
    right = right if right is not None else set(range(1, len(headers)))
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule] + [line(r) for r in rows])


def pairs(rows: list[list[str]]) -> str:
    """`label   value` lines with the values aligned."""
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{r[0].ljust(width)}  {r[1]}" for r in rows)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (cells as given)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
