"""A TPOT measured on a server (issue #22, item 3): `diagnose --isl --osl (--concurrency |
--rps)` compares it with serve's prediction under the same scheduling, prefill chunks
included, and says which part of the gap to a bare decode step the scheduling explains.

The worked example is derived by hand from serve's documented continuous-batching model
(compiler/analyses/serve.py: a chunk of the prompt rides on C / dp x ceil(ISL / chunk) of
every OSL - 1 steps; in a mixed step bytes add, weights are read once)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.analyses.serve import Serving
from infest.compiler.analyses.served import Served, served, split
from infest.compiler.api import analyze
from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
TINY = "model m {\n  hidden = 4096\n  x = embed(tokens, 100 -> hidden)\n  y = linear(x, hidden -> hidden)\n}\n"
FAST = {"mem_bw": 10**12, "flops_bf16": 10**15}     # 1 TB/s, 1 PFLOP/s: easy arithmetic


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Serving:
    spec = tmp_path_factory.mktemp("served") / "m.arch"
    spec.write_text(TINY)
    return Serving(analyze(spec, hw="h100_sxm"), analyze(spec, hw="h100_sxm", phase="prefill"),
                   use="bound")


def test_served_tpot_by_hand_decode_step_plus_chunk_steps(tiny: Serving) -> None:
    # C = 4 requests, ISL 512, OSL 65 (R = 64 decode steps), budget K = 512 counting decode
    # tokens. While one prompt is in prefill the other 3 decode, so its chunks are
    # 512 - 3 = 509 tokens: P = ceil(512 / 509) = 2 chunk steps (509, then 3 tokens); the
    # other 3 prompts' 3 x 2 = 6 chunk steps fit in the 64 decode steps (prompts alone).
    # Every op is memory bound at 1 TB/s; a step of n tokens moves
    #   embed  n x 4096 x 2 B read + n x 4096 x 2 B written                = n x 16,384 B
    #   linear 4096 x 4096 x 2 B weights + n x (4096 + 4096) x 2 B         = 33,554,432 + n x 16,384 B
    #   -> 33,554,432 + 32,768 n B (linear FLOPs 2 n 4096^2 at n = 512: 17.4 us < 50.3 us)
    # pure decode step, n = 4:                 33,685,504 B = 33.685504 us
    # mixed steps, 3 decoders + chunk:  n = 512: 50,331,648 B = 50.331648 us
    #                                   n = 6:   33,751,040 B = 33.75104 us
    # TPOT = (3 x (50.331648 + 33.75104) + 58 x 33.685504) / 64 = 2206.007296 / 64
    #      = 34.468864 us
    s = Served(isl=512, osl=65, tpot_s=40e-6, concurrency=4, chunk=512)
    v = served(tiny, s, FAST)
    assert v["decode_step_bound_s"] == pytest.approx(33.685504e-6, rel=1e-12)
    assert v["tpot_bound_s"] == pytest.approx(34.468864e-6, rel=1e-12)
    # the chunks add 34.468864 - 33.685504 = 0.78336 us a token (use="bound": estimate = bound)
    assert v["scheduling_s"] == pytest.approx(0.78336e-6, rel=1e-9)
    # measured 40 us: gap 40 - 33.685504 = 6.314496 us; scheduling explains
    # 0.78336 / 6.314496 = 12.4% of it; 40 - 34.468864 = 5.531136 us left
    assert v["gap_s"] == pytest.approx(6.314496e-6, rel=1e-9)
    assert v["scheduling_share"] == pytest.approx(0.78336 / 6.314496, rel=1e-9)
    assert v["unexplained_s"] == pytest.approx(5.531136e-6, rel=1e-9)


def test_split_caps_the_share_and_has_none_without_a_gap() -> None:
    # served TPOT 12 over a bare 10: 2 of scheduling; measured 11 -> gap 1, share capped at 1
    assert split(11.0, 10.0, 12.0) == {"scheduling_s": 2.0, "gap_s": 1.0,
                                       "scheduling_share": 1.0, "unexplained_s": -1.0}
    assert split(9.0, 10.0, 12.0)["scheduling_share"] is None   # faster than the bare step


def test_rps_finds_the_concurrency_by_littles_law(tiny: Serving) -> None:
    s = Served(isl=512, osl=65, tpot_s=40e-6, rps=2000.0, chunk=512)
    c = served(tiny, s, FAST)["concurrency"]
    # the smallest C whose closed-loop rate C / E2E reaches 2000 req/s
    rate = {n: main_rate(tiny, n) for n in (c - 1, c)}
    assert rate[c] >= 2000 > rate[c - 1]


def main_rate(engine: Serving, c: int) -> float:
    from infest.compiler.analyses.serve import Request, serve
    return serve(engine, Request(512, 65, c, "continuous", 512), FAST)["requests_per_s"]


def test_cli_served_json_and_text(capsys) -> None:
    args = ["diagnose", LLAMA, "--hw", "h200_sxm", "--measured-step", "12ms", "--isl", "1024",
            "--osl", "256", "--concurrency", "32", "--measured-ttft", "200ms"]
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    v = d["served"]
    assert v["concurrency"] == 32 and v["batching"] == "continuous"
    assert v["measured_tpot_s"] == 0.012 and v["measured_ttft_s"] == 0.2
    assert v["tpot_s"] > v["decode_step_s"]          # chunks ride on some decode steps
    assert v["ttft_ratio"] == pytest.approx(0.2 / v["ttft_s"])
    # candidates are read at B = 32, N = 1024 + (256 - 2) // 2 = 1151
    assert d["inputs"]["B"] == 32 and d["inputs"]["N"] == 1151
    assert main(args) == 0
    assert "scheduling explains" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--isl", "1024"], "--isl and --osl go together"),
    (["--concurrency", "8"], "--concurrency describes a served measurement"),
    (["--isl", "1024", "--osl", "256"], "needs --concurrency C or --rps R"),
    (["--isl", "1024", "--osl", "256", "--rps", "1e9"], "saturated"),
    (["--isl", "1024", "--osl", "256", "--concurrency", "8", "--set", "B=4"], "--set B"),
])
def test_served_arguments_are_checked(capsys, extra: list[str], message: str) -> None:
    assert main(["diagnose", LLAMA, "--hw", "h200_sxm", "--measured-step", "12ms", *extra]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
