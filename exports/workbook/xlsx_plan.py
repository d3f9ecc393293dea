"""The workbook's Plan sheet: `infest serve --batching static` as live formulas (serve's
default, continuous batching, is not on this sheet yet).

A planner edits the blue cells: users, concurrency per replica C, ISL, OSL, the TPOT and
TTFT limits and the layout (tp, ep, pp, dp: this sheet's own; the other sheets use the
Inputs sheet's). The outputs are formulas of those cells and of the Inputs sheet, built
from the closed forms exactly as compiler/analyses/serve.py evaluates them:

- B = ceil(C / dp) x dp (the busiest data-parallel rank's batch, times dp);
- TTFT = the prefill step (estimate) at B, N = ISL;
- TPOT = the mean decode step (T = 1) at B over the contexts of serve's
  `decode_contexts` (every one of ISL .. ISL + OSL - 2 up to CONTEXT_POINTS, else the
  midpoints of CONTEXT_POINTS equal slices), one row each in the context table;
- E2E = TTFT + (OSL - 1) x TPOT; tokens/s = C x OSL / E2E; per GPU, per user (1 / TPOT),
  requests/s; fits = the decode step's memory at the last context ISL + OSL - 2;
- replicas = ceil(users / C), GPUs needed = replicas x the layout's GPUs.

The same rows with the hard bound (step.roofline_s) follow as `plan_bound_<key>`. Names:
`plan_<key>` for every key of serve's METRIC_KEYS and the rows below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import sympy
from openpyxl.formatting.rule import FormulaRule
from openpyxl.worksheet.datavalidation import DataValidation

from infest.compiler.core.keys import PARALLEL
from infest.compiler.core.keys import TRAINED_CONTEXT
from infest.compiler.analyses.serve import CONTEXT_POINTS, METRIC_KEYS, USES
from infest.compiler.core.symbols import sym
from infest.exports.workbook.book import (DERIVED_FONT, HEADER_FONT, INPUT_FILL, INPUT_FONT, UNFIT_FILL,
                                          UNFIT_FONT, Builder, live_cell, set_formula)

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

SHEET = "Plan"
# (key, default, unit, what it is): the cells a planner edits, before the layout's.
REQUEST_INPUTS = [
    ("users", 64, "users", "concurrent users to serve"),
    ("concurrency", 16, "requests", "C: requests one replica serves at once (serve --concurrency)"),
    ("isl", 1024, "tokens", "prompt tokens (ISL)"),
    ("osl", 256, "tokens", "output tokens (OSL), 2 or more"),
    ("tpot_max", 50, "ms", "TPOT limit"),
    ("ttft_max", 2000, "ms", "TTFT limit"),
]
# Yes/no rows that plan_ok requires (within_context only where the model states one).
CHECKS = ("fits", "meets_tpot", "meets_ttft", "within_context")
FIRST_ROW = 4               # first input row (title, blank, header above it)
TABLE_COL = 6               # the context table's first column (F)
TABLE_HEADER = ["k", "counted", "context N (tokens)", "decode step, estimate (s)",
                "decode step, bound (s)"]


@dataclass(frozen=True)
class Phases:
    """The decode and prefill analyses the Plan sheet prints (one spec, hardware, policy)."""

    decode: "Analysis"
    prefill: "Analysis"


def plan_sheet(b: Builder, serving: Phases) -> None:
    """Write the Plan sheet (see the module doc)."""
    ws = b.wb.create_sheet(SHEET, index=b.wb.sheetnames.index("Sweep") + 1)
    ws.cell(1, 1, "Phases as `infest serve --batching static` computes it (C requests "
                  "prefill together, then decode together). Edit the blue cells; the "
                  "layout here is this sheet's own.").font = HEADER_FONT
    ws.append([])
    ws.append(["input / output", "value", "unit", "", "note"])
    row = _inputs(b, ws, FIRST_ROW)
    table = _context_table(b, ws, serving.decode)
    for key, text, unit, note in _derived_rows(b, serving, table):
        row = _derived(b, ws, row, key, text, unit, note)
    _mark_failures(ws)
    for col, width in zip("ABCDEFGHIJ", (26, 16, 10, 2, 52, 6, 9, 18, 22, 22)):
        ws.column_dimensions[col].width = width


def _inputs(b: Builder, ws, row: int) -> int:
    """The request and layout input cells; returns the next free row."""
    whole = DataValidation(type="whole", operator="greaterThan", formula1="0",
                           error="a whole number, 1 or more")
    positive = DataValidation(type="decimal", operator="greaterThan", formula1="0",
                              error="a positive time")
    ws.add_data_validation(whole)
    ws.add_data_validation(positive)
    layout = {i.name: i.value for i in b.analysis.inputs(b.overrides) if i.name in PARALLEL}
    rows = REQUEST_INPUTS + [(p, int(layout.get(p, 1)), "GPUs", f"{p} of this plan's layout")
                             for p in PARALLEL]
    for key, default, unit, note in rows:
        cell = ws.cell(row, 2, default)
        cell.font, cell.fill = INPUT_FONT, INPUT_FILL
        (positive if unit == "ms" else whole).add(cell.coordinate)
        _label(ws, row, key, unit, note)
        b.define(f"plan_{key}", SHEET, f"B{row}")
        row += 1
    return row


def _label(ws, row: int, key: str, unit: str, note: str) -> None:
    ws.cell(row, 1, key)
    ws.cell(row, 3, unit)
    ws.cell(row, 5, note)


def _derived(b: Builder, ws, row: int, key: str, text: str | Callable, unit: str,
             note: str) -> int:
    """One named output row: a formula, or a callable that writes the cell itself."""
    cell = ws.cell(row, 2)
    b.define(f"plan_{key}", SHEET, f"B{row}")
    if callable(text):
        text(cell)
    else:
        set_formula(cell, text, text[1:])
    cell.number_format = _FORMATS.get(unit, "General")
    _label(ws, row, key, unit, note)
    return row + 1


_FORMATS = {"s": "0.000E+00", "tokens/s": "#,##0.0", "requests/s": "#,##0.000",
            "GPUs": "#,##0", "tokens": "#,##0", "replicas": "#,##0"}


def _layout_names(b: Builder) -> dict[sympy.Symbol, str]:
    """Symbols as printed on this sheet: the Inputs sheet's names, the layout's own."""
    return {**b.names, **{sym(p): f"plan_{p}" for p in PARALLEL}}


# Symbols the Plan sheet binds to its own cells: the Summary's named parts that use any
# of them are not this sheet's.
_BOUND = frozenset(sym(n) for n in ("B", "N", "T", *PARALLEL))


def _live(b: Builder, cell, expr: sympy.Basic, point: dict[str, str], prefix: str) -> None:
    """`expr` with T = 1 (one new token per decode step) over this sheet's cells."""
    expr = expr.xreplace({sym("T"): sympy.Integer(1)})
    readable = b.namer.rewrite(expr, free_of=_BOUND)
    b.names.update(b.namer.symbols)
    names = {**_layout_names(b), **{sym(k): v for k, v in point.items()}}
    live_cell(b, cell, names, (readable, expr), prefix)


@dataclass(frozen=True)
class _Table:
    """Ranges of the context table (absolute references on this sheet)."""

    counted: str
    estimate: str
    bound: str


def _context_table(b: Builder, ws, decode: "Analysis") -> _Table:
    """CONTEXT_POINTS rows: k, counted (1/0), N_k, the decode step at B, N_k (estimate
    and bound). serve's contexts: ISL + k while OSL - 1 <= CONTEXT_POINTS, else
    ISL + floor((2k + 1)(OSL - 1) / (2 CONTEXT_POINTS)); uncounted rows repeat a real one."""
    top = FIRST_ROW
    for j, title in enumerate(TABLE_HEADER):
        ws.cell(top - 1, TABLE_COL + j, title).font = HEADER_FONT
    col = [ws.cell(top, TABLE_COL + j).column_letter for j in range(len(TABLE_HEADER))]
    for k in range(CONTEXT_POINTS):
        r = top + k
        ws.cell(r, TABLE_COL, k).font = DERIVED_FONT
        ws.cell(r, TABLE_COL + 1, f"=IF({col[0]}{r}<plan_points,1,0)")
        ws.cell(r, TABLE_COL + 2, _context_formula(f"{col[0]}{r}"))
        point = {"B": "plan_batch", "N": f"${col[2]}${r}"}
        for j, key in ((3, "estimate_s"), (4, "roofline_s")):
            _live(b, ws.cell(r, TABLE_COL + j), decode.forms.step[key], point, SHEET)
            ws.cell(r, TABLE_COL + j).number_format = "0.000E+00"
    last = top + CONTEXT_POINTS - 1
    return _Table(*(f"${c}${top}:${c}${last}" for c in (col[1], col[3], col[4])))


def _context_formula(k: str) -> str:
    """Context N_k of the cell `k` holding k (serve's decode_contexts): uncounted rows
    repeat the last real context, so every row is a valid point."""
    slices = f"INT((2*{k}+1)*plan_steps/{2 * CONTEXT_POINTS})"
    return f"=plan_isl+IF(plan_steps<={CONTEXT_POINTS},MIN({k},plan_steps-1),{slices})"


def _derived_rows(b: Builder, s: Phases, t: _Table) -> list[tuple]:
    """(key, formula or cell writer, unit, note) of every output row, in order."""
    def form(expr: sympy.Basic, n: str) -> Callable:
        return lambda cell: _live(b, cell, expr, {"B": "plan_batch", "N": n}, SHEET)

    rows = [
        ("steps", "=plan_osl-1", "", "decode steps per request (OSL - 1)"),
        ("batch", "=-INT(-plan_concurrency/plan_dp)*plan_dp", "sequences",
         "B: ceil(C / dp) x dp, the busiest data-parallel rank's batch x dp"),
        ("points", f"=MIN(plan_steps,{CONTEXT_POINTS})", "", "contexts TPOT averages"),
        ("last_context", "=plan_isl+plan_osl-2", "tokens", "cached at the last decode step"),
        ("gpus", form(s.decode.forms.parallel["gpus"], "plan_last_context"), "GPUs",
         "GPUs of one replica (the layout)"),
        ("fits", form(s.decode.forms.memory["fits"], "plan_last_context"), "",
         "the last decode step fits in memory"),
    ]
    for prefix, key, table in (("", USES["estimate"], t.estimate),
                               ("bound_", USES["bound"], t.bound)):
        rows += _metric_rows(prefix, form(s.prefill.forms.step[key], "plan_isl"),
                             f"=SUMPRODUCT({t.counted},{table})/SUM({t.counted})")
    return rows + _demand_rows(b)


def _metric_rows(p: str, ttft: Callable, tpot: str) -> list[tuple]:
    """serve's METRIC_KEYS after gpus and fits, named plan_<p><key> (p: "" or "bound_")."""
    what = "serial-kernel bound (roofline): " if p else "estimate: "
    rows = {
        "ttft_s": (ttft, "s", "the prefill step at B, N = ISL"),
        "tpot_s": (tpot, "s", "mean decode step over the counted contexts"),
        "e2e_s": (f"=plan_{p}ttft_s+plan_steps*plan_{p}tpot_s", "s", "TTFT + (OSL - 1) x TPOT"),
        "tokens_per_s": (f"=plan_concurrency*plan_osl/plan_{p}e2e_s", "tokens/s",
                         "output tokens/s of one replica: C x OSL / E2E"),
        "tokens_per_s_per_gpu": (f"=plan_{p}tokens_per_s/plan_gpus", "tokens/s", "per GPU"),
        "tokens_per_s_per_user": (f"=1/plan_{p}tpot_s", "tokens/s", "1 / TPOT"),
        "requests_per_s": (f"=plan_{p}tokens_per_s/plan_osl", "requests/s", "of one replica"),
    }
    keys = [k for k in METRIC_KEYS if k not in ("gpus", "fits")]
    return [(p + k, rows[k][0], rows[k][1], what + rows[k][2]) for k in keys]


def _demand_rows(b: Builder) -> list[tuple]:
    """Replicas and GPUs for the users, the limits, and one verdict."""
    rows = [
        ("replicas", "=-INT(-plan_users/plan_concurrency)", "replicas", "ceil(users / C)"),
        ("gpus_needed", "=plan_replicas*plan_gpus", "GPUs", "replicas x GPUs per replica"),
        ("meets_tpot", "=plan_tpot_s<=plan_tpot_max/1000", "", "estimated TPOT within its limit"),
        ("meets_ttft", "=plan_ttft_s<=plan_ttft_max/1000", "", "estimated TTFT within its limit"),
    ]
    trained = b.names.get(sym(TRAINED_CONTEXT))
    if trained is not None:
        rows.append(("within_context", f"=plan_isl+plan_osl-1<={trained}", "",
                     "ISL + OSL - 1 within the model's trained context"))
    checks = ",".join(f"plan_{k}" for k in (CHECKS if trained is not None else CHECKS[:-1]))
    note = "fits, meets both limits" + (", within the trained context" if trained else "")
    return rows + [("ok", f"=AND({checks})", "", note)]


def _mark_failures(ws) -> None:
    """Red rows where a check is FALSE."""
    for (key,) in ws.iter_rows(min_row=FIRST_ROW, max_col=1):
        if key.value in CHECKS + ("ok",):
            ws.conditional_formatting.add(f"A{key.row}:C{key.row}", FormulaRule(
                formula=[f"NOT($B${key.row})"], fill=UNFIT_FILL, font=UNFIT_FONT))
