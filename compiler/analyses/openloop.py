"""Open loop: Poisson arrivals at a rate, queueing on top of the continuous-batching model.

Per data-parallel rank, requests arrive at lambda = R / dp (Poisson). By Little's law the
mean number in the system is C = lambda x E2E, and a Poisson arrival finds C others there
(PASTA: Poisson arrivals see time averages). So an arriving request runs in the closed-loop
schedule of compiler/analyses/continuous.py at c' = 1 + C clients (itself and the others),
capped by the running limit (KV capacity at ISL + OSL - 1, or --max-concurrency): C
solves the fixed point C = lambda x E2E(1 + C), by bisection. TPOT is the closed loop's at c'.

TTFT adds to the closed loop's (the prompt's own chunk steps, t_m each) the three terms
of compiler/analyses/arrivals.py at the Poisson rate: the step in progress (residual), the
prompt tokens ahead of it (the M/D/1 wait, at the budget's utilisation rho_b) and the
prompts that join its step (share).

Utilisation rho = lambda / mu_max, mu_max = cap / E2E(cap), the closed loop's throughput
at the cap (the most the rank completes). At rho >= 1 or rho_b >= 1 the queue grows
without bound: `saturated`, and no finite time is given.

Percentiles: TTFT's from the wait's tail taken as M/M/1-shaped with the P-K mean,
P(W > t) = rho_b exp(-rho_b t / W) (Kingman's heavy-traffic exponential approximation);
TPOT's are null (the model gives only its mean; `--simulate` gives them).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from infest.compiler.analyses.arrivals import queueing
from infest.compiler.analyses.continuous import Budget, Decoding

BISECTION_STEPS = 50        # halvings of [0, cap - 1] for the fixed point C
PERCENTILES = (0.90, 0.99)

# c -> {"sched": schedule(c), "mixed": t_m, "pure": t_u, "poll": k, "ttft": .., "tpot": ..}
Closed = Callable[[np.ndarray], Mapping[str, Any]]


def solve(rate: float, cap: float, closed: Closed, b: Budget, dec: Decoding) -> dict[str, Any]:
    """The open-loop answer at `rate` per rank: saturated, utilisation, concurrency C,
    ttft, tpot, the queueing terms and the TTFT percentiles (None when saturated)."""
    a = solve_grid(rate, cap, closed, b, dec)
    out = {"utilisation": float(a["utilisation"]), "max_rate": float(a["max_rate"])}
    if bool(a["saturated"]):
        return {**out, "saturated": True}
    keys = ("concurrency", "ttft", "tpot", "residual", "wait", "share", "rho_b",
            *(f"ttft_p{round(p * 100)}_s" for p in PERCENTILES))
    return {**out, "saturated": False, "closed": a["closed"], **{k: float(a[k]) for k in keys}}


def solve_grid(rate: Any, cap: Any, closed: Closed, b: Budget, dec: Decoding) -> dict[str, Any]:
    """`solve` over arrays of rates and caps (broadcast): every key an array, `saturated`
    where utilisation or the budget's utilisation reaches 1 (the times there are not
    answers). Each bisection step is one vectorised call of `closed`."""
    rate, cap = np.asarray(rate, dtype=float), np.asarray(cap, dtype=float)
    top = closed(cap)
    mu_max = cap / _e2e(top["ttft"], top, b)
    rho = rate / mu_max
    shape = np.broadcast_shapes(rate.shape, cap.shape, np.shape(mu_max))
    lo, hi = np.zeros(shape), np.broadcast_to(np.maximum(cap - 1.0, 0.0), shape)
    for _ in range(BISECTION_STEPS):          # g(C) = lambda E2E(1 + C) - C falls through 0
        mid = (lo + hi) / 2
        up = _excess(rate, mid, cap, closed, b, dec) > 0
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    c = (lo + hi) / 2
    at = closed(np.minimum(1.0 + c, cap))
    q = queueing(rate, at, b, dec)
    saturated = (rho >= 1) | ~(q["rho_b"] < 1)
    return {"utilisation": rho, "max_rate": mu_max, "saturated": saturated,
            "concurrency": rate * _e2e(q["ttft"], at, b), "ttft": q["ttft"],
            "tpot": at["tpot"], "closed": at, **{k: q[k] for k in ("residual", "wait", "share",
                                                                  "rho_b")},
            **ttft_percentiles(q, at)}


def _e2e(ttft: Any, closed: Mapping[str, Any], b: Budget) -> Any:
    return ttft + (b.osl - 1) * closed["tpot"]


def _excess(rate: Any, c: Any, cap: Any, closed: Closed, b: Budget, dec: Decoding) -> Any:
    at = closed(np.minimum(1.0 + c, cap))
    with np.errstate(invalid="ignore"):
        return rate * _e2e(queueing(rate, at, b, dec)["ttft"], at, b) - c


def ttft_percentiles(q: Mapping[str, Any], closed: Mapping[str, Any]) -> dict[str, Any]:
    """ttft_p90_s, ttft_p99_s (arrays): the mean with its residual and wait replaced by
    their quantiles added (an estimate). The wait: P(W > t) = rho_b exp(-rho_b t / W), 0
    below the chance 1 - rho_b of not waiting; the residual: 0 when nothing is in flight
    (chance 1 - running), else uniform over the cycle in progress, a mixed step a fraction
    `busy` of the time (recovered from the mean residual)."""
    ttft, wait, rho_b = (np.asarray(q[k], dtype=float) for k in ("ttft", "wait", "rho_b"))
    # The residual is uniform over the cycle to the scheduler's next look: a mixed step,
    # or poll_interval pure decode steps (arrivals.py `_residual`).
    t_m = np.asarray(closed["mixed"], dtype=float)
    t_u = np.asarray(closed["pure"], dtype=float) * np.asarray(closed["poll"], dtype=float)
    running = np.asarray(q["running"], dtype=float)
    residual = np.asarray(q["residual"], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        each = np.where(running > 0, residual / np.where(running > 0, running, 1.0), 0.0)
        busy = np.where(t_m > t_u, (2 * each - t_u) / (t_m - t_u), 0.0)
        out = {}
        for p in PERCENTILES:
            tail = 1 - p
            waits = (rho_b > tail) & (wait > 0) & np.isfinite(wait)
            w = np.where(waits, wait / rho_b * np.log(np.where(waits, rho_b, 1.0) / tail), 0.0)
            out[f"ttft_p{round(p * 100)}_s"] = ttft - wait - residual + w + _residual_quantile(
                running, busy, t_m, t_u, tail)
    return out


def _residual_quantile(running: Any, busy: Any, t_m: Any, t_u: Any, tail: float) -> Any:
    """x with P(residual > x) = tail: running (busy (1 - x / t_m)+ + (1 - busy) (1 - x /
    t_u)+), 0 where the chance of any residual is below tail."""
    lo, hi = np.zeros(np.shape(busy)), np.maximum(t_m, t_u) + np.zeros(np.shape(busy))
    for _ in range(BISECTION_STEPS):
        x = (lo + hi) / 2
        over = running * (busy * np.maximum(0.0, 1 - x / t_m)
                          + (1 - busy) * np.maximum(0.0, 1 - x / t_u))
        lo, hi = np.where(over > tail, x, lo), np.where(over > tail, hi, x)
    return (lo + hi) / 2
