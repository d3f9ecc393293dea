"""A TPOT (and TTFT) measured on a server, against `serve`'s prediction under the same
scheduling: which part of the gap to a bare decode step the scheduling explains.

A server's TPOT is not a bare decode step: with continuous batching, prefill chunks ride
on some decode steps, and TPOT is the mean step. So three numbers are compared, each from
the public serving model (compiler/analyses/serve.py `serve`):

- the bare decode step: `serve` with static batching, the decode step at B = C averaged
  over the request's contexts, no prompt in it;
- the served TPOT: `serve` under the server's scheduling (continuous by default, with its
  chunk), decode steps and chunk-carrying steps averaged;
- the measured TPOT.

scheduling_s = served TPOT - bare decode step is what the prefill chunks add to a token;
gap_s = measured - bare decode step; scheduling explains scheduling_s / gap_s of it (at
most all of it), the rest (measured - served TPOT) is left for the candidates of
`diagnose`. Both the estimate and the serial-kernel bound are reported.

With --rps R (Poisson arrivals) the concurrency comes from Little's law: the smallest C
whose rate C / E2E (`serve`'s requests_per_s at C) reaches R; none up to
MAX_SERVED_CONCURRENCY, or none that fits and keeps up, is an error (saturated).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from infest.compiler.analyses.serve import Request, Serving, serve
from infest.dsl.errors import SpecError, fail

MAX_SERVED_CONCURRENCY = 2**16   # requests in flight the --rps search tries, at most
BATCHINGS = ("continuous", "static")


@dataclass(frozen=True)
class Served:
    """What the server ran and what was measured on it (times in seconds)."""

    isl: int
    osl: int
    tpot_s: float
    concurrency: int | None = None    # exactly one of concurrency and rps
    rps: float | None = None
    batching: str = "continuous"
    chunk: int | None = None          # None: serve's own default chunk
    ttft_s: float | None = None


def request(s: Served, concurrency: int, batching: str | None = None) -> Request:
    """The serve Request for this measurement at `concurrency` (the chunk only when given)."""
    extra = {} if s.chunk is None else {"chunk": s.chunk}
    return Request(s.isl, s.osl, concurrency, batching or s.batching, **extra)


def concurrency(engine: Serving, s: Served, overrides: Mapping[str, Any]) -> int:
    """The concurrency of the measurement: given, or from --rps by Little's law."""
    if s.concurrency is not None:
        return s.concurrency
    low, high = 0, 1
    while not _keeps_up(engine, s, overrides, high):
        low, high = high, high * 2
        if high > MAX_SERVED_CONCURRENCY:
            raise fail(None, f"--rps {s.rps:g}: saturated: no concurrency up to "
                       f"{MAX_SERVED_CONCURRENCY:,} (MAX_SERVED_CONCURRENCY) serves that rate",
                       "lower --rps, or add replicas (--set dp=...)")
    while high - low > 1:              # the smallest C that keeps up lies in (low, high]
        mid = (low + high) // 2
        low, high = (low, mid) if _keeps_up(engine, s, overrides, mid) else (mid, high)
    return high


def _keeps_up(engine: Serving, s: Served, overrides: Mapping[str, Any], c: int) -> bool:
    """Whether C requests in flight fit and complete at least --rps requests per second."""
    try:
        out = serve(engine, request(s, c), overrides)
    except SpecError:
        return False                   # e.g. the chunk budget cannot keep up at this C
    return bool(out["fits"]) and out["requests_per_s"] >= s.rps


def served(engine: Serving, s: Served, overrides: Mapping[str, Any]) -> dict:
    """The served comparison (see the module doc): bare decode step, served TPOT and TTFT,
    the measured ones, and the share of the gap that scheduling explains."""
    if s.batching not in BATCHINGS:
        raise fail(None, f"--batching {s.batching!r}: use continuous or static")
    c = concurrency(engine, s, overrides)
    bare = serve(engine, request(s, c, "static"), overrides)
    got = serve(engine, request(s, c), overrides)
    out = {"isl": s.isl, "osl": s.osl, "concurrency": c, "rps": s.rps, "batching": s.batching,
           "chunk": s.chunk, "measured_tpot_s": s.tpot_s, "measured_ttft_s": s.ttft_s,
           "decode_step_s": bare["tpot_s"], "decode_step_bound_s": bare["bound"]["tpot_s"],
           "tpot_s": got["tpot_s"], "tpot_bound_s": got["bound"]["tpot_s"],
           "ttft_s": got["ttft_s"], "ttft_bound_s": got["bound"]["ttft_s"]}
    out.update(split(s.tpot_s, bare["tpot_s"], got["tpot_s"]))
    out["ttft_ratio"] = None if s.ttft_s is None else s.ttft_s / got["ttft_s"]
    out["faster_than_bound"] = s.tpot_s < got["bound"]["tpot_s"]
    return out


def split(measured: float, bare: float, served_tpot: float) -> dict:
    """The gap from the bare decode step to the measured TPOT, and the share of it the
    scheduling (served TPOT - bare step) explains, at most 1; None without a gap."""
    scheduling, gap = served_tpot - bare, measured - bare
    share = None if gap <= 0 else min(1.0, max(0.0, scheduling / gap))
    return {"scheduling_s": scheduling, "gap_s": gap, "scheduling_share": share,
            "unexplained_s": measured - served_tpot}

