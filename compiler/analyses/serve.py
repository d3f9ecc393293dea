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

Continuous batching (the default; compiler/analyses/continuous.py, docs/serving.md): a
closed loop of C clients per replica (ceil(C / dp) on the busiest data-parallel rank, as
static batching), every step carrying the decode tokens of the requests generating plus
up to --chunk - those tokens of prompt tokens, from as many prompts as fit. TTFT = the
wait for budget behind pending prompts + the prompt's own chunk steps, and for the
estimate the waits of an arrival at a busy rank (the step in progress, the other
clients' prompts ahead of it: compiler/analyses/arrivals.py, `queueing` in JSON); TPOT =
the mean step a request decodes through, the steps carrying prompt chunks included.

Memory admission (continuous batching): an engine runs no more requests than its KV
cache holds, or than its own limit (--max-concurrency / dp where given: vLLM's
max_num_seqs, SGLang's --max-running-requests). A rank admits at most the KV capacity at
ISL + OSL - 1 tokens
(memory.engine_max_batch / dp at the last decode step, N = ISL + OSL - 2 and T = 1: the
room an engine gives its KV cache, mem_fraction and kv_free_fraction, 1 unless its profile
or --set says otherwise, less its mem_reserve, 0 unless given: the whole memory by default;
every
admitted request can grow to its end without evicting another, as `serve --rps` caps
it), shared by its pp micro-batches; the other clients wait for a running request to
leave. With a of a scheduler's c clients admitted, the
loop runs at a and, by Little's law over all c, each request waits (c / a - 1) x E2E(a)
before it starts: TTFT = TTFT(a) + (c / a - 1) x (TTFT(a) + (OSL - 1) x TPOT(a)), TPOT =
TPOT(a), and the replica completes a x dp / E2E(a) requests per second (`admission` in
JSON). Weights that leave no room for one request admit one (fits is false).

Throughput, either way: a closed loop of C requests each taking E2E completes C / E2E
requests per second (Little's law) and C x OSL / E2E output tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.arrivals import QUEUE_KEYS, QUEUED_KEY, queued_latencies
from infest.compiler.analyses.continuous import (KEYS, Budget, Decoding, clients_per_scheduler,
                                                 point_forms, schedule, step_costs)
from infest.compiler.analyses.speculative import (Draft, both_fit, breakeven, draft_overrides,
                                                  speculate, tokens_per_round)
from infest.compiler.analyses.startup import check_prompts, reported, wave_position, wave_ttft
from infest.compiler.backend.runner import evaluate
from infest.compiler.core.keys import TRAINED_CONTEXT
from infest.compiler.load.fields import KV_ROOM
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner

MAX_TOKENS = 2**24           # ISL, OSL and --chunk: a typo like 1e12 fails before any work
MAX_CONCURRENCY = 2**20      # requests in flight
CONTEXT_POINTS = 32          # decode contexts averaged for TPOT (all of them up to this many)
# Tokens per step, decode tokens included (vLLM's max_num_batched_tokens; its long-standing
# default, 8192 on some GPUs in newer releases; TRT-LLM's max_num_tokens is 8192).
DEFAULT_CHUNK = 2048
BATCHING = ("continuous", "static")
DEFAULT_BATCHING = "continuous"
# serve --json keys the queueing model (a later issue) fills; null until a model gives them.
PERCENTILE_KEYS = ("ttft_p90_s", "ttft_p99_s", "tpot_p90_s", "tpot_p99_s")
# What a step costs under each --use: the step key serve and plan read.
USES = {"estimate": "estimate_s", "bound": "roofline_s"}
DEFAULT_USE = "estimate"
METRIC_KEYS = ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "tokens_per_s_per_gpu",
               "tokens_per_s_per_user", "requests_per_s", "gpus", "fits")


@dataclass(frozen=True)
class Request:
    """A request shape, its load and how it is scheduled: `concurrency` clients per replica
    (a closed loop; static: the batch; None with an open loop's rate), `batching` and the
    token budget `chunk`."""

    isl: int
    osl: int
    concurrency: int | None
    batching: str = DEFAULT_BATCHING
    chunk: int = DEFAULT_CHUNK
    prompts: int | None = None   # a benchmark's prompts in all: TTFT its mean (startup.py)
    max_concurrency: int | None = None   # running requests per replica (else the KV cap)


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
    if r.concurrency is not None:   # None: an open loop (compiler/analyses/serve_open.py)
        _count("--concurrency", r.concurrency, 1, MAX_CONCURRENCY, "MAX_CONCURRENCY")
    _count("--chunk", r.chunk, 1, MAX_TOKENS, "MAX_TOKENS")
    if r.batching not in BATCHING:
        raise fail(None, f"--batching {r.batching!r}: use static or continuous")
    if r.max_concurrency is not None:
        check_max_concurrency(r.max_concurrency)
        if r.batching != "continuous":
            raise fail(None, "--max-concurrency caps a continuous-batching engine's running "
                       "requests", "drop --batching static (its batch is --concurrency)")
    if r.prompts is not None:
        if r.concurrency is None or r.batching != "continuous":
            raise fail(None, "--prompts is a closed loop's benchmark under continuous batching",
                       "use it with --concurrency and without --batching static")
        check_prompts(r.prompts, r.concurrency)


def check_max_concurrency(mc: Any) -> None:
    """--max-concurrency: a whole number of requests, at least 1."""
    if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
        raise fail(None, f"--max-concurrency {mc!r}: must be a whole number at least 1")


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


def memory_cap(runner: "Runner", isl: int, osl: int, dp: float, overrides: Mapping[str, Any]
               ) -> tuple[int, dict[str, Any]]:
    """(requests one data-parallel rank's KV cache holds at ISL + OSL - 1 tokens, at
    most 2^31; the last decode step's values at B = dp): the admission cap (module doc)."""
    last = evaluate(runner, overrides, {"B": dp, "N": float(isl + osl - 2), "T": 1.0})
    return kv_cap(last, dp), last


def kv_cap(last: Mapping[str, Any], dp: float) -> int:
    """memory.engine_max_batch / dp of the last decode step's values (any B: it does not
    depend on it), at most 2^31 (no KV cache: unbounded)."""
    kv = float(last["memory.engine_max_batch"]) / dp
    return int(min(kv, 2**31)) if math.isfinite(kv) else 2**31


def running_cap(kv: int, max_concurrency: int | None, dp: float) -> int:
    """Requests one rank runs at most: --max-concurrency / dp where given (the engine's
    own limit: vLLM's max_num_seqs, SGLang's --max-running-requests), else its KV cap."""
    return kv if max_concurrency is None else max(1, math.floor(max_concurrency / dp))


def admitted(clients: int, cap_per_rank: int, pp: float) -> int:
    """A scheduler's running requests: its clients, at most its micro-batch's share of the
    rank's running cap (floor(cap / pp)), at least 1."""
    return max(1, min(clients, int(cap_per_rank // pp)))


def admission_of(clients: int, last: Mapping[str, Any], r: Request, dp: float, pp: float
                 ) -> tuple[int, int]:
    """(the rank's running cap, a scheduler's admitted requests) from the last decode
    step's values: the KV cap or --max-concurrency, then the scheduler's share."""
    cap = running_cap(kv_cap(last, dp), r.max_concurrency, dp)
    return cap, admitted(clients, cap, pp)


def memory_queued(ttft: float, tpot: float, share: float, osl: int) -> float:
    """TTFT when `share` = clients / admitted >= 1: each request first waits (share - 1)
    x E2E of the admitted loop (Little's law over every client; module doc)."""
    return ttft + (share - 1) * (ttft + (osl - 1) * tpot)


def busiest_batch(concurrency: Any, dp: Any) -> Any:
    """The global batch the step forms take for C requests over dp data-parallel ranks:
    the busiest rank's share, ceil(C / dp), times dp (so B / dp is a whole number)."""
    return np.ceil(np.asarray(concurrency, dtype=float) / dp) * dp


def serve(engine: Serving, request: Request, overrides: Mapping[str, Any],
          draft: Draft | None = None) -> dict[str, Any]:
    """The serving metrics of a request shape (keys: METRIC_KEYS, the percentile keys,
    saturated, bound, and what the scheduling model found); with a draft, speculative
    decoding (compiler/analyses/speculative.py)."""
    check_request(request)
    for name in ("B", "N", "T"):
        if name in overrides:
            raise fail(None, f"--set {name}: serve sets it from --concurrency, --isl, --osl")
    check_context(engine.decode, request.isl, request.osl, overrides)
    if request.batching == "static":
        ttft, tpot, info = _static(engine, request, overrides)
        if draft is not None:
            ttft, tpot, info = _speculative(engine, draft, request, overrides, ttft, info)
    else:
        ttft, tpot, info = _continuous(engine, request, overrides, draft)
    extra = {k: v for k, v in info.items() if k != "dp"}
    return {**metrics(request, ttft[0], tpot[0], info), "bound": metrics(
        request, ttft[1], tpot[1], info), "batching": request.batching, **extra}


def _speculative(engine: Serving, draft: Draft, r: Request, overrides: Mapping[str, Any],
                 ttft: tuple[float, float], info: dict[str, Any]):
    """Static batching: TTFT plus the draft's prefill, TPOT per round; the plain TPOT
    and break-even kept."""
    spec = speculate(engine, draft, r, decode_contexts(r.isl, r.osl), overrides)
    pair = (spec[engine.key], spec["roofline_s"])
    ttft = tuple(t + s["draft_prefill_s"] for t, s in zip(ttft, pair))
    tpot = tuple(s["tpot_s"] for s in pair)
    notes = {**draft_notes(draft), "tokens_per_round": spec["tokens_per_round"], **{
        k: spec[engine.key][k] for k in ("round_s", "plain_tpot_s", "breakeven_acceptance")}}
    return ttft, tpot, {**info, "fits": spec["fits"], "speculative": notes}


def draft_notes(draft: Draft) -> dict[str, Any]:
    """The draft's length and acceptance (and an MTP draft's modules), as serve reports them."""
    mtp = {"draft": "mtp", "mtp_modules": draft.modules} if draft.modules else {}
    return {"draft_len": draft.length, "acceptance": draft.acceptance, **mtp}


def metrics(request: Request, ttft: float, tpot: float, info: Mapping[str, Any]) -> dict:
    """Throughputs from TTFT and TPOT (output tokens only; E2E exactly TTFT + (OSL-1) TPOT):
    C requests each taking E2E complete C / E2E requests per second (Little's law; a
    static batch likewise emits C x OSL tokens in one E2E). Means: no percentile yet."""
    c, osl = request.concurrency, request.osl
    e2e = ttft + (osl - 1) * tpot
    tokens = c * osl / e2e
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "tokens_per_s": tokens,
            "tokens_per_s_per_gpu": tokens / info["gpus"], "tokens_per_s_per_user": 1 / tpot,
            "requests_per_s": tokens / osl, "gpus": info["gpus"], "fits": info["fits"],
            **dict.fromkeys(PERCENTILE_KEYS), "saturated": False}


def data_parallel(runner: "Runner", overrides: Mapping[str, Any]) -> float:
    """dp of the layout (1 unless --set dp=..)."""
    return layout_degree(runner, overrides, "dp")


def layout_degree(runner: "Runner", overrides: Mapping[str, Any], name: str) -> float:
    """One parallel degree of the layout (tp, ep, pp or dp: 1 unless --set)."""
    return next((float(i.value) for i in runner.inputs(overrides, checked=False)
                 if i.name == name), 1.0)


def _static(engine: Serving, r: Request, overrides: Mapping[str, Any]):
    """((TTFT, its bound), (TPOT, its bound), info) for static batching."""
    batch = float(busiest_batch(r.concurrency, data_parallel(engine.decode, overrides)))
    pre = evaluate(engine.prefill, overrides, {"B": batch, "N": r.isl})
    contexts = decode_contexts(r.isl, r.osl)
    last = float(r.isl + r.osl - 2)   # the last decode step: its cache then holds ISL + OSL - 1
    dec = evaluate(engine.decode, overrides, {"B": batch, "N": last})
    steps = evaluate(engine.decode, overrides, {"B": batch, "N": contexts})
    key = f"step.{engine.key}"
    # The estimate's TTFT adds the per-request overhead once (continuous.py `latencies`).
    request = float(pre["inputs"]["request_overhead"]) if engine.key == "estimate_s" else 0.0
    ttft = (float(pre[key]) + request, float(pre["step.roofline_s"]))
    tpot = (float(np.mean(steps[key])), float(np.mean(steps["step.roofline_s"])))
    return ttft, tpot, _info(dec)


def _info(values: Mapping[str, Any]) -> dict[str, Any]:
    return {"gpus": int(values["parallel.gpus"]), "fits": bool(values["memory.fits"]),
            "dp": int(values["parallel.dp"])}


def _continuous(engine: Serving, r: Request, overrides: Mapping[str, Any],
                draft: Draft | None):
    """((TTFT, bound), (TPOT, bound), info) under continuous batching, with a draft
    speculating inside the batch (compiler/analyses/continuous.py), the clients beyond
    what the KV cache admits waiting (memory admission, module doc)."""
    dp = data_parallel(engine.decode, overrides)
    rank = math.ceil(r.concurrency / dp)       # the busiest rank's clients (all its KV)
    last = evaluate(engine.decode, overrides, {"B": rank * dp, "N": float(r.isl + r.osl - 2)})
    info = _info(last)
    # With pp stages the rank keeps pp micro-batches in flight: each is scheduled alone.
    pp = layout_degree(engine.decode, overrides, "pp")
    clients = int(clients_per_scheduler(rank, pp))
    cap, c = admission_of(clients, last, r, dp, pp)
    budget = Budget(r.isl, r.osl, r.chunk)
    plain = _continuous_costs(engine, budget, Decoding(1.0, r.osl - 1), c, dp, overrides)
    if draft is None:
        sched, out, queue = plain
        extra = _admission(clients, c, cap, out, r, last)
        waited = _waited(out, clients / c, r.osl)
        if r.prompts is not None:      # the first wave: the clients admitted at once
            first = min(r.concurrency, c * pp * dp)
            waited, extra["startup"] = _started(engine, budget, c, dp, overrides, waited, r, first)
        return (*_pair(engine, waited),
                {**info, "schedule": schedule_summary(sched), "queueing": queue, **extra})
    spec, tpr, fits = _draft_run(engine, draft, budget, c, dp, overrides, rank * dp)
    sched, out, queue = spec
    ttft, tpot = _pair(engine, _waited(out, clients / c, r.osl))
    round_s = tpot[0] * tpr                    # a mean round: the steps per token x tokens
    base = plain[1][engine.key][1]
    notes = {**draft_notes(draft), "tokens_per_round": tpr, "round_s": round_s,
             "plain_tpot_s": base, "breakeven_acceptance": breakeven(draft.length, round_s / base)}
    return ttft, tpot, {**info, "fits": info["fits"] and fits, "speculative": notes,
                        "schedule": schedule_summary(sched), "queueing": queue,
                        **_admission(clients, c, cap, out, r, last)}


def _waited(out: Mapping[str, tuple[float, float]], share: float, osl: int
            ) -> dict[str, tuple[float, float]]:
    """{key: (TTFT with the memory wait, TPOT)} for `share` = clients / admitted."""
    return {k: (memory_queued(t, p, share, osl), p) for k, (t, p) in out.items()}


def _admission(clients: int, c: int, cap: int, out: Mapping[str, tuple[float, float]],
               r: Request, last: Mapping[str, Any]) -> dict[str, Any]:
    """The `admission` JSON key where the rank admits fewer than the clients (else
    nothing): clients and admitted per scheduler, the rank's running cap and whose it is
    (the KV cache's or --max-concurrency's), each key's wait, and the engine's shares of
    memory and its reserve the KV cap was taken at (KV_ROOM)."""
    if c >= clients:
        return {}
    wait = {k: memory_queued(t, p, clients / c, r.osl) - t for k, (t, p) in out.items()}
    return {"admission": {"clients_per_scheduler": clients, "admitted_per_scheduler": c,
                          "cap_per_rank": cap, "max_concurrency": r.max_concurrency,
                          "wait_s": wait["estimate_s"], "bound_wait_s": wait["roofline_s"],
                          **{k: float(last["inputs"][k]) for k in KV_ROOM}}}


def _started(engine: Serving, budget: Budget, c: int, dp: float, overrides: Mapping[str, Any],
             out: Mapping[str, tuple[float, float]], r: Request, first: float):
    """TTFT as a benchmark of r.prompts prompts from a synchronised start reports it
    (compiler/analyses/startup.py), its `first` prompts the start-up wave (the clients
    the KV cache admits at once; the rest wait as in the steady state), and what it took
    (the `startup` JSON key)."""
    base = {i.name: float(i.value) for i in engine.decode.inputs(overrides, checked=False)}
    share = first / r.prompts
    wave = {k: wave_ttft(engine.decode, base, c, dp, budget, k) for k in KEYS}
    got = {k: (float(reported(out[k][0], wave[k], share)), out[k][1]) for k in KEYS}
    return got, {"prompts": r.prompts, "share": share, "steady_ttft_s": out[engine.key][0],
                 "wave_ttft_s": wave[engine.key], "wave_steps": wave_position(c, budget)}


def _pair(engine: Serving, out: Mapping[str, tuple[float, float]]):
    """((TTFT at use, at the bound), (TPOT at use, at the bound))."""
    return ((out[engine.key][0], out["roofline_s"][0]), (out[engine.key][1], out["roofline_s"][1]))


def _continuous_costs(engine: Serving, budget: Budget, dec: Decoding, c: int, dp: float,
                      overrides: Mapping[str, Any], draft: Draft | None = None):
    """(schedule, {key: (TTFT, TPOT)}, the estimate's closed-loop queueing terms) of c
    clients on the busiest rank (compiler/analyses/arrivals.py)."""
    base = {i.name: float(i.value) for i in engine.decode.inputs(overrides, checked=False)}
    sched = schedule(c, budget, dec)
    drafted = None
    if draft is not None:
        drafted = point_forms(draft.engine.decode, _draft_base(draft, overrides))
    costs = step_costs(point_forms(engine.decode, base), engine.decode, c, dp, budget, dec,
                       sched, drafted, draft.length if draft else 0)
    out, queue = {}, {}
    for key in KEYS:
        got = queued_latencies(c, budget, dec, sched, costs[key], key)
        ttft, tpot = float(got["ttft"]), float(got["tpot"])
        if not (math.isfinite(ttft) and math.isfinite(tpot)):
            raise fail(None, f"serve: the step {key} is not finite at this request",
                       "check the hardware's bandwidths and peaks (`infest eval`)")
        out[key] = (ttft, tpot)
        if key == QUEUED_KEY:
            queue = queue_summary(got)
    return sched, out, queue


def queue_summary(got: Mapping[str, Any]) -> dict[str, float]:
    """The closed loop's TTFT terms as JSON (`queueing`): seconds, the budget's
    utilisation by the other clients' prompts and the poll interval the residual took."""
    out = {f"{k}_s": float(got[k]) for k in QUEUE_KEYS}
    return {**out, "budget_utilisation": float(got["rho_b"]),
            "others_per_s": float(got["rate"]), "poll_interval": float(got["poll"])}


def _draft_base(draft: Draft, overrides: Mapping[str, Any]) -> dict[str, float]:
    """The draft's inputs: its own defaults on the target's layout (MTP: the target's)."""
    own = draft_overrides(draft, overrides)
    return {i.name: float(i.value) for i in draft.engine.decode.inputs(own, checked=False)}


def _draft_run(engine: Serving, draft: Draft, budget: Budget, c: int, dp: float,
               overrides: Mapping[str, Any], batch: float):
    """(the speculative schedule and costs, tokens per round, both models fit)."""
    tpr = tokens_per_round(draft.length, draft.acceptance)
    dec = Decoding(float(draft.length + 1), (budget.osl - 1) / tpr)
    run = _continuous_costs(engine, budget, dec, c, dp, overrides, draft)
    last = {"B": batch, "N": float(budget.isl + budget.osl - 2)}   # every micro-batch's KV
    fits = both_fit(evaluate(engine.decode, overrides, last),
                    evaluate(draft.engine.decode, draft_overrides(draft, overrides), last),
                    draft.modules)
    return run, tpr, fits


def schedule_summary(sched: Mapping[str, Any]) -> dict[str, Any]:
    """What the continuous model found, for the report (per data-parallel rank)."""
    return {"prompts": "alone" if bool(sched["alone"]) else "shared",
            "ttft_steps": float(sched["ttft_steps"]),
            "mixed_steps_per_request": float(sched["mixed_steps"]),
            "decoders_per_mixed_step": float(sched["mixed_decoders"]),
            "prompt_parts_per_mixed_step": float(sched["prompts"]),
            "chunk_tokens": float(sched["chunk"]), "chunks_per_prompt": float(sched["chunks"])}
