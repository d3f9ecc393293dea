"""Tests for the closed-form -> numpy code generator (compiler/backend/codegen.py).

Differential: several hundred random expressions (every node kind the Excel printer
test draws) are compiled and compared with sympy's exact value. Structural: shared
sub-expressions are computed once, no spec name reaches the source, and a spec whose
params are named like the generated code's own names evaluates correctly.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import sympy

from infest.compiler.api import analyze
from infest.compiler.backend.codegen import MAX_INLINE_DEPTH, compile_forms, numpy_source
from infest.compiler.backend.generated import check_vocabulary
from random_exprs import INPUTS, _draw_expressions, _exact, _well_conditioned

SYMS = sorted(INPUTS, key=lambda s: s.name)
ARGS = [float(INPUTS[s]) for s in SYMS]
x, y, z = SYMS


def _comparable(expr: sympy.Basic) -> float | None:
    """The exact value when doubles can reproduce it (else None: not compared)."""
    if expr.has(sympy.I, sympy.zoo, sympy.oo, -sympy.oo, sympy.nan):
        return None
    exact = _exact(expr, INPUTS)
    return exact if exact is not None and _well_conditioned(expr, exact) else None


def test_random_expressions_match_sympy():
    cases = [(e, v) for e in _draw_expressions(600) if (v := _comparable(e)) is not None]
    assert len(cases) > 250  # enough survive the filters to mean something
    values = compile_forms(SYMS, [e for e, _ in cases])(*ARGS)
    wrong = [(e, got, want) for (e, want), got in zip(cases, values)
             if not math.isclose(float(got), want, rel_tol=1e-12, abs_tol=1e-300)]
    assert not wrong, wrong[:5]


def test_arrays_broadcast_like_scalars():
    exprs = [sympy.Max(x * y, 3) + sympy.Piecewise((z, x > 2), (y, True)), sympy.ceiling(x / z)]
    fn = compile_forms(SYMS, exprs)
    xs = np.array([1.0, 2.5, 7.0])
    together = fn(xs, ARGS[1], ARGS[2])
    for i, xv in enumerate(xs):
        alone = fn(xv, ARGS[1], ARGS[2])
        assert [float(np.broadcast_to(t, xs.shape)[i]) for t in together] == [float(a) for a in alone]
    # x = 7: max(7 * 45/16, 3) + z = 19.6875 + 0.40625 = 20.09375; ceil(7 / (13/32)) = 18
    assert float(together[0][2]) == 20.09375 and float(together[1][2]) == 18.0


def test_shared_subexpression_is_computed_once():
    shared = sympy.Max(x * y + 1, z)
    source = numpy_source(SYMS, [shared * 2, shared ** 3, shared + x])
    assert source.count("np.maximum") == 1
    assert re.search(r"^    t0 = np\.maximum", source, re.M)


def test_deep_expressions_are_split_into_temporaries():
    deep = x
    # each level a distinct node used once: inline until the cap. 5x the cap's depth is
    # deep enough to need splitting (one line would hold ~120 parentheses, the check allows
    # 72); Max unevaluated, as the compiler builds it on symbolic arguments (sympy's own
    # Max compares every pair of arguments, which made this test take 20 s).
    for i in range(5 * MAX_INLINE_DEPTH):
        deep = sympy.Max(deep, i, evaluate=False) * y if i % 2 else deep + i
    source = numpy_source(SYMS, [deep])
    assert max(line.count("(") for line in source.splitlines()) <= 3 * MAX_INLINE_DEPTH
    assert float(compile_forms(SYMS, [deep])(*ARGS)[0]) > 0


def test_generated_source_refuses_foreign_names():
    check_vocabulary("def forms(a0):\n    t0 = np.maximum(a0, 1)\n    return (t0,)\n")
    with pytest.raises(ValueError, match="__import__"):
        check_vocabulary("def forms(a0):\n    return (__import__(a0),)\n")
    with pytest.raises(ValueError, match="__class__"):
        check_vocabulary("def forms(a0):\n    return (a0.__class__,)\n")
    with pytest.raises(ValueError, match="character"):  # no strings, no comments
        check_vocabulary("def forms(a0):\n    return ('os',)\n")


def test_params_named_like_generated_code(tmp_path: Path):
    """a0, t0, np, nan, select: fine as param names (the source never uses them)."""
    spec = tmp_path / "m.arch"
    spec.write_text("model m {\n  a0 = 3\n  t0 = 5\n  np = 7\n  nan = 2\n  select = 11\n"
                    "  x = embed(tokens, 10 -> 4)\n"
                    "  y = custom(x, flops = B * T * (a0 * t0 + np * nan + select))\n}\n")
    result = analyze(spec, hw="h100_sxm").evaluate({"B": 2})
    # custom: 2 sequences x 1 token x (3*5 + 7*2 + 11 = 40) = 80 FLOPs; embed: none
    assert [op["flops"] for op in result["ops"]] == [0, 80]
    source = numpy_source([sympy.Symbol(n) for n in ("a0", "np")], [sympy.Symbol("np") + 1])
    assert source.endswith("return (1 + a1,)\n")  # the param np is argument a1
