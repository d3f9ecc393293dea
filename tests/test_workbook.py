"""Workbooks recalculated by real LibreOffice equal `infest eval`, before and after
inputs are changed in the file (the live part), with no error cell anywhere."""
from __future__ import annotations

import math
from pathlib import Path

import openpyxl
import pytest

from infest.compiler.api import analyze
from infest.exports.libreoffice import recalculate
from infest.exports.xlsx import check_excel_name, write_workbook

ROOT = Path(__file__).parents[1]
MODELS = ROOT / "specs" / "models"


def _recalculated(tmp_path: Path, analysis, edits: dict[str, float], soffice: str) -> openpyxl.Workbook:
    """Write, change input cells like a planner would, recalculate in LibreOffice."""
    (tmp_path / "in").mkdir()  # write_workbook no longer creates missing folders
    src = write_workbook(analysis, tmp_path / "in" / "book.xlsx", {})
    if edits:
        wb = openpyxl.load_workbook(src)
        for name, value in edits.items():
            _cell(wb, f"in_{name}").value = value
        wb.save(src)
    return openpyxl.load_workbook(recalculate(src, tmp_path / "out", soffice=soffice),
                                  data_only=True)


def _cell(wb: openpyxl.Workbook, name: str):
    sheet, ref = wb.defined_names[name].attr_text.split("!")
    return wb[sheet.strip("'")][ref.replace("$", "")]


def _assert_close(got, want, key: str) -> None:
    if isinstance(want, bool) or isinstance(want, str):
        assert got == want, key
    elif want is None or not math.isfinite(want):
        return
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300), key


def _no_error_cells(wb: openpyxl.Workbook) -> list:
    """Error values, except the #N/A the charts' grids hold on purpose (points that do
    not fit: a chart leaves #N/A out)."""
    charts = _chart_rows(wb["Sweep"])
    return [(ws.title, c.coordinate, c.value) for ws in wb for row in ws.iter_rows()
            for c in row if isinstance(c.value, str)
            and (c.value.startswith("#") or c.value.startswith("Err:"))
            and not (ws.title == "Sweep" and c.row in charts and c.value == "#N/A")]


def _chart_rows(ws) -> set[int]:
    """Rows of the Sweep sheet's chart-data grids: from their title to the next blank."""
    rows: set[int] = set()
    for cell in ws["A"]:
        if isinstance(cell.value, str) and cell.value.startswith("chart data"):
            rows.update(range(cell.row, cell.row + 12))
    return rows


CASES = [
    ("llama3_1_8b.arch", "h100_sxm", "decode", {}),
    ("llama3_1_8b.arch", "h100_sxm", "decode", {"B": 48, "N": 30000, "mem_bw": 2.5}),
    ("llama3_1_8b.arch", "h200_sxm", "prefill", {"B": 3, "N": 8192}),
    ("qwen3_30b_a3b.arch", "gh200", "decode", {"B": 64, "N": 16384, "top_k": 4}),
    # Layouts edited in the workbook: tp and pp (tp x pp = 16 > 8 per node: the network).
    ("llama3_1_8b.arch", "h100_sxm", "decode", {"tp": 8, "pp": 2, "B": 16}),
    ("qwen3_30b_a3b.arch", "h200_sxm", "decode", {"tp": 4, "ep": 4, "B": 8}),
]


@pytest.mark.parametrize("spec,hw,phase,edits", CASES,
                         ids=["llama-defaults", "llama-edited", "llama-prefill", "qwen3-moe",
                              "llama-tp8-pp2", "qwen3-tp4-ep4"])
def test_workbook_equals_eval(tmp_path: Path, soffice: str, spec: str, hw: str, phase: str,
                              edits: dict) -> None:
    analysis = analyze(MODELS / spec, hw=hw, phase=phase)
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    expected = analysis.evaluate(_base(edits))
    _assert_outputs(wb, expected)
    for name, value in expected["inputs"].items():
        assert _cell(wb, f"in_{name}").value == pytest.approx(value / HUMAN.get(name, 1), rel=1e-12)
        if name in HUMAN:  # the base-unit cell the formulas use
            assert _cell(wb, f"base_{name}").value == pytest.approx(value, rel=1e-12)


def _assert_outputs(wb: openpyxl.Workbook, expected: dict) -> None:
    """Every memory and step key equals eval's; no error cell anywhere."""
    assert _no_error_cells(wb) == []
    for section in ("memory", "step"):
        for key, want in expected[section].items():
            name = "out_step_kv_bytes" if (section, key) == ("step", "kv_bytes") else f"out_{key}"
            _assert_close(_cell(wb, name).value, want, key)


# Inputs typed in human units: base units per unit (TB/s, GB, us, TFLOP/s).
HUMAN = {"mem_bw": 1e12, "link_bw": 1e12, "net_bw": 1e12, "host_bw": 1e12,
         "mem_capacity": 1e9, "host_capacity": 1e9, "launch_overhead": 1e-6,
         "link_latency": 1e-6, "net_latency": 1e-6, "flops_bf16": 1e12, "flops_fp8": 1e12}


def _base(edits: dict) -> dict:
    """Workbook edits (human units) as eval's --set values (base units)."""
    return {k: v * HUMAN.get(k, 1) for k, v in edits.items()}


def test_sweep_cells_equal_eval(tmp_path: Path, soffice: str) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = _recalculated(tmp_path, analysis, {}, soffice)
    ws = wb["Sweep"]
    header = 3  # N values across row 3, B values down column A (tokens/s grid)
    # (12, 8): N = 65536; the last column's N = 131072 (+ T) is past the trained context,
    # which eval refuses
    for row, col in [(4, 2), (7, 5), (12, 8)]:
        point = {"B": ws.cell(row, 1).value, "N": ws.cell(header, col).value}
        want = analysis.evaluate(point)["step"]["tokens_per_s"]
        assert ws.cell(row, col).value == pytest.approx(want, rel=1e-9)


def test_every_name_is_a_valid_excel_name(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    names = list(wb.defined_names)
    assert all(check_excel_name(n) == n for n in names)
    assert {"in_B", "in_N", "in_T", "in_hidden", "in_mem_bw", "out_time_s", "out_fits",
            "out_max_batch", "out_bound"} <= set(names)


@pytest.mark.parametrize("name", ["B1", "H100", "fp8", "R", "C", "R1C1", "1x", "a b"])
def test_cell_like_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_excel_name(name)


def test_formula_cells_carry_their_symbolic_form(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    cell = _cell(wb, "out_kv_bytes")
    assert cell.value.startswith("=") and "in_B" in cell.value and "in_N" in cell.value
    # The cache held: 2 (K, V) * layers * kv_heads * head_dim (hidden/heads) * 2 bytes per
    # token, for B sequences of N + T tokens.
    assert cell.comment.text == "4*B*hidden*kv_heads*layers*(N + T)/heads"


def test_graphs_engine_workbook_keeps_launch_overhead_a_live_input(tmp_path: Path, soffice: str) -> None:
    # --engine graphs: fused kernels (227 for Llama 3.1 8B), launch_overhead 1.5 us by
    # default; a planner sets 1 us and LibreOffice gives eval's numbers at that value.
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm", engine="graphs")
    edits = {"launch_overhead": 1, "B": 4}  # 1 us
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    expected = analysis.evaluate(_base(edits))
    assert _no_error_cells(wb) == []
    assert _cell(wb, "out_kernels").value == 227
    assert _cell(wb, "out_t_launch_s").value == pytest.approx(227 * 1e-6)  # 227 us
    for key in ("time_s", "act_bytes", "roofline_s"):
        _assert_close(_cell(wb, f"out_{key}").value, expected["step"][key], key)
