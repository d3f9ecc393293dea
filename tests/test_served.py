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
    # C = 4 requests, ISL 512, OSL 65, chunk 512: one chunk per prompt; 4 prompts start
    # every 64 steps, so 4 of the 64 decode steps carry a 512-token chunk.
    # Decode step at B = 4 (every op memory bound at 1 TB/s):
    #   embed  4 rows x 4096 x 2 B read + 4 x 4096 x 2 B written         =     65,536 B
    #   linear 4096 x 4096 x 2 B weights + 4 x (4096 + 4096) x 2 B        = 33,619,968 B
    #   -> 33,685,504 B = 33.685504 us (FLOPs: 2 x 4 x 4096^2 = 0.13 us, under it)
    # A chunk step adds the chunk's 512 tokens, weights read once: 512 x (16,384 B embed
    #   + 16,384 B linear activations) = 16,777,216 B = 16.777216 us -> 50.46272 us
    #   (linear FLOPs 2 x 516 x 4096^2 = 17.3 us, still under its 42.0 us of bytes)
    # TPOT = (4 x 50.46272 + 60 x 33.685504) / 64 = 2222.98112 / 64 = 34.73408 us
    s = Served(isl=512, osl=65, tpot_s=40e-6, concurrency=4, chunk=512)
    v = served(tiny, s, FAST)
    assert v["decode_step_bound_s"] == pytest.approx(33.685504e-6, rel=1e-12)
    assert v["tpot_bound_s"] == pytest.approx(34.73408e-6, rel=1e-12)
    # the chunks add 4 x 16.777216 / 64 = 1.048576 us a token (use="bound": estimate = bound)
    assert v["scheduling_s"] == pytest.approx(1.048576e-6, rel=1e-9)
    # measured 40 us: gap 40 - 33.685504 = 6.314496 us; scheduling explains
    # 1.048576 / 6.314496 = 16.6% of it; 40 - 34.73408 = 5.26592 us left
    assert v["gap_s"] == pytest.approx(6.314496e-6, rel=1e-9)
    assert v["scheduling_share"] == pytest.approx(1.048576 / 6.314496, rel=1e-9)
    assert v["unexplained_s"] == pytest.approx(5.26592e-6, rel=1e-9)


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
