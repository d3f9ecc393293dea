"""Shared workbook test helpers: named cells, and a planner's edits recalculated by real
LibreOffice."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import openpyxl

from libreoffice import recalculate


def named_cell(wb: openpyxl.Workbook, name: str):
    """The cell a workbook-scoped defined name points at."""
    sheet, ref = wb.defined_names[name].attr_text.split("!")
    return wb[sheet.strip("'")][ref.replace("$", "")]


def edit_and_recalculate(src: Path, edits: Mapping[str, Any], out_dir: Path,
                         soffice: str) -> openpyxl.Workbook:
    """Type `edits` (defined name -> value) into the file as a planner would, recalculate
    in LibreOffice, and read the computed values back."""
    if edits:
        wb = openpyxl.load_workbook(src)
        for name, value in edits.items():
            named_cell(wb, name).value = value
        wb.save(src)
    return openpyxl.load_workbook(recalculate(src, out_dir, soffice=soffice), data_only=True)
