"""Evaluated values must be finite real numbers: never a silent `null`, `inf` or `nan`.

A spec can be fine at its defaults and still divide by zero, take the square root of a
negative number or overflow at other inputs (`--set heads=32` with `x = 1 / (heads - 32)`).
numpy returns inf or nan there; this check turns the first such value into a located
error naming the op (or memory/step key) and the inputs it depends on.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.core.constraints import format_value
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner

# +inf here means "unbounded by the KV cache" (no KV cache, or every layer windowed).
UNBOUNDED_KEYS = frozenset({"memory.max_batch", "memory.engine_max_batch", "memory.max_context"})


def check_finite(runner: "Runner", values: Mapping[str, Any],
                 point: Mapping[str, Any]) -> None:
    """Raise SpecError at the first value that is not a finite real number (ops first).

    `values` are what the runner computed at `point` (input names to the floats or
    arrays evaluated); the runner names the ops and the inputs each value depends on."""
    for key in sorted(values, key=lambda k: not k.startswith("ops.")):
        value = np.asarray(values[key])
        if value.dtype == bool:
            continue
        value = value.astype(float)  # huge integer constants come back as Python ints
        bad = ~np.isfinite(value)
        if key in UNBOUNDED_KEYS:
            bad &= ~np.isposinf(value)
        if bad.any():
            raise _error(runner, key, value, bad, point)


def _error(runner: "Runner", key: str, value: np.ndarray, bad: np.ndarray,
           point: Mapping[str, Any]):
    index = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    got = float(value[index])
    section, _, rest = key.partition(".")
    span, what = None, f"{section} {rest}"
    if section == "ops":
        i, _, rest = rest.partition(".")
        op = runner.ops[int(i)]
        span, what = op.span, f"op '{op.name}': {rest}"
    used = runner.used_names(key)
    shape = bad.shape
    at = ", ".join(f"{n}={format_value(np.broadcast_to(np.asarray(v, float), shape)[index])}"
                   for n, v in point.items() if n in used)
    why = "undefined (0/0, or the square root of a negative number?)" if np.isnan(got) \
        else "infinite (division by zero, or an overflow?)"
    return fail(span, f"{what} is not finite at {at or 'these inputs'}: {why}",
                "change the inputs (--set) or the spec so the expression stays finite")
