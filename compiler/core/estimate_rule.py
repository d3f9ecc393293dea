"""The estimate of one op instance from its evaluated pieces: one rule, three readers.

compiler/forms/estimate.py writes it symbolically (sympy Max) for `step.estimate_s`;
calibration (compiler/analyses/calibrate.py) and continuous batching's mixed steps
(compiler/analyses/continuous.py) evaluate it over numpy arrays (np.maximum); the
workbook prints the sympy form with cells in place of the pieces. Sympy-free on purpose:
the cached evaluation path (serve, plan) reads it without the symbolic stages.

An op instance's estimate is the larger of its bound `time_s` and

    launches x kernel_latency
      + max(t_compute_s x scale / eff, t_memory_s / eff_m)
      + comm_latency_s + ring_steps x coll_step_latency + (t_comm_s - comm_latency_s) / eff_link
      + t_host_s / eff_link

where eff is eff_attn for attention kernels and eff_flops otherwise, eff_m is eff_kv
for attention kernels (their bytes are the KV cache they read) and eff_mem otherwise,
launches are the
op's kernels (0 for a collective: its latency is its launch), and for a GEMM (linear,
router) scale = ceil(M / gemm_tile_m) x gemm_tile_m / M x gemm_load: its M = gemm_rows
rows pad up to whole tiles, and an expert GEMM waits for the busiest expert-parallel rank
(gemm_load); scale is 1 for other kinds. M is never 0 where it matters (no rows, no
FLOPs): the division guards it at MIN_ROWS so an empty part stays finite. The pieces
besides the time terms are op keys of their own (PART_KEYS), forms like any other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from infest.compiler.core.terms import TERM_KEYS

# Op keys the estimate reads besides the time terms: a GEMM's rows and its busiest rank's
# load over the mean (1 and 1 for other kinds), a collective's fixed latency in seconds
# and its ring steps (0 else).
PART_KEYS = ("gemm_rows", "gemm_load", "comm_latency_s", "ring_steps")
MIN_ROWS = 1e-9   # the least M a tile's padding divides by (an empty part: 0 FLOPs anyway)
# Everything one op's estimate reads from the forms, and the parameters it reads.
ESTIMATE_OP_KEYS = ("time_s", "kernels") + TERM_KEYS + PART_KEYS
ESTIMATE_PARAMS = ("eff_mem", "eff_flops", "eff_attn", "eff_kv", "eff_link", "kernel_latency",
                   "coll_step_latency", "gemm_tile_m")
# Every runner lists these as inputs, whether or not its forms use them (a model without
# collectives has no ring step): the estimate's parameters, the per-step overhead and
# TTFT's per-request overhead, which no form uses (compiler/analyses/continuous.py
# `latencies` reads it beside the forms). So every one is settable and in the workbook.
ALWAYS_INPUTS = ESTIMATE_PARAMS + ("step_overhead", "request_overhead")
# Op kinds whose math runs at eff_attn (FlashAttention-class kernels), and the GEMMs.
ATTENTION_KINDS = frozenset({"attention", "mla", "indexer"})
GEMM_KINDS = frozenset({"linear", "router"})


@dataclass(frozen=True)
class Kind:
    """What the estimate needs to know of an op's kind: 1 (or a 0/1 array) where it is
    an attention kernel, a collective, a GEMM."""

    attention: Any
    collective: Any
    gemm: Any

    @classmethod
    def of(cls, kind: str, collective: bool) -> "Kind":
        """From an op's kind name and whether it is a collective."""
        return cls(int(kind in ATTENTION_KINDS), int(collective), int(kind in GEMM_KINDS))


@dataclass(frozen=True)
class Math:
    """The functions the rule needs: sympy's Max and ceiling, or numpy's."""

    maximum: Callable[[Any, Any], Any]
    ceil: Callable[[Any], Any]


def op_estimate(v: Mapping[str, Any], p: Mapping[str, Any], kind: Kind, f: Math) -> Any:
    """One instance's estimate (module docstring) from its pieces `v` (ESTIMATE_OP_KEYS)
    and parameters `p` (ESTIMATE_PARAMS)."""
    eff = kind.attention * p["eff_attn"] + (1 - kind.attention) * p["eff_flops"]
    eff_m = kind.attention * p["eff_kv"] + (1 - kind.attention) * p["eff_mem"]
    rows, tile = v["gemm_rows"], p["gemm_tile_m"]
    padded = f.ceil(rows / tile) * tile / f.maximum(rows, MIN_ROWS) * v["gemm_load"]
    scale = kind.gemm * padded + (1 - kind.gemm)
    work = f.maximum(v["t_compute_s"] * scale / eff, v["t_memory_s"] / eff_m)
    latency = v["comm_latency_s"]
    comm = latency + v["ring_steps"] * p["coll_step_latency"] + (v["t_comm_s"] - latency) / p["eff_link"]
    launches = (1 - kind.collective) * v["kernels"] * p["kernel_latency"]
    return f.maximum(v["time_s"], launches + work + comm + v["t_host_s"] / p["eff_link"])


def _numeric() -> Math:
    import numpy as np     # numpy only where the numbers are evaluated
    return Math(np.maximum, np.ceil)


NUMERIC = _numeric()       # the rule over numpy arrays (calibration, continuous batching)
