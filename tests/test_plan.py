"""`infest plan`: the chosen layout re-evaluated with serve; the binding-limit error."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.plan import Demand, plan
from infest.compiler.serve import Engine, Request, serve
from infest.dsl.errors import SpecError

LLAMA8 = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"


def _engine(policy: str = "full") -> Engine:
    return Engine(*(analyze(LLAMA8, hw="h200_sxm", phase=p, policy=policy)
                    for p in ("decode", "prefill")))


def test_plan_best_equals_serve_at_its_layout() -> None:
    engines = {"full": _engine()}
    r = plan(engines, Demand(2048, 64, users=100, tpot_max=0.02, gpus_max=8), {})
    best = r["best"]
    layout = {k: best[k] for k in ("tp", "ep", "pp", "dp")}
    s = serve(engines["full"], Request(2048, 64, best["concurrency_per_replica"]), layout)
    assert best["tpot_s"] == pytest.approx(s["tpot_s"], rel=1e-12)
    assert best["ttft_s"] == pytest.approx(s["ttft_s"], rel=1e-12)
    assert best["tpot_s"] <= 0.02 and best["gpus"] <= 8
    # 100 users at B per replica: ceil(100 / B) replicas of tp x pp x dp GPUs.
    assert best["replicas"] == -(-100 // best["concurrency_per_replica"])
    assert best["gpus"] == best["replicas"] * best["tp"] * best["pp"] * best["dp"]
    assert min(c["gpus"] for c in r["candidates"]) == best["gpus"]
    assert best in r["pareto"] or any(
        p["tokens_per_s_per_gpu"] >= best["tokens_per_s_per_gpu"] for p in r["pareto"])


def test_a_tpot_limit_no_layout_meets_names_the_limit_and_the_best() -> None:
    # Llama 3.1 8B reads ~16 GB of weights per step; 8 H200s at 4.8 TB/s each need at least
    # 16e9 / (8 x 4.8e12) = 0.42 ms, so 0.1 ms is out of reach.
    with pytest.raises(SpecError, match=r"no layout meets --tpot-max 100 us: the best is"):
        plan({"full": _engine()}, Demand(128, 16, users=1, tpot_max=1e-4, gpus_max=8), {})


def test_plan_rejects_two_demands_and_a_searched_set() -> None:
    with pytest.raises(SpecError, match="exactly one demand"):
        plan({"full": _engine()}, Demand(128, 16, users=1, rps=2.0), {})
    with pytest.raises(SpecError, match="plan searches it"):
        plan({"full": _engine()}, Demand(128, 16, users=1), {"tp": 2})
