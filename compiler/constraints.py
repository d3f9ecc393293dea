"""Conditions on inputs that must hold at every evaluated point (re-checked after --set).

A constraint records what is checked, where it came from (a span, or None for a
command-line layout) and a hint. `check_constraints` evaluates them all, vectorised,
and raises a located SpecError at the first point where one fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import sympy

from infest.dsl.errors import Span, fail

KINDS = ("whole", "positive", "nonnegative", "le", "divides")


@dataclass(frozen=True)
class Constraint:
    """A condition on inputs that must hold at every evaluated point."""

    kind: str            # "whole", "positive", "nonnegative", "le", "divides"
    lhs: sympy.Expr      # the checked quantity (for "le": lhs <= rhs; "divides": lhs | rhs)
    rhs: sympy.Expr | None
    what: str            # e.g. "repeat count", "tp divides heads"
    span: Span | None
    hint: str | None = None


def _holds(c: Constraint, lhs: np.ndarray, rhs: np.ndarray | None) -> np.ndarray:
    """Elementwise: whether the constraint holds (floats; a tiny tolerance for wholes)."""
    if c.kind == "whole":
        return np.abs(lhs - np.round(lhs)) <= 1e-9 * np.maximum(1.0, np.abs(lhs))
    if c.kind == "positive":
        return lhs > 0
    if c.kind == "nonnegative":
        return lhs >= 0
    if c.kind == "le":
        return lhs <= rhs * (1 + 1e-12)
    ratio = rhs / lhs
    return np.abs(ratio - np.round(ratio)) <= 1e-9 * np.maximum(1.0, np.abs(ratio))


def check_constraints(constraints: Sequence[Constraint], names: Sequence[str],
                      values: Mapping[str, Any]) -> None:
    """Raise SpecError (located at the constraint's span) at the first point where one
    fails; `values` maps input names to floats or broadcastable numpy arrays."""
    if not constraints:
        return
    symbols = [sympy.Symbol(n, **_assumptions(n)) for n in names]
    args = [np.asarray(values[n], dtype=float) for n in names]
    for c in constraints:
        exprs = [c.lhs, c.rhs if c.rhs is not None else sympy.Integer(0)]
        lhs, rhs = (np.asarray(v, dtype=float) for v in
                    sympy.lambdify(symbols, exprs, modules="numpy")(*args))
        with np.errstate(all="ignore"):
            ok = np.broadcast_to(_holds(c, lhs, rhs), np.broadcast(*args, lhs, rhs).shape)
        if not ok.all():
            raise _failure(c, names, args, lhs, rhs, ok)


def _assumptions(name: str) -> dict:
    from infest.compiler.symbols import sym
    return sym(name).assumptions0


def _failure(c: Constraint, names, args, lhs, rhs, ok) -> Exception:
    """The first failing point, with the values that broke the constraint."""
    index = np.unravel_index(int(np.argmin(ok.ravel())), ok.shape) if ok.shape else ()
    pick = lambda a: float(np.broadcast_to(a, ok.shape)[index])  # noqa: E731
    point = ", ".join(f"{n}={pick(a):g}" for n, a in zip(names, args)
                      if n in {s.name for s in (c.lhs + (c.rhs or 0)).free_symbols})
    got = f"{pick(lhs):g}" + (f" vs {pick(rhs):g}" if c.rhs is not None else "")
    return fail(c.span, f"{c.what} does not hold ({got}) at {point or 'these inputs'}", c.hint)
