"""Disaggregated serving: a prefill pool and a decode pool, sized separately.

Both pools are searched over `plan`'s grid (layouts x batches, one vectorised evaluation
per policy). Decode pool: a replica holds C requests decoding, TPOT = the mean decode step
at that batch (as `serve`), meeting --tpot-max; replicas = ceil(U / C) with --users (every
user's slot and KV cache lives there), or ceil(R x (OSL - 1) x TPOT / C) with --rps (Little's
law: requests decoding = rate x time spent decoding). Prefill pool: a replica prefills B
prompts of ISL tokens in one prefill step t_p (TTFT = t_p, no queueing: meets --ttft-max),
i.e. B / t_p prompts/s; prompts arrive at R, or at U / E2E with E2E = t_p + (OSL - 1) x TPOT
(each user sends its next request when the last one ends); replicas = ceil(arrival x t_p /
B). Each pool: fewest GPUs, ties by throughput per GPU; the decode pool is chosen first (the
arrival rate depends on its TPOT). Moving the KV cache between the pools is not modelled.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.plan import Demand, check_demand, describe, grids
from infest.compiler.core.keys import PARALLEL
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving


def arrival_rate(d: Demand, t_prefill: float, tpot: float) -> float:
    """Prompts per second reaching the prefill pool."""
    if d.rps is not None:
        return d.rps
    return d.users / (t_prefill + (d.osl - 1) * tpot)   # each user: one request per E2E


def pool_replicas(load: float, per_replica: float) -> int:
    """Replicas so that `load` (requests or prompts/s) does not exceed their capacity."""
    return max(1, math.ceil(load / per_replica))


def disaggregate(engines: Mapping[str, "Serving"], d: Demand, overrides: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """The two pools, their GPUs and the prefill-to-decode GPU ratio."""
    check_demand(d, overrides)
    evaluated = grids(engines, replace(d, batching="static"), overrides)  # each pool: batches
    decode = _best(_decode_rows(evaluated, d), "tpot_s", d.tpot_max, "--tpot-max",
                   "tokens_per_s_per_gpu")
    prefill = _best(_prefill_rows(evaluated, d, decode["tpot_s"]), "ttft_s", d.ttft_max,
                    "--ttft-max", "prompts_per_s_per_gpu")
    gpus = prefill["gpus"] + decode["gpus"]
    if d.gpus_max is not None and gpus > d.gpus_max:
        raise fail(None, f"--gpus-max {d.gpus_max} binds: the pools need {prefill['gpus']} "
                   f"(prefill) + {decode['gpus']} (decode) = {gpus} GPUs", "raise --gpus-max")
    return {"prefill": prefill, "decode": decode, "gpus": gpus,
            "prefill_to_decode": prefill["gpus"] / decode["gpus"],
            "arrival_rps": prefill["arrival_rps"],
            "e2e_s": prefill["ttft_s"] + (d.osl - 1) * decode["tpot_s"]}


def _layout(policy: str, row: np.ndarray) -> dict[str, Any]:
    return {**{k: int(v) for k, v in zip(PARALLEL, row)}, "policy": policy}


def _decode_rows(evaluated, d: Demand) -> list[dict[str, Any]]:
    out, seen = [], set()
    for policy, grid, g in evaluated:
        for i, j in zip(*np.nonzero(g["ok"])):
            c, tpot, n = float(g["C"][i, j]), float(g["tpot"][i, j]), int(g["layout_gpus"][i, j])
            if (policy, i, c) in seen:
                continue
            seen.add((policy, i, c))
            load = d.users if d.users is not None else d.rps * (d.osl - 1) * tpot
            replicas = pool_replicas(load, c)
            out.append({**_layout(policy, grid[i]), "concurrency_per_replica": int(c),
                        "batch_per_replica": int(g["B"][i, j]), "replicas": replicas,
                        "gpus": replicas * n, "tpot_s": tpot,
                        "tokens_per_s_per_gpu": c / tpot / n, "tokens_per_s_per_user": 1 / tpot})
    return out


def _prefill_rows(evaluated, d: Demand, tpot: float) -> list[dict[str, Any]]:
    out, seen = [], set()
    for policy, grid, g in evaluated:
        for i, j in zip(*np.nonzero(g["ok_prefill"])):
            b, t_p, n = float(g["B"][i, j]), float(g["ttft"][i, j]), int(g["layout_gpus"][i, j])
            if (policy, i, b) in seen:
                continue
            seen.add((policy, i, b))
            arrival = arrival_rate(d, t_p, tpot)
            replicas = pool_replicas(arrival, b / t_p)
            out.append({**_layout(policy, grid[i]), "batch_per_replica": int(b),
                        "replicas": replicas, "gpus": replicas * n, "ttft_s": t_p,
                        "arrival_rps": arrival, "prompts_per_s_per_gpu": b / t_p / n})
    return out


def _best(rows: list[dict[str, Any]], key: str, limit: float | None, flag: str,
          per_gpu: str) -> dict[str, Any]:
    """Fewest GPUs meeting the pool's latency limit (ties: more per GPU); else an error."""
    if not rows:
        raise fail(None, "no layout fits the model in memory within the GPU limit",
                   "raise --gpus-max, or use hardware with more memory")
    meeting = [r for r in rows if limit is None or r[key] <= limit]
    if not meeting:
        from infest.dsl.human import duration
        top = min(rows, key=lambda r: r[key])
        raise fail(None, f"no layout meets {flag} {duration(limit)}: the best is "
                   f"{duration(top[key])} ({describe(top)})",
                   f"relax {flag}")
    return min(meeting, key=lambda r: (r["gpus"], -r[per_gpu]))
