"""Closed forms of a compiled model: params, memory, step bytes/FLOPs and time bounds.

Every form is a sympy expression in B, N, T, the model's input params and hardware
symbols (mem_bw, mem_capacity, launch_overhead, flops_<dtype>). Decode keeps T free
(default 1); prefill processes a prompt of N tokens per sequence with an empty cache,
so the forms are rewritten with T -> N and the cache -> 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import combinations

import sympy

from infest.compiler.core.graph import CompiledModel, OpNode
from infest.compiler.core.dtypes import peak_chain
from infest.compiler.core.keys import COST_KEYS, STEP_KEYS
from infest.compiler.core.functions import Max, floor
from infest.compiler.core.ops import L, touched_experts
from infest.compiler.passes.collectives import Links, call_time
from infest.compiler.core.estimate_rule import step_estimate
from infest.compiler.forms.estimate import (COMM_OVERLAP, STEP_OVERHEAD, SYMBOLIC, estimate_parts,
                                           op_estimate)
from infest.compiler.passes.offload import host_bytes, host_time, offload_constraints, resident_share
from infest.compiler.passes.engine import DEFAULT_ENGINE, ENGINES, Engine, fuse, split_at_collectives
from infest.compiler.passes.parallel import Layout, shard
from infest.compiler.passes.policy import Policy
from infest.compiler.core.symbols import B, N, PARALLEL, T, sym
from infest.compiler.load.fields import KV_ROOM
from infest.compiler.core.terms import HARD_KEYS, TERM_KEYS, TIME_TERMS

PHASES = ("decode", "prefill")
MEM_BW, CAPACITY, LAUNCH = sym("mem_bw"), sym("mem_capacity"), sym("launch_overhead")
# What an engine gives its KV cache (compiler/load/fields.py): engine_max_batch's room.
MEM_FRACTION, KV_FREE_FRACTION, MEM_RESERVE = (sym(k) for k in KV_ROOM)
TP, EP, PP, DP = (sym(n) for n in PARALLEL)


@dataclass
class Forms:
    """All closed forms of one model in one phase."""

    model: CompiledModel
    phase: str
    params: dict[str, sympy.Expr]
    groups: dict[str, sympy.Expr]
    memory: dict[str, sympy.Expr]
    step: dict[str, sympy.Expr]
    ops: list[dict[str, sympy.Expr]]
    bound_terms: dict[str, sympy.Expr] = field(default_factory=dict)
    parallel: dict[str, sympy.Expr] = field(default_factory=dict)
    layout: Layout = field(default_factory=lambda: Layout(None, ()))
    engine: Engine = ENGINES[DEFAULT_ENGINE]

    def all_exprs(self) -> list[sympy.Expr]:
        """Every form, flattened (for symbol collection and code generation)."""
        out = list(self.params.values()) + list(self.groups.values())
        out += list(self.memory.values()) + list(self.step.values())
        out += list(self.bound_terms.values()) + list(self.parallel.values())
        return out + [e for op in self.ops for e in op.values()]


def peak_symbol(peak: str) -> sympy.Symbol:
    """The hardware symbol of a compute peak, e.g. flops_bf16."""
    return sym(f"flops_{peak}")


def peak_form(op: OpNode) -> sympy.Expr:
    """The peak an op's math runs at, chosen by value: the first of its peak chain
    (compiler/core/dtypes.py peak_chain) the hardware computes in (non-zero), so one
    form serves every GPU: flops_fp4 where B200 has it, else flops_bf16 (weight-only)."""
    chain = [peak_symbol(p) for p in peak_chain(op.dtypes.math, op.dtypes.act)]
    if len(chain) == 1:
        return chain[0]
    return sympy.Piecewise(*((p, sympy.StrictGreaterThan(p, 0)) for p in chain[:-1]),
                           (chain[-1], True))


def build_forms(model: CompiledModel, phase: str = "decode", policy: Policy | None = None,
                links: Links = Links(), engine: Engine = ENGINES[DEFAULT_ENGINE]) -> Forms:
    """Derive every closed form for a phase ('decode' or 'prefill') as one GPU of the
    layout runs it (tp, ep, pp, dp are inputs; all 1 is one GPU) under an engine
    profile (a fusing engine runs each `fuse` group as one kernel)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    model, layout = shard(fuse(model) if engine.fused else model, policy, links)
    if engine.fused:
        model = split_at_collectives(model)
    extra = offload_constraints(model, links)
    model = replace(model, constraints=model.constraints + extra) if extra else model
    ops = [_op_forms(op, links) for op in model.ops]
    step = _step(model, ops)
    parallel = {"tp": TP, "ep": EP, "pp": PP, "dp": DP, "gpus": TP * PP * DP}
    forms = Forms(model, phase, _params(model), _groups(model), _memory(model, phase, links), step,
                  ops, _bound_terms(step), parallel, layout, engine)
    return _rewrite_prefill(forms) if phase == "prefill" else forms


# The per-instance form of each time term (compiler/core/terms.py lists them).
TERM_FORMS = {
    "compute": lambda op, links: op.cost.flops / peak_form(op),
    "memory": lambda op, links: op.cost.bytes / MEM_BW,
    "launch": lambda op, links: op.cost.kernels * LAUNCH,
    "comm": lambda op, links: (call_time(op.comm, op.cost.comm_bytes, links)
                               if op.comm else sympy.Integer(0)),
    "host": host_time,
}


def _op_forms(op: OpNode, links: Links) -> dict[str, sympy.Expr]:
    """Per-instance costs and time terms of one op (one GPU's share), plus its count."""
    c = op.cost
    forms = {"count": op.count, "flops": c.flops, "bytes": c.bytes,
             "weight_bytes": c.weight_bytes, "kv_bytes": c.kv_bytes, "act_bytes": c.act_bytes,
             "comm_bytes": c.comm_bytes, "host_bytes": host_bytes(op, links),
             "kernels": c.kernels}
    forms.update({t.key: TERM_FORMS[t.name](op, links) for t in TIME_TERMS})
    forms["time_s"] = Max(*(forms[k] for k in TERM_KEYS))
    forms.update(estimate_parts(op, links))   # what the estimate reads besides the terms
    return forms


def _total(ops: list[dict[str, sympy.Expr]], key: str) -> sympy.Expr:
    return sympy.Add(*(op["count"] * op[key] for op in ops))


def _step(model: CompiledModel, ops: list[dict[str, sympy.Expr]]) -> dict[str, sympy.Expr]:
    step = {k: _total(ops, k) for k in COST_KEYS + TERM_KEYS + ("time_s", "kernels")}
    # Serial-kernel bound: each op takes its largest hard term, ops one after another.
    step["roofline_s"] = sympy.Add(*(op["count"] * Max(*(op[k] for k in HARD_KEYS))
                                     for op in ops))
    # Overlap floor: even an engine that overlaps kernels (NanoFlow-style) must do all the
    # math, move all the bytes and finish every collective, each resource at its peak;
    # max of sums <= sum of maxes, so it never exceeds roofline_s.
    step["overlap_floor_s"] = Max(*(step[k] for k in HARD_KEYS))
    # The throughput ceiling comes from the serial-kernel bound: time_s adds the launch
    # floor, an assumption about the engine that a fused, graph-captured engine can beat.
    step["tokens_per_s"] = B * T / step["roofline_s"]
    # The estimate: each op by its kind (compiler/forms/estimate.py), the collectives'
    # share hidden by comm_overlap (compiler/core/estimate_rule.py step_estimate), plus
    # the engine's per-step overhead, a term of the estimate only.
    step["t_overhead_s"] = STEP_OVERHEAD
    step["estimate_s"] = ops_estimate(ops, model) + STEP_OVERHEAD
    step["tokens_per_s_estimate"] = B * T / step["estimate_s"]
    step["collectives"] = sympy.Add(*(op["count"] for op, node in zip(ops, model.ops)
                                      if node.comm is not None))
    step["weights_floor_s"] = _active_weight_bytes(model) / MEM_BW
    return {k: step[k] for k in STEP_KEYS}


def ops_estimate(ops: list[dict[str, sympy.Expr]], model: CompiledModel) -> sympy.Expr:
    """Sum of count x each op's estimate, comm_overlap of the smaller of its collectives'
    and its other ops' parts hidden (none where the step has no collective)."""
    each = [(op["count"] * op_estimate(node, op), node.comm is not None)
            for op, node in zip(ops, model.ops)]
    total = sympy.Add(*(e for e, _ in each))
    comm = sympy.Add(*(e for e, collective in each if collective))
    return total if comm == 0 else step_estimate(total, comm, COMM_OVERLAP, SYMBOLIC)


def _active_weight_bytes(model: CompiledModel) -> sympy.Expr:
    """Bytes of every weight a step touches on one GPU, gathers aside: the one-line
    decode floor (every stage of a pipeline runs in turn). An expert op's weights count
    once per expert the replica's B*T tokens touch, not top_k times."""
    return sympy.Add(*(_touched_bytes(op) for op in model.ops))


def _touched_bytes(op: OpNode) -> sympy.Expr:
    """One op's share of `_active_weight_bytes` (an embedding is a lookup: none)."""
    if op.kind == "embed":
        return sympy.Integer(0)
    return op.count * stored_bytes(op) * _touched_share(op) * op.weight_share


def _held_bytes(op: OpNode, links: Links, per_gpu: bool) -> sympy.Expr:
    """One op's share of `_weights` (before the / pp of per_gpu)."""
    return (op.count * stored_bytes(op) * resident_share(op, links)
            * (op.weight_share if per_gpu else 1))


# What `weight_groups` gives per group: held in memory (all GPUs), one GPU's shard before
# the pipeline's / pp, and the bytes a step touches on one GPU (weights_floor_s's).
WEIGHT_PARTS = ("held", "per_gpu", "touched")


def weight_groups(forms: Forms, links: Links) -> dict[str, dict[str, sympy.Expr]]:
    """The weight forms by parameter group (params.groups' names): summed over groups,
    `held` is memory.weights_bytes, `per_gpu` / pp is memory.weights_bytes_per_gpu and
    `touched` / mem_bw is step.weights_floor_s, term for term (the same per-op terms), so
    a sheet may show each group's share and sum them."""
    swap = {T: N, N: sympy.Integer(0)} if forms.phase == "prefill" else {}
    out: dict[str, dict[str, list[sympy.Expr]]] = {}
    for op in forms.model.ops:
        parts = out.setdefault(op.held or op.group, {k: [] for k in WEIGHT_PARTS})
        parts["held"].append(_held_bytes(op, links, False))
        parts["per_gpu"].append(_held_bytes(op, links, True))
        parts["touched"].append(_touched_bytes(op).xreplace(swap))
    return {g: {k: sympy.Add(*terms) for k, terms in parts.items()}
            for g, parts in sorted(out.items())}


def stored_bytes(op: OpNode) -> sympy.Expr:
    """Bytes of an op's stored params: its own count when a tensor has its own dtype
    (bf16 biases beside mxfp4 weights), else every param at the weights dtype."""
    if op.param_bytes is not None:
        return op.param_bytes
    w = op.dtypes.weights.bytes
    return op.params * sympy.Rational(w.numerator, w.denominator)


def _touched_share(op: OpNode) -> sympy.Expr:
    """Of an op's stored params, the share a step touches: all, or for an expert op the
    experts the replica's tokens reach."""
    if op.experts is None:
        return sympy.Integer(1)
    experts, top_k = op.experts
    return touched_experts(experts, top_k, B * T / DP) / experts


def _params(model: CompiledModel) -> dict[str, sympy.Expr]:
    """The model's params: `held` weights (a vision tower, MTP layers) are in memory and in
    their own group of params.groups, never in total, which is the model a step runs."""
    return {"total": sympy.Add(*(op.count * op.params for op in model.ops if not op.held)),
            "active": sympy.Add(*(op.count * op.params_active for op in model.ops))}


def _groups(model: CompiledModel) -> dict[str, sympy.Expr]:
    groups: dict[str, sympy.Expr] = {}
    for op in model.ops:
        if op.comm is not None:
            continue  # collectives hold no params
        group = op.held or op.group  # held weights apart: `vision`, `mtp`
        groups[group] = groups.get(group, sympy.Integer(0)) + op.count * op.params
    return dict(sorted(groups.items()))


def _kv_per_sequence(model: CompiledModel, per_gpu: bool = False) -> sympy.Expr:
    """KV bytes one sequence holds, as a function of L_ctx (tokens in its cache); per_gpu:
    the share one GPU holds (split KV heads, its pipeline stage's layers)."""
    if not per_gpu:
        return sympy.Add(*(op.count * op.kv_cache for op in model.ops))
    return sympy.Add(*(op.count * op.kv_cache * op.kv_share for op in model.ops)) / PP


def _weights(model: CompiledModel, links: Links, per_gpu: bool = False) -> sympy.Expr:
    """Bytes of every weight held in HBM (offloaded experts: only the resident share);
    per_gpu: one GPU's shard of its stage's layers (stages assumed balanced: / pp)."""
    total = sympy.Add(*(_held_bytes(op, links, per_gpu) for op in model.ops))
    return total / PP if per_gpu else total


def _memory(model: CompiledModel, phase: str, links: Links) -> dict[str, sympy.Expr]:
    weights, weights_gpu = _weights(model, links), _weights(model, links, per_gpu=True)
    per_seq, per_seq_gpu = _kv_per_sequence(model), _kv_per_sequence(model, per_gpu=True)
    kv = B * per_seq.xreplace({L: N + T})
    per_seq_at_n = per_seq_gpu.xreplace({L: N + T})
    kv_gpu = B / DP * per_seq_at_n  # each replica: B / dp sequences
    room = CAPACITY - weights_gpu
    return {"weights_bytes": weights,
            "kv_bytes_per_token": sympy.Add(*(op.count * op.kv_per_token for op in model.ops)),
            "kv_bytes": kv, "total_bytes": weights + kv,
            "weights_bytes_per_gpu": weights_gpu, "kv_bytes_per_gpu": kv_gpu,
            "total_bytes_per_gpu": weights_gpu + kv_gpu, "capacity_bytes": CAPACITY,
            "fits": sympy.Le(weights_gpu + kv_gpu, CAPACITY),
            "max_batch": DP * _max_batch(room, per_seq_at_n),
            "engine_max_batch": DP * _max_batch(engine_room(weights_gpu), per_seq_at_n),
            "max_context": _capped(_max_context(room, per_seq_gpu, phase), model, phase)}


def _capped(longest: sympy.Expr, model: CompiledModel, phase: str) -> sympy.Expr:
    """max_context within the trained context: N + T <= trained_context (a prompt of N in
    prefill). sympy's own Min would try to order the two forms: evaluate=False."""
    trained = model.trained_context
    if trained is None:
        return longest
    return sympy.Min(trained - T if phase == "decode" else trained, longest, evaluate=False)


def engine_room(weights_gpu: sympy.Expr) -> sympy.Expr:
    """The bytes an engine gives its KV cache on one GPU: kv_free_fraction of what
    mem_fraction of the capacity leaves beside the weights and the engine's reserve
    (vLLM and SGLang cap weights + KV + their own buffers at a share of the memory;
    TensorRT-LLM takes a share of the memory left free after its buffers). Shares 1 and
    reserve 0 by default: the whole room, as max_batch."""
    return KV_FREE_FRACTION * (MEM_FRACTION * CAPACITY - weights_gpu - MEM_RESERVE)


def _max_batch(room: sympy.Expr, per_seq: sympy.Expr) -> sympy.Expr:
    """Largest batch per replica with weights + b * KV(N+T) <= capacity on each GPU (0 if
    the weights alone overflow); the global max_batch is dp times this."""
    if per_seq == 0:
        return sympy.oo  # no KV cache: memory does not bound the batch
    return Max(0, floor(room / per_seq))


def _max_context(room: sympy.Expr, per_seq: sympy.Expr, phase: str) -> sympy.Expr:
    """Longest N with weights + B * KV(N+T) <= capacity, from the piecewise-linear KV(L).

    KV(L) = a*L + s + sum_w c_w * Min(L, w), s the fixed recurrent states. For any set S
    of windows assumed already full, K_S(L) = a*L + s + sum_S c_w*w + sum_notS c_w*L >=
    KV(L), with equality for the right S,
    so the largest feasible L is the max over S of the solutions of K_S(L) = room/B.
    """
    if per_seq == 0:
        return sympy.oo  # no KV cache: memory never bounds the context
    linear, states, windows = _split_windows(per_seq)
    budget = room / (B / DP)
    candidates = []
    for size in range(len(windows) + 1):
        for full in combinations(windows, size):
            slope = linear + sum((c for w, c in windows if (w, c) not in full), sympy.Integer(0))
            fixed = states + sum((c * w for w, c in full), sympy.Integer(0))
            candidates.append(_candidate(budget, fixed, slope))
    longest = floor(Max(*candidates) if len(candidates) > 1 else candidates[0])
    return Max(0, longest - T if phase == "decode" else longest)


def _candidate(budget: sympy.Expr, fixed: sympy.Expr, slope: sympy.Expr) -> sympy.Expr:
    """The longest L with fixed + slope*L <= budget; with every window full (slope 0) the
    cache stops growing: any L if the full windows fit, none if they do not."""
    if slope == 0:
        return sympy.Piecewise((sympy.oo, sympy.Le(fixed, budget)), (-1, True))
    return (budget - fixed) / slope


def _split_windows(per_seq: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr,
                                                 list[tuple[sympy.Expr, sympy.Expr]]]:
    """KV(L) -> (a, s, [(w, c_w)]) for a*L + s + sum c_w*Min(L, w): s is the fixed-size
    recurrent states (linear attention, conv), held whatever the context."""
    linear = states = sympy.Integer(0)
    windows: dict[sympy.Expr, sympy.Expr] = {}
    for coeff, factor in _l_terms(per_seq):
        if not factor.has(L):
            states += coeff * factor
        elif isinstance(factor, sympy.Min) and L in factor.args:
            w = next(a for a in factor.args if a != L)
            windows[w] = windows.get(w, sympy.Integer(0)) + coeff
        else:
            linear += coeff * factor / L
    return linear, states, sorted(windows.items(),
                                  key=lambda wc: sympy.default_sort_key(wc[0]))


def _l_terms(per_seq: sympy.Expr) -> list[tuple[sympy.Expr, sympy.Expr]]:
    """KV(L) as [(coefficient, L or Min(L, w))] without expanding the coefficients: a
    user's kv_per_token = (hidden + B)^64 would expand into thousands of terms."""
    out = []
    for term in sympy.Add.make_args(per_seq):
        coeff, factor = term.as_independent(L, as_Add=False)
        if factor.is_Add:  # an op's cache that is itself a sum: split that sum only
            out += [(coeff * c, f) for c, f in _l_terms(sympy.expand(factor, deep=False))]
        else:
            out.append((coeff, factor))
    return out


def _bound_terms(step: dict[str, sympy.Expr]) -> dict[str, sympy.Expr]:
    """The ceilings whose largest names the binding one: each time term's step total,
    memory time split by what its bytes are (weights or KV cache)."""
    split = {"weights": step["weight_bytes"] / MEM_BW, "kv": step["kv_bytes"] / MEM_BW}
    return {label: split[label] if len(t.bounds) > 1 else step[t.key]
            for t in TIME_TERMS for label in t.bounds}


def _rewrite_prefill(forms: Forms) -> Forms:
    """Prefill: a prompt of N tokens per sequence (T -> N) against an empty cache (N -> 0)."""
    swap = {T: N, N: sympy.Integer(0)}

    def sub(d: dict[str, sympy.Expr]) -> dict[str, sympy.Expr]:
        return {k: v.xreplace(swap) for k, v in d.items()}

    memory = {k: (v if k == "max_context" else v.xreplace(swap)) for k, v in forms.memory.items()}
    return Forms(forms.model, "prefill", forms.params, forms.groups, memory, sub(forms.step),
                 [sub(op) for op in forms.ops], sub(forms.bound_terms), forms.parallel,
                 forms.layout, forms.engine)
