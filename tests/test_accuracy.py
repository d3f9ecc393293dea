"""bench/accuracy.py runs (issue #22, item 4): in its quick mode (no leave-one-out fit) it
evaluates every public measurement, exits 0 (no row beats its overlap floor), and the
docs/accuracy.md table is what it prints, so neither can rot."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _accuracy():
    """bench/accuracy.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "bench" / "accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_mode_runs_and_no_row_beats_its_floor(capsys) -> None:
    accuracy = _accuracy()
    assert accuracy.main(["--quick", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| server | model | GPU |") and "floor/measured: median" in out
    for r in accuracy.evaluate(quick=True):
        # overlap floor <= serial-kernel bound <= estimate, and the floor under the measurement
        assert r["floor"] <= r["bound"] * (1 + 1e-12) <= r["estimate"] * (1 + 1e-12)
        assert r["floor"] <= r["row"].step_s, r["row"].span


def test_readme_table_is_the_scripts_output(capsys) -> None:
    accuracy = _accuracy()
    rows = accuracy.table_rows(accuracy.evaluate(quick=True))
    readme = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    table = readme[readme.index("| server | model | GPU |"):].split("\n\n")[0].splitlines()[2:]
    assert len(table) == len(rows)
    for line, row in zip(table, rows):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:-1] == row[:-1]      # every column but the leave-one-out one
