"""`infest sweep`: one metric over a B x N grid, as a table, CSV, JSON and/or a figure."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from infest.compiler.core.keys import key_info
from infest.exports.cli.common import add_spec_args, make_analysis, make_runner, parse_sets
from infest.exports.plots.plots import PLOT_KINDS, check_plot_path

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner
    from infest.compiler.analyses.sweep import Sweep



def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC --hw HW --B LIST --N LIST [--metric KEY] [--csv|--json] [--plot FILE]."""
    add_spec_args(p, hw_required=True)
    lists = "1,8,32 | a..b (every integer) | a..b:x2 (geometric) | a..b:+8; units: 1k..128k:x2"
    p.add_argument("--B", metavar="LIST", required=True, help=f"batch sizes: {lists}")
    p.add_argument("--N", metavar="LIST", required=True, help=f"context lengths: {lists}")
    p.add_argument("--over", metavar="NAME=LIST",
                   help="one more axis: any whole-numbered input, e.g. --over tp=1,2,4,8 "
                        "(one B x N grid per value)")
    p.add_argument("--metric", metavar="KEY", default="tokens_per_s",
                   help="a step or memory key of `eval --json` (a bare key in both means "
                        "the step's; say memory.kv_bytes for the other), or bound "
                        "(default: tokens_per_s)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="long format: B,N,<metric>,fits")
    fmt.add_argument("--json", action="store_true", help="one object with every point")
    p.add_argument("-o", "--out", "--plot", dest="plot", metavar="FILE",
                   help="also write a figure (.png, .svg or .pdf)")
    p.add_argument("--plot-kind", choices=PLOT_KINDS, default="all",
                   help="which chart --plot draws (default: all, one multi-panel figure)")


def run(args: argparse.Namespace) -> int:
    """Parse the lists, evaluate the grid in one call, print it (and plot it)."""
    from infest.compiler.analyses.budget import MAX_GRIDS, check_plot_job
    from infest.compiler.analyses.sweep import MAX_CELLS, parse_list, parse_over, sweep_over
    # The job's size is bounded while the lists are read: no list is built past what
    # MAX_CELLS (all grids' cells together) and MAX_GRIDS leave for it.
    Bs = parse_list(args.B, "B", MAX_CELLS, "MAX_CELLS")
    Ns = parse_list(args.N, "N", MAX_CELLS // len(Bs), "MAX_CELLS over all B x N")
    over = parse_over(args.over, min(MAX_GRIDS, MAX_CELLS // (len(Bs) * len(Ns))),
                      "MAX_GRIDS, MAX_CELLS over all grids") if args.over else None
    if args.plot:
        check_plot_path(args.plot)
        check_plot_job(len(Bs), len(Ns))
    overrides = parse_sets(args.set)
    # Plots read the model's ops and titles (sympy); a plain sweep runs on the cached runner.
    analysis = make_analysis(args) if args.plot else None
    runner = analysis.runner if analysis is not None else make_runner(args)
    results = sweep_over(runner, overrides, Bs, Ns, args.metric, over)
    if analysis is not None:
        from infest.exports.plots.plots import write_plot
        write_plot(analysis, overrides, Bs, Ns, Path(args.plot), args.plot_kind)
    _print(runner, results, args, over[0] if over else None)
    return 0


def _print(runner: "Runner", results: list["Sweep"], args: argparse.Namespace,
           axis: str | None) -> None:
    """One table, CSV block or JSON object per grid (the `--over` axis, if any, first)."""
    if args.csv:
        for k, r in enumerate(results):
            sys.stdout.writelines(csv_rows(r, axis, header=k == 0))
    elif args.json:
        if axis:
            sys.stdout.write(f'{{"over": {json.dumps(axis)}, "grids": [')
        for k, r in enumerate(results):
            sys.stdout.writelines(([", "] if k else []) + list(json_parts(runner, r)))
        print("]}" if axis else "")
    else:
        print("\n\n".join(to_table(runner, r, axis) for r in results))


def metric_label(key: str) -> str:
    """The name a user would type: `tokens_per_s`, but `memory.kv_bytes` (step's wins bare)."""
    from infest.compiler.analyses.sweep import resolve_metric
    short = key.partition(".")[2] or key
    return short if resolve_metric(short) == key else key


def metric_unit(key: str) -> str:
    """The base unit of a metric, for headings (the result-key table, compiler/core/keys.py)."""
    return key_info(key).unit


def _cell_texts(result: "Sweep") -> list[list[Any]]:
    """Python values per cell: int for counts, bool for fits, None for inf/nan, str bound."""
    return [_row_texts(result, i) for i in range(len(result.B))]


def _row_texts(result: "Sweep", i: int) -> list[Any]:
    """One row of _cell_texts (rows one at a time keep a large sweep's output small)."""
    row = result.values[i].tolist()
    if result.metric == "bound" or result.values.dtype == bool:
        return row
    if result.metric != "bound" and key_info(result.metric).integer:
        return [int(v) if math.isfinite(v) else None for v in row]
    return [v if math.isfinite(v) else None for v in row]


def csv_rows(result: "Sweep", axis: str | None = None, header: bool = True) -> Iterator[str]:
    """The CSV text in pieces (header, then a B row of points at a time), for streaming;
    with an `--over` axis a leading column holds its value."""
    lead = f"{_fixed(result, axis)}," if axis else ""
    if header:
        yield f"{axis + ',' if axis else ''}B,N,{metric_label(result.metric)},fits\n"
    Ns = result.N.tolist()
    for i, b in enumerate(result.B.tolist()):  # formatting, not evaluation
        row, frow = _row_texts(result, i), result.fits[i].tolist()
        yield "".join(f"{lead}{b},{n},{_csv_value(row[j])},{'true' if frow[j] else 'false'}\n"
                      for j, n in enumerate(Ns))


def to_csv(result: "Sweep") -> str:
    """Long format, one line per point: B,N,<metric>,fits (base units)."""
    return "".join(csv_rows(result))


def _fixed(result: "Sweep", name: str) -> Any:
    return next(_plain(i.value) for i in result.inputs if i.name == name)


def _csv_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def to_json(runner: "Runner", result: "Sweep") -> dict:
    """Model, hardware, phase, metric, fixed inputs, the axes and every point."""
    head = _json_head(runner, result)
    head["points"] = [p for i in range(len(result.B)) for p in _json_points(result, i)]
    return head


def json_parts(runner: "Runner", result: "Sweep") -> Iterator[str]:
    """json.dumps(to_json(...)) in pieces, a B row of points at a time, for streaming."""
    yield json.dumps(_json_head(runner, result))[:-1] + ', "points": ['
    for i in range(len(result.B)):
        yield (", " if i else "") + ", ".join(json.dumps(p) for p in _json_points(result, i))
    yield "]}"


def _json_head(runner: "Runner", result: "Sweep") -> dict:
    return {"model": runner.model, "hardware": runner.hardware,
            "phase": runner.phase, "metric": metric_label(result.metric),
            "unit": metric_unit(result.metric),
            "inputs": {i.name: _plain(i.value) for i in result.inputs},
            "B": result.B.tolist(), "N": result.N.tolist()}


def _json_points(result: "Sweep", i: int) -> list[dict]:
    label, b = metric_label(result.metric), int(result.B[i])
    row, frow = _row_texts(result, i), result.fits[i].tolist()
    return [{"B": b, "N": n, label: row[j], "fits": frow[j]}
            for j, n in enumerate(result.N.tolist())]


def _plain(value: Any) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def to_table(runner: "Runner", result: "Sweep", axis: str | None = None) -> str:
    """B down, N across; a cell that does not fit in memory is marked with `*`."""
    from infest.dsl.human import table
    cells, fits = _cell_texts(result), result.fits.tolist()
    rows = [[str(b)] + [_table_value(v) + ("" if ok else "*") for v, ok in zip(cells[i], fits[i])]
            for i, b in enumerate(result.B.tolist())]
    headers = ["B \\ N"] + [str(n) for n in result.N.tolist()]
    heading = _heading(runner, result) + (f" at {axis}={_fixed(result, axis)}" if axis else "")
    parts = [heading, "", table(headers, rows, right=set(range(len(headers))))]
    if not result.fits.all():
        parts += ["", "* does not fit in device memory (weights + KV cache > mem_capacity)"]
    return "\n".join(parts)


def _table_value(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and 1e3 <= abs(v) < 1e7:
        return f"{v:.0f}"  # 12110, not 1.211e+04: whole tokens/s read at a glance
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _heading(runner: "Runner", result: "Sweep") -> str:
    unit = metric_unit(result.metric)
    fixed = " ".join(f"{i.name}={_plain(i.value)}" for i in result.inputs if i.name == "T")
    hw = runner.hardware or "?"
    what = metric_label(result.metric) + (f" ({unit})" if unit else "")
    return (f"{runner.model} on {hw}, {runner.phase}"
            f"{', ' + fixed if fixed else ''}: {what}; B down, N across")
