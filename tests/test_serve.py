"""`infest serve`: metric identities, static and continuous batching, bad requests.

Expected values are derived by hand from the step forms `infest eval` already prints.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.serve import Engine, Request, serve
from infest.dsl.errors import SpecError
from infest.exports.cli import main

LLAMA8 = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(analyze(LLAMA8, hw="h200_sxm"), analyze(LLAMA8, hw="h200_sxm", phase="prefill"))


def _step(engine: Engine, **point) -> float:
    return engine.decode.evaluate(point)["step"]["time_s"]


def test_e2e_is_ttft_plus_osl_minus_one_tpot_exactly(engine: Engine) -> None:
    for batching in ("static", "continuous"):
        r = serve(engine, Request(1000, 50, 4, batching, 256), {})
        for m in (r, r["bound"]):
            assert m["e2e_s"] == m["ttft_s"] + (50 - 1) * m["tpot_s"]
            assert m["tokens_per_s_per_user"] == 1 / m["tpot_s"]


def test_static_ttft_is_the_prefill_and_tpot_lies_between_first_and_last_step(engine) -> None:
    r = serve(engine, Request(2048, 9, 8), {})
    # TTFT: the prefill step of 8 prompts of 2048 tokens.
    assert r["ttft_s"] == engine.prefill.evaluate({"B": 8, "N": 2048})["step"]["time_s"]
    # OSL 9: decode steps at N = 2048 .. 2055 (8 of them), all averaged.
    steps = [_step(engine, B=8, N=n) for n in range(2048, 2056)]
    assert r["tpot_s"] == pytest.approx(sum(steps) / 8, rel=1e-12)
    assert _step(engine, B=8, N=2048) <= r["tpot_s"] <= _step(engine, B=8, N=2048 + 9)
    # Static: 8 requests emit 8 x 9 tokens in one E2E.
    assert r["tokens_per_s"] == pytest.approx(8 * 9 / r["e2e_s"], rel=1e-12)
    assert r["gpus"] == 1 and r["fits"]


def test_chunked_prefill_worked_by_hand(engine: Engine) -> None:
    # ISL 1000, chunk 256: P = ceil(1000 / 256) = 4 chunks of 256, 256, 256, 232 tokens
    # against 0, 256, 512, 768 cached. C = 4 requests finish every OSL - 1 = 49 steps, so
    # 4 x 4 = 16 of every 49 steps carry a chunk; the other 33 are pure decode steps at
    # B = 4, N = 1000 + (50 - 2) / 2 = 1024.
    # Llama 3.1 8B on one H200 is weight-bound at these sizes; a mixed step reads the
    # weights once, so it costs at least a pure decode step and less than decode + chunk.
    r = serve(engine, Request(1000, 50, 4, "continuous", 256), {})
    assert (r["chunks"], r["chunk_steps"]) == (4, 16)
    pure = _step(engine, B=4, N=1024)
    chunk0 = _step(engine, B=1, T=256, N=768)  # a step with only the largest-context chunk
    mixed_total = r["ttft_s"]  # TTFT = the 4 mixed steps of one prompt
    assert 4 * pure < mixed_total < 4 * (pure + chunk0)
    # TPOT = (16 x mean mixed + 33 x pure) / 49
    assert r["tpot_s"] == pytest.approx((16 * mixed_total / 4 + 33 * pure) / 49, rel=1e-12)


def test_a_chunk_that_cannot_keep_up_says_what_would(engine: Engine) -> None:
    # 64 requests finish every 99 steps; a prompt of 8192 in chunks of 512 needs 16 steps:
    # 64 x 16 > 99. At most floor(99 / 64) = 1 chunk step per prompt: chunk >= 8192.
    with pytest.raises(SpecError, match="at least 8192"):
        serve(engine, Request(8192, 100, 64, "continuous", 512), {})


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
    import json
    assert main(["serve", str(LLAMA8), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
                 "--concurrency", "2", "--set", "tp=2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "tokens_per_s_per_gpu",
                "tokens_per_s_per_user", "requests_per_s", "gpus", "fits"):
        assert key in r
    assert r["gpus"] == 2  # tp = 2: 2 GPUs
    assert r["tokens_per_s_per_gpu"] == r["tokens_per_s"] / 2
