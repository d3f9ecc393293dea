"""Point tables: a step's per-op quantities at many points (B, T, N), one row per point.

A step's closed form is a sum over ops of count x the op's largest time term; printed whole
it runs to thousands of characters. A point table writes it the way the equations read:
each row is one point, with its B, T and N in the first columns, then a block of columns
per quantity (count, weight bytes, each time term of compiler/core/terms.py TIME_TERMS, the
op's bound and its estimate) holding one column per op, and the step totals as SUMPRODUCT
over those blocks. Every op formula is one op's form, printed once and written on each row
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

from infest.compiler.core.symbols import sym
from infest.compiler.core.terms import HARD_KEYS, TIME_TERMS
from infest.exports.workbook.book import DERIVED_FONT, HEADER_FONT
from infest.exports.workbook.excel_printer import excel_formula

ROW = "\u00a7"             # placeholder for the row number in a printed template
OP_FORMS = ("count", "weight_bytes") + tuple(t.key for t in TIME_TERMS)
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


def effs(names: Mapping[sympy.Symbol, str]) -> dict[str, str]:
    """The efficiency each derated term divides by: its cell name, or 1 where the forms
    use none (as compiler/core/terms.py `derated` does)."""
    return {t.key: names.get(sym(t.eff), "1") if t.eff else "1" for t in TIME_TERMS}


def estimate_text(terms: Mapping[str, str], eff: Mapping[str, str]) -> str:
    """An op's estimate from its term cells: the largest term at achievable ceilings."""
    parts = [terms[t.key] if eff[t.key] == "1" else f"{terms[t.key]}/{eff[t.key]}"
             for t in TIME_TERMS]
    return f"MAX({','.join(parts)})"


def bound_text(terms: Mapping[str, str]) -> str:
    """An op's serial-kernel bound from its term cells: the largest hard term."""
    return f"MAX({','.join(terms[k] for k in HARD_KEYS)})"


def op_total(key: str, terms: Mapping[str, str], eff: Mapping[str, str]) -> str:
    """An op's time by one of the step totals' rules, from its term cells."""
    if key == BOUND:
        return bound_text(terms)
    if key == ESTIMATE:
        return estimate_text(terms, eff)
    if key == "time_s":
        return f"MAX({','.join(terms.values())})"
    raise ValueError(f"no per-op rule for the step total {key!r}")


def point_table(ws, top: int, points: Sequence[Point], ops: Sequence[Mapping[str, sympy.Basic]],
                op_names: Sequence[str], names: Mapping[sympy.Symbol, str],
                totals: Sequence[str] = (BOUND, ESTIMATE, "time_s")) -> Table:
    """Write the table with its header at row `top` (block titles) and `top + 1` (op
    names); `names` prints every symbol but B, T and N. Totals: step sums of count x
    a per-op block (time_s: the largest of all terms, launch included)."""
    n = len(ops)
    keys = list(OP_FORMS) + list(totals)
    first_col = LABEL_COLS + len(totals) + 1
    blocks = {k: (get_column_letter(first_col + i * n), get_column_letter(first_col + i * n + n - 1))
              for i, k in enumerate(keys)}
    tot = {k: get_column_letter(LABEL_COLS + 1 + i) for i, k in enumerate(totals)}
    table = Table(ws.title, top + 2, top + 1 + len(points), blocks, tot)
    _headers(ws, top, table, keys, op_names)
    templates = _templates(ops, names)
    eff = effs(names)
    for row, point in enumerate(points, start=table.first):
        _point_row(ws, row, point, table, templates, eff)
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


def _templates(ops: Sequence[Mapping[str, sympy.Basic]], names: Mapping[sympy.Symbol, str]
               ) -> list[dict[str, str]]:
    """Each op's forms printed once, B, T and N as this row's cells (ROW for the row)."""
    own = {**names, sym("B"): f"$B{ROW}", sym("T"): f"$C{ROW}", sym("N"): f"$D{ROW}"}
    return [{k: "=" + excel_formula(op[k], own) for k in OP_FORMS} for op in ops]


def _point_row(ws, row: int, point: Point, table: Table, templates: list[dict[str, str]],
               eff: Mapping[str, str]) -> None:
    ws.cell(row, 1, point.label)
    for col, text in enumerate((point.B, point.T, point.N), start=2):
        ws.cell(row, col, text).number_format = "#,##0.###"
    for i, forms in enumerate(templates):
        for key, text in forms.items():
            ws[table.cell(key, i, row)] = text.replace(ROW, str(row))
        terms = {t.key: table.cell(t.key, i, row) for t in TIME_TERMS}
        for key in table.totals:
            ws[table.cell(key, i, row)] = "=" + op_total(key, terms, eff)
    for key, letter in table.totals.items():
        cell = ws[f"{letter}{row}"]
        cell.value = f"=SUMPRODUCT({table.block('count', row)},{table.block(key, row)})"
        cell.number_format = "0.000E+00"
