"""Sweeps: one metric over a B x N grid, evaluated in one vectorised call.

The grid is never walked point by point: B goes in as a column (nB, 1) and N as a row
(1, nN) to the same lambdified function `infest eval` uses, and numpy broadcasting
produces every cell at once, so a cell equals `infest eval --set B=.. --set N=..`.

LIST syntax (command line): comma-separated items, each a number (`8`, `32k`), a range
of every integer `a..b`, a geometric range `a..b:x2` (any factor > 1) or an arithmetic
range `a..b:+8`. Values are positive whole numbers; units as in `--set` (`32k` = 32768).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.evaluate import Input, step_bound
from infest.compiler.model import MEMORY_KEYS, STEP_KEYS
from infest.dsl.errors import did_you_mean, fail
from infest.dsl.units import COUNT, parse_number, parse_value

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

LIST_HINT = "LIST is 1,8,32 or a..b (every integer) or a..b:x2 (geometric); units: 1k..128k:x2"
MAX_VALUES = 10_000_000      # per axis: a typo like 1..1e12 must fail, not exhaust memory
MAX_CELLS = 10_000_000       # the grid holds every B,N-dependent form: ~3 GB at 10^7 cells
_RANGE = re.compile(r"^(?P<a>[^.]+)\.\.(?P<b>[^:]+?)(?::(?P<op>.?)(?P<step>.*))?$")


@dataclass
class Sweep:
    """A metric on a B x N grid: values[i, j] and fits[i, j] at B[i], N[j]."""

    metric: str              # flat key: "step.<k>", "memory.<k>" or "bound"
    B: np.ndarray            # (nB,) int
    N: np.ndarray            # (nN,) int
    values: np.ndarray       # (nB, nN) float, or str for "bound"
    fits: np.ndarray         # (nB, nN) bool: weights + KV fit in device memory
    inputs: list[Input]      # every other input, at its value for this sweep


def parse_list(text: str, name: str = "B") -> list[int]:
    """A LIST (`1,8,32`, `a..b`, `a..b:x2`, `a..b:+s`) -> sorted distinct positive ints."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise _list_error(name, text, "empty item")
    values: set[int] = set()
    for item in items:
        values.update(_parse_item(item, name))
        if len(values) > MAX_VALUES:
            raise _list_error(name, text, f"more than {MAX_VALUES:,} values")
    return sorted(values)


def _parse_item(item: str, name: str) -> list[int]:
    """One comma-separated item: a single value or a range."""
    match = _RANGE.match(item)
    if not match:
        return [_whole(item, name)]
    lo, hi = _whole(match["a"], name), _whole(match["b"], name)
    if lo > hi:
        raise _list_error(name, item, f"the range runs backwards ({lo} > {hi})")
    if match["op"] is None:
        return _arithmetic(lo, hi, Fraction(1), name, item)
    if match["op"] not in ("x", "+"):
        raise _list_error(name, item, f"unknown step {match['op'] + match['step']!r}; "
                                      "use :x2 (geometric) or :+8 (arithmetic)")
    step = _step(match["step"], name, item)
    if match["op"] == "+":
        return _arithmetic(lo, hi, step, name, item)
    return _geometric(lo, hi, step, name, item)


def _whole(text: str, name: str) -> int:
    """A positive whole number, units allowed (`32k` = 32768)."""
    try:
        value, dim = parse_value(text)
    except ValueError as exc:
        raise _list_error(name, text, str(exc)) from None
    if dim not in (None, COUNT):
        raise _list_error(name, text, f"{name} is a count, not a {dim} value")
    if value.denominator != 1 or value <= 0:
        raise _list_error(name, text, f"{name} values must be positive whole numbers")
    return int(value)


def _step(text: str, name: str, item: str) -> Fraction:
    try:
        step = parse_number(text.strip())
    except (ValueError, ZeroDivisionError):
        raise _list_error(name, item, f"bad step {text!r}") from None
    if step <= 0:
        raise _list_error(name, item, "the step must be positive")
    return step


def _arithmetic(lo: int, hi: int, step: Fraction, name: str, item: str) -> list[int]:
    if step.denominator != 1:
        raise _list_error(name, item, "an arithmetic step must be a whole number")
    if (hi - lo) // int(step) + 1 > MAX_VALUES:
        raise _list_error(name, item, f"more than {MAX_VALUES:,} values")
    return list(range(lo, hi + 1, int(step)))


def _geometric(lo: int, hi: int, factor: Fraction, name: str, item: str) -> list[int]:
    """lo, lo*f, lo*f^2, ... <= hi, each rounded to the nearest integer."""
    if factor <= 1:
        raise _list_error(name, item, "a geometric factor must be greater than 1")
    count = math.floor(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
    if count > MAX_VALUES:
        raise _list_error(name, item, f"more than {MAX_VALUES:,} values")
    if factor.denominator == 1:  # x2, x4, ...: exact integers, the common case
        return [v for v in (lo * int(factor) ** k for k in range(count + 1)) if v <= hi]
    # A fractional factor in floats: exact Fractions would grow without bound in size.
    f = float(factor)
    return [math.floor(lo * f**k + 0.5) for k in range(count) if lo * f**k <= hi * (1 + 1e-12)]


def _list_error(name: str, text: str, why: str):
    return fail(None, f"--{name} {text!r}: {why}", LIST_HINT)


def resolve_metric(key: str) -> str:
    """`tokens_per_s` -> `step.tokens_per_s`; a bare key found in both is the step's."""
    if key == "bound":
        return key
    section, dot, name = key.partition(".")
    if dot and section in ("step", "memory") and name in _keys(section):
        return key
    for section in ("step", "memory"):
        if key in _keys(section):
            return f"{section}.{key}"
    known = ["bound"] + [f"{s}.{k}" for s in ("step", "memory") for k in _keys(s)]
    raise fail(None, f"--metric {key!r}: no such step or memory key",
               did_you_mean(key, set(known) | set(STEP_KEYS) | set(MEMORY_KEYS))
               or "e.g. tokens_per_s, time_s, bound, total_bytes, fits")


def _keys(section: str) -> tuple[str, ...]:
    return STEP_KEYS if section == "step" else MEMORY_KEYS


def grid_values(analysis: "Analysis", overrides: Mapping[str, Any], Bs: list[int],
                Ns: list[int], over: tuple[str, list[int]] | None = None
                ) -> tuple[list[Input], dict[str, Any]]:
    """Every flat form on the grid (B a column, N a row; with `over`, one B x N grid per
    value of another input along a leading axis) and the inputs used, in one call."""
    _check_grid(overrides, Bs, Ns, over)
    first = {over[0]: over[1][0]} if over else {}
    inputs = analysis.inputs({**overrides, "B": Bs[0], "N": Ns[0], **first})
    point = {i.name: float(i.value) for i in inputs}
    # Same float conversion as Analysis.evaluate, so a cell equals `infest eval` there.
    lead = (None,) if over else ()
    point["B"] = np.asarray(Bs, dtype=float)[(*lead, slice(None), None)]
    point["N"] = np.asarray(Ns, dtype=float)[(*lead, None, slice(None))]
    if over:
        point[over[0]] = np.asarray(over[1], dtype=float)[:, None, None]
    analysis.check(point)
    values = analysis.compiled([i.name for i in inputs])(point)
    return [i for i in inputs if i.name not in ("B", "N")], values


def _check_grid(overrides: Mapping[str, Any], Bs: list[int], Ns: list[int],
                over: tuple[str, list[int]] | None) -> None:
    for name in ("B", "N") + ((over[0],) if over else ()):
        if name in overrides:
            raise fail(None, f"--set {name} conflicts with the swept {name}",
                       f"drop --set {name}; give its values as a LIST")
    if over and over[0] in ("B", "N"):
        raise fail(None, f"--over {over[0]}: sweep it with --{over[0]}")
    if not Bs or not Ns:
        raise fail(None, "a sweep needs at least one B and one N", LIST_HINT)
    cells = len(Bs) * len(Ns) * (len(over[1]) if over else 1)
    if cells > MAX_CELLS:
        raise fail(None, f"{cells:,} points is more than {MAX_CELLS:,}",
                   "use a geometric range (a..b:x2) or a coarser step (a..b:+64)")


def parse_over(text: str) -> tuple[str, list[int]]:
    """`--over tp=1,2,4,8` -> ("tp", [1, 2, 4, 8]): any whole-numbered input as an axis."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise fail(None, f"--over {text!r}: expected NAME=LIST", "e.g. --over tp=1,2,4,8")
    return name.strip(), parse_list(values, name.strip())


def sweep(analysis: "Analysis", overrides: Mapping[str, Any], Bs: list[int],
          Ns: list[int], metric: str = "tokens_per_s") -> Sweep:
    """Evaluate one metric (a step or memory key, or `bound`) on the B x N grid."""
    return sweep_over(analysis, overrides, Bs, Ns, metric)[0]


def sweep_over(analysis: "Analysis", overrides: Mapping[str, Any], Bs: list[int],
               Ns: list[int], metric: str = "tokens_per_s",
               over: tuple[str, list[int]] | None = None) -> list[Sweep]:
    """One B x N Sweep per value of `over` (a single one without it), in one call."""
    key = resolve_metric(metric)
    inputs, values = grid_values(analysis, overrides, Bs, Ns, over)
    shape = (len(over[1]) if over else 1, len(Bs), len(Ns))
    cells = _full(step_bound(values) if key == "bound" else values[key], shape)
    fits = _full(values["memory.fits"], shape).astype(bool)
    return [Sweep(key, np.asarray(Bs), np.asarray(Ns), cells[k], fits[k],
                  _with(inputs, over, k)) for k in range(shape[0])]


def _with(inputs: list[Input], over: tuple[str, list[int]] | None, k: int) -> list[Input]:
    """The fixed inputs of the k-th grid: the `over` input at its k-th value."""
    if over is None:
        return inputs
    name, values = over
    return [Input(i.name, i.kind, Fraction(values[k])) if i.name == name else i for i in inputs]


def _full(array: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A form that ignores B or N comes back smaller; spread it over the grid."""
    return np.broadcast_to(np.asarray(array), shape)
