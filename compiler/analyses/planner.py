"""`infest plan`: which search answers the demand, and what each combination of flags means.

- --users U: the fewest GPUs for U closed-loop clients (compiler/analyses/plan.py);
- --rps R: the fewest GPUs for Poisson arrivals at R (the open loop, plan_open.py);
- --gpus G: the most tokens/s from G GPUs (plan_gpus.py), with the disaggregated answer
  on the same budget beside it (`disaggregated`, compiler/analyses/disagg.py);
- --disaggregate: a prefill and a decode pool sized for the demand instead.

--slo-percentile 90|99 compares --ttft-max with that TTFT percentile, which only the open
loop's queueing model gives (an estimate); it gives no TPOT percentile, so --tpot-max with
a percentile is refused rather than compared with a mean.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from infest.compiler.analyses.plan import Demand, check_demand, plan, request_of
from infest.dsl.errors import SpecError, fail

if TYPE_CHECKING:
    from infest.compiler.analyses.serve import Serving


def check_modes(d: Demand, disaggregate: bool) -> None:
    """The flag combinations plan cannot answer honestly, refused before any work."""
    if d.rps is not None and d.batching == "static" and not disaggregate:
        raise fail(None, "plan --rps queues requests for a continuous-batching engine",
                   "drop --batching static (or give --users)")
    if d.slo_percentile is None:
        return
    if d.rps is None or disaggregate:
        raise fail(None, f"--slo-percentile {d.slo_percentile}: only the open loop (--rps, "
                   "aggregated) gives percentiles; a closed loop and the disaggregated pools "
                   "give means only", "use --rps R, or drop --slo-percentile")
    if d.tpot_max is not None:
        raise fail(None, f"--slo-percentile {d.slo_percentile} with --tpot-max: the queueing "
                   "model gives TTFT percentiles only, no TPOT percentile",
                   "drop --tpot-max, or check TPOT percentiles with `serve --rps --simulate`")


def answer(engines: Mapping[str, "Serving"], d: Demand, overrides: Mapping[str, Any],
           disaggregate: bool = False,
           decode_engines: Mapping[str, "Serving"] | None = None,
           prefill_engines: Mapping[str, "Serving"] | None = None) -> dict[str, Any]:
    """plan --json: the aggregated answer on `engines` (with --gpus, `disaggregated`
    beside it), or with --disaggregate the two pools (`disaggregated`, and `request`).
    The pools run on `prefill_engines` and `decode_engines` (default: `engines`)."""
    check_demand(d, overrides)
    check_modes(d, disaggregate)
    from infest.compiler.analyses import disagg
    pre = prefill_engines or engines
    if disaggregate and d.gpus is None:
        return {"request": request_of(engines, d), "batching": "static",
                "disaggregated": disagg.disaggregate(pre, d, overrides, decode_engines)}
    if d.gpus is not None:
        from infest.compiler.analyses.plan_gpus import plan_gpus
        out = plan_gpus(engines, d, overrides)
        try:
            split = disagg.disaggregate_gpus(pre, d, overrides, decode_engines)
        except SpecError as e:       # the aggregated answer stands; say why there is no split
            split = {"none": "; ".join(x.message for x in e.diagnostics)}
        return {**out, "disaggregated": split}
    if d.rps is not None:
        from infest.compiler.analyses.plan_open import plan_open
        return plan_open(engines, d, overrides)
    return plan(engines, d, overrides)
