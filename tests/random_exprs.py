"""Random closed-form expressions shared by the printer tests (Excel and numpy code).

Every node kind the printers map, drawn derandomised so each run sees the same set;
exact values from sympy at exact-double inputs, and a filter for expressions whose
double arithmetic cannot reproduce the exact value (so a mismatch is the printer's).
"""
from __future__ import annotations

import math
import operator
from fractions import Fraction

import sympy
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sympy import Rational as R

x, y, z = sympy.symbols("x y z", positive=True)

INPUTS = {x: Fraction(11, 8), y: Fraction(45, 16), z: Fraction(13, 32)}  # exact doubles
MAX_SYMS = [sympy.Symbol(f"s{i:03d}", positive=True) for i in range(300)]
MAX_INPUTS = {s: Fraction((i * 37) % 301 + 1, 4) for i, s in enumerate(MAX_SYMS)}

_leaves = st.one_of(
    st.sampled_from([x, y, z]),
    st.integers(-9, 9).map(sympy.Integer),
    st.builds(R, st.integers(-9, 9), st.integers(1, 9)),
    st.sampled_from([0.1, 2.5, 1.5e20, 3.25e-7, 1e16]).map(sympy.Float),
)
_exponents = st.sampled_from([2, 3, -1, -2, R(1, 2), R(1, 3), R(-1, 2), R(2, 3)])
_relations = st.sampled_from([sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge, sympy.Eq, sympy.Ne])


def _piecewise(a, b, c, d, rel, fallback):
    """A two-piece IF; without fallback, unmatched values are undefined."""
    pieces = [(a, rel(c, d))]
    return sympy.Piecewise(*pieces, (b, True) if fallback else (b, rel(d, c)))


def _tolerant(build):
    """``build`` that yields nan where sympy refuses its arguments (Max(I, 1)...)."""
    def safe(*args):
        try:
            return build(*args)
        except (ValueError, TypeError, ArithmeticError):
            return sympy.nan
    return safe


def _extend(kids):
    """One more layer of operators over ``kids``: every node kind the printer maps."""
    def node(build, *args):
        return st.builds(_tolerant(build), *args)
    return st.one_of(
        node(operator.add, kids, kids),
        node(operator.sub, kids, kids),
        node(operator.mul, kids, kids),
        node(operator.truediv, kids, kids),
        node(operator.neg, kids),
        node(sympy.Pow, kids, _exponents),
        # No float exponents: sympy would raise 2.8125 to 1e16 exactly.
        node(sympy.Pow, st.sampled_from([x, y, z]),
             kids.filter(lambda e: not e.has(sympy.Float))),
        node(sympy.Max, kids, kids, kids),
        node(sympy.Min, kids, kids),
        node(sympy.floor, kids),
        node(sympy.ceiling, kids),
        node(_piecewise, kids, kids, kids, kids, _relations, st.booleans()),
        node(sympy.log, kids),
        # No towers of exp and no exp of floats: those evaluate to floats with
        # astronomically large exponents, which later exact arithmetic chokes on.
        node(sympy.exp, kids.filter(lambda e: not e.has(sympy.exp, sympy.Float))),
        node(sympy.sqrt, kids),
        node(sympy.Abs, kids),
        node(sympy.Mod, kids, kids),
    )


EXPRESSIONS = st.recursive(_leaves, _extend, max_leaves=12)


def _draw_expressions(count: int) -> list[sympy.Basic]:
    """Several hundred distinct expressions, the same on every run (derandomised)."""
    drawn: dict[sympy.Basic, None] = {}

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(EXPRESSIONS)
    def collect(expr):
        drawn[expr] = None

    collect()
    return list(drawn)


def _exact(expr: sympy.Basic, inputs) -> float | None:
    """sympy's value at the inputs, or None if non-finite, complex or extreme."""
    try:
        value = expr.xreplace({s: R(v.numerator, v.denominator) for s, v in inputs.items()})
        value = value.evalf(40)
    except (ValueError, TypeError, ArithmeticError):  # e.g. Max(zoo, 1) at a pole
        return None
    if not value.is_Number or not value.is_finite:
        return None
    result = float(value)
    if not math.isfinite(result) or abs(result) > 1e100 or 0 < abs(result) < 1e-100:
        return None
    return result


def _well_conditioned(expr: sympy.Basic, exact: float) -> bool:
    """Whether plain double arithmetic reproduces the exact value to 1e-12.

    Expressions that lose digits in doubles (cancellation, floor of a value a
    hair from an integer) would make any spreadsheet differ from sympy for
    reasons unrelated to the printer, so they are left out.
    """
    if not all(_mod_in_range(mod) for mod in expr.atoms(sympy.Mod)):
        return False
    syms = sorted(INPUTS, key=lambda s: s.name)
    try:
        approx = sympy.lambdify(syms, expr, modules="math")(
            *[float(INPUTS[s]) for s in syms])
        approx = float(approx)
    except (ArithmeticError, ValueError, TypeError):
        return False
    return math.isclose(approx, exact, rel_tol=1e-12, abs_tol=1e-300)


def _mod_in_range(mod: sympy.Mod) -> bool:
    """Whether MOD(n, d) is within what spreadsheets compute reliably.

    Engines compute n - d*INT(n/d) (LibreOffice with 15-digit rounding); Excel
    refuses quotients from 2**27 on (#NUM!), so larger ones are not compared.
    """
    quotient = _exact(mod.args[0] / mod.args[1], INPUTS)
    return quotient is not None and abs(quotient) < 2**27
