"""`infest serve`: metric identities, static and continuous batching, bad requests.

Expected values are derived by hand from the step forms `infest eval` already prints.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.serve import Serving, Request, serve
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

LLAMA8 = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"


@pytest.fixture(scope="module")
def engine() -> Serving:
    return Serving(analyze(LLAMA8, hw="h200_sxm"), analyze(LLAMA8, hw="h200_sxm", phase="prefill"))


def _step(engine: Serving, **point) -> float:
    return engine.decode.evaluate(point)["step"]["estimate_s"]


def test_e2e_is_ttft_plus_osl_minus_one_tpot_exactly(engine: Serving) -> None:
    for batching in ("static", "continuous"):
        r = serve(engine, Request(1000, 50, 4, batching, 256), {})
        for m in (r, r["bound"]):
            assert m["e2e_s"] == m["ttft_s"] + (50 - 1) * m["tpot_s"]
            assert m["tokens_per_s_per_user"] == 1 / m["tpot_s"]


def test_static_ttft_is_the_prefill_and_tpot_lies_between_first_and_last_step(engine) -> None:
    r = serve(engine, Request(2048, 9, 8, "static"), {})
    # TTFT: the prefill step of 8 prompts of 2048 tokens.
    assert r["ttft_s"] == engine.prefill.evaluate({"B": 8, "N": 2048})["step"]["estimate_s"]
    # OSL 9: decode steps at N = 2048 .. 2055 (8 of them), all averaged.
    steps = [_step(engine, B=8, N=n) for n in range(2048, 2056)]
    assert r["tpot_s"] == pytest.approx(sum(steps) / 8, rel=1e-12)
    assert _step(engine, B=8, N=2048) <= r["tpot_s"] <= _step(engine, B=8, N=2048 + 9)
    # Static: 8 requests emit 8 x 9 tokens in one E2E.
    assert r["tokens_per_s"] == pytest.approx(8 * 9 / r["e2e_s"], rel=1e-12)
    assert r["gpus"] == 1 and r["fits"]


def test_continuous_is_the_default_and_static_stays(engine: Serving, capsys) -> None:
    assert Request(1000, 50, 4).batching == "continuous"
    static = serve(engine, Request(1000, 50, 4, "static"), {})
    # Static: TTFT is one prefill step of all 4 prompts (test above); continuous with the
    # 2048-token budget prefills one prompt beside 3 decoders, which is cheaper.
    assert serve(engine, Request(1000, 50, 4), {})["ttft_s"] < static["ttft_s"]
    base = ["serve", str(LLAMA8), "--hw", "h200_sxm", "--isl", "1000", "--osl", "50",
            "--concurrency", "4", "--json"]
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["batching"] == "continuous"
    assert main(base + ["--batching", "static", "--chunk", "512"]) == 1
    assert "--chunk is the continuous token budget" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--osl", "0"], "--osl 0: must be at least 2"),
    (["--osl", "-3"], "--osl -3"),
    (["--isl", "0"], "--isl 0: must be at least 1"),
    (["--concurrency", "0"], "--concurrency 0"),
    (["--osl", "1.5"], "invalid int value"),
    (["--isl", str(2**24 + 1)], "MAX_TOKENS"),
])
def test_bad_requests_are_one_line_errors(args, message, capsys) -> None:
    base = {"--isl": "128", "--osl": "16", "--concurrency": "2"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = ["serve", str(LLAMA8), "--hw", "h200_sxm"] + [x for kv in base.items() for x in kv]
    try:
        assert main(argv) == 1
    except SystemExit as exc:  # argparse's own type errors exit 1 too
        assert exc.code == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_serve_json_keys(capsys) -> None:
    assert main(["serve", str(LLAMA8), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
                 "--concurrency", "2", "--set", "tp=2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("batching", "ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "tokens_per_s_per_gpu",
                "tokens_per_s_per_user", "requests_per_s", "gpus", "fits", "ttft_p90_s",
                "ttft_p99_s", "tpot_p90_s", "tpot_p99_s", "saturated", "bound"):
        assert key in r
    assert r["ttft_p90_s"] is None and r["saturated"] is False  # means only, closed loop
    assert r["gpus"] == 2  # tp = 2: 2 GPUs
    assert r["tokens_per_s_per_gpu"] == r["tokens_per_s"] / 2


LLAMA70 = LLAMA8.with_name("llama3_1_70b.arch")


def test_speculative_tokens_per_round_and_breakeven_by_hand() -> None:
    from infest.compiler.analyses.speculative import breakeven, tokens_per_round
    # K = 4, A = 0.8: (1 - 0.8^5) / (1 - 0.8) = (1 - 0.32768) / 0.2 = 3.3616.
    assert tokens_per_round(4, 0.8) == pytest.approx(3.3616, rel=1e-12)
    assert tokens_per_round(4, 0.0) == 1  # every draft rejected: the target's own token
    # A round costing 3.3616 plain TPOTs breaks even at A = 0.8; one costing 5 = K + 1 never
    # does; one costing at most one plain step pays at any acceptance.
    assert breakeven(4, 3.3616) == pytest.approx(0.8, abs=1e-12)
    assert breakeven(4, 5.0) is None and breakeven(4, 0.9) == 0.0


def test_speculative_serve_worked_by_hand() -> None:
    from infest.compiler.analyses.speculative import Draft, tokens_per_round
    target = Serving(*(analyze(LLAMA70, hw="h200_sxm", phase=p) for p in ("decode", "prefill")))
    small = Serving(*(analyze(LLAMA8, hw="h200_sxm", phase=p) for p in ("decode", "prefill")))
    r = serve(target, Request(2048, 9, 8, "static"), {"tp": 4}, Draft(small, 4, 0.8))
    # OSL 9: rounds at contexts N = 2048 .. 2055; a round = 4 draft steps (8B, T = 1) + one
    # 70B step over T = 5 tokens, both at B = 8 on the same tp = 4 GPUs.
    rounds = [4 * small.decode.evaluate({"B": 8, "N": n, "tp": 4})["step"]["estimate_s"]
              + target.decode.evaluate({"B": 8, "N": n, "T": 5, "tp": 4})["step"]["estimate_s"]
              for n in range(2048, 2056)]
    assert r["tpot_s"] == pytest.approx(sum(rounds) / 8 / 3.3616, rel=1e-9)
    # TTFT: the 70B prefill plus the draft's prefill of the same 8 prompts.
    pre = [e.prefill.evaluate({"B": 8, "N": 2048, "tp": 4})["step"]["estimate_s"] for e in (target, small)]
    assert r["ttft_s"] == pytest.approx(sum(pre), rel=1e-12)
    assert r["e2e_s"] == r["ttft_s"] + 8 * r["tpot_s"]
    # Break-even: the acceptance whose tokens per round equal round cost / plain TPOT.
    spec = r["speculative"]
    plain = sum(target.decode.evaluate({"B": 8, "N": n, "tp": 4})["step"]["estimate_s"]
                for n in range(2048, 2056)) / 8
    assert spec["plain_tpot_s"] == pytest.approx(plain, rel=1e-12)
    assert tokens_per_round(4, spec["breakeven_acceptance"]) == pytest.approx(
        sum(rounds) / 8 / plain, rel=1e-9)


@pytest.mark.parametrize("extra, message", [
    (["--acceptance", "1"], "--acceptance 1.0: must be at least 0 and below 1"),
    (["--acceptance", "-0.1"], "--acceptance -0.1"),
    (["--acceptance", "0.5", "--draft-len", "0"], "--draft-len 0"),
    ([], "--draft needs --acceptance"),
])
def test_bad_speculation_is_a_one_line_error(extra, message, capsys) -> None:
    argv = ["serve", str(LLAMA8), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
            "--concurrency", "2", "--draft", str(LLAMA8)] + extra
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


DEMANDS = {"serve": ["--concurrency", "1"], "plan": ["--users", "1"],
           "serve --rps": ["--rps", "0.01"], "plan --rps": ["--rps", "0.01"]}


@pytest.mark.parametrize("verb", list(DEMANDS))
def test_a_request_beyond_the_trained_context_is_refused(capsys, verb):
    # Llama 3.1 8B: trained_context = 131072. The last output token is produced from
    # ISL + OSL - 1 tokens: 130000 + 1073 - 1 = 131072 fits exactly, one more does not.
    # (The KV cap of admission is taken there too, at the last decode step.)
    demand = DEMANDS[verb]
    verb = verb.split()[0]
    base = [verb, str(LLAMA8), "--hw", "h200_sxm", "--isl", "130000"] + demand
    assert main(base + ["--osl", "1073"]) == 0
    capsys.readouterr()
    assert main(base + ["--osl", "1074"]) == 1
    err = capsys.readouterr().err
    assert "llama3_1_8b.arch:5:3: error: --isl 130000 + --osl 1074 needs a context of " \
           "131,073 tokens; the model was trained for 131,072" in err


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_dp_that_does_not_divide_c_costs_the_busiest_rank(engine: Serving, batching: str) -> None:
    """C = 5 over dp = 2: the busier rank holds ceil(5 / 2) = 3 requests, so every step
    is costed as with 3 on each rank (B = 6, as `plan` evaluates it), either batching;
    the output counts 5 requests: tokens/s = 5 x OSL / E2E. (At the default B = 1, dp = 2
    fails the model's own check that dp divides B: serve checks at the batch it serves.)"""
    five = serve(engine, Request(1024, 64, 5, batching), {"dp": 2})
    six = serve(engine, Request(1024, 64, 6, batching), {"dp": 2})
    assert (five["ttft_s"], five["tpot_s"]) == (six["ttft_s"], six["tpot_s"])
    assert five["tokens_per_s"] == pytest.approx(5 * 64 / five["e2e_s"], rel=1e-12)
    assert six["tokens_per_s"] == pytest.approx(6 * 64 / six["e2e_s"], rel=1e-12)
    assert five["gpus"] == 2


# Memory admission. Llama 3.1 8B on one H100 SXM (81,559 MiB = 85,520,809,984 B): weights
# 8.03e9 params x 2 bytes = 16,060,522,496 B, KV 32 layers x 8 heads x 128 x 2 (K, V) x
# 2 bytes = 131,072 B a token. ISL 16,000 + OSL 4,000 - 1: 19,999 tokens x 131,072 B =
# 2,621,308,928 B a request, and 69,460,287,488 / 2,621,308,928 = 26.50: the KV cache
# holds 26 requests, not 104.
H100 = "h100_sxm"
ADMISSION = ["serve", str(LLAMA8), "--hw", H100, "--isl", "16000", "--osl", "4000"]


@pytest.fixture(scope="module")
def h100() -> Serving:
    return Serving(analyze(LLAMA8, hw=H100), analyze(LLAMA8, hw=H100, phase="prefill"))


def test_clients_beyond_the_kv_cache_wait_by_littles_law(h100: Serving) -> None:
    full = serve(h100, Request(16000, 4000, 104), {})
    held = serve(h100, Request(16000, 4000, 26), {})     # the 26 admitted alone
    a = full["admission"]
    assert (a["clients_per_scheduler"], a["admitted_per_scheduler"], a["cap_per_rank"]) == (104, 26, 26)
    assert a["max_concurrency"] is None     # the KV cache's cap
    assert not full["fits"] and held["fits"]
    for got, run in ((full, held), (full["bound"], held["bound"])):
        # The loop runs at 26; each request first waits (104 / 26 - 1) = 3 E2Es of it.
        assert got["tpot_s"] == run["tpot_s"]
        assert got["ttft_s"] == pytest.approx(run["ttft_s"] + 3 * run["e2e_s"], rel=1e-12)
        # So the replica completes what 26 running complete: 104 / (4 E2E) = 26 / E2E.
        assert got["tokens_per_s"] == pytest.approx(run["tokens_per_s"], rel=1e-12)
    assert a["wait_s"] == pytest.approx(3 * held["e2e_s"], rel=1e-12)
    assert "admission" not in held          # 26 clients: none waits


def test_the_simulation_queues_the_same_clients(capsys) -> None:
    args = ADMISSION + ["--concurrency", "104", "--simulate", "--requests", "400"]
    assert main(args + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["simulated"]["admitted_per_scheduler"] == 26
    # Request by request (simulate.py), not the closed form: the means agree within 2%
    # (here the wait, 3 E2Es of ~117 s, is nearly all of TTFT).
    assert r["simulated"]["ttft_s"] == pytest.approx(r["ttft_s"], rel=0.02)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "admission: the KV cache holds 26 requests per rank at ISL + OSL - 1 tokens (the " \
        "whole memory beside the weights: no engine share or reserve given), so 26 of " \
        "a scheduler's 104 clients run and 78 wait" in text
    assert "NO at the full concurrency" in text


def test_an_engines_own_running_limit_admits_fewer(h100: Serving, capsys) -> None:
    # --max-concurrency 6 (vLLM's max_num_seqs) below the KV cache's 26: 6 of 24 run, and
    # each request first waits (24 / 6 - 1) = 3 E2Es of the 6-client loop.
    capped = serve(h100, Request(16000, 4000, 24, max_concurrency=6), {})
    run = serve(h100, Request(16000, 4000, 6), {})
    a = capped["admission"]
    assert (a["admitted_per_scheduler"], a["cap_per_rank"], a["max_concurrency"]) == (6, 6, 6)
    assert capped["fits"]                  # all 24 fit the KV cache (26); the engine runs 6
    assert capped["tpot_s"] == run["tpot_s"]
    assert capped["ttft_s"] == pytest.approx(run["ttft_s"] + 3 * run["e2e_s"], rel=1e-12)
    assert main(ADMISSION + ["--concurrency", "24", "--max-concurrency", "6", "--simulate",
                             "--requests", "300", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["simulated"]["admitted_per_scheduler"] == 6
    assert r["simulated"]["ttft_s"] == pytest.approx(r["ttft_s"], rel=0.02)
    assert main(ADMISSION + ["--concurrency", "24", "--max-concurrency", "6"]) == 0
    assert "admission: --max-concurrency 6 runs 6 per rank, so 6 of a scheduler's 24" in \
        capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--max-concurrency", "0"], "--max-concurrency 0: must be a whole number at least 1"),
    (["--max-concurrency", "4", "--batching", "static"],
     "--max-concurrency caps a continuous-batching engine's running requests"),
])
def test_bad_max_concurrency_in_the_closed_loop(extra, message, capsys) -> None:
    assert main(ADMISSION + ["--concurrency", "8"] + extra) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
