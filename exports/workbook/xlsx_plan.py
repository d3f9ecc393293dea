"""The workbook's Plan sheet: `infest serve` under its default scheduling, continuous
batching with a token budget (compiler/analyses/continuous.py, docs/serving.md), as live
formulas.

A planner edits the blue cells: users, clients per replica C, the token budget K
(plan_chunk), ISL, OSL, the TPOT and TTFT limits and the layout (tp, ep, pp, dp: this
sheet's own). The sheet then follows serve step by step, each quantity a named cell:

- the schedule of the busiest rank's c = ceil(C / dp) clients, both regimes computed and
  the one that holds chosen by IF (plan_alone): prompts alone (chunks of q = K - (c - 1)
  tokens, P = ceil(I / q) chunk steps) or shared (S_p steps to the first token);
- the chunk table: the CHUNK_POINTS chunk positions a prompt's mixed steps are averaged
  over (tokens T_j, cached N_j, weight 1 for the chunks counted);
- the "Plan steps" sheet: a point table (exports/workbook/points.py) of the step's parts,
  the decode part (d requests at the mean context), the pure decode step (c requests),
  each chunk's prompt part and all its tokens together, with every op's terms; below it
  the mixed step per chunk, op by op, combined by continuous.py's MIXED_RULES;
- TTFT = ttft_steps x the mean mixed step (the estimate's plus the per-request overhead
  and the closed loop's queueing: the scheduler's next look (every poll_interval decode
  steps; the step in progress at 1), the other clients' prompts ahead,
  those joining its step; compiler/analyses/arrivals.py); TPOT = (mixed_steps x mixed +
  the other decode steps x pure) / (OSL - 1); E2E, tokens/s and the rest as serve's
  `metrics`.

The same rows with the hard bound (step.roofline_s) follow as `plan_bound_<key>`.
Speculative decoding is not on this sheet (serve --draft).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import sympy
from openpyxl.formatting.rule import FormulaRule
from openpyxl.utils import column_index_from_string, get_column_letter
from openpyxl.worksheet.datavalidation import DataValidation

from infest.compiler.analyses.continuous import CHUNK_POINTS, ESTIMATE_RULES, MIXED_RULES
from infest.compiler.analyses.serve import DEFAULT_CHUNK, METRIC_KEYS
from infest.compiler.core.functions import Min
from infest.compiler.core.keys import PARALLEL, TRAINED_CONTEXT
from infest.compiler.core.symbols import sym
from infest.compiler.core.terms import TIME_TERMS
from infest.exports.workbook.excel_printer import excel_formula
from infest.exports.workbook.book import (DERIVED_FONT, HEADER_FONT, INPUT_FILL, INPUT_FONT,
                                          UNFIT_FILL, UNFIT_FONT, Builder, live_cell)
from infest.compiler.forms.estimate import POLL_INTERVAL, REQUEST_OVERHEAD
from infest.compiler.forms.model import engine_room
from infest.exports.workbook.validation import cell_rule, rules_by_cell
from infest.exports.workbook.xlsx_memory import plan_fits_rows, plan_group_table
from infest.exports.workbook.points import (BOUND, ESTIMATE, OpKind, Point, Table,
                                            bound_text, estimate_text, point_table,
                                            step_estimate_text)

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

SHEET, STEPS = "Plan", "Plan steps"
# (key, default, unit, label): the cells a planner edits, before the layout's.
REQUEST_INPUTS = [
    ("users", 64, "users", "users to serve (clients, all replicas)"),
    ("concurrency", 16, "clients", "clients per replica, C (serve --concurrency)"),
    ("chunk", DEFAULT_CHUNK, "tokens", "token budget per step, K (serve --chunk)"),
    ("isl", 1024, "tokens", "prompt tokens, ISL"),
    ("osl", 256, "tokens", "output tokens, OSL (2 or more)"),
    ("tpot_max", 50, "ms", "TPOT limit"),
    ("ttft_max", 2000, "ms", "TTFT limit"),
]
CHECKS = ("fits", "meets_tpot", "meets_ttft", "within_context")
FIRST_ROW = 4               # first input row (title, blank, header above it)
TABLE_COL = 9               # the chunk table's first column (I)
CHUNK_HEADER = ["k", "counted", "chunk j", "tokens T_j", "cached N_j",
                "mixed step, estimate (s)", "mixed step, bound (s)"]
COLUMNS = ("what", "value", "unit", "in ms", "key", "how")
WIDTHS = (44, 14, 10, 11, 22, 60, 2, 2, 5, 8, 8, 11, 11, 16, 16)


def plan_sheet(b: Builder, decode: "Analysis") -> None:
    """Write the Plan sheet and its Plan steps sheet (see the module doc)."""
    ws = b.wb.create_sheet(SHEET, index=b.wb.sheetnames.index("Sweep") + 1)
    steps = b.wb.create_sheet(STEPS, index=b.wb.sheetnames.index(SHEET) + 1)
    ws.cell(1, 1, "serve's default: continuous batching with a token budget per step "
                  "(docs/serving.md). Edit the blue cells; the layout here is this sheet's "
                  "own. Per-op rows: the Plan steps sheet.").font = HEADER_FONT
    for col, title in enumerate(COLUMNS, start=1):
        ws.cell(FIRST_ROW - 1, col, title).font = HEADER_FONT
    row = _inputs(b, ws, FIRST_ROW)
    for item in _schedule_rows():
        row = _row(b, ws, row, *item)
    chunks = _chunk_table(ws)
    plan_group_table(b, ws, FIRST_ROW + CHUNK_POINTS + 1, TABLE_COL, decode, _live)
    _steps_sheet(b, steps, decode, chunks)
    for item in _metric_rows(b, decode):
        row = _row(b, ws, row, *item)
    _mark_failures(ws)
    for i, width in enumerate(WIDTHS, start=1):
        ws.column_dimensions[ws.cell(1, i).column_letter].width = width


def _inputs(b: Builder, ws, row: int) -> int:
    """The request and layout input cells; returns the next free row."""
    whole = DataValidation(type="whole", operator="greaterThan", formula1="0",
                           error="a whole number, 1 or more")
    two = DataValidation(type="whole", operator="greaterThanOrEqual", formula1="2",
                         error="OSL: 2 or more (TPOT needs a decode step)")
    positive = DataValidation(type="decimal", operator="greaterThan", formula1="0",
                              error="a positive time")
    for rule in (whole, two, positive):
        rule.showErrorMessage, rule.errorTitle = True, "infest plan input"
        ws.add_data_validation(rule)
    layout = {i.name: i.value for i in b.analysis.inputs(b.overrides) if i.name in PARALLEL}
    rows = REQUEST_INPUTS + [(p, int(layout.get(p, 1)), "GPUs", f"{p} of this plan's layout")
                             for p in PARALLEL]
    checks = _plan_checks(b)
    for key, default, unit, label in rows:
        cell = ws.cell(row, 2, default)
        cell.font, cell.fill = INPUT_FONT, INPUT_FILL
        if f"plan_{key}" in checks:   # the model's conditions on it: a custom rule
            kind = "two_or_more" if key == "osl" else "whole"
            ws.add_data_validation(rule := cell_rule(f"plan_{key}", kind, checks[f"plan_{key}"]))
            rule.add(cell.coordinate)
        else:
            {"ms": positive, "tokens": two if key == "osl" else whole}.get(unit, whole).add(cell.coordinate)
        _label(ws, row, key, unit, label, "")
        b.define(f"plan_{key}", SHEET, f"B{row}")
        row += 1
    return row


def _plan_checks(b: Builder) -> dict[str, list[tuple[str, str]]]:
    """Cell name -> the conditions on it: the model's conditions on the layout (tp divides
    the heads, ep divides the experts and tp x dp, pp at most the layers; none that use
    B, N or T, which the sheet derives), and ISL + OSL - 1 within the trained context as
    serve checks it."""
    names = {**{s: n for s, n in b.names.items() if n.startswith("in_")},
             **{sym(p): f"plan_{p}" for p in PARALLEL}}
    for point in ("B", "N", "T"):
        names.pop(sym(point), None)
    checks = rules_by_cell(b.analysis.forms.model.constraints, names)
    trained = b.names.get(sym(TRAINED_CONTEXT))
    if trained is not None:
        context = (f"plan_isl+plan_osl-1<={trained}", "ISL + OSL - 1 <= the trained context")
        for key in ("plan_isl", "plan_osl"):
            checks[key] = [context]
    return checks


def _label(ws, row: int, key: str, unit: str, label: str, note: str) -> None:
    ws.cell(row, 1, label)
    ws.cell(row, 3, unit)
    ws.cell(row, 5, key).font = DERIVED_FONT
    ws.cell(row, 6, note)


_FORMATS = {"bytes": "#,##0", "s": "0.000000", "tokens/s": "#,##0.0", "requests/s": "#,##0.000",
            "GPUs": "#,##0", "tokens": "#,##0.##", "replicas": "#,##0", "steps": "#,##0.###",
            "requests": "#,##0.###", "clients": "#,##0"}


def _row(b: Builder, ws, row: int, key: str, text, unit: str, label: str, note: str) -> int:
    """One named row: a formula, or a callable that writes the cell itself; times in
    seconds (as serve --json) with milliseconds beside."""
    cell = ws.cell(row, 2)
    b.define(f"plan_{key}", SHEET, f"B{row}")
    if callable(text):
        text(cell)
    else:
        cell.value = text
    cell.number_format = _FORMATS.get(unit, "General")
    _label(ws, row, key, unit, label, note)
    if unit == "s":
        ms = ws.cell(row, 4, f"=B{row}*1000")
        ms.number_format, ms.font = "#,##0.000", DERIVED_FONT
    return row + 1


def _schedule_rows() -> list[tuple]:
    """serve's schedule (continuous.py `schedule`) for c clients on the busiest rank, one
    named quantity a row; no speculation, so each decoder adds t = 1 token to a step."""
    return [
        ("all_clients", "=-INT(-plan_concurrency/plan_dp)", "clients",
         "clients on the busiest data-parallel rank", "ceil(C / dp)"),
        ("clients", "=MAX(1,MIN(plan_all_clients,INT(plan_kv_cap/plan_pp)))", "clients",
         "of them running (what the KV cache admits), c", "max(1, min(ceil(C / dp), "
         "floor(KV cap / pp)))"),
        ("admission_share", "=plan_all_clients/plan_clients", "",
         "clients per running request", ">= 1: the rest wait for one to leave"),
        ("steps", "=plan_osl-1", "steps", "decode steps per request, R", "OSL - 1"),
        ("mean_context", "=plan_isl+(plan_osl-2)/2", "tokens",
         "mean context a decode token attends to", "ISL + (OSL - 2) / 2"),
        ("q", "=plan_chunk-(plan_clients-1)", "tokens",
         "prompt room beside the other decoders, q", "K - (c - 1)"),
        ("alone_chunks", "=-INT(-plan_isl/MAX(plan_q,1))", "steps",
         "chunk steps of a prompt alone, P", "ceil(ISL / max(q, 1))"),
        ("alone", "=AND(plan_q>=1,(plan_clients-1)*plan_alone_chunks<=plan_steps)", "",
         "prompts alone (else shared)", "q >= 1 and (c - 1) P <= R"),
        ("s_full", "=MAX(1,plan_clients*(plan_isl+plan_steps)/plan_chunk-plan_steps)", "steps",
         "shared: steps to first token when every step is full", "max(1, c (I + R) / K - R)"),
        ("d_full", "=plan_clients*plan_steps/(plan_s_full+plan_steps)", "requests",
         "shared: decoders per step at S_full", "c R / (S_full + R)"),
        ("s_shared", "=MAX(plan_s_full,plan_isl/(plan_chunk-plan_d_full))", "steps",
         "shared: steps to first token, S_p", "max(S_full, I / (K - d_full))"),
        ("d_shared", "=plan_clients*plan_steps/(plan_s_shared+plan_steps)", "requests",
         "shared: decode tokens per step, d", "c R / (S_p + R)"),
        ("p_shared", "=plan_clients*plan_isl/(plan_s_shared+plan_steps)", "tokens",
         "shared: prompt tokens per step, p", "c I / (S_p + R)"),
        ("ttft_steps", "=IF(plan_alone,plan_alone_chunks,plan_s_shared)", "steps",
         "steps to the first token", "alone: P; shared: S_p"),
        ("mixed_decoders", "=IF(plan_alone,plan_clients-1,plan_d_shared)", "requests",
         "decoders riding a mixed step", "alone: c - 1; shared: d"),
        ("mixed_steps", "=IF(plan_alone,(plan_clients-1)*plan_alone_chunks,plan_steps)", "steps",
         "mixed steps among a request's decode steps", "alone: (c - 1) P; shared: R"),
        ("prompts", "=IF(plan_alone,1,MAX(1,plan_p_shared/plan_isl))", "requests",
         "prompt parts per mixed step, n", "alone: 1; shared: max(1, p / I)"),
        ("chunk_tokens", "=IF(plan_alone,MIN(plan_q,plan_isl),MIN(plan_p_shared,plan_isl))",
         "tokens", "chunk size, s", "alone: min(q, I); shared: min(p, I)"),
        ("chunks", "=IF(plan_alone,plan_alone_chunks,-INT(-plan_isl/plan_chunk_tokens))",
         "steps", "chunk steps per prompt", "alone: P; shared: ceil(I / s)"),
        ("points", f"=MIN({CHUNK_POINTS},plan_chunks)", "", "chunk positions averaged",
         f"every chunk up to {CHUNK_POINTS}, else slice midpoints"),
    ]


def _chunk_table(ws) -> dict[str, str]:
    """CHUNK_POINTS rows k: counted (k < points), chunk j, tokens T_j and cached N_j
    (continuous.py `chunk_points`); returns the columns' ranges by name and the rows."""
    top = FIRST_ROW
    for i, title in enumerate(CHUNK_HEADER):
        ws.cell(top - 1, TABLE_COL + i, title).font = HEADER_FONT
    col = [ws.cell(top, TABLE_COL + i).column_letter for i in range(len(CHUNK_HEADER))]
    for k in range(CHUNK_POINTS):
        r = top + k
        kk, w, j = f"{col[0]}{r}", f"{col[1]}{r}", f"{col[2]}{r}"
        ws.cell(r, TABLE_COL, k).font = DERIVED_FONT
        ws[w] = f"=IF({kk}<plan_points,1,0)"
        ws[j] = (f"=IF({w}=0,0,IF(plan_chunks<=plan_points,{kk},"
                 f"INT((2*{kk}+1)*plan_chunks/(2*plan_points))))")
        ws[f"{col[3]}{r}"] = f"=IF(plan_alone,MIN(plan_chunk_tokens,plan_isl-{j}*plan_chunk_tokens),plan_chunk_tokens)"
        ws[f"{col[4]}{r}"] = f"=IF(plan_alone,{j}*plan_chunk_tokens,MIN({j}*plan_chunk_tokens,plan_isl-plan_chunk_tokens))"
    last = top + CHUNK_POINTS - 1
    return {"k": col[0], "w": col[1], "T": col[3], "N": col[4], "est": col[5], "roof": col[6],
            "top": str(top), "last": str(last)}


def _layout_names(b: Builder) -> dict[sympy.Symbol, str]:
    """Symbols as printed on the Plan sheets: the Inputs sheet's names, the layout's own."""
    return {**b.names, **{sym(p): f"plan_{p}" for p in PARALLEL}}


def _points(chunks: dict[str, str]) -> list[Point]:
    """The parts of the steps: decode part, pure decode step, then per chunk position its
    prompt part and the step's tokens together (continuous.py `step_costs`)."""
    d = Point("decode part: d requests", "=plan_mixed_decoders*plan_dp", "=1", "=plan_mean_context")
    u = Point("pure decode step: c requests", "=plan_clients*plan_dp", "=1", "=plan_mean_context")
    rows = range(int(chunks["top"]), int(chunks["last"]) + 1)
    prompt = [Point(f"prompt part, chunk row {k}", "=plan_prompts*plan_dp",
                    f"={SHEET}!${chunks['T']}${r}", f"={SHEET}!${chunks['N']}${r}")
              for k, r in enumerate(rows)]
    total = [Point(f"all tokens, chunk row {k}", "=plan_dp",
                   f"=plan_mixed_decoders+plan_prompts*{SHEET}!${chunks['T']}${r}", "=0")
             for k, r in enumerate(rows)]
    return [d, u, *prompt, *total]


def _steps_sheet(b: Builder, ws, decode: "Analysis", chunks: dict[str, str]) -> None:
    """The point table of the step's parts and, below it, the mixed step per chunk."""
    ws.cell(1, 1, "The parts of a continuous-batching step, every op's terms at each part's "
                  "B, T, N (the decode forms); below, each chunk's mixed step, op by op."
            ).font = HEADER_FONT
    names = _layout_names(b)
    ops = [node.name for node in decode.model.ops]
    kinds = [OpKind.of(node, forms) for node, forms in zip(decode.model.ops, decode.forms.ops)]
    table = point_table(ws, 3, _points(chunks), kinds, ops, names, totals=(BOUND, ESTIMATE))
    top = table.last + 3
    mixed = _mixed_table(ws, top, table, kinds, names)
    for j in range(CHUNK_POINTS):
        r = int(chunks["top"]) + j
        for key, col in ((ESTIMATE, chunks["est"]), (BOUND, chunks["roof"])):
            cell = b.wb[SHEET][f"{col}{r}"]
            cell.value = f"={mixed.total(key, mixed.first + j)}"
            cell.number_format = "0.000E+00"
    b.define("plan_pure_s", STEPS, f"{table.totals[ESTIMATE]}{table.first + 1}")
    b.define("plan_bound_pure_s", STEPS, f"{table.totals[BOUND]}{table.first + 1}")


def _mixed_table(ws, top: int, parts: Table, kinds: list[OpKind], names) -> Table:
    """Rows j: each op's terms of the mixed step carrying the decode part and chunk j's
    prompt part (MIXED_RULES), its bound and estimate (the estimate's other pieces by
    ESTIMATE_RULES); totals count x those, the estimate's plus the per-step overhead."""
    n = len(kinds)
    keys = [t.key for t in TIME_TERMS] + [BOUND, ESTIMATE]
    first_col = 4 + 2 + 1
    blocks = {k: (get_column_letter(first_col + i * n), get_column_letter(first_col + i * n + n - 1))
              for i, k in enumerate(keys)}
    totals = {BOUND: "E", ESTIMATE: "F"}
    table = Table(ws.title, top + 2, top + 1 + CHUNK_POINTS, blocks, totals)
    ws.cell(top, 1, "mixed step per chunk row: decode part + prompt part, one forward").font = HEADER_FONT
    ws.cell(top + 1, 1, "chunk row").font = HEADER_FONT
    for key in keys:
        ws.cell(top, column_index_from_string(blocks[key][0]), f"mixed {key}").font = HEADER_FONT
    for key, letter in totals.items():
        ws.cell(top + 1, column_index_from_string(letter), f"mixed {key}").font = HEADER_FONT
    mem_bw = names[sym("mem_bw")]
    decode_row, chunk0 = parts.first, parts.first + 2
    for j in range(CHUNK_POINTS):
        row, prompt, total = table.first + j, chunk0 + j, chunk0 + CHUNK_POINTS + j
        ws.cell(row, 1, j)
        rows = {"decode": decode_row, "prompt": prompt, "total": total}
        for i in range(n):
            terms = {}
            for t in TIME_TERMS:
                ref = table.cell(t.key, i, row)
                ws[ref] = "=" + _mixed_term(MIXED_RULES[t.name], parts, t.key, i, rows, mem_bw)
                terms[t.key] = ref
            ws[table.cell(BOUND, i, row)] = "=" + bound_text(terms)
            pieces = {k: f"({_mixed_term(rule, parts, k, i, rows, mem_bw)})"
                      for k, rule in ESTIMATE_RULES.items()}
            ws[table.cell(ESTIMATE, i, row)] = "=" + estimate_text({**terms, **pieces}, kinds[i], names)
        for key, letter in totals.items():
            count, own = parts.block("count", total), table.block(key, row)
            ws[f"{letter}{row}"] = "=" + (
                step_estimate_text(count, own, parts.block("ring_steps", total), names)
                if key == ESTIMATE else f"SUMPRODUCT({count},{own})")
            ws[f"{letter}{row}"].number_format = "0.000E+00"
    return table


def _mixed_term(rule: str, parts: Table, key: str, op: int, rows: dict[str, int],
                mem_bw: str) -> str:
    """One op's term of a mixed step by its rule (continuous.py MIXED_RULES)."""
    cell = {part: parts.cell(key, op, r) for part, r in rows.items()}
    if rule == "parts":
        return f"{cell['decode']}+{cell['prompt']}"
    if rule == "parts+weights":
        w = {part: parts.cell("weight_bytes", op, r) for part, r in rows.items()}
        return (f"{cell['decode']}+{cell['prompt']}"
                f"+({w['total']}-{w['decode']}-{w['prompt']})/{mem_bw}")
    if rule == "total":
        return cell["total"]
    if rule == "decode":
        return cell["decode"]
    raise ValueError(f"mixed-step rule {rule!r} has no formula on the Plan sheet")


# Symbols the Plan sheet binds to its own cells: the Summary's named parts that use any
# of them are not this sheet's.
_BOUND = frozenset(sym(n) for n in ("B", "N", "T", *PARALLEL))


def _live(b: Builder, cell, expr: sympy.Basic, point: dict[str, str]) -> None:
    """`expr` with T = 1 (one new token per decode step) over this sheet's cells."""
    expr = expr.xreplace({sym("T"): sympy.Integer(1)})
    readable = b.namer.rewrite(expr, free_of=_BOUND)
    b.names.update(b.namer.symbols)
    names = {**_layout_names(b), **{sym(k): v for k, v in point.items()}}
    live_cell(b, cell, names, (readable, expr), SHEET)


def _metric_rows(b: Builder, decode: "Analysis") -> list[tuple]:
    """(key, formula or cell writer, unit, label, note) of every output row, in order."""
    last = {"B": "plan_all_clients*plan_dp", "N": "plan_last_context"}
    forms = decode.forms
    top, bottom = FIRST_ROW, FIRST_ROW + CHUNK_POINTS - 1
    w = f"${get_column_letter(TABLE_COL + 1)}${top}:${get_column_letter(TABLE_COL + 1)}${bottom}"
    summed = plan_fits_rows(b, decode, _live, last)
    fits = summed or [
        ("fits", lambda c: _live(b, c, forms.memory["fits"], last), "",
         "fits in memory at the last decode step", "c x dp sequences at ISL + OSL - 2")]
    rows = [
        ("last_context", "=plan_isl+plan_osl-2", "tokens", "cache at the last decode step",
         "ISL + OSL - 2"),
        ("gpus", lambda c: _live(b, c, forms.parallel["gpus"], last), "GPUs",
         "GPUs of one replica (the layout)", "tp x pp x dp"),
        *fits,
        *_kv_cap_rows(b, forms.memory, summed is not None),
    ]
    for p, col in (("", TABLE_COL + 5), ("bound_", TABLE_COL + 6)):
        steps = f"${get_column_letter(col)}${top}:${get_column_letter(col)}${bottom}"
        rows += [(f"{p}mixed_s", f"=SUMPRODUCT({w},{steps})/SUM({w})", "s",
                  ("" if not p else "bound: ") + "mean mixed step", "over the counted chunks")]
        queue = _queue_rows(b.names[REQUEST_OVERHEAD], b.names[POLL_INTERVAL]) if not p else []
        rows += queue + _serve_rows(p)
    return rows + _demand_rows(b)


def _kv_cap_rows(b: Builder, memory: Mapping[str, sympy.Expr], summed: bool) -> list[tuple]:
    """The requests one rank's KV cache holds at ISL + OSL - 1 (serve.py `memory_cap`,
    engine_max_batch / dp at the last decode step, at most 2^31): from the weights' named
    sum and one request's KV where the fits rows have them (short formulas), else the
    memory form's engine_max_batch whole."""
    point, most = {"B": "plan_dp", "N": "plan_last_context"}, 2**31
    note = "engine_max_batch / dp at the last decode step (memory admission)"
    if not summed:
        return [("kv_cap", lambda c: _live(b, c, Min(memory["engine_max_batch"] / sym("dp"),
                                                     most), point), "requests", _CAP_LABEL, note)]
    # The memory form's own room (compiler/forms/model.py) over the weights' named sum.
    weights = sympy.Symbol("plan_weights_bytes_per_gpu", positive=True)
    room = excel_formula(engine_room(weights), {**b.names, weights: weights.name})
    return [("kv_bytes_per_request", lambda c: _live(b, c, memory["kv_bytes_per_gpu"], point),
             "bytes", "one request's KV cache per GPU at its last decode step",
             "dp sequences / dp"),
            ("kv_cap", f"=IF(plan_kv_bytes_per_request=0,{most},MIN({most},MAX(0,INT(({room})"
                       f"/plan_kv_bytes_per_request))))", "requests", _CAP_LABEL,
             "floor(kv_free_fraction x (mem_fraction x capacity - weights - mem_reserve) / "
             "KV a request), "
             "per GPU (memory admission)")]


_CAP_LABEL = "requests one rank's KV cache holds at ISL + OSL - 1"


def _queue_rows(request: str, poll: str) -> list[tuple]:
    """The estimate's TTFT before queueing and the closed loop's three terms
    (compiler/analyses/arrivals.py `closed_loop`); `request`: the per-request overhead's
    cell, which the estimate's TTFT adds once; `poll`: the poll interval's cell."""
    return [
        ("bare_ttft_s", f"=plan_ttft_steps*plan_mixed_s+{request}", "s", "TTFT before queueing",
         "ttft_steps x mixed step + request_overhead"),
        ("others_per_s", "=(plan_clients-1)/(plan_bare_ttft_s+(plan_osl-1)*plan_tpot_s)",
         "requests/s", "the other clients' arrivals, lambda", "(c - 1) / (bare TTFT + (OSL - 1) TPOT)"),
        ("busy", "=IF(plan_alone,MIN(1,plan_others_per_s*plan_ttft_steps*plan_mixed_s),1)", "",
         "share of the time in mixed steps", "alone: min(1, lambda P t_m); shared: 1"),
        ("residual_s", "=MIN(1,plan_clients-1)*(plan_busy*plan_mixed_s+(1-plan_busy)"
                       f"*{poll}*plan_pure_s)/2", "s", "to the scheduler's next look, residual",
         "min(1, c - 1) x (busy t_m + (1 - busy) poll_interval t_u) / 2"),
        ("token_s", "=(plan_mixed_s-plan_pure_s)/IF(plan_alone,plan_isl/plan_chunks,"
                    "plan_prompts*plan_chunk_tokens)", "s", "one prompt token's cost, delta",
         "(t_m - t_u) / prompt tokens of the mean mixed step (alone: ISL / P)"),
        ("room", "=plan_chunk-plan_mixed_decoders", "tokens", "budget beside the decoders",
         "K - decoders riding"),
        ("prompt_s", "=plan_isl/MAX(plan_room,1E-9)*plan_pure_s+plan_isl*plan_token_s", "s",
         "a prompt's share of the budget, s", "ISL / room x t_u + ISL x delta"),
        ("budget_utilisation", "=plan_others_per_s*plan_prompt_s", "",
         "the budget's utilisation, rho_b", "lambda s"),
        ("wait_s", "=IF(plan_budget_utilisation<1,MIN(plan_budget_utilisation*plan_prompt_s"
                   "/(2*(1-plan_budget_utilisation)),(plan_clients-1)*plan_prompt_s),"
                   "(plan_clients-1)*plan_prompt_s)", "s", "the prompts ahead (M/D/1 wait)",
         "min(rho_b s / (2 (1 - rho_b)), (c - 1) s)"),
        ("share_s", "=MIN(plan_others_per_s*plan_residual_s*plan_isl,MAX(plan_room-plan_prompts"
                    "*plan_chunk_tokens,0))*plan_token_s", "s", "prompts joining its step",
         "min(lambda x residual x ISL, budget left) x delta"),
    ]


def _serve_rows(p: str) -> list[tuple]:
    """serve's METRIC_KEYS after gpus and fits, named plan_<p><key> (p: "" or "bound_"):
    the estimate's TTFT queued (_queue_rows), the bound's the bare schedule."""
    what = "bound: " if p else ""
    run = [(p + "run_ttft_s", "=plan_bare_ttft_s+plan_residual_s+plan_wait_s+plan_share_s"
            if not p else f"=plan_ttft_steps*plan_{p}mixed_s", "s", what + "TTFT once admitted",
            "bare TTFT + residual + wait + share" if not p else "ttft_steps x mixed step"),
           (p + "memory_wait_s", f"=(plan_admission_share-1)*(plan_{p}run_ttft_s+(plan_osl-1)"
            f"*plan_{p}tpot_s)", "s", what + "wait for the KV cache to admit it",
            "(clients / running - 1) x E2E once admitted (Little's law)")]
    rows = {
        "ttft_s": (f"=plan_{p}run_ttft_s+plan_{p}memory_wait_s", "s", "TTFT",
                   "TTFT once admitted + the wait for memory"),
        "tpot_s": (f"=(plan_mixed_steps*plan_{p}mixed_s+(plan_steps-plan_mixed_steps)"
                   f"*plan_{p}pure_s)/(plan_osl-1)", "s", "TPOT",
                   "(mixed steps x mixed + the rest x pure) / (OSL - 1)"),
        "e2e_s": (f"=plan_{p}ttft_s+(plan_osl-1)*plan_{p}tpot_s", "s", "E2E",
                  "TTFT + (OSL - 1) x TPOT"),
        "tokens_per_s": (f"=plan_concurrency*plan_osl/plan_{p}e2e_s", "tokens/s",
                         "output tokens/s of one replica", "C x OSL / E2E"),
        "tokens_per_s_per_gpu": (f"=plan_{p}tokens_per_s/plan_gpus", "tokens/s",
                                 "output tokens/s per GPU", "per GPU of the layout"),
        "tokens_per_s_per_user": (f"=1/plan_{p}tpot_s", "tokens/s", "tokens/s one user sees",
                                  "1 / TPOT"),
        "requests_per_s": (f"=plan_{p}tokens_per_s/plan_osl", "requests/s",
                           "requests/s of one replica", "tokens/s / OSL"),
    }
    keys = [k for k in METRIC_KEYS if k not in ("gpus", "fits")]
    return run + [(p + k, rows[k][0], rows[k][1], what + rows[k][2], rows[k][3]) for k in keys]


def _demand_rows(b: Builder) -> list[tuple]:
    """Replicas and GPUs for the users, the limits, and one verdict."""
    rows = [
        ("replicas", "=-INT(-plan_users/plan_concurrency)", "replicas", "replicas needed",
         "ceil(users / C)"),
        ("gpus_needed", "=plan_replicas*plan_gpus", "GPUs", "GPUs needed",
         "replicas x GPUs per replica"),
        ("meets_tpot", "=plan_tpot_s<=plan_tpot_max/1000", "", "TPOT within its limit",
         "estimate"),
        ("meets_ttft", "=plan_ttft_s<=plan_ttft_max/1000", "", "TTFT within its limit",
         "estimate"),
    ]
    trained = b.names.get(sym(TRAINED_CONTEXT))
    if trained is not None:
        rows.append(("within_context", f"=plan_isl+plan_osl-1<={trained}", "",
                     "within the trained context", "ISL + OSL - 1 <= trained context"))
    checks = ",".join(f"plan_{k}" for k in (CHECKS if trained is not None else CHECKS[:-1]))
    return rows + [("ok", f"=AND({checks})", "", "the plan holds", "all of the checks above")]


def _mark_failures(ws) -> None:
    """Red rows where a check is FALSE."""
    for (key,) in ws.iter_rows(min_row=FIRST_ROW, min_col=5, max_col=5):
        if key.value in CHECKS + ("ok",):
            ws.conditional_formatting.add(f"A{key.row}:F{key.row}", FormulaRule(
                formula=[f"NOT($B${key.row})"], fill=UNFIT_FILL, font=UNFIT_FONT))
