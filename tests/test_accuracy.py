"""bench/accuracy.py runs (issues #22, #23): in its quick mode (no fit) it evaluates every
public measurement under its engine profile, exits 0 (no row beats its overlap floor), and
docs/accuracy.md's table is what it prints, so neither can rot."""
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
    assert out.startswith("| server | model | GPU |")
    assert "overlap floor / measured: at most" in out and "shipped profiles: median" in out
    results, full, held = accuracy.evaluate(accuracy.prepared(), quick=True)
    assert full is None and held == {}
    for r in results:
        p = r["p"]
        # overlap floor <= serial-kernel bound <= estimate (a run with comm_overlap: floor
        # <= estimate), and the floor under the measurement
        assert p.floor_s <= p.bound_s * (1 + 1e-12)
        assert (p.floor_s if p.row.overlap else p.bound_s) <= r["default"] * (1 + 1e-12)
        assert p.floor_s <= p.row.step_s, p.row.span


def test_docs_table_is_the_scripts_output() -> None:
    accuracy = _accuracy()
    results, _, _ = accuracy.evaluate(accuracy.prepared(), quick=True)
    rows = accuracy.table_rows(results)
    table = accuracy.docs_table()
    assert len(table) == len(rows)
    keep = len(accuracy.HEADERS) - accuracy.FIT_COLUMNS
    for line, row in zip(table, rows):
        assert line[:keep] == row[:keep]      # every column but the fit's


def test_leave_one_out_meets_the_issues_median_target() -> None:
    # Issue #23's target: each public measurement predicted by a fit to the others, median
    # |error| <= 12% (its worst-case target of 40% is not met: docs/accuracy.md says which
    # rows miss it and why). A change to the estimate that loses out-of-sample accuracy
    # fails here. One least-squares fit per row (88), each vectorised: minutes.
    import statistics
    from infest.compiler.analyses import fit as jf
    accuracy = _accuracy()
    rows = accuracy.prepared()
    full = jf.fit_all(rows)
    assert jf.violations(full, jf.pairs_of(rows)) == []
    errors = jf.held_out(rows, jf.HOLD_OUT["leave-one-out"], full)
    assert statistics.median(abs(e) for e in errors) <= 0.12
