"""Conditions on inputs that must hold wherever a model is evaluated.

Compile-time checks (whole repeat counts, top_k <= experts, positive widths, ...) see
only the spec's defaults; `--set layers=25` or a sweep can move an input to where they
fail. The elaborator therefore records each such condition, with the span it came from,
as a `Constraint`, and `check_constraints` re-checks all of them, vectorised, at the
evaluated inputs (a single point or a whole sweep grid) and reports the first failure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from infest.dsl.errors import SpecError, Span, fail

if TYPE_CHECKING:
    import sympy

KINDS = ("whole", "positive", "nonnegative", "le", "divides")
# Floats carry the inputs; a relative slack this small only absorbs rounding (relative to
# the value itself: 1e-16 is not "almost 0", and 1000000000.5 is not almost whole). At a
# single point the whole and divides checks are also done exactly (`exact_sides`).
_TOLERANCE = 1e-12


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


@dataclass(frozen=True)
class CheckInfo:
    """A constraint as the sympy-free evaluation path keeps it: everything its error
    message needs; its two sides are computed by generated code (constraints_source)."""

    kind: str
    what: str
    hint: str | None
    span: Span | None
    uses: tuple[str, ...]   # the inputs its sides depend on, named in the message


def check_infos(constraints: Sequence[Constraint]) -> tuple[CheckInfo, ...]:
    """The message-side of each constraint."""
    return tuple(CheckInfo(c.kind, c.what, c.hint, c.span,
                           tuple(sorted({s.name for e in (c.lhs, c.rhs) if e is not None
                                         for s in e.free_symbols})))
                 for c in constraints)


def constraints_source(constraints: Sequence[Constraint], names: Sequence[str]) -> str:
    """Generated `def constraints(a0, ...)` returning [lhs0, rhs0, lhs1, rhs1, ...]."""
    import sympy

    from infest.compiler.backend.codegen import numpy_source
    from infest.compiler.core.symbols import sym
    exprs = [e for c in constraints for e in (c.lhs, c.rhs if c.rhs is not None else sympy.Integer(0))]
    return numpy_source([sym(n) for n in names], exprs, name="constraints")


def failing(checks: Sequence[CheckInfo], sides: Sequence[Any],
            values: Mapping[str, Any], exact: Sequence[Any] | None = None) -> SpecError | None:
    """The error for the first constraint that fails somewhere (None if all hold);
    `sides` as constraints_source computes them, `values` the inputs evaluated; `exact`:
    the same sides in exact arithmetic at a single point, where it could be computed."""
    with np.errstate(all="ignore"):
        for i, c in enumerate(checks):
            lhs, rhs = sides[2 * i], sides[2 * i + 1]
            bad = np.asarray(_FAILS[c.kind](np.asarray(lhs, float), np.asarray(rhs, float)))
            if exact is not None and c.kind in _EXACT:
                verdict = _EXACT[c.kind](exact[2 * i], exact[2 * i + 1])
                bad = bad if verdict is None else np.asarray(verdict)
            if bad.any():
                return _error(c, lhs, rhs, bad, values)
    return None


def holds(checks: Sequence[CheckInfo], sides: Sequence[Any]) -> np.ndarray:
    """True where every constraint holds (a search skips the other points, no error)."""
    ok = np.asarray(True)
    with np.errstate(all="ignore"):
        for i, c in enumerate(checks):
            lhs, rhs = np.asarray(sides[2 * i], float), np.asarray(sides[2 * i + 1], float)
            ok = ok & ~np.asarray(_FAILS[c.kind](lhs, rhs))
    return ok


def check_constraints(constraints: Sequence[Constraint], names: Sequence[str],
                      values: Mapping[str, Any]) -> None:
    """Compile and check in one call (SpecError at the first failure): for a few
    constraints outside a model; a Runner keeps the compiled function instead."""
    from infest.compiler.backend.generated import load_functions
    fn = load_functions(constraints_source(constraints, names))["constraints"]
    with np.errstate(all="ignore"):
        sides = fn(*[np.asarray(values[n], dtype=float) for n in names])
    error = failing(check_infos(constraints), sides, values)
    if error is not None:
        raise error


def _whole_fails(x: np.ndarray) -> np.ndarray:
    return ~np.isfinite(x) | (np.abs(x - np.round(x)) > _TOLERANCE * np.abs(x))


def exact_sides(fn: Callable[..., Sequence[Any]], args: Sequence[Any]) -> Sequence[Any] | None:
    """The constraint sides at one point in exact arithmetic (inputs as Fractions), or
    None where the generated code needs floats (a ceil, a log)."""
    from fractions import Fraction
    try:
        return fn(*[Fraction(a) for a in args])
    except Exception:  # noqa: BLE001 -- any function numpy cannot apply to Fractions
        return None


def _exact(x: Any) -> Any:
    """A Fraction for an exact number (int or Fraction), else None."""
    from fractions import Fraction
    if isinstance(x, (int, Fraction)) and not isinstance(x, bool):
        return Fraction(x)
    return None


def _exact_whole(lhs: Any, _: Any) -> bool | None:
    x = _exact(lhs)
    return None if x is None else x.denominator != 1


def _exact_divides(lhs: Any, rhs: Any) -> bool | None:
    x, y = _exact(lhs), _exact(rhs)
    if x is None or y is None:
        return None
    return not (x > 0 and (y / x).denominator == 1)


# Checks that floats decide only up to rounding: decided exactly where the sides are exact.
_EXACT: dict[str, Callable[[Any, Any], bool | None]] = {
    "whole": _exact_whole, "divides": _exact_divides}


_FAILS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "whole": lambda lhs, _: _whole_fails(lhs),
    "positive": lambda lhs, _: ~(lhs > 0),
    "nonnegative": lambda lhs, _: ~(lhs >= -_TOLERANCE * np.abs(lhs)),
    "le": lambda lhs, rhs: ~(lhs <= rhs + _TOLERANCE * np.abs(rhs)),
    "divides": lambda lhs, rhs: ~(lhs > 0) | _whole_fails(rhs / lhs),
}
_MUST = {"whole": "must be a whole number", "positive": "must be positive",
         "nonnegative": "must be 0 or more", "le": "does not hold", "divides": "does not hold"}


def _error(c: CheckInfo, lhs: Any, rhs: Any, bad: np.ndarray,
           values: Mapping[str, Any]) -> SpecError:
    """The message at the first failing point: the value and the inputs it depends on."""
    index = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    got = _at(lhs, index, bad.shape)
    value, other = format_value(got), format_value(_at(rhs, index, bad.shape))
    detail = {"le": f" ({value} > {other})", "divides": f" ({value} does not divide {other})"
              }.get(c.kind, f", got {value}")
    if not np.isfinite(got) or not np.isfinite(_at(rhs, index, bad.shape)):
        detail = " but is not finite (a division by zero, or the square root of a negative?)"
    point = ", ".join(f"{n}={format_value(_at(values[n], index, bad.shape))}"
                      for n in values if n in c.uses)
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
