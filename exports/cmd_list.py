"""`infest list`: the shipped models and hardware, with their titles."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    """Print each shipped spec's name, title and path."""
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
    return 0
