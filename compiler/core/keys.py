"""The keys of every evaluated value (`eval --json` sections), in one place.

Sympy-free on purpose: the cached evaluation path (compiler/backend/runner.py) reads these
without importing the compiler's symbolic stages.
"""
from __future__ import annotations

from infest.compiler.core.terms import BOUND_TERMS, TERM_KEYS

BUILTINS = ("B", "N", "T")
# The param a spec states its trained context with (tokens a sequence may hold).
TRAINED_CONTEXT = "trained_context"
# Parallel degrees: positive integers, default 1, set like any input (--set tp=8).
PARALLEL = ("tp", "ep", "pp", "dp")
MEMORY_KEYS = ("weights_bytes", "kv_bytes_per_token", "kv_bytes", "total_bytes",
               "weights_bytes_per_gpu", "kv_bytes_per_gpu", "total_bytes_per_gpu",
               "capacity_bytes", "fits", "max_batch", "max_context")
COST_KEYS = ("flops", "bytes", "weight_bytes", "kv_bytes", "act_bytes", "comm_bytes",
             "host_bytes")
STEP_KEYS = COST_KEYS + TERM_KEYS + ("roofline_s", "overlap_floor_s", "time_s", "tokens_per_s", "kernels",
                                     "collectives", "weights_floor_s", "estimate_s",
                                     "tokens_per_s_estimate")
OP_KEYS = ("count",) + COST_KEYS + ("kernels",) + TERM_KEYS + ("time_s",)
PARALLEL_KEYS = ("tp", "ep", "pp", "dp", "gpus")
# What capacity's root finding evaluates over and over (compiler/analyses/capacity.py): the runner
# generates a function of these alone, ~3x cheaper than every form.
PROBE_KEYS = (tuple(f"bound.{k}" for k in BOUND_TERMS)
              + ("step.time_s", "step.kv_bytes", "step.weight_bytes", "memory.fits"))
