"""The estimate of one op instance, term by term, from the op's kind (DOMAIN.md, "Queues,
budgets and what real kernels cost"); the parameters are compiler/load/estimate_fields.py.

An op's estimate is the largest of

- its bound `time_s` (so the estimate is never below the bound), and
- kernels x kernel_latency + max(compute, memory) + collective + host, where
  - compute = t_compute_s x gemm_scale / efficiency: eff_attn for attention kernels
    (attention, mla, indexer), eff_flops for everything else; `gemm_scale` is 1 except
    for GEMMs (linear, router): the M rows pad up to whole tiles of gemm_tile_m rows,
    ceil(M / tm) x tm / M (an expert GEMM: M = the routed rows over the experts they
    touch, each expert its own tiles), and an expert GEMM waits for the busiest expert-parallel rank,
    min(ep, 1 + moe_skew x sqrt(2 ln(ep) / r)) times the mean load r of a rank;
  - memory = t_memory_s / eff_mem;
  - collective = its fixed latency (the bound's per-call latency) + ring steps x
    coll_step_latency (all-reduce 2(n - 1), all-gather, reduce-scatter and all-to-all
    n - 1, send/recv 1) + its payload time / eff_link;
  - host = t_host_s / eff_link.

A step's estimate is the sum over ops of count x this, plus the per-step engine overhead
`t_overhead_s` (= step_overhead); TTFT adds request_overhead once per request (serve).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

from infest.compiler.core.functions import Max, Min
from infest.compiler.core.ops import touched_experts
from infest.compiler.core.symbols import B, T, sym
from infest.compiler.passes.collectives import Links, call_time

if TYPE_CHECKING:
    from infest.compiler.core.graph import OpNode

GEMM_KINDS = frozenset({"linear", "router"})
ATTENTION_KINDS = frozenset({"attention", "mla", "indexer"})
TP, EP, DP = sym("tp"), sym("ep"), sym("dp")
KERNEL_LATENCY, STEP_OVERHEAD = sym("kernel_latency"), sym("step_overhead")
REQUEST_OVERHEAD = sym("request_overhead")


def ring_steps(kind: str, gpus: sympy.Expr) -> sympy.Expr:
    """Latency steps of a ring collective over `gpus` GPUs (NCCL's ring algorithm)."""
    if kind == "all_reduce":
        return 2 * (gpus - 1)
    return sympy.Integer(1) if kind == "send_recv" else gpus - 1


def tile_padding(rows: sympy.Expr) -> sympy.Expr:
    """M rows padded to whole tiles of gemm_tile_m rows, over M: ceil(M / tm) x tm / M
    (>= 1; 1 when M is a multiple of the tile)."""
    tile = sym("gemm_tile_m")
    return sympy.ceiling(rows / tile, evaluate=False) * tile / rows


def busiest_rank(tokens: sympy.Expr, top_k: sympy.Expr) -> sympy.Expr:
    """The busiest of ep expert-parallel ranks over the mean, for `tokens` tokens each
    routed to top_k experts: each rank's load is about Binomial(tokens x k, 1/ep), the
    largest of ep such about mean + sqrt(2 mean ln ep) (a skew input scales the excess),
    and never more than ep times the mean (one rank takes every copy)."""
    mean = tokens * top_k / EP
    excess = sym("moe_skew") * sympy.sqrt(2 * sympy.log(EP) / mean)
    return Min(EP, 1 + excess)


def gemm_scale(node: "OpNode") -> sympy.Expr:
    """How much longer than FLOPs / peak a GEMM's math runs: tile padding of its rows,
    and for an expert GEMM the busiest rank's load over the mean."""
    if node.kind not in GEMM_KINDS:
        return sympy.Integer(1)
    if node.experts is None:
        return tile_padding(B / DP if node.last_token else B * T / DP)
    experts, top_k = node.experts
    tokens = B * T * Max(TP, EP) / (TP * DP)   # tokens reaching one copy of the experts
    touched = touched_experts(experts, top_k, tokens)
    # A grouped GEMM pads each expert it runs: the touched experts share the routed rows.
    return tile_padding(tokens * top_k / touched) * busiest_rank(tokens, top_k)


def collective(node: "OpNode", op: dict[str, sympy.Expr], links: Links) -> sympy.Expr:
    """A collective's estimate: fixed latency + ring steps + payload time / eff_link."""
    if node.comm is None:
        return sympy.Integer(0)
    fixed = call_time(node.comm, sympy.Integer(0), links)
    steps = ring_steps(node.comm.kind, node.comm.gpus) * sym("coll_step_latency")
    return fixed + steps + (op["t_comm_s"] - fixed) / sym("eff_link")


def op_estimate(node: "OpNode", op: dict[str, sympy.Expr], links: Links) -> sympy.Expr:
    """One instance's estimate (module docstring); never below its bound `time_s`."""
    eff = sym("eff_attn") if node.kind in ATTENTION_KINDS else sym("eff_flops")
    work = Max(op["t_compute_s"] * gemm_scale(node) / eff, op["t_memory_s"] / sym("eff_mem"))
    kernels = op["kernels"] * KERNEL_LATENCY if node.comm is None else sympy.Integer(0)
    serial = kernels + work + collective(node, op, links) + op["t_host_s"] / sym("eff_link")
    return Max(op["time_s"], serial)


def op_parts(node: "OpNode", links: Links) -> dict[str, sympy.Expr]:
    """The pieces of `op_estimate` that are not time terms, for calibration to recombine
    at other parameter values: the GEMM scale, whether eff_attn applies (1) or eff_flops
    (0), and a collective's fixed latency and ring steps (0 for a compute op)."""
    fixed = call_time(node.comm, sympy.Integer(0), links) if node.comm else sympy.Integer(0)
    steps = ring_steps(node.comm.kind, node.comm.gpus) if node.comm else sympy.Integer(0)
    return {"scale": gemm_scale(node), "attn": sympy.Integer(int(node.kind in ATTENTION_KINDS)),
            "comm_fixed": fixed, "comm_steps": steps}
