"""Continuous batching with a per-step token budget, closed loop (docs/serving.md).

The engine model (Sarathi-Serve; vLLM's `max_num_batched_tokens`): every step carries
the decode tokens of the d requests that are generating, plus up to K - d prompt tokens
(K = --chunk, the token budget), taken first come first served from as many pending
prompts as fit; a prompt longer than the room left is split into chunks over several
steps. The load is a closed loop: c clients per data-parallel rank, each sending its next
request the moment the last one ends (no think time). Per rank, in steady state, with
prompt I tokens, output O tokens and R = O - 1 decode steps per request (speculative
decoding: R = (O - 1) / tokens per round, each decoder adding t = draft_len + 1 tokens
to the budget; else t = 1):

- **Prompts alone** (their chunk steps never overlap): while one prompt is in prefill the
  other c - 1 requests decode, so its chunks are q = K - t (c - 1) tokens and it needs
  P = ceil(I / q) chunk steps. The other c - 1 prompts' P chunk steps each fall among a
  request's R decode steps; this regime holds while (c - 1) P <= R.
  TTFT = the P mixed steps (chunk j: min(q, I - j q) tokens on j q cached, riding on
  c - 1 decode tokens); the request's decode time = (c - 1) P mixed steps + the other
  R - (c - 1) P steps, pure decode steps of c requests.
- **Prompts shared** (otherwise every step carries prompt tokens): a request spends S_p
  steps from its arrival to its first token and R decoding, so per step r = c / (S_p + R)
  requests arrive, d = r R decode and p = r I prompt tokens ride. S_p is the least of:
  one step; the residence at which every step is full, S_full = c (I + t R) / K - R (a
  budget too small for the load lengthens TTFT here, it never fails: the loop is
  closed); and the steps the prompt's own tokens take at the room left, I / (K - t d).
  Every step then carries d decode tokens and p prompt tokens: n = max(1, p / I) prompts
  in chunks of s = min(p, I) tokens (chunk j on j s cached, the last ending at I: a
  prompt's tail shares its step with the next prompt's head). TTFT = S_p mean steps; the
  decode time = R mean steps.

TPOT = decode time / (O - 1) (means over requests; percentiles come with queueing). A
mixed step is one forward: per op, FLOPs, activation and KV bytes add, the weights are read
once (for experts: those all the step's tokens touch), collectives carry every token,
launches are the decode step's. The mean over a prompt's chunks takes every chunk up to
CHUNK_POINTS of them, else the midpoints of CHUNK_POINTS equal slices (as the decode
contexts). Decode tokens sit at the mean context I + (O - 2) / 2. Everything here is
numpy over broadcast arrays: `serve` evaluates one point, `plan` a grid of layouts x c.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from infest.compiler.core.estimate_rule import (ESTIMATE_OP_KEYS, ESTIMATE_PARAMS, NUMERIC,
                                                PART_KEYS, Kind, op_estimate, step_estimate)
from infest.compiler.core.terms import HARD_KEYS, TERM_KEYS, TIME_TERMS

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner

CHUNK_POINTS = 16      # chunk positions a prompt's mixed steps are averaged over
KEYS = ("estimate_s", "roofline_s")   # what each step cost is given as

Forms = Callable[[Mapping[str, Any]], Mapping[str, Any]]   # point (B, N, T) -> the forms


@dataclass(frozen=True)
class Decoding:
    """What a decoding request adds to a step: `tokens` to the budget (1, or draft_len + 1
    when speculating) and `steps`, the steps it decodes for (O - 1, or fewer rounds)."""

    tokens: float
    steps: float


@dataclass(frozen=True)
class Budget:
    """A request shape under continuous batching: prompt, output, token budget per step."""

    isl: int
    osl: int
    chunk: int


def schedule(c: Any, b: Budget, dec: Decoding) -> dict[str, np.ndarray]:
    """The steady state of c requests per rank (arrays broadcast with c): `alone`,
    `ttft_steps`, `mixed_decoders` (decode requests riding a mixed step), `mixed_steps`
    (mixed steps among a request's decode steps), `prompts` and `chunk` (prompt parts per
    mixed step and their chunk size), `chunks` (chunk steps per prompt part)."""
    c = np.asarray(c, dtype=float)
    t, R, I, K = dec.tokens, dec.steps, float(b.isl), float(b.chunk)
    q = K - t * (c - 1)
    P = np.ceil(I / np.maximum(q, 1.0))
    alone = (q >= 1) & ((c - 1) * P <= R)
    s_full = np.maximum(1.0, c * (I + t * R) / K - R)
    d_full = c * R / (s_full + R)
    s_p = np.maximum(s_full, I / (K - t * d_full))
    d, p = c * R / (s_p + R), c * I / (s_p + R)
    size = np.minimum(p, I)
    return {"alone": alone, "ttft_steps": np.where(alone, P, s_p),
            "mixed_decoders": np.where(alone, c - 1, d), "mixed_steps": np.where(alone, (c - 1) * P, R),
            "prompts": np.where(alone, 1.0, np.maximum(1.0, p / I)),
            "chunk": np.where(alone, np.minimum(q, I), size),
            "chunks": np.where(alone, P, np.ceil(I / size))}


def chunk_points(sched: Mapping[str, np.ndarray], isl: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens T_j, cached N_j, weight) of the chunks averaged, on a new last axis of
    CHUNK_POINTS, weight 0 past the prompt's chunks. Alone: chunk j of `chunk` tokens on
    j x chunk cached, the last one the rest of the prompt. Shared: every step is full, so
    each chunk has `chunk` tokens (a prompt's tail shares its step with the next one's
    head), the last placed to end at the prompt's end."""
    P = np.asarray(sched["chunks"], dtype=float)[..., None]
    points = int(min(CHUNK_POINTS, np.max(P)))    # no more than the longest prompt needs
    k = np.arange(points, dtype=float)
    j = np.where(P <= points, k, np.floor((2 * k + 1) * P / (2 * points)))
    weight = (k < P).astype(float)
    j = np.where(weight > 0, j, 0.0)
    s = np.asarray(sched["chunk"], dtype=float)[..., None]
    alone = np.asarray(sched["alone"])[..., None]
    tokens = np.where(alone, np.minimum(s, isl - j * s), s)
    cached = np.where(alone, j * s, np.minimum(j * s, isl - s))
    return tokens, cached, weight


def point_forms(runner: "Runner", base: Mapping[str, Any]) -> Forms:
    """The forms of `runner` at its inputs `base` plus a point, the inputs kept beside
    (no constraint check: a mixed step's parts take fractional batches)."""
    def forms(point: Mapping[str, Any]) -> dict[str, Any]:
        values = {**base, **point}
        return {**values, **runner(values)}
    return forms


def step_parts(forms: Forms, c: Any, dp: Any, b: Budget, dec: Decoding,
               sched: Mapping[str, np.ndarray]) -> tuple[list["_Part"], list[dict], np.ndarray]:
    """The forms at every part of a step (the decode part of a mixed step, the pure decode
    step, the prompt part, all the mixed step's tokens together), in one call, with the
    parts' points and the chunk points' weights (compiler/analyses/calibrate.py costs the
    same pieces at other parameters)."""
    mean_ctx = b.isl + (b.osl - 2) / 2
    t = dec.tokens
    T, N, w = chunk_points(sched, b.isl)
    n, d = sched["prompts"][..., None], sched["mixed_decoders"][..., None]
    dp = np.asarray(dp, dtype=float)[..., None]
    batch = np.asarray(c, dtype=float)[..., None] * dp
    # Along the last axis: one call of the forms (they are elementwise).
    parts = [{"B": d * dp, "T": t, "N": mean_ctx}, {"B": batch, "T": t, "N": mean_ctx},
             {"B": n * dp, "T": T, "N": N}, {"B": dp, "T": t * d + n * T, "N": 0.0}]
    parts[2:] = [{k: np.broadcast_to(v, w.shape) for k, v in x.items()} for x in parts[2:]]
    return _stacked(forms, parts), parts, w


def step_costs(forms: Forms, runner: "Runner", c: Any, dp: Any, b: Budget, dec: Decoding,
               sched: Mapping[str, np.ndarray], draft: Forms | None = None,
               draft_len: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """{key: {"mixed": mean mixed step, "pure": pure decode step}} for KEYS, shaped as c
    and dp broadcast (the forms get a last axis of chunk points). `draft`: the draft
    model's forms (speculative): its draft_len decode steps and its forward over the
    step's prompt tokens are added to each step."""
    pieces, parts, w = step_parts(forms, c, dp, b, dec, sched)
    d = sched["mixed_decoders"][..., None]
    mixed = mixed_step(runner, [pieces[0], pieces[2]], pieces[3])
    pure = pieces[1]
    if draft is not None:
        dparts = [{**parts[0], "T": 1.0}, {**parts[1], "T": 1.0}, parts[2]]
        drafted = _stacked(draft, dparts)
    hand = {"mixed": hand_off(runner, pieces[3]), "pure": hand_off(runner, pure)}
    out = {}
    for key in KEYS:
        m, u = mixed[key] + hand["mixed"][key], pure[f"step.{key}"] + hand["pure"][key]
        if draft is not None:
            step = [x[f"step.{key}"] for x in drafted]
            drafting = np.where(d > 0, step[0], 0.0)   # no decoders: no draft steps
            m, u = m + draft_len * drafting + step[2], u + draft_len * step[1]
        out[key] = {"mixed": chunk_mean(m, w), "pure": np.asarray(u)[..., 0],
                    **arrival_inputs(pieces[3], key)}
    return out


def chunk_mean(cost: Any, w: np.ndarray) -> np.ndarray:
    """The mean over a prompt's chunk points (the last axis, weights w) of a mixed step."""
    full = np.broadcast_to(cost, np.broadcast_shapes(np.shape(cost), w.shape))
    return np.sum(full * w, axis=-1) / np.sum(w, axis=-1)


def arrival_inputs(values: Mapping[str, Any], key: str) -> dict[str, Any]:
    """What a request meets on arriving, under a cost key: "request", the overhead TTFT
    adds once (request_overhead), and "poll", the decode steps between the scheduler's
    looks for new requests (poll_interval, compiler/analyses/arrivals.py). Inputs no form
    uses (compiler/core/estimate_rule.py ALWAYS_INPUTS); the bound has neither (0, 1)."""
    if key != "estimate_s":
        return {"request": 0.0, "poll": 1.0}
    return {"request": values.get("request_overhead", 0.0),
            "poll": values.get("poll_interval", 1.0)}


def stacked_parts(forms: Forms, points: list[Mapping[str, float]]) -> list["_Part"]:
    """The forms at scalar points (each a B, T, N), in one call: one part each."""
    return _stacked(forms, [{k: np.array([v], dtype=float) for k, v in x.items()} for x in points])


def _stacked(forms: Forms, parts: list[Mapping[str, Any]]) -> list["_Part"]:
    """The forms at every point of `parts` (each B, T, N broadcast to a common shape but
    the last axis), in one call, and a view of each part's slice of the last axis."""
    lead = np.broadcast_shapes(*(np.shape(v)[:-1] for x in parts for v in x.values()
                                 if np.ndim(v)))
    sizes = [max(np.shape(v)[-1] if np.ndim(v) else 1 for v in x.values()) for x in parts]
    point = {k: np.concatenate([np.broadcast_to(x[k], lead + (size,))
                                for x, size in zip(parts, sizes)], axis=-1)
             for k in ("B", "T", "N")}
    values = forms(point)
    full = lead + (sum(sizes),)
    edges = np.cumsum([0] + sizes)
    return [_Part(values, full, slice(a, b)) for a, b in zip(edges[:-1], edges[1:])]


class _Part(Mapping):
    """One part's slice of stacked form values (sliced when read: most keys never are)."""

    def __init__(self, values: Mapping[str, Any], full: tuple[int, ...], part: slice) -> None:
        self.values, self.full, self.part = values, full, part

    def __getitem__(self, key: str) -> Any:
        v = self.values[key]
        shape = getattr(v, "shape", ())
        if shape == self.full:             # depends on the point: the common case
            return v[..., self.part]
        if not shape or shape[-1] == 1:    # the same for every point: broadcasts as is
            return v
        return np.broadcast_to(v, np.broadcast_shapes(shape, self.full))[..., self.part]

    def __iter__(self):
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def clients_per_scheduler(clients: Any, pp: Any) -> np.ndarray:
    """The clients of one micro-batch: a data-parallel rank's clients over the pp
    micro-batches it keeps in flight (vLLM's virtual engines, TensorRT-LLM's pipeline
    micro-batches), the busiest one's: ceil(c / pp)."""
    return np.ceil(np.asarray(clients, dtype=float) / np.asarray(pp, dtype=float))


def hand_off(runner: "Runner", values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{key: one hand-off of the residual stream between two stages} (0 at pp = 1).

    With pp micro-batches in flight each stage works on one while the others work on the
    rest, so a micro-batch steps once per pp x (the slowest stage + its hand-off): with
    balanced stages that is the forms' step of one micro-batch (pp stages and pp - 1
    hand-offs, compiler/passes/parallel.py) plus one more hand-off. This is that one."""
    out = {key: np.asarray(0.0) for key in KEYS}
    params = {k: values[k] for k in ESTIMATE_PARAMS if k in values}
    for sent, v, kind in hand_off_ops(runner, values):
        out["roofline_s"] = out["roofline_s"] + sent * reduce(np.maximum, (v[k] for k in HARD_KEYS))
        out["estimate_s"] = out["estimate_s"] + sent * op_estimate(v, params, kind, NUMERIC)
    return out


def hand_off_ops(runner: "Runner", values: Mapping[str, Any]
                 ) -> Iterator[tuple[np.ndarray, dict[str, Any], Kind]]:
    """Each stage hand-off op's (1 where it sends, else 0; its pieces, ESTIMATE_OP_KEYS;
    its kind): what `hand_off` adds to a step."""
    for i, op in enumerate(runner.ops):
        if op.kind == "send_recv":
            sent = (np.asarray(values[f"ops.{i}.count"]) > 0).astype(float)
            yield sent, {k: values[f"ops.{i}.{k}"] for k in ESTIMATE_OP_KEYS}, Kind.of(op.kind, True)


def latencies(b: Budget, dec: Decoding, sched: Mapping[str, np.ndarray],
              cost: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) of one cost key: TTFT = ttft_steps mixed steps (plus, for the
    estimate, the per-request overhead `request`); TPOT = the request's decode time,
    mixed_steps mixed and the rest pure, over O - 1 tokens."""
    ttft = sched["ttft_steps"] * cost["mixed"] + cost["request"]
    mixed = sched["mixed_steps"]
    decode = mixed * cost["mixed"] + (dec.steps - mixed) * cost["pure"]
    return ttft, decode / (b.osl - 1)


# How each time term of a mixed step (parts: decode and prompt) combines per op, by name
# (the workbook's Plan sheet writes the same rules as formulas): "parts" add (FLOPs),
# "parts+weights" add and read the weights all the step's tokens touch once, "total" is
# the term at all the step's tokens (one collective call; the experts they all miss),
# "decode" the decode part's (the same kernels). The estimate's other pieces follow the
# same rules by key (ESTIMATE_RULES): the kernels are the decode part's; a GEMM's rows add
# over the parts (its M is the step's tokens; a last-token head's, the sequences the parts
# finish; an expert GEMM's rows per touched expert add, slightly more than at all the
# tokens together where few tokens touch many experts); a GEMM's columns are its own, and
# the experts touched (its GEMMs per launch), the busiest expert rank's load and a
# collective's latency are those of all the step's tokens.
MIXED_RULES = {"compute": "parts", "memory": "parts+weights", "comm": "total",
               "launch": "decode", "host": "total"}
ESTIMATE_RULES = {"kernels": "decode", "gemm_rows": "parts", "gemm_cols": "total",
                  "gemm_groups": "total", "gemm_load": "total",
                  "comm_latency_s": "total", "ring_steps": "total"}
_RULES = {
    "parts": lambda parts, tot, fix, k: sum(p[k] for p in parts),
    "parts+weights": lambda parts, tot, fix, k: sum(p[k] for p in parts) + fix,
    "total": lambda parts, tot, fix, k: tot[k],
    "decode": lambda parts, tot, fix, k: parts[0][k],
}
_MIXED = {**{t.key: _RULES[MIXED_RULES[t.name]] for t in TIME_TERMS},
          **{k: _RULES[rule] for k, rule in ESTIMATE_RULES.items()}}


def mixed_step(runner: "Runner", parts: list[Mapping[str, Any]], tot: Mapping[str, Any]
               ) -> dict[str, np.ndarray]:
    """{estimate_s, roofline_s} of one forward carrying the points `parts` (each the forms
    at some B, T, N); `tot` is the same layout at all their tokens with no cache (its
    weight bytes are what the step's tokens touch together, its collectives carry them
    all). Each op's estimate is compiler/core/estimate_rule.py's over its mixed pieces
    (its bound time_s the largest mixed term), as compiler/forms/estimate.py writes it;
    the step adds the per-step overhead once."""
    params = {k: tot[k] for k in ESTIMATE_PARAMS if k in tot}
    est, comm, roof = 0.0, 0.0, 0.0
    for count, v, kind in mixed_ops(runner, parts, tot):
        each = count * op_estimate(v, params, kind, NUMERIC)
        est, comm = est + each, comm + each * kind.collective
        roof = roof + count * reduce(np.maximum, (v[k] for k in HARD_KEYS))
    est = step_estimate(est, comm, tot.get("comm_overlap", 0.0), NUMERIC) + tot.get("step_overhead", 0.0)
    return {"estimate_s": np.asarray(est, float), "roofline_s": np.asarray(roof, float)}


def mixed_ops(runner: "Runner", parts: list[Mapping[str, Any]], tot: Mapping[str, Any]
              ) -> Iterator[tuple[Any, dict[str, Any], Kind]]:
    """Each op's (count, mixed pieces: ESTIMATE_OP_KEYS by MIXED_RULES and
    ESTIMATE_RULES, kind) in the forward `mixed_step` costs."""
    for i, op in enumerate(runner.ops):
        keyed = [_keyed(src, i) for src in parts]
        total = _keyed(tot, i)
        fix = (total["weight_bytes"] - sum(q["weight_bytes"] for q in keyed)) / tot["mem_bw"]
        v = {k: rule(keyed, total, fix, k) for k, rule in _MIXED.items()}
        v["time_s"] = reduce(np.maximum, (v[k] for k in TERM_KEYS))
        yield total["count"], v, Kind.of(op.kind, op.collective)


_OP_KEYS = ("count", "weight_bytes", "kernels", *TERM_KEYS, *PART_KEYS)


def _keyed(values: Mapping[str, Any], i: int) -> dict[str, Any]:
    return {k: values[f"ops.{i}.{k}"] for k in _OP_KEYS}
