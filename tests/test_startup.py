"""A benchmark's synchronised start (compiler/analyses/startup.py): serve --prompts P and a
measurement's `prompts` column weigh the first wave of C prompts, sent at once, into the
mean TTFT of P prompts.

The tiny model of tests/test_served_rows.py (a step of n tokens costs _tiny_step(n), any
context): C = 3, K = 512, ISL 1000, OSL 11.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.analyses import calibrate as cal
from infest.compiler.analyses.continuous import Budget
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.compiler.analyses.startup import wave_position
from infest.compiler.api import analyze
from infest.dsl.errors import SpecError

from test_served_rows import HEADER, IDEAL, ROUND, TINY, _tiny_step

ROW = f"{TINY},{ROUND},1,,prefill,1,1000,ttft_s,30e-6,1000,11,3,512"


def _rows(tmp_path: Path, lines: str, extra: str = "") -> list[cal.Prepared]:
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER.replace("\n", extra + "\n") + lines)
    return cal.prepare(cal.read_measurements(csv), str(ROUND), tmp_path)


def test_the_wave_steps_by_hand() -> None:
    # ISL 1000 in steps of 512 tokens: prompt k ends in step ceil(k x 1000 / 512):
    # 2, 4 and 6 for k = 1, 2, 3; mean 4.
    assert wave_position(3, Budget(1000, 11, 512)) == 4.0
    # 64 prompts of 922 in steps of 32,768: 35 x 922 = 32,270 fit the first step, the
    # other 29 end in the second: (35 x 1 + 29 x 2) / 64 = 93 / 64.
    assert wave_position(64, Budget(922, 922, 32768)) == 93 / 64


def test_a_rows_prompts_weigh_the_first_wave_in(tmp_path: Path) -> None:
    [steady] = _rows(tmp_path, ROW + "\n")
    [started] = _rows(tmp_path, ROW + ",30\n", ",prompts")
    s, r = 2e-6, 1e-3
    params = {**IDEAL, "step_overhead": s, "request_overhead": r}
    # The first 3 of 30 prompts (share 0.1) arrive together: each waits for the wave's
    # steps up to its own (4 on average), each a 512-token chunk with its step overhead,
    # plus the request overhead; the other 27 meet the steady state.
    wave = r + 4 * (_tiny_step(512) + s)
    base = float(steady.estimate(params))
    assert float(started.estimate(params)) == pytest.approx(base + 0.1 * (wave - base), rel=1e-12)


def test_prompts_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="prompts 2: a whole number from the concurrency"):
        _rows(tmp_path, ROW + ",2\n", ",prompts")
    tpot = f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,1000,11,3,512,30\n"
    with pytest.raises(SpecError, match="prompts shapes TTFT only"):
        _rows(tmp_path, tpot, ",prompts")


def test_serve_prompts_equals_the_row_at_any_parameters(tmp_path: Path) -> None:
    # Mixtral on 2 GPUs under vLLM's profile, 16 clients, 160 prompts: the row's estimate
    # is serve --prompts 160's TTFT, at the profile and elsewhere.
    csv = tmp_path / "m.csv"
    csv.write_text("spec,hardware,tp,ep,engine,phase,B,N,quantity,measured,isl,osl,concurrency,"
                   "chunk,prompts\nmixtral_8x7b,h200_sxm,2,2,vllm,prefill,1,1024,ttft_s,0.2,"
                   "1024,1024,16,2048,160\n")
    [row] = cal.prepare(cal.read_measurements(csv), "h200_sxm", tmp_path)
    engine = Serving(*(analyze("mixtral_8x7b", hw="h200_sxm", phase=p, engine="vllm")
                       for p in ("decode", "prefill")))
    for params in ({}, {"eff_flops": 0.3, "step_overhead": 1e-3, "request_overhead": 0.05}):
        got = serve(engine, Request(1024, 1024, 16, "continuous", 2048, 160),
                    {"tp": 2, "ep": 2, **params})
        assert float(row.estimate(params)) == pytest.approx(got["ttft_s"], rel=1e-12)
        start = got["startup"]
        # 16 x 1024 tokens in steps of 2048: 2 prompts a step, mean step 4.5 (1..8).
        assert start["wave_steps"] == 4.5 and start["share"] == 0.1
        assert got["ttft_s"] == pytest.approx(
            start["steady_ttft_s"] + 0.1 * (start["wave_ttft_s"] - start["steady_ttft_s"]))
        assert start["wave_ttft_s"] > start["steady_ttft_s"]


@pytest.mark.parametrize("flags, message", [
    (["--concurrency", "4", "--prompts", "3"], "--prompts 3: a whole number from the concurrency (4)"),
    (["--rps", "2", "--prompts", "40"], "--prompts is a closed loop's benchmark"),
    (["--concurrency", "4", "--prompts", "40", "--batching", "static"], "--prompts is a closed loop"),
    (["--concurrency", "4", "--prompts", "40", "--draft", "mtp", "--acceptance", "0.5"],
     "--prompts with --draft"),
    (["--concurrency", "4", "--prompts", "20000000"], "MAX_PROMPTS"),
])
def test_serve_prompts_errors(flags, message, capsys) -> None:
    from infest.exports.cli.main import main
    argv = ["serve", str(TINY), "--hw", str(ROUND), "--isl", "100", "--osl", "4"] + flags
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_serve_prompts_text_names_the_wave(capsys) -> None:
    from infest.exports.cli.main import main
    argv = ["serve", str(TINY), "--hw", str(ROUND), "--isl", "1000", "--osl", "11",
            "--concurrency", "3", "--chunk", "512", "--prompts", "30"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "mean over 30 prompts from a synchronised start" in out
    assert "wave step 4 on average" in out


def test_serve_prompts_against_the_simulated_benchmark_as_run() -> None:
    # Qwen3-30B-A3B 1000/1000 on one H200 under SGLang's profile, 32 clients, 320 prompts
    # (lengths +-11%, as InferenceX's 819-1024): the closed form within 5% of the
    # simulated benchmark, every prompt from the synchronised start measured (at the
    # profile shipped with this test: 193 ms against 193-196 over three seeds; the steady
    # state alone 160 ms, the wave 486 ms: 16 steps of 2048 tokens for 32 prompts of 1000).
    from infest.compiler.analyses.serve_sim import simulated_closed
    from infest.compiler.backend.cache import cached_runner
    path = Path(__file__).parents[1] / "specs" / "models" / "qwen3_30b_a3b.arch"
    eng = Serving(*(cached_runner(path, "h200_sxm", phase=p, engine="sglang")
                    for p in ("decode", "prefill")))
    request = Request(1000, 1000, 32, "continuous", 2048, 320)
    got = serve(eng, request, {})
    sim = simulated_closed(eng, request, {}, 0, 0, 0.11)
    assert sim["warmup"] == 0 and sim["requests"] == 320
    assert abs(got["ttft_s"] - sim["ttft_s"]) / sim["ttft_s"] <= 0.05
    # prompt k of 1000 tokens ends in step ceil(k x 1000 / 2048): two in each of steps
    # 1..16, mean 8.5.
    assert got["startup"]["wave_steps"] == 8.5
