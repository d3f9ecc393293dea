"""The workbook's presentation: rows labelled in words with the key beside, times shown in
ms or us, data validation that refuses what `infest eval` and `serve` refuse, red flags,
and the weight forms as sums of named per-group cells (no mechanical slices)."""
from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from infest.compiler.api import analyze
from infest.compiler.core.keys import RESULT_KEYS, key_label
from infest.compiler.core.symbols import BUILTIN_DOC
from infest.dsl.errors import SpecError
from infest.exports.workbook.xlsx import write_workbook
from libreoffice import recalculate
from workbooks import named_cell

MODELS = Path(__file__).parents[1] / "specs" / "models"


def test_every_result_key_has_a_label() -> None:
    assert all(info.label for info in RESULT_KEYS.values())
    # one key, two meanings: the cache held and the cache read per step
    assert key_label("memory.kv_bytes") != key_label("step.kv_bytes")
    assert key_label("roofline_s") == "step time, serial-kernel bound"


def _rules(wb: openpyxl.Workbook) -> list[tuple[str, str, str]]:
    """(sheet, validated cell, formula) of every custom validation."""
    return [(ws.title, str(dv.sqref), dv.formula1) for ws in wb
            for dv in ws.data_validations.dataValidation if dv.type == "custom"]


def _rule_values(tmp_path: Path, src: Path, edits: dict, soffice: str, tag: str) -> dict:
    """Each custom validation's formula evaluated by LibreOffice in a cell of its own, at
    the workbook's inputs with `edits` typed in: (sheet, cell) -> TRUE/FALSE."""
    wb = openpyxl.load_workbook(src)
    rules = _rules(wb)
    for name, value in edits.items():
        named_cell(wb, name).value = value
    ws = wb.create_sheet("Rules")
    for i, (_, _, formula) in enumerate(rules, start=1):
        ws.cell(i, 1, "=" + formula)
    path = tmp_path / f"{tag}.xlsx"
    wb.save(path)
    out = openpyxl.load_workbook(recalculate(path, tmp_path / tag, soffice=soffice), data_only=True)
    return {(sheet, cell): out["Rules"].cell(i, 1).value
            for i, (sheet, cell, _) in enumerate(rules, start=1)}


def test_validation_refuses_what_eval_and_serve_refuse(tmp_path: Path, soffice: str) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    src = write_workbook(analysis, tmp_path / "book.xlsx", {}, analysis)
    wb = openpyxl.load_workbook(src)
    cell = {n: (named_cell(wb, n).parent.title, named_cell(wb, n).coordinate)
            for n in ("in_N", "in_tp", "in_B", "in_layers", "plan_isl", "plan_osl", "plan_tp")}
    at_defaults = _rule_values(tmp_path, src, {}, soffice, "defaults")
    assert at_defaults and all(v is True for v in at_defaults.values()), at_defaults
    # N = 131,072 + T = 1 past Llama 3.1's 131,072 trained tokens; tp = 3 does not divide
    # its 32 heads; ISL 131,000 + OSL 100 - 1 = 131,099 > 131,072. eval / serve refuse each.
    for bad in ({"N": 131072}, {"tp": 3}):
        with pytest.raises(SpecError):
            analysis.evaluate(bad)
    edited = _rule_values(tmp_path, src, {"in_N": 131072, "in_tp": 3, "plan_isl": 131000,
                                          "plan_osl": 100, "plan_tp": 3}, soffice, "edited")
    refused = {name for name, at in cell.items() if at[1] in _cells(edited, at[0])}
    assert refused == {"in_N", "in_tp", "plan_isl", "plan_osl", "plan_tp"}, refused


def _cells(values: dict, sheet: str) -> set[str]:
    """Cells of a sheet whose rule is FALSE."""
    return {cell for (s, cell), v in values.items() if s == sheet and v is False}


def test_labels_and_keys_side_by_side(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    roof = named_cell(wb, "out_roofline_s")
    summary = wb["Summary"]
    assert summary.cell(roof.row, 1).value == "step time, serial-kernel bound"
    assert summary.cell(roof.row, 7).value == "step.roofline_s"
    n = named_cell(wb, "in_N")
    assert wb["Inputs"].cell(n.row, 1).value == BUILTIN_DOC["N"]
    assert wb["Inputs"].cell(n.row, 6).value == "N"
    est = named_cell(wb, "out_tokens_per_s_estimate")
    assert summary.cell(est.row, 4).number_format == "#,##0"   # thousands separators
    # the estimate's row turns red when the point does not fit, as the bound's does
    red = {str(r.sqref) for r in summary.conditional_formatting}
    assert f"A{est.row}:F{est.row}" in red
    # the Sweep's fits grid: FALSE cells red
    assert any(rule.formula[0].startswith("NOT(") for rng in wb["Sweep"].conditional_formatting
               for rule in rng.rules if rule.dxf and rule.dxf.fill
               and rule.dxf.fill.fgColor.rgb.endswith("FFC7CE"))


def test_times_in_ms_or_us_and_weights_by_group(tmp_path: Path, soffice: str) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    src = write_workbook(analysis, tmp_path / "in.xlsx", {})
    wb = openpyxl.load_workbook(recalculate(src, tmp_path / "out", soffice=soffice), data_only=True)
    ws = wb["Summary"]
    units = set()
    for row in range(2, ws.max_row + 1):
        if ws.cell(row, 3).value != "s":
            continue
        base, shown, unit = (ws.cell(row, c).value for c in (2, 4, 5))
        assert unit == ("ms" if abs(base) >= 1e-3 else "us"), row
        assert shown == pytest.approx(base * (1e3 if unit == "ms" else 1e6), rel=1e-12)
        units.add(unit)
    assert units == {"ms", "us"}   # a 4.6 ms step, a 17 us compute time
    # Held embedding weights by hand: vocab 128,256 x hidden 4,096 x 2 bytes (bf16).
    assert named_cell(wb, "weights_group_embedding").value == 128256 * 4096 * 2
    assert named_cell(wb, "out_weights_bytes").value == sum(
        named_cell(wb, f"weights_group_{g}").value for g in analysis.forms.groups)


@pytest.mark.parametrize("spec", ["deepseek_v3.arch", "kimi_k2.arch"])
def test_moe_weight_forms_are_named_sums_not_slices(tmp_path: Path, spec: str) -> None:
    analysis = analyze(MODELS / spec, hw="h200_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}, analysis))
    assert not [s for s in wb.sheetnames if s == "Helpers" or "_h" in s], wb.sheetnames
    groups = [g for g in analysis.forms.groups if f"weights_group_{g}" in wb.defined_names]
    assert "experts" in groups and "attention" in groups
    assert named_cell(wb, "out_weights_bytes").value == \
        "=" + "+".join(f"weights_group_{g}" for g in groups)
    assert named_cell(wb, "out_weights_bytes_per_gpu").value == \
        "=(" + "+".join(f"weights_gpu_group_{g}" for g in groups) + ")/in_pp"
    assert named_cell(wb, "plan_fits").value == \
        "=plan_weights_bytes_per_gpu+plan_kv_bytes_per_gpu<=base_mem_capacity"
