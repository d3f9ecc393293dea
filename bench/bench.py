"""Benchmarks: how fast infest compiles, evaluates and sweeps each shipped model.

    python bench/bench.py [--hw h100_sxm] [--repeat 3]

Per spec in specs/models/: parse + elaborate + closed forms, code generation, one eval, a
10^6-point sweep in-process (1000 B x 1000 N), the same grid as a plain per-point Python
loop over the same compiled function (timed on a sample, extrapolated), then whole
processes: `infest --help`, `infest eval`, a 65,536-point `infest sweep --csv`, and the
workbook write if infest.exports.workbook.xlsx provides write_workbook; also the parser's
construction, paid once by every process that parses, and a capacity plan (DeepSeek-V3 on
h200_sxm, every layout and batch size: the search in-process with its forms compiled, and a
whole `infest plan` process). Targets: the 10^6-point sweep under 1 s, the 65,536-point CSV
process under 4 s, `infest --help` under 0.25 s, the plan under 2 s (printed, not asserted).
`--plan-only` runs the plan figures alone.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
GRID = 1000          # GRID x GRID in-process sweep
LOOP_SAMPLE = 1000   # points timed one by one, then extrapolated to GRID^2


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Fastest of `repeat` runs, in seconds (the least disturbed by other load)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cli() -> list[str]:
    """The installed `infest` script, or the module if the script is not on PATH."""
    found = shutil.which("infest")
    return [found] if found else [sys.executable, "-m", "infest.exports.cli"]


CACHE = tempfile.mkdtemp(prefix="infest-bench-cache-")  # a private cache for this run


def process_time(args: list[str], repeat: int, cached: bool = False) -> float:
    """Median wall time of a whole `infest` process (output discarded): uncached (the
    forms derived from the spec) or cached (one untimed run fills the cache first)."""
    # Python's usual bytecode cache on (some sandboxes turn it off, which recompiles every
    # module of every process and is not what a user's machine does).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["INFEST_CACHE_DIR"] = CACHE
    if not cached:
        env["INFEST_NO_CACHE"] = "1"
    else:
        subprocess.run(cli() + args, check=True, stdout=subprocess.DEVNULL, env=env)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cli() + args, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compile_times(spec: Path, hw: str) -> tuple[Any, float, float]:
    """(analysis, parse+forms seconds, code generation seconds), cold in this process."""
    from infest.compiler.api import analyze
    t0 = time.perf_counter()
    analysis = analyze(spec, hw=hw)
    t1 = time.perf_counter()
    analysis.compiled([i.name for i in analysis.inputs({})])
    return analysis, t1 - t0, time.perf_counter() - t1


def sweep_times(analysis: Any, repeat: int) -> tuple[float, float]:
    """(vectorised 10^6-point sweep seconds, per-point loop seconds extrapolated to 10^6)."""
    import numpy as np
    from infest.compiler.analyses.sweep import sweep
    axis = list(range(1, GRID + 1))
    vectorised = best(lambda: sweep(analysis, {}, axis, axis, "tokens_per_s"), repeat)
    inputs = analysis.inputs({})
    fn = analysis.compiled([i.name for i in inputs])
    base = {i.name: float(i.value) for i in inputs}
    rng = np.random.default_rng(0)
    sample = rng.integers(1, GRID + 1, size=(LOOP_SAMPLE, 2)).astype(float)

    def loop() -> None:
        for b, n in sample:  # the baseline: what a sweep without broadcasting costs
            fn({**base, "B": b, "N": n})["step.tokens_per_s"]
    per_point = best(loop, 1) / LOOP_SAMPLE
    return vectorised, per_point * GRID * GRID


def workbook_time(analysis: Any) -> float | None:
    """Seconds to write the live workbook, or None if the exporter is not there yet."""
    try:
        from infest.exports.workbook.xlsx import write_workbook
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_workbook(analysis, Path(tmp) / "bench.xlsx", {})
        return time.perf_counter() - t0


PLAN_SPEC = "specs/models/deepseek_v3.arch"
PLAN_HW = "h200_sxm"
PLAN_ARGS = ["--isl", "8192", "--osl", "1024", "--users", "1000", "--tpot-max", "50ms"]


def plan_rows(repeat: int) -> list[tuple[str, str]]:
    """(what, figure) rows for the DeepSeek-V3 plan: in-process search, whole process."""
    from infest.compiler.api import analyze
    from infest.compiler.analyses.plan import Demand, plan
    from infest.compiler.analyses.serve import Serving
    spec = ROOT / PLAN_SPEC
    policies = list(analyze(spec, hw=PLAN_HW).model.policies) or [None]
    engines = {str(p): Serving(*(analyze(spec, hw=PLAN_HW, phase=ph, policy=p)
                                for ph in ("decode", "prefill"))) for p in policies}
    demand = Demand(8192, 1024, users=1000, tpot_max=0.05)   # continuous batching (default)
    t_cold = best(lambda: plan(engines, demand, {}), 1)   # compiles the forms once
    t_warm = best(lambda: plan(engines, demand, {}), repeat)
    command = ["plan", PLAN_SPEC, "--hw", PLAN_HW] + PLAN_ARGS
    t_proc = process_time(command, repeat)
    t_cached = process_time(command, repeat, cached=True)
    return [
        ("plan search, first (compiles the forms)", f"{t_cold:8.3f} s"),
        ("plan search, forms compiled", f"{t_warm:8.3f} s   (target < 2 s)"),
        ("process: infest plan, uncached", f"{t_proc:8.3f} s"),
        ("process: infest plan, cached", f"{t_cached:8.3f} s   (target < 2 s)"),
    ]


def print_rows(title: str, rows: list[tuple[str, str]]) -> None:
    """One block: a title, then aligned (what, figure) rows."""
    width = max(len(what) for what, _ in rows)
    print(f"\n{title}")
    for what, figure in rows:
        print(f"  {what.ljust(width)}  {figure}")


def bench_spec(spec: Path, hw: str, repeat: int) -> list[tuple[str, str]]:
    """(what, figure) rows for one spec."""
    analysis, t_parse, t_codegen = compile_times(spec, hw)
    t_eval = best(lambda: analysis.evaluate({}), repeat)
    t_sweep, t_loop = sweep_times(analysis, repeat)
    t_book = workbook_time(analysis)
    rel = str(spec.relative_to(ROOT))
    eval_args, sweep_args = ["eval", rel, "--hw", hw], ["sweep", rel, "--hw", hw, "--B", "1..256",
                                                         "--N", "1..256", "--csv"]
    small_sweep = ["sweep", rel, "--hw", hw, "--B", "1..99", "--N", "4096"]
    rows = [
        ("parse + elaborate + closed forms", f"{t_parse * 1e3:8.1f} ms"),
        ("generate + compile the numpy code", f"{t_codegen * 1e3:8.1f} ms"),
        ("one eval (in-process)", f"{t_eval * 1e3:8.2f} ms"),
        (f"sweep {GRID}x{GRID} = 10^6 points", f"{t_sweep:8.3f} s   "
         f"({GRID * GRID / t_sweep / 1e6:.2f} M points/s; target < 1 s)"),
        ("same grid, per-point Python loop", f"{t_loop:8.1f} s   (extrapolated from "
         f"{LOOP_SAMPLE} points; vectorised is {t_loop / t_sweep:,.0f}x faster)"),
        ("process: infest eval, uncached",
         f"{process_time(eval_args, repeat):8.3f} s   (target < 1.5 s)"),
        ("process: infest eval, cached",
         f"{process_time(eval_args, repeat, cached=True):8.3f} s   (target < 0.3 s)"),
        ("process: infest sweep --csv, 65,536 points, uncached",
         f"{process_time(sweep_args, repeat):8.3f} s   (target < 4 s)"),
        ("process: infest sweep --csv, 65,536 points, cached",
         f"{process_time(sweep_args, repeat, cached=True):8.3f} s"),
        ("process: infest sweep, 99 points, cached",
         f"{process_time(small_sweep, repeat, cached=True):8.3f} s   (target < 0.35 s)"),
        ("workbook write", "skipped (no infest.exports.workbook.xlsx.write_workbook)" if t_book is None
         else f"{t_book:8.3f} s"),
    ]
    return rows


_TINY = """model tiny "warm-up" {
  hidden = 64; vocab = 128
  weights: bf16; kv: bf16; act: bf16
  x = embed(tokens, vocab -> hidden)
  logits = linear(x, hidden -> vocab)
}
"""


def warm_up(hw: str) -> None:
    """Build the parser and sympy's printers on a tiny model, so no spec pays for them."""
    from infest.compiler.api import analyze
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiny.arch"
        path.write_text(_TINY)
        analyze(path, hw=hw).evaluate({})


def parser_build(repeat: int) -> float:
    """Seconds to load the LALR parser from the tables shipped in the package, as each
    process that parses does once (dsl/tables.py)."""
    from infest.dsl.parser import _lark

    def build() -> None:
        _lark.cache_clear()
        _lark()
    return best(build, repeat)


def main() -> int:
    """Run every benchmark and print one block per spec."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="h100_sxm")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (best/median)")
    parser.add_argument("--plan-only", action="store_true", help="only the plan figures")
    args = parser.parse_args()
    if args.plan_only:
        print_rows(f"plan: {Path(PLAN_SPEC).stem} on {PLAN_HW}", plan_rows(args.repeat))
        return 0
    print(f"python {sys.version.split()[0]}; process: infest --help "
          f"{process_time(['--help'], args.repeat):.3f} s; "
          f"parser from shipped tables {parser_build(args.repeat) * 1e3:.1f} ms")
    specs = sorted((ROOT / "specs" / "models").glob("*.arch"))
    warm_up(args.hw)
    for spec in specs:
        print_rows(f"{spec.stem} on {args.hw}", bench_spec(spec, args.hw, args.repeat))
    print_rows(f"plan: {Path(PLAN_SPEC).stem} on {PLAN_HW}", plan_rows(args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
