"""Elasticities of the step time: d ln t / d ln x for every input x, exact from the forms.

The step time is a sum over ops of count * Max(its time terms). At a point
each Max is one of its arguments (the op's binding term), and the sum is differentiable
there, so the derivative is the derivative of the sum of the binding terms (sympy.diff),
evaluated exactly with the inputs as rationals. An elasticity e means: 1% more x gives
e% more time; a 10% faster link (x * 1.1) changes the time by about e * ln(1.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from infest.compiler.core.symbols import sym
from infest.compiler.core.terms import TIME_TERMS

if TYPE_CHECKING:
    from infest.compiler.api import Analysis
    from infest.compiler.backend.runner import Input

# An op's bound label -> the time term it names ("activations" is memory time too).
_TERM_OF = {label: t.key for t in TIME_TERMS for label in t.bounds} | {"activations": "t_memory_s"}


@dataclass(frozen=True)
class Elasticity:
    """How the step time responds to one input at the point."""

    name: str
    value: float           # d ln t / d ln x
    halving_gain: float    # fraction of the step saved if x is halved (<0: time grows)


def binding_time(analysis: "Analysis", result: dict) -> sympy.Expr:
    """The step time as the sum of each op's binding term at this point (no Max left)."""
    bound = {op["name"]: op["bound"] for op in result["ops"]}  # idle collectives are absent
    terms = [forms["count"] * forms[_TERM_OF[bound[node.name]]]
             for node, forms in zip(analysis.forms.model.ops, analysis.forms.ops)
             if node.name in bound]
    return sympy.Add(*terms)


def elasticities(analysis: "Analysis", inputs: list["Input"], result: dict) -> list[Elasticity]:
    """Every input's elasticity, largest magnitude first (zeros left out)."""
    time = binding_time(analysis, result)
    point = {sym(i.name): sympy.Rational(i.value.numerator, i.value.denominator) for i in inputs}
    t0 = time.xreplace(point)
    out = []
    for i in inputs:
        x = sym(i.name)
        if x not in time.free_symbols:
            continue
        e = float((sympy.diff(time, x) * x / time).xreplace(point))
        if e:
            out.append(Elasticity(i.name, e, _halving_gain(time, x, point, t0)))
    return sorted(out, key=lambda el: (-abs(el.value), el.name))  # ties: by name


def _halving_gain(time: sympy.Expr, x: sympy.Symbol, point: dict, t0: sympy.Expr) -> float:
    """1 - t(x/2)/t(x) with the binding terms held (exact; a what-if, not a derivative)."""
    halved = dict(point)
    halved[x] = point[x] / 2
    return float(1 - time.xreplace(halved) / t0)


def as_json(items: list[Elasticity]) -> list[dict]:
    """[{input, elasticity, halving_gain}] in rank order."""
    return [{"input": e.name, "elasticity": e.value, "halving_gain": e.halving_gain}
            for e in items]
