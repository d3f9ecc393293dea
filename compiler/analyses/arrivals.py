"""What a prompt waits for when it arrives at a busy engine, in the open and the closed loop.

The continuous-batching schedule (compiler/analyses/continuous.py) gives a prompt its own
chunk steps as if it arrived just as the step before them ended and no other prompt were
in the way. An arrival at a busy rank waits three more times (docs/serving.md):

- `residual`: for the scheduler's next look for new requests. The mean residual of a
  renewal process is E_time[cycle] / 2 (the inspection paradox; Kleinrock, Queueing
  Systems I, 5.2). The scheduler looks after every step that carried prompt tokens (t_m
  each, a fraction `busy` = lambda x P x t_m of the time with prompts alone; every step
  when they are shared) and, in pure decode, every k = poll_interval steps (a cycle of
  k t_u: SGLang's --scheduler-recv-interval k; k = 1, every step, elsewhere), so the
  residual is (busy t_m + (1 - busy) k t_u) / 2;
- `wait`: for the prompt tokens ahead of it. The token budget is a server (M/D/1, fixed
  shapes): a prompt needs s = ISL / (K - t D) of a full step (D decoders riding, a full
  step costing t_u + (K - t D) x delta, delta the cost of one prompt token: (t_m - t_u) /
  the prompt tokens of the mean mixed step, ISL / P when alone), utilisation
  rho_b = lambda s, and waits (Pollaczek-Khinchine) W = rho_b s / (2 (1 - rho_b));
- `share`: the prompts arriving during the step in progress after it (lambda x residual
  of them) join its step while the budget has room: each adds its tokens x delta.

The open loop (compiler/analyses/openloop.py) takes lambda as the Poisson rate of
arrivals; an arrival finds a request in flight (so a step in progress, and no look at
once) with chance 1 - exp(-lambda E2E), the number in flight being Poisson with mean
lambda E2E (continuous batching serves them all at once, an M/G/infinity system; PASTA),
and an idle scheduler looks for it at once: the residual is that chance times the one
above. The closed loop of c clients per rank takes lambda = (c - 1) / E2E, the other
clients' requests per second (E2E before these terms, so no fixed point: the workbook
writes it without iteration), and two limits of a finite population: at c = 1 nothing is
running when a request arrives (no residual), and at most the other c - 1 prompts are
ahead of it (W <= (c - 1) s, which also holds where rho_b reaches 1). These are means of
an estimate; the hard bound keeps the bare schedule (an engine that preempted its step
for the new prompt would wait less).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from infest.compiler.analyses.continuous import KEYS, Budget, Decoding, latencies

QUEUE_KEYS = ("residual", "wait", "share")   # the terms TTFT adds, in order
QUEUED_KEY = KEYS[0]                         # estimate_s: the bound is not queued


def queueing(rate: Any, closed: Mapping[str, Any], b: Budget, dec: Decoding) -> dict[str, Any]:
    """The open loop's TTFT terms at arrivals `rate` per second on `closed` (the closed
    loop's {sched, mixed, pure, poll, ttft, tpot}): residual, wait, share, rho_b, ttft and
    running, the chance an arrival finds a request in flight (arrays broadcast with rate;
    wait is inf where rho_b >= 1)."""
    lam = np.asarray(rate, dtype=float)
    running = 1.0 - np.exp(-lam * (closed["ttft"] + (b.osl - 1) * closed["tpot"]))
    return {**_terms(lam, running * _residual(lam, closed), closed, b, dec, None),
            "running": running}


def closed_loop(c: Any, closed: Mapping[str, Any], b: Budget, dec: Decoding) -> dict[str, Any]:
    """The closed loop's TTFT terms for c clients per rank on `closed` ({sched, mixed,
    pure, poll, ttft, tpot}): lambda = (c - 1) / E2E, no residual at c = 1, W <= (c - 1) s;
    with `rate`, lambda."""
    others = np.maximum(np.asarray(c, dtype=float) - 1.0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = others / (closed["ttft"] + (b.osl - 1) * closed["tpot"])
    residual = np.minimum(others, 1.0) * _residual(lam, closed)
    return {**_terms(lam, residual, closed, b, dec, others), "rate": lam}


def _terms(lam: Any, residual: Any, closed: Mapping[str, Any], b: Budget, dec: Decoding,
           ahead: Any) -> dict[str, Any]:
    """residual, the M/D/1 wait (at most `ahead` prompts' service when given), share,
    rho_b and the TTFT with all three."""
    s, delta, room = _prompt_service(closed, b, dec)
    rho_b = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(rho_b < 1, rho_b * s / (2 * (1 - rho_b)), np.inf)
    if ahead is not None:
        wait = np.minimum(wait, ahead * s)
    share = _share(lam, residual, closed, b, delta, room)
    return {"residual": residual, "wait": wait, "share": share, "rho_b": rho_b,
            "ttft": closed["ttft"] + residual + wait + share}


def _residual(lam: Any, closed: Mapping[str, Any]) -> Any:
    """E_time[cycle] / 2 to the scheduler's next look: a mixed step a fraction `busy` of
    the time, else `poll` pure decode steps."""
    sched, t_m, t_u = closed["sched"], closed["mixed"], closed["pure"]
    busy = np.where(sched["alone"], np.minimum(1.0, lam * sched["ttft_steps"] * t_m), 1.0)
    return (busy * t_m + (1 - busy) * closed["poll"] * t_u) / 2


def _prompt_service(closed: Mapping[str, Any], b: Budget, dec: Decoding):
    """(s, delta, room): a prompt's share of the budget server in seconds, one prompt
    token's cost and the budget left beside the decoders."""
    sched, t_m, t_u = closed["sched"], closed["mixed"], closed["pure"]
    delta = (t_m - t_u) / _mean_prompt_tokens(sched, b)
    room = b.chunk - dec.tokens * sched["mixed_decoders"]
    return b.isl / np.maximum(room, 1e-9) * t_u + b.isl * delta, delta, room


def _mean_prompt_tokens(sched: Mapping[str, Any], b: Budget) -> Any:
    """Prompt tokens of the mean mixed step t_m: alone, a prompt's I tokens over its P
    chunk steps (a short last chunk included); shared, the n parts of s tokens each."""
    return np.where(sched["alone"], b.isl / sched["chunks"], sched["prompts"] * sched["chunk"])


def _share(lam: Any, residual: Any, closed: Mapping[str, Any], b: Budget, delta: Any,
           room: Any) -> Any:
    """The tokens of prompts arriving during the step in progress that join its step."""
    left = np.maximum(room - closed["sched"]["prompts"] * closed["sched"]["chunk"], 0.0)
    return np.minimum(lam * residual * b.isl, left) * delta


def queued_latencies(c: Any, b: Budget, dec: Decoding, sched: Mapping[str, Any],
                     cost: Mapping[str, Any], key: str) -> dict[str, Any]:
    """(continuous.py `latencies`) TTFT and TPOT of c clients per rank at one cost key,
    the estimate's TTFT with the closed loop's terms added (QUEUED_KEY only: the bound
    keeps the bare schedule): {ttft, tpot} and, queued, the terms, rho_b, rate and poll."""
    ttft, tpot = latencies(b, dec, sched, cost)
    if key != QUEUED_KEY:
        return {"ttft": ttft, "tpot": tpot}
    closed = {"sched": sched, "mixed": cost["mixed"], "pure": cost["pure"],
              "poll": cost["poll"], "ttft": ttft, "tpot": tpot}
    return {**closed_loop(c, closed, b, dec), "tpot": tpot, "poll": cost["poll"]}
