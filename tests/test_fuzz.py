"""Malformed specs never crash or hang: every mutation of a shipped spec either compiles
and evaluates or fails with a located SpecError (never another exception)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from infest.compiler.api import analyze
from infest.dsl.errors import SpecError

LLAMA = (Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch").read_text()
PIECES = ["(", ")", "{", "}", "->", "=", ":", ";", ",", "-", "/", "0", "1e40", "2^99", " GiB",
          "repeat", "group", "model", "x", "B", "N", "linear(", "moe(", "bf61", "#", "\n",
          "\"", "hidden", "/ 0", "-1", "1.5", "min(", "k", "tokens"]


@st.composite
def mutations(draw: st.DrawFn) -> str:
    text = LLAMA
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 12))
        text = text[:at] + draw(st.sampled_from(PIECES + [""])) + text[at + cut:]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mutations())
def test_mutated_spec_compiles_or_reports(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.arch"
    path.write_text(text)
    try:
        result = analyze(path, hw="h100_sxm").evaluate({"B": 2, "N": 100})
    except SpecError as exc:
        assert exc.diagnostics and str(exc)  # located, printable
    else:
        assert result["step"]["time_s"] is None or result["step"]["time_s"] >= 0
