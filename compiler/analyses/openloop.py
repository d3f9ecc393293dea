"""Open loop: Poisson arrivals at a rate, queueing on top of the continuous-batching model.

Per data-parallel rank, requests arrive at lambda = R / dp (Poisson). By Little's law the
mean number in the system is C = lambda x E2E, and a Poisson arrival finds C others there
(PASTA: Poisson arrivals see time averages). So an arriving request runs in the closed-loop
schedule of compiler/analyses/continuous.py at c' = 1 + C clients (itself and the others),
capped by the running limit (KV capacity at ISL + OSL, or --max-concurrency): C solves the
fixed point C = lambda x E2E(1 + C), by bisection. TPOT is the closed loop's at c'.

TTFT adds to the closed loop's (the prompt's own chunk steps, t_m each) three terms:

- the step in progress: an arrival waits for it to end. Mean residual of a renewal process
  = E_time[step] / 2 (the inspection paradox; Kleinrock, Queueing Systems I, 5.2), the
  steps being mixed (t_m) a fraction lambda x P x t_m of the time, else pure decode (t_u);
- the prompt tokens ahead of it: the token budget as a server (M/D/1, fixed shapes). A
  prompt needs s = ISL / (K - t D) of a full step (D decoders riding, a full step costing
  t_u + (K - t D) x delta, delta the cost of one prompt token: (t_m - t_u) / the prompt
  tokens of a mixed step), utilisation rho_b = lambda s, and waits (Pollaczek-Khinchine)
  W = lambda E[s^2] / (2 (1 - rho_b)) = rho_b s / (2 (1 - rho_b));
- the prompts arriving during the step in progress after it (lambda x residual of them)
  join its step while the budget has room: each adds its tokens x delta.

Utilisation rho = lambda / mu_max, mu_max = cap / E2E(cap), the closed loop's throughput
at the cap (the most the rank completes). At rho >= 1 or rho_b >= 1 the queue grows
without bound: `saturated`, and no finite time is given.

Percentiles: TTFT's from the wait's tail taken as M/M/1-shaped with the P-K mean,
P(W > t) = rho_b exp(-rho_b t / W) (Kingman's heavy-traffic exponential approximation);
TPOT's are null (the model gives only its mean; `--simulate` gives them).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from infest.compiler.analyses.continuous import Budget, Decoding

BISECTION_STEPS = 50        # halvings of [0, cap - 1] for the fixed point C
PERCENTILES = (0.90, 0.99)

# c -> {"sched": schedule(c), "mixed": t_m, "pure": t_u, "ttft": .., "tpot": ..} (arrays)
Closed = Callable[[np.ndarray], Mapping[str, Any]]


def queueing(rate: Any, closed: Mapping[str, Any], b: Budget, dec: Decoding) -> dict[str, Any]:
    """The open-loop TTFT terms at `closed` (the closed loop at c' = 1 + C): residual,
    wait, share, rho_b, ttft (all arrays broadcast with rate)."""
    lam = np.asarray(rate, dtype=float)
    sched, t_m, t_u = closed["sched"], closed["mixed"], closed["pure"]
    steps = sched["ttft_steps"]
    busy = np.where(sched["alone"], np.minimum(1.0, lam * steps * t_m), 1.0)
    residual = (busy * t_m + (1 - busy) * t_u) / 2
    prompt_tokens = sched["prompts"] * sched["chunk"]
    delta = (t_m - t_u) / prompt_tokens
    room = b.chunk - dec.tokens * sched["mixed_decoders"]
    s = b.isl / np.maximum(room, 1e-9) * t_u + b.isl * delta
    rho_b = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(rho_b < 1, rho_b * s / (2 * (1 - rho_b)), np.inf)
    left = np.maximum(room - prompt_tokens, 0.0)      # budget left in its last step
    share = np.minimum(lam * residual * b.isl, left) * delta
    return {"residual": residual, "wait": wait, "share": share, "rho_b": rho_b,
            "ttft": closed["ttft"] + residual + wait + share}


def solve(rate: float, cap: float, closed: Closed, b: Budget, dec: Decoding) -> dict[str, Any]:
    """The open-loop answer at `rate` per rank: saturated, utilisation, concurrency C,
    ttft, tpot, the queueing terms and the TTFT percentiles (None when saturated)."""
    top = closed(np.asarray(float(cap)))
    mu_max = cap / (top["ttft"] + (b.osl - 1) * top["tpot"])
    rho = float(rate / mu_max)
    out = {"utilisation": rho, "max_rate": float(mu_max)}
    if rho >= 1:
        return {**out, "saturated": True}
    lo, hi = 0.0, max(cap - 1.0, 0.0)
    for _ in range(BISECTION_STEPS):          # g(C) = lambda E2E(1 + C) - C falls through 0
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _excess(rate, mid, cap, closed, b, dec) > 0 else (lo, mid)
    c = (lo + hi) / 2
    at = closed(np.asarray(min(1.0 + c, cap)))
    q = queueing(rate, at, b, dec)
    if not q["rho_b"] < 1:
        return {**out, "saturated": True}
    return {**out, "saturated": False, "concurrency": float(rate * _e2e(q["ttft"], at, b)),
            "ttft": float(q["ttft"]), "tpot": float(at["tpot"]), "closed": at,
            **{k: float(q[k]) for k in ("residual", "wait", "share", "rho_b")},
            **ttft_percentiles(q, at)}


def _e2e(ttft: Any, closed: Mapping[str, Any], b: Budget) -> Any:
    return ttft + (b.osl - 1) * closed["tpot"]


def _excess(rate: float, c: float, cap: float, closed: Closed, b: Budget, dec: Decoding) -> float:
    at = closed(np.asarray(min(1.0 + c, cap)))
    return float(rate * _e2e(queueing(rate, at, b, dec)["ttft"], at, b) - c)


def ttft_percentiles(q: Mapping[str, Any], closed: Mapping[str, Any]) -> dict[str, float]:
    """ttft_p90_s, ttft_p99_s: the mean with its residual and wait replaced by their
    quantiles added (an estimate). The wait: P(W > t) = rho_b exp(-rho_b t / W), 0 below
    the chance 1 - rho_b of not waiting; the residual: uniform over the step in progress,
    mixed a fraction `busy` of the time (recovered from the mean residual)."""
    ttft, wait, rho_b = (float(q[k]) for k in ("ttft", "wait", "rho_b"))
    t_m, t_u, residual = float(closed["mixed"]), float(closed["pure"]), float(q["residual"])
    busy = (2 * residual - t_u) / (t_m - t_u) if t_m > t_u else 0.0
    out = {}
    for p in PERCENTILES:
        tail = 1 - p
        w = wait / rho_b * math.log(rho_b / tail) if rho_b > tail and wait > 0 else 0.0
        out[f"ttft_p{round(p * 100)}_s"] = ttft - wait - residual + w + _residual_quantile(
            busy, t_m, t_u, tail)
    return out


def _residual_quantile(busy: float, t_m: float, t_u: float, tail: float) -> float:
    """x with P(residual > x) = tail: busy (1 - x / t_m)+ + (1 - busy) (1 - x / t_u)+."""
    lo, hi = 0.0, max(t_m, t_u)
    for _ in range(BISECTION_STEPS):
        x = (lo + hi) / 2
        over = busy * max(0.0, 1 - x / t_m) + (1 - busy) * max(0.0, 1 - x / t_u)
        lo, hi = (x, hi) if over > tail else (lo, x)
    return (lo + hi) / 2
