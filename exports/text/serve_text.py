"""Text reports of `infest serve` and `infest plan`: which number is a bound, which an
estimate, and the scheduling model each assumes."""
from __future__ import annotations

from typing import Any, Mapping

from infest.compiler.load.fields import FIELDS, KV_ROOM
from infest.dsl.human import bytes_both, duration


def shares_given(values: Mapping[str, Any]) -> str:
    """`mem_fraction 0.9, mem_reserve 4 GB (3.73 GiB)`: what the engine gives its KV cache
    (KV_ROOM) where it is not the whole memory (a share below 1, a reserve above 0), or ""
    if none (eval's report and serve's admission line both say them)."""
    given = {k: float(values.get(k, FIELDS[k].default)) for k in KV_ROOM}
    return ", ".join(f"{k} {bytes_both(v) if FIELDS[k].unit == 'bytes' else f'{v:g}'}"
                     for k, v in given.items() if v != FIELDS[k].default)

_ROWS = (("TTFT", "ttft_s", duration), ("TPOT", "tpot_s", duration), ("E2E", "e2e_s", duration),
         ("tokens/s", "tokens_per_s", lambda v: f"{v:,.1f} tok/s"),
         ("tokens/s per GPU", "tokens_per_s_per_gpu", lambda v: f"{v:,.1f} tok/s"),
         ("tokens/s per user", "tokens_per_s_per_user", lambda v: f"{v:,.2f} tok/s"),
         ("requests/s", "requests_per_s", lambda v: f"{v:,.3g} req/s"))
# The scheduling model of each --batching, one line (docs/serving.md has the whole model).
MODEL = {
    "static": "static batching: C prompts prefill together (no queueing), then decode "
              "together; TPOT is the mean decode step over contexts ISL..ISL+OSL-2",
    "continuous": "continuous batching, closed loop: C clients per replica, each sending "
                  "its next request when one ends; every step carries the running "
                  "requests' decode tokens plus prompt chunks up to the token budget; "
                  "TTFT = wait for budget + own chunk steps (the estimate's also the "
                  "arrival's waits: the step in progress or the scheduler's next look "
                  "(poll_interval), the other prompts ahead, those joining its step), TPOT "
                  "includes the chunk steps",
}
NOTE = ("estimate = each op by its kind (achievable shares eff_mem, eff_flops, eff_link, "
        "eff_attn, eff_kv of the datasheet; kernel, collective-call and ring-step latency; "
        "GEMM tiles; the busiest expert rank) plus the engine's per-step overhead, and its "
        "per-request overhead in TTFT (the engine profile's or the defaults: `infest list`); "
        "bound = roofline (datasheet peaks, kernels one after another): no "
        "kernel-by-kernel engine beats it under this scheduling model")


_CLOSED = ("closed loop: C clients per replica, each sending its next request when one "
           "ends; ")
OPEN = ("open loop: Poisson arrivals; mean concurrency C = rate x E2E (Little's law) at "
        "the closed loop's schedule for 1 + C requests; TTFT adds the step in progress "
        "or the scheduler's next look (mean residual), the M/D/1 wait for the token budget (Pollaczek-Khinchine) and the "
        "prompts joining its step; p90/p99 TTFT: the wait's tail taken as M/M/1-shaped "
        "(an estimate); TPOT percentiles only from --simulate")


def serve_text(r: Mapping[str, Any]) -> str:
    """The serve report: one row per metric, estimate beside bound."""
    load = (f"concurrency={r['concurrency']}" if r.get("rps") is None else
            f"rps={r['rps']:g}/s per replica")
    head = (f"{r['model']} on {r['hardware']}, ISL={r['isl']} OSL={r['osl']} "
            f"{load}, policy {r['policy']}, {r['gpus']} GPU(s)")
    width = max(len(name) for name, _, _ in _ROWS + _OPEN_ROWS)
    used = r.get("use", "estimate")
    model = MODEL[r["batching"]]
    if r.get("rps") is not None:   # the load is the open loop's, said on the next line
        model = model.replace(_CLOSED, "")
    lines = [head, model + _budget(r), f"engine {r.get('engine', 'eager')}"]
    if r.get("rps") is not None:
        lines.append(OPEN)
    lines += ["", f"{'':{width}}  {used:>14}  {'bound':>14}"]
    rows = _ROWS + (_OPEN_ROWS if r.get("rps") is not None else ())
    for name, key, fmt in rows:
        lines.append(f"{name:{width}}  {_cell(fmt, r.get(key)):>14}  "
                     f"{_cell(fmt, r['bound'].get(key)):>14}")
    if r.get("saturated"):
        lines.append(f"SATURATED: {r['rps']:g} req/s is past what the replica completes "
                     f"({r['max_requests_per_s']:.3g} req/s, utilisation "
                     f"{r['utilisation']:.2f}): the queue grows without bound, no finite "
                     "time; tokens/s is the replica's most")
    if r.get("simulated"):
        lines.append(_simulated_line(r["simulated"]))
    if "schedule" in r:
        lines.append(_schedule_line(r["schedule"]))
    if r.get("queueing"):
        lines.append(_queue_line(r["queueing"]))
    if r.get("admission"):
        lines.append(_admission_line(r["admission"]))
    if r.get("startup"):
        lines.append(_startup_line(r["startup"]))
    if "speculative" in r:
        lines.append(_speculative_line(r["speculative"]))
    lines += [f"{'fits':{width}}  {_fits(r)}", "",
              "TPOT = (E2E - TTFT) / (OSL - 1); tokens/s count output tokens", NOTE]
    return "\n".join(lines)


def _fits(r: Mapping[str, Any]) -> str:
    """fits: yes, or NO with what the engine then does (memory admission) where it says."""
    if r["fits"]:
        return "yes"
    if r.get("admission"):
        return "NO at the full concurrency (weights + KV > memory): the engine queues, above"
    return "NO (weights + KV > memory)"


def _queue_line(q: Mapping[str, Any]) -> str:
    """The estimate's TTFT terms of an arrival at a busy rank (docs/serving.md)."""
    poll = q["poll_interval"]
    look = "step in progress" if poll == 1 else \
        f"next look for new requests (every {poll:g} decode steps)"
    return (f"arrival waits in the estimate's TTFT: {look} {duration(q['residual_s'])}, "
            f"prompts ahead {duration(q['wait_s'])}, joining its step {duration(q['share_s'])} "
            f"(token budget utilisation {q['budget_utilisation']:.3f})")


def _admission_line(a: Mapping[str, Any]) -> str:
    """The clients the rank does not admit, and their wait (compiler/analyses/serve.py)."""
    waiting = a["clients_per_scheduler"] - a["admitted_per_scheduler"]
    cap = (f"the KV cache holds {a['cap_per_rank']:,} requests per rank at ISL + OSL - 1 "
           f"tokens ({_kv_share(a)})" if a["max_concurrency"] is None else
           f"--max-concurrency {a['max_concurrency']:,} runs {a['cap_per_rank']:,} per rank")
    return (f"admission: {cap}, so {a['admitted_per_scheduler']:,} of a scheduler's "
            f"{a['clients_per_scheduler']:,} clients run and {waiting:,} wait for one to "
            f"leave: {duration(a['wait_s'])} of the estimate's TTFT (bound "
            f"{duration(a['bound_wait_s'])})")


def _kv_share(a: Mapping[str, Any]) -> str:
    """Which memory the KV cap was taken in: the engine's shares and reserve (KV_ROOM), or
    all of it."""
    given = shares_given(a)
    return "the engine's memory: " + given if given else \
        "the whole memory beside the weights: no engine share or reserve given"


def _startup_line(s: Mapping[str, Any]) -> str:
    """How --prompts P weighed the start-up wave into TTFT (compiler/analyses/startup.py)."""
    return (f"TTFT is the mean over {s['prompts']:,} prompts from a synchronised start: the "
            f"first wave ({s['share']:.1%} of them) {duration(s['wave_ttft_s'])} (its prompts "
            f"end their prefill in wave step {s['wave_steps']:.3g} on average), the rest the "
            f"steady state {duration(s['steady_ttft_s'])} (estimates)")


_OPEN_ROWS = (("TTFT p90", "ttft_p90_s", duration), ("TTFT p99", "ttft_p99_s", duration),
              ("mean concurrency", "concurrency", lambda v: f"{v:,.1f}"),
              ("utilisation", "utilisation", lambda v: f"{v:.3f}"))


def _cell(fmt, value: Any) -> str:
    return "-" if value is None else fmt(value)


def _simulated_line(s: Mapping[str, Any]) -> str:
    """The simulation's means and percentiles, one line (the closed loop's names its
    clients per scheduler)."""
    how = f"seed {s['seed']}"
    if "clients_per_scheduler" in s:
        how = f"{s['clients_per_scheduler']:,} clients per scheduler sending at once, " + how
    if s["length_spread"]:
        how += f", lengths L x (1 +- {s['length_spread']:g})"
    return (f"simulated ({s['requests']:,} requests after {s['warmup']:,} of warm-up, "
            f"{how}): TTFT mean {duration(s['ttft_s'])} p90 {duration(s['ttft_p90_s'])} "
            f"p99 {duration(s['ttft_p99_s'])}; TPOT mean {duration(s['tpot_s'])} p90 "
            f"{duration(s['tpot_p90_s'])} p99 {duration(s['tpot_p99_s'])}")


def _budget(r: Mapping[str, Any]) -> str:
    return f" (budget {r['chunk']:,} tokens per step)" if r.get("chunk") else ""


def _schedule_line(s: Mapping[str, Any]) -> str:
    """What the continuous model found on the busiest data-parallel rank."""
    how = ("prompts alone (one in prefill at a time)" if s["prompts"] == "alone" else
           "prompts shared (every step carries prompt tokens)")
    return (f"schedule per rank: {how}; TTFT = {s['ttft_steps']:.3g} step(s), "
            f"{s['mixed_steps_per_request']:.3g} of a request's decode steps carry prompt "
            f"tokens ({s['prompt_parts_per_mixed_step']:.3g} x {s['chunk_tokens']:,.0f} "
            f"beside {s['decoders_per_mixed_step']:.3g} decode requests)")


def _speculative_line(s: Mapping[str, Any]) -> str:
    even = s["breakeven_acceptance"]
    pays = ("never pays at this draft length" if even is None else
            f"pays above acceptance {even:.3f}")
    mtp = f" (draft: the spec's MTP layers, {s['mtp_modules']} module(s))" if s.get("draft") else ""
    return (f"speculative{mtp}: K={s['draft_len']} A={s['acceptance']:g}: "
            f"{s['tokens_per_round']:.3f} tokens per round of {duration(s['round_s'])} "
            f"(K draft steps + a target step over K+1 tokens); plain TPOT "
            f"{duration(s['plain_tpot_s'])}; {pays}")


def plan_text(r: Mapping[str, Any], runners_up: int = 5) -> str:
    """The best layout, the runners-up and the Pareto front, one line each (with --gpus
    the disaggregated split after them)."""
    q = r["request"]
    model = MODEL[r["batching"]] + _budget(q)
    if q.get("rps") is not None:
        model = model.replace(_CLOSED, "") + "\n" + OPEN
    lines = [plan_title(q), model, f"best ({_BEST[_mode(q)]}; {q['use']}s, limits "
             f"compared with {_compared(q)}):", "  " + _plan_line(r["best"])]
    if r.get("best_dominated_by"):
        lines.append("  (off the front: dominated by " + _plan_line(r["best_dominated_by"]).strip() + ")")
    lines += ["runners-up:"] + ["  " + _plan_line(c) for c in r["candidates"][1:1 + runners_up]]
    lines += [f"Pareto front of the {len(r['candidates'])} candidates listed (up to "
              f"{max(c['gpus'] for c in r['candidates'])} GPUs; {len(r['pareto'])} points, "
              f"tokens/s per GPU vs per user):"]
    lines += ["  " + _plan_line(c) for c in r["pareto"]]
    if "disaggregated" in r:
        lines += ["", _split_text(r["disaggregated"], q)]
    return "\n".join(lines)


_BEST = {"users": "fewest GPUs meeting the limits and the demand",
         "rps": "fewest GPUs meeting the limits at the rate, open loop",
         "gpus": "most tokens/s from the GPU budget"}


def _mode(q: Mapping[str, Any]) -> str:
    return next(k for k in ("users", "gpus", "rps") if q.get(k) is not None)


def _compared(q: Mapping[str, Any]) -> str:
    p = q.get("slo_percentile")
    return "means" if p is None else f"TTFT p{p} (the queueing model's estimate), TPOT mean"


def plan_title(q: Mapping[str, Any]) -> str:
    """The request in one line: model, hardware, shape, demand, limits, engine."""
    demand = {"users": lambda: f"{q['users']:,} users", "rps": lambda: f"{q['rps']:g} req/s",
              "gpus": lambda: f"a budget of {q['gpus']:,} GPUs"}[_mode(q)]()
    limits = ", ".join(f"{name} <= {duration(q[key])}" for name, key in
                       (("TTFT", "ttft_max_s"), ("TPOT", "tpot_max_s")) if q[key] is not None)
    return (f"{q['model']} on {q['hardware']}: ISL {q['isl']:,}, OSL {q['osl']:,}, {demand}"
            f"{', ' + limits if limits else ''}; engine {q['engine']}")


def _plan_line(c: Mapping[str, Any]) -> str:
    load = (f"{c['replicas']} x {c['rps_per_replica']:,.3g} req/s (C={c['concurrency_per_replica']:.1f}, "
            f"util {c['utilisation']:.2f})" if "rps_per_replica" in c else
            f"{c['replicas']} x C={c['concurrency_per_replica']:<5}")
    total = f"  {c['tokens_per_s']:,.0f} tok/s in all" if "tokens_per_s" in c else ""
    p90 = f" (p90 {duration(c['ttft_p90_s'])})" if c.get("ttft_p90_s") is not None else ""
    return (f"{c['gpus']:>5} GPUs  tp={c['tp']} ep={c['ep']} pp={c['pp']} dp={c['dp']} "
            f"{c['policy']:<12} {load} TTFT {duration(c['ttft_s'])}{p90}  TPOT "
            f"{duration(c['tpot_s'])}  {c['tokens_per_s_per_gpu']:,.1f} tok/s/GPU  "
            f"{c['tokens_per_s_per_user']:,.1f} tok/s/user{total}")


def _split_text(s: Mapping[str, Any], q: Mapping[str, Any]) -> str:
    """The disaggregated answer on the same budget, or why there is none."""
    if "none" in s:
        return f"disaggregated on {q['gpus']:,} GPUs: none ({s['none']})"
    pre, dec = s["prefill"], s["decode"]
    return "\n".join([
        f"disaggregated on {q['gpus']:,} GPUs: {s['gpus']} used, prefill : decode = "
        f"{pre['gpus']} : {dec['gpus']}, {s['tokens_per_s']:,.0f} tok/s in all, "
        f"{s['tokens_per_s_per_gpu']:,.1f} tok/s/GPU, TTFT {duration(s['ttft_s'])} "
        f"TPOT {duration(s['tpot_s'])}",
        _pool_lines(pre, dec, s)])


def disagg_text(r: Mapping[str, Any]) -> str:
    """The prefill pool, the decode pool and the ratio of their GPUs."""
    s = r["disaggregated"]
    pre, dec = s["prefill"], s["decode"]
    return "\n".join([
        plan_title(r["request"]),
        f"disaggregated: {s['gpus']} GPUs, prefill : decode = {pre['gpus']} : {dec['gpus']} "
        f"({s['prefill_to_decode']:.3g}), prompts arrive at {s['arrival_rps']:,.3g}/s, "
        f"E2E {duration(s['e2e_s'])}", _pool_lines(pre, dec, s)])


def _pool_lines(pre: Mapping[str, Any], dec: Mapping[str, Any], s: Mapping[str, Any]) -> str:
    kv = s["kv_transfer"]
    return "\n".join([
        f"  prefill {pre['gpus']:>5} GPUs  {_layout_text(pre)} on {s['prefill_hardware']} "
        f"{pre['replicas']} x batch {pre['batch_per_replica']}  TTFT {duration(pre['ttft_s'])} "
        f"(prefill {duration(pre['prefill_s'])} + KV move {duration(kv['time_s'])})  "
        f"{pre['prompts_per_s_per_gpu']:,.3g} prompts/s/GPU",
        f"  decode  {dec['gpus']:>5} GPUs  {_layout_text(dec)} on {s['decode_hardware']} "
        f"{dec['replicas']} x C={dec['concurrency_per_replica']}  TPOT {duration(dec['tpot_s'])}  "
        f"{dec['tokens_per_s_per_gpu']:,.1f} tok/s/GPU",
        f"  KV move per request: {kv['bytes_per_request'] / 1e6:,.1f} MB, "
        f"{kv['bytes_per_gpu'] / 1e6:,.1f} MB per GPU over the {kv['link']} "
        f"({kv['bandwidth'] / 1e9:,.0f} GB/s, {duration(kv['latency_s'])} latency), not "
        "overlapped with the prefill: added to TTFT",
        "static batches in each pool, no queueing; estimates"])


def _layout_text(c: Mapping[str, Any]) -> str:
    return f"tp={c['tp']} ep={c['ep']} pp={c['pp']} dp={c['dp']} {c['policy']}"
