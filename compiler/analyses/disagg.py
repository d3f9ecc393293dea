"""Disaggregated serving: a prefill pool and a decode pool, sized separately, on the same
hardware or on different GPUs (--prefill-hw, --decode-hw).

Both pools are searched over `plan`'s grid (layouts x batches, one vectorised evaluation
per policy and hardware). Decode pool: a replica holds C requests decoding, TPOT = the
mean decode step at that batch (as `serve`), meeting --tpot-max; replicas = ceil(U / C)
with --users (every user's slot and KV cache lives there), or ceil(R x (OSL - 1) x TPOT /
C) with --rps (Little's law: requests decoding = rate x time spent decoding). Prefill
pool: a replica prefills B prompts of ISL tokens in one prefill step t_p, then each
request's KV cache moves to the decode pool (compiler/analyses/kv_transfer.py: not
overlapped, so TTFT = t_p + the transfer, meeting --ttft-max; no queueing); B / t_p
prompts/s; prompts arrive at R, or at U / E2E with E2E = TTFT + (OSL - 1) x TPOT (each
user sends its next request when the last one ends); replicas = ceil(arrival x t_p / B).
Each pool: fewest GPUs, ties by throughput per GPU; the decode pool is chosen first (the
arrival rate and the transfer depend on it).

With --gpus G (`disaggregate_gpus`): the decode layouts with the most tokens/s per GPU
meeting --tpot-max and, for each, the prefill layouts with the most prompts/s per GPU
meeting --ttft-max with the transfer to it (PAIR_LAYOUTS of each), and for every pair every
split of G: r_p prefill and floor((G - r_p x its GPUs) / the decode layout's GPUs) decode
replicas, serving min(r_p x B / t_p, r_d x C / ((OSL - 1) x TPOT)) requests/s (each pool at
most at its capacity: no queueing). The best: the most requests/s, ties to fewer GPUs.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.kv_transfer import Pool, kv_share, link_fields, transfer
from infest.compiler.analyses.plan import (Demand, base_inputs, check_demand, describe, grids,
                                           values_at)
from infest.compiler.core.keys import PARALLEL
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving

PAIR_LAYOUTS = 8            # layouts of each pool paired under a GPU budget
MAX_SPLITS = 2**22          # (pair, prefill replicas) points a budget's split may try


def arrival_rate(d: Demand, ttft: float, tpot: float) -> float:
    """Prompts per second reaching the prefill pool."""
    if d.rps is not None:
        return d.rps
    return d.users / (ttft + (d.osl - 1) * tpot)   # each user: one request per E2E


def pool_replicas(load: float, per_replica: float) -> int:
    """Replicas so that `load` (requests or prompts/s) does not exceed their capacity."""
    return max(1, math.ceil(load / per_replica))


def disaggregate(engines: Mapping[str, "Serving"], d: Demand, overrides: Mapping[str, Any],
                 decode_engines: Mapping[str, "Serving"] | None = None) -> dict[str, Any]:
    """The two pools, their GPUs, the prefill-to-decode GPU ratio and the KV transfer
    (`engines` the prefill pool's, `decode_engines` the decode pool's: the same if None)."""
    check_demand(d, overrides)
    pools = evaluate_pools(engines, decode_engines or engines, d, overrides)
    decode = _best(_decode_rows(pools["decode"], d), "tpot_s", d.tpot_max, "--tpot-max",
                   "tokens_per_s_per_gpu")
    prefill = _best(_prefill_rows(pools["prefill"], d, decode), "ttft_s", d.ttft_max,
                    "--ttft-max", "prompts_per_s_per_gpu")
    gpus = prefill["gpus"] + decode["gpus"]
    if d.gpus_max is not None and gpus > d.gpus_max:
        raise fail(None, f"--gpus-max {d.gpus_max} binds: the pools need {prefill['gpus']} "
                   f"(prefill) + {decode['gpus']} (decode) = {gpus} GPUs", "raise --gpus-max")
    return {**_hardware(engines, decode_engines), "prefill": public(prefill),
            "decode": public(decode),
            "gpus": gpus, "prefill_to_decode": prefill["gpus"] / decode["gpus"],
            "arrival_rps": prefill["arrival_rps"], "kv_transfer": prefill["kv_transfer"],
            "e2e_s": prefill["ttft_s"] + (d.osl - 1) * decode["tpot_s"]}


def evaluate_pools(engines: Mapping[str, "Serving"], decode_engines: Mapping[str, "Serving"],
                   d: Demand, overrides: Mapping[str, Any]) -> dict[str, list]:
    """{prefill, decode}: per policy (policy, layout rows, plan's arrays with static
    batches, the pool's transfer facts per row)."""
    static = replace(d, batching="static")     # each pool: batches of one phase
    out = {}
    for name, pool in (("prefill", engines), ("decode", decode_engines)):
        out[name] = [(policy, grid, g, _pool(pool[policy], grid, d, overrides))
                     for policy, grid, g in grids(pool, static, overrides)]
    return out


def _pool(engine: "Serving", grid: np.ndarray, d: Demand, overrides: Mapping[str, Any]
          ) -> dict[str, Any]:
    """Per layout row: the share of a request's cache one GPU holds; the hardware's fields."""
    base = base_inputs(engine.decode, overrides)
    lay = {k: grid[:, i] for i, k in enumerate(PARALLEL)}
    v = values_at(engine.decode, base, {**lay, "B": lay["dp"], "N": float(d.isl), "T": 1.0})
    share = np.broadcast_to(kv_share(v), (len(grid),))
    return {"share": share, "per_token": float(np.max(v["memory.kv_bytes_per_token"])),
            "hardware": engine.decode.hardware, "fields": link_fields(base), "key": engine.key}


def _hardware(engines, decode_engines) -> dict[str, str]:
    pre = next(iter(engines.values())).decode.hardware
    dec = next(iter((decode_engines or engines).values())).decode.hardware
    return {"prefill_hardware": pre, "decode_hardware": dec}


def _layout(policy: str, row: np.ndarray) -> dict[str, Any]:
    return {**{k: int(v) for k, v in zip(PARALLEL, row)}, "policy": policy}


def _points(evaluated, ok: str, size: str):
    """(policy, grid, g, pool, i, j) of every point that meets `ok`, once per layout i and
    value of `size` (the concurrency or the batch: several grid columns can share one)."""
    seen = set()
    for policy, grid, g, pool in evaluated:
        for i, j in zip(*np.nonzero(g[ok])):
            key = (policy, i, float(g[size][i, j]))
            if key not in seen:
                seen.add(key)
                yield policy, grid, g, pool, i, j


def _decode_rows(evaluated, d: Demand) -> list[dict[str, Any]]:
    out = []
    for policy, grid, g, pool, i, j in _points(evaluated, "ok", "C"):
        c, tpot, n = float(g["C"][i, j]), float(g["tpot"][i, j]), int(g["layout_gpus"][i, j])
        load = d.users if d.users is not None else (d.rps or 0.0) * (d.osl - 1) * tpot
        replicas = pool_replicas(load, c) if d.gpus is None else 1
        out.append({**_layout(policy, grid[i]), "concurrency_per_replica": int(c),
                    "batch_per_replica": int(g["B"][i, j]), "replicas": replicas,
                    "gpus": replicas * n, "tpot_s": tpot,
                    "tokens_per_s_per_gpu": c / tpot / n, "tokens_per_s_per_user": 1 / tpot,
                    "requests_per_s_per_replica": c / ((d.osl - 1) * tpot),
                    "pool": _facts(pool, i, n)})
    return out


def _facts(pool: Mapping[str, Any], i: int, gpus: int) -> Pool:
    return Pool(float(pool["share"][i]), gpus, pool["hardware"], pool["fields"])


def _prefill_rows(evaluated, d: Demand, decode: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The prefill pool's rows, TTFT = the prefill step + the move to `decode`'s layout."""
    out = []
    for policy, grid, g, pool, i, j in _points(evaluated, "ok_prefill", "B"):
        b, t_p, n = float(g["B"][i, j]), float(g["ttft"][i, j]), int(g["layout_gpus"][i, j])
        move = _move(d, pool, _facts(pool, i, n), decode["pool"])
        ttft = t_p + move["time_s"]
        arrival = arrival_rate(d, ttft, decode["tpot_s"]) if d.gpus is None else None
        replicas = pool_replicas(arrival, b / t_p) if d.gpus is None else 1
        out.append({**_layout(policy, grid[i]), "batch_per_replica": int(b),
                    "replicas": replicas, "gpus": replicas * n, "ttft_s": ttft,
                    "prefill_s": t_p, "kv_transfer": move, "arrival_rps": arrival,
                    "prompts_per_s_per_gpu": b / t_p / n,
                    "prompts_per_s_per_replica": b / t_p})
    return out


def _move(d: Demand, pool: Mapping[str, Any], pre: Pool, dec: Pool) -> dict[str, Any]:
    """The KV transfer of one request, as plain numbers."""
    t = transfer(d.isl, pool["per_token"], pre, dec, pool["key"])
    return {k: (v if isinstance(v, bool) else str(v) if k == "link" else float(v))
            for k, v in t.items()}


def _best(rows: list[dict[str, Any]], key: str, limit: float | None, flag: str,
          per_gpu: str) -> dict[str, Any]:
    """Fewest GPUs meeting the pool's latency limit (ties: more per GPU); else an error."""
    meeting = _meeting(rows, key, limit, flag)
    return min(meeting, key=lambda r: (r["gpus"], -r[per_gpu]))


def _meeting(rows: list[dict[str, Any]], key: str, limit: float | None, flag: str
             ) -> list[dict[str, Any]]:
    """The rows within the limit; an error naming it (and the best reached) when none is."""
    if not rows:
        raise fail(None, "no layout fits the model in memory within the GPU limit",
                   "raise --gpus-max, or use hardware with more memory")
    meeting = [r for r in rows if limit is None or r[key] <= limit]
    if not meeting:
        from infest.dsl.human import duration
        top = min(rows, key=lambda r: r[key])
        raise fail(None, f"no layout meets {flag} {duration(limit)}: the best is "
                   f"{duration(top[key])} ({describe(top)})", f"relax {flag}")
    return meeting


def public(pool_row: Mapping[str, Any]) -> dict[str, Any]:
    """A pool's row as JSON shows it (the transfer facts kept inside left out)."""
    return {k: v for k, v in pool_row.items() if k != "pool"}


def disaggregate_gpus(engines: Mapping[str, "Serving"], d: Demand, overrides: Mapping[str, Any],
                      decode_engines: Mapping[str, "Serving"] | None = None) -> dict[str, Any]:
    """The most requests/s G GPUs serve split into a prefill and a decode pool."""
    pools = evaluate_pools(engines, decode_engines or engines, d, overrides)
    decodes = _top(_meeting(_decode_rows(pools["decode"], d), "tpot_s", d.tpot_max,
                            "--tpot-max"), "tokens_per_s_per_gpu")
    _check_splits(len(decodes), d)
    best = None
    for dec in decodes:
        rows = [r for r in _prefill_rows(pools["prefill"], d, dec)
                if d.ttft_max is None or r["ttft_s"] <= d.ttft_max]
        for pre in _top(rows, "prompts_per_s_per_gpu"):
            split = _split(pre, dec, d)
            if split is not None and (best is None or (split["requests_per_s"], -split["gpus"])
                                      > (best["requests_per_s"], -best["gpus"])):
                best = split
    if best is None:
        raise fail(None, f"no prefill and decode layouts meet the limits together within "
                   f"--gpus {d.gpus}", "relax --ttft-max or --tpot-max, or more --gpus")
    return {**_hardware(engines, decode_engines), **best}


def _top(rows: list[dict[str, Any]], per_gpu: str) -> list[dict[str, Any]]:
    """Each layout's row with the most per GPU; the PAIR_LAYOUTS best of those."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[k] for k in ("policy", *PARALLEL))
        if key not in best or r[per_gpu] > best[key][per_gpu]:
            best[key] = r
    return sorted(best.values(), key=lambda r: -r[per_gpu])[:PAIR_LAYOUTS]


def _check_splits(decodes: int, d: Demand) -> None:
    """The split's points (pairs x prefill replica counts), bounded before the search."""
    points = decodes * PAIR_LAYOUTS * d.gpus
    if points > MAX_SPLITS:
        raise fail(None, f"--gpus {d.gpus:,} --disaggregate would try {points:,} splits, more "
                   f"than MAX_SPLITS = {MAX_SPLITS:,}", "fewer --gpus")


def _split(pre: Mapping[str, Any], dec: Mapping[str, Any], d: Demand) -> dict[str, Any] | None:
    """The best split of G GPUs between these two layouts (None: they do not fit)."""
    n_p, n_d = pre["gpus"], dec["gpus"]
    r_p = np.arange(1, (d.gpus - n_d) // n_p + 1) if d.gpus >= n_p + n_d else np.arange(0)
    if not len(r_p):
        return None
    r_d = (d.gpus - r_p * n_p) // n_d
    rate = np.minimum(r_p * pre["prompts_per_s_per_replica"], r_d * dec["requests_per_s_per_replica"])
    used = r_p * n_p + r_d * n_d
    k = int(np.lexsort((used, -rate))[0])
    rp, rd = int(r_p[k]), int(r_d[k])
    gpus = rp * n_p + rd * n_d
    tokens = float(rate[k]) * d.osl
    return {"prefill": {**public(pre), "replicas": rp, "gpus": rp * n_p},
            "decode": {**public(dec), "replicas": rd, "gpus": rd * n_d}, "gpus": gpus,
            "prefill_to_decode": rp * n_p / (rd * n_d), "requests_per_s": float(rate[k]),
            "tokens_per_s": tokens, "tokens_per_s_per_gpu": tokens / gpus,
            "kv_transfer": pre["kv_transfer"], "ttft_s": pre["ttft_s"], "tpot_s": dec["tpot_s"],
            "e2e_s": pre["ttft_s"] + (d.osl - 1) * dec["tpot_s"]}
