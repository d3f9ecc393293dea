"""Serving runs in the measurements (issue #23): a TPOT or TTFT row with its request
(isl, osl, concurrency, chunk) is costed as `infest serve` costs it, at any parameters.

The tiny model of tests/test_continuous.py (one layer, 1 TB/s, 100 TFLOP/s, no launch
cost) is worked by hand there: C = 3, K = 512, ISL 1000, OSL 11 gives two chunk steps of
510 and 490 prompt tokens beside 2 decoders (m0, m1) and 6 pure decode steps of 3
tokens; TTFT = m0 + m1, TPOT = (4 (m0 + m1) / 2 + 6 pure) / 10.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.analyses import calibrate as cal
from infest.compiler.analyses.arrivals import closed_loop
from infest.compiler.analyses.continuous import Budget, Decoding, schedule
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.compiler.api import analyze
from infest.dsl.errors import SpecError

FIXTURES = Path(__file__).parent / "fixtures" / "serving"
TINY, ROUND = FIXTURES / "tiny.arch", FIXTURES / "round.arch"
HEADER = "spec,hardware,tp,engine,phase,B,N,quantity,measured,isl,osl,concurrency,chunk\n"
# Efficiencies of 1, no kernel or ring-step latency, tiles of one row in 10^9: each op's
# estimate is its bound (tests/test_estimates.py), so the tiny model's steps are by hand.
IDEAL = {"eff_mem": 1, "eff_flops": 1, "eff_attn": 1, "eff_kv": 1, "eff_link": 1,
         "kernel_latency": 0, "coll_step_latency": 0, "gemm_tile_m": 1e-9, "gemm_tile_n": 1e-9}


def _tiny_step(n: float) -> float:
    """A step carrying n tokens (tests/test_continuous.py)."""
    weights, per_token = 2 * 1024**2, 4096
    return per_token * n / 1e12 + max(2 * 1024**2 * n / 1e14, (weights + per_token * n) / 1e12)


def _rows(tmp_path: Path, lines: str, hw: str | Path) -> list[cal.Prepared]:
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER + lines)
    return cal.prepare(cal.read_measurements(csv), str(hw), tmp_path)


def test_a_serving_row_is_costed_as_serve_by_hand(tmp_path: Path) -> None:
    ttft_row, tpot_row = _rows(tmp_path, f"{TINY},{ROUND},1,,prefill,1,1000,ttft_s,30e-6,1000,11,3,512\n"
                                         f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,1000,11,3,512\n", ROUND)
    m0, m1, pure = _tiny_step(2 + 510), _tiny_step(2 + 490), _tiny_step(3)
    s, r = 2e-6, 1e-3             # a step overhead on every step, a request overhead once
    params = {**IDEAL, "step_overhead": s, "request_overhead": r}
    # TPOT: 4 mixed and 6 pure steps of the 10, every one with its overhead.
    tpot = (4 * (m0 + m1) / 2 + 6 * pure) / 10 + s
    assert float(tpot_row.estimate(params)) == pytest.approx(tpot, rel=1e-12)
    # TTFT: the two chunk steps, each with its step overhead, plus the request overhead,
    # plus the closed loop's queueing for the 2 other clients (tests/test_arrivals.py).
    bare = m0 + s + m1 + s + r
    closed = {"sched": schedule(3, Budget(1000, 11, 512), Decoding(1.0, 10.0)),
              "mixed": (m0 + m1) / 2 + s, "pure": pure + s, "poll": 1.0, "ttft": bare,
              "tpot": tpot}
    queued = closed_loop(3, closed, Budget(1000, 11, 512), Decoding(1.0, 10.0))
    assert float(queued["wait"]) > 0 and float(queued["residual"]) > 0
    assert float(ttft_row.estimate(params)) == pytest.approx(float(queued["ttft"]), rel=1e-12)


def test_a_serving_rows_poll_interval_moves_its_ttft(tmp_path: Path) -> None:
    # The by-hand TTFT row above, its scheduler looking every 30 decode steps (a
    # poll_interval column): the closed loop's terms at poll 30, its TPOT unchanged.
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER.replace("\n", ",poll_interval\n")
                   + f"{TINY},{ROUND},1,,prefill,1,1000,ttft_s,30e-6,1000,11,3,512,30\n"
                   + f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,1000,11,3,512,30\n")
    ttft_row, tpot_row = cal.prepare(cal.read_measurements(csv), str(ROUND), tmp_path)
    [plain_ttft, plain_tpot] = _rows(tmp_path, f"{TINY},{ROUND},1,,prefill,1,1000,ttft_s,30e-6,1000,11,3,512\n"
                                               f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,1000,11,3,512\n", ROUND)
    assert ttft_row.inputs["poll_interval"] == 30 and plain_ttft.inputs["poll_interval"] == 1
    m0, m1, pure = _tiny_step(2 + 510), _tiny_step(2 + 490), _tiny_step(3)
    tpot = (4 * (m0 + m1) / 2 + 6 * pure) / 10
    closed = {"sched": schedule(3, Budget(1000, 11, 512), Decoding(1.0, 10.0)),
              "mixed": (m0 + m1) / 2, "pure": pure, "poll": 30.0, "ttft": m0 + m1, "tpot": tpot}
    queued = closed_loop(3, closed, Budget(1000, 11, 512), Decoding(1.0, 10.0))
    assert float(ttft_row.estimate(IDEAL)) == pytest.approx(float(queued["ttft"]), rel=1e-12)
    assert float(ttft_row.estimate(IDEAL)) > float(plain_ttft.estimate(IDEAL))
    assert float(tpot_row.estimate(IDEAL)) == float(plain_tpot.estimate(IDEAL))


def test_a_poll_interval_below_one_is_refused(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER.replace("\n", ",poll_interval\n")
                   + f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,1000,11,3,512,0.5\n")
    with pytest.raises(SpecError, match="poll_interval '0.5': expected decode steps from 1"):
        cal.read_measurements(csv)


@pytest.mark.parametrize("pp", [1, 2])
def test_a_serving_row_equals_serve_at_any_parameters(tmp_path: Path, pp: int) -> None:
    # Mixtral on 2 GPUs (experts, collectives; pp = 2: a stage hand-off) under vLLM's
    # profile: the row's estimate is serve's TPOT and TTFT, at the profile and elsewhere
    # (with two-batch overlap too: the step's collectives hidden, the extra hand-off not).
    layout, ep = ("tp", 2) if pp == 1 else ("pp", 1)
    csv = tmp_path / "m.csv"
    csv.write_text(f"spec,hardware,{layout},ep,engine,phase,B,N,quantity,measured,isl,osl,concurrency,chunk\n"
                   f"mixtral_8x7b,h200_sxm,2,{ep},vllm,decode,16,1535,tpot_s,0.02,1024,1024,16,2048\n"
                   f"mixtral_8x7b,h200_sxm,2,{ep},vllm,prefill,1,1024,ttft_s,0.2,1024,1024,16,2048\n")
    rows = cal.prepare(cal.read_measurements(csv), "h200_sxm", tmp_path)
    engine = Serving(*(analyze("mixtral_8x7b", hw="h200_sxm", phase=p, engine="vllm")
                       for p in ("decode", "prefill")))
    overrides = {layout: 2, "ep": ep}
    for params in ({}, {"eff_mem": 0.5, "kernel_latency": 2e-5, "step_overhead": 1e-3,
                        "request_overhead": 0.05}, {"comm_overlap": 1.0, "eff_link": 0.1}):
        want = serve(engine, Request(1024, 1024, 16, "continuous", 2048), {**overrides, **params})
        for p in rows:
            assert float(p.estimate(params)) == pytest.approx(want[cal.quantity(p.row)], rel=1e-12)


def test_a_serving_row_needs_two_output_tokens(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="osl 1"):
        _rows(tmp_path, f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,1000,1,3,512\n", ROUND)


def test_a_step_row_keeps_its_step(tmp_path: Path) -> None:
    # Without isl, osl and concurrency a tpot_s row is the decode step at B = concurrency.
    [row] = _rows(tmp_path, f"{TINY},{ROUND},1,,decode,3,1005,tpot_s,7e-6,,,,\n", ROUND)
    assert row.served is None
    assert float(row.estimate(IDEAL)) == pytest.approx(_tiny_step(3), rel=1e-12)
