"""`infest calibrate`: fit eff_mem, eff_flops, eff_link to measured step times (a CSV),
report each row's error, the median and worst, leave-one-out, and write a calibrated
hardware spec (compiler/analyses/calibrate.py has the CSV format and the fit)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """MEASUREMENTS.csv --hw HW [-o CALIBRATED.arch] [--json]."""
    p.add_argument("measurements", metavar="MEASUREMENTS.csv",
                   help="one measured step a row: spec, hardware, tp, ep, pp, dp, policy, "
                        "engine, phase, B, N, T, step_s")
    p.add_argument("--hw", metavar="HW", required=True,
                   help="the hardware to calibrate (shipped name or .arch path); rows "
                        "measured on other hardware are skipped")
    p.add_argument("-o", "--out", metavar="CALIBRATED.arch",
                   help="write the hardware spec with the fitted efficiencies")
    p.add_argument("--json", action="store_true", help="fitted values, rows, errors as JSON")


def run(args: argparse.Namespace) -> int:
    """Read, fit, report; write the calibrated spec with -o."""
    from infest.compiler.analyses import calibrate as cal
    from infest.compiler.api import load_hardware
    from infest.dsl.errors import fail
    path = Path(args.measurements)
    hw = load_hardware(args.hw)
    every = cal.read_measurements(path)
    rows = [r for r in every if r.hardware == hw.name]
    if not rows:
        raise fail(None, f"no measurements on '{hw.name}' in {path}",
                   f"the hardware column names: {', '.join(sorted({r.hardware for r in every}))}")
    if args.out and Path(args.out).resolve() == Path(hw.file).resolve():
        raise fail(None, f"-o {args.out} would overwrite the hardware spec it calibrates",
                   "write the calibrated copy to another path")
    prepared = cal.prepare(rows, args.hw, path.parent)
    start = cal.start_values(hw)
    effs = cal.fit(prepared, start)
    result = _result(cal, prepared, start, effs, hw.name, len(every) - len(rows))
    if args.out:
        note = (f"fitted by infest calibrate to {len(rows)} rows of {path.name}, median error "
                f"{result['errors']['median']:.1%}")
        text = cal.calibrated_text(hw, {k: effs[k] for k in effs if result["fitted"][k]}, note)
        from infest.exports.output import argument_inputs, write_output
        write_output(args.out, text, [hw.file, *argument_inputs(args, ("out",)),
                                      *(p.row.spec for p in prepared)], "-o")
        load_hardware(args.out)  # the written spec must load
    print(json.dumps(result, indent=2) if args.json else _text(result))
    return 0


def _result(cal, prepared, start, effs, hw: str, skipped: int) -> dict:
    errs, loo = cal.errors(prepared, effs), cal.leave_one_out(prepared, start)
    rows = [{"line": p.row.span.line, "spec": p.row.spec, "phase": p.row.phase,
             **p.row.point, "measured_s": p.row.step_s, "bound_s": p.bound_s,
             "estimate_s": float(p.estimate(effs)), "error": e,
             "loo_error": loo[i] if loo else None}
            for i, (p, e) in enumerate(zip(prepared, errs))]
    return {"hardware": hw, "start": start, "fitted_values": effs,
            "fitted": cal.constrained(prepared, effs), "rows": rows, "skipped_rows": skipped,
            "errors": cal.summary(errs), "leave_one_out": cal.summary(loo)}


def _text(r: dict) -> str:
    from infest.dsl.human import duration, table
    head = ["line", "spec", "phase", "tp", "B", "N", "measured", "bound", "estimate", "error",
            "LOO error"]
    body = [[str(x["line"]), x["spec"], x["phase"], str(x["tp"]), str(x["B"]), str(x["N"]),
             duration(x["measured_s"]), duration(x["bound_s"]), duration(x["estimate_s"]),
             f"{x['error']:+.1%}", "" if x["loo_error"] is None else f"{x['loo_error']:+.1%}"]
            for x in r["rows"]]
    effs = ", ".join(f"{k} {v:.4g} (was {r['start'][k]:.4g})" if r["fitted"][k]
                     else f"{k} {v:.4g} (no row depends on it: not fitted)"
                     for k, v in r["fitted_values"].items())
    lines = [f"calibration of {r['hardware']}: {len(r['rows'])} rows"
             + (f" ({r['skipped_rows']} on other hardware skipped)" if r["skipped_rows"] else ""),
             table(head, body, right={3, 4, 5, 6, 7, 8, 9, 10}), "", f"fitted: {effs}",
             "error |estimate / measured - 1|: " + _pair(r["errors"]),
             "leave-one-out (each row predicted by a fit to the others): " + _pair(r["leave_one_out"])]
    return "\n".join(lines)


def _pair(s: dict) -> str:
    if s["median"] is None:
        return "n/a (one row)"
    return f"median {s['median']:.1%}, worst {s['worst']:.1%}"
