"""Point tables: a step's per-op quantities at many points (B, T, N), one row per point.

A step's closed form is a sum over ops of count x the op's largest time term; printed whole
it runs to thousands of characters. A point table writes it the way the equations read:
each row is one point, with its B, T and N in the first columns, then a block of columns
per quantity (count, weight bytes, kernels, each time term of compiler/core/terms.py
TIME_TERMS, the estimate's other pieces of compiler/core/estimate_rule.py PART_KEYS, the
op's bound and its estimate) holding one column per op, and the step totals as SUMPRODUCT
over those blocks (the estimate's plus the per-step overhead). Every op formula is one op's form, printed once and written on each row
with that row's B, T and N (so a formula is as long as the op's form, a few hundred
characters at most). The Sweep sheet (a row per grid point) and the Plan sheet (a row per
part of a continuous-batching step) are point tables.

A time term added to TIME_TERMS appears as one more block with no code here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import sympy
from openpyxl.utils import column_index_from_string, get_column_letter

from infest.compiler.core.estimate_rule import CAPPED, PART_KEYS, Kind, memory_shares, op_estimate
from infest.compiler.core.functions import Max
from infest.compiler.core.symbols import sym
from infest.compiler.core.terms import HARD_KEYS, TERM_KEYS
from infest.compiler.forms.estimate import COMM_OVERLAP, PARAMS, STEP_OVERHEAD, SYMBOLIC
from infest.exports.workbook.book import DERIVED_FONT, HEADER_FONT, READABLE_CHARS
from infest.exports.workbook.excel_printer import excel_formula, excel_formula_split

ROW = "\u00a7"             # placeholder for the row number in a printed template
OP_FORMS = ("count", "weight_bytes", "kernels") + TERM_KEYS + PART_KEYS
ESTIMATE_CELLS = ("kernels",) + TERM_KEYS + PART_KEYS   # what an op's estimate reads
BOUND, ESTIMATE = "roofline_s", "estimate_s"   # per-op columns derived from the terms
LABEL_COLS = 4             # label, B, T, N


@dataclass(frozen=True)
class Point:
    """One row: a label and the formulas of its B, T and N (this row's own cells)."""

    label: str
    B: str
    T: str
    N: str


@dataclass(frozen=True)
class Table:
    """Where a point table's columns are: block key -> (first, last) column letters, and
    the totals' columns; rows `first` .. `last`."""

    sheet: str
    first: int
    last: int
    blocks: dict[str, tuple[str, str]]
    totals: dict[str, str]

    def block(self, key: str, row: int) -> str:
        """The range of one block on one row, e.g. `$H12:$AB12`."""
        a, z = self.blocks[key]
        return f"${a}{row}:${z}{row}"

    def cell(self, key: str, op: int, row: int) -> str:
        """One op's cell of a block on a row."""
        first = column_index_from_string(self.blocks[key][0])
        return f"{get_column_letter(first + op)}{row}"

    def total(self, key: str, row: int) -> str:
        """A step total's cell (absolute, for use on other sheets)."""
        return f"'{self.sheet}'!${self.totals[key]}${row}"


# eff_mem and eff_kv under the per-SM ceiling: two cells on the Inputs sheet (named as
# the CAPPED keys) that every op's estimate reads; written into each, the ceiling took a
# GEMM's estimate past READABLE_CHARS.
CAPPED_CELLS = {key: sympy.Symbol(key) for key in CAPPED}


def capped_texts(names: Mapping[sympy.Symbol, str]) -> dict[str, str]:
    """Each CAPPED cell's formula (compiler/core/estimate_rule.py memory_shares)."""
    return {key: excel_formula(form, names)
            for key, form in zip(CAPPED, memory_shares(PARAMS, SYMBOLIC))}


@dataclass(frozen=True)
class OpKind:
    """What an op's estimate needs beyond its cells: its forms (a piece constant there is
    written as the constant) and its kind (compiler/core/estimate_rule.py Kind)."""

    forms: Mapping[str, sympy.Basic]
    kind: Kind

    @classmethod
    def of(cls, node, forms: Mapping[str, sympy.Basic]) -> "OpKind":
        """From the op's node (kind, comm) and forms."""
        return cls(forms, Kind.of(node.kind, node.comm is not None))


def estimate_text(cells: Mapping[str, str], op: OpKind, names: Mapping[sympy.Symbol, str]) -> str:
    """An op's estimate (compiler/core/estimate_rule.py, the rule the forms compile) over
    its cells (`cells`: ESTIMATE_CELLS -> reference); its bound time_s is the largest term."""
    stand = {k: sympy.Symbol(f"cell_{k}") for k in ESTIMATE_CELLS}
    v = {k: op.forms[k] if op.forms[k].is_number else stand[k] for k in ESTIMATE_CELLS}
    v["time_s"] = Max(*(v[k] for k in TERM_KEYS))
    expr = op_estimate(v, {**PARAMS, **CAPPED_CELLS}, op.kind, SYMBOLIC)
    return excel_formula(expr, {**names, **{stand[k]: cells[k] for k in ESTIMATE_CELLS}})


def overhead_text(names: Mapping[sympy.Symbol, str]) -> str:
    """`+<the per-step overhead's cell>`: what a step's estimate adds beyond its ops."""
    return "+" + names[STEP_OVERHEAD]


def step_estimate_text(count: str, estimate: str, ring: str,
                       names: Mapping[sympy.Symbol, str]) -> str:
    """A step's estimate from ranges of its ops' counts, estimates and ring steps (SIGN: 1
    on a collective, 0 elsewhere): count x estimate summed, comm_overlap of the smaller of
    the collectives' part and the rest hidden (compiler/core/estimate_rule.py
    step_estimate), plus the per-step overhead."""
    total = f"SUMPRODUCT({count},{estimate})"
    comm = f"SUMPRODUCT({count},{estimate},SIGN({ring}))"
    return f"{total}-{names[COMM_OVERLAP]}*MIN({comm},{total}-{comm})" + overhead_text(names)


def bound_text(terms: Mapping[str, str]) -> str:
    """An op's serial-kernel bound from its term cells: the largest hard term."""
    return f"MAX({','.join(terms[k] for k in HARD_KEYS)})"


def op_total(key: str, cells: Mapping[str, str], op: OpKind,
             names: Mapping[sympy.Symbol, str]) -> str:
    """An op's time by one of the step totals' rules, from its cells."""
    if key == BOUND:
        return bound_text(cells)
    if key == ESTIMATE:
        return estimate_text(cells, op, names)
    if key == "time_s":
        return f"MAX({','.join(cells[k] for k in TERM_KEYS)})"
    raise ValueError(f"no per-op rule for the step total {key!r}")


def point_table(ws, top: int, points: Sequence[Point], ops: Sequence[OpKind],
                op_names: Sequence[str], names: Mapping[sympy.Symbol, str],
                totals: Sequence[str] = (BOUND, ESTIMATE, "time_s")) -> Table:
    """Write the table with its header at row `top` (block titles) and `top + 1` (op
    names); `names` prints every symbol but B, T and N. Totals: step sums of count x
    a per-op block (time_s: the largest of all terms, launch included; the estimate
    adds the per-step overhead)."""
    n = len(ops)
    keys = list(OP_FORMS) + list(totals)
    first_col = LABEL_COLS + len(totals) + 1
    blocks = {k: (get_column_letter(first_col + i * n), get_column_letter(first_col + i * n + n - 1))
              for i, k in enumerate(keys)}
    tot = {k: get_column_letter(LABEL_COLS + 1 + i) for i, k in enumerate(totals)}
    table = Table(ws.title, top + 2, top + 1 + len(points), blocks, tot)
    _headers(ws, top, table, keys, op_names)
    spare = first_col + len(keys) * n   # hoisted parts of long op forms: columns after the blocks
    templates, parts = _templates([op.forms for op in ops], names, spare)
    if parts:
        ws.cell(top, spare, "parts of longer op forms").font = HEADER_FONT
    for row, point in enumerate(points, start=table.first):
        _point_row(ws, row, point, table, templates, ops, names)
        for letter, text in parts.items():
            ws[f"{letter}{row}"] = text.replace(ROW, str(row))
    return table


def _headers(ws, top: int, table: Table, keys: list[str], op_names: Sequence[str]) -> None:
    for col, title in enumerate(("point", "B (sequences)", "T (tokens)", "N (cached)"), start=1):
        ws.cell(top + 1, col, title).font = HEADER_FONT
    for key, letter in table.totals.items():
        ws.cell(top, column_index_from_string(letter), "step total").font = HEADER_FONT
        ws.cell(top + 1, column_index_from_string(letter), key).font = HEADER_FONT
    for key in keys:
        start = column_index_from_string(table.blocks[key][0])
        ws.cell(top, start, key).font = HEADER_FONT
        for i, name in enumerate(op_names):
            ws.cell(top + 1, start + i, name).font = DERIVED_FONT


def _templates(ops: Sequence[Mapping[str, sympy.Basic]], names: Mapping[sympy.Symbol, str],
               spare: int) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Each op's forms printed once, B, T and N as this row's cells (ROW for the row); a
    form longer than READABLE_CHARS has parts hoisted into columns from `spare` on, each
    a template of its own on the same row (returned by column letter)."""
    own = {**names, sym("B"): f"$B{ROW}", sym("T"): f"$C{ROW}", sym("N"): f"$D{ROW}"}
    hoisted: dict[sympy.Basic, str] = {}
    parts: dict[str, str] = {}

    def allocate(expr: sympy.Basic) -> str:
        if expr not in hoisted:
            letter = hoisted[expr] = get_column_letter(spare + len(hoisted))
            parts[letter] = "=" + excel_formula_split(expr, own, allocate, READABLE_CHARS - 1)
        return f"${hoisted[expr]}{ROW}"

    templates = [{k: "=" + excel_formula_split(op[k], own, allocate, READABLE_CHARS - 1)
                  for k in OP_FORMS} for op in ops]
    return templates, parts


def _point_row(ws, row: int, point: Point, table: Table, templates: list[dict[str, str]],
               ops: Sequence[OpKind], names: Mapping[sympy.Symbol, str]) -> None:
    ws.cell(row, 1, point.label)
    for col, text in enumerate((point.B, point.T, point.N), start=2):
        ws.cell(row, col, text).number_format = "#,##0.###"
    for i, forms in enumerate(templates):
        for key, text in forms.items():
            ws[table.cell(key, i, row)] = text.replace(ROW, str(row))
        cells = {k: table.cell(k, i, row) for k in ESTIMATE_CELLS}
        for key in table.totals:
            ws[table.cell(key, i, row)] = "=" + op_total(key, cells, ops[i], names)
    for key, letter in table.totals.items():
        cell = ws[f"{letter}{row}"]
        count, own = table.block("count", row), table.block(key, row)
        cell.value = "=" + (step_estimate_text(count, own, table.block("ring_steps", row), names)
                            if key == ESTIMATE else f"SUMPRODUCT({count},{own})")
        cell.number_format = "0.000E+00"
