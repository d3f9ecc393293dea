"""Capacity planning: the fewest GPUs (layout x replicas) that meet latency limits for a
demand, searched vectorised over layouts and concurrencies.

Candidates: every policy the spec declares; tp, pp, dp powers of two with
tp x pp x dp <= the GPU limit (LAYOUT_GPUS without --gpus-max); ep a power of two
dividing tp x dp, tried above 1 only when the forms depend on ep (a dense model does not);
slots B = b x dp with b = 1, 2, 4, .. MAX_PER_RANK sequences per data-parallel rank.
Layouts the model's constraints reject are skipped. With --users U, replicas =
ceil(U / B) and each replica carries the concurrency C = ceil(U / replicas) <= B, not B:
the candidate is evaluated at C (rounded up to a multiple of dp, the batch the busiest
data-parallel rank sets), so its numbers are those of the load it serves. (--rps: the
open loop, compiler/analyses/plan_open.py; --gpus: a GPU budget, plan_gpus.py; both on
this grid, dispatched by planner.py.) With pp > 1 each data-parallel rank keeps pp
micro-batches in flight (ceil(C / dp / pp) clients each; compiler/analyses/continuous.py).
Each point is served exactly as `infest serve`
computes it, with the demand's batching (continuous by default: compiler/analyses/
continuous.py, the same schedule and step costs; static: compiler/analyses/serve.py, the
same contexts): one evaluation per policy over arrays shaped (layouts, B, contexts or
chunk points), in blocks of layouts; gpus = replicas x the layout's GPUs. Only candidates
up to max(--gpus-max, LIST_FACTOR x the best's GPUs) are listed, and the Pareto front is
drawn from those.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.arrivals import queued_latencies
from infest.compiler.analyses.continuous import (Budget, Decoding, clients_per_scheduler,
                                                 point_forms, schedule, step_costs)
from infest.compiler.analyses.serve import (DEFAULT_BATCHING, DEFAULT_CHUNK, Request, busiest_batch,
                                            check_context, check_request, decode_contexts)
from infest.compiler.core.keys import BUILTINS, PARALLEL
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner
    from infest.compiler.analyses.serve import Serving

LAYOUT_GPUS = 64          # GPUs in one replica's layout when --gpus-max is not given
MAX_PER_RANK = 1024       # sequences per data-parallel rank tried (powers of two)
MAX_GPUS = 2**20          # --gpus-max and any answer beyond it are refused
BLOCK_LAYOUTS = 8         # layouts evaluated per call (bounded numpy temporaries)
LIST_FACTOR = 4           # candidates listed: up to this many times the best's GPUs
SLO_PERCENTILES = (None, 90, 99)   # what limits compare with: the mean, p90 or p99


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
    batching: str = DEFAULT_BATCHING
    chunk: int = DEFAULT_CHUNK
    gpus: int | None = None              # a GPU budget (compiler/analyses/plan_gpus.py)
    slo_percentile: int | None = None    # None: limits compare with means; 90 or 99

    @property
    def layout_gpus(self) -> int:
        """The most GPUs one replica's layout may take: --gpus, --gpus-max or LAYOUT_GPUS."""
        return self.gpus or self.gpus_max or LAYOUT_GPUS


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
    base = [base_inputs(a, overrides) for a in (engine.decode, engine.prefill)]
    parts = [_block(engine, demand, base, grid[i:i + BLOCK_LAYOUTS], per_rank)
             for i in range(0, len(grid), BLOCK_LAYOUTS)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def base_inputs(runner: "Runner", overrides: Mapping[str, Any]) -> dict[str, float]:
    """Every input at its value (resolved once: resolving walks every form); the model's
    constraints are checked at each grid point, not at the default B and N."""
    return {i.name: float(i.value) for i in runner.inputs(overrides, checked=False)}


def _block(engine: "Serving", demand: Demand, base: list[dict[str, float]], rows: np.ndarray,
           per_rank: np.ndarray) -> dict[str, np.ndarray]:
    layout = {k: rows[:, i, None, None] for i, k in enumerate(PARALLEL)}
    C = carried(demand.users, per_rank[None, :, None] * layout["dp"])
    B = busiest_batch(C, layout["dp"])
    shape = (len(rows), len(per_rank))
    last = values_at(engine.decode, base[0], {**layout, "B": B, "N": float(
        demand.isl + demand.osl - 2), "T": 1.0})              # the last decode step: fits
    valid = np.broadcast_to(last["valid"], shape + (1,))[..., 0]
    fits = np.broadcast_to(last["memory.fits"], shape + (1,))[..., 0].astype(bool)
    if demand.batching == "static":
        pre = values_at(engine.prefill, base[1], {**layout, "B": B, "N": float(demand.isl)})
        fits_prefill = np.broadcast_to(pre["memory.fits"], shape + (1,))[..., 0].astype(bool)
        valid = valid & np.broadcast_to(pre["valid"], shape + (1,))[..., 0]
        ttft, tpot = _static_times(engine, demand, base[0], layout, B, pre, shape)
    else:   # no prefill phase of its own: the decode forms carry the prompt chunks
        fits_prefill = fits
        ttft, tpot = _continuous_times(engine, demand, base[0], layout, B[..., 0], shape)
    finite = np.isfinite(ttft) & np.isfinite(tpot)
    return {"tpot": tpot, "ttft": ttft, "ok": valid & fits & finite,
            "ok_prefill": valid & fits_prefill & finite,
            "B": np.broadcast_to(B[..., 0], shape), "C": np.broadcast_to(C[..., 0], shape),
            "layout_gpus": np.broadcast_to(last["parallel.gpus"], shape + (1,))[..., 0]}


def _static_times(engine: "Serving", demand: Demand, base: Mapping[str, float],
                  layout: Mapping[str, np.ndarray], B: np.ndarray, pre: Mapping[str, Any],
                  shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Static batching: TTFT the prefill step at B, TPOT the mean decode step at B."""
    contexts = decode_contexts(demand.isl, demand.osl)[None, None, :]
    dec = values_at(engine.decode, base, {**layout, "B": B, "N": contexts, "T": 1.0})
    key = f"step.{engine.key}"
    tpot = np.broadcast_to(dec[key], shape + (contexts.shape[-1],)).mean(axis=-1)
    return np.broadcast_to(pre[key], shape + (1,))[..., 0], tpot


def _continuous_times(engine: "Serving", demand: Demand, base: Mapping[str, float],
                      layout: Mapping[str, np.ndarray], B: np.ndarray,
                      shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Continuous batching: serve's schedule, step costs and queueing at every layout x batch
    (B / dp clients on the busiest rank, ceil(B / dp / pp) in each of its pp micro-batches;
    the chunk points on the last axis)."""
    budget, dec = Budget(demand.isl, demand.osl, demand.chunk), Decoding(1.0, demand.osl - 1)
    dp = layout["dp"][..., 0]
    c = clients_per_scheduler(B / dp, layout["pp"][..., 0])
    sched = schedule(c, budget, dec)
    forms = point_forms(engine.decode.compiled(list(base)), {**base, **layout, "T": 1.0})
    costs = step_costs(forms, engine.decode, c, dp, budget, dec, sched)
    got = queued_latencies(c, budget, dec, sched, costs[engine.key], engine.key)
    return np.broadcast_to(got["ttft"], shape), np.broadcast_to(got["tpot"], shape)


def values_at(runner: "Runner", base: Mapping[str, float], point: Mapping[str, Any]) -> dict:
    """The forms over the grid, and where the model's constraints hold (and all finite)."""
    values = {**base, **point}
    out = runner.compiled(list(base))(values)
    shape = np.broadcast_shapes(*(np.shape(v) for v in point.values()))
    finite = np.isfinite(np.broadcast_to(out["step.estimate_s"], shape))
    return {**out, "valid": np.broadcast_to(runner.valid(values), shape) & finite}


def plan(engines: Mapping[str, "Serving"], demand: Demand, overrides: Mapping[str, Any]
         ) -> dict[str, Any]:
    """request (what was asked), batching, candidates (meeting the limits and fitting, best
    first, up to max(--gpus-max, LIST_FACTOR x the best's GPUs)), best, pareto (the front
    of those candidates), best_dominated_by (a front point beating the best on both rates,
    or None); an error naming the binding limit when none meets them."""
    check_demand(demand, overrides)
    if demand.users is None:
        raise fail(None, "plan() sizes for --users; compiler/analyses/planner.py answers "
                   "--rps (plan_open.py) and --gpus (plan_gpus.py)")
    meeting = meeting_candidates(engines, demand, overrides)
    meeting.sort(key=lambda c: (c["gpus"], -c["tokens_per_s_per_gpu"]))
    best = meeting[0]
    shown = [c for c in meeting if c["gpus"] <= max(demand.gpus_max or 0, LIST_FACTOR * best["gpus"])]
    front = pareto(shown)
    return {"request": request_of(engines, demand), "batching": demand.batching,
            "candidates": shown, "best": best, "pareto": front,
            "best_dominated_by": dominated_by(best, front)}


def request_of(engines: Mapping[str, "Serving"], d: Demand) -> dict[str, Any]:
    """What the plan answered, in base units (limits in seconds; None: no limit). Limits
    compare with means (slo_percentile None) or that percentile."""
    first = next(iter(engines.values()))
    demand = ({"users": d.users} if d.users is not None else
              {"gpus": d.gpus} if d.gpus is not None else {"rps": d.rps})
    return {"model": first.decode.model, "hardware": first.decode.hardware, "isl": d.isl,
            "osl": d.osl, **demand, "tpot_max_s": d.tpot_max, "ttft_max_s": d.ttft_max,
            "slo_percentile": d.slo_percentile, "gpus_max": d.gpus_max, "batching": d.batching,
            "chunk": d.chunk if d.batching == "continuous" else None,
            "engine": first.decode.engine, "use": first.use, "policies": list(engines)}


def dominated_by(best: Mapping[str, Any], front: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A front point at least as good as `best` on both rates and better on one, or None
    when the best is on the front."""
    for c in front:
        ge = (c["tokens_per_s_per_gpu"] >= best["tokens_per_s_per_gpu"]
              and c["tokens_per_s_per_user"] >= best["tokens_per_s_per_user"])
        if ge and (c["tokens_per_s_per_gpu"], c["tokens_per_s_per_user"]) != (
                best["tokens_per_s_per_gpu"], best["tokens_per_s_per_user"]):
            return c
    return None


def grids(engines: Mapping[str, "Serving"], demand: Demand, overrides: Mapping[str, Any]
          ) -> list[tuple[str, np.ndarray, dict[str, np.ndarray]]]:
    """(policy, layout rows, evaluate_grid's arrays) for every policy."""
    out = []
    for policy, engine in engines.items():
        grid = layouts(demand.layout_gpus, used_degrees(engine))
        out.append((policy, grid, evaluate_grid(engine, demand, overrides, grid)))
    return out


def candidates(policy: str, grid: np.ndarray, g: Mapping[str, np.ndarray],
               demand: Demand) -> list[dict[str, Any]]:
    """One candidate per layout and carried load that fits (one replica with --gpus)."""
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
    if demand.gpus is not None:   # plan_gpus sets the replicas from the budget
        return 1
    raise fail(None, "plan --rps is the open loop (compiler/analyses/plan_open.py)")


def meets(c: Mapping[str, Any], d: Demand) -> bool:
    """The candidate's means are within the limits and its GPUs within --gpus-max."""
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
    fewest = min(rows, key=lambda c: c["gpus"] if meets({**c, "gpus": 0}, d) else math.inf)
    if d.gpus_max is not None and meets({**fewest, "gpus": 0}, d):
        return fail(None, f"--gpus-max {d.gpus_max} binds: the fewest GPUs meeting the other "
                    f"limits is {fewest['gpus']} ({describe(fewest)})", "raise --gpus-max")
    return fail(None, "the limits hold one at a time but no layout meets them together",
                "relax --tpot-max or --ttft-max")


def describe(c: Mapping[str, Any]) -> str:
    return (f"tp={c['tp']} ep={c['ep']} pp={c['pp']} dp={c['dp']} policy {c['policy']}, "
            + (f"concurrency {c['concurrency_per_replica']} per replica"
               if "concurrency_per_replica" in c else f"batch {c['batch_per_replica']}"))


def meeting_candidates(engines: Mapping[str, "Serving"], demand: Demand,
                       overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every candidate (policy x layout x concurrency) that meets the limits; an error
    naming the binding limit when none does. Shared by the demand and budget searches."""
    for engine in engines.values():
        check_context(engine.decode, demand.isl, demand.osl, overrides)
    rows = [c for policy, grid, g in grids(engines, demand, overrides)
            for c in candidates(policy, grid, g, demand)]
    meeting = [c for c in rows if meets(c, demand)]
    if not meeting:
        raise no_answer(rows, demand)
    return meeting


def check_demand(d: Demand, overrides: Mapping[str, Any]) -> None:
    """Bad demands are one-line errors, before any evaluation."""
    check_request(Request(d.isl, d.osl, 1, d.batching, d.chunk))
    for name in BUILTINS + PARALLEL:
        if name in overrides:
            raise fail(None, f"--set {name}: plan searches it")
    if sum(x is not None for x in (d.users, d.rps, d.gpus)) != 1:
        raise fail(None, "give exactly one demand: --users U, --rps R or --gpus G")
    if d.gpus is not None and d.gpus_max is not None:
        raise fail(None, "--gpus G is the budget: --gpus-max would be a second one",
                   "drop --gpus-max")
    if d.gpus is not None and not 1 <= d.gpus <= MAX_GPUS:
        raise fail(None, f"--gpus {d.gpus}: must be 1 .. {MAX_GPUS:,} (MAX_GPUS)")
    if d.slo_percentile not in SLO_PERCENTILES:
        raise fail(None, f"--slo-percentile {d.slo_percentile}: use 90 or 99")
    if d.users is not None and not 1 <= d.users <= MAX_GPUS * MAX_PER_RANK:
        raise fail(None, f"--users {d.users}: must be 1 .. {MAX_GPUS * MAX_PER_RANK:,}")
    if d.rps is not None and not 0 < d.rps < 1e12:
        raise fail(None, f"--rps {d.rps:g}: must be positive")
    if d.gpus_max is not None and not 1 <= d.gpus_max <= MAX_GPUS:
        raise fail(None, f"--gpus-max {d.gpus_max}: must be 1 .. {MAX_GPUS:,} (MAX_GPUS)")
    for flag, v in (("--tpot-max", d.tpot_max), ("--ttft-max", d.ttft_max)):
        if v is not None and not v > 0:
            raise fail(None, f"{flag}: must be a positive time")
