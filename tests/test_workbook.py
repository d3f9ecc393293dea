"""Workbooks recalculated by real LibreOffice equal `infest eval`, before and after
inputs are changed in the file (the live part), with no error cell anywhere."""
from __future__ import annotations

import math
from pathlib import Path

import openpyxl
import pytest

from infest.compiler.api import analyze
from infest.exports.workbook.book import check_excel_name
from infest.exports.workbook.xlsx import write_workbook
from workbooks import edit_and_recalculate, named_cell

ROOT = Path(__file__).parents[1]
MODELS = ROOT / "specs" / "models"


def _recalculated(tmp_path: Path, analysis, edits: dict[str, float], soffice: str) -> openpyxl.Workbook:
    """Write, change input cells like a planner would (`hw`: the GPU picked in in_hw),
    recalculate in LibreOffice."""
    (tmp_path / "in").mkdir()  # write_workbook no longer creates missing folders
    src = write_workbook(analysis, tmp_path / "in" / "book.xlsx", {})
    return edit_and_recalculate(src, {f"in_{k}": v for k, v in edits.items()},
                                tmp_path / "out", soffice)


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
    # The picker: written for an H100, switched to the H200 (whose file carries measured
    # ceilings: eff_mem = 4.3 / 4.8) in in_hw, on an MoE at tp = 4, ep = 4, and on Llama.
    ("qwen3_30b_a3b.arch", "h100_sxm", "decode", {"hw": "h200_sxm", "tp": 4, "ep": 4, "B": 8}),
    ("llama3_1_8b.arch", "h100_sxm", "decode", {"hw": "h200_sxm"}),
    # A GPU without fp8 math typed into an H100's workbook: the same formulas pick bf16.
    ("llama3_1_8b_fp8.arch", "h100_sxm", "decode", {"flops_fp8": 0, "B": 64}),
    # Two-batch overlap typed in: 0.7 of the smaller of the collectives and the rest hidden.
    ("qwen3_30b_a3b.arch", "h100_sxm", "decode", {"tp": 4, "ep": 4, "B": 64, "comm_overlap": 0.7}),
]


@pytest.mark.parametrize("spec,hw,phase,edits", CASES,
                         ids=["llama-defaults", "llama-edited", "llama-prefill", "qwen3-moe",
                              "llama-tp8-pp2", "qwen3-h200-picked-tp4-ep4", "llama-h200-picked",
                              "fp8-peak-zeroed", "qwen3-tp4-ep4-overlap"])
def test_workbook_equals_eval(tmp_path: Path, soffice: str, spec: str, hw: str, phase: str,
                              edits: dict) -> None:
    analysis = analyze(MODELS / spec, hw=hw, phase=phase)
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    edits = dict(edits)
    picked = edits.pop("hw", None)
    if picked is not None:   # the picked GPU's eval, every out_ name (estimate included)
        analysis = analyze(MODELS / spec, hw=picked, phase=phase)
    expected = analysis.evaluate(_base(edits))
    _assert_outputs(wb, expected)
    for name, value in expected["inputs"].items():
        assert named_cell(wb, f"in_{name}").value == pytest.approx(value / HUMAN.get(name, 1), rel=1e-12)
        if name in HUMAN:  # the base-unit cell the formulas use
            assert named_cell(wb, f"base_{name}").value == pytest.approx(value, rel=1e-12)


def test_engine_profile_workbook_equals_eval(tmp_path: Path, soffice: str) -> None:
    # --engine sglang (specs/engines/sglang.json): its estimate parameters are each
    # Hardware column's values where the GPU file leaves them out, read live by the
    # Inputs sheet; a planner sets the per-step overhead to 2 ms (2000 us) and B = 8, and
    # step.t_overhead_s and estimate_s recalculate to eval's at that value.
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h200_sxm", engine="sglang")
    edits = {"step_overhead": 2000, "B": 8}
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    expected = analysis.evaluate(_base(edits))
    assert expected["step"]["t_overhead_s"] == pytest.approx(2e-3, rel=1e-12)
    _assert_outputs(wb, expected)
    for name in ("eff_mem", "eff_attn", "kernel_latency", "request_overhead"):
        want = expected["inputs"][name]
        assert named_cell(wb, f"in_{name}").value == pytest.approx(want / HUMAN.get(name, 1), rel=1e-12)


# --engine vllm (mem_fraction 0.9 in specs/engines/vllm.json) on one H100 at N = 4096,
# typed by a planner (tests/test_engine_memory.py); max_batch, the whole memory, stays 129.
@pytest.mark.parametrize("typed,want", [
    # TensorRT-style kv_free_fraction 0.9: 0.9 x (0.9 x 85,520,809,984 - 16,060,522,496)
    # / 537,001,984 = 102.08 -> 102
    ({"kv_free_fraction": 0.9}, 102),
    # 4 GB kept back, typed in GB: (0.9 x 85,520,809,984 - 16,060,522,496 - 4e9) /
    # 537,001,984 = 105.97 -> 105
    ({"mem_reserve": 4}, 105),
])
def test_an_engines_memory_shares_and_reserve_are_live_workbook_inputs(
        tmp_path: Path, soffice: str, typed: dict, want: int) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm", engine="vllm")
    edits = {**typed, "N": 4096}
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    expected = analysis.evaluate(_base(edits))
    _assert_outputs(wb, expected)
    assert (named_cell(wb, "out_engine_max_batch").value, named_cell(wb, "out_max_batch").value) \
        == (want, 129)


@pytest.mark.parametrize("edits", [{"sm_bytes_per_cycle": 5, "B": 1}, {"clock": 0, "B": 1},
                                   {"clock": 1755, "sm_bytes_per_cycle": 6, "B": 4}])
def test_per_sm_ceiling_workbook_equals_eval(tmp_path: Path, soffice: str, edits: dict) -> None:
    # The per-SM ceiling as a live formula on an A100 (108 SMs, 1410 MHz): binding at 5
    # bytes per SM-cycle (0.373 of mem_bw), off when a planner clears the clock, binding
    # at another clock (typed in MHz) and batch.
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="a100_sxm_80gb")
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    expected = analysis.evaluate(_base(edits))
    _assert_outputs(wb, expected)


def _assert_outputs(wb: openpyxl.Workbook, expected: dict) -> None:
    """Every memory and step key equals eval's; no error cell anywhere."""
    assert _no_error_cells(wb) == []
    for section in ("memory", "step"):
        for key, want in expected[section].items():
            name = "out_step_kv_bytes" if (section, key) == ("step", "kv_bytes") else f"out_{key}"
            _assert_close(named_cell(wb, name).value, want, key)


# Inputs typed in human units: base units per unit (TB/s, GB, us, TFLOP/s).
HUMAN = {"mem_bw": 1e12, "link_bw": 1e12, "net_bw": 1e12, "host_bw": 1e12,
         "mem_capacity": 1e9, "host_capacity": 1e9, "mem_reserve": 1e9, "launch_overhead": 1e-6,
         "link_latency": 1e-6, "net_latency": 1e-6, "flops_bf16": 1e12, "flops_fp8": 1e12,
         "kernel_latency": 1e-6, "step_overhead": 1e-6, "request_overhead": 1e-6,
         "coll_latency": 1e-6, "coll_step_latency": 1e-6, "clock": 1e6}


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
            "out_max_batch", "out_bound", "in_kv_bytes_per_elem", "base_mem_bw"} <= set(names)


@pytest.mark.parametrize("name", ["B1", "H100", "fp8", "R", "C", "R1C1", "1x", "a b"])
def test_cell_like_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_excel_name(name)


def test_formula_cells_carry_their_symbolic_form(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    cell = named_cell(wb, "out_kv_bytes")
    assert cell.value.startswith("=") and "in_B" in cell.value and "in_N" in cell.value
    # The cache held: 2 (K, V) * layers * kv_heads * head_dim (hidden/heads) *
    # kv_bytes_per_elem per token, for B sequences of N + T tokens.
    assert cell.comment.text == "2*B*hidden*kv_bytes_per_elem*kv_heads*layers*(N + T)/heads"


def test_graphs_engine_workbook_keeps_launch_overhead_a_live_input(tmp_path: Path, soffice: str) -> None:
    # --engine graphs: fused kernels (227 for Llama 3.1 8B), launch_overhead 1.5 us by
    # default; a planner sets 1 us and LibreOffice gives eval's numbers at that value.
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm", engine="graphs")
    edits = {"launch_overhead": 1, "B": 4}  # 1 us
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    expected = analysis.evaluate(_base(edits))
    assert _no_error_cells(wb) == []
    assert named_cell(wb, "out_kernels").value == 227
    assert named_cell(wb, "out_t_launch_s").value == pytest.approx(227 * 1e-6)  # 227 us
    for key in ("time_s", "act_bytes", "roofline_s"):
        _assert_close(named_cell(wb, f"out_{key}").value, expected["step"][key], key)


def test_planner_edits_kv_dtype_bandwidth_and_batch(tmp_path: Path, soffice: str) -> None:
    # The planner's what-if: an fp8 KV cache (1 byte per element), 2.5 TB/s typed as 2.5,
    # 64 sequences; LibreOffice's numbers are eval's at the same (base-unit) inputs.
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    edits = {"kv_bytes_per_elem": 1, "mem_bw": 2.5, "B": 64}
    wb = _recalculated(tmp_path, analysis, edits, soffice)
    _assert_outputs(wb, analysis.evaluate(_base(edits)))
    # By hand, N = 4096, T = 1: KV per sequence = 2 * 32 layers * 8 kv_heads * 128 * 1 byte
    # * 4097 tokens = 268,500,992 bytes; room = 85,520,809,984 (the H100's 81,559 MiB)
    # - 16,060,522,496 weight bytes = 69,460,287,488; / 268,500,992 = 258.7 -> 258 (bf16: 129).
    assert named_cell(wb, "out_max_batch").value == 258
    assert named_cell(wb, "base_mem_bw").value == 2.5e12


def test_unfit_point_is_red_and_not_achievable(tmp_path: Path, soffice: str) -> None:
    # B = 512 at N = 4096 needs 512 * 537,001,984 KV bytes = 275 GB > 80 GB: not achievable.
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = _recalculated(tmp_path, analysis, {"B": 512}, soffice)
    assert named_cell(wb, "out_fits").value is False
    summary = wb["Summary"]
    also = {summary.cell(r, 7).value: summary.cell(r, 6).value for r in range(2, summary.max_row + 1)}
    assert also["memory.fits"] == "DOES NOT FIT in memory"
    assert also["step.tokens_per_s"] == "NOT ACHIEVABLE: does not fit in memory"
    assert also["step.tokens_per_s_estimate"] == "NOT ACHIEVABLE: does not fit in memory"
    rules = [(str(rng.sqref), r.formula) for rng in summary.conditional_formatting for r in rng.rules]
    fits_row = named_cell(wb, "out_fits").row
    assert (f"A{fits_row}:F{fits_row}", ["NOT(out_fits)"]) in rules


def test_sweep_chart_data_leaves_out_exactly_the_unfit_points(tmp_path: Path, soffice: str) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = _recalculated(tmp_path, analysis, {}, soffice)
    ws = wb["Sweep"]
    top = {ws.cell(r, 1).value: r for r in range(1, ws.max_row + 1)}
    fits, chart = top["fits in memory"], top["chart data: tokens/s where it fits (#N/A: does not fit)"]
    values = top["tokens/s (upper bound)"]
    unfit = 0
    for i in range(2, 11):
        for j in range(2, 10):
            if ws.cell(fits + i, j).value:
                assert ws.cell(chart + i, j).value == ws.cell(values + i, j).value
            else:
                unfit += 1
                assert ws.cell(chart + i, j).value == "#N/A"
    # B = 256 at N = 1024: 256 * 131,072 * 1025 = 34.4 GB + 16.1 GB fits; B = 256 at
    # N = 131072 (137 GB of KV) does not: both kinds of point are on the grid.
    assert ws.cell(fits + 10, 2).value is True and ws.cell(fits + 10, 9).value is False
    assert 0 < unfit < 72


def test_sweep_leaves_out_contexts_past_the_trained_one(tmp_path: Path, soffice: str) -> None:
    """Qwen3-30B-A3B was trained for 40,960 tokens: at N = 65,536 one sequence fits on an
    H200 (48 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes = 98,304 bytes a token, 6.4 GB,
    beside ~61 GB of weights in 141 GB) but is not a context the model serves, so the
    chart grid leaves it out."""
    analysis = analyze(MODELS / "qwen3_30b_a3b.arch", hw="h200_sxm")
    wb = _recalculated(tmp_path, analysis, {}, soffice)
    ws = wb["Sweep"]
    top = {ws.cell(r, 1).value: r for r in range(1, ws.max_row + 1)}
    fits, chart = top["fits in memory"], top["chart data: tokens/s where it fits (#N/A: does not fit)"]
    column = {ws.cell(fits + 1, j).value: j for j in range(2, 10)}
    assert ws.cell(fits + 2, column[65536]).value is True         # B = 1 fits ...
    assert ws.cell(chart + 2, column[65536]).value == "#N/A"       # ... but is past 40,960
    assert isinstance(ws.cell(chart + 2, column[32768]).value, float)


def test_inputs_look_editable_only_where_they_are(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "qwen3_30b_a3b.arch", hw="h200_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    for ws in wb:
        for row in ws.iter_rows():
            for c in row:
                styled = c.fill.fgColor.rgb == "00FFF2CC"
                formula = isinstance(c.value, str) and c.value.startswith("=")
                assert not (styled and formula), (ws.title, c.coordinate)
    inputs = wb["Inputs"]
    units = {inputs.cell(r, 6).value: inputs.cell(r, 3).value for r in range(2, inputs.max_row + 1)}
    assert (units["mem_bw"], units["mem_capacity"], units["launch_overhead"]) == ("TB/s", "GB", "us")
    assert units["flops_bf16"] == "TFLOP/s" and units["N"] == "tokens"
    # 4.8 TB/s and 143,771 MiB (H200 SXM: 150,754,820,096 bytes) typed as 4.8 and
    # 150.754820096 GB; 4 us as 4.
    # The hardware inputs look the picked GPU up on the Hardware sheet (a lighter fill).
    assert named_cell(wb, "in_hw").value == "h200_sxm"
    hw = wb["Hardware"]
    column = [c.column for c in hw[2] if c.value == "h200_sxm"][0]
    held = {hw.cell(r, 1).value: hw.cell(r, column).value for r in range(3, hw.max_row + 1)}
    assert (held["mem_bw"], held["launch_overhead"]) == (4.8, 4)
    assert held["mem_capacity"] == pytest.approx(143771 * 2**20 / 1e9, rel=1e-15)
    cell = named_cell(wb, "in_mem_bw")
    assert cell.value.startswith("=Hardware!$C$") and cell.fill.fgColor.rgb == "00DDEBF7"
    assert named_cell(wb, "base_mem_bw").value == "=in_mem_bw*1E+12"


def test_inputs_are_validated_whole_positive_or_zero_ok(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    ws = wb["Inputs"]
    rule_of = {}
    for dv in ws.data_validations.dataValidation:
        for rng in dv.sqref.ranges:
            for row in range(rng.min_row, rng.max_row + 1):
                rule_of[ws.cell(row, 6).value] = (dv.type, dv.operator, dv.formula1)
    # Inputs the model states no condition on: typed rules.
    assert {rule_of[n] for n in ("gpus_per_node", "sms")} == {("whole", "greaterThan", "0")}
    # Inputs it does: a custom rule, the kind check and the model's conditions.
    assert rule_of["N"] == ("custom", None, "AND(in_N=INT(in_N),in_N>0,in_N+in_T<=in_trained_context)")
    assert rule_of["B"] == ("custom", None, "AND(in_B=INT(in_B),in_B>0,MOD(in_B,in_dp)=0)")
    assert "MOD(in_heads,in_tp)=0" in rule_of["tp"][2] and "in_pp<=in_layers" in rule_of["pp"][2]
    assert rule_of["mem_bw"] == ("decimal", "greaterThan", "0")
    assert rule_of["kv_bytes_per_elem"] == ("decimal", "greaterThan", "0")
    assert rule_of["launch_overhead"] == ("decimal", "greaterThanOrEqual", "0")
    # every input row has a rule; the two derived rows below them (eff_mem and eff_kv
    # under the per-SM ceiling, formulas) have none
    derived = [r for r in range(2, ws.max_row + 1) if ws.cell(r, 7).value == "derived"]
    assert [ws.cell(r, 6).value for r in derived] == ["eff_mem_sm", "eff_kv_sm"]
    assert len(rule_of) == ws.max_row - 1 - len(derived)


def test_summary_formulas_name_their_parts_and_stay_short(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "deepseek_v3.arch", hw="h200_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    assert named_cell(wb, "out_total_bytes").value == "=out_kv_bytes+out_weights_bytes"
    assert named_cell(wb, "out_total_bytes_per_gpu").value == \
        "=out_kv_bytes_per_gpu+out_weights_bytes_per_gpu"
    assert "out_weights_bytes_per_gpu" in named_cell(wb, "out_max_batch").value
    assert named_cell(wb, "out_tokens_per_s").value == "=in_B*in_T/out_roofline_s"
    groups = [n for n in wb.defined_names if n.startswith("params_group_")]
    assert "params_group_experts" in groups
    assert named_cell(wb, "params_total").value == "=" + "+".join(sorted(groups))
    ws = wb["Summary"]
    longest = max(len(str(ws.cell(r, 2).value)) for r in range(2, ws.max_row + 1))
    assert longest < 1000, longest


def test_no_empty_sheets_and_a_how_to_first(tmp_path: Path) -> None:
    analysis = analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}))
    assert wb.sheetnames[:7] == ["How to use", "Inputs", "Hardware", "Summary", "Ops", "Sweep",
                                 "Charts"]
    assert "Helpers" not in wb.sheetnames  # nothing needed splitting for Llama
    for ws in wb:
        assert ws.max_row > 1 or ws._charts, ws.title
    text = " ".join(str(c.value) for c in wb["How to use"]["B"])
    # the hard floor (overlapping kernels) and the serial-kernel bound are told apart
    assert "overlap_floor_s" in text and "no engine beats it" in text
    assert "serial-kernel bound" in text
    assert "launch floor" in text and "kv_bytes_per_elem" in text


def test_compile_with_set_batch_writes_that_batch(tmp_path: Path) -> None:
    # --set B=8 is the Inputs' B; the charts' axis ranges come from the grid's own B and N.
    from infest.exports.cli.main import main
    path = tmp_path / "llama.xlsx"
    assert main(["compile", str(MODELS / "llama3_1_8b.arch"), "--hw", "h100_sxm",
                 "--xlsx", str(path), "--set", "B=8", "--set", "mem_bw=2.5e12"]) == 0
    wb = openpyxl.load_workbook(path)
    assert named_cell(wb, "in_B").value == 8 and named_cell(wb, "in_mem_bw").value == 2.5


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_compile_writes_a_plan_sheet_in_either_phase(tmp_path: Path, phase: str) -> None:
    """`compile --xlsx` derives the other phase's forms too: the Plan sheet needs the
    prefill form (TTFT) and the decode form (TPOT) whichever phase the workbook shows."""
    from infest.exports.cli.main import main
    path = tmp_path / "b.xlsx"
    assert main(["compile", str(MODELS / "llama3_1_8b.arch"), "--hw", "h100_sxm",
                 "--phase", phase, "--xlsx", str(path), "--set", "tp=2"]) == 0
    wb = openpyxl.load_workbook(path)
    assert wb.sheetnames[wb.sheetnames.index("Sweep") + 1] == "Plan"
    assert named_cell(wb, "plan_tp").value == 2           # the layout the command set
    assert named_cell(wb, "plan_chunk").value == 2048     # serve's default token budget
    # TTFT: the steps to the first token, plus the estimate's per-request overhead once,
    # then the closed loop's arrival waits
    assert named_cell(wb, "plan_bare_ttft_s").value == \
        "=plan_ttft_steps*plan_mixed_s+base_request_overhead"
    assert named_cell(wb, "plan_run_ttft_s").value == \
        "=plan_bare_ttft_s+plan_residual_s+plan_wait_s+plan_share_s"
    # and the wait of clients the KV cache does not admit (memory admission)
    assert named_cell(wb, "plan_ttft_s").value == "=plan_run_ttft_s+plan_memory_wait_s"


# Every shipped spec on one GPU, without LibreOffice: no formula on any sheet (helper
# sheets included) is longer than READABLE_CHARS, the leading = counted.
@pytest.mark.parametrize("spec", sorted(p.name for p in MODELS.glob("*.arch")))
def test_no_formula_is_longer_than_400_characters(tmp_path: Path, spec: str) -> None:
    from infest.exports.workbook.book import READABLE_CHARS
    analysis = analyze(MODELS / spec, hw="h200_sxm")
    wb = openpyxl.load_workbook(write_workbook(analysis, tmp_path / "b.xlsx", {}, analysis))
    lengths = [(len(c.value), ws.title, c.coordinate) for ws in wb for row in ws.iter_rows()
               for c in row if isinstance(c.value, str) and c.value.startswith("=")]
    assert READABLE_CHARS == 400 and max(lengths)[0] <= 400, max(lengths)
