"""The workbook's Hardware sheet and GPU picker.

A row per hardware field of the one field table (compiler/load/fields.py: the uniform
catalogue's fields, then the estimate's parameters: the efficiencies and role
"estimate"), a column per shipped GPU, then the `--hw` file when it is not shipped, then
`custom` (blue cells a planner types, starting from the workbook's hardware). Each
column is its GPU under the workbook's engine profile, as the loader gives it
(compiler/passes/engine.py `engine_hardware`: the engine's launch floor and the estimate
parameters the file leaves out). Values are in the human unit the Inputs sheet uses
(TB/s, GB, us, TFLOP/s). An efficiency neither gives is a formula of its column, as the
loader derives it (compiler/load/hardware.py `efficiencies`): measured / datasheet where
the measured ceiling is non-zero, else the documented default; another estimate
parameter neither gives is its documented default.

`in_hw` (on the Inputs sheet) holds one of the column names, validated against them; the
"selected" column looks each field up in that column, and each hardware `in_<field>` on
the Inputs sheet reads its selected value (a number typed over it wins and is flagged).
A field added to the table appears as one more row with no code here.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from openpyxl.utils import get_column_letter

from infest.compiler.load.fields import CATALOGUE, EFFICIENCIES, ESTIMATE_DEFAULTS, FIELDS, MEASURED
from infest.exports.workbook.book import (DERIVED_FONT, HEADER_FONT, HUMAN, INPUT_FILL,
                                          INPUT_FONT, Builder)

if TYPE_CHECKING:
    from infest.compiler.load.hardware import CompiledHardware
    from infest.compiler.passes.engine import Engine

SHEET = "Hardware"
CUSTOM = "custom"
HEADER_ROW = 2
FIRST_COL = 4   # field, unit, selected, then the catalogue


@dataclass(frozen=True)
class Picker:
    """Where the picker's parts are: the field rows and the selected column."""

    rows: dict[str, int]
    names: str          # the header range of hardware names (for in_hw's validation)

    def selected(self, field: str) -> str:
        """The selected value of a field (human unit), as a reference."""
        return f"{SHEET}!$C${self.rows[field]}"


def own_name(b: Builder) -> str:
    """The workbook's hardware as the picker names it."""
    return next(n for n, hw in catalogue(b.analysis.hardware, b.analysis.forms.engine).items()
                if hw is b.analysis.hardware or n == b.analysis.hardware.name)


def fields() -> list[str]:
    """The sheet's rows: every catalogue field, then the estimate's parameters."""
    return list(CATALOGUE) + [k for k in ESTIMATE_DEFAULTS if k not in CATALOGUE]


def human(field: str) -> tuple[Fraction, str]:
    """(base units per human unit, human unit) of a field."""
    unit = FIELDS[field].unit
    return HUMAN.get(unit, (Fraction(1), unit or ""))


def catalogue(current: "CompiledHardware", engine: "Engine") -> dict[str, "CompiledHardware"]:
    """Shipped hardware by name under the engine profile, then the workbook's own (already
    under it) when it is not the shipped file."""
    from infest.compiler.api import load_hardware
    from infest.compiler.load.loader import shipped
    from infest.compiler.passes.engine import engine_hardware
    files = shipped("hardware")
    out = {name: engine_hardware(load_hardware(name), engine) for name in files}
    own = files.get(current.name)
    if own is None or own.resolve() != Path(current.file).resolve():
        out[current.name if own is None else f"{current.name} (--hw)"] = current
    return out


def hardware_sheet(b: Builder) -> Picker:
    """Write the sheet (see the module doc); returns where its rows are."""
    ws = b.wb.create_sheet(SHEET, index=b.wb.sheetnames.index("Inputs") + 1)
    ws.cell(1, 1, "Hardware catalogue: pick a column by its name in Inputs!in_hw; type a "
                  "GPU of your own into the blue 'custom' column.").font = HEADER_FONT
    entries = catalogue(b.analysis.hardware, b.analysis.forms.engine)
    columns = list(entries) + [CUSTOM]
    last = get_column_letter(FIRST_COL + len(columns) - 1)
    for col, title in enumerate(["field", "unit", "selected", *columns], start=1):
        ws.cell(HEADER_ROW, col, title).font = HEADER_FONT
    rows = {name: HEADER_ROW + 1 + i for i, name in enumerate(fields())}
    for name, row in rows.items():
        ws.cell(row, 1, name)
        ws.cell(row, 2, human(name)[1])
        pick = ws.cell(row, 3, f"=INDEX($D{row}:${last}{row},MATCH(in_hw,$D${HEADER_ROW}:${last}${HEADER_ROW},0))")
        pick.font = DERIVED_FONT
        for j, column in enumerate(columns):
            hw = entries.get(column, b.analysis.hardware)
            _value(ws, row, FIRST_COL + j, name, hw, rows, custom=column == CUSTOM)
    ws.column_dimensions["A"].width = 22
    for col in range(3, FIRST_COL + len(columns)):
        ws.column_dimensions[get_column_letter(col)].width = 14
    ws.freeze_panes = "D3"
    return Picker(rows, f"{SHEET}!$D${HEADER_ROW}:${last}${HEADER_ROW}")


def _value(ws, row: int, col: int, name: str, hw: "CompiledHardware", rows: dict[str, int],
           custom: bool) -> None:
    """One hardware's value of one field in its human unit; an efficiency it does not
    give is derived from its own column."""
    cell = ws.cell(row, col)
    if name in hw.fields:
        value = hw.fields[name].value / human(name)[0]
        cell.value = int(value) if value.denominator == 1 else float(value)
    elif name in EFFICIENCIES:
        cell.value = _efficiency(name, get_column_letter(col), rows)
        cell.font = DERIVED_FONT
        return
    else:
        value = FIELDS[name].default or Fraction(0)
        cell.value = float(value / human(name)[0])
    if custom:
        cell.font, cell.fill = INPUT_FONT, INPUT_FILL


def _efficiency(name: str, col: str, rows: dict[str, int]) -> str:
    """measured / datasheet (at most 1) where measured, else the default."""
    default = float(EFFICIENCIES[name])
    if name not in MEASURED:
        return f"={default:g}"
    measured, peak = (f"{col}{rows[f]}" for f in MEASURED[name])
    return f"=IF({measured}>0,MIN(1,{measured}/{peak}),{default:g})"
