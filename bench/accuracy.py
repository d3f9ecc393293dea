"""Accuracy against public measurements: bound / measured and estimate / measured per row.

    python bench/accuracy.py [--markdown] [--quick]

Reads bench/measurements.csv (the `infest calibrate` format, compiler/analyses/calibrate.py, plus
server, source and notes columns: each row cites where its number comes from and how a
per-user rate or an ITL became a step time). Each row is evaluated on its own hardware at
that hardware's efficiencies (compiler/load/hardware.py `efficiencies`). "floor" is the
overlap floor (step.overlap_floor_s: the step's FLOPs / peak, bytes / mem_bw and
collective time, each whole), "bound" the serial-kernel roofline (step.roofline_s). floor
/ measured must be <= 1 on every row: a measurement faster than the floor means the spec,
the layout or the measurement is wrong, and the script exits 1 naming the row (a row under
the roofline but over the floor is an engine overlapping kernels: legitimate). The last
column is the estimate after calibration, leave-one-out: eff_mem, eff_flops and eff_link
fitted to all the other rows (one set for every GPU), then applied to the held-out row;
--quick leaves it out (tests/test_accuracy.py runs the script that way).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from infest.compiler.analyses import calibrate as cal
from infest.compiler.api import load_hardware
from infest.compiler.load.hardware import EFFICIENCIES

HERE = Path(__file__).resolve().parent
MEASUREMENTS = HERE / "measurements.csv"
HEADERS = ["server", "model", "GPU", "layout", "phase", "B", "N", "measured ms", "floor ms",
           "bound ms", "estimate ms", "bound/meas", "est/meas", "calibrated (LOO)/meas"]


def evaluate(path: Path = MEASUREMENTS, quick: bool = False) -> list[dict]:
    """Every row with its floor, bound, estimate and leave-one-out calibrated estimate
    (None with `quick`)."""
    rows = cal.read_measurements(path)
    prepared, estimates = [], []
    for hw in sorted({r.hardware for r in rows}):
        mine = cal.prepare([r for r in rows if r.hardware == hw], hw, path.parent)
        effs = cal.start_values(load_hardware(hw))
        prepared += mine
        estimates += [float(p.estimate(effs)) for p in mine]
    loo = ([None] * len(prepared) if quick else
           cal.leave_one_out(prepared, {k: float(v) for k, v in EFFICIENCIES.items()}))
    return [{"row": p.row, "floor": p.floor_s, "bound": p.bound_s, "estimate": e,
             "loo": None if err is None else (1 + err) * p.row.step_s}
            for p, e, err in zip(prepared, estimates, loo)]


def table_rows(results: list[dict]) -> list[list[str]]:
    """One table row per measurement (times in ms, ratios to the measurement)."""
    out = []
    for r in results:
        row, meas = r["row"], r["row"].step_s
        layout = " ".join(f"{k}{row.point[k]}" for k in ("tp", "ep", "pp") if row.point[k] > 1)
        out.append([row.text.get("server", ""), Path(row.spec).stem, row.hardware, layout or "1 GPU",
                    row.phase, str(row.point["B"]), str(row.point["N"]), f"{meas * 1e3:.2f}",
                    f"{r['floor'] * 1e3:.2f}", f"{r['bound'] * 1e3:.2f}", f"{r['estimate'] * 1e3:.2f}",
                    f"{r['bound'] / meas:.2f}", f"{r['estimate'] / meas:.2f}",
                    "-" if r["loo"] is None else f"{r['loo'] / meas:.2f}"])
    return out


def summary(results: list[dict]) -> list[str]:
    """Median and worst of each ratio (worst: farthest from 1)."""
    lines = []
    for name, key in (("floor/measured", "floor"), ("bound/measured", "bound"),
                      ("estimate/measured", "estimate"),
                      ("calibrated (leave-one-out)/measured", "loo")):
        if any(r[key] is None for r in results):
            continue  # --quick: no leave-one-out fit
        ratios = [r[key] / r["row"].step_s for r in results]
        worst = max(ratios, key=lambda x: abs(x - 1))
        lines.append(f"{name}: median {statistics.median(ratios):.2f}, worst {worst:.2f}")
    return lines


def render(results: list[dict], markdown: bool) -> str:
    """The table and its summary, as plain text or Markdown."""
    from infest.dsl.human import md_table, table
    body = table_rows(results)
    grid = md_table(HEADERS, body) if markdown else table(HEADERS, body)
    return "\n".join([grid, ""] + summary(results))


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when a row's overlap floor exceeds its measurement."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true", help="a Markdown table (for the README)")
    p.add_argument("--quick", action="store_true", help="leave out the leave-one-out fit")
    args = p.parse_args(argv)
    results = evaluate(quick=args.quick)
    print(render(results, args.markdown))
    above = [r["row"] for r in results if r["floor"] > r["row"].step_s]
    for row in above:
        print(f"{row.span}: overlap floor above the measurement: the spec, layout or number "
              "is wrong", file=sys.stderr)
    return 1 if above else 0


if __name__ == "__main__":
    sys.exit(main())
