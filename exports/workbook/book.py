"""The workbook's shared parts: styles, units, Excel-safe names, the Builder that holds
the workbook's state (sheets, defined names, hoisted helper cells) and live formula cells.

Every sheet module (exports/workbook/xlsx.py, xlsx_plan.py) builds on these, so no sheet
imports another.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Mapping

import sympy
from openpyxl import Workbook
from openpyxl.comments import Comment
from openpyxl.styles import Font, PatternFill
from openpyxl.workbook.defined_name import DefinedName

from infest.compiler.core.keys import key_info
from infest.exports.workbook.excel_printer import excel_formula_split
from infest.exports.workbook.xlsx_names import Namer

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

INPUT_FONT = Font(color="0000FF")
INPUT_FILL = PatternFill("solid", fgColor="FFF2CC")
HEADER_FONT = Font(bold=True)
DERIVED_FONT = Font(color="808080", italic=True)  # computed, not to be edited
KEY_FONT = Font(color="808080", size=8)  # a row's JSON key / symbol, beside its words
OOM_FILL = PatternFill("solid", fgColor="D9D9D9")
OOM_FONT = Font(color="808080", strike=True)
UNFIT_FILL = PatternFill("solid", fgColor="FFC7CE")  # Excel's own "bad" red
UNFIT_FONT = Font(color="9C0006", bold=True)
READABLE_CHARS = 400  # no formula longer (the leading = counted): longer parts get cells
NOTE_CHARS = 2000  # notes longer than this are cut: they are for reading, not computing

# The unit an input is typed in: base dimension -> (base units per human unit, unit).
HUMAN = {"bytes": (Fraction(10**9), "GB"), "bytes/s": (Fraction(10**12), "TB/s"),
         "FLOP/s": (Fraction(10**12), "TFLOP/s"), "s": (Fraction(1, 10**6), "us"),
         "Hz": (Fraction(10**6), "MHz")}
_CELL_LIKE = re.compile(r"^([A-Za-z]{1,3}[0-9]+|[RrCc]|[Rr][0-9]*[Cc][0-9]*)$")


def check_excel_name(name: str) -> str:
    """Return `name` if Excel accepts it as a defined name, else raise ValueError."""
    if not re.fullmatch(r"[A-Za-z_\\][A-Za-z0-9_.]*", name) or len(name) > 255:
        raise ValueError(f"{name!r} is not a valid Excel name")
    if _CELL_LIKE.match(name) or name.upper() in ("TRUE", "FALSE"):
        raise ValueError(f"{name!r} looks like a cell reference")
    return name


def unit_of(key: str) -> str:
    """Base unit of a memory/step/op key (the one result-key table, compiler/core/keys.py)."""
    return key_info(key).unit


@dataclass
class Builder:
    """Workbook state: sheets, defined names, helper cells for long formulas."""

    analysis: "Analysis"
    overrides: Mapping[str, Any]
    wb: Workbook = field(default_factory=Workbook)
    names: dict[sympy.Symbol, str] = field(default_factory=dict)
    helpers: dict[sympy.Basic, str] = field(default_factory=dict)
    namer: Namer = field(default_factory=Namer)

    def define(self, name: str, sheet: str, cell: str) -> None:
        """A workbook-scoped defined name for one cell."""
        check_excel_name(name)
        col, row = re.match(r"([A-Z]+)(\d+)", cell).groups()  # type: ignore[union-attr]
        title = f"'{sheet}'" if not sheet.isidentifier() else sheet
        self.wb.defined_names[name] = DefinedName(name, attr_text=f"{title}!${col}${row}")

    def formula(self, expr: sympy.Basic, names: Mapping[sympy.Symbol, str] | None = None,
                allocate: Callable[[sympy.Basic], str] | None = None) -> str:
        """`=...` for an expression, long parts hoisted into helper cells."""
        return "=" + excel_formula_split(expr, names or self.names, allocate or self._helper,
                                         READABLE_CHARS - 1)

    def _helper(self, expr: sympy.Basic) -> str:
        """A cell on the Helpers sheet holding a hoisted subexpression (shared)."""
        if expr not in self.helpers:
            ws = self.wb["Helpers"]
            row = ws.max_row + 1
            self.helpers[expr] = f"Helpers!$B${row}"
            ws.cell(row, 1, f"h{row}: a part of a longer formula")
            set_formula(ws.cell(row, 2), self.formula(expr), expr)
        return self.helpers[expr]


def set_formula(cell, text: str, expr: sympy.Basic | str) -> None:
    """A formula cell with its symbolic form as a note."""
    cell.value = text
    note = str(expr)
    if len(note) > NOTE_CHARS:
        note = note[:NOTE_CHARS] + " ..."
    cell.comment = Comment(note, "infest")


def live_cell(b: Builder, cell, names: Mapping[sympy.Symbol, str], forms: tuple,
              mirror_prefix: str) -> None:
    """A formula cell of `forms` = (readable, expr) whose symbols print as `names` (its
    own B, N, ... cells); parts too long for one formula move to mirror sheets
    `<prefix>_h1`, `_h2`, ... at this cell's own position."""
    readable, expr = forms
    hoisted: dict[sympy.Basic, str] = {}

    def allocate(sub: sympy.Basic) -> str:
        # One cell per mirror sheet and position: the part's references stay this cell's.
        if sub not in hoisted:
            title = f"{mirror_prefix}_h{len(hoisted) + 1}"
            mirror = b.wb[title] if title in b.wb.sheetnames else b.wb.create_sheet(title)
            hoisted[sub] = f"'{title}'!{cell.column_letter}{cell.row}"
            mirror.cell(cell.row, cell.column,
                        "=" + excel_formula_split(sub, names, allocate, READABLE_CHARS - 1))
        return hoisted[sub]

    set_formula(cell, "=" + excel_formula_split(readable, names, allocate, READABLE_CHARS - 1), expr)
