"""Collectives: what one call costs over a group of GPUs (alpha-beta, NCCL's factors).

A call of S bytes (the full buffer, as NCCL's tests count it) over n GPUs takes

    latency + f(n) * S / bw

with NCCL's bus-bandwidth factor f: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, 1 for a point-to-point send/recv. bw and latency are
one GPU's one-direction link inside a node (`link_bw`, `link_latency`) when the group
fits in `gpus_per_node`, else the network between nodes (`net_bw`, `net_latency`).
On one GPU (n = 1) a collective does nothing: its call count (`several`) is 0 there.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from infest.compiler.core.functions import Min
from infest.compiler.core.symbols import sym

LINK_FIELDS = ("link_bw", "link_latency", "gpus_per_node")
NET_FIELDS = ("net_bw", "net_latency")


def _ring(n: sympy.Expr) -> sympy.Expr:
    return (n - 1) / n


FACTORS = {
    "all_reduce": lambda n: 2 * _ring(n),
    "all_gather": _ring,
    "reduce_scatter": _ring,
    "all_to_all": _ring,
    "send_recv": lambda n: sympy.Integer(1),
}
KINDS = tuple(FACTORS)


@dataclass(frozen=True)
class Collective:
    """One collective call site: its kind and the number of GPUs it spans."""

    kind: str
    gpus: sympy.Expr


def several(n: sympy.Expr) -> sympy.Expr:
    """1 when n >= 2 GPUs take part, 0 on one GPU (n is a whole number >= 1)."""
    return Min(n - 1, 1)


@dataclass(frozen=True)
class Links:
    """Which link fields the hardware has (None: hardware symbolic, all assumed)."""

    link: bool = True
    net: bool = True
    host: bool = True   # host_bw: a host-memory tier for expert offload (compiler/passes/offload.py)


def call_time(c: Collective, payload: sympy.Expr, links: Links) -> sympy.Expr:
    """Seconds of one call of `payload` bytes."""
    f = FACTORS[c.kind](c.gpus)
    if not links.link:
        return sympy.Integer(0)  # layouts needing a link are refused (see parallel.py)
    inside = sym("link_latency") + f * payload / sym("link_bw")
    if not links.net:
        return inside
    between = sym("net_latency") + f * payload / sym("net_bw")
    fits = sympy.Le(c.gpus, sym("gpus_per_node"), evaluate=False)  # proving it costs ~1 ms
    return sympy.Piecewise((inside, fits), (between, True))
