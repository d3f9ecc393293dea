"""Render an `infest diagnose` report: terminal text and the DIAGNOSIS.md record."""
from __future__ import annotations

import datetime

from infest.dsl.errors import printable
from infest.dsl.human import duration, md_table, pairs, table
from infest.exports.text.report_text import SENSITIVITY_HEADERS, heading, sensitivity_rows


CANDIDATE_HEADERS = ["candidate", "number", "share of step", "verdict"]


def _rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:.4g} tok/s"


def measured_line(d: dict) -> str:
    """The measurement against the model's bound."""
    m = d["measured"]
    return (f"measured {duration(m['step_s'])} per step ({_rate(m['tokens_per_s'])}); "
            f"the model's time with the launch floor is {duration(d['bound_s'])}")


def candidate_rows(d: dict) -> list[list[str]]:
    """One row per candidate ceiling, ranked by the share of the step it explains (the
    ruled-out ones last): its number, share and verdict."""
    bw, c, la, occ = d["bandwidth"], d["comm"], d["launch"], d["occupancy"]
    src = "measured" if c["measured"] else "model"
    number = {
        "bandwidth": f"ceiling {_rate(bw['ceiling_tokens_per_s'])} (bytes/mem_bw = "
                     f"{duration(bw['bound_s'])}); measured step is {bw['ratio']:.3g}x that",
        "comm": f"{c['calls']:g} calls x {duration(c['time_per_call_s'])} ({src}) = "
                f"{duration(c['total_s'])}",
        "launch": f"{la['kernels']:g} kernels: {duration(la['time_per_kernel_s'])} per kernel, "
                  f"launch overhead {duration(la['launch_overhead_s'])} each = "
                  f"{duration(la['kernels'] * la['launch_overhead_s'])}",
        "occupancy": _occupancy_number(occ, d["measured"]["step_s"]),
    }
    return [[r["candidate"], number[r["candidate"]], _share(r), d[r["candidate"]]["verdict"]]
            for r in d["ranking"]]


def _share(r: dict) -> str:
    return "ruled out" if r["ruled_out"] else f"{r['share']:.1%}"


def _occupancy_number(occ: dict, step_s: float) -> str:
    if not occ["flagged"]:
        return f"every hot op fills 25%+ of the {occ['sms']:g} SMs"
    names = ", ".join(occ["flagged"][:4]) + (" ..." if len(occ["flagged"]) > 4 else "")
    head = f"{len(occ['flagged'])} hot op(s) under 25% of {occ['sms']:g} SMs ({names})"
    if occ["ruled_out"]:
        return (f"{head} would take {duration(occ['time_s'])} at that occupancy, more than "
                f"the {duration(step_s)} step")
    return f"{head}: +{duration(occ['excess_s'])} modelled"


def answer(d: dict) -> str:
    """The diagnosis in one sentence: what the step is spent on, with the shares."""
    la, c, step = d["launch"], d["comm"], d["measured"]["step_s"]
    per, over = duration(la["time_per_kernel_s"]), duration(la["launch_overhead_s"])
    launches = f"{la['kernels']:g} kernels at ~{per} each"
    comm_part = f"collectives {c['share']:.0%}" if not c["ruled_out"] else "collectives ruled out"
    if d["binding"] == "launch" and la["verdict"] == "launch bound":
        return (f"launch bound: {launches}, ~{over} of which is launch overhead "
                f"({la['share']:.0%} of the step); {comm_part}")
    if d["binding"] == "launch":
        return (f"{la['verdict']}: {launches}, the GPU idle {la['share']:.0%} of the step; "
                f"{comm_part}")
    if d["binding"] == "occupancy" and d["by_elimination"]:
        return (f"the kernels themselves are slow: {launches} (launch {la['share']:.0%} of "
                f"the step), {comm_part}, {d['bandwidth']['ratio']:.3g}x the bandwidth bound")
    top = next(r for r in d["ranking"] if r["candidate"] == d["binding"])
    return f"{d['binding']} bound: {top['share']:.0%} of the {duration(step)} step; {comm_part}"


def verdict_rows(d: dict) -> list[list[str]]:
    """Binding ceiling, falsifier and prediction."""
    p, m = d["prediction"], d["measured"]
    tokens = m["tokens_per_s"] * m["step_s"]  # tokens per step
    how = " (by elimination)" if d["by_elimination"] else ""
    return [["binding ceiling", d["binding"] + how], ["answer", answer(d)],
            ["first change", f"{p['change']}: expected step {duration(p['expected_step_s'])} "
                             f"({_rate(tokens / p['expected_step_s'])})"],
            ["falsifier", d["falsifier"]]]


def faster_lines(d: dict) -> list[str]:
    """The loud warning when the measurement beats the bound, with op-level numbers."""
    chk, step = d["bound_check"], duration(d["measured"]["step_s"])
    if not chk["flag"]:
        return [f"note: {step} beats the serial-kernel roofline {duration(chk['roofline_s'])} "
                f"but not the overlap floor {duration(chk['overlap_floor_s'])}: the engine "
                "overlaps kernels (legitimate)"] if chk["below_roofline"] else []
    lines = [f"!!! MEASURED STEP IS FASTER THAN THE BOUND: {step} < overlap floor "
             f"{duration(chk['overlap_floor_s'])} ({chk['ratio']:.3g}x; no engine beats it). "
             "The measurement or the spec is wrong: wrong dtype, missed sparsity, a timer "
             "around an async launch?"]
    for e in chk["evidence"]:
        if "target" in e:
            lines.append(f"    {e['target']}: measured {duration(e['measured_s'])} < bound "
                         f"{duration(e['bound_s'])} per step")
        else:
            lines.append(f"    {e['op']}: bound {duration(e['bound_s'])} per step ({e['bound']})")
    return lines


def kernel_rows(k: dict) -> list[list[str]]:
    """Per mapped target: kernels, launches, measured vs bound per step, ratio."""
    return [[r["target"], str(r["kernels"]), f"{r['launches_per_step']:g}",
             duration(r["measured_s"]), duration(r["bound_s"]) if r["bound_s"] else "not in model",
             f"{r['ratio']:.3g}x" if r["ratio"] is not None else "-"] for r in k["targets"]]


KERNEL_HEADERS = ["target", "kernels", "launches/step", "measured/step", "bound/step", "ratio"]


def kernel_summary(k: dict) -> list[list[str]]:
    """Kernel time against the step: a large gap means the GPU idles between kernels."""
    return [["kernel time per step", f"{duration(k['kernel_time_s'])} of {duration(k['step_s'])} "
                                     f"(GPU idle {k['idle_share']:.1%})"],
            ["kernels per step", f"{k['kernels_per_step']:g} ({k['steps']} steps captured)"],
            ["unmatched kernels", "; ".join(f"{_short(u['name'])} ({duration(u['time_s'])})"
                                            for u in k["unmatched"][:8]) or "none"]]


def _short(name: str, width: int = 60) -> str:
    """A kernel name cut to `width` characters (template arguments run for pages)."""
    return name if len(name) <= width else name[:width - 3] + "..."


def amdahl_rows(d: dict) -> list[list[str]]:
    """Serial fraction per measured speedup and what the next GPU buys."""
    return [[str(a["gpus"]), f"{a['speedup']:g}x", f"{a['serial_fraction']:.3f}",
             f"{a['next_gpu_speedup']:.3g}x (+{a['next_gpu_gain']:.1%})",
             f"{a['limit_speedup']:.3g}x" if a["limit_speedup"] else "unbounded"]
            for a in d["amdahl"]]


AMDAHL_HEADERS = ["GPUs", "speedup", "serial fraction s", "with one more GPU", "limit 1/s"]


def depth_rows(d: dict) -> list[list[str]]:
    """Measured vs bound tokens/s per context, with the KV share of bytes."""
    return [[str(p["N"]), f"{p['measured_tokens_per_s']:.4g}", f"{p['bound_tokens_per_s']:.4g}",
             f"{p['ratio']:.3f}", f"{p['kv_share']:.1%}", f"{p['attention_share']:.1%}"]
            for p in d["depth"]["points"]]


DEPTH_HEADERS = ["N", "measured tok/s", "bound tok/s", "measured/bound", "KV share of bytes",
                 "attention share of bound"]


def depth_line(d: dict) -> str:
    """Where the measurement falls away from the bound, and what depth consumes."""
    at = d["depth"]["diverges_at"]
    if at is None:
        return "the measurement follows the bound's curve (within 20%) at every context"
    p = next(p for p in d["depth"]["points"] if p["N"] == at)
    return (f"diverges from N = {at}: measured/bound falls 20%+ below the shortest context's; "
            f"there KV is {p['kv_share']:.0%} of the bytes and attention "
            f"{p['attention_share']:.0%} of the bound: depth consumes the attention cache")


def served_rows(v: dict) -> list[list[str]]:
    """A served TPOT against serve's prediction under the same scheduling."""
    load = f"concurrency {v['concurrency']}" + (f" (from {v['rps']:g} req/s, Little's law)"
                                                if v["rps"] is not None else "")
    share = ("none: the measured TPOT is not above the bare step" if v["scheduling_share"] is None
             else f"{v['scheduling_share']:.0%} of the {duration(v['gap_s'])} gap")
    rows = [["request", f"ISL {v['isl']}, OSL {v['osl']}, {load}, {v['batching']} batching"],
            ["bare decode step (estimate / bound)",
             f"{duration(v['decode_step_s'])} / {duration(v['decode_step_bound_s'])}"],
            ["served TPOT (estimate / bound)",
             f"{duration(v['tpot_s'])} / {duration(v['tpot_bound_s'])}: prefill chunks add "
             f"{duration(v['scheduling_s'])} per token"],
            ["measured TPOT", f"{duration(v['measured_tpot_s'])}: scheduling explains {share}; "
                              f"{duration(v['unexplained_s'])} beyond the served estimate"]]
    if v["measured_ttft_s"] is not None:
        rows.append(["TTFT measured / served estimate",
                     f"{duration(v['measured_ttft_s'])} / {duration(v['ttft_s'])} "
                     f"({v['ttft_ratio']:.3g}x; the estimate waits as a closed loop's "
                     "arrival: docs/serving.md)"])
    return rows


def _sections(d: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) for every optional table present in the report."""
    out = []
    if d.get("served"):
        out.append(("Served (serve's model, the same scheduling)", ["", ""], served_rows(d["served"])))
    if d["kernels"]:
        out.append(("Kernels (nsys) against the model", KERNEL_HEADERS, kernel_rows(d["kernels"])))
        out.append(("Kernel time against the step", ["", ""], kernel_summary(d["kernels"])))
    if d["amdahl"]:
        out.append(("Amdahl", AMDAHL_HEADERS, amdahl_rows(d)))
    if d["depth"]:
        out.append(("Depth", DEPTH_HEADERS, depth_rows(d)))
    out.append(("Sensitivity of the model's step time", SENSITIVITY_HEADERS, sensitivity_rows(d, 8)))
    return out


def text(d: dict) -> str:
    """The terminal report (kernel names and every other text escaped: dsl printable)."""
    return printable(_text(d))


def markdown(d: dict) -> str:
    """The Markdown record, escaped as the terminal report is."""
    return printable(_markdown(d))


def _text(d: dict) -> str:
    """The terminal report."""
    parts = [heading(d), measured_line(d), *faster_lines(d), "",
             table(CANDIDATE_HEADERS, candidate_rows(d), right={2}), "",
             pairs(verdict_rows(d))]
    for title, headers, rows in _sections(d):
        body = pairs(rows) if headers == ["", ""] else table(headers, rows)
        parts += ["", title, body] + ([depth_line(d)] if title == "Depth" else [])
    return "\n".join(parts)


def _markdown(d: dict) -> str:
    """DIAGNOSIS.md: enough for someone else to restate the verdict without asking."""
    p = d["prediction"]
    parts = [f"# Diagnosis: {heading(d)}", f"Dated {datetime.date.today().isoformat()} "
             "(the binding ceiling moves as the system is optimized).", measured_line(d) + ".",
             *faster_lines(d),
             f"**Binding ceiling: {d['binding']}**{' (by elimination)' if d['by_elimination'] else ''}.",
             "## Candidates (by the share of the step each explains)",
             md_table(CANDIDATE_HEADERS, candidate_rows(d)),
             f"## First change\n\n{p['change']}: expected step **{duration(p['expected_step_s'])}** "
             f"(from {duration(d['measured']['step_s'])}), computed from the model.",
             f"## What would prove this wrong\n\n{d['falsifier']}"]
    for title, headers, rows in _sections(d):
        parts += [f"## {title}", md_table(headers if headers != ["", ""] else ["", "value"], rows)]
        parts += [depth_line(d)] if title == "Depth" else []
    return "\n\n".join(parts) + "\n"
