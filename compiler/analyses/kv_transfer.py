"""Moving a request's KV cache from the prefill pool to the decode pool (disaggregation).

A request's cache is ISL x `memory.kv_bytes_per_token` bytes (all layers, the model's
whole cache). Each GPU of a replica holds a share f of it (`memory.kv_bytes_per_gpu` x dp
/ `memory.kv_bytes`: 1 / tp of the KV heads, 1 / pp of the layers, an MLA latent whole on
every GPU), and every GPU sends (or receives) its own share over its own link at once
(as NIXL and Mooncake move KV caches), so the transfer takes the larger of the two
pools' per-GPU shares over one link:

    time = latency + ISL x kv_bytes_per_token x max(f_prefill, f_decode) / bandwidth

The link is the node's (`link_bw`, `link_latency`) when a prefill replica and a decode
replica fit in one node together (their GPUs <= `gpus_per_node`) on the same hardware;
otherwise the network between nodes (`net_bw`, `net_latency`), the slower pool's (the
lower bandwidth, the higher latency) when the hardware differs. The estimate divides the
bandwidth by `eff_link` (the lower of the two), the bound does not. By default the move
is not overlapped with the prefill: it adds to TTFT (copy engines and NICs move it, so it
takes no compute from either pool).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class Pool:
    """What the transfer needs of one pool's layout: the share of a request's cache each
    GPU holds, its GPUs per replica, and its hardware's link fields (base units)."""

    share: Any
    gpus: Any
    hardware: str
    fields: Mapping[str, float]


def kv_share(values: Mapping[str, Any]) -> Any:
    """The share of one sequence's cache one GPU holds, from the forms at any point."""
    return values["memory.kv_bytes_per_gpu"] * values["parallel.dp"] / values["memory.kv_bytes"]


def link_fields(values: Mapping[str, Any]) -> dict[str, float]:
    """The hardware fields the transfer reads (missing ones: no such link)."""
    keys = ("link_bw", "link_latency", "gpus_per_node", "net_bw", "net_latency", "eff_link")
    return {k: float(values[k]) for k in keys if k in values}


def transfer(isl: int, per_token: float, pre: Pool, dec: Pool, key: str) -> dict[str, Any]:
    """{bytes_per_request, bytes_per_gpu, link, bandwidth, latency_s, time_s} of one
    request's cache (arrays broadcast with the pools' shares and GPUs); `key` the step
    key (estimate_s: bandwidth x eff_link, roofline_s: the datasheet's)."""
    total = isl * per_token
    per_gpu = total * np.maximum(pre.share, dec.share)
    one_node = (pre.hardware == dec.hardware) & (
        np.asarray(pre.gpus) + np.asarray(dec.gpus) <= pre.fields.get("gpus_per_node", 0))
    one_node = one_node & ("link_bw" in pre.fields)
    net_bw = min(p.fields.get("net_bw", 0.0) for p in (pre, dec))
    net_lat = max(p.fields.get("net_latency", 0.0) for p in (pre, dec))
    bw = np.where(one_node, pre.fields.get("link_bw", 0.0), net_bw)
    lat = np.where(one_node, pre.fields.get("link_latency", 0.0), net_lat)
    eff = min(p.fields.get("eff_link", 1.0) for p in (pre, dec)) if key == "estimate_s" else 1.0
    with np.errstate(divide="ignore"):
        time = np.where(bw > 0, lat + per_gpu / (bw * eff), np.inf)
    return {"bytes_per_request": total, "bytes_per_gpu": per_gpu,
            "link": np.where(one_node, "node", "network"), "bandwidth": bw * eff,
            "latency_s": lat, "time_s": time, "overlapped": False}
