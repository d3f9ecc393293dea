"""Serving a request shape: TTFT, TPOT, E2E and throughput from the step forms.

Everything is built from the closed forms `infest eval` evaluates (one generated numpy
function per phase), costing each step by the engine's `use`: the estimate
(step.estimate_s, achievable ceilings; the default) or the bound (step.roofline_s). The
bound is reported beside either: the decode forms take B sequences, T new tokens each, N cached;
the prefill forms take a prompt of N tokens per sequence. Metrics as serving benchmarks
define them: TPOT = (E2E - TTFT) / (OSL - 1), so E2E = TTFT + (OSL - 1) x TPOT.

Token accounting: the prefill step produces output token 1; decode step k = 1..OSL-1
feeds token k (T = 1) against N = ISL + k - 1 cached tokens and produces token k + 1.

Static batching: C prompts prefill together (TTFT = the prefill step at B, N = ISL, no
queueing), then decode together; TPOT = the mean decode step at B over the contexts
N = ISL .. ISL + OSL - 2 (every one when OSL - 1 <= CONTEXT_POINTS, else the
CONTEXT_POINTS midpoints of equal slices of that range: ISL + floor((2k + 1)(OSL - 1) /
(2 CONTEXT_POINTS)), k = 0 .. CONTEXT_POINTS - 1). B is the batch of the busiest
data-parallel rank times dp, ceil(C / dp) x dp: C itself when dp divides it.

Continuous batching with chunked prefill (per data-parallel replica, C / dp requests):
C / dp requests decode in every step at the mean context ISL + (OSL - 2) / 2. A finished
request's slot takes a new prompt, split into P = ceil(ISL / chunk) chunks, chunk j of
T_j = min(chunk, ISL - j chunk) tokens against N_j = j chunk cached, one chunk per step
riding on the decode tokens. In OSL - 1 steps C / dp requests finish, so C / dp x P of
every OSL - 1 steps carry a chunk (this must not exceed OSL - 1: else the budget cannot
keep up). TTFT = the P mixed steps of one prompt (no queueing); TPOT = the mean step.
A mixed step is one forward: per op, FLOPs, activation/KV bytes and the collective
payload are the decode part's plus the chunk's, the weights are read once (for experts:
those the step's tokens touch together), launches as the decode step's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.speculative import Draft, speculate
from infest.compiler.backend.runner import evaluate
from infest.compiler.core.keys import TRAINED_CONTEXT
from infest.compiler.core.terms import HARD_KEYS, TIME_TERMS, derated
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner

MAX_TOKENS = 2**24           # ISL, OSL and --chunk: a typo like 1e12 fails before any work
MAX_CONCURRENCY = 2**20      # requests in flight
CONTEXT_POINTS = 32          # decode contexts averaged for TPOT (all of them up to this many)
DEFAULT_CHUNK = 2048         # prefill tokens per step (vLLM's max_num_batched_tokens default)
BATCHING = ("static", "continuous")
# What a step costs under each --use: the step key serve and plan read.
USES = {"estimate": "estimate_s", "bound": "roofline_s"}
DEFAULT_USE = "estimate"
METRIC_KEYS = ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "tokens_per_s_per_gpu",
               "tokens_per_s_per_user", "requests_per_s", "gpus", "fits")


@dataclass(frozen=True)
class Request:
    """A request shape and how many run at once."""

    isl: int
    osl: int
    concurrency: int
    batching: str = "static"
    chunk: int = DEFAULT_CHUNK


@dataclass
class Serving:
    """The decode and prefill runners of one spec, hardware and policy, and which step
    time (`use`: a key of USES) the metrics come from. Analyses may be given: their
    runners are kept (serving needs no sympy, so a cached runner serves as well)."""

    decode: "Runner"
    prefill: "Runner"
    use: str = DEFAULT_USE

    def __post_init__(self) -> None:
        self.decode = getattr(self.decode, "runner", self.decode)
        self.prefill = getattr(self.prefill, "runner", self.prefill)

    @property
    def key(self) -> str:
        """The step key of `use`: estimate_s or roofline_s."""
        return USES[self.use]


def check_request(r: Request) -> None:
    """Bad requests are one-line errors (exit 1), checked before any evaluation."""
    _count("--isl", r.isl, 1, MAX_TOKENS, "MAX_TOKENS")
    _count("--osl", r.osl, 2, MAX_TOKENS, "MAX_TOKENS",
           "TPOT = (E2E - TTFT) / (OSL - 1) needs OSL >= 2; a prompt alone: "
           "`infest eval --phase prefill`")
    _count("--concurrency", r.concurrency, 1, MAX_CONCURRENCY, "MAX_CONCURRENCY")
    _count("--chunk", r.chunk, 1, MAX_TOKENS, "MAX_TOKENS")
    if r.batching not in BATCHING:
        raise fail(None, f"--batching {r.batching!r}: use static or continuous")


def check_context(runner: "Runner", isl: int, osl: int, overrides: Mapping[str, Any]) -> None:
    """A request's whole context (prompt + output) must be within the model's trained
    context: the last output token is produced from ISL + OSL - 1 tokens."""
    inputs = {i.name: i.value for i in runner.inputs(overrides, checked=False)}
    limit = inputs.get(TRAINED_CONTEXT, runner.defaults.get(TRAINED_CONTEXT))
    if limit is not None and isl + osl - 1 > limit:
        raise fail(runner.spans.get(TRAINED_CONTEXT),
                   f"--isl {isl} + --osl {osl} needs a context of "
                   f"{isl + osl - 1:,} tokens; the model was trained for {int(limit):,}",
                   "shorten the request, or --set trained_context=... to ask what if")


def _count(flag: str, value: Any, lo: int, hi: int, limit: str, hint: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(None, f"{flag} {value!r}: expected a whole number of tokens or requests")
    if value < lo:
        raise fail(None, f"{flag} {value}: must be at least {lo}", hint)
    if value > hi:
        raise fail(None, f"{flag} {value}: more than {hi:,} ({limit})")


def decode_contexts(isl: int, osl: int) -> np.ndarray:
    """The cached contexts whose decode steps TPOT averages (see the module doc): the
    midpoint of slice k of the OSL - 1 decode steps, in whole tokens."""
    steps = osl - 1
    if steps <= CONTEXT_POINTS:
        return isl + np.arange(steps, dtype=float)
    k = np.arange(CONTEXT_POINTS)
    return (isl + (2 * k + 1) * steps // (2 * CONTEXT_POINTS)).astype(float)


def busiest_batch(concurrency: Any, dp: Any) -> Any:
    """The global batch the step forms take for C requests over dp data-parallel ranks:
    the busiest rank's share, ceil(C / dp), times dp (so B / dp is a whole number)."""
    return np.ceil(np.asarray(concurrency, dtype=float) / dp) * dp


def serve(engine: Serving, request: Request, overrides: Mapping[str, Any],
          draft: Draft | None = None) -> dict[str, Any]:
    """The serving metrics of a request shape (keys: METRIC_KEYS plus bound/notes); with a
    draft, speculative decoding (static batching; compiler/analyses/speculative.py)."""
    check_request(request)
    for name in ("B", "N", "T"):
        if name in overrides:
            raise fail(None, f"--set {name}: serve sets it from --concurrency, --isl, --osl")
    check_context(engine.decode, request.isl, request.osl, overrides)
    if request.batching == "static":
        ttft, tpot, info = _static(engine, request, overrides)
    elif draft is not None:
        raise fail(None, "--draft works with --batching static", "drop --batching continuous")
    else:
        ttft, tpot, info = _continuous(engine, request, overrides)
    if draft is not None:
        ttft, tpot, info = _speculative(engine, draft, request, overrides, ttft, info)
    ttft = (ttft[0] + _request_overhead(engine, overrides), ttft[1])
    return {**metrics(request, ttft[0], tpot[0], info), "bound": metrics(
        request, ttft[1], tpot[1], info), **{k: v for k, v in info.items() if k != "dp"}}


def _speculative(engine: Serving, draft: Draft, r: Request, overrides: Mapping[str, Any],
                 ttft: tuple[float, float], info: dict[str, Any]):
    """TTFT plus the draft's prefill, TPOT per round; the plain TPOT and break-even kept."""
    spec = speculate(engine, draft, r, decode_contexts(r.isl, r.osl), overrides)
    pair = (spec[engine.key], spec["roofline_s"])
    ttft = tuple(t + s["draft_prefill_s"] for t, s in zip(ttft, pair))
    tpot = tuple(s["tpot_s"] for s in pair)
    notes = {"draft_len": draft.length, "acceptance": draft.acceptance,
             "tokens_per_round": spec["tokens_per_round"], **{
                 k: spec[engine.key][k] for k in ("round_s", "plain_tpot_s", "breakeven_acceptance")}}
    return ttft, tpot, {**info, "fits": spec["fits"], "speculative": notes}


def metrics(request: Request, ttft: float, tpot: float, info: Mapping[str, Any]) -> dict:
    """Throughputs from TTFT and TPOT (output tokens only; E2E exactly TTFT + (OSL-1) TPOT)."""
    c, osl = request.concurrency, request.osl
    e2e = ttft + (osl - 1) * tpot
    if request.batching == "static":
        tokens = c * osl / e2e            # a batch of C requests emits C x OSL tokens in E2E
    else:
        tokens = c / tpot                 # C requests each emit one token per TPOT
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "tokens_per_s": tokens,
            "tokens_per_s_per_gpu": tokens / info["gpus"], "tokens_per_s_per_user": 1 / tpot,
            "requests_per_s": tokens / osl, "gpus": info["gpus"], "fits": info["fits"]}


def _request_overhead(engine: Serving, overrides: Mapping[str, Any]) -> float:
    """The per-request overhead TTFT adds under the estimate (compiler/forms/estimate.py);
    none under the bound. No form uses it, so it is read from --set or the defaults
    (hardware, engine profile, compiler/load/estimate_fields.py)."""
    if engine.key != USES["estimate"]:
        return 0.0
    if "request_overhead" in overrides:
        return float(overrides["request_overhead"])
    runner = getattr(engine.prefill, "runner", engine.prefill)   # an Analysis or a Runner
    return float(runner.defaults.get("request_overhead", 0))


def _static(engine: Serving, r: Request, overrides: Mapping[str, Any]):
    """((TTFT, its bound), (TPOT, its bound), info) for static batching."""
    dp = next((float(i.value) for i in engine.decode.inputs(overrides, checked=False)
               if i.name == "dp"), 1.0)
    batch = float(busiest_batch(r.concurrency, dp))
    pre = evaluate(engine.prefill, overrides, {"B": batch, "N": r.isl})
    contexts = decode_contexts(r.isl, r.osl)
    last = float(r.isl + r.osl - 2)   # the last decode step: its cache then holds ISL + OSL - 1
    dec = evaluate(engine.decode, overrides, {"B": batch, "N": last})
    steps = evaluate(engine.decode, overrides, {"B": batch, "N": contexts})
    key = f"step.{engine.key}"
    ttft = (float(pre[key]), float(pre["step.roofline_s"]))
    tpot = (float(np.mean(steps[key])), float(np.mean(steps["step.roofline_s"])))
    return ttft, tpot, _info(dec)


def _info(values: Mapping[str, Any]) -> dict[str, Any]:
    return {"gpus": int(values["parallel.gpus"]), "fits": bool(values["memory.fits"]),
            "dp": int(values["parallel.dp"])}


def _continuous(engine: Serving, r: Request, overrides: Mapping[str, Any]):
    """((TTFT, bound), (TPOT, bound), info) for continuous batching with chunked prefill."""
    last = evaluate(engine.decode, overrides, {"B": r.concurrency, "N": float(r.isl + r.osl - 2)})
    info = _info(last)
    dp, chunks = info["dp"], math.ceil(r.isl / r.chunk)
    _check_budget(r, dp, chunks)
    starts = np.arange(chunks, dtype=float) * r.chunk
    sizes = np.minimum(r.chunk, r.isl - starts)
    mean_ctx = r.isl + (r.osl - 2) / 2
    dec = evaluate(engine.decode, overrides, {"B": r.concurrency, "N": mean_ctx})
    pre = evaluate(engine.decode, overrides, {"B": dp, "T": sizes, "N": starts})
    tot = evaluate(engine.decode, overrides, {"B": dp, "T": r.concurrency / dp + sizes, "N": 0.0})
    every = mixed_step(engine.decode, dec, pre, tot)
    mixed = (every[engine.key], every["roofline_s"])
    pure = (float(dec[f"step.{engine.key}"]), float(dec["step.roofline_s"]))
    carried = r.concurrency / dp * chunks     # chunk-carrying steps per OSL - 1 steps
    out = []
    for m, p in zip(mixed, pure):
        ttft = float(np.sum(m))
        per_chunk = float(np.mean(m)) if carried else 0.0
        out.append((ttft, (carried * per_chunk + (r.osl - 1 - carried) * p) / (r.osl - 1)))
    return (out[0][0], out[1][0]), (out[0][1], out[1][1]), {**info, "chunks": chunks,
                                                            "chunk_steps": carried}


def _check_budget(r: Request, dp: int, chunks: int) -> None:
    per_replica = r.concurrency / dp
    if per_replica * chunks <= r.osl - 1:
        return
    most = math.floor((r.osl - 1) / per_replica)   # chunk steps a prompt may take
    hint = (f"raise --chunk to at least {math.ceil(r.isl / most)}, or lower --concurrency"
            if most else f"lower --concurrency to at most {(r.osl - 1) * dp}")
    raise fail(None, f"--chunk {r.chunk} cannot keep up: {per_replica:g} requests per "
               f"replica finish every {r.osl - 1} steps and each prompt needs {chunks} "
               f"chunk steps ({per_replica:g} x {chunks} > {r.osl - 1})", hint)


# How each time term of a mixed step (decode part + prefill chunk) combines per op.
_MIXED = {
    "compute": lambda d, p, t, fix, k: d[k] + p[k],         # FLOPs add
    "memory": lambda d, p, t, fix, k: d[k] + p[k] + fix,    # bytes add, weights read once
    "comm": lambda d, p, t, fix, k: t[k],                   # one call over all the tokens
    "launch": lambda d, p, t, fix, k: d[k],                 # the same kernels
    "host": lambda d, p, t, fix, k: t[k],                   # misses of the experts all touch
}


def mixed_step(runner: "Runner", dec: Mapping[str, Any], pre: Mapping[str, Any],
               tot: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{estimate_s, roofline_s} of one forward carrying the decode point `dec` and the
    chunk point `pre`; `tot` is the same layout at all their tokens with no cache (its
    weight bytes are what the step's tokens touch together, its collectives carry them
    all). The estimate divides each term by its efficiency, as compiler/forms/model.py does."""
    ins = dec["inputs"]
    est, roof = 0.0, 0.0
    for i in range(len(runner.ops)):
        q = {name: _keyed(src, i) for name, src in (("d", dec), ("p", pre), ("t", tot))}
        fix = (q["t"]["weight_bytes"] - q["d"]["weight_bytes"] - q["p"]["weight_bytes"]) / ins["mem_bw"]
        terms = {t.key: _MIXED[t.name](q["d"], q["p"], q["t"], fix, t.key) for t in TIME_TERMS}
        hard = np.maximum.reduce(np.broadcast_arrays(*(terms[k] for k in HARD_KEYS)))
        est = est + q["d"]["count"] * np.maximum.reduce(np.broadcast_arrays(*derated(terms, ins)))
        roof = roof + q["d"]["count"] * hard
    return {"estimate_s": np.asarray(est, float), "roofline_s": np.asarray(roof, float)}


def _keyed(values: Mapping[str, Any], i: int) -> dict[str, Any]:
    prefix = f"ops.{i}."
    return {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)}
