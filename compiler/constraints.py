"""Conditions on inputs that must hold wherever a model is evaluated.

Compile-time checks (whole repeat counts, top_k <= experts, positive widths, ...) see
only the spec's defaults; `--set layers=25` or a sweep can move an input to where they
fail. The elaborator therefore records each such condition, with the span it came from,
as a `Constraint`, and `check_constraints` re-checks all of them, vectorised, at the
evaluated inputs (a single point or a whole sweep grid) and reports the first failure.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy

from infest.dsl.errors import SpecError, Span, fail

KINDS = ("whole", "positive", "nonnegative", "le", "divides")
# Floats carry the exact inputs; a relative slack this small only absorbs rounding.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Constraint:
    """A condition on inputs that must hold at every evaluated point."""

    kind: str            # "whole", "positive", "nonnegative", "le", "divides"
    lhs: sympy.Expr      # the checked quantity (for "le": lhs <= rhs; "divides": lhs | rhs)
    rhs: sympy.Expr | None
    what: str            # e.g. "repeat count", "top_k <= experts", "tp divides heads"
    span: Span | None
    hint: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown constraint kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        if (self.rhs is None) != (self.kind not in ("le", "divides")):
            need = "needs" if self.rhs is None else "takes no"
            raise ValueError(f"a {self.kind!r} constraint {need} rhs")


def check_constraints(constraints: Sequence[Constraint], names: Sequence[str],
                      values: Mapping[str, Any]) -> None:
    """Raise SpecError (located at the constraint's span) at the first point where one
    fails; `values` maps input names to floats or broadcastable numpy arrays."""
    if not constraints:
        return
    fn = _compiled(tuple(constraints), tuple(names))
    with np.errstate(all="ignore"):
        sides = fn(*[np.asarray(values[n], dtype=float) for n in names])
        for i, c in enumerate(constraints):
            lhs, rhs = sides[2 * i], sides[2 * i + 1]
            bad = np.asarray(_FAILS[c.kind](np.asarray(lhs, float), np.asarray(rhs, float)))
            if bad.any():
                raise _error(c, lhs, rhs, bad, names, values)


def constraint_mask(constraints: Sequence[Constraint], names: Sequence[str],
                    values: Mapping[str, Any]) -> np.ndarray:
    """True where every constraint holds (a search skips the other points, no error)."""
    ok = np.asarray(True)
    if not constraints:
        return ok
    fn = _compiled(tuple(constraints), tuple(names))
    with np.errstate(all="ignore"):
        sides = fn(*[np.asarray(values[n], dtype=float) for n in names])
        for i, c in enumerate(constraints):
            lhs, rhs = np.asarray(sides[2 * i], float), np.asarray(sides[2 * i + 1], float)
            ok = ok & ~np.asarray(_FAILS[c.kind](lhs, rhs))
    return ok


@lru_cache(maxsize=32)
def _compiled(constraints: tuple[Constraint, ...], names: tuple[str, ...]) -> Callable:
    """One numpy function returning [lhs0, rhs0, lhs1, rhs1, ...] (rhs 0 when absent)."""
    from infest.compiler.codegen import compile_forms
    from infest.compiler.symbols import sym
    exprs: list[sympy.Expr] = []
    for c in constraints:
        exprs += [c.lhs, c.rhs if c.rhs is not None else sympy.Integer(0)]
    return compile_forms([sym(n) for n in names], exprs)


def _whole_fails(x: np.ndarray) -> np.ndarray:
    return ~np.isfinite(x) | (np.abs(x - np.round(x)) > _TOLERANCE * np.maximum(1, np.abs(x)))


_FAILS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "whole": lambda lhs, _: _whole_fails(lhs),
    "positive": lambda lhs, _: ~(lhs > 0),
    "nonnegative": lambda lhs, _: ~(lhs >= -_TOLERANCE * np.abs(lhs)),
    "le": lambda lhs, rhs: ~(lhs <= rhs + _TOLERANCE * np.abs(rhs)),
    "divides": lambda lhs, rhs: ~(lhs > 0) | _whole_fails(rhs / lhs),
}
_MUST = {"whole": "must be a whole number", "positive": "must be positive",
         "nonnegative": "must be 0 or more", "le": "does not hold", "divides": "does not hold"}


def _error(c: Constraint, lhs: Any, rhs: Any, bad: np.ndarray, names: Sequence[str],
           values: Mapping[str, Any]) -> SpecError:
    """The message at the first failing point: the value and the inputs it depends on."""
    index = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    got = _at(lhs, index, bad.shape)
    value, other = format_value(got), format_value(_at(rhs, index, bad.shape))
    detail = {"le": f" ({value} > {other})", "divides": f" ({value} does not divide {other})"
              }.get(c.kind, f", got {value}")
    if not np.isfinite(got) or not np.isfinite(_at(rhs, index, bad.shape)):
        detail = " but is not finite (a division by zero, or the square root of a negative?)"
    used = {s.name for e in (c.lhs, c.rhs) if e is not None for s in e.free_symbols}
    point = ", ".join(f"{n}={format_value(_at(values[n], index, bad.shape))}"
                      for n in names if n in used)
    where = f" at {point}" if point else ""
    return fail(c.span, f"{c.what} {_MUST[c.kind]}{detail}{where}", c.hint)


def _at(value: Any, index: tuple, shape: tuple) -> float:
    return float(np.broadcast_to(np.asarray(value, dtype=float), shape)[index])


def format_value(x: float) -> str:
    """An input or checked value for a message: 25, not 25.0; 12.5; 1e+29."""
    return str(int(x)) if np.isfinite(x) and x == int(x) and abs(x) < 1e15 else f"{x:.6g}"


def dedupe(constraints: Sequence[Constraint]) -> list[Constraint]:
    """Keep the first of constraints equal but for their span (a layer called twice)."""
    seen: set[tuple] = set()
    out: list[Constraint] = []
    for c in constraints:
        key = (c.kind, c.lhs, c.rhs, c.what)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
