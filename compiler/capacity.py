"""Capacity answers: how much fits, how many GPUs, and where the binding ceiling moves.

Every answer comes from the closed forms. With every input but one fixed at its value
(exact rationals), a form becomes a function of B (or N) alone. Where the difference of
two such functions is linear, its root is exact (sympy Poly); otherwise (MoE expert
coverage, sliding windows) a vectorised sign scan on a geometric grid brackets the roots
and a vectorised bisection refines them. Integer answers ("first batch where ...") are
then checked with the same compiled function `infest eval` uses, so they agree with it.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import sympy

from infest.compiler.codegen import compile_forms
from infest.compiler.evaluate import step_bound
from infest.compiler.model import BOUND_TERMS
from infest.compiler.symbols import sym

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

BATCH_LIMIT = 2**24      # search B in [1, 16M]: past any memory that exists today
CONTEXT_LIMIT = 2**30    # search N in [1, 1G tokens]
# Expanding (x + 1)^64 * (x + 2)^64 ... to test linearity costs as much as the degree;
# forms of a higher (or non-polynomial) degree go to the numeric root finder unexpanded.
MAX_EXPAND_DEGREE = 4
X = sympy.Symbol("x", positive=True)  # a real stand-in: B and N are integer symbols,
                                       # and sympy will not return a fractional integer root


def capacity(analysis: "Analysis", overrides: Mapping[str, Any] | None = None) -> dict:
    """max_batch, max_context, gpus_to_hold_weights, bound transitions in B, KV vs weights in N."""
    point = _Point(analysis, overrides or {})
    memory = point.values
    return {
        "max_batch": _int(memory["memory.max_batch"]),
        "max_context": _int(memory["memory.max_context"]),
        "gpus_to_hold_weights": gpus_to_hold_weights(point),
        "bound_transitions": bound_transitions(point),
        "kv_overtakes_weights": kv_overtakes_weights(point),
    }


class _Point:
    """The inputs of one evaluation: exact values for sympy, floats for the compiled form."""

    def __init__(self, analysis: "Analysis", overrides: Mapping[str, Any]) -> None:
        self.analysis, self.forms = analysis, analysis.forms
        self.inputs = analysis.inputs(overrides)
        self.floats = {i.name: float(i.value) for i in self.inputs}
        self.fn = analysis.compiled([i.name for i in self.inputs])
        self.values = self.fn(self.floats)

    def exact(self, free: str | None = None) -> dict[sympy.Symbol, sympy.Expr]:
        """Symbol -> exact value for every input, `free` replaced by the real symbol x."""
        subs: dict[sympy.Symbol, sympy.Expr] = {
            sym(i.name): sympy.Rational(i.value.numerator, i.value.denominator)
            for i in self.inputs}
        if free is not None:
            subs[sym(free)] = X
        return subs

    def at(self, name: str, xs: np.ndarray) -> dict[str, Any]:
        """Every form with input `name` set to each of xs (one vectorised call)."""
        return self.fn({**self.floats, name: np.asarray(xs, dtype=float)})


def _int(value: Any) -> int | None:
    v = float(value)
    return int(v) if math.isfinite(v) else None


def gpus_to_hold_weights(point: _Point) -> int:
    """ceil(weights_bytes / mem_capacity), in exact arithmetic (no float edge at k*M)."""
    subs = point.exact()
    ratio = (point.forms.memory["weights_bytes"] / point.forms.memory["capacity_bytes"])
    return int(sympy.ceiling(ratio.xreplace(subs)))


# ---- the binding ceiling as B grows ------------------------------------------------

def bound_transitions(point: _Point) -> list[dict]:
    """Where, as B grows at this N (and T), the binding ceiling changes.

    Each entry: {"batch": B* (real crossing), "first_batch": smallest whole B with the
    new bound, "from", "to", "fits": whether first_batch fits in memory}.
    """
    terms = {k: point.forms.bound_terms[k].xreplace(point.exact("B")) for k in BOUND_TERMS}
    roots = sorted({r for a, b in _pairs(BOUND_TERMS)
                    for r in crossings(terms[a] - terms[b], 1.0, float(BATCH_LIMIT))})
    edges = [1.0] + roots + [float(BATCH_LIMIT)]
    mids = [math.sqrt(lo * hi) for lo, hi in zip(edges, edges[1:])]
    bounds = step_bound(point.at("B", np.asarray(mids))) if mids else []
    changes = [(roots[i], bounds[i], bounds[i + 1]) for i in range(len(roots))
               if bounds[i] != bounds[i + 1]]
    return [_transition(point, *c) for c in changes]


def _pairs(keys: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]


def _transition(point: _Point, root: float, before: str, after: str) -> dict:
    """The crossing, and the first whole batch at which eval names the new bound."""
    first = _first_whole(root, lambda xs: step_bound(point.at("B", xs)) == after)
    fits = bool(np.asarray(point.at("B", np.asarray([first]))["memory.fits"]).ravel()[0])
    return {"batch": root, "first_batch": first, "from": str(before), "to": str(after),
            "fits": fits}


def _first_whole(root: float, holds: Callable[[np.ndarray], np.ndarray]) -> int:
    """Smallest whole x >= root where `holds`; a tie at an exact integer may go either way."""
    candidates = np.arange(max(1, math.floor(root)), math.floor(root) + 3, dtype=float)
    ok = np.asarray(holds(candidates)).ravel()
    return int(candidates[int(np.argmax(ok))]) if ok.any() else math.ceil(root)


# ---- KV traffic against weight traffic as N grows ----------------------------------

def kv_overtakes_weights(point: _Point) -> dict | None:
    """The context at which a step's KV bytes exceed its weight bytes, at this B (and T).

    {"context": N* (real crossing), "first_context": smallest whole N with kv > weights};
    None when it does not happen for N in [1, CONTEXT_LIMIT].
    """
    step, subs = point.forms.step, point.exact("N")
    diff = (step["kv_bytes"] - step["weight_bytes"]).xreplace(subs)
    roots = [r for r in crossings(diff, 1.0, float(CONTEXT_LIMIT))
             if _rising(point, r)]
    if not roots:
        return None
    first = _first_whole(roots[0], lambda xs: _kv_exceeds(point.at("N", xs)))
    return {"context": roots[0], "first_context": first}


def _kv_exceeds(values: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(values["step.kv_bytes"] > values["step.weight_bytes"])


def _rising(point: _Point, root: float) -> bool:
    """Only a crossing where KV goes from below to above weights counts."""
    xs = np.asarray([max(1.0, root * (1 - 1e-9) - 1e-9), root * (1 + 1e-9) + 1e-9])
    above = np.broadcast_to(_kv_exceeds(point.at("N", xs)), (2,))
    return (not above[0]) and bool(above[1])


# ---- roots of a univariate closed form ----------------------------------------------

def crossings(expr: sympy.Expr, lo: float, hi: float) -> list[float]:
    """Real x in (lo, hi) where expr(x) changes sign: exact if linear, else numeric."""
    if X not in expr.free_symbols:
        return []
    exact = _linear_root(expr)
    if exact is not None:
        return [exact] if lo < exact < hi else []
    forms = compile_forms([X], [expr])
    return _numeric_roots(lambda xs: forms(xs)[0], lo, hi)


def _linear_root(expr: sympy.Expr) -> float | None:
    """-c0/c1 if expr is c1*x + c0 (the dense-model case); None if not linear."""
    degree = polynomial_degree(expr)
    if degree is None or degree > MAX_EXPAND_DEGREE:
        return None
    try:
        poly = sympy.Poly(sympy.expand(expr), X)
    except sympy.PolynomialError:
        return None
    if poly.degree() != 1 or poly.free_symbols - {X}:
        return None
    c1, c0 = poly.all_coeffs()
    return float(-c0 / c1)


def polynomial_degree(expr: sympy.Expr) -> int | None:
    """An upper bound on expr's degree in x without expanding it; None if it is not a
    polynomial in x (x under a function, a symbolic or negative power)."""
    if X not in expr.free_symbols:
        return 0
    if expr == X:
        return 1
    if expr.is_Add or expr.is_Mul:
        degrees = [polynomial_degree(a) for a in expr.args]
        if any(d is None for d in degrees):
            return None
        return max(degrees) if expr.is_Add else sum(degrees)  # type: ignore[arg-type]
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        base = polynomial_degree(expr.base)
        return None if base is None else base * int(expr.exp)
    return None


def _numeric_roots(f: Callable[[np.ndarray], np.ndarray], lo: float, hi: float,
                   samples: int = 4097, iterations: int = 200) -> list[float]:
    """Sign changes of f on a geometric grid, refined by bisection (all brackets at once)."""
    xs = np.geomspace(lo, hi, samples)
    with np.errstate(all="ignore"):
        sign = np.sign(np.broadcast_to(f(xs), xs.shape))
    idx = np.nonzero(sign[:-1] * sign[1:] < 0)[0]
    a, b, sa = xs[idx], xs[idx + 1], sign[idx]
    for _ in range(iterations):
        mid = (a + b) / 2
        with np.errstate(all="ignore"):
            same = np.sign(np.broadcast_to(f(mid), mid.shape)) == sa
        a, b = np.where(same, mid, a), np.where(same, b, mid)
        if np.all(b - a <= 1e-12 * b):
            break
    return [float(x) for x in (a + b) / 2]
