"""A serving benchmark's row costed as `infest serve` costs it, at any estimate parameters.

A measurement of TPOT or TTFT from a serving run (a closed loop of `concurrency` clients
sending prompts of `isl` tokens for `osl` output tokens, compiler/analyses/calibrate.py)
is compared with serve's continuous-batching TPOT or TTFT (compiler/analyses/continuous.py,
with the closed loop's queueing: compiler/analyses/arrivals.py) at the same request and
token budget, not with one decode or prefill step: at concurrency
C every request's prompt rides C - 1 other requests' decode steps, which a step time
leaves out (at 5,000-token prompts and 50 clients, more than half of the measured TPOT).

The continuous model's per-op pieces (`continuous.mixed_ops` for the mixed steps,
the forms' ops for the pure decode step, `continuous.hand_off_ops` for a pipeline's
hand-off) do not depend on the estimate's parameters, so each row's are evaluated once
(`served`) and re-costed with compiler/core/estimate_rule.py at any parameters in a few
numpy operations (`Served.estimate`): the same rule, the same schedule, the same latencies
as serve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from infest.compiler.analyses.arrivals import QUEUED_KEY, queued_latencies
from infest.compiler.analyses.continuous import (Budget, Decoding, chunk_mean,
                                                 clients_per_scheduler, hand_off_ops, mixed_ops,
                                                 point_forms, schedule, stacked_parts, step_parts)
from infest.compiler.analyses.startup import reported, wave_points, wave_position
from infest.compiler.core.estimate_rule import (ESTIMATE_OP_KEYS, NUMERIC, Kind, op_estimate,
                                                step_estimate)

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner

# The columns that make a row a serving run, and the quantities such a row may measure.
SERVING_COLUMNS = ("isl", "osl", "concurrency")
SERVED_QUANTITIES = ("tpot_s", "ttft_s")


@dataclass(frozen=True)
class StepPieces:
    """Every op of one step (the last axis), at the points of the axes before it: its
    count, its estimate's pieces (ESTIMATE_OP_KEYS), its kind and whether it is a
    collective of the step's own ops (1) that comm_overlap may hide (not a pipeline's
    extra hand-off, which serve adds beside the step: continuous.hand_off)."""

    count: np.ndarray
    ops: dict[str, np.ndarray]
    kind: Kind
    hideable: np.ndarray

    def cost(self, params: Mapping[str, Any]) -> np.ndarray:
        """Sum over ops of count x estimate, comm_overlap of the step's collectives' part
        hidden (compiler/core/estimate_rule.py step_estimate, as continuous.mixed_step
        does; params broadcast ahead of the pieces' axes)."""
        each = self.count * op_estimate(self.ops, params, self.kind, NUMERIC)
        return step_estimate(np.sum(each, axis=-1), np.sum(each * self.hideable, axis=-1),
                             params["comm_overlap"][..., 0], NUMERIC)


def stacked(items: Iterable[tuple[Any, Mapping[str, Any], Kind]], points: int,
            hand_offs: Iterable[tuple[Any, Mapping[str, Any], Kind]] = ()) -> StepPieces:
    """StepPieces from (count, pieces, kind) per op, then per pipeline hand-off, each
    broadcast to `points` points."""
    items, extra = list(items), list(hand_offs)
    hideable = np.array([k.collective for _, _, k in items] + [0] * len(extra), float)
    items += extra
    def column(values: list[Any]) -> np.ndarray:
        return np.stack([np.broadcast_to(np.asarray(v, float), (points,)) for v in values], axis=-1)
    kinds = [k for _, _, k in items]
    kind = Kind(*(np.array([getattr(k, f) for k in kinds], float)
                  for f in ("attention", "collective", "gemm")))
    ops = {k: column([v[k] for _, v, _ in items]) for k in ESTIMATE_OP_KEYS}
    return StepPieces(column([c for c, _, _ in items]), ops, kind, hideable)


@dataclass(frozen=True)
class Served:
    """A serving row's mixed steps (one per chunk point, weights `weights`) and pure decode
    step as pieces, with the schedule they were taken at; `quantity` is tpot_s or ttft_s."""

    mixed: StepPieces
    pure: StepPieces
    weights: np.ndarray
    schedule: dict[str, np.ndarray]
    budget: Budget
    decoding: Decoding
    quantity: str
    clients: float
    wave: StepPieces | None = None   # a benchmark's start-up wave step (prompts given)
    position: float = 0.0            # its prompts' mean wave step (startup.wave_position)
    share: float = 0.0               # its prompts' share of the benchmark's, C / P

    def estimate(self, values: Mapping[str, Any]) -> Any:
        """The row's TPOT or TTFT at these parameters (scalars or arrays that broadcast)."""
        col = {k: np.asarray(v, float)[..., None, None] for k, v in values.items()}
        overhead = col["step_overhead"][..., 0, 0]
        cost = {"mixed": chunk_mean(self.mixed.cost(col) + overhead[..., None], self.weights),
                "pure": self.pure.cost(col)[..., 0] + overhead,
                "request": col["request_overhead"][..., 0, 0],
                "poll": col["poll_interval"][..., 0, 0]}
        got = queued_latencies(self.clients, self.budget, self.decoding, self.schedule, cost,
                               QUEUED_KEY)
        if self.quantity != "ttft_s":
            return got["tpot"]
        if self.wave is None:
            return got["ttft"]
        wave = cost["request"] + self.position * (self.wave.cost(col)[..., 0] + overhead)
        return reported(got["ttft"], wave, self.share)


def served(decode: "Runner", point: Mapping[str, int], request: Mapping[str, int],
           quantity: str) -> Served:
    """A serving row's pieces: `decode` is the decode runner of its spec, hardware and
    engine, `point` its layout (tp, ep, pp, dp), `request` its isl, osl, concurrency and
    chunk (the token budget)."""
    layout = {k: point[k] for k in ("tp", "ep", "pp", "dp")}
    base = {i.name: float(i.value) for i in decode.inputs(layout, checked=False)}
    dp = float(layout["dp"])
    clients = clients_per_scheduler(math.ceil(request["concurrency"] / dp), layout["pp"])
    budget = Budget(request["isl"], request["osl"], request["chunk"])
    decoding = Decoding(1.0, request["osl"] - 1)
    sched = schedule(float(clients), budget, decoding)
    pieces, _, w = step_parts(point_forms(decode, base), float(clients), dp, budget, decoding, sched)
    points = int(np.shape(w)[-1])
    mixed = stacked(mixed_ops(decode, [pieces[0], pieces[2]], pieces[3]), points,
                    hand_off_ops(decode, pieces[3]))
    pure = stacked(_ops(decode, pieces[1]), 1, hand_off_ops(decode, pieces[1]))
    wave = {}
    if request.get("prompts"):
        part, tot = stacked_parts(point_forms(decode, base), wave_points(clients, dp, budget))
        wave = {"wave": stacked(mixed_ops(decode, [part], tot), 1, hand_off_ops(decode, tot)),
                "position": wave_position(clients, budget),
                "share": request["concurrency"] / request["prompts"]}
    return Served(mixed, pure, np.asarray(w, float), sched, budget, decoding, quantity,
                  float(clients), **wave)


def _ops(runner: "Runner", values: Mapping[str, Any]):
    """Each op's (count, pieces, kind) at one evaluated point of the forms."""
    for i, op in enumerate(runner.ops):
        yield (values[f"ops.{i}.count"], {k: values[f"ops.{i}.{k}"] for k in ESTIMATE_OP_KEYS},
               Kind.of(op.kind, op.collective))
