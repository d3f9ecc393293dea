"""Evaluated values must be finite real numbers: never a silent `null`, `inf` or `nan`.

A spec can be fine at its defaults and still divide by zero, take the square root of a
negative number or overflow at other inputs (`--set heads=32` with `x = 1 / (heads - 32)`).
numpy returns inf or nan there; this check turns the first such value into a located
error naming the op (or memory/step key) and the inputs it depends on.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import sympy

from infest.compiler.constraints import format_value
from infest.dsl.errors import fail

# +inf here means "unbounded by the KV cache" (no KV cache, or every layer windowed).
UNBOUNDED_KEYS = frozenset({"memory.max_batch", "memory.max_context"})


def check_finite(layout: list[tuple[str, sympy.Expr]], values: Mapping[str, Any],
                 ops: list[Any], point: Mapping[str, Any]) -> None:
    """Raise SpecError at the first value that is not a finite real number (ops first).

    `layout` pairs each flat key of `values` with its form; `ops` are the model's OpNodes
    (for names and spans); `point` maps input names to the floats or arrays evaluated."""
    forms = dict(layout)
    for key in sorted(values, key=lambda k: not k.startswith("ops.")):
        value = np.asarray(values[key])
        if value.dtype == bool:
            continue
        value = value.astype(float)  # huge integer constants come back as Python ints
        bad = ~np.isfinite(value)
        if key in UNBOUNDED_KEYS:
            bad &= ~np.isposinf(value)
        if bad.any():
            raise _error(key, forms[key], value, bad, ops, point)


def _error(key: str, form: sympy.Expr, value: np.ndarray, bad: np.ndarray, ops: list[Any],
           point: Mapping[str, Any]):
    index = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    got = float(value[index])
    section, _, rest = key.partition(".")
    span, what = None, f"{section} {rest}"
    if section == "ops":
        i, _, rest = rest.partition(".")
        span, what = ops[int(i)].span, f"op '{ops[int(i)].name}': {rest}"
    used = {s.name for s in form.free_symbols}
    shape = bad.shape
    at = ", ".join(f"{n}={format_value(np.broadcast_to(np.asarray(v, float), shape)[index])}"
                   for n, v in point.items() if n in used)
    why = "undefined (0/0, or the square root of a negative number?)" if np.isnan(got) \
        else "infinite (division by zero, or an overflow?)"
    return fail(span, f"{what} is not finite at {at or 'these inputs'}: {why}",
                "change the inputs (--set) or the spec so the expression stays finite")
