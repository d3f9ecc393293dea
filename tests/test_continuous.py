"""Continuous batching with a token budget (compiler/analyses/continuous.py), worked by
hand on a one-layer model, then at an MLPerf-like load, with speculation and engines.

The tiny model (tests/fixtures/serving/tiny.arch on round.arch: 1 TB/s, 100 TFLOP/s,
no launch cost), costed by the bound: a step carrying n tokens costs
    embedding: n x 4096 bytes (read a 2048-byte row, write 2048) / 1e12
    linear:    max(n x 2 x 1024^2 FLOP / 1e14, (2 x 1024^2 weight bytes + n x 4096) / 1e12)
and a mixed step reads the weights once, so it is the step of all its tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.continuous import Budget, Decoding, schedule
from infest.compiler.analyses.plan import Demand, plan
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.exports.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures" / "serving"
MODELS = Path(__file__).parents[1] / "specs" / "models"
TINY, ROUND = FIXTURES / "tiny.arch", FIXTURES / "round.arch"
LLAMA2 = FIXTURES / "llama2_70b.arch"


def _serving(spec: Path, hw: str | Path, use: str = "estimate", engine: str | None = None) -> Serving:
    return Serving(*(analyze(spec, hw=hw, phase=p, engine=engine) for p in ("decode", "prefill")),
                   use=use)


def _tiny_step(n: float) -> float:
    """The bound of a step carrying n tokens (module doc)."""
    weights, per_token = 2 * 1024**2, 4096
    return per_token * n / 1e12 + max(2 * 1024**2 * n / 1e14, (weights + per_token * n) / 1e12)


def test_prompts_alone_worked_by_hand() -> None:
    # C = 3, budget K = 512, ISL 1000, OSL 11 (10 decode steps). While a prompt is in
    # prefill the other 2 requests decode: chunks of 512 - 2 = 510 tokens, so 2 chunk
    # steps (510, then 490). The other 2 prompts' 2 chunk steps each = 4 <= 10 of a
    # request's decode steps: the prompts never overlap.
    r = serve(_serving(TINY, ROUND, "bound"), Request(1000, 11, 3, "continuous", 512), {})
    m0, m1 = _tiny_step(2 + 510), _tiny_step(2 + 490)   # 12.835 us, 12.333 us: compute-bound
    pure = _tiny_step(3)                                 # 2.122 us: the weights
    assert r["ttft_s"] == pytest.approx(m0 + m1, rel=1e-12)            # 25.17 us
    # TPOT: 4 of the 10 decode steps carry a chunk (their mean), 6 are pure decode steps.
    tpot = (4 * (m0 + m1) / 2 + 6 * pure) / 10                           # 6.307 us
    assert r["tpot_s"] == pytest.approx(tpot, rel=1e-12)
    # Closed loop: 3 requests each taking E2E: 3 x 11 output tokens per E2E.
    assert r["tokens_per_s"] == pytest.approx(3 * 11 / (m0 + m1 + 10 * tpot), rel=1e-12)
    assert r["schedule"]["prompts"] == "alone" and r["schedule"]["ttft_steps"] == 2


def test_a_full_budget_lengthens_ttft_by_hand() -> None:
    # C = 8, K = 512: the other 7 prompts' 2 chunk steps (14) overlap a request's 10 decode
    # steps, so prompts share the steps, and the budget binds: every step carries 512
    # tokens. A request's 1000 prompt + 10 decode tokens over 8 clients need
    # 8 x 1010 / 512 = 15.78125 steps per request, 10 of them decoding: TTFT = 5.78125
    # steps, each the step of 512 tokens; TPOT = that step.
    r = serve(_serving(TINY, ROUND, "bound"), Request(1000, 11, 8, "continuous", 512), {})
    full = _tiny_step(512)
    assert r["ttft_s"] == pytest.approx(5.78125 * full, rel=1e-12)
    assert r["tpot_s"] == pytest.approx(full, rel=1e-12)
    # The budget is spent exactly: requests/s x tokens per request x step time = K.
    assert r["requests_per_s"] * 1010 * r["tpot_s"] == pytest.approx(512, rel=1e-12)


def test_a_closed_loop_never_saturates_more_clients_wait_longer() -> None:
    engine = _serving(TINY, ROUND, "bound")
    runs = [serve(engine, Request(1000, 11, c, "continuous", 512), {}) for c in (8, 16, 64)]
    ttfts = [r["ttft_s"] for r in runs]
    assert ttfts == sorted(ttfts) and ttfts[-1] > 5 * ttfts[0]
    # Past the budget, throughput stays at K tokens per step; TPOT does not move.
    for r in runs:
        assert r["requests_per_s"] * 1010 * r["tpot_s"] == pytest.approx(512, rel=1e-12)


def test_schedule_counts_decode_tokens_against_the_budget() -> None:
    # Speculating with 4 drafted tokens, each decoding request puts 5 tokens in a step:
    # C = 3 leaves 512 - 2 x 5 = 502 tokens for a prompt: ceil(1000 / 502) = 2 chunks;
    # the 2 others' 2 chunks each = 4 <= 10 decode rounds: alone.
    s = schedule(3, Budget(1000, 11, 512), Decoding(5.0, 10.0))
    assert float(s["chunk"]) == 502 and float(s["chunks"]) == 2 and bool(s["alone"])
    # With 3 rounds instead, 4 > 3: the prompts overlap, so they share the steps.
    assert not bool(schedule(3, Budget(1000, 11, 512), Decoding(5.0, 3.0))["alone"])


def test_mlperf_like_server_load_is_served_and_tpot_carries_the_prompts() -> None:
    """MLPerf Inference's Llama 2 70B server scenario on 8 H100s: mean ISL 222, OSL 290,
    ~388 requests in flight on one tp = 8 replica. The budget (2048) takes the 387 other
    decoders and 1661 prompt tokens a step: prompts arrive at 388 / (1 + 289) = 1.34 per
    step, every step carries 1.34 x 222 = 297 prompt tokens beside 386.7 decoders."""
    engine = _serving(LLAMA2, "h100_sxm")
    r = serve(engine, Request(222, 290, 388), {"tp": 8})
    assert r["schedule"]["prompts"] == "shared" and r["schedule"]["ttft_steps"] == 1
    assert r["schedule"]["prompt_parts_per_mixed_step"] == pytest.approx(388 / 290)
    pure = engine.decode.evaluate({"B": 388, "N": 222 + 144, "tp": 8})["step"]["estimate_s"]
    prompts = engine.prefill.evaluate({"B": 2, "N": 222, "tp": 8})["step"]["estimate_s"]
    # Every step carries prompt tokens: TPOT above the pure decode step at the mean
    # context (ISL + (OSL - 2) / 2 = 366), below it plus a separate prefill of 2 prompts.
    assert pure < r["tpot_s"] < pure + prompts
    # TTFT: one such step, after the closed loop's queueing (tests/test_arrivals.py): every
    # step is mixed, so the step in progress leaves half of one on average.
    q = r["queueing"]
    assert q["residual_s"] == pytest.approx(r["tpot_s"] / 2)
    assert r["fits"] and r["ttft_s"] == pytest.approx(r["tpot_s"] + q["residual_s"] + q["wait_s"]
                                                      + q["share_s"])


def test_plan_serves_llama2_within_its_trained_context() -> None:
    # Trained for 4096 tokens; a request of 222 + 290 - 1 = 511 tokens is well inside.
    r = plan({"full": _serving(LLAMA2, "h100_sxm")},
             Demand(222, 290, users=388, ttft_max=2.0, tpot_max=0.2, gpus_max=8), {})
    assert r["best"]["gpus"] <= 8


def test_speculation_inside_the_batch_worked_by_hand() -> None:
    # One client (C = 1), Llama 3.1 70B on 4 H200s drafted by Llama 3.1 8B on the same
    # GPUs, K = 4 drafted tokens, A = 0.8: 3.3616 tokens per round (test_serve.py). The
    # prompt (2048 <= the budget) is one chunk step, nothing else running: the target's
    # forward over 2048 tokens plus the draft's. A decode round: the target over K + 1 = 5
    # tokens and K draft steps, at the mean context 2048 + (65 - 2) / 2 = 2079.5.
    from infest.compiler.analyses.speculative import Draft
    target = _serving(MODELS / "llama3_1_70b.arch", "h200_sxm")
    small = _serving(MODELS / "llama3_1_8b.arch", "h200_sxm")
    r = serve(target, Request(2048, 65, 1), {"tp": 4}, Draft(small, 4, 0.8))

    def step(e: Serving, **point) -> float:
        return e.decode.evaluate({"tp": 4, "B": 1, **point})["step"]["estimate_s"]
    prompt = [e.prefill.evaluate({"tp": 4, "B": 1, "N": 2048})["step"]["estimate_s"]
              for e in (target, small)]   # the prefill forms: T = 2048 tokens, no cache
    assert r["ttft_s"] == pytest.approx(sum(prompt), rel=1e-9)
    round_s = step(target, T=5, N=2079.5) + 4 * step(small, N=2079.5)
    assert r["tpot_s"] == pytest.approx(round_s / 3.3616, rel=1e-9)
    assert r["speculative"]["round_s"] == pytest.approx(round_s, rel=1e-9)
    # The plain TPOT is the continuous one without a draft.
    plain = serve(target, Request(2048, 65, 1), {"tp": 4})
    assert r["speculative"]["plain_tpot_s"] == pytest.approx(plain["tpot_s"], rel=1e-12)


def test_draft_works_under_the_default_batching(capsys) -> None:
    spec = str(MODELS / "llama3_1_70b.arch")
    assert main(["serve", spec, "--hw", "h200_sxm", "--isl", "512", "--osl", "64",
                 "--concurrency", "8", "--set", "tp=4", "--draft",
                 str(MODELS / "llama3_1_8b.arch"), "--acceptance", "0.7", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["batching"] == "continuous" and r["speculative"]["draft_len"] == 4


def test_graphs_engine_lowers_tpot_at_batch_one(capsys) -> None:
    # Batch 1 is launch-heavy: Llama 3.1 8B eager launches 419 kernels at 4 us, graphs
    # 227 at 1.5 us (tests/test_engines.py), so the step and TPOT fall.
    def tpot(*engine: str) -> float:
        assert main(["serve", str(MODELS / "llama3_1_8b.arch"), "--hw", "h200_sxm",
                     "--isl", "128", "--osl", "16", "--concurrency", "1", "--json",
                     *engine]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["engine"] == (engine[1] if engine else "eager")
        return out["tpot_s"]
    assert tpot("--engine", "graphs") < tpot("--engine", "eager") == tpot()


@pytest.mark.parametrize("verb, demand", [("serve", ["--concurrency", "1"]),
                                          ("plan", ["--users", "1"])])
def test_an_unknown_engine_is_an_error_naming_the_known(capsys, verb, demand) -> None:
    argv = [verb, str(MODELS / "llama3_1_8b.arch"), "--hw", "h200_sxm", "--isl", "128",
            "--osl", "16", *demand, "--engine", "no_such"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "--engine no_such" in err and "eager, graphs" in err and "Traceback" not in err
