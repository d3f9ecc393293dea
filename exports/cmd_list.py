"""`infest list`: the shipped models and hardware, with their titles."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    """Print each shipped spec's name, title and path, then the op vocabulary."""
    from infest.compiler.loader import load_program, shipped
    from infest.exports.human import table
    for kind in ("models", "hardware"):
        rows = []
        for name, path in shipped(kind).items():
            program = load_program(path)
            blocks = program.models if kind == "models" else program.hardware
            title = next(iter(blocks.values()))[0].title if blocks else ""
            rows.append([name, title, str(path)])
        print(f"{kind}:")
        print(table(["name", "title", "path"], rows, right=set()))
        print()
    _print_ops()
    return 0


def _print_ops() -> None:
    """Every op the language knows, its numeric arguments and its cost rule."""
    from infest.compiler.ops import COMMON_KWARGS, OPS
    from infest.exports.human import table
    rows = [[_signature(name, rule), rule.doc] for name, rule in sorted(OPS.items())]
    print(f"ops (every op also takes {', '.join(k + '=' for k in COMMON_KWARGS)}):")
    print(table(["op", "cost of one instance (tokens = B*T)"], rows, right=set()))


def _signature(name: str, rule) -> str:
    """`linear(x, d_in -> d_out, bias, tied)`-style call shape of an op."""
    lo, hi = rule.tensors
    tensors = {1: ["x"], 2: ["x", "y"], 3: ["q", "k", "v"]}.get(hi, ["x..."]) if hi else []
    parts = tensors + (["d_in -> d_out"] if rule.dims else []) + list(rule.args)
    return f"{name}({', '.join(parts)})"
