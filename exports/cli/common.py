"""Arguments and set-up shared by the CLI verbs: spec, hardware, phase, --set."""
from __future__ import annotations

import argparse
from fractions import Fraction
from typing import TYPE_CHECKING

from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.api import Analysis
    from infest.compiler.backend.runner import Runner


def add_spec_args(p: argparse.ArgumentParser, hw_required: bool, phase: bool = True) -> None:
    """SPEC, --hw, --phase (unless the verb sets the phases itself), --set, --model."""
    p.add_argument("spec", metavar="SPEC", help="path to a .arch model spec")
    p.add_argument("--hw", metavar="HW", required=hw_required,
                   help="shipped hardware name (h100_sxm, h200_sxm, gh200) or a .arch path")
    if phase:
        p.add_argument("--phase", choices=("decode", "prefill"), default="decode",
                       help="decode: T new tokens against N cached (T=1); "
                            "prefill: a prompt of N tokens, empty cache")
    p.add_argument("--set", metavar="NAME=VALUE", action="append", default=[],
                   help="override an input (B, N, T, a model param, a hardware field); "
                        "units allowed: --set mem_bw=4TB/s --set N=32k")
    p.add_argument("--model", metavar="NAME", help="which model, if the spec defines several")
    p.add_argument("--policy", metavar="NAME",
                   help="sharding policy the spec declares (default: full); set the layout "
                        "with --set tp=8 --set ep=8 --set pp=2 --set dp=2")
    p.add_argument("--engine", metavar="NAME",
                   help="engine profile: eager (default: every op its own kernel, the "
                        "hardware's launch_overhead), graphs (the spec's fusions, CUDA "
                        "graphs, 1.5 us per kernel) or a shipped engine's (vllm, sglang, "
                        "trtllm, ...: `infest list` names each and what it sets)")


def parse_sets(items: list[str]) -> dict[str, Fraction]:
    """`NAME=VALUE` strings -> {name: value in base units}; units are checked later."""
    from infest.dsl.units import parse_value
    out: dict[str, Fraction] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise fail(None, f"--set {item!r}: expected NAME=VALUE", "e.g. --set B=8 --set N=32k")
        try:
            value, dim = parse_value(text)
        except ValueError as exc:
            raise fail(None, f"--set {name}: {exc}", "e.g. 8, 32k, 4TB/s, 989TFLOP/s, 2us") from None
        _check_dimension(name.strip(), dim)
        out[name.strip()] = value
    return out


def parse_time(flag: str, text: str | None) -> float | None:
    """A time with its unit (`50ms`, `2s`) in seconds (the caller checks its range); None
    stays None. A bare number is refused: 50 could be 50 ms or 50 s."""
    from infest.dsl.units import parse_value
    if text is None:
        return None
    try:
        value, dim = parse_value(text)
    except ValueError as exc:
        raise fail(None, f"{flag} {text!r}: {exc}", "e.g. 50ms, 2s") from None
    if dim is None:
        raise fail(None, f"{flag} {text}: a time needs a unit", f"{text}ms or {text}s?")
    if dim != "s":
        raise fail(None, f"{flag} {text!r}: expected a time, got {dim}", "e.g. 50ms, 2s")
    return float(value)


def parse_rate(flag: str, text: str | None) -> float | None:
    """A rate per second: a bare number (`20`, `2.5k`) or one written `20/s`."""
    from infest.dsl.units import parse_value
    if text is None:
        return None
    body = text.strip()
    body = body[:-2] if body.endswith("/s") else body
    try:
        value, dim = parse_value(body)
    except ValueError as exc:
        raise fail(None, f"{flag} {text!r}: {exc}", "e.g. 20 or 20/s") from None
    if dim not in (None, "count"):
        raise fail(None, f"{flag} {text!r}: expected requests per second", "e.g. 20 or 20/s")
    return float(value)


def _check_dimension(name: str, dim: str | None) -> None:
    from infest.compiler.load.hardware import expected_dimension
    want = expected_dimension(name)
    if dim is not None and want is not None and dim != want:
        raise fail(None, f"--set {name}: expected a {want} value, got {dim}")


def make_analysis(args: argparse.Namespace) -> "Analysis":
    """Load the spec and hardware named on the command line."""
    from infest.compiler.api import analyze
    return analyze(args.spec, hw=args.hw, phase=args.phase, model=args.model,
                   policy=args.policy, engine=args.engine)


def make_runner(args: argparse.Namespace) -> "Runner":
    """The evaluator for the spec and hardware on the command line: read from the private
    cache when nothing changed (no sympy import), else built and stored."""
    from infest.compiler.backend.cache import cached_runner
    return cached_runner(args.spec, args.hw, phase=args.phase, model=args.model,
                         policy=args.policy, engine=args.engine)
