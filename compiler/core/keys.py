"""The keys of every evaluated value (`eval --json` sections), in one place.

Sympy-free on purpose: the cached evaluation path (compiler/backend/runner.py) reads these
without importing the compiler's symbolic stages.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from infest.compiler.core.terms import BOUND_TERMS, TERM_KEYS

BUILTINS = ("B", "N", "T")
# The param a spec states its trained context with (tokens a sequence may hold).
TRAINED_CONTEXT = "trained_context"
# Parallel degrees: positive integers, default 1, set like any input (--set tp=8).
PARALLEL = ("tp", "ep", "pp", "dp")
MEMORY_KEYS = ("weights_bytes", "kv_bytes_per_token", "kv_bytes", "total_bytes",
               "weights_bytes_per_gpu", "kv_bytes_per_gpu", "total_bytes_per_gpu",
               "capacity_bytes", "fits", "max_batch", "engine_max_batch", "max_context")
COST_KEYS = ("flops", "bytes", "weight_bytes", "kv_bytes", "act_bytes", "comm_bytes",
             "host_bytes")
STEP_KEYS = COST_KEYS + TERM_KEYS + ("t_overhead_s", "roofline_s", "overlap_floor_s", "time_s",
                                     "tokens_per_s", "kernels",
                                     "collectives", "weights_floor_s", "estimate_s",
                                     "tokens_per_s_estimate")
OP_KEYS = ("count",) + COST_KEYS + ("kernels",) + TERM_KEYS + ("time_s",)
PARALLEL_KEYS = PARALLEL + ("gpus",)
# What capacity's root finding evaluates over and over (compiler/analyses/capacity.py): the runner
# generates a function of these alone, ~3x cheaper than every form.
PROBE_KEYS = (tuple(f"bound.{k}" for k in BOUND_TERMS)
              + ("step.time_s", "step.kv_bytes", "step.weight_bytes", "memory.fits"))



@dataclass(frozen=True)
class KeyInfo:
    """What a result key's value is: its base unit (as --json stores it) and whether it is
    a whole number (JSON int, sweep cells without decimals)."""

    unit: str
    integer: bool = False
    label: str = ""     # what the value is, in words (workbook rows, reports)


_BYTES, _SECONDS = KeyInfo("bytes"), KeyInfo("s")
# Every key of `memory`, `step`, `ops` entries, `parallel` and `params`: JSON, the text
# report, sweep headings and the workbook's unit column all read it here.
RESULT_KEYS: dict[str, KeyInfo] = {
    **{k: _BYTES for k in COST_KEYS + MEMORY_KEYS if "bytes" in k},
    **{k: _SECONDS for k in STEP_KEYS + OP_KEYS if k.endswith("_s") and "per_s" not in k},
    "kv_bytes_per_token": KeyInfo("bytes/token"),
    "flops": KeyInfo("FLOP"),
    "fits": KeyInfo(""),
    "bound": KeyInfo(""),
    "max_batch": KeyInfo("sequences", True),
    "engine_max_batch": KeyInfo("sequences", True),
    "max_context": KeyInfo("tokens", True),
    "tokens_per_s": KeyInfo("tokens/s"),
    "tokens_per_s_estimate": KeyInfo("tokens/s"),
    "kernels": KeyInfo("kernels", True),       # kernel launches per step (or per instance)
    "collectives": KeyInfo("calls", True),     # collective calls per step
    "count": KeyInfo("instances", True),       # an op's instances (a collective's calls) per step
    "total": KeyInfo("params", True),
    "active": KeyInfo("params", True),
    **{k: KeyInfo("GPUs", True) for k in PARALLEL_KEYS},
    # the estimate's per-op pieces (compiler/core/estimate_rule.py PART_KEYS)
    "gemm_rows": KeyInfo("rows"), "gemm_cols": KeyInfo("columns"), "gemm_groups": KeyInfo(""),
    "gemm_load": KeyInfo(""), "comm_latency_s": _SECONDS,
    "ring_steps": KeyInfo("steps", True),
}

# What each key's value is, in words: the workbook's row labels (its JSON key stands beside
# them) and any report that names a key. Whether it is a bound or an estimate is said.
LABELS = {
    "weights_bytes": "weights held in memory, all GPUs",
    "kv_bytes_per_token": "KV cache per token",
    "kv_bytes": "KV cache held at B sequences of N + T tokens",
    "total_bytes": "memory used, weights + KV cache",
    "weights_bytes_per_gpu": "weights held per GPU",
    "kv_bytes_per_gpu": "KV cache held per GPU",
    "total_bytes_per_gpu": "memory used per GPU",
    "capacity_bytes": "memory capacity per GPU",
    "fits": "fits in memory",
    "max_batch": "largest batch that fits at this N",
    "engine_max_batch": "largest batch the engine's KV cache holds at this N (estimate: "
                        "mem_fraction, kv_free_fraction, mem_reserve)",
    "max_context": "longest context that fits at this B",
    "flops": "FLOPs",
    "bytes": "HBM bytes moved",
    "weight_bytes": "weight bytes read",
    "act_bytes": "activation bytes moved",
    "comm_bytes": "collective payload bytes",
    "host_bytes": "bytes fetched over the host link",
    "t_compute_s": "compute time, FLOPs / peak",
    "t_memory_s": "memory time, HBM bytes / bandwidth",
    "t_launch_s": "launch time, kernels x launch overhead",
    "t_comm_s": "collective time",
    "t_host_s": "host-link time, offloaded experts fetched",
    "t_overhead_s": "engine overhead per step (estimate only)",
    "gemm_rows": "GEMM rows M (estimate: tiles pad them)",
    "gemm_cols": "GEMM output columns N on one GPU (estimate: tiles pad them)",
    "gemm_groups": "GEMMs per launch: touched experts on one GPU (estimate: tiles, waves)",
    "gemm_load": "busiest expert rank over the mean (estimate)",
    "comm_latency_s": "collective's fixed latency (estimate)",
    "ring_steps": "collective's ring steps (estimate)",
    "roofline_s": "step time, serial-kernel bound",
    "overlap_floor_s": "step time, overlap floor (hard bound)",
    "time_s": "step time with the launch floor",
    "tokens_per_s": "tokens/s, serial-kernel bound",
    "kernels": "kernel launches",
    "collectives": "collective calls",
    "weights_floor_s": "check: weights touched / memory bandwidth",
    "estimate_s": "step time, estimate",
    "tokens_per_s_estimate": "tokens/s, estimate",
    "count": "instances per step",
    "bound": "binding ceiling",
    "total": "parameters, total",
    "active": "parameters active per token",
    "tp": "tensor-parallel GPUs", "ep": "expert-parallel GPUs", "pp": "pipeline stages",
    "dp": "data-parallel replicas", "gpus": "GPUs of the layout",
}
# Keys that mean another thing in one section than the table's label says.
SECTION_LABELS = {"step.kv_bytes": "KV cache bytes read", "memory.kv_bytes": LABELS["kv_bytes"]}
LABELS["kv_bytes"] = "KV cache bytes"
RESULT_KEYS = {k: replace(info, label=LABELS.get(k, "")) for k, info in RESULT_KEYS.items()}


def key_info(key: str) -> KeyInfo:
    """The unit and integer-ness of a result key, bare (`kernels`) or sectioned
    (`step.kernels`); KeyError for a key the table lacks (never a guess)."""
    return RESULT_KEYS[key.rpartition(".")[2]]


def key_label(key: str) -> str:
    """What a key's value is, in words (`step.kv_bytes`: the cache traffic, `memory.
    kv_bytes`: the cache held); the key's own words where the table has no label yet."""
    if key in SECTION_LABELS:
        return SECTION_LABELS[key]
    bare = key.rpartition(".")[2]
    info = RESULT_KEYS.get(bare)
    return info.label if info is not None and info.label else bare.replace("_", " ")
