"""A benchmark's start: C clients that send their first prompts at once.

serve's closed-loop TTFT is the steady state. A benchmark of P prompts over C clients
(InferenceX: P = 10 C; `sglang.bench_serving --num-prompts P --max-concurrency C`) starts
its clients together and reports the mean over all P. Its first C prompts reach an idle
engine at once: none waits for a poll, but each waits for the prompts ahead of it. The
engine fills each step with its token budget K, so prompt k (k = 1..c per scheduler)
finishes its prefill in the wave's step ceil(k ISL / K), and each of those steps carries a
full budget of prompt tokens (min(c ISL, K) / ISL whole prompts; a prompt longer than K,
one chunk of K on half the rest cached). The mean the benchmark reports is then

    TTFT_P = TTFT + (C / P) (TTFT_wave - TTFT),   TTFT_wave = request + position x t_wave

with `position` the mean over k of ceil(k ISL / K) and t_wave one step of the wave. The
later waves are taken at the steady state: the first wave's spread in TTFT and the
lengths' spread put them out of step. Left out: the decode tokens of the wave's prompts
already prefilled (they ride its later steps) and the wave's effect on TPOT.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from infest.compiler.analyses.continuous import (Budget, arrival_inputs, hand_off, mixed_step,
                                                 point_forms, stacked_parts)

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Runner
    from infest.dsl.errors import Span

MAX_PROMPTS = 10_000_000   # prompts a benchmark may send (--prompts, the CSV's `prompts`)


def check_prompts(prompts: Any, concurrency: Any, where: str = "--prompts",
                  span: "Span | None" = None) -> None:
    """A benchmark sends whole prompts, at least one per client, at most MAX_PROMPTS."""
    from infest.dsl.errors import fail
    if isinstance(prompts, bool) or not isinstance(prompts, int) or \
            not concurrency <= prompts <= MAX_PROMPTS:
        raise fail(span, f"{where} {prompts!r}: a whole number from the concurrency "
                   f"({concurrency}) to MAX_PROMPTS = {MAX_PROMPTS:,}",
                   "the prompts the benchmark sent in all (InferenceX: 10 x concurrency)")


def wave_position(c: float, b: Budget) -> float:
    """The mean over c prompts sent at once of the wave step that ends each one's prefill:
    prompt k's last token is token k ISL of the wave, in step ceil(k ISL / K)."""
    k = np.arange(1, int(c) + 1, dtype=float)
    return float(np.mean(np.ceil(k * b.isl / b.chunk)))


def wave_points(c: float, dp: float, b: Budget) -> list[dict[str, Any]]:
    """A wave step's prompt part and all its tokens, as continuous.step_parts' parts:
    min(c ISL, K) / ISL prompts of ISL tokens on no cache, or a K-token chunk of a longer
    prompt on (ISL - K) / 2 cached."""
    isl, k = float(b.isl), float(b.chunk)
    if isl <= k:
        part = {"B": min(c * isl, k) / isl * dp, "T": isl, "N": 0.0}
    else:
        part = {"B": dp, "T": k, "N": (isl - k) / 2}
    return [part, {"B": dp, "T": part["B"] / dp * part["T"], "N": 0.0}]


def wave_ttft(runner: "Runner", base: Mapping[str, Any], c: float, dp: float, b: Budget,
              key: str) -> float:
    """The mean TTFT of the first c prompts, sent at once to an idle engine, under a
    cost key: the per-request overhead (the estimate's) + position x one wave step."""
    part, tot = stacked_parts(point_forms(runner, base), wave_points(c, dp, b))
    step = mixed_step(runner, [part], tot)[key] + hand_off(runner, tot)[key]
    request = arrival_inputs(tot, key)["request"]
    return float(np.asarray(request + wave_position(c, b) * step).reshape(-1)[0])


def reported(steady: Any, wave: Any, share: Any) -> Any:
    """The mean TTFT a benchmark reports when `share` (C / P) of its prompts were the
    start-up wave's and the rest met the steady state."""
    return steady + share * (wave - steady)
