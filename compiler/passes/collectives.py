"""Collectives: what one call costs over a group of GPUs (alpha-beta, NCCL's factors).

A call of S bytes (the full buffer, as NCCL's tests count it) over n GPUs takes

    latency + f(n) * S / bw

with NCCL's bus-bandwidth factor f: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, 1 for a point-to-point send/recv. bw and latency are
one GPU's one-direction link inside a node (`link_bw`, `link_latency`) when the group
fits in `gpus_per_node`, else the network between nodes (`net_bw`, `net_latency`).
On one GPU (n = 1) a collective does nothing: its call count (`several`) is 0 there.

Inside a node whose switch reduces in the network (NVLink SHARP, `nvls` = 1: third- and
fourth-generation NVSwitch), an all-reduce's factor is 1, below the ring's 2(n-1)/n for
n > 2: each GPU sends its buffer to the switch once, which sums the copies and
multicasts the sums back (NCCL's NVLS algorithm). No all-reduce moves less: every
element's sum needs each GPU's share of it (one send) and each GPU needs every sum (one
receive). All-gather and reduce-scatter move (n-1)/n either way; between nodes the
ring's factor stays.

An all-to-all that carries k routed copies of each token (an MoE dispatch or combine)
past one node sends each token over the network once per node it reaches, not once per
copy: an engine that forwards inside the node over the link (DeepEP's normal kernels)
does so, and the bound assumes the best algorithm. With M = n / gpus_per_node nodes and
k uniform choices, a token reaches on average (M - 1)(1 - (1 - 1/M)^k) other nodes
(the expected distinct bins of k draws, less its own): the network carries that many
copies of each token in place of (n - 1)/n x k; the forwarding inside the node (the
usual (n - 1)/n share of the payload over the link) overlaps it, so the call takes the
longer of the two.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from infest.compiler.core.functions import Max, Min
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
    copies: sympy.Expr = sympy.Integer(1)   # routed copies of each token in the payload


def several(n: sympy.Expr) -> sympy.Expr:
    """1 when n >= 2 GPUs take part, 0 on one GPU (n is a whole number >= 1)."""
    return Min(n - 1, 1)


@dataclass(frozen=True)
class Links:
    """Which link fields the hardware has (None: hardware symbolic, all assumed)."""

    link: bool = True
    net: bool = True
    host: bool = True   # host_bw: a host-memory tier for expert offload (compiler/passes/offload.py)


def _network_share(c: Collective, f: sympy.Expr) -> sympy.Expr:
    """Of a call's payload, the share that crosses the network: f, or for k routed copies
    per token, the expected distinct other nodes a token reaches over k."""
    if c.copies == 1:
        return f
    nodes = c.gpus / sym("gpus_per_node")
    return (nodes - 1) * (1 - (1 - 1 / nodes) ** c.copies) / c.copies


def inside_factor(c: Collective, f: sympy.Expr) -> sympy.Expr:
    """A call's bus factor inside a node: f, or for an all-reduce f moved towards the
    switch's 1 by the share `nvls` (module docstring)."""
    return f + sym("nvls") * (1 - f) if c.kind == "all_reduce" else f


def call_time(c: Collective, payload: sympy.Expr, links: Links) -> sympy.Expr:
    """Seconds of one call of `payload` bytes."""
    f = FACTORS[c.kind](c.gpus)
    if not links.link:
        return sympy.Integer(0)  # layouts needing a link are refused (see parallel.py)
    inside = sym("link_latency") + inside_factor(c, f) * payload / sym("link_bw")
    if not links.net:
        return inside
    between = sym("net_latency") + _network_share(c, f) * payload / sym("net_bw")
    if c.copies != 1:  # deduplicated per node, forwarded inside it: the longer leg
        between = Max(between, inside)
    fits = sympy.Le(c.gpus, sym("gpus_per_node"), evaluate=False)  # proving it costs ~1 ms
    return sympy.Piecewise((inside, fits), (between, True))
