"""Speculative decoding on `serve`: a draft model proposes K tokens, the target verifies
K + 1 positions in one step.

With per-token acceptance A (each drafted token accepted with probability A, independently,
until the first rejection; the target's step always yields one token of its own), a round
yields (1 - A^(K+1)) / (1 - A) tokens. A round costs K draft decode steps (T = 1) plus one
target step over T = K + 1 tokens, at the same batch and context; TPOT = mean round cost /
tokens per round, averaged over the same decode contexts as plain TPOT. TTFT adds the
draft's prefill of the prompt. The draft runs on the target's GPUs with the same layout,
so its weights and KV cache share their memory. An MTP draft (`--draft mtp`,
compiler/analyses/mtp.py) is the target's own spec: every --set applies to it, and its
weights are already the target's, so only its KV cache adds. Speculation stops paying at the acceptance
where the two TPOTs are equal: tokens per round = round cost / plain TPOT, found by
bisection (it rises from 1 at A = 0 towards K + 1 as A -> 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.backend.runner import evaluate
from infest.compiler.core.keys import PARALLEL
from infest.dsl.errors import fail

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving, Request

MAX_DRAFT_LEN = 32        # drafted tokens per round (real drafts use 1..8)
BISECTION_STEPS = 60      # halvings of [0, 1): well below float resolution
LAYOUT = PARALLEL


@dataclass(frozen=True)
class Draft:
    """A draft model's engine, its tokens per round and the acceptance rate; `modules`:
    0 for a separate draft spec, else the MTP modules of the target's own spec it runs."""

    engine: "Serving"
    length: int
    acceptance: float
    modules: int = 0


def draft_overrides(draft: Draft, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs set on the draft: all of them for the target's own MTP layers, else
    only the layout (a separate spec has its own params)."""
    return dict(overrides) if draft.modules else {
        n: v for n, v in overrides.items() if n in LAYOUT}


def check_draft(length: Any, acceptance: Any) -> None:
    """--draft-len a whole number 1 .. MAX_DRAFT_LEN; --acceptance in [0, 1)."""
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= MAX_DRAFT_LEN:
        raise fail(None, f"--draft-len {length!r}: must be a whole number 1 .. {MAX_DRAFT_LEN} "
                   "(MAX_DRAFT_LEN)")
    if not isinstance(acceptance, (int, float)) or not 0 <= acceptance < 1:
        raise fail(None, f"--acceptance {acceptance!r}: must be at least 0 and below 1",
                   "the chance that a drafted token is accepted, e.g. 0.7")


def tokens_per_round(length: int, acceptance: float) -> float:
    """Expected tokens a round yields: 1 + A + A^2 + .. + A^K = (1 - A^(K+1)) / (1 - A)."""
    return (1 - acceptance ** (length + 1)) / (1 - acceptance)


def breakeven(length: int, ratio: float) -> float | None:
    """The acceptance where tokens per round equals `ratio` (round cost / plain TPOT):
    0 if speculation pays even then, None if it never does (ratio >= K + 1)."""
    if ratio <= 1:
        return 0.0
    if ratio >= length + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tokens_per_round(length, mid) < ratio else (lo, mid)
    return (lo + hi) / 2


def speculate(target: "Serving", draft: Draft, request: "Request", contexts: np.ndarray,
              overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Per estimate and bound: round cost, plain TPOT, TPOT, draft prefill; fits; break-even."""
    c, k = request.concurrency, draft.length
    layout = draft_overrides(draft, overrides)
    point = {"B": c, "N": contexts}
    plain = evaluate(target.decode, overrides, point)
    verify = evaluate(target.decode, overrides, {**point, "T": float(k + 1)})
    drafted = evaluate(draft.engine.decode, layout, point)
    pre = evaluate(draft.engine.prefill, layout, {"B": c, "N": request.isl})
    last = {"B": c, "N": float(request.isl + request.osl - 2)}
    out = {"tokens_per_round": tokens_per_round(k, draft.acceptance), "fits": both_fit(
        evaluate(target.decode, overrides, last), evaluate(draft.engine.decode, layout, last),
        draft.modules)}
    for key in (target.key, "roofline_s"):
        rnd = float(np.mean(k * drafted[f"step.{key}"] + verify[f"step.{key}"]))
        base = float(np.mean(plain[f"step.{key}"]))
        out[key] = {"round_s": rnd, "plain_tpot_s": base, "tpot_s": rnd / out["tokens_per_round"],
                    "draft_prefill_s": float(pre[f"step.{key}"]),
                    "breakeven_acceptance": breakeven(k, rnd / base)}
    return out


def both_fit(target: Mapping[str, Any], draft: Mapping[str, Any], modules: int = 0) -> bool:
    """Both models' weights and KV caches in one GPU's memory; an MTP draft (`modules` > 0)
    adds only its KV cache, one module's per module (its weights are the target's)."""
    added = draft["memory.kv_bytes_per_gpu"] * modules if modules else \
        draft["memory.total_bytes_per_gpu"]
    return bool(target["memory.total_bytes_per_gpu"] + added <= target["memory.capacity_bytes"])
