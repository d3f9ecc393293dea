"""Hypothesis generators for the compiler-side attacks of issue #8: layer bombs, huge
counts, `--set` values that break constraints, towers of powers. Each example either
evaluates to finite numbers or raises a located SpecError, within a time limit."""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from infest.compiler.core import elaborate
from infest.compiler.api import Analysis, analyze, load_model
from infest.dsl.errors import SpecError
from limits import time_limit

MODELS = Path(__file__).parents[1] / "specs" / "models"
FAST = settings(derandomize=True, deadline=None, max_examples=20,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _finite_or_null(result: dict) -> None:
    """Every number evaluated is finite; only max_batch, engine_max_batch and max_context
    may be null (memory never bounds them)."""
    for section in ("memory", "step"):
        for key, value in result[section].items():
            if value is None:
                assert key in ("max_batch", "engine_max_batch", "max_context"), (section, key)
            elif not isinstance(value, (bool, str)):
                assert math.isfinite(value), (section, key, value)


def _compiles_or_reports(path: Path, overrides: dict[str, Any] | None = None,
                         seconds: int = 10) -> None:
    with time_limit(seconds):
        try:
            result = analyze(path, hw="h100_sxm").evaluate(overrides or {})
        except SpecError as exc:
            assert exc.diagnostics and str(exc)
        else:
            _finite_or_null(result)


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fuzz.arch"
    path.write_text("model m {\n" + body + "\n}\n")
    return path


# ---- layer bombs -------------------------------------------------------------------

@FAST
@given(depth=st.integers(1, 25), fanout=st.integers(1, 3))
def test_layer_bombs_stop_at_the_op_limit(tmp_path, monkeypatch, depth, fanout):
    monkeypatch.setattr(elaborate, "MAX_OPS", 200)  # the same check, reached sooner
    lines = ["hidden = 8", "layer l0(x) { y = linear(x, hidden -> hidden) }"]
    for k in range(1, depth + 1):
        calls = "; ".join(f"a{i} = l{k - 1}({'x' if i == 0 else f'a{i - 1}'})"
                          for i in range(fanout))
        lines.append(f"layer l{k}(x) {{ {calls} }}")
    path = _write(tmp_path, "\n".join(lines + ["x = embed(tokens, 10 -> hidden)",
                                                f"z = l{depth}(x)"]))
    try:
        with time_limit(10):
            model = load_model(path)  # the elaborated ops (analyze adds collectives)
    except SpecError as exc:
        assert fanout ** depth + 1 > 200 and "MAX_OPS" in str(exc)
    else:
        assert len(model.ops) == fanout ** depth + 1 <= 200


# ---- huge counts and literals ------------------------------------------------------

_NUMBERS = st.one_of(st.integers(-5, 10**40).map(str),
                     st.fractions(-100, 10**6, max_denominator=1000).map(
                         lambda f: f"{f.numerator} / {f.denominator}"),
                     st.sampled_from(["1e30", "1e31", "2^53", "2^54", "0", "0.5", "1e-30"]))


@FAST
@given(count=_NUMBERS, width=_NUMBERS, kernels=_NUMBERS)
def test_huge_counts_and_widths(tmp_path, count, width, kernels):
    body = f"""w = {width}
  x = embed(tokens, 10 -> 8)
  repeat {count} {{ y = linear(x, 8 -> w, kernels = {kernels}) }}"""
    _compiles_or_reports(_write(tmp_path, body))


# ---- --set values that break constraints -------------------------------------------

@lru_cache(maxsize=None)
def _shipped(name: str) -> Analysis:
    return analyze(MODELS / f"{name}.arch", hw="h200_sxm")


_SET_VALUES = st.one_of(st.integers(1, 10**6), st.fractions(1 / 64, 10**4, max_denominator=64),
                        st.sampled_from([10**29, 10**30, 3, 7, 12.5]))


@settings(derandomize=True, deadline=None, max_examples=40)
@given(model=st.sampled_from(["gpt_oss_20b", "qwen3_30b_a3b", "deepseek_v3"]),
       sets=st.dictionaries(st.sampled_from(["layers", "top_k", "experts", "heads", "hidden",
                                             "kv_heads", "head_dim", "window", "B", "N"]),
                            _SET_VALUES, min_size=1, max_size=3))
def test_set_values_evaluate_or_fail_located(model, sets):
    analysis = _shipped(model)
    with time_limit(10):
        try:
            result = analysis.evaluate(sets)
        except SpecError as exc:
            assert exc.diagnostics and str(exc)
        else:
            _finite_or_null(result)


# ---- towers of powers --------------------------------------------------------------

_ATOMS = st.sampled_from(["hidden", "B", "N", "2", "64", "1.0001", "10^30", "p"])


@st.composite
def towers(draw: st.DrawFn, depth: int = 4) -> str:
    """A random expression of powers, products and sums over params and literals."""
    if depth == 0 or draw(st.booleans()):
        return draw(_ATOMS)
    op = draw(st.sampled_from(["^", "^", "*", "+", "/"]))
    return f"({draw(towers(depth - 1))}) {op} ({draw(towers(depth - 1))})"


@FAST
@given(first=towers(), second=towers())
def test_towers_of_powers(tmp_path, first, second):
    body = f"""hidden = 64
  p = {first}
  q = {second}
  x = embed(tokens, 10 -> 8)
  y = custom(x, flops = p + q)"""
    _compiles_or_reports(_write(tmp_path, body), seconds=15)
