"""The cost of one continuous-batching step on a grid, for the request-level simulation.

A step (docs/serving.md) carries d decoding requests (t tokens each, at a mean cached
context N) and p prompt tokens (taken by the model as n = max(1, p / ISL) prompts of
min(p, ISL) tokens, on a mean cached prompt context M), costed as one forward exactly as
compiler/analyses/continuous.py costs a mixed step (`mixed_step`: FLOPs and activation
bytes add, the weights are read once, collectives carry every token). The costs come
from ONE vectorised evaluation of the compiled forms over the grid d x N x p x M; the
simulation then interpolates each step multilinearly: it never walks the ops.

Along N and M the step is linear (attention reads and FLOPs grow linearly with the cache),
so few points are exact; along d and p the cost is piecewise linear with kinks where an op
turns from memory- to compute-bound, so those axes take many points (every small count,
then geometric).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.continuous import Forms, arrival_inputs, hand_off, mixed_step
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner

COUNT_POINTS = 48          # points along the decoder and the prompt-token axes
CONTEXT_POINTS = 4         # points along the decode context (linear: exact)
CACHED_POINTS = 3          # points along the prompt's cached context (linear: exact)
MAX_GRID_POINTS = 400_000  # d x N x p x M: checked before the evaluation


def count_axis(top: float) -> np.ndarray:
    """0, 1, 2, .. 8 then geometric up to `top` (COUNT_POINTS values at most, unique)."""
    top = max(float(top), 1.0)
    small = np.arange(0.0, min(top, 8.0) + 1)
    rest = COUNT_POINTS - len(small)
    big = np.geomspace(min(top, 8.0), top, max(rest, 2)) if top > 8 else np.array([])
    return np.unique(np.concatenate([small, np.round(big), [top]]))


@dataclass(frozen=True)
class StepGrid:
    """Step costs in seconds on axes decoders x context x prompt tokens x cached."""

    decoders: np.ndarray
    contexts: np.ndarray
    prompt: np.ndarray
    cached: np.ndarray
    cost: np.ndarray
    request: float = 0.0    # what TTFT adds once per request (the estimate's overhead)
    poll: float = 1.0       # decode steps between the scheduler's looks for new requests

    def step(self, d: float, ctx: float, p: float, cached: float) -> float:
        """The interpolated cost of one step (scalar; clamped to the grid's range)."""
        corners = [_bracket(a, x) for a, x in zip(
            (self.decoders, self.contexts, self.prompt, self.cached), (d, ctx, p, cached))]
        total = 0.0
        for i, wi in corners[0]:
            for j, wj in corners[1]:
                for k, wk in corners[2]:
                    for m, wm in corners[3]:
                        total += wi * wj * wk * wm * self.cost[i, j, k, m]
        return total

    def pure(self, d: float, contexts: np.ndarray) -> np.ndarray:
        """Costs of decode-only steps of d requests at each mean context (vectorised)."""
        row = sum(w * self.cost[i, :, 0, 0] for i, w in _bracket(self.decoders, d))
        return np.interp(contexts, self.contexts, row)


def _bracket(axis: np.ndarray, x: float) -> list[tuple[int, float]]:
    """The two grid indices around x and their linear weights (one index at the ends)."""
    n = len(axis)
    if n == 1 or x <= axis[0]:
        return [(0, 1.0)]
    if x >= axis[-1]:
        return [(n - 1, 1.0)]
    i = bisect_right(axis, x) - 1   # axis is a sorted ndarray: bisect reads it directly
    lo, hi = axis[i], axis[i + 1]
    w = (x - lo) / (hi - lo)
    return [(i, 1.0 - w), (i + 1, w)]


def build_grid(forms: Forms, runner: "Runner", dp: float, isl: int, osl: int,
               tokens: float, max_decoders: float, budget: int, key: str,
               shortest: int | None = None) -> StepGrid:
    """The step costs (`key`: estimate_s or roofline_s) of one data-parallel rank for
    requests of ISL / OSL (the longest; `shortest`: the shortest ISL, where lengths
    vary), decoders adding `tokens` each, up to `max_decoders` of them and `budget`
    tokens per step: one evaluation of the forms over the whole grid."""
    low = isl if shortest is None else shortest
    axes = (count_axis(max_decoders), np.linspace(low, isl + osl, CONTEXT_POINTS),
            count_axis(budget), np.linspace(0.0, max(isl - 1, 0), CACHED_POINTS))
    size = int(np.prod([len(a) for a in axes]))
    if size > MAX_GRID_POINTS:
        raise fail(None, f"the simulation's step grid has {size:,} points, more than "
                   f"{MAX_GRID_POINTS:,} (MAX_GRID_POINTS)")
    d, n_ctx, p, m = np.meshgrid(*axes, indexing="ij", sparse=True)
    prompts = np.where(p > 0, np.maximum(1.0, p / isl), 0.0)   # no prompt tokens: no part
    parts = [{"B": d * dp, "T": tokens, "N": n_ctx},
             {"B": prompts * dp, "T": np.minimum(p, isl), "N": m},
             {"B": dp, "T": tokens * d + p, "N": 0.0}]
    values = [forms(_broadcast(x)) for x in parts]
    # With pp stages a micro-batch steps once per its pass plus one hand-off (continuous.py).
    cost = mixed_step(runner, values[:2], values[2])[key] + hand_off(runner, values[2])[key]
    cost = np.broadcast_to(cost, tuple(len(a) for a in axes)).copy()
    if not np.all(np.isfinite(cost)):
        raise fail(None, "the simulation's step cost is not finite somewhere on its grid",
                   "check the hardware's bandwidths and peaks (`infest eval`)")
    arrival = arrival_inputs(values[2], key)
    return StepGrid(*axes, cost, float(arrival["request"]), float(arrival["poll"]))


def _broadcast(point: Mapping[str, Any]) -> dict[str, np.ndarray]:
    shape = np.broadcast_shapes(*(np.shape(v) for v in point.values()))
    return {k: np.broadcast_to(np.asarray(v, dtype=float), shape) for k, v in point.items()}
