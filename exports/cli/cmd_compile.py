"""`infest compile`: print the closed forms, or write a live Excel workbook (--xlsx)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from infest.dsl.errors import fail
from infest.exports.cli.common import add_spec_args, make_analysis, parse_sets


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC [--hw HW] [--phase] [--set]... [--xlsx [PATH]] [--json] [--symbolic]."""
    add_spec_args(p, hw_required=False)
    p.add_argument("--xlsx", nargs="?", const="", metavar="PATH",
                   help="write a workbook of live formulas (default MODEL_HW.xlsx)")
    p.add_argument("-o", "--out", metavar="PATH", help="the workbook's path (implies --xlsx)")
    p.add_argument("--json", action="store_true", help="forms as JSON strings")
    p.add_argument("--symbolic", action="store_true",
                   help="keep model params (hidden, layers, ...) and the layout (tp, ep, pp, "
                        "dp) as symbols")


def workbook_path(args: argparse.Namespace) -> str | None:
    """`--xlsx [PATH]` and `-o/--out PATH` name the same workbook; given both, they agree."""
    if args.out is None:
        return args.xlsx
    if args.xlsx not in (None, "", args.out):
        raise fail(None, f"--xlsx {args.xlsx} and --out {args.out} name two workbooks",
                   "give the path once")
    return args.out


def run(args: argparse.Namespace) -> int:
    """Print or write the forms."""
    args.xlsx = workbook_path(args)
    analysis = make_analysis(args)
    overrides = parse_sets(args.set)
    if args.xlsx is not None:
        return _write_xlsx(analysis, args, overrides)
    forms = substituted_forms(analysis, overrides, keep_params=args.symbolic)
    if args.json:
        print(json.dumps({"model": analysis.model.name, "phase": analysis.forms.phase,
                          "hardware": analysis.hardware.name if analysis.hardware else None,
                          "forms": {k: str(v) for k, v in forms.items()}}, indent=2))
    else:
        print(_text(analysis, forms, args.symbolic))
    return 0


def _write_xlsx(analysis, args: argparse.Namespace, overrides: dict) -> int:
    from infest.dsl.errors import fail
    from infest.exports.workbook.xlsx import write_workbook
    if analysis.hardware is None:
        raise fail(None, "--xlsx needs --hw", "e.g. --hw h100_sxm")
    path = Path(args.xlsx or f"{analysis.model.name}_{analysis.hardware.name}.xlsx")
    import sys

    from infest.exports.output import argument_inputs
    print(f"writing {path}:", end="", file=sys.stderr, flush=True)
    write_workbook(analysis, path, overrides, _serving(analysis, args),
                   argument_inputs(args, ("xlsx",)),
                   progress=lambda step: print(f" {step}...", end="", file=sys.stderr, flush=True))
    print(" done", file=sys.stderr)
    print(f"wrote {path}")
    return 0


def _serving(analysis, args: argparse.Namespace):
    """The decode analysis the Plan sheet costs its steps with (continuous batching uses
    the decode forms alone): the one given, or derived when the workbook shows prefill."""
    if analysis.forms.phase == "decode":
        return analysis
    from infest.compiler.api import analyze
    return analyze(args.spec, hw=args.hw, phase="decode", model=args.model, policy=args.policy,
                   engine=args.engine)


def substituted_forms(analysis, overrides: dict, keep_params: bool) -> dict:
    """Flat `section.key` -> expr with hardware values (if any), params and --set applied."""
    import sympy
    from infest.compiler.forms.evaluate import form_layout
    from infest.compiler.core.symbols import sym
    from infest.compiler.backend.runner import DEFAULTS
    from infest.compiler.core.symbols import PARALLEL
    values: dict = {}
    if not keep_params:  # the layout too: one GPU unless --set tp=8 (--symbolic keeps it)
        values.update({sym(p): DEFAULTS[p] for p in PARALLEL})
        values.update({sym(p.name): p.default for p in analysis.model.params.values() if p.is_input})
    if analysis.hardware is not None:
        values.update({sym(k): v.value for k, v in analysis.hardware.fields.items()})
    values.update({sym(k): v for k, v in overrides.items()})
    exact = {s: sympy.Rational(v.numerator, v.denominator) for s, v in values.items()}
    return {key: expr.xreplace(exact) for key, expr in form_layout(analysis.forms)
            if not key.startswith("ops.")}


def _text(analysis, forms: dict, symbolic: bool) -> str:
    m = analysis.model
    hw = f"hardware {analysis.hardware.name}" if analysis.hardware else "hardware symbols free"
    params = ", ".join(f"{p.name}={p.default}" for p in m.params.values() if p.is_input)
    lines = [f"{m.name} \"{m.title}\", {analysis.forms.phase}; {hw}",
             f"model params{' (kept symbolic)' if symbolic else ''}: {params}",
             "units: bytes, FLOPs, seconds", ""]
    lines += [f"{key} = {expr}" for key, expr in forms.items()]
    return "\n".join(lines)
