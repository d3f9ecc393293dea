"""The workbook's Sweep sheet (B down, N across: tokens/s and step time read from a
point table of every op at every grid point, the fits grid from the memory form), its
Sweep points sheet and the Charts sheet drawn from the grids of the points that fit."""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy
from openpyxl.chart import Reference, ScatterChart, Series
from openpyxl.formatting.rule import FormulaRule
from openpyxl.utils import get_column_letter

from infest.compiler.core.keys import TRAINED_CONTEXT
from infest.compiler.core.symbols import sym
from infest.exports.workbook.book import (DERIVED_FONT, HEADER_FONT, INPUT_FILL, INPUT_FONT,
                                          OOM_FILL, OOM_FONT, UNFIT_FILL, UNFIT_FONT, Builder,
                                          live_cell)
from infest.exports.workbook.points import BOUND, OpKind, Point, Table, point_table

SWEEP_B = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SWEEP_N = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
SWEEP_POINTS = "Sweep points"


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


def sweep_sheet(b: Builder) -> None:
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
    _red_where_false(ws, grids["fits"])
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
    t = f"={b.names[sym('T')]}" if sym("T") in b.names else "=1"   # prefill forms have no T
    points = [Point(f"B row {i + 1}, N column {j + 1}", f"=Sweep!$A${first.top + 2 + i}", t,
                    f"=Sweep!${get_column_letter(j + 2)}${first.top + 1}")
              for i in range(len(SWEEP_B)) for j in range(len(SWEEP_N))]
    ops = [node.name for node in b.analysis.model.ops]
    kinds = [OpKind.of(node, forms) for node, forms in zip(b.analysis.model.ops, b.analysis.forms.ops)]
    return point_table(ws, 3, points, kinds, ops, b.names, totals=(BOUND, "time_s"))


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


def _red_where_false(ws, grid: _Grid) -> None:
    """The fits grid's FALSE cells red, as every fits / ok flag in the workbook."""
    first_row = grid.top + 2
    last = f"{get_column_letter(len(SWEEP_N) + 1)}{first_row + len(SWEEP_B) - 1}"
    ws.conditional_formatting.add(f"B{first_row}:{last}", FormulaRule(
        formula=[f"NOT(B{first_row})"], fill=UNFIT_FILL, font=UNFIT_FONT))


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


def charts_sheet(b: Builder) -> None:
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
