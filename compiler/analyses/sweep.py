"""Sweeps: one metric over a B x N grid, evaluated in one vectorised call.

The grid is never walked point by point: B goes in as a column (nB, 1) and N as a row
(1, nN) to the same generated function `infest eval` uses, and numpy broadcasting
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

from infest.compiler.backend.report import step_bound
from infest.compiler.backend.runner import Input
from infest.compiler.backend.finite import check_finite
from infest.compiler.core.keys import MEMORY_KEYS, STEP_KEYS
from infest.compiler.core.terms import BOUND_TERMS
from infest.dsl.errors import did_you_mean, fail
from infest.dsl.units import COUNT, parse_number, parse_value

if TYPE_CHECKING:
    from infest.compiler.api import Analysis
    from infest.compiler.backend.runner import Runner

LIST_HINT = "LIST is 1,8,32 or a..b (every integer) or a..b:x2 (geometric); units: 1k..128k:x2"
MAX_VALUES = 10_000_000      # per axis: a typo like 1..1e12 must fail, not exhaust memory
# Each cell costs ~50 bytes evaluated and ~300 bytes printed (CSV/JSON, built in memory):
# 2^21 cells stay within a few hundred MB; a bigger grid is refused, not thrashed.
MAX_CELLS = 2**21
MIN_GROWTH = 1e-6             # a geometric factor closer to 1 cannot be told from 1 in floats
CHUNK_CELLS = 2**16          # rows are evaluated this many cells at a time (bounded temporaries)
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


def parse_list(text: str, name: str = "B", limit: int = MAX_VALUES,
               limit_name: str = "MAX_VALUES") -> list[int]:
    """A LIST (`1,8,32`, `a..b`, `a..b:x2`, `a..b:+s`) -> sorted distinct positive ints;
    more than `limit` values are refused before any range is built."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise _list_error(name, text, "empty item")
    limit = min(limit, MAX_VALUES)
    values: set[int] = set()
    for item in items:
        values.update(_parse_item(item, name, limit - len(values), limit_name))
        if len(values) > limit:
            raise _list_error(name, text, f"more than {limit:,} values ({limit_name})")
    return sorted(values)


def _parse_item(item: str, name: str, room: int = MAX_VALUES,
                limit_name: str = "MAX_VALUES") -> list[int]:
    """One comma-separated item: a single value or a range."""
    match = _RANGE.match(item)
    if not match:
        return [_whole(item, name)]
    lo, hi = _whole(match["a"], name), _whole(match["b"], name)
    if lo > hi:
        raise _list_error(name, item, f"the range runs backwards ({lo} > {hi})")
    if match["op"] is None:
        return _arithmetic(lo, hi, Fraction(1), name, item, room, limit_name)
    if match["op"] not in ("x", "+"):
        raise _list_error(name, item, f"unknown step {match['op'] + match['step']!r}; "
                                      "use :x2 (geometric) or :+8 (arithmetic)")
    step = _step(match["step"], name, item)
    if match["op"] == "+":
        return _arithmetic(lo, hi, step, name, item, room, limit_name)
    return _geometric(lo, hi, step, name, item, room, limit_name)


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


def _arithmetic(lo: int, hi: int, step: Fraction, name: str, item: str,
                room: int = MAX_VALUES, limit_name: str = "MAX_VALUES") -> list[int]:
    if step.denominator != 1:
        raise _list_error(name, item, "an arithmetic step must be a whole number")
    if (hi - lo) // int(step) + 1 > room:
        raise _list_error(name, item, f"more than {room:,} values ({limit_name})")
    return list(range(lo, hi + 1, int(step)))


def _geometric(lo: int, hi: int, factor: Fraction, name: str, item: str,
               room: int = MAX_VALUES, limit_name: str = "MAX_VALUES") -> list[int]:
    """lo, lo*f, lo*f^2, ... <= hi, each rounded to the nearest integer."""
    if factor <= 1:
        raise _list_error(name, item, "a geometric factor must be greater than 1")
    if factor < 1 + MIN_GROWTH:  # log(factor) would round to 0 (a division by zero)
        raise _list_error(name, item, f"a geometric factor must exceed 1 + {MIN_GROWTH:g} "
                                      "(MIN_GROWTH); for every integer use a..b")
    count = math.floor(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
    if count > room:
        raise _list_error(name, item, f"more than {room:,} values ({limit_name})")
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


def grid_values(analysis: "Analysis | Runner", overrides: Mapping[str, Any], Bs: list[int],
                Ns: list[int], keys: frozenset[str] | None = None
                ) -> tuple[list[Input], dict[str, Any]]:
    """Flat forms (every one, or only `keys`) on the grid (B a column, N a row) and the
    inputs used; constraints and finiteness are checked at every cell. Every form is
    computed with the one function `infest eval` uses (so cells equal it exactly), in
    blocks of rows; only `keys` are kept."""
    _check_grid(overrides, Bs, Ns)
    inputs = analysis.inputs({**overrides, "B": Bs[0], "N": Ns[0]})
    point = {i.name: float(i.value) for i in inputs}
    # Same float conversion as Analysis.evaluate, so a cell equals `infest eval` there.
    point["B"] = np.asarray(Bs, dtype=float)[:, None]
    point["N"] = np.asarray(Ns, dtype=float)[None, :]
    analysis.check(point)
    compiled = analysis.compiled([i.name for i in inputs])
    values = _by_rows(compiled, point, len(Bs), len(Ns), keys)
    check_finite(compiled, values, point)
    return [i for i in inputs if i.name not in ("B", "N")], values


def _by_rows(fn: Any, point: dict[str, Any], rows: int, cols: int,
             keys: frozenset[str] | None) -> dict[str, Any]:
    """fn over the grid in blocks of rows of about CHUNK_CELLS cells: numpy's temporaries
    (one per common subexpression) stay small however large the grid."""
    step = max(1, CHUNK_CELLS // cols)
    if step >= rows:
        return {k: v for k, v in fn(point).items() if keys is None or k in keys}
    out: dict[str, np.ndarray] = {}
    for lo in range(0, rows, step):
        block = fn({**point, "B": point["B"][lo:lo + step]})
        for key, value in block.items():
            if keys is not None and key not in keys:
                continue
            value = np.broadcast_to(value, (min(step, rows - lo), cols))
            if key not in out:
                out[key] = np.empty((rows, cols), dtype=value.dtype)
            out[key][lo:lo + step] = value
    return out


def _check_grid(overrides: Mapping[str, Any], Bs: list[int], Ns: list[int]) -> None:
    for name in ("B", "N"):
        if name in overrides:
            raise fail(None, f"--set {name} conflicts with the swept {name}",
                       f"drop --set {name}; give its values as a LIST")
    if not Bs or not Ns:
        raise fail(None, "a sweep needs at least one B and one N", LIST_HINT)
    if len(Bs) * len(Ns) > MAX_CELLS:
        raise fail(None, f"{len(Bs):,} x {len(Ns):,} points is more than {MAX_CELLS:,} "
                   "(MAX_CELLS)", "use a geometric range (a..b:x2) or a coarser step (a..b:+64)")


def _check_over(overrides: Mapping[str, Any], over: tuple[str, list[int]], cells: int) -> None:
    """The extra axis must be a free input, and all its grids together stay in MAX_CELLS."""
    name, values = over
    if name in ("B", "N"):
        raise fail(None, f"--over {name}: sweep it with --{name}")
    if name in overrides:
        raise fail(None, f"--set {name} conflicts with --over {name}", f"drop --set {name}")
    if cells * len(values) > MAX_CELLS:
        raise fail(None, f"{cells * len(values):,} points is more than {MAX_CELLS:,} "
                   "(MAX_CELLS)", "fewer --over values or a coarser grid")


def within_trained_context(analysis: "Analysis | Runner", overrides: Mapping[str, Any],
                           Ns: list[int]) -> list[int]:
    """The contexts of a built-in grid the model was trained for: N + T <= trained_context
    (a prompt N in prefill). Lists a user gives are checked, never clipped."""
    trained = analysis.model.trained_context
    if trained is None:
        return Ns
    values = {i.name: float(i.value) for i in analysis.inputs(overrides)}
    limit = float(trained.xreplace({s: values[s.name] for s in trained.free_symbols}))
    new = values.get("T", 1.0) if analysis.forms.phase == "decode" else 0.0
    return [n for n in Ns if n + new <= limit] or Ns[:1]


def parse_over(text: str, limit: int = MAX_VALUES, limit_name: str = "MAX_VALUES"
               ) -> tuple[str, list[int]]:
    """`--over tp=1,2,4,8` -> ("tp", [1, 2, 4, 8]): any whole-numbered input as an axis."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise fail(None, f"--over {text!r}: expected NAME=LIST", "e.g. --over tp=1,2,4,8")
    return name.strip(), parse_list(values, name.strip(), limit, limit_name)


def sweep(analysis: "Analysis | Runner", overrides: Mapping[str, Any], Bs: list[int],
          Ns: list[int], metric: str = "tokens_per_s") -> Sweep:
    """Evaluate one metric (a step or memory key, or `bound`) on the B x N grid."""
    return sweep_over(analysis, overrides, Bs, Ns, metric)[0]


def sweep_over(analysis: "Analysis | Runner", overrides: Mapping[str, Any], Bs: list[int],
               Ns: list[int], metric: str = "tokens_per_s",
               over: tuple[str, list[int]] | None = None) -> list[Sweep]:
    """One B x N Sweep per value of `over` (a single one without it); each grid in one
    vectorised evaluation."""
    key = resolve_metric(metric)
    if over:
        _check_over(overrides, over, len(Bs) * len(Ns))
    grids = [{**overrides, over[0]: v} for v in over[1]] if over else [overrides]
    return [_sweep_one(analysis, fixed, Bs, Ns, key) for fixed in grids]


def _sweep_one(analysis: "Analysis | Runner", overrides: Mapping[str, Any], Bs: list[int],
               Ns: list[int], key: str) -> Sweep:
    needed = {f"bound.{k}" for k in BOUND_TERMS} | {"step.time_s"} if key == "bound" else {key}
    inputs, values = grid_values(analysis, overrides, Bs, Ns,
                                 frozenset(needed | {"memory.fits"}))
    shape = (len(Bs), len(Ns))
    cells = step_bound(values) if key == "bound" else values[key]
    return Sweep(key, np.asarray(Bs), np.asarray(Ns), _full(cells, shape),
                 _full(values["memory.fits"], shape).astype(bool), inputs)


def _full(array: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A form that ignores B or N comes back smaller; spread it over the grid."""
    return np.broadcast_to(np.asarray(array), shape)
