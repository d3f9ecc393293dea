"""Expert offload: routed experts kept in host memory, a cache of them in HBM.

Two inputs describe the tier: `gpu_experts`, the routed experts of each MoE layer held
in HBM (default: all of them, no offload), and `hit_rate` (default 0), a measured cache
hit rate when routing is skewed. The cache hit rate is the larger of the cache's share
of the experts, gpu_experts / E (what uniform routing gives a cache of any experts), and
`hit_rate`. Each step then moves the experts it touches but misses over the host link:

    host bytes = (1 - hit) x (weight bytes the step's tokens touch in that op)
    t_host     = host bytes / host_bw        (a hard term: the link's datasheet rate)

e.g. Qwen3-30B-A3B in bf16: one expert is 3 x 2048 x 768 x 2 B = 9.4 MB. Memory holds
only the resident share of the expert weights. Hardware without `host_bw` has no host
tier: the term is 0 and the inputs do not exist.
"""
from __future__ import annotations

import sympy

from infest.compiler.passes.collectives import Links
from infest.compiler.core.constraints import Constraint
from infest.compiler.core.functions import Max
from infest.compiler.core.symbols import sym

GPU_EXPERTS, HIT_RATE, HOST_BW = sym("gpu_experts"), sym("hit_rate"), sym("host_bw")
OFFLOAD_INPUTS = ("gpu_experts", "hit_rate")


def offloadable(op, links: Links) -> bool:
    """A routed expert op (it holds weights) on hardware with a host link."""
    return links.host and op.experts is not None and op.params != 0


def resident_share(op, links: Links) -> sympy.Expr:
    """The share of an op's expert weights held in HBM: min(gpu_experts, E) / E."""
    if not offloadable(op, links):
        return sympy.Integer(1)
    experts = op.experts[0]
    return sympy.Min(GPU_EXPERTS, experts, evaluate=False) / experts


def host_bytes(op, links: Links) -> sympy.Expr:
    """Bytes one instance of the op fetches over the host link per step (its misses)."""
    if not offloadable(op, links):
        return sympy.Integer(0)
    hit = Max(resident_share(op, links), HIT_RATE)
    return (1 - hit) * op.cost.weight_bytes


def host_time(op, links: Links) -> sympy.Expr:
    """t_host of one instance: its misses over host_bw."""
    moved = host_bytes(op, links)
    return moved / HOST_BW if moved != 0 else sympy.Integer(0)


def offload_constraints(model, links: Links) -> list[Constraint]:
    """hit_rate is a rate (0..1) and gpu_experts a whole number of experts."""
    if not any(offloadable(op, links) for op in model.ops):
        return []
    return [Constraint("whole", GPU_EXPERTS, None, "gpu_experts", None,
                       "a whole number of experts per layer"),
            Constraint("le", HIT_RATE, sympy.Integer(1), "hit_rate <= 1", None,
                       "a cache hit rate is between 0 and 1")]


def default_gpu_experts(model, defaults: dict) -> int | None:
    """All routed experts resident: the largest expert count of the model's MoE ops at
    the inputs' defaults (name -> Fraction; None when it is not a plain number)."""
    exact = {sym(n): sympy.Rational(v.numerator, v.denominator) for n, v in defaults.items()}
    counts = [sympy.Integer(e) if isinstance(e, int) else e.xreplace(exact)
              for e in (op.experts[0] for op in model.ops if op.experts is not None)]
    if not counts or not all(c.is_number for c in counts):
        return None
    return int(max(counts))
