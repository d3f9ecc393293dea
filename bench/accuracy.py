"""Accuracy against public measurements: floor, bound and estimate against each measurement.

    python bench/accuracy.py [--markdown] [--profiles]

Reads bench/measurements.csv (the `infest calibrate` format, compiler/analyses/calibrate.py,
plus server, source and notes columns: each row cites where its number comes from and how
a published figure became a time; bench/measurements_dropped.md lists the rows left out).
A row's quantity is a step time, a TPOT (the decode step at B = concurrency) or a TTFT
(the prefill step plus the per-request overhead). Each row is evaluated on its own
hardware under its engine profile (specs/engines/*.json).

The overlap floor (max of total FLOPs / peak, total bytes / mem_bw, total collective
time) must be <= the measurement on every row: the script exits 1 naming a row that
beats it. The estimate is then fitted once across every GPU and engine
(compiler/analyses/fit.py: shared physics, per-GPU and per-engine offsets, regularised
toward the documented defaults) and judged held out: leave-one-out (each row predicted
by a fit to the others), leave-one-GPU-out (a GPU's rows from the shared values and
its datasheet only) and leave-one-engine-out. --profiles writes the fitted values into
the shipped engine profiles (specs/engines/<engine>.json), each with this source.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from infest.compiler.analyses import calibrate as cal
from infest.compiler.analyses import fit as jf

HERE = Path(__file__).resolve().parent
MEASUREMENTS = HERE / "measurements.csv"
PROFILES = HERE.parent / "specs" / "engines"
HEADERS = ["server", "model", "GPU", "layout", "quantity", "B", "N", "measured ms", "floor/meas",
           "bound/meas", "profile est/meas", "fitted/meas", "LOO/meas", "LOGO/meas"]
PROFILE_FIELDS = ("eff_mem", "eff_flops", "eff_attn", "eff_link", "kernel_latency",
                  "step_overhead", "request_overhead")


def prepared(path: Path = MEASUREMENTS) -> list[cal.Prepared]:
    """Every row evaluated once on its own hardware and engine."""
    rows = cal.read_measurements(path)
    out: list[cal.Prepared] = []
    for hw in sorted({r.hardware for r in rows}):
        out += cal.prepare([r for r in rows if r.hardware == hw], hw, path.parent)
    return out


def evaluate(rows: list[cal.Prepared]) -> tuple[list[dict], jf.Fit, dict[str, list[float]]]:
    """Per-row results, the fit to all rows, and each held-out error list."""
    full = jf.fit_all(rows)
    held = {name: jf.held_out(rows, key, full) for name, key in jf.HOLD_OUT.items()}
    fitted = jf.row_errors(rows, full)
    results = [{"p": p, "default": float(p.estimate({})), "fitted": (1 + fitted[i]) * p.row.step_s,
                **{name: (1 + errs[i]) * p.row.step_s for name, errs in held.items()}}
               for i, p in enumerate(rows)]
    return results, full, held


def table_rows(results: list[dict]) -> list[list[str]]:
    """One table row per measurement (times in ms, ratios to the measurement)."""
    out = []
    for r in results:
        p = r["p"]
        row, meas = p.row, p.row.step_s
        layout = " ".join(f"{k}{row.point[k]}" for k in ("tp", "ep", "pp", "dp") if row.point[k] > 1)
        out.append([row.text.get("server", "").split(" (")[0][:24], Path(row.spec).stem, row.hardware,
                    layout or "1 GPU", cal.quantity(row), str(row.point["B"]), str(row.point["N"]),
                    f"{meas * 1e3:.2f}", f"{p.floor_s / meas:.2f}", f"{p.bound_s / meas:.2f}",
                    f"{r['default'] / meas:.2f}", f"{r['fitted'] / meas:.2f}",
                    f"{r['leave-one-out'] / meas:.2f}", f"{r['leave-one-GPU-out'] / meas:.2f}"])
    return out


def summary(results: list[dict], full: jf.Fit, held: dict[str, list[float]]) -> list[str]:
    """Median and worst |error| of each column, and the fitted shared parameters."""
    lines = []
    for name, key in (("estimate at the shipped profiles", "default"), ("fitted (in sample)", "fitted")):
        errs = [abs(r[key] / r["p"].row.step_s - 1) for r in results]
        lines.append(f"{name}: median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}")
    for name, errs in held.items():
        size = [abs(e) for e in errs]
        lines.append(f"{name}: median |error| {statistics.median(size):.1%}, worst {max(size):.1%}")
    worst_floor = max(r["p"].floor_s / r["p"].row.step_s for r in results)
    lines.append(f"overlap floor / measured: at most {worst_floor:.2f} (must be <= 1)")
    lines.append("shared: " + ", ".join(f"{k} {v:.4g}" for k, v in full.shared.items()))
    bad = jf.violations(full, jf.pairs_of([r["p"] for r in results]))
    lines.append("fit within its physical range" if not bad else "OUT OF RANGE: " + "; ".join(bad))
    return lines


def write_profiles(full: jf.Fit, rows: int) -> None:
    """The fitted values of each engine into its shipped profile, with their source."""
    source = (f"fitted by bench/accuracy.py --profiles to {rows} rows of bench/measurements.csv "
              "(compiler/analyses/fit.py: shared values and this engine's offsets)")
    for engine in full.engine:
        path = PROFILES / f"{engine}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        values = {**full.shared, **{k: v for k, v in full.values("", engine).items()}}
        data["fields"] = {k: {"value": float(f"{values[k]:.4g}"), "source": source}
                          for k in PROFILE_FIELDS if k != "request_overhead" or k in full.engine[engine]}
        path.write_text(json.dumps(data, indent=2) + "\n")


def render(results: list[dict], full: jf.Fit, held: dict[str, list[float]], markdown: bool) -> str:
    """The table and its summary, as plain text or Markdown."""
    from infest.dsl.human import md_table, table
    body = table_rows(results)
    grid = md_table(HEADERS, body) if markdown else table(HEADERS, body)
    return "\n".join([grid, ""] + summary(results, full, held))


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when a row's overlap floor exceeds its measurement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="a Markdown table (for docs/)")
    ap.add_argument("--profiles", action="store_true", help="write the fit into specs/engines/")
    args = ap.parse_args(argv)
    rows = prepared()
    results, full, held = evaluate(rows)
    print(render(results, full, held, args.markdown))
    if args.profiles and jf.violations(full, jf.pairs_of(rows)):
        print("not writing the profiles: the fit leaves its physical range", file=sys.stderr)
    elif args.profiles:
        write_profiles(full, len(rows))
    above = [r["p"].row for r in results if r["p"].floor_s > r["p"].row.step_s]
    for row in above:
        print(f"{row.span}: overlap floor above the measurement: the spec, layout or number is wrong",
              file=sys.stderr)
    return 1 if above else 0


if __name__ == "__main__":
    sys.exit(main())
