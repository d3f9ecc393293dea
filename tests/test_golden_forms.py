"""Golden closed forms: files of `key = expression` written by hand, compared with the
forms infest derives by symbolic subtraction (so equal forms in another shape pass).
Tests may parse their own golden text with sympy; the product never parses text so."""
from __future__ import annotations

from pathlib import Path

import pytest
import sympy
from sympy.parsing.sympy_parser import parse_expr

from infest.compiler.api import analyze
from infest.compiler.core.symbols import sym
from infest.exports.cli.cmd_compile import substituted_forms

ROOT = Path(__file__).parents[1]
GOLDEN = Path(__file__).parent / "golden"
NAMES = ["B", "N", "T", "mem_bw", "launch_overhead", "flops_bf16", "hidden", "layers", "heads",
         "kv_heads", "ffn", "vocab", "kv_bytes_per_elem"]


def _golden(path: Path) -> list[tuple[str, sympy.Expr]]:
    local = {n: sym(n) for n in NAMES}
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, text = (part.strip() for part in line.split("=", 1))
            rows.append((key, parse_expr(text, local_dict=local)))
    return rows


@pytest.mark.parametrize("name,symbolic", [("llama3_1_8b.decode", False),
                                           ("llama3_1_8b.symbolic", True)])
def test_forms_match_golden(name: str, symbolic: bool) -> None:
    analysis = analyze(ROOT / "specs/models/llama3_1_8b.arch")
    # The golden forms are one GPU's: the layout (tp, ep, pp, dp) at 1.
    one_gpu = {p: 1 for p in ("tp", "ep", "pp", "dp")}
    forms = substituted_forms(analysis, one_gpu, keep_params=symbolic)
    for key, expected in _golden(GOLDEN / f"{name}.forms"):
        assert sympy.simplify(forms[key] - expected) == 0, key
