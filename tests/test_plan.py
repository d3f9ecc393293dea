"""`infest plan`: the chosen layout re-evaluated with serve; the binding-limit error."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.plan import Demand, carried, plan
from infest.compiler.analyses.serve import Serving, Request, serve
from infest.dsl.errors import SpecError

LLAMA8 = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"


def _engine(policy: str = "full") -> Serving:
    return Serving(*(analyze(LLAMA8, hw="h200_sxm", phase=p, policy=policy)
                    for p in ("decode", "prefill")))


def test_plan_best_equals_serve_at_its_layout_and_concurrency() -> None:
    engines = {"full": _engine()}
    r = plan(engines, Demand(2048, 64, users=100, tpot_max=0.02, gpus_max=8), {})
    best = r["best"]
    layout = {k: best[k] for k in ("tp", "ep", "pp", "dp")}
    c, batch = best["concurrency_per_replica"], best["batch_per_replica"]
    # The batch evaluated is the carried concurrency rounded up to a multiple of dp.
    assert batch == -(-c // best["dp"]) * best["dp"]
    s = serve(engines["full"], Request(2048, 64, batch), layout)
    assert best["tpot_s"] == pytest.approx(s["tpot_s"], rel=1e-12)
    assert best["ttft_s"] == pytest.approx(s["ttft_s"], rel=1e-12)
    if batch == c:  # then every serve throughput is the candidate's too
        assert best["tokens_per_s_per_gpu"] == pytest.approx(s["tokens_per_s_per_gpu"], rel=1e-12)
    assert best["tpot_s"] <= 0.02 and best["gpus"] <= 8
    # 100 users: ceil(100 / C) replicas of tp x pp x dp GPUs, C = ceil(100 / replicas).
    assert best["replicas"] == -(-100 // c) and c == -(-100 // best["replicas"])
    assert best["gpus"] == best["replicas"] * best["tp"] * best["pp"] * best["dp"]
    assert min(c["gpus"] for c in r["candidates"]) == best["gpus"]
    assert best in r["pareto"] or any(
        p["tokens_per_s_per_gpu"] >= best["tokens_per_s_per_gpu"] for p in r["pareto"])


def test_a_replica_carries_its_share_of_the_users_not_its_slots() -> None:
    # 1000 users: 2048 slots -> 1 replica carrying 1000; 600 -> ceil(1000/600) = 2 replicas
    # of 500; 300 -> 4 of 250; 7 -> 143 replicas of ceil(1000/143) = ceil(6.99) = 7;
    # 3 -> 334 of ceil(2.994) = 3.
    slots = np.array([2048.0, 600.0, 300.0, 7.0, 3.0])
    assert carried(1000, slots).tolist() == [1000, 500, 250, 7, 3]
    assert carried(None, slots).tolist() == slots.tolist()  # a request rate fills batches


def test_no_candidate_carries_more_than_the_users_and_dense_models_keep_ep_1() -> None:
    r = plan({"full": _engine()}, Demand(128, 16, users=10, gpus_max=4), {})
    # Llama 3.1 8B has no experts: ep > 1 would only repeat the ep = 1 rows.
    assert {c["ep"] for c in r["candidates"]} == {1}
    assert max(c["concurrency_per_replica"] for c in r["candidates"]) == 10
    keys = [(c["tp"], c["pp"], c["dp"], c["concurrency_per_replica"]) for c in r["candidates"]]
    assert len(keys) == len(set(keys))  # one row per layout and load


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


def test_disaggregation_arithmetic_by_hand() -> None:
    from infest.compiler.analyses.disagg import arrival_rate, pool_replicas
    # 1000 users, prefill 0.2 s, TPOT 50 ms, OSL 65: E2E = 0.2 + 64 x 0.05 = 3.4 s, so
    # prompts arrive at 1000 / 3.4 = 294.1/s; a request rate is taken as given.
    assert arrival_rate(Demand(128, 65, users=1000), 0.2, 0.05) == pytest.approx(1000 / 3.4)
    assert arrival_rate(Demand(128, 65, rps=7.5), 0.2, 0.05) == 7.5
    # A replica prefilling 8 prompts per 0.2 s takes 40 prompts/s: 100/s needs ceil(2.5) = 3.
    assert pool_replicas(100, 8 / 0.2) == 3
    assert pool_replicas(1000, 500) == 2 and pool_replicas(0.1, 40) == 1


def test_disaggregated_pools_match_their_steps() -> None:
    from infest.compiler.analyses.disagg import disaggregate
    engine = _engine()
    d = Demand(2048, 64, users=64, tpot_max=0.02, ttft_max=0.3, gpus_max=8)
    r = disaggregate({"full": engine}, d, {})
    pre, dec = r["prefill"], r["decode"]
    lay = lambda c: {k: c[k] for k in ("tp", "ep", "pp", "dp")}  # noqa: E731
    # Prefill pool: TTFT = one prefill step of `batch` prompts of 2048 tokens + the move of
    # one request's KV cache to the decode pool, within 0.3 s.
    t_p = engine.prefill.evaluate({**lay(pre), "B": pre["batch_per_replica"], "N": 2048})
    assert pre["prefill_s"] == pytest.approx(t_p["step"]["estimate_s"], rel=1e-12)
    # Llama 3.1 8B: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 B = 131,072 B a token;
    # a GPU holds 1 / (min(tp, 8) x pp) of it; the larger share of the two pools moves over
    # NVLink (450 GB/s x eff_link 0.8, 2 us) when a replica of each fits one 8-GPU node.
    share = max(1 / (min(c["tp"], 8) * c["pp"]) for c in (pre, dec))
    n = lambda c: c["tp"] * c["pp"] * c["dp"]  # noqa: E731
    bw, lat = (450e9 * 0.8, 2e-6) if n(pre) + n(dec) <= 8 else (50e9 * 0.8, 10e-6)
    move = lat + 2048 * 131072 * share / bw
    assert r["kv_transfer"]["time_s"] == pytest.approx(move, rel=1e-12)
    assert pre["ttft_s"] == pytest.approx(t_p["step"]["estimate_s"] + move, rel=1e-12)
    assert pre["ttft_s"] <= 0.3
    # Decode pool: TPOT = serve's static TPOT at the carried concurrency, within 20 ms;
    # every user's slot lives there: ceil(64 / C) replicas.
    s = serve(engine, Request(2048, 64, dec["batch_per_replica"], "static"), lay(dec))
    assert dec["tpot_s"] == pytest.approx(s["tpot_s"], rel=1e-12)
    assert dec["tpot_s"] <= 0.02
    assert dec["replicas"] == -(-64 // dec["concurrency_per_replica"])
    # Prompts arrive at 64 / E2E, E2E = t_p + 63 x TPOT; replicas = ceil(arrival x t_p / batch).
    arrival = 64 / (pre["ttft_s"] + 63 * dec["tpot_s"])
    assert r["arrival_rps"] == pytest.approx(arrival, rel=1e-12)
    assert pre["replicas"] == math.ceil(arrival * pre["prefill_s"] / pre["batch_per_replica"])
    assert (pre["gpus"], dec["gpus"]) == (pre["replicas"] * n(pre), dec["replicas"] * n(dec))
    assert r["prefill_to_decode"] == pre["gpus"] / dec["gpus"]
    assert r["gpus"] == pre["gpus"] + dec["gpus"] <= 8


def test_disaggregation_names_the_ttft_limit_it_cannot_meet() -> None:
    from infest.compiler.analyses.disagg import disaggregate
    # A 2048-token prompt is ~2 x 8e9 x 2048 = 3.3e13 FLOPs: at 8 x 989 TFLOP/s at least
    # 4 ms, so 1 us is out of reach.
    with pytest.raises(SpecError, match=r"no layout meets --ttft-max 1 us: the best is"):
        disaggregate({"full": _engine()}, Demand(2048, 16, users=4, ttft_max=1e-6, gpus_max=8), {})


def test_plan_json_says_what_it_answered_and_lists_near_the_best(capsys) -> None:
    import json
    from infest.exports.cli.main import main
    assert main(["plan", str(LLAMA8), "--hw", "h200_sxm", "--isl", "2000", "--osl", "200",
                 "--users", "100", "--tpot-max", "30ms", "--ttft-max", "1s", "--engine",
                 "graphs", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    q = r["request"]
    assert (q["model"], q["hardware"], q["isl"], q["osl"], q["users"]) == (
        "llama3_1_8b", "h200_sxm", 2000, 200, 100)
    assert (q["tpot_max_s"], q["ttft_max_s"]) == (0.03, 1.0)       # limits in seconds
    assert (q["batching"], q["engine"], q["use"], q["chunk"]) == ("continuous", "graphs",
                                                                  "estimate", 2048)
    assert q["policies"] == ["full"] and r["batching"] == "continuous"
    # Listed: up to max(--gpus-max (none), 4 x the best's GPUs); the front drawn from those.
    limit = 4 * r["best"]["gpus"]
    assert max(c["gpus"] for c in r["candidates"]) <= limit
    assert all(p in r["candidates"] for p in r["pareto"])
    # The best is on the front, or a front point beats it on both rates.
    over = r["best_dominated_by"]
    assert (r["best"] in r["pareto"]) if over is None else (
        over["tokens_per_s_per_gpu"] >= r["best"]["tokens_per_s_per_gpu"]
        and over["tokens_per_s_per_user"] >= r["best"]["tokens_per_s_per_user"])


@pytest.mark.parametrize("flags, message", [
    (["--tpot-max", "50"], "--tpot-max 50: a time needs a unit"),
    (["--ttft-max", "2"], "2ms or 2s?"),
    (["--tpot-max", "5GB"], "expected a time, got bytes"),
    (["--rps", "20/min"], "--rps '20/min'"),
])
def test_plan_limits_need_units(capsys, flags, message) -> None:
    from infest.exports.cli.main import main
    demand = [] if "--rps" in flags else ["--users", "10"]
    assert main(["plan", str(LLAMA8), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
                 *demand, *flags]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_rps_takes_a_bare_number_or_per_second(capsys) -> None:
    import json
    from infest.exports.cli.main import main
    base = ["plan", str(LLAMA8), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
            "--gpus-max", "2", "--json", "--rps"]
    answers = []
    for rate in ("20", "20/s"):
        assert main(base + [rate]) == 0
        answers.append(json.loads(capsys.readouterr().out)["request"]["rps"])
    assert answers == [20.0, 20.0]
