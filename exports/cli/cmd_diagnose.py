"""`infest diagnose`: which ceiling binds a measured system, and what would prove it wrong."""
from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from infest.dsl.errors import fail
from infest.exports.cli.common import add_spec_args, make_analysis, parse_sets

if TYPE_CHECKING:
    from infest.compiler.api import Analysis
    from infest.compiler.analyses.diagnose import Measured

# Limits, as (name, value) so every message names the constant it hit.
MAX_COUNT = ("MAX_COUNT", 10**9)                    # kernels or collectives per step
MAX_STEPS = ("MAX_STEPS", 10**6)                    # decode steps in one capture
MAX_SPEEDUP_POINTS = ("MAX_SPEEDUP_POINTS", 32)
MAX_DEPTH_POINTS = ("MAX_DEPTH_POINTS", 64)
MAX_GPUS = ("MAX_GPUS", 10**6)
MAX_CONTEXT = ("MAX_CONTEXT", 2**30)                # tokens, for --depth


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The contract's options (see README, "Diagnose a measured system")."""
    add_spec_args(p, hw_required=True)
    got = p.add_mutually_exclusive_group(required=True)
    got.add_argument("--measured-step", metavar="TIME", help="measured step time, e.g. 281.6ms")
    got.add_argument("--measured-tokens-per-s", metavar="RATE", help="measured tokens/s")
    p.add_argument("--kernels", metavar="COUNT", help="measured kernels per step")
    p.add_argument("--collectives", metavar="COUNT", help="measured collective calls per step")
    p.add_argument("--collective-time", metavar="TIME", help="measured time per collective call")
    p.add_argument("--nsys", metavar="CSV", help="`nsys stats --report cuda_gpu_kern_sum "
                   "--format csv` output (needs --steps)")
    p.add_argument("--steps", metavar="K", help="decode steps in the nsys capture")
    p.add_argument("--map", metavar="FILE", help="kernel-name patterns: `glob = target` lines")
    p.add_argument("--speedup", metavar="GPUS=SPEEDUP", action="append", default=[],
                   help="measured speedup at GPUS-way parallelism (Amdahl), e.g. 8=2.44")
    p.add_argument("--depth", metavar="N=RATE", action="append", default=[],
                   help="measured tokens/s at context N, e.g. 32k=95")
    add_served_arguments(p)
    p.add_argument("--json", action="store_true", help="the diagnose --json object")
    p.add_argument("-o", "--out", metavar="DIAGNOSIS.md", help="also write a Markdown record")
    p.add_argument("--plot", metavar="FILE", help="plot --depth points against the bound")


def add_served_arguments(p: argparse.ArgumentParser) -> None:
    """A TPOT measured on a server: the request shape and load it ran under."""
    g = p.add_argument_group("served measurement (--measured-step is then the TPOT)")
    g.add_argument("--isl", type=int, metavar="TOKENS", help="prompt tokens per request")
    g.add_argument("--osl", type=int, metavar="TOKENS", help="output tokens per request")
    load = g.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, metavar="C", help="requests in flight")
    load.add_argument("--rps", metavar="R", help="requests per second (Poisson arrivals)")
    g.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                   help="the server's scheduling (default continuous: chunked prefill "
                        "rides on the decode steps)")
    g.add_argument("--chunk", type=int, metavar="TOKENS", help="prefill chunk (serve's default)")
    g.add_argument("--measured-ttft", metavar="TIME", help="measured time to first token")


def run(args: argparse.Namespace) -> int:
    """Check every argument, diagnose, print (and write the record and the plot)."""
    from infest.compiler.analyses.diagnose import diagnose
    from infest.exports.output import analysis_inputs, argument_inputs, write_output
    from infest.exports.text import diagnose_text
    if args.plot:
        _check_plot(args)
    overrides = parse_sets(args.set)
    analysis = make_analysis(args)
    measured = measured_from_args(args, analysis)
    engine = _serving(args) if measured.served is not None else None
    report = diagnose(analysis, overrides, measured, _sms(analysis, overrides), engine)
    if args.out:
        write_output(args.out, diagnose_text.markdown(report),
                     analysis_inputs(analysis) + argument_inputs(args, ("out", "plot")), "--out")
    if args.plot:
        from infest.exports.plots.plots import write_depth_plot
        write_depth_plot(report, Path(args.plot), argument_inputs(args, ("out", "plot")))
    print(json.dumps(report, indent=2) if args.json else diagnose_text.text(report))
    return 0


def _check_plot(args: argparse.Namespace) -> None:
    from infest.exports.plots.plots import check_plot_path
    check_plot_path(args.plot)
    if not args.depth:
        raise fail(None, "--plot draws the --depth points", "add --depth N=RATE (two or more)")


def measured_from_args(args: argparse.Namespace, analysis: "Analysis") -> "Measured":
    """The Measured record, every value checked before any work."""
    from infest.compiler.analyses.diagnose import Measured
    m = Measured(
        step_s=_time(args.measured_step, "--measured-step"),
        tokens_per_s=_positive(args.measured_tokens_per_s, "--measured-tokens-per-s"),
        kernels=_count(args.kernels, "--kernels"),
        collectives=_count(args.collectives, "--collectives", zero=True),
        collective_time_s=_time(args.collective_time, "--collective-time"),
        speedups=_pairs(args.speedup, "--speedup", MAX_SPEEDUP_POINTS, _speedup),
        depth=_pairs(args.depth, "--depth", MAX_DEPTH_POINTS, _depth_point))
    if args.nsys or args.steps:
        _add_nsys(m, args, analysis)
    m.served = served_from_args(args, m.step_s)
    return m


SERVED_ONLY = ("--concurrency", "--rps", "--chunk", "--measured-ttft")


def served_from_args(args: argparse.Namespace, tpot_s: float | None):
    """The Served record when --isl and --osl are given (then --measured-step is the
    TPOT and one of --concurrency, --rps is required), else None."""
    from infest.compiler.analyses.served import Served
    if args.isl is None and args.osl is None:
        given = [f for f in SERVED_ONLY if getattr(args, f[2:].replace("-", "_")) is not None]
        if given:
            raise fail(None, f"{given[0]} describes a served measurement", "add --isl and --osl")
        return None
    if args.isl is None or args.osl is None:
        raise fail(None, "--isl and --osl go together", "the request shape the server ran")
    if tpot_s is None:
        raise fail(None, "a served measurement needs --measured-step (the measured TPOT)",
                   "TPOT = (E2E - TTFT) / (OSL - 1), e.g. --measured-step 25ms")
    if args.concurrency is None and args.rps is None:
        raise fail(None, "a served measurement needs --concurrency C or --rps R")
    return Served(args.isl, args.osl, tpot_s, args.concurrency, _rate(args.rps),
                  args.batching, args.chunk, _time(args.measured_ttft, "--measured-ttft"))


def _rate(text: str | None) -> float | None:
    """--rps: a bare number per second, or `20/s`."""
    return None if text is None else _positive(text.removesuffix("/s"), "--rps")


def _serving(args: argparse.Namespace):
    """The decode and prefill runners serve needs (from the private cache when current)."""
    from infest.compiler.analyses.serve import Serving
    from infest.compiler.backend.cache import cached_runner
    return Serving(*(cached_runner(args.spec, args.hw, phase=phase, model=args.model,
                                   policy=args.policy, engine=args.engine)
                     for phase in ("decode", "prefill")))


def _add_nsys(m: "Measured", args: argparse.Namespace, analysis: "Analysis") -> None:
    """Read the kernel summary and the mapping (file patterns first, then built-ins)."""
    from infest.compiler.analyses import nsys
    if not (args.nsys and args.steps):
        raise fail(None, "--nsys and --steps go together",
                   "--steps K: how many decode steps the capture holds")
    m.steps = int(_count(args.steps, "--steps", limit=MAX_STEPS))
    m.nsys = nsys.read_kern_sum(args.nsys)
    mine = nsys.read_mapping(args.map, mapping_targets(analysis)) if args.map else []
    m.patterns = mine + nsys.default_patterns()


def mapping_targets(analysis: "Analysis") -> set[str]:
    """What a mapping line may name: op names and kinds, groups, comm, ignore."""
    from infest.compiler.analyses.nsys import COMM, GROUP_TARGETS, IGNORE
    from infest.compiler.core.ops import OPS
    ops = analysis.forms.model.ops
    return {o.name for o in ops} | set(OPS) | set(GROUP_TARGETS) | {COMM, IGNORE}


def _sms(analysis: "Analysis", overrides: dict) -> float:
    """The SM count: --set sms=..., else the hardware's field."""
    if "sms" in overrides:
        return float(overrides["sms"])
    hw = analysis.hardware
    if hw is None or "sms" not in hw.fields:
        raise fail(None, f"hardware '{hw.name if hw else '?'}' has no sms (SM count)",
                   "add `sms = 132` to the hardware or pass --set sms=132")
    return float(hw.fields["sms"].value)


# ---- values ------------------------------------------------------------------------

def _value(text: str, flag: str, want: str | None) -> Fraction:
    """A number with an optional unit of dimension `want` (never evaluated as code)."""
    from infest.dsl.units import parse_value
    try:
        value, dim = parse_value(text)
    except ValueError as exc:
        raise fail(None, f"{flag}: {exc}") from None
    if dim is not None and dim != want:
        raise fail(None, f"{flag}: expected a {want or 'plain'} value, got {dim}")
    return value


def _time(text: str | None, flag: str) -> float | None:
    """A positive time with its unit (`281.6ms`, `58.7us`; a bare number is refused)."""
    from infest.exports.cli.common import parse_time
    value = parse_time(flag, text)
    if value is None:
        return None
    if not 0 < value < 10**6:
        raise fail(None, f"{flag}: the time must be positive and under 10^6 s")
    return float(value)


def _positive(text: str | None, flag: str) -> float | None:
    """A positive plain number (a rate or a speedup)."""
    if text is None:
        return None
    value = _value(text, flag, None)
    if not 0 < value < 10**30:
        raise fail(None, f"{flag}: must be a positive number")
    return float(value)


def _count(text: str | None, flag: str, zero: bool = False,
           limit: tuple[str, int] = MAX_COUNT) -> float | None:
    """A whole count (`2790`, `3k`), at most `limit` (named in the message)."""
    if text is None:
        return None
    value = _value(text, flag, "count")
    if value.denominator != 1 or value < (0 if zero else 1):
        raise fail(None, f"{flag}: expected a whole number{' (0 or more)' if zero else ''}, got {text!r}")
    if value > limit[1]:
        raise fail(None, f"{flag}: {text} is over {limit[0]} ({limit[1]})")
    return float(value)


def _pairs(items: list[str], flag: str, limit: tuple[str, int], parse) -> list:
    """`A=B` items, at most `limit` of them (the limit's name is in the message)."""
    if len(items) > limit[1]:
        raise fail(None, f"{flag}: {len(items)} points, over {limit[0]} ({limit[1]})")
    out = []
    for item in items:
        left, sep, right = item.partition("=")
        if not sep:
            raise fail(None, f"{flag} {item!r}: expected A=B", "e.g. --speedup 8=2.44 --depth 32k=95")
        out.append(parse(left.strip(), right.strip(), flag))
    return out


def _speedup(gpus: str, speedup: str, flag: str) -> tuple[int, float]:
    """`8=2.44` (or `8=2.44x`): Amdahl needs 2+ GPUs and 1 <= speedup <= GPUs."""
    n = _count(gpus, flag, limit=MAX_GPUS)
    s = _positive(speedup.removesuffix("x"), flag)
    if n < 2:
        raise fail(None, f"{flag} {gpus}={speedup}: Amdahl needs 2 or more GPUs")
    if not 1 <= s <= n:
        raise fail(None, f"{flag} {gpus}={speedup}: a speedup must lie between 1 and the "
                   f"GPU count ({n:g}) for Amdahl's law", "superlinear or slower runs have no serial fraction")
    return int(n), s


def _depth_point(n: str, rate: str, flag: str) -> tuple[int, float]:
    """`32k=95`: a context (count units) and the tokens/s measured there."""
    return int(_count(n, flag, limit=MAX_CONTEXT)), _positive(rate, flag)
