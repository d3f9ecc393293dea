"""`infest eval`: evaluate a model on hardware at given inputs."""
from __future__ import annotations

import argparse
import json

from infest.exports.cli.common import add_spec_args, make_analysis, make_runner, parse_sets


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC --hw HW [--phase] [--set]... [--json|--csv|--markdown]."""
    add_spec_args(p, hw_required=True)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the eval --json contract object")
    fmt.add_argument("--csv", action="store_true", help="the per-op table as CSV")
    fmt.add_argument("--markdown", action="store_true", help="tables as Markdown")
    p.add_argument("--sensitivity", action="store_true",
                   help="rank every input by d ln(step time) / d ln(input), exact from the forms")


def run(args: argparse.Namespace) -> int:
    """Evaluate and print in the chosen format."""
    from infest.exports.text import report_text
    overrides = parse_sets(args.set)
    # Sensitivities differentiate the forms (sympy); everything else runs on the cached runner.
    analysis = make_analysis(args) if args.sensitivity and not args.csv else None
    runner = analysis.runner if analysis is not None else make_runner(args)
    result = runner.evaluate(overrides)
    if not args.csv:  # the CSV is the per-op table only
        from infest.compiler.analyses.capacity import capacity
        result["capacity"] = capacity(runner, overrides)
    if analysis is not None:
        from infest.compiler.analyses.sensitivity import as_json, elasticities
        result["sensitivity"] = as_json(elasticities(analysis, analysis.inputs(overrides), result))
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.csv:
        print(report_text.ops_csv(result), end="")
    elif args.markdown:
        print(report_text.markdown(result))
    else:
        print(report_text.text(result))
    return 0
