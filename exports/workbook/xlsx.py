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

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import sympy
from openpyxl.formatting.rule import FormulaRule
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.datavalidation import DataValidation

from infest.compiler.load.hardware import field_doc, may_be_zero
from infest.compiler.core.keys import PARALLEL
from infest.compiler.core.keys import MEMORY_KEYS, OP_KEYS, STEP_KEYS, key_label
from infest.compiler.core.terms import BOUND_TERMS
from infest.compiler.core.terms import HARD_KEYS, TERM_KEYS, TIME_TERMS
from infest.compiler.core.ops import KV_ELEM_NAME
from infest.compiler.core.symbols import BUILTIN_DOC, PARALLEL_DOC, PARAM_DOC, sym
from infest.exports.workbook.book import (DERIVED_FONT, HEADER_FONT, HUMAN, INPUT_FILL, INPUT_FONT,
                                          KEY_FONT, UNFIT_FILL, UNFIT_FONT,
                                          Builder, set_formula, unit_of)
from infest.exports.workbook.points import (CAPPED_CELLS, OpKind, capped_texts, estimate_text,
                                            step_estimate_text)
from infest.exports.workbook.xlsx_names import Namer
from infest.exports.workbook.xlsx_hardware import Picker, hardware_sheet, own_name
from infest.compiler.core.estimate_rule import PART_KEYS

from infest.exports.workbook.validation import cell_rule, rules_by_cell
from infest.exports.workbook.xlsx_memory import groups_of, summary_sums, summary_table
from infest.exports.workbook.xlsx_plan import plan_sheet
from infest.exports.workbook.xlsx_sweep import charts_sheet, sweep_sheet

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

LOOKUP_FILL = PatternFill("solid", fgColor="DDEBF7")   # an input that looks its value up
TYPED_FILL = PatternFill("solid", fgColor="FCE4D6")    # a number typed over a lookup



def write_workbook(analysis: "Analysis", path: Path, overrides: Mapping[str, Any],
                   decode: "Analysis | None" = None, inputs: Sequence[str] = (),
                   progress: Callable[[str], None] = lambda step: None) -> Path:
    """Write the workbook for an analysis (hardware required) at the given inputs; with
    `decode` (the decode phase's analysis: `analysis` itself in that phase), a Plan sheet
    too (exports/workbook/xlsx_plan.py). `progress` hears each step's name as it starts."""
    b = Builder(analysis, overrides)
    b.wb.active.title = "How to use"
    for title in ("Inputs", "Summary", "Ops", "Sweep", "Charts", "Helpers"):
        b.wb.create_sheet(title)
    _how_to_sheet(b)
    progress("Inputs and Hardware")
    _inputs_sheet(b, hardware_sheet(b))
    progress("Ops and Summary")
    _summary_sheet(b, _ops_sheet(b))
    progress("Sweep")
    sweep_sheet(b)
    if decode is not None:
        progress("Plan")
        plan_sheet(b, decode)
    charts_sheet(b)
    if not b.helpers:  # no formula needed splitting: no empty sheet
        del b.wb["Helpers"]
    for ws in b.wb.worksheets:  # print (and render) each sheet on one landscape page
        ws.sheet_properties.pageSetUpPr.fitToPage = True
        ws.page_setup.orientation, ws.page_setup.fitToWidth, ws.page_setup.fitToHeight = "landscape", 1, 1
    progress("saving")
    b.wb.calculation.fullCalcOnLoad = True  # no cached values: engines must compute
    from infest.exports.output import analysis_inputs, write_output
    return write_output(Path(path), b.wb.save, [*analysis_inputs(analysis), *inputs], "--xlsx")


# ---- How to use -----------------------------------------------------------------

HOW_TO = [
    ("What to edit", "Only blue cells on yellow: the Inputs sheet's value column (in the unit "
     "beside it: TB/s, GB, us, TFLOP/s, tokens, sequences), the Sweep sheet's B and N "
     "headers and the Plan sheet's request and layout. Everything else is a formula; "
     "recalculate after editing."),
    ("Number formats", "kv_bytes_per_elem (Inputs) is the KV cache's bytes per element: "
     "2 for bf16, 1 for fp8 (the cache halves, max_batch about doubles). Weight and "
     "activation bytes follow the spec's dtypes."),
    ("Inputs", "Each row says in words what it is, its symbol in the small grey key column. "
     "in_<name> is the cell you type (human unit); base_<name> beside it is the same value "
     "in base units (bytes, bytes/s, s, FLOP/s) that the formulas use. Typing a value the "
     "CLI refuses is refused, with the rule: N + T within the trained context, tp dividing "
     "the heads and columns it splits, ep dividing the experts and tp x dp, dp dividing B."),
    ("Summary", "out_<key>: every memory and step key of `infest eval --json`, in words, "
     "its JSON key in the grey column; the value in base units (what eval gives), shown "
     "again as GB, ms or us, tokens/s. Below: the weights by parameter group, the named "
     "cells the weight totals sum."),
    ("Bounds", "step.overlap_floor_s, the largest of compute, memory and collective time "
     "over the whole step: the hard floor, no engine beats it. step.roofline_s, the "
     "serial-kernel bound (each op at its largest hard term, ops one after another: an "
     "engine that overlaps kernels can beat it, never the overlap floor), and "
     "step.tokens_per_s = tokens / roofline_s."),
    ("Estimate", "step.time_s adds the launch floor: launch_overhead per kernel, an "
     "assumption about the engine (CUDA graphs and fusion beat it)."),
    ("Does not fit", "memory.fits FALSE turns the Summary's fits, step time and tokens/s "
     "rows (bound and estimate) red: "
     "that batch and context do not fit in memory, so the point is not achievable. On the "
     "Sweep sheet such cells are grey and struck through, the fits grid's FALSE red; the "
     "charts leave them out (and contexts past the model's trained context)."),
    ("Ops", "A row per op: per-instance costs and time terms; count x the row gives the "
     "step's share. bound names the largest term."),
    ("Sweep / Charts", "tokens/s and step time with B down and N across; charts are drawn "
     "from the chart-data grids (points that fit only)."),
    ("Hardware", "Inputs!in_hw picks a column of the Hardware sheet (every shipped GPU, "
     "the --hw file, custom); each hardware input looks its value up there. A number typed "
     "over one wins and turns orange, the catalogue's value beside it."),
    ("Plan", "serve's default, continuous batching with a token budget per step (plan_chunk): "
     "users, clients per replica, ISL, OSL, the limits and a layout of its own in; the "
     "schedule as named rows, the chunk table beside, every op of the step's parts and of "
     "each chunk's mixed step on the Plan steps sheet; TTFT, TPOT, E2E, tokens/s, GPUs, fits "
     "and the limits out (plan_<key>)."),
    ("Long formulas", "No formula is over 400 characters: step totals sum per-op rows "
     "(Ops, Sweep points, Plan steps); the weight totals sum the groups' named cells; a longer "
     "part of a memory form sits on Helpers."),
]


HOW_TO_CHARS_PER_LINE = 95   # of the text column's 100-character width, wrapped


def _how_to_sheet(b: Builder) -> None:
    ws = b.wb["How to use"]
    ws.cell(1, 1, f"{b.analysis.model.name} on {b.analysis.hardware.name}: a live workbook "
                  f"({b.analysis.forms.phase})").font = Font(bold=True, size=13)
    for row, (topic, text) in enumerate(HOW_TO, start=3):
        ws.cell(row, 1, topic).font = HEADER_FONT
        ws.cell(row, 2, text).alignment = Alignment(wrap_text=True, vertical="top")
        ws.cell(row, 1).alignment = Alignment(vertical="top")
        # Engines do not grow a row to its wrapped text on load: give it the lines it needs.
        ws.row_dimensions[row].height = 15 * (1 + len(text) // HOW_TO_CHARS_PER_LINE)
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
        words = PARAM_DOC.get(name, name.replace("_", " "))
        return params[name].dimension or "", f"{words} (model param)", "model"
    hw = b.analysis.hardware
    dim = hw.fields[name].dimension if hw and name in hw.fields else None
    doc, unit = field_doc(name)
    return dim or unit, doc, "hardware"


def _inputs_sheet(b: Builder, picker: Picker) -> None:
    ws = b.wb["Inputs"]
    ws.append(["input", "value", "unit", "in base units", "base unit", "key", "kind", "note"])
    rules = _validations(ws)
    _hw_row(b, ws, picker)
    items = _input_rows(b, picker)
    for row, item in enumerate(items, start=3):
        _input_row(b, ws, row, item, picker)
    _capped_rows(b, ws, 3 + len(items))
    checks = rules_by_cell(b.analysis.forms.model.constraints, _plain_names(items))
    for row, item in enumerate(items, start=3):
        kind, extra = _validation_kind(b, item), checks.get(f"in_{item[0]}")
        if extra:   # the model's own conditions on this input: a custom rule
            ws.add_data_validation(rule := cell_rule(f"in_{item[0]}", kind, extra))
            rule.add(f"B{row}")
        else:
            rules[kind].add(f"B{row}")
    _style_header(ws, widths=[54, 14, 12, 16, 10, 18, 10, 40], right=(2, 4))
    _key_column(ws, 6)


# Below the inputs, derived from them: eff_mem and eff_kv under the per-SM ceiling, the
# cells every op's estimate reads (compiler/core/estimate_rule.py memory_shares).
CAPPED_DOCS = {"eff_mem_sm": "derived: eff_mem under the per-SM ceiling, min(eff_mem, sms x "
                             "clock x sm_bytes_per_cycle / mem_bw); eff_mem with clock 0",
               "eff_kv_sm": "derived: eff_kv under the per-SM ceiling, likewise"}


def _capped_rows(b: Builder, ws, first: int) -> None:
    """The CAPPED cells, one row each from `first`, named as their keys."""
    for row, (key, text) in enumerate(capped_texts(b.names).items(), start=first):
        ws.cell(row, 1, CAPPED_DOCS[key])
        cell = ws.cell(row, 2, "=" + text)
        cell.font, cell.number_format = DERIVED_FONT, "0.000"
        ws.cell(row, 6, key)
        ws.cell(row, 7, "derived")
        b.define(key, "Inputs", f"B{row}")
        b.names[CAPPED_CELLS[key]] = key


def _plain_names(items: list[tuple]) -> dict[sympy.Symbol, str]:
    """The inputs typed in their base unit (no scaling), by symbol: the ones a validation
    rule can name directly (the model's conditions are on counts, not on TB/s)."""
    return {sym(name): f"in_{name}" for name, _value, unit, _doc, _kind in items
            if unit not in HUMAN}


def _key_column(ws, col: int) -> None:
    """The JSON key / symbol beside each row's words: narrow, small and grey."""
    for (cell,) in ws.iter_rows(min_row=2, min_col=col, max_col=col):
        cell.font = KEY_FONT
    ws.cell(1, col).font = HEADER_FONT


def _hw_row(b: Builder, ws, picker: Picker) -> None:
    """in_hw: the GPU the hardware inputs are looked up for (a list of the sheet's names)."""
    ws.cell(2, 1, "GPU: a column of the Hardware sheet (or custom)")
    cell = ws.cell(2, 2, own_name(b))
    cell.font, cell.fill = INPUT_FONT, INPUT_FILL
    ws.cell(2, 6, "hw")
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
    ws.cell(row, 1, doc)
    cell = ws.cell(row, 2)
    cell.font, cell.fill = INPUT_FONT, INPUT_FILL
    if name in picker.rows:
        _hardware_cell(ws, cell, value, scale, picker.selected(name))
    else:
        cell.value = _number(value / scale)
    cell.number_format = "General"
    ws.cell(row, 3, human_unit)
    ws.cell(row, 6, name)
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

# Per-instance forms, then the estimate's other pieces; time_s is derived on the sheet.
OP_COLUMNS = list(OP_KEYS[:-1]) + list(PART_KEYS)
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
        spare = _row_parts(b, ws, row, _FIRST_COL + len(keys) + 1)
        for col, key in enumerate(OP_COLUMNS, start=_FIRST_COL):
            set_formula(ws.cell(row, col), b.formula(forms[key], allocate=spare), forms[key])
        _op_derived(ws, row, OpKind.of(node, forms), b.names)
        for col, key in enumerate(keys, start=_FIRST_COL):
            ws.cell(row, col).number_format = _op_format(key)
    names = [len(n.name) for n in b.analysis.model.ops] + [4]
    _style_header(ws, widths=[max(names) + 2, 12, 14] + [14] * len(keys))
    for col in range(_FIRST_COL, _FIRST_COL + len(keys)):  # numbers sit right: so do their headers
        ws.cell(1, col).alignment = Alignment(horizontal="right", vertical="bottom", wrap_text=True)
    ws.row_dimensions[1].height = 30
    return 2, 1 + len(b.analysis.model.ops)


def _row_parts(b: Builder, ws, row: int, first: int) -> Callable[[sympy.Basic], str]:
    """An allocator for an op form too long for one formula: its parts go to this row's
    cells from column `first` on (the op's own B, N, ... as every cell of the row), not
    to the shared Helpers sheet."""
    hoisted: dict[sympy.Basic, str] = {}

    def allocate(sub: sympy.Basic) -> str:
        if sub not in hoisted:
            col = first + len(hoisted)
            hoisted[sub] = f"${get_column_letter(col)}${row}"
            ws.cell(1, col, "part of a longer formula")
            set_formula(ws.cell(row, col), b.formula(sub, allocate=allocate), sub)
        return hoisted[sub]
    return allocate


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
    if key in ("count", "kernels", "ring_steps"):
        return "#,##0"
    if key == "gemm_load":
        return "0.000"
    if key == "intensity FLOP/byte":
        return "#,##0.0"
    return "General" if key == "bound" else "##0.00E+0"


def _op_derived(ws, row: int, op: OpKind, names: Mapping[sympy.Symbol, str]) -> None:
    """time, roofline, estimate, intensity, time x count and bound from the row's own cells."""
    c = {key: f"{letter}{row}" for key, letter in _op_letters().items()}
    terms = ",".join(c[k] for k in TERM_KEYS)
    hard = ",".join(c[k] for k in HARD_KEYS)
    derived = [f"=MAX({terms})", f"=MAX({hard})",
               "=" + estimate_text(c, op, names),
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
    ws.append(["what", "value", "unit", "shown as", "in", "also", "key", "note"])
    rows = _summary_rows(b)
    namer = b.namer = Namer.of([(expr, _name_of(section, key)) for section, key, expr in rows])
    groups, table_top = groups_of(b.analysis), len(rows) + 4   # after step.bound, a blank row
    sums = summary_sums(b, groups, table_top + 1)
    for row, (section, key, expr) in enumerate(rows, start=2):
        ws.cell(row, 1, summary_label(section, key))
        ws.cell(row, 7, f"{section}.{key}")
        b.define(_name_of(section, key), "Summary", f"B{row}")
        text = sums.get((section, key)) or _summary_formula(b, namer, (section, key, expr), ops_rows)
        set_formula(ws.cell(row, 2), text, expr)
        _summary_units(ws, row, section, key)
    where = {(s, k): r for r, (s, k, _) in enumerate(rows, start=2)}
    _bound_row(b, ws, len(rows) + 2, where)
    _mark_summary_unfit(ws, where)
    params = Namer.of([(e, _name_of(s, k)) for s, k, e in rows if s == "params"])
    summary_table(b, ws, table_top, groups, params)
    _style_header(ws, widths=[44, 22, 10, 14, 9, 38, 24, 60], right=(2, 4))
    _key_column(ws, 7)


def summary_label(section: str, key: str) -> str:
    """A Summary row's words: the result-key table's label (compiler/core/keys.py), a
    parameter group's name, or the time term a binding ceiling stands for."""
    if section == "params" and key.startswith("group."):
        return f"parameters, group {key[len('group.'):]}"
    if section == "bound":
        return BOUND_LABELS.get(key, key)
    return key_label(f"{section}.{key}")


# The binding-ceiling candidates (compiler/core/terms.py BOUND_TERMS) in words.
BOUND_LABELS = {"weights": "ceiling: memory time reading weights",
                "kv": "ceiling: memory time reading the KV cache",
                **{t.name: f"ceiling: {t.name} time" for t in TIME_TERMS if len(t.bounds) == 1}}


# Rows that turn red when the point does not fit: it is not achievable.
_UNFIT_ROWS = [("memory", "fits"), ("step", "tokens_per_s"), ("step", "roofline_s"),
               ("step", "time_s"), ("step", "estimate_s"), ("step", "tokens_per_s_estimate")]


def _mark_summary_unfit(ws, where: dict) -> None:
    """Red fits and throughput rows, and words saying why, when out_fits is FALSE."""
    for section, key in _UNFIT_ROWS:
        row = where[(section, key)]
        ws.conditional_formatting.add(f"A{row}:F{row}", FormulaRule(
            formula=["NOT(out_fits)"], fill=UNFIT_FILL, font=UNFIT_FONT))
    for key in ("tokens_per_s", "tokens_per_s_estimate"):
        ws.cell(where[("step", key)], 6, '=IF(out_fits,"","NOT ACHIEVABLE: does not fit in memory")')
    ws.cell(where[("memory", "fits")], 6, '=IF(out_fits,"fits","DOES NOT FIT in memory")')


def _summary_formula(b: Builder, namer: Namer, row: tuple[str, str, sympy.Basic],
                     ops_rows: tuple[int, int]) -> str:
    """Step totals sum the Ops sheet (count x per-op cell); the rest print their form,
    with the parts that are other Summary cells written as those cells' names."""
    section, key, expr = row
    first, last = ops_rows
    column = _op_letters().get(key) if section == "step" and key in _OPS_SUMMED else None
    if column:
        def ops(col: str) -> str:
            return f"Ops!${col}${first}:${col}${last}"
        if key == "estimate_s":
            return "=" + step_estimate_text(ops("D"), ops(column), ops(_op_letters()["ring_steps"]),
                                            b.names)
        return f"=SUMPRODUCT({ops('D')},{ops(column)})"
    if expr == sympy.oo:  # max_batch / max_context that memory never bounds
        return UNBOUNDED_TEXT
    groups = b.analysis.forms.groups
    if (section, key) == ("params", "total") and groups and sympy.Add(*groups.values()) == expr:
        return "=" + "+".join(_name_of("params", f"group.{g}") for g in groups)
    readable = namer.rewrite(expr, _name_of(section, key))
    b.names.update(namer.symbols)  # helper cells print the stand-ins too
    return b.formula(readable)


UNBOUNDED_TEXT = "unbounded (KV cache does not grow)"


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


_FORMATS = {"bytes": "#,##0", "params": "#,##0", "FLOP": "#,##0", "s": "0.000000",
            "tokens/s": "#,##0.0"}


# Which step figures are hard bounds and which assume an engine (the "note" column).
BOUND_NOTES = {"roofline_s": "serial-kernel bound: peaks, kernels one after another, no launch cost",
               "overlap_floor_s": "hard floor: max of compute, memory, comm totals; no engine beats it",
               "tokens_per_s": "serial-kernel bound: B*T / roofline_s",
               "time_s": "with the launch floor: assumes launch_overhead per kernel",
               "t_launch_s": "assumption about the engine, not part of the hard bound",
               "t_overhead_s": "estimate only: the engine's per-step overhead (step_overhead)",
               "estimate_s": "estimate: each op by its kind (eff_*, kernel and ring-step "
                             "latency, GEMM tiles, busiest expert rank) plus t_overhead_s",
               "tokens_per_s_estimate": "estimate: B*T / estimate_s"}


def _summary_units(ws, row: int, section: str, key: str) -> None:
    """Unit beside the base value; the value again in a human unit: GB (GiB too), ms or us
    (whichever reads without leading zeros), billions of params, tokens/s whole."""
    unit = {"params": "params", "bound": "s"}.get(section) or unit_of(key)
    ws.cell(row, 3, unit)
    if section == "step" and key in BOUND_NOTES:
        ws.cell(row, 8, BOUND_NOTES[key])
    ws.cell(row, 2).number_format = _FORMATS.get(unit, "General")
    ws.cell(row, 4).number_format = "#,##0.000"
    if unit == "bytes":
        ws.cell(row, 4, f"=B{row}/1E9")
        ws.cell(row, 5, "GB")
        ws.cell(row, 6, f'=TEXT(B{row}/2^30,"0.00")&" GiB"')
    elif unit == "s":
        ws.cell(row, 4, f"=IF(ABS(B{row})>=0.001,B{row}*1000,B{row}*1E6)")
        ws.cell(row, 5, f'=IF(ABS(B{row})>=0.001,"ms","us")')
    elif unit == "params":
        ws.cell(row, 4, f"=B{row}/1E9")
        ws.cell(row, 5, "billion")
    elif unit == "tokens/s":
        ws.cell(row, 4, f"=B{row}").number_format = "#,##0"
        ws.cell(row, 5, "tokens/s")


def _bound_row(b: Builder, ws, row: int, where: dict) -> None:
    """`out_bound`: the largest of the four ceilings, ties in the evaluator's order."""
    refs = [f"B{where[('bound', k)]}" for k in BOUND_TERMS]
    biggest = f"MAX({','.join(refs)})"
    text = '"launch"'
    for name, ref in reversed(list(zip(BOUND_TERMS[:-1], refs[:-1]))):
        text = f'IF({ref}={biggest},"{name}",{text})'
    ws.cell(row, 1, key_label("step.bound"))
    ws.cell(row, 7, "step.bound").font = KEY_FONT
    set_formula(ws.cell(row, 2), "=" + text, "argmax(" + ", ".join(BOUND_TERMS) + ")")
    b.define("out_bound", "Summary", f"B{row}")
