"""Render an `eval` result as text, CSV or Markdown (human units, each one named)."""
from __future__ import annotations

import csv
import io

from infest.compiler.core.keys import PARALLEL
from infest.compiler.core.terms import TERM_KEYS, TIME_TERMS
from infest.compiler.load.fields import FIELD_TABLE, KV_SHARES
from infest.dsl.human import bytes_both, count, duration, md_table, pairs, si, table
from infest.exports.text.serve_text import shares_given

# "time" is an op's time with the launch floor (time_s): the hard bound leaves that term out.
OP_HEADERS = ["op", "kind", "group", "count", "FLOPs", "bytes", "FLOP/byte", "time", "x count",
              "bound"]


def _intensity(flops: float, nbytes: float) -> str:
    return f"{flops / nbytes:.3g}" if nbytes else "inf"


def op_rows(result: dict) -> list[list[str]]:
    """One row per op: per-instance FLOPs, bytes, intensity, time; time x count."""
    rows = []
    for op in result["ops"]:
        rows.append([op["name"], op["kind"], op["group"], str(op["count"]),
                     si(op["flops"], "FLOP"), si(op["bytes"], "B"),
                     _intensity(op["flops"], op["bytes"]), duration(op["time_s"]),
                     duration(op["time_s"] * op["count"]), op["bound"]])
    s = result["step"]
    rows.append(["total", "", "", "", si(s["flops"], "FLOP"), si(s["bytes"], "B"),
                 _intensity(s["flops"], s["bytes"]), "", duration(s["time_s"]), s["bound"]])
    return rows


def _limit(value: int | None, memory: dict) -> str:
    """A max_batch / max_context figure; null in JSON means memory never binds it."""
    if value is not None:
        return str(value)
    if memory["kv_bytes"] == 0:
        why = "no KV cache"
    elif memory["kv_bytes_per_token"] == 0:
        why = "fixed-size recurrent state"
    else:
        why = "KV cache windowed"
    return f"unbounded ({why})"


def _engine_batch_rows(result: dict) -> list[list[str]]:
    """The engine's KV-cache batch (an estimate) where its memory shares or reserve leave
    less than the whole memory; nothing where the shares are 1 and the reserve 0 (it is
    max_batch then)."""
    said = shares_given(result["inputs"])
    if not said:
        return []
    m = result["memory"]
    return [[f"  engine's KV cache holds (estimate: {said})", _limit(m["engine_max_batch"], m)]]


def summary_rows(result: dict) -> list[list[str]]:
    """Params, memory and step figures as (what, value) rows."""
    p, m, s = result["params"], result["memory"], result["step"]
    fits = "yes" if m["fits"] else "NO"
    return [
        ["params total / active", f"{count(p['total'])} / {count(p['active'])}"],
        ["weights", bytes_both(m["weights_bytes"])],
        ["KV cache per token", si(m["kv_bytes_per_token"], "B")],
        ["KV cache at B, N+T", bytes_both(m["kv_bytes"])],
        *_per_gpu_rows(result),
        ["memory total / capacity", f"{bytes_both(m['total_bytes_per_gpu'])} / {bytes_both(m['capacity_bytes'])}"
         + (" per GPU" if result["parallel"]["gpus"] > 1 else "")],
        ["fits", fits],
        ["max batch at this N", _limit(m["max_batch"], m)],
        *_engine_batch_rows(result),
        ["max context at this B", _limit(m["max_context"], m)],
        ["step FLOPs / bytes", f"{si(s['flops'], 'FLOP')} / {si(s['bytes'], 'B')}"],
        ["  weights / KV / activations", f"{si(s['weight_bytes'], 'B')} / {si(s['kv_bytes'], 'B')} / {si(s['act_bytes'], 'B')}"],
        [" / ".join(f"t_{t.name}" for t in TIME_TERMS),
         " / ".join(duration(s[t.key]) for t in TIME_TERMS)],
        ["overlap floor: hard (no engine beats it)", duration(s["overlap_floor_s"])],
        ["roofline: serial-kernel bound", duration(s["roofline_s"])],
        ["time with launch floor (assumes the engine)", duration(s["time_s"])],
        ["check: weights touched / mem_bw", duration(s["weights_floor_s"])],
        ["step bound / estimate", f"{duration(s['roofline_s'])} / {duration(s['estimate_s'])}"],
        ["tokens/s bound / estimate", f"{s['tokens_per_s']:.4g} / "
                                      f"{s['tokens_per_s_estimate']:.4g} tok/s"],
        ["  estimate at achievable ceilings", _efficiencies(result["inputs"])],
        ["kernels per step", _kernels(result)],
        ["collectives per step", f"{s['collectives']} calls, {si(s['comm_bytes'], 'B')} "
         f"({duration(s['t_comm_s'])})"],
        *_offload_rows(result),
        ["binding ceiling", s["bound"]],
    ]


def _offload_rows(result: dict) -> list[list[str]]:
    """Expert weights fetched over the host link, when some experts live in host memory."""
    s, i = result["step"], result["inputs"]
    if not s["host_bytes"]:
        return []
    return [["expert offload (host link)",
             f"{i['gpu_experts']} experts per layer in HBM; {si(s['host_bytes'], 'B')} of "
             f"misses per step at {si(i['host_bw'], 'B/s')} ({duration(s['t_host_s'])})"]]


def _efficiencies(inputs: dict) -> str:
    """`eff_mem 0.8, eff_flops 0.7, eff_link 0.8, eff_attn 0.48, eff_kv 0.87 of datasheet;
    4.3 us per kernel, ...; GEMM tiles 64 x 128 in waves of 132 SMs` (the estimate's
    parameters, compiler/core/estimate_rule.py; the shares in the field table's order)."""
    shares = [f"{f.name} {inputs[f.name]:g}" for f in FIELD_TABLE
              if f.unit_ratio and not f.zero and f.name in inputs and f.name not in KV_SHARES]
    fixed = [f"{duration(inputs[k])} {what}" for k, what in
             (("kernel_latency", "per kernel"), ("coll_latency", "per collective call"),
              ("coll_step_latency", "per ring step"),
              ("step_overhead", "per step")) if k in inputs]
    tiles = (f"; GEMM tiles {inputs['gemm_tile_m']:g} x {inputs['gemm_tile_n']:g} in waves of "
             f"{inputs['sms']:g} SMs" if {"gemm_tile_m", "gemm_tile_n", "sms"} <= set(inputs) else "")
    hidden = (f"; comm_overlap {inputs['comm_overlap']:g} of the collectives hidden"
              if inputs.get("comm_overlap") else "")
    return (", ".join(shares) + " of datasheet; " + ", ".join(fixed) + tiles + _ceiling(inputs)
            + hidden)


def _ceiling(inputs: dict) -> str:
    """`; per-SM ceiling 5 B/cycle at 1410 MHz: 0.373 of mem_bw` (what memory-bound kernels
    stream at most), `: not binding`, or that there is no such ceiling (no clock)."""
    if not {"sms", "clock", "mem_bw", "sm_bytes_per_cycle"} <= set(inputs):
        return ""
    if not inputs["clock"]:
        return "; no per-SM ceiling (clock 0: none given)"
    from infest.compiler.core.estimate_rule import NUMERIC, sm_share   # the rule's own
    share = float(sm_share(inputs, NUMERIC))
    head = (f"; per-SM ceiling {inputs['sm_bytes_per_cycle']:g} B/cycle at "
            f"{inputs['clock'] / 1e6:g} MHz")
    return head + (f": {share:.3g} of mem_bw" if share < 1 else ": not binding")


def _per_gpu_rows(result: dict) -> list[list[str]]:
    """Weights and KV cache one GPU holds, when the layout has several."""
    if result["parallel"]["gpus"] == 1:
        return []
    m = result["memory"]
    return [["weights / KV per GPU", f"{bytes_both(m['weights_bytes_per_gpu'])} / "
                                     f"{bytes_both(m['kv_bytes_per_gpu'])}"]]


def _kernels(result: dict) -> str:
    """`419, engine eager: 4 us each, launch bill 1.68 ms` (the launch floor's inputs)."""
    s, per = result["step"], result["inputs"].get("launch_overhead")
    each = f": {duration(per)} each" if per is not None else ""
    return f"{s['kernels']}, engine {result['engine']}{each}, launch bill {duration(s['t_launch_s'])}"


def layout_line(result: dict) -> str:
    """`tp=8 ep=8 pp=1 dp=1: 8 GPUs, policy full`: the layout an evaluation assumes."""
    par = result["parallel"]
    degrees = " ".join(f"{k}={par[k]}" for k in PARALLEL)
    gpus = "1 GPU" if par["gpus"] == 1 else f"{par['gpus']} GPUs"
    policy = f", policy {par['policy']}" if par["policy"] else ""
    if par.get("policy_derived"):
        policy += " (derived from group names)"
    note = "; per-op and step numbers are one GPU's" if par["gpus"] > 1 else ""
    return f"layout {degrees}: {gpus}{policy}{note}"


def fallback_lines(result: dict) -> list[str]:
    """`math: 376 ops in fp4 run at bf16 (...)`: formats the hardware cannot compute in."""
    return [f"math: {f['ops']} ops in {f['math']} run at {f['runs_at']}: {f['note']}"
            for f in result.get("math_fallback") or ()]


def heading(result: dict) -> str:
    """Model, hardware, phase and the point (B, N, T)."""
    ins = result["inputs"]
    point = " ".join(f"{k}={ins[k]}" for k in ("B", "N", "T") if k in ins)
    return f"{result['model']} on {result['hardware']}, {result['phase']}, {point}"


def text(result: dict) -> str:
    """The full plain-text report."""
    parts = [heading(result), layout_line(result), *fallback_lines(result), "",
             table(OP_HEADERS, op_rows(result), right={3, 4, 5, 6, 7, 8}),
             "", pairs(summary_rows(result))]
    if result.get("capacity"):
        parts += ["", "capacity", pairs(capacity_rows(result["capacity"]))]
    if result.get("sensitivity"):
        parts += ["", "sensitivity of the step time", table(SENSITIVITY_HEADERS, sensitivity_rows(result))]
    return "\n".join(parts)


SENSITIVITY_HEADERS = ["input", "d ln t / d ln x", "step saved if x halves"]


def sensitivity_rows(result: dict, limit: int = 10) -> list[list[str]]:
    """The largest elasticities of the step time (under 0.001 is noise and left out)."""
    shown = [s for s in result["sensitivity"] if abs(s["elasticity"]) >= 1e-3]
    return [[s["input"], f"{s['elasticity']:+.3f}", f"{s['halving_gain']:+.1%}"]
            for s in shown[:limit]]


def capacity_rows(cap: dict) -> list[list[str]]:
    """GPUs to hold the weights, where the bound moves with B, where KV passes weights in N."""
    rows = [["GPUs to hold the weights", str(cap["gpus_to_hold_weights"])]]
    for t in cap["bound_transitions"]:
        oom = "" if t["fits"] else " (does not fit)"
        rows.append([f"{t['from']} -> {t['to']} bound as B grows",
                     f"B = {t['batch']:.6g} (first whole B: {t['first_batch']}{oom})"])
    if not cap["bound_transitions"]:
        rows.append(["bound as B grows", "unchanged"])
    kv = cap["kv_overtakes_weights"]
    rows.append(["KV bytes pass weight bytes at",
                 f"N = {kv['context']:.6g} (first whole N: {kv['first_context']})" if kv
                 else "never (up to N = 2^30)"])
    return rows


def markdown(result: dict) -> str:
    """The report as Markdown tables."""
    return "\n\n".join([f"### {heading(result)}", md_table(OP_HEADERS, op_rows(result)),
                        md_table(["quantity", "value"], summary_rows(result))]
                       + ([md_table(["capacity", "value"], capacity_rows(result["capacity"]))]
                          if result.get("capacity") else []))


CSV_KEYS = ["name", "kind", "group", "count", "flops", "bytes", "weight_bytes", "kv_bytes",
            "act_bytes", "kernels", *TERM_KEYS, "time_s", "bound"]


def ops_csv(result: dict) -> str:
    """The per-op table in base units (one row per op), for spreadsheets and scripts."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_KEYS)
    for op in result["ops"]:
        writer.writerow([op[k] for k in CSV_KEYS])
    return buf.getvalue()
