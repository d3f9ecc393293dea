"""Write an Excel workbook whose every derived number is a live formula.

Sheets: How to use, Inputs (every input symbol as a named, styled, validated cell typed
in a human unit, its base-unit value beside as `base_<symbol>`), Summary (every `memory`
and `step` key of `eval --json` as a named formula built from the other named cells,
params per group, red when the point does not fit), Ops (a row per op: per-instance
costs and time terms as formulas of the inputs), Sweep (B down, N across, the closed
forms over the header cells, a fits grid, chart grids of the points that fit) and Charts
(native charts over those grids). Names: `in_<symbol>` for inputs, `out_<key>` for
results. Each formula cell carries its symbolic form as a note. Changing an input and recalculating in any
spreadsheet engine gives the numbers `infest eval` gives for those inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import sympy
from openpyxl.chart import Reference, ScatterChart, Series
from openpyxl.formatting.rule import FormulaRule
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.datavalidation import DataValidation

from infest.compiler.load.hardware import field_doc, may_be_zero
from infest.compiler.core.keys import PARALLEL, TRAINED_CONTEXT
from infest.compiler.core.keys import MEMORY_KEYS, OP_KEYS, STEP_KEYS
from infest.compiler.core.terms import BOUND_TERMS
from infest.compiler.core.terms import HARD_KEYS, TERM_KEYS, TIME_TERMS
from infest.compiler.core.ops import KV_ELEM_NAME
from infest.compiler.core.symbols import BUILTIN_DOC, PARALLEL_DOC, sym
from infest.exports.workbook.book import (DERIVED_FONT, HEADER_FONT, HUMAN, INPUT_FILL, INPUT_FONT,
                                          OOM_FILL, OOM_FONT, UNFIT_FILL, UNFIT_FONT,
                                          Builder, live_cell, set_formula, unit_of)
from infest.exports.workbook.points import BOUND, Point, Table, effs, estimate_text, point_table
from infest.exports.workbook.xlsx_names import Namer
from infest.exports.workbook.xlsx_hardware import Picker, hardware_sheet, own_name
from infest.compiler.forms.model import estimate

from infest.exports.workbook.xlsx_plan import plan_sheet

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

SWEEP_B = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SWEEP_POINTS = "Sweep points"
LOOKUP_FILL = PatternFill("solid", fgColor="DDEBF7")   # an input that looks its value up
TYPED_FILL = PatternFill("solid", fgColor="FCE4D6")    # a number typed over a lookup
SWEEP_N = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]

def write_workbook(analysis: "Analysis", path: Path, overrides: Mapping[str, Any],
                   decode: "Analysis | None" = None) -> Path:
    """Write the workbook for an analysis (hardware required) at the given inputs; with
    `decode` (the decode phase's analysis: `analysis` itself in that phase), a Plan sheet
    too (exports/workbook/xlsx_plan.py)."""
    b = Builder(analysis, overrides)
    b.wb.active.title = "How to use"
    for title in ("Inputs", "Summary", "Ops", "Sweep", "Charts", "Helpers"):
        b.wb.create_sheet(title)
    _how_to_sheet(b)
    _inputs_sheet(b, hardware_sheet(b))
    ops_rows = _ops_sheet(b)
    _summary_sheet(b, ops_rows)
    _sweep_sheet(b)
    if decode is not None:
        plan_sheet(b, decode)
    _charts_sheet(b)
    if not b.helpers:  # no formula needed splitting: no empty sheet
        del b.wb["Helpers"]
    for ws in b.wb.worksheets:  # print (and render) each sheet on one landscape page
        ws.sheet_properties.pageSetUpPr.fitToPage = True
        ws.page_setup.orientation, ws.page_setup.fitToWidth, ws.page_setup.fitToHeight = "landscape", 1, 1
    b.wb.calculation.fullCalcOnLoad = True  # no cached values: engines must compute
    path = Path(path)
    b.wb.save(path)
    return path


# ---- How to use -----------------------------------------------------------------

HOW_TO = [
    ("What to edit", "Only blue cells on yellow: the Inputs sheet's value column (in the unit "
     "beside it: TB/s, GB, us, TFLOP/s, tokens, sequences), the Sweep sheet's B and N "
     "headers and the Plan sheet's request and layout. Everything else is a formula; "
     "recalculate after editing."),
    ("Number formats", "kv_bytes_per_elem (Inputs) is the KV cache's bytes per element: "
     "2 for bf16, 1 for fp8 (the cache halves, max_batch about doubles). Weight and "
     "activation bytes follow the spec's dtypes."),
    ("Inputs", "in_<name> is the cell you type (human unit); base_<name> beside it is the "
     "same value in base units (bytes, bytes/s, s, FLOP/s) that the formulas use."),
    ("Summary", "out_<key>: every memory and step key of `infest eval --json`, in base "
     "units, with GB / ms beside. params.group.* are the parameter subtotals per group."),
    ("Bounds", "step.overlap_floor_s, the largest of compute, memory and collective time "
     "over the whole step: the hard floor, no engine beats it. step.roofline_s, the "
     "serial-kernel bound (each op at its largest hard term, ops one after another: an "
     "engine that overlaps kernels can beat it, never the overlap floor), and "
     "step.tokens_per_s = tokens / roofline_s."),
    ("Estimate", "step.time_s adds the launch floor: launch_overhead per kernel, an "
     "assumption about the engine (CUDA graphs and fusion beat it)."),
    ("Does not fit", "memory.fits FALSE turns the Summary's fits and throughput rows red: "
     "that batch and context do not fit in memory, so the point is not achievable. On the "
     "Sweep sheet such cells are grey and struck through; the charts leave them out (and "
     "contexts past the model's trained context)."),
    ("Ops", "A row per op: per-instance costs and time terms; count x the row gives the "
     "step's share. bound names the largest term."),
    ("Sweep / Charts", "tokens/s and step time with B down and N across; charts are drawn "
     "from the chart-data grids (points that fit only)."),
    ("Plan", "Phases as `infest serve --batching static` computes it: users, concurrency "
     "per replica, ISL, OSL, the TPOT and TTFT limits and a layout of its own in; TTFT, "
     "TPOT, E2E, tokens/s, GPUs needed, fits and whether the limits hold out (plan_<key>). "
     "TPOT averages the decode step over the context table beside it."),
]


def _how_to_sheet(b: Builder) -> None:
    ws = b.wb["How to use"]
    ws.cell(1, 1, f"{b.analysis.model.name} on {b.analysis.hardware.name}: a live workbook "
                  f"({b.analysis.forms.phase})").font = Font(bold=True, size=13)
    for row, (topic, text) in enumerate(HOW_TO, start=3):
        ws.cell(row, 1, topic).font = HEADER_FONT
        ws.cell(row, 2, text).alignment = Alignment(wrap_text=True, vertical="top")
        ws.cell(row, 1).alignment = Alignment(vertical="top")
    ws.column_dimensions["A"].width = 16
    ws.column_dimensions["B"].width = 100


# ---- Inputs ---------------------------------------------------------------------

def _input_rows(b: Builder, picker: Picker) -> list[tuple[str, Any, str, str, str]]:
    """(name, value, unit, description, kind) for every input; hardware fields last, one
    per Hardware sheet row, value None where it is the picker's lookup (not --set)."""
    inputs = {i.name: i for i in b.analysis.inputs(b.overrides)}
    rows = [(name, i.value, *_describe_input(b, name)) for name, i in inputs.items()
            if name not in picker.rows]
    for name in picker.rows:
        doc, unit = field_doc(name)
        value = inputs[name].value if name in b.overrides and name in inputs else None
        rows.append((name, value, unit, doc, "hardware"))
    return rows


def _describe_input(b: Builder, name: str) -> tuple[str, str, str]:
    """(unit, description, kind) of one input."""
    if name in BUILTIN_DOC:
        return ("sequences" if name == "B" else "tokens"), BUILTIN_DOC[name], "builtin"
    if name in PARALLEL:
        return "GPUs", PARALLEL_DOC[name], "parallel"
    params = b.analysis.model.params
    if name == KV_ELEM_NAME:
        return "bytes/elem", "KV cache bytes per element: bf16 2, fp8 1, fp4 0.5", "model"
    if name in params:
        return params[name].dimension or "", f"model param of {b.analysis.model.name}", "model"
    hw = b.analysis.hardware
    dim = hw.fields[name].dimension if hw and name in hw.fields else None
    doc, unit = field_doc(name)
    return dim or unit, doc, "hardware"


def _inputs_sheet(b: Builder, picker: Picker) -> None:
    ws = b.wb["Inputs"]
    ws.append(["input", "value", "unit", "in base units", "base unit", "description", "kind",
               "note"])
    rules = _validations(ws)
    _hw_row(b, ws, picker)
    for row, item in enumerate(_input_rows(b, picker), start=3):
        _input_row(b, ws, row, item, picker)
        rules[_validation_kind(b, item)].add(f"B{row}")
    _style_header(ws, widths=[20, 14, 12, 16, 10, 56, 10, 40], right=(2, 4))


def _hw_row(b: Builder, ws, picker: Picker) -> None:
    """in_hw: the GPU the hardware inputs are looked up for (a list of the sheet's names)."""
    ws.cell(2, 1, "hw")
    cell = ws.cell(2, 2, own_name(b))
    cell.font, cell.fill = INPUT_FONT, INPUT_FILL
    ws.cell(2, 6, "the GPU: a column of the Hardware sheet (custom: its blue column)")
    ws.cell(2, 7, "hardware")
    rule = DataValidation(type="list", formula1=picker.names, allow_blank=False,
                          error="a hardware name from the Hardware sheet's header row")
    rule.showErrorMessage, rule.errorTitle = True, "infest input"
    ws.add_data_validation(rule)
    rule.add("B2")
    b.define("in_hw", "Inputs", "B2")


def _validations(ws) -> dict[str, DataValidation]:
    """Excel data validation per kind of input: whole or decimal, positive or >= 0."""
    rules = {
        "whole": DataValidation(type="whole", operator="greaterThan", formula1="0",
                                error="a whole number, 1 or more"),
        "positive": DataValidation(type="decimal", operator="greaterThan", formula1="0",
                                   error="a positive number"),
        "zero_ok": DataValidation(type="decimal", operator="greaterThanOrEqual", formula1="0",
                                  error="0 or more (a latency may be 0)"),
    }
    for rule in rules.values():
        rule.showErrorMessage, rule.errorTitle = True, "infest input"
        ws.add_data_validation(rule)
    return rules


def _validation_kind(b: Builder, item: tuple) -> str:
    """Whole: batch, context, tokens, parallel degrees, counts and integral model params."""
    name, value, unit, _doc, kind = item
    if may_be_zero(name):
        return "zero_ok"
    if name == KV_ELEM_NAME:  # 0.5 is a 4-bit cache
        return "positive"
    if kind in ("builtin", "parallel") or unit in ("count", "sequences", "tokens"):
        return "whole"
    if kind == "hardware":   # counts (SMs, GPUs per node) are whole; efficiencies not
        return "whole" if not unit and not name.startswith("eff_") else "positive"
    if kind == "model" and not unit and value.denominator == 1:
        return "whole"
    return "positive"


def _input_row(b: Builder, ws, row: int, item: tuple, picker: Picker) -> None:
    """The input in its human unit (the editable, named cell); beside it, for inputs
    with a human unit, its base-unit value as a grey formula that the forms use. A
    hardware field reads the picked GPU's value unless a number is typed over it."""
    name, value, unit, doc, kind = item
    scale, human_unit = HUMAN.get(unit, (Fraction(1), unit))
    ws.cell(row, 1, name)
    cell = ws.cell(row, 2)
    cell.font, cell.fill = INPUT_FONT, INPUT_FILL
    if name in picker.rows:
        _hardware_cell(ws, cell, value, scale, picker.selected(name))
    else:
        cell.value = _number(value / scale)
    cell.number_format = "General"
    ws.cell(row, 3, human_unit)
    ws.cell(row, 6, doc)
    ws.cell(row, 7, kind)
    b.define(f"in_{name}", "Inputs", f"B{row}")
    b.names[sym(name)] = f"in_{name}"
    if unit in HUMAN:
        base = ws.cell(row, 4, f"=in_{name}{_to_base(scale)}")
        base.font, base.number_format = DERIVED_FONT, "0.000E+00"
        ws.cell(row, 5, unit)
        b.define(f"base_{name}", "Inputs", f"D{row}")
        b.names[sym(name)] = f"base_{name}"


def _hardware_cell(ws, cell, value, scale: Fraction, selected: str) -> None:
    """The picked GPU's value (a lookup), or the --set value typed over it; typed over
    turns orange and says what the catalogue holds."""
    if value is None:
        cell.value, cell.fill = f"={selected}", LOOKUP_FILL
    else:
        cell.value = _number(value / scale)
    row = cell.row
    differs = f"$B{row}<>{selected}"
    ws.conditional_formatting.add(f"A{row}:C{row}", FormulaRule(formula=[differs], fill=TYPED_FILL))
    ws.cell(row, 8, f'=IF({differs},"typed over: "&in_hw&" has "&{selected},"")')


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _to_base(scale: Fraction) -> str:
    """`*1E12` or `/1E6`: a division by a power of ten gives the nearest double of the
    base value (4 us / 1E6 is exactly the double 4e-6)."""
    return f"*{float(scale):G}" if scale >= 1 else f"/{float(1 / scale):G}"


def _style_header(ws, widths: list[int], right: tuple[int, ...] = ()) -> None:
    """Bold headers, column widths; `right`: numeric columns, whose headers sit right
    like the numbers under them."""
    for cell in ws[1]:
        cell.font = HEADER_FONT
        if cell.column in right:
            cell.alignment = Alignment(horizontal="right")
    for i, width in enumerate(widths, start=1):
        ws.column_dimensions[get_column_letter(i)].width = width
    ws.freeze_panes = "B2"


# ---- Ops ------------------------------------------------------------------------

OP_COLUMNS = list(OP_KEYS[:-1])  # per-instance forms; time_s is derived on the sheet
OP_DERIVED = ["time_s", "roofline_s", "estimate_s", "intensity FLOP/byte", "time x count", "bound"]
_FIRST_COL = 4  # after op, kind, group


def _op_letters() -> dict[str, str]:
    """Column letter of every Ops-sheet column, by key."""
    keys = OP_COLUMNS + OP_DERIVED
    return {key: get_column_letter(i) for i, key in enumerate(keys, start=_FIRST_COL)}


def _ops_sheet(b: Builder) -> tuple[int, int]:
    """A row per op; returns the (first, last) data rows for the Summary's sums."""
    ws = b.wb["Ops"]
    keys = OP_COLUMNS + OP_DERIVED
    ws.append(["op", "kind", "group"] + [_op_header(k) for k in keys])
    for row, (node, forms) in enumerate(zip(b.analysis.model.ops, b.analysis.forms.ops), start=2):
        ws.cell(row, 1, node.name)
        ws.cell(row, 2, node.kind)
        ws.cell(row, 3, node.group)
        for col, key in enumerate(OP_COLUMNS, start=_FIRST_COL):
            set_formula(ws.cell(row, col), b.formula(forms[key]), forms[key])
        _op_derived(ws, row, effs(b.names))
        for col, key in enumerate(keys, start=_FIRST_COL):
            ws.cell(row, col).number_format = _op_format(key)
    names = [len(n.name) for n in b.analysis.model.ops] + [4]
    _style_header(ws, widths=[max(names) + 2, 12, 14] + [14] * len(keys))
    for col in range(_FIRST_COL, _FIRST_COL + len(keys)):  # numbers sit right: so do their headers
        ws.cell(1, col).alignment = Alignment(horizontal="right", vertical="bottom", wrap_text=True)
    ws.row_dimensions[1].height = 30
    return 2, 1 + len(b.analysis.model.ops)


def _op_unit(key: str) -> str:
    """Base unit of an Ops column."""
    own = {"count": "", "intensity FLOP/byte": "", "time x count": "s", "bound": "",
           "time_s": "s", "roofline_s": "s", "estimate_s": "s"}  # the sheet's own columns, and count bare
    return own[key] if key in own else unit_of(key)


def _op_header(key: str) -> str:
    """Column header with its unit on a second line."""
    unit = _op_unit(key)
    return f"{key}\n({unit})" if unit else key


def _op_format(key: str) -> str:
    """Engineering notation (exponents in steps of 3: 1.23E+9 bytes = 1.23 GB) for
    sizes and times, whole counts, one decimal for intensity."""
    if key in ("count", "kernels"):
        return "#,##0"
    if key == "intensity FLOP/byte":
        return "#,##0.0"
    return "General" if key == "bound" else "##0.00E+0"


def _op_derived(ws, row: int, eff: Mapping[str, str]) -> None:
    """time, roofline, estimate, intensity, time x count and bound from the row's own cells."""
    c = {key: f"{letter}{row}" for key, letter in _op_letters().items()}
    terms = ",".join(c[k] for k in TERM_KEYS)
    hard = ",".join(c[k] for k in HARD_KEYS)
    derived = [f"=MAX({terms})", f"=MAX({hard})",
               "=" + estimate_text({k: c[k] for k in TERM_KEYS}, eff),
               f'=IF({c["bytes"]}>0,{c["flops"]}/{c["bytes"]},"")',
               f"={c['time_s']}*{c['count']}", _op_bound_formula(c)]
    start = _FIRST_COL + len(OP_COLUMNS)
    for col, text in enumerate(derived, start=start):
        set_formula(ws.cell(row, col), text, text[1:])


def _op_bound_formula(c: dict[str, str]) -> str:
    """The largest time term (memory named by its largest byte kind), with the
    evaluator's tie order: the first of equal terms wins."""
    w, kv, act = c["weight_bytes"], c["kv_bytes"], c["act_bytes"]
    memory = f'IF(AND({w}>={kv},{w}>={act}),"weights",IF({kv}>={act},"kv","activations"))'
    label = {t.key: (memory if t.name == "memory" else f'"{t.name}"') for t in TIME_TERMS}
    text = label[TERM_KEYS[-1]]
    for i in range(len(TERM_KEYS) - 2, -1, -1):
        key = TERM_KEYS[i]
        later = ",".join(f"{c[key]}>={c[k]}" for k in TERM_KEYS[i + 1:])
        text = f"IF(AND({later}),{label[key]},{text})"
    return "=" + text


# ---- Summary --------------------------------------------------------------------

def _summary_rows(b: Builder) -> list[tuple[str, str, sympy.Basic]]:
    """(section, key, form) of every Summary row: params (total, active, per group),
    memory, step and the binding ceilings."""
    forms = b.analysis.forms
    rows = [("params", k, forms.params[k]) for k in ("total", "active")]
    rows += [("params", f"group.{g}", e) for g, e in forms.groups.items()]
    rows += [("memory", k, forms.memory[k]) for k in MEMORY_KEYS]
    rows += [("step", k, forms.step[k]) for k in STEP_KEYS]
    return rows + [("bound", k, forms.bound_terms[k]) for k in BOUND_TERMS]


def _summary_sheet(b: Builder, ops_rows: tuple[int, int]) -> None:
    ws = b.wb["Summary"]
    ws.append(["key", "value", "unit", "human", "human unit", "also", "note"])
    rows = _summary_rows(b)
    namer = b.namer = Namer.of([(expr, _name_of(section, key)) for section, key, expr in rows])
    for row, (section, key, expr) in enumerate(rows, start=2):
        ws.cell(row, 1, f"{section}.{key}")
        b.define(_name_of(section, key), "Summary", f"B{row}")
        text = _summary_formula(b, namer, (section, key, expr), ops_rows)
        set_formula(ws.cell(row, 2), text, expr)
        _summary_units(ws, row, section, key)
    where = {(s, k): r for r, (s, k, _) in enumerate(rows, start=2)}
    _bound_row(b, ws, len(rows) + 2, where)
    _mark_summary_unfit(ws, where)
    _style_header(ws, widths=[30, 22, 12, 14, 12, 38, 60], right=(2, 4))


# Rows that turn red when the point does not fit: it is not achievable.
_UNFIT_ROWS = [("memory", "fits"), ("step", "tokens_per_s"), ("step", "roofline_s"),
               ("step", "time_s")]


def _mark_summary_unfit(ws, where: dict) -> None:
    """Red fits and throughput rows, and words saying why, when out_fits is FALSE."""
    for section, key in _UNFIT_ROWS:
        row = where[(section, key)]
        ws.conditional_formatting.add(f"A{row}:F{row}", FormulaRule(
            formula=["NOT(out_fits)"], fill=UNFIT_FILL, font=UNFIT_FONT))
    ws.cell(where[("step", "tokens_per_s")], 6,
            '=IF(out_fits,"","NOT ACHIEVABLE: does not fit in memory")')
    ws.cell(where[("memory", "fits")], 6, '=IF(out_fits,"fits","DOES NOT FIT in memory")')


def _summary_formula(b: Builder, namer: Namer, row: tuple[str, str, sympy.Basic],
                     ops_rows: tuple[int, int]) -> str:
    """Step totals sum the Ops sheet (count x per-op cell); the rest print their form,
    with the parts that are other Summary cells written as those cells' names."""
    section, key, expr = row
    first, last = ops_rows
    column = _op_letters().get(key) if section == "step" and key in _OPS_SUMMED else None
    if column:
        text = f"=SUMPRODUCT(Ops!$D${first}:$D${last},Ops!${column}${first}:${column}${last})"
        return text + _beyond_ops(b, key)
    if expr == sympy.oo:  # max_batch / max_context that memory never bounds
        return UNBOUNDED_TEXT
    groups = b.analysis.forms.groups
    if (section, key) == ("params", "total") and groups and sympy.Add(*groups.values()) == expr:
        return "=" + "+".join(_name_of("params", f"group.{g}") for g in groups)
    readable = namer.rewrite(expr, _name_of(section, key))
    b.names.update(namer.symbols)  # helper cells print the stand-ins too
    return b.formula(readable)


UNBOUNDED_TEXT = "unbounded (KV cache does not grow)"


def _beyond_ops(b: Builder, key: str) -> str:
    """What the step's estimate adds beyond count x each op's estimate (a per-step engine
    overhead, say), as `+formula`; "" when it is exactly that sum (the other totals are
    sums over ops by construction, compiler/forms/model.py)."""
    if key != "estimate_s":
        return ""
    forms = b.analysis.forms
    rest = forms.step[key] - sympy.Add(*(op["count"] * estimate(op) for op in forms.ops))
    return "" if rest == 0 else "+" + b.formula(rest)[1:]


def _name_of(section: str, key: str) -> str:
    """The defined name of a Summary row. memory.kv_bytes (the cache held) and
    step.kv_bytes (the cache traffic) share a key: the held one is `out_kv_bytes`,
    the traffic `out_step_kv_bytes`."""
    if section == "step" and key == "kv_bytes":
        return "out_step_kv_bytes"
    if section == "params" and key.startswith("group."):
        return "params_group_" + key[len("group."):]
    return {"memory": "out_", "step": "out_", "params": "params_", "bound": "bound_"}[section] + key


# Step totals that are sums over the Ops sheet of count x the op's own cell.
_OPS_SUMMED = set(OP_COLUMNS[1:]) | {"time_s", "roofline_s", "estimate_s"}


_FORMATS = {"bytes": "#,##0", "params": "#,##0", "FLOP": "#,##0", "s": "0.000E+00",
            "tokens/s": "#,##0.0"}


# Which step figures are hard bounds and which assume an engine (the "note" column).
BOUND_NOTES = {"roofline_s": "serial-kernel bound: peaks, kernels one after another, no launch cost",
               "overlap_floor_s": "hard floor: max of compute, memory, comm totals; no engine beats it",
               "tokens_per_s": "serial-kernel bound: B*T / roofline_s",
               "time_s": "with the launch floor: assumes launch_overhead per kernel",
               "t_launch_s": "assumption about the engine, not part of the hard bound",
               "estimate_s": "estimate: achievable ceilings (eff_*) and the launch floor",
               "tokens_per_s_estimate": "estimate: B*T / estimate_s"}


def _summary_units(ws, row: int, section: str, key: str) -> None:
    unit = {"params": "params", "bound": "s"}.get(section) or unit_of(key)
    ws.cell(row, 3, unit)
    if section == "step" and key in BOUND_NOTES:
        ws.cell(row, 7, BOUND_NOTES[key])
    ws.cell(row, 2).number_format = _FORMATS.get(unit, "General")
    ws.cell(row, 4).number_format = "0.000"
    if unit == "bytes":
        ws.cell(row, 4, f"=B{row}/1E9")
        ws.cell(row, 5, "GB")
        ws.cell(row, 6, f'=TEXT(B{row}/2^30,"0.00")&" GiB"')
    elif unit == "s":
        ws.cell(row, 4, f"=B{row}*1000")
        ws.cell(row, 5, "ms")
        ws.cell(row, 6, f'=TEXT(B{row}*1E6,"0.0")&" us"')
    elif unit == "params":
        ws.cell(row, 4, f"=B{row}/1E9")
        ws.cell(row, 5, "billion")


def _bound_row(b: Builder, ws, row: int, where: dict) -> None:
    """`out_bound`: the largest of the four ceilings, ties in the evaluator's order."""
    refs = [f"B{where[('bound', k)]}" for k in BOUND_TERMS]
    biggest = f"MAX({','.join(refs)})"
    text = '"launch"'
    for name, ref in reversed(list(zip(BOUND_TERMS[:-1], refs[:-1]))):
        text = f'IF({ref}={biggest},"{name}",{text})'
    ws.cell(row, 1, "step.bound")
    set_formula(ws.cell(row, 2), "=" + text, "argmax(" + ", ".join(BOUND_TERMS) + ")")
    b.define("out_bound", "Summary", f"B{row}")


# ---- Sweep and charts -----------------------------------------------------------

@dataclass(frozen=True)
class _Grid:
    """One B x N table on the Sweep sheet."""

    title: str
    key: str
    top: int  # row of the N header


_HEIGHT = len(SWEEP_B) + 3  # title, N header, a row per B, a blank row


def _grids() -> list[_Grid]:
    """Value grids, the fits grid, then the charts' grids (values where they fit)."""
    titles = [("tokens/s (upper bound)", "tokens_per_s"),
              ("step time with launch floor (ms)", "time_s"),
              ("fits in memory", "fits"),
              ("chart data: tokens/s where it fits (#N/A: does not fit)", "chart.tokens_per_s"),
              ("chart data: step time (ms) where it fits (#N/A: does not fit)", "chart.time_s")]
    return [_Grid(title, key, 2 + i * _HEIGHT) for i, (title, key) in enumerate(titles)]


def _sweep_sheet(b: Builder) -> None:
    ws = b.wb["Sweep"]
    ws.cell(1, 1, "B down, N across; other inputs from the Inputs sheet. Grey cells do not "
                  "fit in memory, or lie past the model's trained context: not achievable. "
                  "Edit the blue headers of the first grid.")
    grids = {g.key: g for g in _grids()}
    trained = b.names.get(sym(TRAINED_CONTEXT))  # its cell, when the model states one
    for grid in grids.values():
        _grid_frame(ws, grid, grids["tokens_per_s"])
    table = _sweep_points(b, grids["tokens_per_s"])
    for key in ("tokens_per_s", "time_s"):
        _value_grid(b, ws, grids[key], b.analysis.forms.step[key], table)
        _mark_unfit(ws, grids[key], grids["fits"], trained)
    _value_grid(b, ws, grids["fits"], b.analysis.forms.memory["fits"], None)
    for key in ("tokens_per_s", "time_s"):
        _chart_grid(ws, grids["chart." + key], grids[key], grids["fits"], trained)
    ws.column_dimensions["A"].width = 12
    for col in range(2, len(SWEEP_N) + 2):
        ws.column_dimensions[get_column_letter(col)].width = 14


def _grid_frame(ws, grid: _Grid, first: _Grid) -> None:
    """Title and headers; grids below the first repeat its (editable) headers."""
    ws.cell(grid.top, 1, grid.title).font = HEADER_FONT
    for j, n in enumerate(SWEEP_N, start=2):
        cell = ws.cell(grid.top + 1, j)
        if grid is first:
            cell.value = n
            _header(cell)
        else:
            cell.value, cell.font = f"={get_column_letter(j)}{first.top + 1}", DERIVED_FONT
    for i, batch in enumerate(SWEEP_B):
        cell = ws.cell(grid.top + 2 + i, 1)
        if grid is first:
            cell.value = batch
            _header(cell)
        else:
            cell.value, cell.font = f"=A{first.top + 2 + i}", DERIVED_FONT


def _header(cell) -> None:
    cell.font, cell.fill = INPUT_FONT, INPUT_FILL


def _value_grid(b: Builder, ws, grid: _Grid, expr: sympy.Basic, table: Table | None) -> None:
    """The form over each cell's own B and N headers; a step total (tokens/s, step time)
    reads its sum over ops from the grid point's row of the Sweep points table."""
    total = {"tokens_per_s": BOUND, "time_s": "time_s"}.get(grid.key)
    stand_in, note = sympy.Dummy("total"), expr
    if total is not None:
        expr = expr.xreplace({b.analysis.forms.step[total]: stand_in})
    if grid.key in _GRID_SCALE:
        expr = expr * _GRID_SCALE[grid.key]
    readable = b.namer.rewrite(expr, free_of=frozenset({sym("B"), sym("N")}))
    b.names.update(b.namer.symbols)
    number_format = _GRID_FORMATS.get(grid.key, "General")
    for i in range(len(SWEEP_B)):
        for j in range(2, len(SWEEP_N) + 2):
            row = grid.top + 2 + i
            names = _cell_names(b, row, j, grid.top + 1)
            if total is not None:
                names[stand_in] = table.total(total, table.first + i * len(SWEEP_N) + j - 2)
            live_cell(b, ws.cell(row, j), names, (readable, note), "Sweep")
            ws.cell(row, j).number_format = number_format


_GRID_FORMATS = {"tokens_per_s": "#,##0", "time_s": "#,##0.000"}
_GRID_SCALE = {"time_s": 1000}   # the step-time grid is in ms


def _cell_names(b: Builder, row: int, col: int, header_row: int) -> dict:
    letter = get_column_letter(col)
    names = dict(b.names)
    names[sym("B")] = f"Sweep!$A{row}"
    names[sym("N")] = f"Sweep!{letter}${header_row}"
    return names


def _sweep_points(b: Builder, first: _Grid) -> Table:
    """The Sweep points sheet: a row per grid point (B down the first grid, N across)."""
    ws = b.wb.create_sheet(SWEEP_POINTS)
    ws.cell(1, 1, "Every op's terms at each point of the Sweep grid (B, N from the grid's "
                  "headers, T from the Inputs sheet); the grids read the step totals.")
    points = [Point(f"B row {i + 1}, N column {j + 1}", f"=Sweep!$A${first.top + 2 + i}", "=in_T",
                    f"=Sweep!${get_column_letter(j + 2)}${first.top + 1}")
              for i in range(len(SWEEP_B)) for j in range(len(SWEEP_N))]
    ops = [node.name for node in b.analysis.model.ops]
    return point_table(ws, 3, points, b.analysis.forms.ops, ops, b.names,
                       totals=(BOUND, "time_s"))


def _mark_unfit(ws, grid: _Grid, fits: _Grid, trained: str | None) -> None:
    """Conditional format: grey where the fits grid says the point does not fit, or
    (`trained`: the trained context's cell name) where N is past the trained context."""
    first_row = grid.top + 2
    last = f"{get_column_letter(len(SWEEP_N) + 1)}{first_row + len(SWEEP_B) - 1}"
    unfit = f"NOT(B{fits.top + 2})"
    if trained is not None:
        unfit = f"OR({unfit},B${grid.top + 1}>{trained})"
    ws.conditional_formatting.add(f"B{first_row}:{last}", FormulaRule(
        formula=[unfit], fill=OOM_FILL, font=OOM_FONT))


def _chart_grid(ws, grid: _Grid, values: _Grid, fits: _Grid, trained: str | None) -> None:
    """Values where they fit (and N is within the trained context), #N/A elsewhere:
    charts leave those points out."""
    for i in range(len(SWEEP_B)):
        for j in range(2, len(SWEEP_N) + 2):
            col = get_column_letter(j)
            ok = f"{col}{fits.top + 2 + i}"
            if trained is not None:
                ok = f"AND({ok},{col}${grid.top + 1}<={trained})"
            ws.cell(grid.top + 2 + i, j, f"=IF({ok},{col}{values.top + 2 + i},NA())")
            ws.cell(grid.top + 2 + i, j).number_format = _GRID_FORMATS[values.key]


def _charts_sheet(b: Builder) -> None:
    ws = b.wb["Charts"]
    sweep = b.wb["Sweep"]
    grids = {g.key: g for g in _grids()}
    ranges = _chart_ranges(b)
    ws.add_chart(_by_batch_chart(b, sweep, grids["chart.tokens_per_s"], ranges["tokens_per_s"]), "A1")
    ws.add_chart(_by_context_chart(b, sweep, grids["chart.time_s"], ranges["time_s"]), "A20")


def _chart_ranges(b: Builder) -> dict[str, tuple[float, float]]:
    """Powers of ten around the values of the points that fit (at the write-time inputs,
    contexts the model was trained for), so the log axes span the data."""
    from infest.compiler.analyses.sweep import sweep, within_trained_context
    fixed = {k: v for k, v in b.overrides.items() if k not in ("B", "N")}  # the grid's own
    contexts = within_trained_context(b.analysis, fixed, SWEEP_N)
    ranges = {}
    for key in ("tokens_per_s", "time_s"):
        grid = sweep(b.analysis, fixed, SWEEP_B, contexts, key)
        ranges[key] = _decades([float(v) * _GRID_SCALE.get(key, 1) for v in grid.values[grid.fits]])
    return ranges


def _decades(values: list[float]) -> tuple[float, float]:
    """The powers of ten just below the smallest and above the largest value."""
    if not values:
        return 1.0, 10.0
    lo, hi = min(values), max(values)
    return 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi) + 1e-12)


def _titled(chart: ScatterChart, title: str, x: str, y: str,
            xrange: tuple[float, float], yrange: tuple[float, float]) -> ScatterChart:
    """Log-log axes fitted to the data, legend on the right."""
    chart.title, chart.x_axis.title, chart.y_axis.title = title, x, y
    chart.height, chart.width = 9, 18
    for axis, (lo, hi) in ((chart.x_axis, xrange), (chart.y_axis, yrange)):
        axis.scaling.logBase = 10
        axis.scaling.min, axis.scaling.max = lo, hi
        axis.delete = False
        axis.number_format = "General"
    chart.legend.position = "r"
    return chart


def _by_batch_chart(b: Builder, sweep, grid: _Grid, yrange) -> ScatterChart:
    """tokens/s against batch, one series per context (points that fit only)."""
    chart = _titled(ScatterChart(), f"{b.analysis.model.name}: tokens/s vs batch (fits only)",
                    "batch B (sequences)", "tokens/s (upper bound)",
                    (SWEEP_B[0], SWEEP_B[-1]), yrange)
    first, last = grid.top + 2, grid.top + 1 + len(SWEEP_B)
    xs = Reference(sweep, min_col=1, min_row=first, max_row=last)
    for col in range(2, len(SWEEP_N) + 2):
        ys = Reference(sweep, min_col=col, min_row=first, max_row=last)
        series = Series(ys, xs, title=f"N = {SWEEP_N[col - 2]}")
        series.marker.symbol = "circle"
        chart.series.append(series)
    return chart


def _by_context_chart(b: Builder, sweep, grid: _Grid, yrange) -> ScatterChart:
    """step time against context, one series per batch size (points that fit only)."""
    chart = _titled(ScatterChart(), f"{b.analysis.model.name}: step time vs context (fits only)",
                    "context N (tokens)", "step time with launch floor (ms)",
                    (SWEEP_N[0], SWEEP_N[-1]), yrange)
    header = grid.top + 1
    xs = Reference(sweep, min_col=2, max_col=len(SWEEP_N) + 1, min_row=header)
    for i in range(len(SWEEP_B)):
        row = grid.top + 2 + i
        ys = Reference(sweep, min_col=2, max_col=len(SWEEP_N) + 1, min_row=row)
        series = Series(ys, xs, title=f"B = {SWEEP_B[i]}")
        series.marker.symbol = "circle"
        chart.series.append(series)
    return chart
