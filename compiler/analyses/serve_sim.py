"""serve's simulation beside its closed forms: the step-cost grid for the lengths a run
draws, and the closed loop of `serve --concurrency C --simulate`.

The open loop's run (`serve --rps R --simulate`) is compiler/analyses/serve_open.py
`simulated`; both run compiler/analyses/simulate.py on one scheduler, whose steps cost
what compiler/analyses/stepgrid.py interpolates from one evaluation of the forms.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from infest.compiler.analyses.continuous import clients_per_scheduler, point_forms
from infest.compiler.analyses.serve import (Request, Serving, admission_of, data_parallel,
                                            layout_degree, memory_cap)
from infest.compiler.analyses.simulate import (DEFAULT_WARMUP, MAX_REQUESTS, Load, check_run,
                                               check_spread, simulate_closed)
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.analyses.stepgrid import StepGrid


def simulated_closed(engine: Serving, r: Request, overrides: Mapping[str, Any],
                     requests: int, seed: int, spread: float) -> dict[str, Any]:
    """serve --concurrency --simulate: one scheduler's closed loop (the busiest data-
    parallel rank's clients, one pipeline micro-batch's share) run request by request
    (compiler/analyses/simulate.py `simulate_closed`): its means and percentiles. With
    r.prompts, the benchmark as run: its share of the prompts from the synchronised start,
    every one measured (no warm-up), as serve --prompts takes them. The scheduler admits
    what the KV cache holds, or r.max_concurrency (serve.py `admission_of`); the other
    clients wait in its queue."""
    dp = data_parallel(engine.decode, overrides)
    warmup = DEFAULT_WARMUP
    if r.prompts is not None:
        requests, warmup = math.ceil(r.prompts / dp), 0
        if requests > MAX_REQUESTS:
            raise fail(None, f"--prompts {r.prompts:,} with --simulate: {requests:,} requests "
                       f"a scheduler, more than MAX_REQUESTS = {MAX_REQUESTS:,}",
                       "simulate fewer prompts, or drop --simulate")
    check_run(requests, warmup)
    check_spread(spread)
    pp = layout_degree(engine.decode, overrides, "pp")
    c = int(clients_per_scheduler(math.ceil(r.concurrency / dp), pp))
    last = memory_cap(engine.decode, r.isl, r.osl, dp, overrides)[1]
    cap = admission_of(c, last, r, dp, pp)[1]
    run = Load(0.0, cap, r.isl, r.osl, r.chunk, spread=spread)   # the rest wait in its queue
    grid = length_grid(engine, run, dp, cap, overrides)
    got = simulate_closed(grid, run, c, requests, warmup, seed)
    return {**got, "warmup": warmup, "seed": seed, "length_spread": spread,
            "clients_per_scheduler": c, "admitted_per_scheduler": cap}


def length_grid(engine: Serving, run: Load, dp: float, decoders: float,
                overrides: Mapping[str, Any]) -> "StepGrid":
    """The step-cost grid of one scheduler for the lengths `run` may draw, up to
    `decoders` decoding at once (compiler/analyses/stepgrid.py)."""
    from infest.compiler.analyses.stepgrid import build_grid
    base = {i.name: float(i.value) for i in engine.decode.inputs(overrides, checked=False)}
    shortest, isl, osl = run.length_bounds()
    return build_grid(point_forms(engine.decode, base), engine.decode, dp, isl, osl, 1.0,
                      decoders, run.budget, engine.key, shortest)
