"""The estimate's pieces of one op, from its kind (docs/physics.md, "Estimate beside the
bound"); the rule combining them is compiler/core/estimate_rule.py, the
parameters are fields of compiler/load/fields.py (role "estimate" and the efficiencies).

- gemm_rows: a GEMM's (linear, router) rows M, which pad up to whole tiles of
  gemm_tile_m rows, ceil(M / tm) x tm / M (an expert GEMM: M = the routed rows over the
  experts they touch, each expert its own tiles); 1 for other kinds;
- gemm_cols: a GEMM's output columns N on one GPU (d_out, over tp where the pass splits
  its columns), which pad up to whole tiles of gemm_tile_n; 1 for other kinds;
- gemm_groups: the GEMMs one launch runs: 1, or an expert GEMM's touched experts among
  the experts / ep one GPU holds; with M and N they make the output tiles the GPU's SMs
  run in waves;
- gemm_load: an expert GEMM waits for the busiest expert-parallel rank, min(ep, 1 +
  moe_skew x sqrt(2 ln(ep) / r)) times the mean load r of a rank; 1 for other ops;
- comm_latency_s: a collective's fixed latency (the bound's per-call latency);
- ring_steps: a collective's latency steps (all-reduce 2(n - 1), all-gather,
  reduce-scatter and all-to-all n - 1, send/recv 1), each coll_step_latency.

A step's estimate is the sum over ops of count x the op's estimate, plus the per-step
engine overhead `t_overhead_s` (= step_overhead); TTFT adds request_overhead once per
request (compiler/analyses/continuous.py `latencies`, serve's static batching).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import sympy

from infest.compiler.core.estimate_rule import ESTIMATE_PARAMS, GEMM_KINDS, MIN_ROWS, Kind, Math
from infest.compiler.core.estimate_rule import op_estimate as combine
from infest.compiler.core.functions import Max, Min
from infest.compiler.core.ops import touched_experts
from infest.compiler.core.symbols import B, T, sym
from infest.compiler.passes.collectives import Links, call_time

if TYPE_CHECKING:
    from infest.compiler.core.graph import OpNode

TP, EP, DP = sym("tp"), sym("ep"), sym("dp")
STEP_OVERHEAD, REQUEST_OVERHEAD = sym("step_overhead"), sym("request_overhead")
POLL_INTERVAL = sym("poll_interval")
COMM_OVERLAP = sym("comm_overlap")
PARAMS = {name: sym(name) for name in ESTIMATE_PARAMS}


def _max(*args: object) -> sympy.Expr:
    """Max over sympy values, a float constant of the rule (MIN_ROWS) made exact."""
    return Max(*(sympy.Rational(str(a)) if isinstance(a, float) else a for a in args))


def _is_zero(x: sympy.Expr) -> sympy.Expr:
    """1 where x is 0, else 0 (the workbook's IF(x=0,1,0))."""
    return sympy.Piecewise((1, sympy.Eq(x, 0)), (0, True))


SYMBOLIC = Math(_max, lambda x: sympy.ceiling(x, evaluate=False),
                lambda x: sympy.floor(x, evaluate=False), Min, _is_zero)


def ring_steps(kind: str, gpus: sympy.Expr) -> sympy.Expr:
    """Latency steps of a ring collective over `gpus` GPUs (NCCL's ring algorithm)."""
    if kind == "all_reduce":
        return 2 * (gpus - 1)
    return sympy.Integer(1) if kind == "send_recv" else gpus - 1


def tile_padding(rows: sympy.Expr, cols: sympy.Expr = sympy.Integer(1),
                 groups: sympy.Expr = sympy.Integer(1)) -> sympy.Expr:
    """A GEMM's time on whole tiles in whole waves over its ideal, as the estimate's rule
    writes it (compiler/core/estimate_rule.py gemm_scale): >= 1; 1 when M and N are
    multiples of the tile and the tiles fill whole waves of the GPU's SMs."""
    v = {"gemm_rows": rows, "gemm_cols": cols, "gemm_groups": groups,
         "gemm_load": sympy.Integer(1), "t_compute_s": sympy.Integer(1)}
    zero = {k: sympy.Integer(0) for k in ("t_memory_s", "comm_latency_s", "ring_steps",
                                            "t_comm_s", "kernels", "t_host_s", "time_s")}
    return combine({**v, **zero}, {**PARAMS, "eff_flops": sympy.Integer(1)},
                   Kind(0, 0, 1), SYMBOLIC)


def busiest_rank(tokens: sympy.Expr, top_k: sympy.Expr) -> sympy.Expr:
    """The busiest of ep expert-parallel ranks over the mean, for `tokens` tokens each
    routed to top_k experts: each rank's load is about Binomial(tokens x k, 1/ep), the
    largest of ep such about mean + sqrt(2 mean ln ep) (a skew input scales the excess),
    and never more than ep times the mean (one rank takes every copy)."""
    # an empty part (no tokens) divides by MIN_ROWS, not 0: its load is then 1 or ep, finite
    mean = _max(tokens * top_k / EP, MIN_ROWS)
    # unevaluated: sympy would split the root over the (positive) factors, twice as long
    excess = sym("moe_skew") * sympy.Pow(2 * sympy.log(EP) / mean, sympy.Rational(1, 2),
                                         evaluate=False)
    return Min(EP, 1 + excess)


def expert_tokens() -> sympy.Expr:
    """Tokens reaching one copy of the experts (a copy spans max(tp, ep) GPUs)."""
    return B * T * Max(TP, EP) / (TP * DP)


def gemm_rows(node: "OpNode") -> sympy.Expr:
    """A GEMM's rows M (an expert GEMM: the routed rows over the experts they touch, each
    its own GEMM); 1 for other kinds (the rule ignores it there)."""
    if node.kind not in GEMM_KINDS:
        return sympy.Integer(1)
    if node.experts is None:
        return B / DP if node.last_token else B * T / DP
    experts, top_k = node.experts
    tokens = expert_tokens()
    # no tokens: no rows (the division guarded at MIN_ROWS as in the rule)
    return tokens * top_k / _max(touched_experts(experts, top_k, tokens), MIN_ROWS)


def gemm_cols(node: "OpNode") -> sympy.Expr:
    """A GEMM's output columns N on one GPU; 1 for other kinds (the rule ignores it)."""
    if node.kind not in GEMM_KINDS:
        return sympy.Integer(1)
    return node.args["d_out"] * node.cols_share


def gemm_groups(node: "OpNode") -> sympy.Expr:
    """The GEMMs one launch of the op runs: an expert GEMM's touched experts among the
    experts / ep one GPU holds (each expert its own tiles), else 1."""
    if node.kind not in GEMM_KINDS or node.experts is None:
        return sympy.Integer(1)
    experts, top_k = node.experts
    tokens = expert_tokens()
    return touched_experts(experts, top_k, tokens) / EP


def gemm_load(node: "OpNode") -> sympy.Expr:
    """An expert GEMM's busiest rank over the mean (busiest_rank); 1 for other ops."""
    if node.kind not in GEMM_KINDS or node.experts is None:
        return sympy.Integer(1)
    experts, top_k = node.experts
    return busiest_rank(expert_tokens(), top_k)


def estimate_parts(node: "OpNode", links: Links) -> dict[str, sympy.Expr]:
    """The op keys the estimate reads besides the time terms (estimate_rule.PART_KEYS)."""
    zero = sympy.Integer(0)
    fixed = call_time(node.comm, zero, links) if node.comm else zero
    steps = ring_steps(node.comm.kind, node.comm.gpus) if node.comm else zero
    return {"gemm_rows": gemm_rows(node), "gemm_cols": gemm_cols(node),
            "gemm_groups": gemm_groups(node), "gemm_load": gemm_load(node),
            "comm_latency_s": fixed, "ring_steps": steps}


def op_estimate(node: "OpNode", op: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """One instance's estimate (compiler/core/estimate_rule.py) from its forms `op`,
    which carry the time terms and estimate_parts; never below its bound `time_s`."""
    return combine(op, PARAMS, Kind.of(node.kind, node.comm is not None), SYMBOLIC)
