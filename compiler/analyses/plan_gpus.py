"""`plan --gpus G`: the most output tokens/s from a fixed number of GPUs.

The candidates are plan's grid (compiler/analyses/plan.py: every policy, layout of at
most G GPUs and per-rank batch, served as `infest serve` serves it, a closed loop of C
clients per replica). Each layout keeps the concurrency that gives it the most tokens/s
per GPU among those meeting the limits (means: a closed loop has no percentiles) and
runs floor(G / its GPUs) replicas: GPUs used = replicas x its GPUs, total tokens/s =
replicas x C x OSL / E2E. The best is the most total tokens/s (the same order as tokens/s
per GPU bought: total / G), ties to fewer GPUs used; every layout's answer is listed,
best first, with the Pareto front of tokens/s per GPU against tokens/s per user.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from infest.compiler.analyses.plan import (Demand, check_demand, dominated_by, meeting_candidates,
                                           pareto, request_of)

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving

LAYOUT_KEYS = ("policy", "tp", "ep", "pp", "dp")


def plan_gpus(engines: Mapping[str, "Serving"], demand: Demand, overrides: Mapping[str, Any]
              ) -> dict[str, Any]:
    """request, batching, candidates (one per layout, most total tokens/s first), best,
    pareto, best_dominated_by; an error naming the binding limit when none meets it."""
    check_demand(demand, overrides)
    meeting = meeting_candidates(engines, demand, overrides)
    chosen = [on_budget(c, demand) for c in best_per_layout(meeting)]
    chosen.sort(key=lambda c: (-c["tokens_per_s"], c["gpus"]))
    best = chosen[0]
    front = pareto(chosen)
    return {"request": request_of(engines, demand), "batching": demand.batching,
            "candidates": chosen, "best": best, "pareto": front,
            "best_dominated_by": dominated_by(best, front)}


def best_per_layout(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of each layout's candidates, the one with the most tokens/s per GPU (ties: the
    fewer clients, the faster for each user)."""
    best: dict[tuple, dict[str, Any]] = {}
    for c in rows:
        key = tuple(c[k] for k in LAYOUT_KEYS)
        rank = (c["tokens_per_s_per_gpu"], -c["concurrency_per_replica"])
        if key not in best or rank > (best[key]["tokens_per_s_per_gpu"],
                                      -best[key]["concurrency_per_replica"]):
            best[key] = c
    return list(best.values())


def on_budget(c: Mapping[str, Any], d: Demand) -> dict[str, Any]:
    """The candidate (one replica) run as floor(G / its GPUs) replicas."""
    layout_gpus = c["gpus"] // c["replicas"]
    replicas = d.gpus // layout_gpus
    per_replica = c["tokens_per_s_per_gpu"] * layout_gpus
    return {**c, "replicas": replicas, "gpus": replicas * layout_gpus,
            "tokens_per_s": replicas * per_replica,
            "requests_per_s": replicas * per_replica / d.osl}
