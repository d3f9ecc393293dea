"""`infest list`: the shipped models (titles), the hardware (memory, bandwidth and dense
peak math), the engine profiles, the estimate's parameters (from the one field table,
compiler/load/fields.py) and the op vocabulary."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No options."""


# Peaks shown in the hardware table, in this order; a part without one shows "-".
_PEAKS = ("bf16", "fp8", "fp4", "int8", "fp32")


def run(args: argparse.Namespace) -> int:
    """Print the shipped models, the shipped hardware, then the op vocabulary."""
    from infest.compiler.load.loader import load_program, shipped
    from infest.dsl.human import table
    rows = []
    for name, path in shipped("models").items():
        blocks = load_program(path).models
        title = next(iter(blocks.values()))[0].title if blocks else ""
        rows.append([name, title, str(path)])
    print("models:")
    print(table(["name", "title", "path"], rows, right=set()))
    print()
    _print_hardware()
    print()
    _print_engines()
    print()
    _print_estimate_fields()
    print()
    _print_ops()
    return 0


def _print_hardware() -> None:
    """A row per shipped hardware file: memory (binary GiB, as vendors label it),
    bandwidth, dense peaks, link, GPUs a node and NVLink SHARP (nvls: the share of an
    all-reduce's ring traffic the switch saves)."""
    from infest.compiler.load.hardware import compile_hardware
    from infest.compiler.load.loader import load_program, shipped
    from infest.dsl.human import gib, si, table
    rows = []
    for name, path in shipped("hardware").items():
        for hw_ast, file in load_program(path).hardware.values():
            f = {k: float(v.value) for k, v in compile_hardware(hw_ast, file).fields.items()}
            peaks = [si(f[f"flops_{d}"], "OP/s" if d == "int8" else "FLOP/s")
                     if f.get(f"flops_{d}", 0) > 0 else "-" for d in _PEAKS]
            rows.append([name, hw_ast.title, gib(f["mem_capacity"]), si(f["mem_bw"], "B/s"),
                         *peaks, si(f["link_bw"], "B/s") if "link_bw" in f else "-",
                         str(int(f.get("gpus_per_node", 1))), f"{f.get('nvls', 0):g}"])
    headers = ["name", "title", "memory", "mem_bw", *(f"flops_{d}" for d in _PEAKS),
               "link_bw", "gpus/node", "nvls"]
    print("hardware (dense peaks; '-': no such math, peak 0: its ops fall back to a wider format):")
    print(table(headers, rows, right=set(range(2, len(headers)))))


def _print_engines() -> None:
    """Every engine profile `--engine` takes (built in and shipped as data)."""
    from infest.compiler.passes.engine import ENGINES
    from infest.dsl.human import table
    rows = [[name, ", ".join(sorted(e.fields)) or "-", e.doc] for name, e in ENGINES.items()]
    print("engines (--engine; shipped profiles: specs/engines/*.json):")
    print(table(["name", "sets", "what"], rows, right=set()))


def _print_estimate_fields() -> None:
    """The estimate's parameters: default (base unit) and where the default comes from."""
    from infest.compiler.load.fields import ESTIMATE_DEFAULTS, FIELDS
    from infest.dsl.human import table
    rows = [[name, f"{float(value):g} {FIELDS[name].unit}".strip(), FIELDS[name].doc,
             FIELDS[name].source] for name, value in ESTIMATE_DEFAULTS.items()]
    print("estimate parameters (estimate only, never a bound; a hardware block, the engine "
          "profile or --set gives them):")
    print(table(["name", "default", "what", "default's source"], rows, right=set()))


def _print_ops() -> None:
    """Every op the language knows, its numeric arguments and its cost rule."""
    from infest.compiler.core.ops import COMMON_KWARGS, OPS
    from infest.dsl.human import table
    rows = [[_signature(name, rule), rule.doc] for name, rule in sorted(OPS.items())]
    print(f"ops (every op also takes {', '.join(k + '=' for k in COMMON_KWARGS)}):")
    print(table(["op", "cost of one instance (tokens = B*T)"], rows, right=set()))


def _signature(name: str, rule) -> str:
    """`linear(x, d_in -> d_out, bias, tied)`-style call shape of an op."""
    lo, hi = rule.tensors
    tensors = {1: ["x"], 2: ["x", "y"], 3: ["q", "k", "v"]}.get(hi, ["x..."]) if hi else []
    parts = tensors + (["d_in -> d_out"] if rule.dims else []) + list(rule.args)
    return f"{name}({', '.join(parts)})"
