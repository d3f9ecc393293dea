"""`infest calibrate` (issue #14, item 2): measurements made with known efficiencies give
those efficiencies back; the calibrated hardware spec loads and reproduces them; bad
measurement files are located errors."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze, load_hardware
from infest.compiler.analyses.calibrate import read_measurements
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

HEADER = ["spec", "hardware", "tp", "ep", "pp", "dp", "policy", "engine", "phase", "B", "N",
          "T", "step_s", "notes"]
TRUE = {"eff_mem": 0.72, "eff_flops": 0.55, "eff_link": 0.6}
# Memory-bound decode (eff_mem), compute-bound prefill (eff_flops), 8-way tensor parallel
# decode whose all-reduces outlast the launch floor (eff_link).
POINTS = [("llama3_1_8b", "decode", 1, 1, 4096), ("llama3_1_8b", "decode", 1, 64, 1024),
          ("llama3_1_8b", "prefill", 1, 4, 2048), ("llama3_1_8b", "prefill", 1, 1, 8192),
          ("llama3_1_70b", "decode", 8, 1, 1024), ("llama3_1_70b", "decode", 4, 8, 2048),
          ("llama3_1_70b", "prefill", 8, 2, 4096)]


def _synthetic(path: Path, effs: dict, points=POINTS) -> Path:
    """Rows whose step_s is `infest eval`'s estimate at the chosen efficiencies."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for spec, phase, tp, b, n in points:
            step = analyze(spec, hw="h100_sxm", phase=phase).evaluate(
                {"B": b, "N": n, "tp": tp, **effs})["step"]
            w.writerow([spec, "h100_sxm", tp, "", "", "", "", "", phase, b, n,
                        "" if phase == "prefill" else 1, repr(step["estimate_s"]), "synthetic"])
    return path


def _calibrate(capsys, *args: str) -> dict:
    assert main(["calibrate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_recovers_known_efficiencies(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cal.arch"
    r = _calibrate(capsys, str(_synthetic(tmp_path / "m.csv", TRUE)), "--hw", "h100_sxm",
                   "-o", str(out))
    assert r["fitted"] == {"eff_flops": True, "eff_mem": True, "eff_link": True}
    for name, value in TRUE.items():
        assert r["fitted_values"][name] == pytest.approx(value, rel=2e-3)
    assert r["errors"]["worst"] < 1e-3 and r["leave_one_out"]["worst"] < 1e-2
    # The written spec carries the fitted values (4 digits) and reproduces a measurement.
    hw = load_hardware(str(out))
    assert float(hw.fields["eff_mem"].value) == pytest.approx(0.72, rel=1e-3)
    step = analyze("llama3_1_8b", hw=str(out)).evaluate({"B": 1, "N": 4096})["step"]
    assert step["estimate_s"] == pytest.approx(r["rows"][0]["measured_s"], rel=2e-3)


def test_a_coefficient_no_row_depends_on_is_not_fitted(tmp_path: Path, capsys) -> None:
    # One GPU: no collectives, so eff_link stays at its default 0.8 and is not written.
    one_gpu = [p for p in POINTS if p[2] == 1]
    out = tmp_path / "cal.arch"
    r = _calibrate(capsys, str(_synthetic(tmp_path / "m.csv", TRUE, one_gpu)), "--hw",
                   "h100_sxm", "-o", str(out))
    assert r["fitted"]["eff_link"] is False and r["fitted_values"]["eff_link"] == 0.8
    assert r["fitted_values"]["eff_mem"] == pytest.approx(0.72, rel=2e-3)
    assert "eff_link" not in load_hardware(str(out)).fields


def test_rows_of_other_hardware_are_skipped(tmp_path: Path, capsys) -> None:
    path = _synthetic(tmp_path / "m.csv", TRUE, POINTS[:2])
    with path.open("a") as f:
        f.write("llama3_1_8b,h200_sxm,1,,,,,,decode,1,4096,1,0.005,other GPU\n")
    r = _calibrate(capsys, str(path), "--hw", "h100_sxm")
    assert r["skipped_rows"] == 1 and len(r["rows"]) == 2


@pytest.mark.parametrize("row, message", [
    ("llama3_1_8b,h100_sxm,1,,,,,,decode,1,4096,1,-2,x", "a step time is a positive number"),
    ("llama3_1_8b,h100_sxm,1,,,,,,idle,1,4096,1,0.01,x", "phase 'idle': use decode or prefill"),
    ("llama3_1_8b,h100_sxm,1,,,,,,prefill,1,4096,1,0.01,x", "T is empty in prefill"),
    ("llama3_1_8b,h100_sxm,1.5,,,,,,decode,1,4096,1,0.01,x", "tp '1.5': expected a whole number"),
])
def test_bad_rows_name_their_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(",".join(HEADER) + "\n" + row + "\n")
    with pytest.raises(SpecError, match=message) as exc:
        read_measurements(path)
    assert exc.value.diagnostics[0].span.line == 2


def test_missing_column_and_unevaluable_row(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("spec,hardware,B,N\nllama3_1_8b,h100_sxm,1,1\n")
    assert main(["calibrate", str(path), "--hw", "h100_sxm"]) == 1
    assert "lack the column(s) step_s" in capsys.readouterr().err
    # tp = 3 does not divide Llama's 32 heads: the row is named, no traceback.
    path.write_text(",".join(HEADER) + "\nllama3_1_8b,h100_sxm,3,,,,,,decode,1,64,1,0.01,x\n")
    assert main(["calibrate", str(path), "--hw", "h100_sxm"]) == 1
    err = capsys.readouterr().err
    assert "bad.csv:2:1: error: this measurement cannot be evaluated" in err
    assert "Traceback" not in err


def test_refuses_to_overwrite_the_input_hardware(tmp_path: Path, capsys) -> None:
    hw = tmp_path / "mine.arch"
    hw.write_text('hardware h100_sxm "x" {\n  mem_capacity = 80 GB; mem_bw = 3.35 TB/s\n'
                  '  flops_bf16 = 989 TFLOP/s; launch_overhead = 4 us\n}\n')
    path = _synthetic(tmp_path / "m.csv", TRUE, POINTS[:1])
    assert main(["calibrate", str(path), "--hw", str(hw), "-o", str(hw)]) == 1
    assert "would overwrite the hardware spec" in capsys.readouterr().err
