"""`serve --rps`: the open loop (compiler/analyses/openloop.py) on the continuous-batching
model of one spec, hardware and layout, and `--simulate`, the request-level simulation
(compiler/analyses/simulate.py) of the same scheduler.

Arrivals at R per replica split evenly over its schedulers: dp data-parallel ranks, each
keeping pp micro-batches in flight (R / (dp x pp) each); the running cap per rank is
--max-concurrency / dp, else the KV capacity at ISL + OSL - 1 (serve.py `memory_cap`),
shared by its pp micro-batches. Throughputs count what is served: R requests/s and R x
OSL output tokens/s when not saturated; saturated, every time is null and tokens/s is the
most the replica completes (the closed loop at the cap).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from infest.compiler.analyses.continuous import (KEYS, Budget, Decoding, latencies, point_forms,
                                                 schedule, step_costs)
from infest.compiler.analyses.openloop import Closed, solve
from infest.compiler.analyses.serve import (METRIC_KEYS, PERCENTILE_KEYS, Request, Serving,
                                            check_context, check_max_concurrency,
                                            check_request, data_parallel, layout_degree,
                                            memory_cap, running_cap, schedule_summary)
from infest.compiler.analyses.simulate import DEFAULT_REQUESTS, DEFAULT_SEED, DEFAULT_WARMUP, Load
from infest.dsl.errors import fail

MAX_RATE = 1e9           # --rps per replica: a typo like 1e15 fails before any work


@dataclass(frozen=True)
class OpenLoad:
    """The open loop's load: `rps` per replica, an optional running cap per replica, and
    the simulation's run (requests measured, warm-up, seed; simulate=False: none)."""

    rps: float
    max_concurrency: int | None = None
    simulate: bool = False
    requests: int = DEFAULT_REQUESTS
    warmup: int = DEFAULT_WARMUP
    seed: int = DEFAULT_SEED
    spread: float = 0.0      # the simulation's length spread (compiler/analyses/simulate.py)


def check_load(load: OpenLoad, request: Request) -> None:
    """--rps positive and at most MAX_RATE; --max-concurrency at least 1; continuous only."""
    if not 0 < load.rps <= MAX_RATE:
        raise fail(None, f"--rps {load.rps:g}: must be above 0 and at most {MAX_RATE:g} (MAX_RATE)")
    if load.max_concurrency is not None:
        check_max_concurrency(load.max_concurrency)
    if request.batching != "continuous":
        raise fail(None, "--rps queues requests for a continuous-batching engine",
                   "drop --batching static")
    if load.simulate:
        from infest.compiler.analyses.simulate import check_run, check_spread
        check_run(load.requests, load.warmup)
        check_spread(load.spread)


def closed_model(engine: Serving, budget: Budget, dec: Decoding, dp: float,
                 overrides: Mapping[str, Any]) -> dict[str, Closed]:
    """{key: c -> the closed loop at c clients per rank} for each step key (one set of
    forms; each call one vectorised evaluation)."""
    base = {i.name: float(i.value) for i in engine.decode.inputs(overrides, checked=False)}
    forms = point_forms(engine.decode, base)

    def at(c: np.ndarray) -> dict[str, dict[str, Any]]:
        sched = schedule(c, budget, dec)
        costs = step_costs(forms, engine.decode, c, dp, budget, dec, sched)
        out = {}
        for key in KEYS:
            ttft, tpot = latencies(budget, dec, sched, costs[key])
            out[key] = {"sched": sched, "ttft": ttft, "tpot": tpot, **costs[key]}
        return out
    return {key: (lambda c, key=key: at(c)[key]) for key in KEYS}


def rank_cap(engine: Serving, r: Request, load: OpenLoad, dp: float,
             overrides: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """(running requests one rank admits, the last decode step's values)."""
    kv, last = memory_cap(engine.decode, r.isl, r.osl, dp, overrides)
    return running_cap(kv, load.max_concurrency, dp), last


def serve_open(engine: Serving, r: Request, load: OpenLoad, overrides: Mapping[str, Any]
               ) -> dict[str, Any]:
    """serve --json for the open loop: METRIC_KEYS, percentiles, saturated, utilisation,
    concurrency (mean in flight per replica), queueing, bound, simulated."""
    check_request(r)
    check_load(load, r)
    for name in ("B", "N", "T"):
        if name in overrides:
            raise fail(None, f"--set {name}: serve sets it from --rps, --isl, --osl")
    check_context(engine.decode, r.isl, r.osl, overrides)
    dp = data_parallel(engine.decode, overrides)
    pp = layout_degree(engine.decode, overrides, "pp")
    budget, dec = Budget(r.isl, r.osl, r.chunk), Decoding(1.0, r.osl - 1)
    cap, last = rank_cap(engine, r, load, dp, overrides)
    cap = int(cap // pp)             # each of the rank's pp micro-batches runs its share
    if cap < 1 and load.max_concurrency is not None:
        raise fail(None, f"--max-concurrency {load.max_concurrency}: less than one request "
                   f"per scheduler (dp x pp = {dp * pp:g})")
    if cap < 1:
        raise fail(None, "the weights leave no room for one request's KV cache at ISL + OSL - 1",
                   "more GPUs (--set tp=..), or shorter requests")
    models = closed_model(engine, budget, dec, dp, overrides)
    info = {"gpus": int(last["parallel.gpus"]), "fits": bool(last["memory.fits"]),
            "dp": dp * pp}     # schedulers per replica: the rate splits over them
    answers = {key: solve(load.rps / (dp * pp), cap, models[key], budget, dec) for key in KEYS}
    out = {**open_metrics(r, load, answers[engine.key], info),
           "bound": open_metrics(r, load, answers["roofline_s"], info),
           "batching": r.batching, "max_concurrency_per_rank": cap}
    if not answers[engine.key]["saturated"]:
        out["schedule"] = schedule_summary(answers[engine.key]["closed"]["sched"])
    if load.simulate:
        out["simulated"] = simulated(engine, r, load, cap, (dp, pp), overrides,
                                     answers[engine.key])
    return out


def open_metrics(r: Request, load: OpenLoad, a: Mapping[str, Any], info: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """The serve keys of one open-loop answer (null times when saturated)."""
    dp = info["dp"]
    common = {"gpus": info["gpus"], "fits": info["fits"], "saturated": a["saturated"],
              "utilisation": a["utilisation"], "max_requests_per_s": a["max_rate"] * dp,
              "rps": load.rps}
    if a["saturated"]:
        tokens = a["max_rate"] * dp * r.osl     # the most the replica completes
        return {**dict.fromkeys(METRIC_KEYS), **dict.fromkeys(PERCENTILE_KEYS), **common,
                "tokens_per_s": tokens, "tokens_per_s_per_gpu": tokens / info["gpus"],
                "requests_per_s": a["max_rate"] * dp, "concurrency": None, "queueing": None}
    tokens = load.rps * r.osl
    return {"ttft_s": a["ttft"], "tpot_s": a["tpot"], "e2e_s": a["ttft"] + (r.osl - 1) * a["tpot"],
            "tokens_per_s": tokens, "tokens_per_s_per_gpu": tokens / info["gpus"],
            "tokens_per_s_per_user": 1 / a["tpot"], "requests_per_s": load.rps,
            **{k: a.get(k) for k in PERCENTILE_KEYS}, **common,
            "concurrency": a["concurrency"] * dp,
            "queueing": {"residual_s": a["residual"], "wait_s": a["wait"],
                         "share_s": a["share"], "budget_utilisation": a["rho_b"],
                         "poll_interval": float(a["closed"]["poll"])}}


def simulated(engine: Serving, r: Request, load: OpenLoad, cap: int,
              degrees: tuple[float, float], overrides: Mapping[str, Any],
              answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """The simulation of one scheduler (a data-parallel rank's micro-batch: `degrees` =
    (dp, pp)): its means and percentiles (None when saturated: the queue would only grow
    with the run's length)."""
    from infest.compiler.analyses.serve_sim import length_grid
    from infest.compiler.analyses.simulate import simulate
    if answer["saturated"]:
        return None
    dp, pp = degrees
    run = Load(load.rps / (dp * pp), cap, r.isl, r.osl, r.chunk, spread=load.spread)
    grid = length_grid(engine, run, dp, cap, overrides)
    return {**simulate(grid, run, load.requests, load.warmup, load.seed),
            "warmup": load.warmup, "seed": load.seed, "length_spread": load.spread}
