"""Budgets per job: the total work a command would do, estimated before it starts and
refused past a named limit (a limit per item would let many items add up to minutes).

Each check counts what the job would evaluate or draw from its arguments alone, without
building it: sweep cells and grids, plot lines and cells, a plan's layouts x per-rank
batches x policies, continuous batching's prefill chunks. The limits are sized so that a
job stays within a few seconds and a few hundred MB.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from infest.dsl.errors import fail

# A sweep: one vectorised evaluation per grid costs ~1 ms before its first cell, then
# ~50 bytes per cell evaluated and ~300 printed; cells are bounded by MAX_CELLS
# (compiler/analyses/sweep.py), grids (one per --over value) here.
MAX_GRIDS = 1024
# A figure: one line per batch size in the time panels, one patch per cell in the bound
# map; matplotlib draws ~10^4 lines or ~10^6 patches in seconds.
MAX_PLOT_LINES = 64
MAX_PLOT_CELLS = 2**18
# A plan: every (layout, per-rank batch, policy) point is evaluated in both phases at
# roughly 50-150 us a point (DeepSeek-V3, two policies, --gpus-max 4096: 70,070 points,
# 11 s on a loaded 2-core machine): 2^16 points stay within a few seconds.
MAX_PLAN_POINTS = 2**16
# An open-loop plan (--rps) solves the Little's-law fixed point for every layout and
# replica count tried, one vectorised closed-loop evaluation per bisection step:
# Llama 3.1 8B, 84 layouts x 13 counts x 52 steps (56,784 points) takes ~0.3 s.
MAX_OPEN_PLAN_POINTS = 2**22
# Continuous batching evaluates each prefill chunk of a prompt (ceil(ISL / chunk) points,
# each a full set of forms, ~1 kB each): 2^16 chunks stay within ~100 MB.
MAX_PREFILL_CHUNKS = 2**16


def check_sweep_job(cells: int, grids: int) -> None:
    """A sweep of `grids` B x N grids of `cells` points each (cells are checked against
    MAX_CELLS where the grid is built)."""
    if grids > MAX_GRIDS:
        raise fail(None, f"--over gives {grids:,} grids, more than MAX_GRIDS = {MAX_GRIDS:,}",
                   "fewer --over values (a geometric list: a..b:x2)")


def check_plot_job(n_batches: int, n_contexts: int) -> None:
    """A sweep's figure: one line per B, one cell per (B, N)."""
    if n_batches > MAX_PLOT_LINES:
        raise fail(None, f"--plot draws one line per batch size: {n_batches:,} is more than "
                   f"MAX_PLOT_LINES = {MAX_PLOT_LINES}", "plot fewer B values (e.g. --B 1..1024:x2)")
    if n_batches * n_contexts > MAX_PLOT_CELLS:
        raise fail(None, f"--plot of {n_batches:,} x {n_contexts:,} cells is more than "
                   f"MAX_PLOT_CELLS = {MAX_PLOT_CELLS:,}", "a coarser --N for the figure")


def check_plan_job(engines: Mapping[str, Any], layout_gpus: int | None,
                   open_loop: bool = False) -> None:
    """The plan's search: its layouts (up to `layout_gpus` GPUs: --gpus, --gpus-max or
    LAYOUT_GPUS) x per-rank batches x policies, or with the open loop x the replica counts
    tried x the fixed point's bisection steps, counted before any is evaluated."""
    from infest.compiler.analyses.openloop import BISECTION_STEPS
    from infest.compiler.analyses.plan import LAYOUT_GPUS, MAX_PER_RANK, layouts, used_degrees
    from infest.compiler.analyses.plan_open import UTILISATIONS
    per_rank = int(math.log2(MAX_PER_RANK)) + 1
    grid = sum(len(layouts(layout_gpus or LAYOUT_GPUS, used_degrees(e))) for e in engines.values())
    points = grid * per_rank
    if points > MAX_PLAN_POINTS:
        raise fail(None, f"the plan would evaluate {points:,} (layout, batch, policy) points, "
                   f"more than MAX_PLAN_POINTS = {MAX_PLAN_POINTS:,}",
                   "a smaller --gpus-max (or --gpus), or one --policy")
    solves = grid * len(UTILISATIONS) * (BISECTION_STEPS + 2)
    if open_loop and solves > MAX_OPEN_PLAN_POINTS:
        raise fail(None, f"the open-loop plan would evaluate {solves:,} (layout, replicas, "
                   f"policy, bisection step) points, more than MAX_OPEN_PLAN_POINTS = "
                   f"{MAX_OPEN_PLAN_POINTS:,}", "a smaller --gpus-max, or one --policy")


def check_serve_job(isl: int, chunk: int | None, batching: str) -> None:
    """Continuous batching: ceil(ISL / chunk) prefill chunks, each evaluated."""
    if batching != "continuous" or chunk is None or chunk < 1:
        return
    chunks = -(-isl // chunk)
    if chunks > MAX_PREFILL_CHUNKS:
        raise fail(None, f"--isl {isl} in chunks of {chunk} is {chunks:,} prefill chunks, "
                   f"more than MAX_PREFILL_CHUNKS = {MAX_PREFILL_CHUNKS:,}",
                   f"a larger --chunk (at least {-(-isl // MAX_PREFILL_CHUNKS)})")
