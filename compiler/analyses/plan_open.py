"""`plan --rps R`: the fewest GPUs serving Poisson arrivals at R requests/s (the open loop).

Each replica of a layout gets R / replicas, split over its schedulers (dp data-parallel
ranks x pp micro-batches), and is served exactly as `serve --rps` serves it
(compiler/analyses/openloop.py: the Little's-law fixed point on the continuous-batching
model, the running cap at the KV capacity for ISL + OSL - 1, the budget's M/D/1 wait; past
utilisation 1 saturated). The replica counts tried for a layout are those that put it at
each utilisation of UTILISATIONS, ceil(R / (u x its most requests/s)): the answer is the
fewest of them meeting the limits, so it can be one step of that list above the least
possible. Limits compare with means, or with the TTFT percentile of --slo-percentile
(the model's estimate; it gives no TPOT percentile, so a TPOT limit with a percentile is
refused by planner.py). Every layout and replica count is one vectorised solve per policy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.continuous import (Budget, Decoding, latencies, point_forms,
                                                 schedule, step_costs)
from infest.compiler.analyses.openloop import Closed, solve_grid
from infest.compiler.analyses.plan import (Demand, base_inputs, check_demand, describe,
                                           dominated_by, layouts, pareto, request_of,
                                           used_degrees, values_at)
from infest.compiler.analyses.serve import check_context
from infest.compiler.core.keys import PARALLEL
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving

# The utilisations whose replica counts are tried for every layout.
UTILISATIONS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
LIST_FACTOR = 4     # candidates listed: up to this many times the best's GPUs


def plan_open(engines: Mapping[str, "Serving"], d: Demand, overrides: Mapping[str, Any]
              ) -> dict[str, Any]:
    """request, batching, candidates (the fewest replicas of each layout meeting the
    limits, fewest GPUs first), best, pareto, best_dominated_by; an error naming the
    binding limit when no layout meets it."""
    check_demand(d, overrides)
    for engine in engines.values():
        check_context(engine.decode, d.isl, d.osl, overrides)
    rows = [row for policy, engine in engines.items()
            for row in layout_answers(policy, engine, d, overrides)]
    meeting = [fewest for fewest in (_fewest(r, d) for r in rows) if fewest is not None]
    if not meeting:
        raise no_open_answer(rows, d)
    meeting.sort(key=lambda c: (c["gpus"], -c["tokens_per_s_per_gpu"]))
    best = meeting[0]
    shown = [c for c in meeting if c["gpus"] <= max(d.gpus_max or 0, LIST_FACTOR * best["gpus"])]
    front = pareto(shown)
    return {"request": request_of(engines, d), "batching": d.batching, "candidates": shown,
            "best": best, "pareto": front, "best_dominated_by": dominated_by(best, front)}


def layout_answers(policy: str, engine: "Serving", d: Demand, overrides: Mapping[str, Any]
                   ) -> list[list[dict[str, Any]]]:
    """For every layout that holds one request per scheduler: its answers at each replica
    count tried (saturated ones left out), fewest replicas first."""
    grid = layouts(d.layout_gpus, used_degrees(engine))
    base = base_inputs(engine.decode, overrides)
    lay = {k: grid[:, i, None] for i, k in enumerate(PARALLEL)}
    schedulers = lay["dp"] * lay["pp"]
    last = values_at(engine.decode, base, {**lay, "B": lay["dp"], "N": float(   # serve's
        d.isl + d.osl - 2), "T": 1.0})        # memory_cap: the cache at the last decode step
    cap = np.floor(np.broadcast_to(last["memory.engine_max_batch"], lay["dp"].shape) / schedulers)
    keep = np.nonzero((np.broadcast_to(last["valid"], cap.shape) & (cap >= 1))[:, 0])[0]
    if not len(keep):
        return []
    lay, cap = {k: v[keep] for k, v in lay.items()}, np.minimum(cap[keep], 2.0**31)
    schedulers, gpus = schedulers[keep], np.broadcast_to(last["parallel.gpus"], grid[:, :1].shape)[keep]
    closed = _closed(engine, d, base, lay)
    top = closed(cap)
    most = cap / (top["ttft"] + (d.osl - 1) * top["tpot"]) * schedulers   # requests/s
    replicas = np.ceil(d.rps / (np.asarray(UTILISATIONS)[None, :] * most))
    a = solve_grid(d.rps / (replicas * schedulers), cap, closed, Budget(d.isl, d.osl, d.chunk),
                   Decoding(1.0, d.osl - 1))
    a = {k: np.broadcast_to(a[k], replicas.shape) for k in ("saturated", *_KEYS)}
    return [_answers(policy, grid[keep][i], {k: v[i] for k, v in a.items()}, replicas[i],
                     gpus[i, 0], d) for i in range(len(keep))]


def _closed(engine: "Serving", d: Demand, base: Mapping[str, float],
            lay: Mapping[str, np.ndarray]) -> Closed:
    """c (layouts x tries) -> the closed loop at c clients per scheduler, every layout."""
    budget, dec = Budget(d.isl, d.osl, d.chunk), Decoding(1.0, d.osl - 1)
    deep = {k: v[..., None] for k, v in lay.items()}          # (L, 1, 1): chunk points last
    forms = point_forms(engine.decode.compiled(list(base)), {**base, **deep, "T": 1.0})

    def at(c: np.ndarray) -> dict[str, Any]:
        sched = schedule(c, budget, dec)
        costs = step_costs(forms, engine.decode, c, lay["dp"], budget, dec, sched)[engine.key]
        ttft, tpot = latencies(budget, dec, sched, costs)
        return {"sched": sched, "ttft": ttft, "tpot": tpot, **costs}
    return at


def _answers(policy: str, row: np.ndarray, a: Mapping[str, np.ndarray], replicas: np.ndarray,
             layout_gpus: float, d: Demand) -> list[dict[str, Any]]:
    """One layout's answers at its replica counts (each once, saturated ones left out)."""
    out, seen = [], set()
    for j in np.argsort(replicas, kind="stable"):
        r = int(replicas[j])
        if r in seen or bool(a["saturated"][j]):
            continue
        seen.add(r)
        out.append(_candidate(policy, row, {k: float(a[k][j]) for k in _KEYS}, r,
                              int(layout_gpus), d))
    return out


_KEYS = ("ttft", "tpot", "concurrency", "utilisation", "ttft_p90_s", "ttft_p99_s")


def _candidate(policy: str, row: np.ndarray, a: Mapping[str, float], replicas: int,
               layout_gpus: int, d: Demand) -> dict[str, Any]:
    tp, ep, pp, dp = (int(x) for x in row)
    rate = d.rps / replicas
    return {"tp": tp, "ep": ep, "pp": pp, "dp": dp, "policy": policy,
            "rps_per_replica": rate, "concurrency_per_replica": a["concurrency"] * dp * pp,
            "utilisation": a["utilisation"], "replicas": replicas,
            "gpus": replicas * layout_gpus, "ttft_s": a["ttft"], "tpot_s": a["tpot"],
            "e2e_s": a["ttft"] + (d.osl - 1) * a["tpot"], "ttft_p90_s": a["ttft_p90_s"],
            "ttft_p99_s": a["ttft_p99_s"], "tpot_p90_s": None, "tpot_p99_s": None,
            "tokens_per_s_per_gpu": rate * d.osl / layout_gpus,   # all served: R x OSL
            "tokens_per_s_per_user": 1 / a["tpot"]}


def ttft_key(d: Demand) -> str:
    """The TTFT the limit compares with: the mean, or the --slo-percentile's."""
    return "ttft_s" if d.slo_percentile is None else f"ttft_p{d.slo_percentile}_s"


def meets_open(c: Mapping[str, Any], d: Demand) -> bool:
    """Within --ttft-max (mean or percentile), --tpot-max (mean) and --gpus-max."""
    return ((d.tpot_max is None or c["tpot_s"] <= d.tpot_max)
            and (d.ttft_max is None or c[ttft_key(d)] <= d.ttft_max)
            and (d.gpus_max is None or c["gpus"] <= d.gpus_max))


def _fewest(answers: list[dict[str, Any]], d: Demand) -> dict[str, Any] | None:
    return next((c for c in answers if meets_open(c, d)), None)


def no_open_answer(rows: list[list[dict[str, Any]]], d: Demand):
    """Which limit binds, with the best any layout reached on it (at its most replicas)."""
    from infest.dsl.human import duration
    answers = [c for r in rows for c in r]
    if not answers:
        return fail(None, "no layout holds one request per scheduler within the GPU limit",
                    "raise --gpus-max, or use hardware with more memory")
    for flag, key, limit in (("--tpot-max", "tpot_s", d.tpot_max),
                             ("--ttft-max", ttft_key(d), d.ttft_max)):
        if limit is not None and all(c[key] > limit for c in answers):
            top = min(answers, key=lambda c: c[key])
            return fail(None, f"no layout meets {flag} {duration(limit)} ({key}) at "
                        f"{d.rps:g} req/s: the best is {duration(top[key])} ({describe(top)}, "
                        f"{top['replicas']} replicas)", f"relax {flag}")
    if d.gpus_max is not None:
        return fail(None, f"--gpus-max {d.gpus_max} binds: no layout meets the limits at "
                    f"{d.rps:g} req/s within it", "raise --gpus-max")
    return fail(None, "the limits hold one at a time but no layout meets them together",
                "relax --tpot-max or --ttft-max")

