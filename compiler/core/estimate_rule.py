"""The estimate of one op instance from its evaluated pieces: one rule, three readers.

compiler/forms/estimate.py writes it symbolically (sympy Max) for `step.estimate_s`;
calibration (compiler/analyses/calibrate.py) and continuous batching's mixed steps
(compiler/analyses/continuous.py) evaluate it over numpy arrays (np.maximum); the
workbook prints the sympy form with cells in place of the pieces. Sympy-free on purpose:
the cached evaluation path (serve, plan) reads it without the symbolic stages.

An op instance's estimate is the larger of its bound `time_s` and

    launches x kernel_latency
      + max(t_compute_s x scale / eff, t_memory_s / min(eff_m, sm_share))
      + comm_latency_s + coll_latency + ring_steps x coll_step_latency
      + (t_comm_s - comm_latency_s) / eff_link + t_host_s / eff_link

where eff is eff_attn for attention kernels and eff_flops otherwise, eff_m is eff_kv
for attention kernels (their bytes are the KV cache they read) and eff_mem otherwise,
sm_share is the share of mem_bw the GPU's SMs can pull at the engine's bytes per SM per
clock cycle, sms x clock x sm_bytes_per_cycle / mem_bw (1 where clock is 0, not given:
no such ceiling; a kernel that issues its loads slowly, e.g. llama.cpp's f16 mat-vec,
streams at so many bytes per SM-cycle whatever the HBM behind it), launches are the
op's kernels (0 for a collective: its latency is its launch), coll_latency is what an
engine's collective call adds to the bound's per-call floor comm_latency_s (0 for other
ops), and for a GEMM (linear, router) scale = `gemm_scale` (1 for other kinds): the GEMM's
time on whole tiles in whole waves over its ideal. Its M = gemm_rows rows and N =
gemm_cols columns pad up to whole tiles of gemm_tile_m x gemm_tile_n; its gemm_groups GEMMs (an expert GEMM: the touched
experts one GPU holds) make tiles = groups x ceil(M / tm) x ceil(N / tn) output tiles,
one per SM at a time. Fewer tiles than SMs are split along K (split-K, as cuBLAS and
CUTLASS do for skinny GEMMs) into split = max(1, floor(sms / tiles)) pieces each, so a
GEMM runs waves = ceil(tiles / sms) waves of sms tiles and wastes the idle SMs of its
last: fill = waves x sms / (tiles x split) >= 1. An expert GEMM then waits for the
busiest expert-parallel rank (gemm_load). M, N and the tiles are never 0 where it matters
(no rows, no FLOPs): the divisions guard them at MIN_ROWS so an empty part stays finite.
The pieces besides the time terms are op keys of their own (PART_KEYS), forms like any
other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from infest.compiler.core.terms import TERM_KEYS

# Op keys the estimate reads besides the time terms: a GEMM's rows, columns on one GPU,
# GEMMs per launch and its busiest rank's load over the mean (1 each for other kinds), a
# collective's fixed latency in seconds and its ring steps (0 else).
PART_KEYS = ("gemm_rows", "gemm_cols", "gemm_groups", "gemm_load", "comm_latency_s",
             "ring_steps")
MIN_ROWS = 1e-9   # the least M a tile's padding divides by (an empty part: 0 FLOPs anyway)
# Parameter keys carrying eff_mem and eff_kv already under the per-SM ceiling (op_estimate).
CAPPED = ("eff_mem_sm", "eff_kv_sm")
# Everything one op's estimate reads from the forms, and the parameters it reads.
ESTIMATE_OP_KEYS = ("time_s", "kernels") + TERM_KEYS + PART_KEYS
# The hardware's own fields the rule reads (a GPU's SMs run a GEMM's tiles in waves; SMs,
# clock and HBM bandwidth give the per-SM ceiling of memory-bound kernels).
HARDWARE_PARAMS = ("sms", "clock", "mem_bw")
ESTIMATE_PARAMS = ("eff_mem", "eff_flops", "eff_attn", "eff_kv", "eff_link", "kernel_latency",
                   "coll_latency", "coll_step_latency", "gemm_tile_m", "gemm_tile_n",
                   "sm_bytes_per_cycle") + HARDWARE_PARAMS
# Every runner lists these as inputs, whether or not its forms use them (a model without
# collectives has no ring step and no overlap of them): the estimate's parameters, the
# per-step overhead, the collectives' overlap (step_estimate), TTFT's per-request
# overhead and the scheduler's poll interval, which no form uses (compiler/analyses/
# continuous.py `arrival_inputs` reads them beside the forms). So every one is settable
# and in the workbook.
ALWAYS_INPUTS = ESTIMATE_PARAMS + ("step_overhead", "request_overhead", "poll_interval",
                                   "comm_overlap")
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
    """The functions the rule needs: sympy's Max, ceiling, floor and Min, or numpy's, and
    `is_zero` (1 where a value is 0, else 0: sympy's Piecewise, numpy's comparison)."""

    maximum: Callable[[Any, Any], Any]
    ceil: Callable[[Any], Any]
    floor: Callable[[Any], Any]
    minimum: Callable[[Any, Any], Any]
    is_zero: Callable[[Any], Any]


def step_estimate(total: Any, comm: Any, overlap: Any, f: Math) -> Any:
    """A step's estimate from the sum of count x each op's estimate (`total`) and the
    collectives' part of it (`comm`): a `comm_overlap` share of the smaller of the two
    sides is hidden (two-batch overlap runs one micro-batch's collectives while the other
    computes, so at full overlap the step takes the longer side). The result is never
    below the overlap floor: max(comm, total - comm) is at least every hard term's sum."""
    return total - overlap * f.minimum(comm, total - comm)


def gemm_scale(v: Mapping[str, Any], p: Mapping[str, Any], f: Math) -> Any:
    """A GEMM's time on whole tiles in whole waves of the GPU's SMs, and at its busiest
    expert rank, over its ideal time (module docstring); >= 1."""
    rows, cols, tm, tn, sms = (v["gemm_rows"], v["gemm_cols"], p["gemm_tile_m"],
                               p["gemm_tile_n"], p["sms"])
    tiles = f.maximum(v["gemm_groups"] * f.ceil(rows / tm) * f.ceil(cols / tn), MIN_ROWS)
    split = f.maximum(f.floor(sms / tiles), 1)    # split-K: fewer tiles than SMs
    # padding x fill = (row tiles x tm / M)(column tiles x tn / N) x waves x sms /
    # (tiles x split), and tiles = groups x row tiles x column tiles: the tile counts cancel.
    # (N >= 1 on any GEMM; M and the groups are 0 in an empty part: guarded together)
    busy = f.maximum(rows * v["gemm_groups"], MIN_ROWS) * cols
    return tm * tn * f.ceil(tiles / sms) * sms / (busy * split) * v["gemm_load"]


def sm_share(p: Mapping[str, Any], f: Math) -> Any:
    """The share of mem_bw the GPU's SMs stream at sm_bytes_per_cycle each: sms x clock x
    bytes per cycle / mem_bw, at most 1; 1 where clock is 0 (not given: no such ceiling)."""
    ceiling = p["sms"] * p["clock"] * p["sm_bytes_per_cycle"] / p["mem_bw"]
    return f.minimum(1, ceiling + f.is_zero(p["clock"]))


def memory_shares(p: Mapping[str, Any], f: Math) -> tuple[Any, Any]:
    """eff_mem and eff_kv under the per-SM ceiling: min(each, sm_share)."""
    share = sm_share(p, f)
    return f.minimum(p["eff_mem"], share), f.minimum(p["eff_kv"], share)


def op_estimate(v: Mapping[str, Any], p: Mapping[str, Any], kind: Kind, f: Math) -> Any:
    """One instance's estimate (module docstring) from its pieces `v` (ESTIMATE_OP_KEYS)
    and parameters `p` (ESTIMATE_PARAMS; or with CAPPED, eff_mem and eff_kv already under
    the per-SM ceiling: the workbook's two cells, which every op reads)."""
    eff = kind.attention * p["eff_attn"] + (1 - kind.attention) * p["eff_flops"]
    mem, kv = (p[CAPPED[0]], p[CAPPED[1]]) if CAPPED[0] in p else memory_shares(p, f)
    eff_m = kind.attention * kv + (1 - kind.attention) * mem    # attention is 0 or 1
    scale = kind.gemm * gemm_scale(v, p, f) + (1 - kind.gemm)
    work = f.maximum(v["t_compute_s"] * scale / eff, v["t_memory_s"] / eff_m)
    latency = v["comm_latency_s"]
    fixed = latency + kind.collective * p["coll_latency"] + v["ring_steps"] * p["coll_step_latency"]
    comm = fixed + (v["t_comm_s"] - latency) / p["eff_link"]
    launches = (1 - kind.collective) * v["kernels"] * p["kernel_latency"]
    return f.maximum(v["time_s"], launches + work + comm + v["t_host_s"] / p["eff_link"])


def _numeric() -> Math:
    import numpy as np     # numpy only where the numbers are evaluated
    return Math(np.maximum, np.ceil, np.floor, np.minimum, lambda x: np.equal(x, 0) * 1.0)


NUMERIC = _numeric()       # the rule over numpy arrays (calibration, continuous batching)
