"""`plan --gpus` (a GPU budget), `plan --rps` (the open loop) with `--slo-percentile`, the
KV cache's move between disaggregated pools, pipelines kept busy (pp micro-batches in
flight) and the MoE layouts plan searches (attention data-parallel + expert-parallel,
ep < tp)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from infest.compiler.analyses.continuous import hand_off
from infest.compiler.analyses.kv_transfer import Pool, transfer
from infest.compiler.analyses.plan import Demand
from infest.compiler.analyses.planner import answer
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.compiler.analyses.serve_open import OpenLoad, serve_open
from infest.compiler.backend.cache import cached_runner
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

MODELS = Path(__file__).parents[1] / "specs" / "models"
LLAMA8, QWEN = MODELS / "llama3_1_8b.arch", MODELS / "qwen3_30b_a3b.arch"
LAYOUT = ("tp", "ep", "pp", "dp")


def _engine(spec: Path = LLAMA8, hw: str = "h100_sxm", use: str = "estimate") -> Serving:
    return Serving(*(cached_runner(spec, hw, phase=p) for p in ("decode", "prefill")), use=use)


def _plan_json(capsys, *flags: str, spec: Path = LLAMA8) -> dict:
    assert main(["plan", str(spec), "--hw", "h100_sxm", "--isl", "1000", "--osl", "200",
                 *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_gpus_8_uses_at_most_8_gpus_and_reports_its_rates(capsys) -> None:
    r = _plan_json(capsys, "--gpus", "8", "--tpot-max", "30ms", "--ttft-max", "1s")
    assert r["request"]["gpus"] == 8 and "users" not in r["request"]
    best = r["best"]
    assert all(c["gpus"] <= 8 for c in r["candidates"])
    # floor(8 / its GPUs) replicas; total = replicas x C x OSL / E2E = per GPU x GPUs used.
    n = best["tp"] * best["pp"] * best["dp"]
    assert best["replicas"] == 8 // n and best["gpus"] == best["replicas"] * n
    per_replica = best["concurrency_per_replica"] * 200 / best["e2e_s"]
    assert best["tokens_per_s"] == pytest.approx(best["replicas"] * per_replica, rel=1e-12)
    assert best["tokens_per_s_per_gpu"] == pytest.approx(best["tokens_per_s"] / best["gpus"])
    assert best["tpot_s"] <= 0.03 and best["ttft_s"] <= 1.0
    assert best["tokens_per_s"] == max(c["tokens_per_s"] for c in r["candidates"])
    # The layout and concurrency, served as `serve` serves them, give the same numbers.
    s = serve(_engine(), Request(1000, 200, best["concurrency_per_replica"]),
              {k: best[k] for k in LAYOUT})
    assert s["tokens_per_s_per_gpu"] == pytest.approx(best["tokens_per_s_per_gpu"], rel=1e-12)
    # The disaggregated answer on the same budget: the split serves what its slower pool
    # serves, min(r_p x B / t_p, r_d x C / ((OSL - 1) x TPOT)), and uses at most 8 GPUs.
    dis = r["disaggregated"]
    pre, dec = dis["prefill"], dis["decode"]
    assert dis["gpus"] == pre["gpus"] + dec["gpus"] <= 8
    rate = min(pre["replicas"] * pre["batch_per_replica"] / pre["prefill_s"],
               dec["replicas"] * dec["concurrency_per_replica"] / (199 * dec["tpot_s"]))
    assert dis["requests_per_s"] == pytest.approx(rate, rel=1e-12)
    assert dis["tokens_per_s"] == pytest.approx(200 * rate, rel=1e-12)
    assert dis["ttft_s"] == pytest.approx(pre["prefill_s"] + dis["kv_transfer"]["time_s"])
    assert dis["ttft_s"] <= 1.0 and dis["tpot_s"] <= 0.03


def test_the_kv_move_by_hand() -> None:
    # Llama 3.1 8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B a token; a
    # 2,048-token prompt is 268,435,456 B. tp = 1 on both sides: every GPU sends all of it.
    h100 = {"link_bw": 450e9, "link_latency": 5e-6, "gpus_per_node": 8.0, "net_bw": 50e9,
            "net_latency": 10e-6, "eff_link": 0.8}
    one = Pool(1.0, 1, "h100_sxm", h100)
    t = transfer(2048, 131072.0, one, one, "estimate_s")
    assert t["bytes_per_request"] == 268_435_456
    assert str(t["link"]) == "node"                       # 1 + 1 GPUs fit one 8-GPU node
    assert float(t["time_s"]) == pytest.approx(5e-6 + 268_435_456 / (450e9 * 0.8), rel=1e-12)
    assert float(transfer(2048, 131072.0, one, one, "roofline_s")["time_s"]) == pytest.approx(
        5e-6 + 268_435_456 / 450e9, rel=1e-12)           # the bound: no efficiency
    # tp = 8 prefill (1/8 each) into tp = 2 decode (1/2 each): the larger share, 1/2, over
    # the network (8 + 2 GPUs exceed a node): 10 us + 134,217,728 B / (50 GB/s x 0.8).
    t = transfer(2048, 131072.0, Pool(1 / 8, 8, "h100_sxm", h100),
                 Pool(1 / 2, 2, "h100_sxm", h100), "estimate_s")
    assert str(t["link"]) == "network"
    assert float(t["time_s"]) == pytest.approx(10e-6 + 134_217_728 / 40e9, rel=1e-12)
    # Different hardware never shares a node: the slower network, the higher latency.
    slow = {**h100, "net_bw": 25e9, "net_latency": 20e-6, "eff_link": 0.5}
    t = transfer(2048, 131072.0, one, Pool(1.0, 1, "other", slow), "estimate_s")
    assert float(t["time_s"]) == pytest.approx(20e-6 + 268_435_456 / (25e9 * 0.5), rel=1e-12)


def test_pools_on_different_hardware(capsys) -> None:
    r = _plan_json(capsys, "--users", "64", "--tpot-max", "30ms", "--ttft-max", "2s",
                   "--disaggregate", "--decode-hw", "h200_sxm")
    dis = r["disaggregated"]
    assert (dis["prefill_hardware"], dis["decode_hardware"]) == ("h100_sxm", "h200_sxm")
    # H100 to H200: the network (both 50 GB/s, 10 us), each GPU its share x 1,000 tokens.
    kv = dis["kv_transfer"]
    share = max(1 / (min(c["tp"], 8) * c["pp"]) for c in (dis["prefill"], dis["decode"]))
    assert kv["link"] == "network"
    assert kv["time_s"] == pytest.approx(10e-6 + 1000 * 131072 * share / 40e9, rel=1e-12)
    h200 = serve(_engine(hw="h200_sxm"), Request(1000, 200, dis["decode"]["batch_per_replica"],
                                                 "static"), {k: dis["decode"][k] for k in LAYOUT})
    assert dis["decode"]["tpot_s"] == pytest.approx(h200["tpot_s"], rel=1e-12)


def test_plan_rps_is_the_open_loop_of_serve() -> None:
    engine = _engine()
    d = Demand(1000, 200, rps=60.0, ttft_max=0.2, tpot_max=0.03)
    r = answer({"full": engine}, d, {})
    best = r["best"]
    s = serve_open(engine, Request(1000, 200, None), OpenLoad(best["rps_per_replica"]),
                   {k: best[k] for k in LAYOUT})
    for key in ("ttft_s", "tpot_s", "ttft_p90_s", "utilisation"):
        assert best[key] == pytest.approx(s[key], rel=1e-9), key
    assert best["concurrency_per_replica"] == pytest.approx(s["concurrency"], rel=1e-9)
    assert best["rps_per_replica"] * best["replicas"] == pytest.approx(60.0)
    assert best["ttft_s"] <= 0.2 and best["tpot_s"] <= 0.03 and not s["saturated"]
    # Served: R x OSL output tokens/s over the GPUs.
    assert best["tokens_per_s_per_gpu"] == pytest.approx(60.0 * 200 / best["gpus"])
    # One replica fewer of the same layout misses a limit or saturates (the counts tried
    # are those of UTILISATIONS: the next one down is at least one replica fewer).
    if best["replicas"] > 1:
        fewer = serve_open(engine, Request(1000, 200, None), OpenLoad(60.0 / (best["replicas"] - 1)),
                           {k: best[k] for k in LAYOUT})
        assert fewer["saturated"] or fewer["ttft_s"] > 0.2 or fewer["tpot_s"] > 0.03 or \
            fewer["utilisation"] > 0.95


def test_slo_percentile_compares_the_ttft_percentile() -> None:
    engines = {"full": _engine()}
    mean = answer(engines, Demand(1000, 200, rps=60.0, ttft_max=0.08), {})["best"]
    p99 = answer(engines, Demand(1000, 200, rps=60.0, ttft_max=0.08, slo_percentile=99), {})
    assert p99["request"]["slo_percentile"] == 99
    assert p99["best"]["ttft_p99_s"] <= 0.08
    # p99 >= the mean, so meeting it takes at least as many GPUs.
    assert p99["best"]["ttft_p99_s"] >= p99["best"]["ttft_s"]
    assert p99["best"]["gpus"] >= mean["gpus"]


@pytest.mark.parametrize("flags, message", [
    (["--users", "10", "--slo-percentile", "90"], "only the open loop"),
    (["--rps", "10", "--slo-percentile", "99", "--tpot-max", "50ms"], "no TPOT percentile"),
    (["--rps", "10", "--slo-percentile", "90", "--disaggregate"], "only the open loop"),
    (["--gpus", "8", "--gpus-max", "16"], "drop --gpus-max"),
    (["--gpus", "0"], "--gpus 0"),
    (["--rps", "10", "--batching", "static"], "continuous-batching"),
    (["--users", "10", "--decode-hw", "h200_sxm"], "--decode-hw place the disaggregated"),
])
def test_plan_refuses_what_it_cannot_answer(capsys, flags, message) -> None:
    assert main(["plan", str(LLAMA8), "--hw", "h100_sxm", "--isl", "128", "--osl", "16",
                 *flags]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_gpus_excludes_users_and_rps(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["plan", str(LLAMA8), "--hw", "h100_sxm", "--isl", "128", "--osl", "16",
              "--gpus", "8", "--users", "10"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_pipeline_keeps_pp_micro_batches_in_flight_by_hand() -> None:
    engine = _engine(hw="h200_sxm", use="bound")
    runner = engine.decode
    base = {i.name: float(i.value) for i in runner.inputs({}, checked=False)}
    # One hand-off: 2 us + B/dp x T x hidden x 2 B over NVLink (the 2 GPUs share a node):
    # 8 sequences -> 2e-6 + 8 x 4096 x 2 / 450e9 = 2.1456 us (the bound); none at pp = 1.
    point = {**base, "B": 8.0, "N": 515.5, "T": 1.0, "pp": 2.0}
    values = {**point, **runner(point)}
    assert float(hand_off(runner, values)["roofline_s"]) == pytest.approx(
        2e-6 + 8 * 4096 * 2 / 450e9, rel=1e-12)
    flat = {**point, "pp": 1.0}
    assert float(hand_off(runner, {**flat, **runner(flat)})["roofline_s"]) == 0.0
    # C = 16 clients at pp = 2: two micro-batches of 8. ISL 16, OSL 1001: a prompt is one
    # chunk step; 7 of a request's 1000 decode steps carry another prompt (16 tokens), the
    # other 993 are pure steps of its micro-batch: the forms at B = 8 (every stage in turn,
    # one hand-off between them) plus the hand-off back, at the mean context 16 + 999 / 2.
    s = serve(engine, Request(16, 1001, 16), {"pp": 2})
    assert s["schedule"]["mixed_steps_per_request"] == 7
    pure = float(values["step.roofline_s"]) + 2e-6 + 8 * 4096 * 2 / 450e9
    assert pure <= s["tpot_s"] <= pure * (1 + 7 / 1000)   # 7 steps carry 16 more tokens
    # One micro-batch of 16 (what pp ran before) steps slower than each of two of 8.
    one = runner({**point, "B": 16.0})
    assert s["tpot_s"] < float(one["step.roofline_s"])
    assert s["tokens_per_s"] == pytest.approx(16 * 1001 / s["e2e_s"], rel=1e-12)


def test_plan_searches_attention_data_parallel_with_experts_over_ep(capsys) -> None:
    r = _plan_json(capsys, "--gpus", "8", "--tpot-max", "100ms", spec=QWEN)
    rows = {(c["policy"], c["tp"], c["ep"], c["pp"], c["dp"]): c for c in r["candidates"]}
    # Attention data-parallel on 8 GPUs, the experts over all 8 (ep > tp: across the dp
    # replicas, SGLang's DP attention), and experts over fewer GPUs than tp (ep < tp).
    assert ("full", 1, 8, 1, 8) in rows
    fewer = next(k for k in rows if k[0] == "full" and k[2] < k[1])
    engine = _engine(QWEN)
    for key in (("full", 1, 8, 1, 8), fewer):      # each served as `serve` serves it
        c = rows[key]
        s = serve(engine, Request(1000, 200, c["concurrency_per_replica"]),
                  dict(zip(LAYOUT, key[1:])))
        assert s["tpot_s"] == pytest.approx(c["tpot_s"], rel=1e-12)
    assert r["best"]["gpus"] <= 8 and math.isfinite(r["best"]["tokens_per_s"])


def test_the_new_searches_are_bounded_before_the_work(capsys, monkeypatch) -> None:
    from infest.compiler.analyses import budget, disagg
    # Llama 3.1 8B up to 64 GPUs: 84 layouts x 13 replica counts x 52 solves > 1000.
    monkeypatch.setattr(budget, "MAX_OPEN_PLAN_POINTS", 1000)
    assert main(["plan", str(LLAMA8), "--hw", "h100_sxm", "--isl", "128", "--osl", "16",
                 "--rps", "10"]) == 1
    assert "MAX_OPEN_PLAN_POINTS = 1,000" in capsys.readouterr().err
    # The budget's split: up to 8 x 8 pairs x 8 prefill replica counts > 10.
    monkeypatch.setattr(disagg, "MAX_SPLITS", 10)
    r = _plan_json(capsys, "--gpus", "8")
    assert "MAX_SPLITS = 10" in r["disaggregated"]["none"]
    assert r["best"]["gpus"] <= 8              # the aggregated answer stands
