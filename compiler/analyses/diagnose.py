"""Diagnose a measured system: which ceiling binds (bandwidth, comm, launch, occupancy).

Given the model's result at a point (`eval --json`) and a measured step, each candidate
ceiling gets a number and a verdict, cheapest first (the thresholds are the usual first-
order ones: within 2x of the bandwidth bound, 10% of the step in collectives, 10 us per
kernel, 25% of the SMs):

- bandwidth: bound_s = step bytes / mem_bw; ratio = measured step / bound_s;
- comm: collectives per step x time per call, as a share of the measured step;
- launch: measured step / kernels per step = time available per kernel;
- occupancy: thread blocks per launch per op against the SM count; an op that fills a
  fraction f < 1 of the SMs is modelled as running at f of its rate (its hard time / f;
  the launch floor does not scale with the grid). Collectives are never candidates.

Each candidate carries the time it claims (`time_s`) and the share of the measured step
it explains; one whose time exceeds the measured step is falsified by the measurement
itself and reported as ruled out (share 0), never as binding. `ranking` orders them by
share.

Then the binding ceiling, the measurement that would falsify it and a prediction for the
first change, each computed from the model's numbers. Measured counts given by the user
replace the model's own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sympy

from infest.compiler.analyses.nsys import COMM, GROUP_TARGETS, IGNORE, Kernel, Pattern, match
from infest.compiler.core.symbols import B, T, sym
from infest.compiler.core.terms import HARD_KEYS

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving
    from infest.compiler.analyses.served import Served
    from infest.compiler.api import Analysis
    from infest.compiler.core.graph import OpNode
    from infest.compiler.backend.runner import Input

BANDWIDTH_BOUND_RATIO = 2.0    # measured within 2x of the bandwidth bound: bandwidth bound
BANDWIDTH_OUT_RATIO = 10.0     # 10x or more below it: look elsewhere
COMM_SHARE = 0.10              # collectives under 10% of the step: not comm
LAUNCH_BOUND_S = 10e-6         # under ~10 us per kernel: launch bound
OCCUPANCY_FRACTION = 0.25      # hot ops under 25% of the SMs are flagged
OCCUPANCY_SHARE = 0.10         # ...and only bind if their modelled excess is 10% of the step
HOT_SHARE = 0.05               # an op is hot at 5% or more of the bound step
IDLE_SHARE = 0.5               # GPU idle for half the step (nsys): launch or host bound
CANDIDATES = ("bandwidth", "comm", "launch", "occupancy")
TILE = 128                     # GEMM output tile, 128 x 128 (CUTLASS/cuBLAS default on SM80+)
ATTN_BLOCK_M = 128             # FlashAttention-2 forward: 128 query rows per block


@dataclass
class Measured:
    """What the user measured; None means "use the model's own number"."""

    step_s: float | None = None           # one of step_s and tokens_per_s is given
    tokens_per_s: float | None = None
    kernels: float | None = None
    collectives: float | None = None
    collective_time_s: float | None = None
    speedups: list[tuple[int, float]] = field(default_factory=list)
    depth: list[tuple[int, float]] = field(default_factory=list)
    nsys: list[Kernel] | None = None
    steps: int = 1
    patterns: list[Pattern] = field(default_factory=list)
    served: "Served | None" = None        # a TPOT measured on a server (step_s is it)


def tokens_per_step(result: dict) -> float:
    """Tokens one step produces (B*T in decode, B*N in prefill), from the result itself."""
    s = result["step"]
    return s["tokens_per_s"] * s["roofline_s"]  # tokens_per_s is B*T / roofline_s


# ---- occupancy: thread blocks per launch --------------------------------------------

def default_blocks(op: "OpNode") -> sympy.Expr:
    """Thread blocks per launch when the spec states none (`blocks=` overrides).

    linear/router: one block per 128x128 output tile of [B*T, d_out] (CUTLASS/cuBLAS
    default tile); attention/mla: FlashAttention-2's grid, one block per (sequence, head,
    128 query rows), so B*heads in decode; everything else: one block per token row.
    """
    if op.blocks is not None:
        return op.blocks
    if op.kind in ("linear", "router"):
        return sympy.ceiling(B * T / TILE) * sympy.ceiling(op.width / TILE)
    if op.kind in ("attention", "mla") and "heads" in op.args:
        return B * op.args["heads"] * sympy.ceiling(T / ATTN_BLOCK_M)
    return B * T


def occupancy(analysis: "Analysis", inputs: list["Input"], result: dict, sms: float,
              step_s: float) -> dict:
    """Per op blocks vs SMs; hot ops under 25% of the SMs flagged; the time they would
    take at that occupancy and its excess over the model (collectives are not kernels
    whose grid we model: left out)."""
    point = {sym(i.name): sympy.Rational(i.value.numerator, i.value.denominator)
             for i in inputs}
    bound = result["step"]["time_s"]
    nodes = {node.name: node for node in analysis.forms.model.ops}  # result ops omit idle
    ops = [_op_occupancy(nodes[op["name"]], op, point, sms, bound) for op in result["ops"]
           if nodes[op["name"]].comm is None]
    flagged = [o for o in ops if o["flagged"]]
    claimed = sum(o["occupied_s"] for o in flagged)
    excess = sum(o["occupied_s"] - o["op_time_s"] for o in flagged)
    out = {"sms": sms, "ops": ops, "flagged": [o["name"] for o in flagged], "excess_s": excess,
           "verdict": "occupancy-limited ops" if flagged else "no hot op under 25% of the SMs"}
    out.update(bounded(claimed, step_s, explains=excess))
    if out["ruled_out"]:
        out["verdict"] = "ruled out: the flagged ops at that occupancy outlast the step"
    return out


def _op_occupancy(node: "OpNode", op: dict, point: dict, sms: float, bound: float) -> dict:
    blocks = float(default_blocks(node).xreplace(point))
    fraction = min(1.0, blocks / sms)
    op_time = op["time_s"] * op["count"]
    hard = max(op[k] for k in HARD_KEYS) * op["count"]
    hot = op_time >= HOT_SHARE * bound
    # at f of the SMs the op's work runs at f of its rate; its launches cost what they cost
    occupied = max(hard / fraction, op_time) if fraction > 0 else float("inf")
    return {"name": op["name"], "kind": op["kind"], "blocks": blocks, "sms": sms,
            "fraction": fraction, "op_time_s": op_time, "occupied_s": occupied, "hot": hot,
            "flagged": hot and fraction < OCCUPANCY_FRACTION}


def bounded(time_s: float, step_s: float, explains: float | None = None) -> dict:
    """A candidate's claimed time against the measured step: the share of the step it
    explains (`explains`, default the time itself), or ruled out when the claim alone
    outlasts the step (a hypothesis costing more than the step is already falsified)."""
    out = time_s > step_s
    part = time_s if explains is None else explains
    return {"time_s": time_s, "ruled_out": out, "share": 0.0 if out else part / step_s}


# ---- the other candidates -----------------------------------------------------------

def bandwidth(result: dict, step_s: float) -> dict:
    """Bytes / mem_bw as a ceiling: tokens/s at it and how far below it the step is."""
    bound = result["step"]["t_memory_s"]
    ratio = step_s / bound
    verdict = ("bandwidth bound" if ratio <= BANDWIDTH_BOUND_RATIO else
               "not bandwidth: look elsewhere" if ratio >= BANDWIDTH_OUT_RATIO else
               "partly bandwidth")
    out = {"bound_s": bound, "ceiling_tokens_per_s": tokens_per_step(result) / bound,
           "ratio": ratio, "verdict": verdict, **bounded(bound, step_s)}
    if out["ruled_out"]:
        out["verdict"] = "ruled out: the step moves its bytes faster than mem_bw"
    return out


def comm(result: dict, step_s: float, m: Measured) -> dict:
    """Collectives per step x time per call, as a share of the step."""
    model_calls = result["step"].get("collectives", 0) or 0
    model_time = result["step"].get("t_comm_s", 0.0) or 0.0
    calls = m.collectives if m.collectives is not None else model_calls
    per_call = m.collective_time_s if m.collective_time_s is not None else (
        model_time / model_calls if model_calls else 0.0)
    total = calls * per_call
    out = {"calls": calls, "time_per_call_s": per_call, "total_s": total,
           "measured": m.collectives is not None or m.collective_time_s is not None,
           **bounded(total, step_s)}
    out["verdict"] = ("ruled out: the collectives outlast the step (do they overlap "
                      "compute?)" if out["ruled_out"] else
                      "not comm" if out["share"] < COMM_SHARE else "comm bound")
    return out


def launch(result: dict, step_s: float, m: Measured, overhead: float,
           kernels_report: dict | None) -> dict:
    """Step time / kernels per step: the time each kernel has (launch bound under 10 us);
    kernels x launch_overhead (or the idle share nsys saw) is the time launches explain."""
    kernels = m.kernels if m.kernels is not None else (
        kernels_report["kernels_per_step"] if kernels_report else result["step"]["kernels"])
    per_kernel = step_s / kernels
    idle = kernels_report["idle_share"] if kernels_report else 0.0
    short = per_kernel < LAUNCH_BOUND_S
    out = {"kernels": kernels, "time_per_kernel_s": per_kernel, "launch_overhead_s": overhead,
           **bounded(max(kernels * overhead, idle * step_s), step_s)}
    out["fires"] = (short or idle >= IDLE_SHARE) and not out["ruled_out"]
    out["verdict"] = ("ruled out: that many launches at launch_overhead outlast the step "
                      "(the engine launches faster: CUDA graphs?)" if out["ruled_out"] else
                      "launch bound" if short else
                      "launch or host bound: the GPU idles between kernels" if out["fires"] else
                      "not launch bound: the kernels themselves are slow")
    return out


# ---- nsys: measured vs bound per target ------------------------------------------------

def target_kinds(target: str) -> tuple[str, ...]:
    """Op kinds a mapping target stands for (a group such as norm, or one kind)."""
    return GROUP_TARGETS.get(target, (target,))


def kernels_report(result: dict, kernels: list[Kernel], patterns: list[Pattern],
                   steps: int, step_s: float) -> dict:
    """Per target measured vs bound, unmatched kernels, kernel time vs the step."""
    per_target: dict[str, list[Kernel]] = {}
    unmatched = []
    for k in kernels:
        target = match(k.name, patterns)
        if target is None:
            unmatched.append(k)
        elif target != IGNORE:
            per_target.setdefault(target, []).append(k)
    rows = [_target_row(result, t, ks, steps) for t, ks in per_target.items()]
    kernel_s = sum(k.total_s for k in kernels) / steps
    return {"targets": sorted(rows, key=lambda r: -r["measured_s"]),
            "unmatched": [_kernel_json(k, steps) for k in sorted(unmatched, key=lambda k: -k.total_s)],
            "not_in_model": [r["target"] for r in rows if r["bound_s"] == 0],
            "kernel_time_s": kernel_s, "step_s": step_s,
            "idle_share": max(0.0, 1 - kernel_s / step_s), "steps": steps,
            "kernels_per_step": sum(k.instances for k in kernels) / steps}


def _target_row(result: dict, target: str, kernels: list[Kernel], steps: int) -> dict:
    measured = sum(k.total_s for k in kernels) / steps
    bound = _target_bound(result, target)
    return {"target": target, "kernels": len(kernels), "measured_s": measured,
            "bound_s": bound, "ratio": measured / bound if bound else None,
            "launches_per_step": sum(k.instances for k in kernels) / steps}


def _target_bound(result: dict, target: str) -> float:
    if target == COMM:
        return result["step"].get("t_comm_s", 0.0) or 0.0
    kinds = target_kinds(target)
    return sum(op["time_s"] * op["count"] for op in result["ops"]
               if op["name"] == target or op["kind"] in kinds)


def _kernel_json(k: Kernel, steps: int) -> dict:
    return {"name": k.name, "time_s": k.total_s / steps, "instances": k.instances, "line": k.line}


# ---- faster than the bound, Amdahl, depth ----------------------------------------------

def faster_than_bound(result: dict, step_s: float, kernels: dict | None) -> dict:
    """A step faster than the overlap floor (the step's FLOPs / peak, bytes / mem_bw,
    collective time, each whole) is impossible; one between it and the serial-kernel
    roofline is legitimate for an engine that overlaps kernels, and said so."""
    s = result["step"]
    floor, roof = s["overlap_floor_s"], s["roofline_s"]
    ops = sorted(result["ops"], key=lambda o: -o["time_s"] * o["count"])[:5]
    evidence = ([r for r in kernels["targets"] if r["ratio"] is not None and r["ratio"] < 1]
                if kernels else [{"op": o["name"], "bound_s": o["time_s"] * o["count"],
                                  "bound": o["bound"]} for o in ops])
    return {"flag": step_s < floor, "overlap_floor_s": floor, "ratio": step_s / floor,
            "roofline_s": roof, "below_roofline": step_s < roof,
            "below_launch_floor": step_s < s["time_s"], "evidence": evidence}


def amdahl(gpus: int, speedup: float) -> dict:
    """Serial fraction s = (1/S - 1/N) / (1 - 1/N) and what one more GPU buys at that s."""
    s = (1 / speedup - 1 / gpus) / (1 - 1 / gpus)
    def at(n: int) -> float:
        return 1 / (s + (1 - s) / n)
    return {"gpus": gpus, "speedup": speedup, "serial_fraction": s,
            "next_gpu_speedup": at(gpus + 1), "next_gpu_gain": at(gpus + 1) / at(gpus) - 1,
            "limit_speedup": 1 / s if s > 0 else None}


def depth(analysis: "Analysis", overrides: dict, points: list[tuple[int, float]]) -> dict:
    """Measured tokens/s at several contexts against the bound; where the ratio falls."""
    from fractions import Fraction
    rows = []
    for n, rate in sorted(points):
        r = analysis.evaluate({**overrides, "N": Fraction(n)})
        attn = sum(o["time_s"] * o["count"] for o in r["ops"] if o["kind"] in ("attention", "mla"))
        rows.append({"N": n, "measured_tokens_per_s": rate,
                     "bound_tokens_per_s": r["step"]["tokens_per_s"],
                     "ratio": rate / r["step"]["tokens_per_s"],
                     "kv_share": r["step"]["kv_bytes"] / r["step"]["bytes"],
                     "attention_share": attn / r["step"]["time_s"]})
    return {"points": rows, "diverges_at": _divergence(rows)}


def _divergence(rows: list[dict]) -> int | None:
    """First N whose measured/bound ratio is under 80% of the shortest context's."""
    ref = rows[0]["ratio"]
    return next((r["N"] for r in rows[1:] if r["ratio"] < 0.8 * ref), None)


# ---- the verdict ---------------------------------------------------------------------

def binding(cands: dict) -> tuple[str, bool]:
    """The binding ceiling, and whether it was found only by elimination.

    Within 2x of the bandwidth bound, bandwidth binds. Otherwise the candidate with the
    largest share of the step among those whose own test fires and that the measurement
    does not rule out; when none is left, the GPU is busy (kernels slower than launches),
    far from bandwidth and not in collectives: the kernels themselves are slow, which the
    contract names occupancy (by elimination).
    """
    bw = cands["bandwidth"]
    if bw["ratio"] <= BANDWIDTH_BOUND_RATIO and not bw.get("ruled_out", False):
        return "bandwidth", False
    fires = {"comm": cands["comm"]["share"] >= COMM_SHARE, "launch": cands["launch"]["fires"],
             "occupancy": cands["occupancy"]["share"] >= OCCUPANCY_SHARE}
    pool = [k for k, on in fires.items() if on and not cands[k].get("ruled_out", False)]
    if not pool:
        return "occupancy", True
    return max(pool, key=lambda k: cands[k]["share"]), False


def ranking(cands: dict) -> list[dict]:
    """The candidates by the share of the measured step each explains, largest first;
    the ruled-out ones last, with the time that ruled them out."""
    rows = [{"candidate": k, "time_s": cands[k]["time_s"], "share": cands[k]["share"],
             "ruled_out": cands[k]["ruled_out"]} for k in CANDIDATES]
    return sorted(rows, key=lambda r: (r["ruled_out"], -r["share"]))


def _kernels_per_layer(result: dict) -> float:
    """The model's kernels per layer: launches of the ops at the largest repeat count."""
    layers = max(op["count"] for op in result["ops"])
    return sum(op["kernels"] for op in result["ops"] if op["count"] == layers)


def prediction(result: dict, c: dict, which: str, step_s: float) -> dict:
    """The first change for the binding ceiling and the step the model expects after it
    (never below the model's bound after that change)."""
    change, expected, floor = {"bandwidth": _predict_bandwidth, "comm": _predict_comm,
                               "launch": _predict_launch,
                               "occupancy": _predict_occupancy}[which](result, c, step_s)
    return {"change": change, "expected_step_s": max(floor, expected)}


def _predict_bandwidth(result: dict, c: dict, step_s: float) -> tuple[str, float, float]:
    s = result["step"]
    saved = s["weight_bytes"] / (2 * s["bytes"])  # share of the bytes the change removes
    # At the achieved bandwidth (bytes / measured step) time scales with the bytes moved;
    # the bound falls by the same bytes at mem_bw.
    return ("halve the weight bytes (e.g. bf16 -> fp8 weights)", step_s * (1 - saved),
            s["time_s"] - saved * s["t_memory_s"])


def _predict_comm(result: dict, c: dict, step_s: float) -> tuple[str, float, float]:
    calls = c["comm"]["calls"]
    return (f"halve the collective calls ({calls:g} -> {calls / 2:g} per step: fuse them)",
            step_s - c["comm"]["total_s"] / 2, result["step"]["time_s"])


def _predict_launch(result: dict, c: dict, step_s: float) -> tuple[str, float, float]:
    now, model = c["launch"]["kernels"], result["step"]["kernels"]
    overhead, bound = c["launch"]["launch_overhead_s"], result["step"]["time_s"]
    idle = c["kernels"] is not None and c["kernels"]["idle_share"] >= IDLE_SHARE
    if now > model and not idle:
        per_layer = _kernels_per_layer(result)
        return (f"fuse to {per_layer:g} kernels per layer ({now:g} -> {model:g} per step)",
                step_s - (now - model) * overhead, bound)
    # A CUDA graph removes the host's launch gaps: the step shrinks to the GPU's busy time.
    busy = c["kernels"]["kernel_time_s"] if c["kernels"] else step_s - now * overhead
    return ("capture the step in a CUDA graph (no host launch gaps)", busy, bound)


def _predict_occupancy(result: dict, c: dict, step_s: float) -> tuple[str, float, float]:
    change, expected = _occupancy_change(result, c, step_s)
    return change, expected, result["step"]["time_s"]


def _occupancy_change(result: dict, c: dict, step_s: float) -> tuple[str, float]:
    occ = c["occupancy"]
    if occ["share"] >= OCCUPANCY_SHARE:
        return (f"reshape the grids of {', '.join(occ['flagged'][:4])} to fill the "
                f"{occ['sms']:g} SMs", step_s - occ["excess_s"])
    worst = _worst_target(c.get("kernels"))
    if worst is not None:
        return (f"bring the '{worst['target']}' kernels to their bound",
                step_s - (worst["measured_s"] - worst["bound_s"]))
    now, model = c["launch"]["kernels"], result["step"]["kernels"]
    if now > model:  # at the measured time per kernel, the model's kernel count
        per_layer = _kernels_per_layer(result)
        return (f"fuse to {per_layer:g} kernels per layer ({now:g} -> {model:g} per step, "
                f"{c['launch']['time_per_kernel_s'] * 1e6:.3g} us each)",
                c["launch"]["time_per_kernel_s"] * model)
    return ("bring every kernel to its op's bound", result["step"]["time_s"] + c["comm"]["total_s"])


def _worst_target(kernels: dict | None) -> dict | None:
    """The mapped target with the most measured time above its bound."""
    rows = [r for r in (kernels or {}).get("targets", []) if r["bound_s"] > 0]
    return max(rows, key=lambda r: r["measured_s"] - r["bound_s"], default=None)


def falsifier(result: dict, c: dict, which: str, step_s: float, predicted: dict) -> str:
    """The one measurement that would prove the binding verdict wrong."""
    from infest.dsl.human import duration, si
    s = result["step"]
    if which == "bandwidth":
        mem_bw = s["bytes"] / s["t_memory_s"]
        return (f"Nsight Compute DRAM throughput of the hot kernels: the step moves "
                f"{si(s['bytes'], 'B')}, {si(s['bytes'] / step_s, 'B/s')} at the measured step "
                f"against mem_bw {si(mem_bw, 'B/s')}; if the hot kernels run under half of "
                f"mem_bw ({si(mem_bw / 2, 'B/s')}), bandwidth does not bind.")
    if which == "comm":
        return (f"time the NCCL kernels per step (nsys): if they total under "
                f"{duration(COMM_SHARE * step_s)} (10% of the step) rather than "
                f"{duration(c['comm']['total_s'])}, communication does not bind.")
    if which == "launch":
        return (f"sum kernel time per step (nsys cuda_gpu_kern_sum / steps): if the GPU is busy "
                f"for more than {duration(IDLE_SHARE * step_s)} of the {duration(step_s)} step, "
                f"or the first change does not bring the step near "
                f"{duration(predicted['expected_step_s'])}, launches do not bind.")
    return _occupancy_falsifier(c, step_s)


def _occupancy_falsifier(c: dict, step_s: float) -> str:
    from infest.dsl.human import duration
    occ = c["occupancy"]
    sms = occ["sms"]
    if occ["share"] >= OCCUPANCY_SHARE:
        return (f"Nsight Compute on {occ['flagged'][0]}: if its grid already has "
                f"{OCCUPANCY_FRACTION * sms:g}+ blocks ({OCCUPANCY_FRACTION:.0%} of {sms:g} SMs), "
                f"or raising it does not cut the step by about {duration(occ['excess_s'])}, "
                f"occupancy does not bind.")
    return (f"Nsight Compute on the slowest kernels: if their grids fill {OCCUPANCY_FRACTION:.0%}+ "
            f"of the {sms:g} SMs and DRAM throughput is near mem_bw, they are not under-occupied "
            f"(the verdict came by elimination: no other ceiling explains the {duration(step_s)} step).")


def served_point(analysis: "Analysis", overrides: dict, m: Measured,
                 engine: "Serving | None") -> tuple[dict, dict | None]:
    """With a served measurement: serve's comparison, and the decode point the candidates
    are read at (B = the concurrency, N = the request's mean context ISL + (OSL - 2) / 2,
    rounded down); without one, the overrides as given."""
    if m.served is None:
        return overrides, None
    from fractions import Fraction
    from infest.compiler.analyses.served import served
    if engine is None:
        raise ValueError("a served measurement needs the Serving engine")
    report = served(engine, m.served, overrides)
    mean_context = m.served.isl + (m.served.osl - 2) // 2
    return {**overrides, "B": Fraction(report["concurrency"]), "N": Fraction(mean_context)}, report


def diagnose(analysis: "Analysis", overrides: dict, m: Measured, sms: float,
             engine: "Serving | None" = None) -> dict:
    """Every candidate with its number and verdict, the binding one, falsifier, prediction
    (and with a served measurement, serve's comparison under the server's scheduling)."""
    from infest.compiler.analyses.sensitivity import as_json, elasticities
    overrides, served_report = served_point(analysis, overrides, m, engine)
    inputs = analysis.inputs(overrides)
    result = analysis.evaluate(overrides)
    step_s = m.step_s if m.step_s is not None else tokens_per_step(result) / m.tokens_per_s
    c: dict[str, Any] = {"kernels": kernels_report(result, m.nsys, m.patterns, m.steps, step_s)
                         if m.nsys else None}
    overhead = next(float(i.value) for i in inputs if i.name == "launch_overhead")
    c.update(bandwidth=bandwidth(result, step_s), comm=comm(result, step_s, m),
             launch=launch(result, step_s, m, overhead, c["kernels"]),
             occupancy=occupancy(analysis, inputs, result, sms, step_s))
    which, eliminated = binding(c)
    check = faster_than_bound(result, step_s, c["kernels"])
    predicted = prediction(result, c, which, step_s)
    return {"model": result["model"], "hardware": result["hardware"], "phase": result["phase"],
           "inputs": result["inputs"], "bound_s": result["step"]["time_s"],
           "measured": {"step_s": step_s, "tokens_per_s": tokens_per_step(result) / step_s},
           **c, "ranking": ranking(c), "served": served_report,
           "faster_than_bound": check["flag"], "bound_check": check,
           "amdahl": [amdahl(n, s) for n, s in m.speedups],
           "depth": depth(analysis, overrides, m.depth) if m.depth else None,
           "binding": which, "by_elimination": eliminated,
           "falsifier": falsifier(result, c, which, step_s, predicted),
           "prediction": predicted,
           "sensitivity": as_json(elasticities(analysis, inputs, result))}
