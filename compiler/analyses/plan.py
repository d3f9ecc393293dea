"""Capacity planning: the fewest GPUs (layout x replicas) that meet latency limits for a
demand, searched vectorised over layouts and concurrencies.

Candidates: every policy the spec declares; tp, pp, dp powers of two with
tp x pp x dp <= the GPU limit (LAYOUT_GPUS without --gpus-max); ep a power of two
dividing tp x dp, tried above 1 only when the forms depend on ep (a dense model does not);
slots B = b x dp with b = 1, 2, 4, .. MAX_PER_RANK sequences per data-parallel rank.
Layouts the model's constraints reject are skipped. With --users U, replicas =
ceil(U / B) and each replica carries the concurrency C = ceil(U / replicas) <= B, not B:
the candidate is evaluated at C (rounded up to a multiple of dp, the batch the busiest
data-parallel rank sets), so its numbers are those of the load it serves. With --rps R a
replica runs batches of B and replicas = ceil(R / (B / E2E)). Each point is served with
static batching exactly as `infest serve` computes it (compiler/analyses/serve.py: the same
contexts, the same forms): one evaluation per policy and phase over arrays shaped
(layouts, B, contexts), in blocks of layouts; gpus = replicas x the layout's GPUs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.serve import (Request, busiest_batch, check_context, check_request,
                                   decode_contexts)
from infest.compiler.core.keys import BUILTINS, PARALLEL
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner
    from infest.compiler.analyses.serve import Serving

LAYOUT_GPUS = 64          # GPUs in one replica's layout when --gpus-max is not given
MAX_PER_RANK = 1024       # sequences per data-parallel rank tried (powers of two)
MAX_GPUS = 2**20          # --gpus-max and any answer beyond it are refused
BLOCK_LAYOUTS = 8         # layouts evaluated per call (bounded numpy temporaries)


@dataclass(frozen=True)
class Demand:
    """What must be served and the limits (None: no limit)."""

    isl: int
    osl: int
    users: int | None = None
    rps: float | None = None
    tpot_max: float | None = None
    ttft_max: float | None = None
    gpus_max: int | None = None


def layouts(max_gpus: int, degrees: frozenset[str] = frozenset(PARALLEL)) -> np.ndarray:
    """(tp, ep, pp, dp) rows: powers of two, tp x pp x dp <= max_gpus, ep | tp x dp; a
    degree not in `degrees` stays 1 (other values would only repeat the same forms)."""
    pows = [2**k for k in range(int(math.log2(max_gpus)) + 1)]
    axis = {d: pows if d in degrees else [1] for d in PARALLEL}
    rows = [(tp, ep, pp, dp) for tp in axis["tp"] for pp in axis["pp"] for dp in axis["dp"]
            if tp * pp * dp <= max_gpus for ep in axis["ep"] if (tp * dp) % ep == 0]
    return np.asarray(rows, dtype=float)


def used_degrees(engine: "Serving") -> frozenset[str]:
    """The parallel degrees some form depends on (beyond echoing the layout itself)."""
    used = {r.names[i] for r in (engine.decode, engine.prefill)
            for key, uses in zip(r.keys, r.uses) if not key.startswith("parallel.") for i in uses}
    return frozenset(used & set(PARALLEL))


def carried(users: int | None, slots: np.ndarray) -> np.ndarray:
    """Requests one replica carries: with U users, replicas = ceil(U / slots) and each
    carries ceil(U / replicas) <= slots; with a request rate, a full batch of slots."""
    if users is None:
        return slots
    return np.ceil(users / np.ceil(users / slots))


def evaluate_grid(engine: "Serving", demand: Demand, overrides: Mapping[str, Any],
                  grid: np.ndarray) -> dict[str, np.ndarray]:
    """TTFT, TPOT (the engine's `use`: estimate or bound), B and C, layout gpus, ok (valid and the decode fits) and
    ok_prefill (valid and the prefill fits) for every layout row x B: shape (L, nb)."""
    per_rank = 2.0 ** np.arange(int(math.log2(MAX_PER_RANK)) + 1)
    base = [_base(a, overrides) for a in (engine.decode, engine.prefill)]
    parts = [_block(engine, demand, base, grid[i:i + BLOCK_LAYOUTS], per_rank)
             for i in range(0, len(grid), BLOCK_LAYOUTS)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _base(runner: "Runner", overrides: Mapping[str, Any]) -> dict[str, float]:
    """Every input at its value (resolved once: resolving walks every form)."""
    return {i.name: float(i.value) for i in runner.inputs(overrides)}


def _block(engine: "Serving", demand: Demand, base: list[dict[str, float]], rows: np.ndarray,
           per_rank: np.ndarray) -> dict[str, np.ndarray]:
    layout = {k: rows[:, i, None, None] for i, k in enumerate(PARALLEL)}
    C = carried(demand.users, per_rank[None, :, None] * layout["dp"])
    B = busiest_batch(C, layout["dp"])
    contexts = decode_contexts(demand.isl, demand.osl)
    N = np.append(contexts, demand.isl + demand.osl - 2)[None, None, :]  # last step: fits
    dec = _values(engine.decode, base[0], {**layout, "B": B, "N": N, "T": 1.0})
    pre = _values(engine.prefill, base[1], {**layout, "B": B, "N": float(demand.isl)})
    shape = (len(rows), len(per_rank))
    key = f"step.{engine.key}"
    time = np.broadcast_to(dec[key], shape + (len(contexts) + 1,))
    valid = dec["valid"][..., -1] & pre["valid"][..., 0]
    fits = np.broadcast_to(dec["memory.fits"], time.shape)[..., -1]
    fits_prefill = np.broadcast_to(pre["memory.fits"], shape + (1,))[..., 0]
    return {"tpot": time[..., :-1].mean(axis=-1), "ok_prefill": valid & fits_prefill,
            "ttft": np.broadcast_to(pre[key], shape + (1,))[..., 0],
            "B": np.broadcast_to(B[..., 0], shape), "C": np.broadcast_to(C[..., 0], shape),
            "ok": valid & fits,
            "layout_gpus": np.broadcast_to(dec["parallel.gpus"], time.shape)[..., 0]}


def _values(runner: "Runner", base: Mapping[str, float], point: Mapping[str, Any]) -> dict:
    """The forms over the grid, and where the model's constraints hold (and all finite)."""
    values = {**base, **point}
    out = runner.compiled(list(base))(values)
    shape = np.broadcast_shapes(*(np.shape(v) for v in point.values()))
    finite = np.isfinite(np.broadcast_to(out["step.estimate_s"], shape))
    return {**out, "valid": np.broadcast_to(runner.valid(values), shape) & finite}


def plan(engines: Mapping[str, "Serving"], demand: Demand, overrides: Mapping[str, Any]
         ) -> dict[str, Any]:
    """candidates (meeting limits and fitting, best first), best, pareto; an error naming
    the binding limit when none meets them."""
    check_demand(demand, overrides)
    for engine in engines.values():
        check_context(engine.decode, demand.isl, demand.osl, overrides)
    rows = [c for policy, grid, g in grids(engines, demand, overrides)
            for c in _candidates(policy, grid, g, demand)]
    meeting = [c for c in rows if _meets(c, demand)]
    if not meeting:
        raise no_answer(rows, demand)
    meeting.sort(key=lambda c: (c["gpus"], -c["tokens_per_s_per_gpu"]))
    return {"candidates": meeting, "best": meeting[0], "pareto": pareto(meeting)}


def grids(engines: Mapping[str, "Serving"], demand: Demand, overrides: Mapping[str, Any]
          ) -> list[tuple[str, np.ndarray, dict[str, np.ndarray]]]:
    """(policy, layout rows, evaluate_grid's arrays) for every policy."""
    out = []
    for policy, engine in engines.items():
        grid = layouts(demand.gpus_max or LAYOUT_GPUS, used_degrees(engine))
        out.append((policy, grid, evaluate_grid(engine, demand, overrides, grid)))
    return out


def _candidates(policy: str, grid: np.ndarray, g: Mapping[str, np.ndarray],
                demand: Demand) -> list[dict[str, Any]]:
    out, seen = [], set()
    for i, j in zip(*np.nonzero(g["ok"])):
        if (i, g["C"][i, j]) in seen:   # several slot counts carry the same load
            continue
        seen.add((i, g["C"][i, j]))
        out.append(_candidate(policy, grid[i], {k: float(v[i, j]) for k, v in g.items()}, demand))
    return out


def _candidate(policy: str, row: np.ndarray, g: Mapping[str, float],
               demand: Demand) -> dict[str, Any]:
    tp, ep, pp, dp = (int(x) for x in row)
    c, ttft, tpot, layout_gpus = int(g["C"]), g["ttft"], g["tpot"], int(g["layout_gpus"])
    e2e = ttft + (demand.osl - 1) * tpot
    replicas = _replicas(demand, c, e2e)
    return {"tp": tp, "ep": ep, "pp": pp, "dp": dp, "policy": policy,
            "concurrency_per_replica": c, "batch_per_replica": int(g["B"]),
            "replicas": replicas, "gpus": replicas * layout_gpus, "ttft_s": ttft,
            "tpot_s": tpot, "e2e_s": e2e,
            "tokens_per_s_per_gpu": c * demand.osl / e2e / layout_gpus,  # static: C x OSL per E2E
            "tokens_per_s_per_user": 1 / tpot}


def _replicas(demand: Demand, b: int, e2e: float) -> int:
    if demand.users is not None:
        return math.ceil(demand.users / b)
    return math.ceil(demand.rps / (b / e2e))   # a replica completes B requests per E2E


def _meets(c: Mapping[str, Any], d: Demand) -> bool:
    return ((d.tpot_max is None or c["tpot_s"] <= d.tpot_max)
            and (d.ttft_max is None or c["ttft_s"] <= d.ttft_max)
            and (d.gpus_max is None or c["gpus"] <= d.gpus_max))


def pareto(cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidates no other beats on both tokens/s per GPU and tokens/s per user."""
    ordered = sorted(cands, key=lambda c: (-c["tokens_per_s_per_user"], -c["tokens_per_s_per_gpu"]))
    front, best_gpu = [], -math.inf
    for c in ordered:  # by falling per-user rate: keep those that raise the per-GPU rate
        if c["tokens_per_s_per_gpu"] > best_gpu:
            front.append(c)
            best_gpu = c["tokens_per_s_per_gpu"]
    return front


def no_answer(rows: list[dict[str, Any]], d: Demand):
    """Which limit binds, and the best any fitting layout achieved on it."""
    from infest.dsl.human import duration
    if not rows:
        return fail(None, "no layout fits the model in memory within the GPU limit",
                    "raise --gpus-max, or use hardware with more memory")
    for flag, key, limit in (("--tpot-max", "tpot_s", d.tpot_max), ("--ttft-max", "ttft_s", d.ttft_max)):
        if limit is not None and all(c[key] > limit for c in rows):
            top = min(rows, key=lambda c: c[key])
            return fail(None, f"no layout meets {flag} {duration(limit)}: the best is "
                        f"{duration(top[key])} ({describe(top)})", f"relax {flag}")
    fewest = min(rows, key=lambda c: c["gpus"] if _meets({**c, "gpus": 0}, d) else math.inf)
    if d.gpus_max is not None and _meets({**fewest, "gpus": 0}, d):
        return fail(None, f"--gpus-max {d.gpus_max} binds: the fewest GPUs meeting the other "
                    f"limits is {fewest['gpus']} ({describe(fewest)})", "raise --gpus-max")
    return fail(None, "the limits hold one at a time but no layout meets them together",
                "relax --tpot-max or --ttft-max")


def describe(c: Mapping[str, Any]) -> str:
    return (f"tp={c['tp']} ep={c['ep']} pp={c['pp']} dp={c['dp']} policy {c['policy']}, "
            + (f"concurrency {c['concurrency_per_replica']} per replica"
               if "concurrency_per_replica" in c else f"batch {c['batch_per_replica']}"))


def check_demand(d: Demand, overrides: Mapping[str, Any]) -> None:
    check_request(Request(d.isl, d.osl, 1))
    for name in BUILTINS + PARALLEL:
        if name in overrides:
            raise fail(None, f"--set {name}: plan searches it")
    if (d.users is None) == (d.rps is None):
        raise fail(None, "give exactly one demand: --users U or --rps R")
    if d.users is not None and not 1 <= d.users <= MAX_GPUS * MAX_PER_RANK:
        raise fail(None, f"--users {d.users}: must be 1 .. {MAX_GPUS * MAX_PER_RANK:,}")
    if d.rps is not None and not 0 < d.rps < 1e12:
        raise fail(None, f"--rps {d.rps:g}: must be positive")
    if d.gpus_max is not None and not 1 <= d.gpus_max <= MAX_GPUS:
        raise fail(None, f"--gpus-max {d.gpus_max}: must be 1 .. {MAX_GPUS:,} (MAX_GPUS)")
    for flag, v in (("--tpot-max", d.tpot_max), ("--ttft-max", d.ttft_max)):
        if v is not None and not v > 0:
            raise fail(None, f"{flag}: must be a positive time")
