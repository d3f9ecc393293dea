"""Estimates beside bounds (issue #14, item 1): step.estimate_s divides each bound term by
its efficiency (eff_mem, eff_flops, eff_link in (0, 1], defaults 0.8 / 0.7 / 0.8) and
keeps the launch floor, so it is never below the roofline; the roofline (serial kernels)
is never below the overlap floor (issue #22)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infest.compiler.api import analyze
from infest.compiler.core.terms import HARD_KEYS
from infest.dsl.errors import SpecError

ROOT = Path(__file__).parents[1]
MODELS = sorted((ROOT / "specs" / "models").glob("*.arch"))
HARDWARE = ("h100_sxm", "h200_sxm", "gh200")
LLAMA = ROOT / "specs" / "models" / "llama3_1_8b.arch"
D, LAYERS, HKV, HD, FFN, VOCAB = 4096, 32, 8, 128, 14336, 128256


@lru_cache(maxsize=None)
def _analysis(model: str, hw: str, phase: str):
    return analyze(ROOT / "specs" / "models" / model, hw=hw, phase=phase)


def test_llama_8b_decode_b1_estimate_by_hand() -> None:
    # Eager engine on h100_sxm: one kernel per op, 4 us each; effs 0.8 (HBM), 0.7 (math).
    # At B=1 every op's bytes / (0.8 x 3.35 TB/s) beats its FLOPs / (0.7 x 989 TFLOP/s)
    # (a linear reads 2 bytes per 2 FLOPs), so each op costs max(bytes / 2.68e12, 4 us).
    # Under 4 us x 2.68e12 = 10.72 MB: both rmsnorms, k and v (4096 x 1024 x 2 = 8.4 MB),
    # both adds and silu_mul in each layer, plus the embedding gather and the final norm:
    # 32 x 7 + 2 = 226 launch-bound kernels. The rest are memory bound:
    kv_layer = 2 * HKV * HD * 2 * (4096 + 1)              # read N = 4096 cached tokens, write 1
    attn_act = 2 * (2 * D + 2 * HKV * HD)                 # q, k, v in, output out (bf16)
    layer = (2 * (2 * D * D + 4 * D)                       # q and o: weights, input, output
             + kv_layer + attn_act
             + 3 * (2 * D * FFN + 2 * (D + FFN)))          # gate, up, down
    head = 2 * VOCAB * D + 2 * (D + VOCAB)                 # LM head on the last token
    expected = (LAYERS * layer + head) / (0.8 * 3.35e12) + 226 * 4e-6   # = 6.5066 ms
    step = _analysis("llama3_1_8b.arch", "h100_sxm", "decode").evaluate({"B": 1, "N": 4096})["step"]
    assert step["estimate_s"] == pytest.approx(expected, rel=1e-12)
    assert step["tokens_per_s_estimate"] == pytest.approx(1 / expected, rel=1e-12)


def test_no_launch_floor_b1_estimate_is_the_roofline_over_eff_mem() -> None:
    # Every op memory bound at B=1 (above), so with launch_overhead 0 and eff_mem 0.5 the
    # estimate is exactly twice the roofline (step bytes / mem_bw).
    a = _analysis("llama3_1_8b.arch", "h100_sxm", "decode")
    step = a.evaluate({"B": 1, "N": 4096, "launch_overhead": 0, "eff_mem": 0.5})["step"]
    assert step["estimate_s"] == pytest.approx(2 * step["roofline_s"], rel=1e-12)


def test_effs_of_one_give_the_launch_floored_time() -> None:
    a = _analysis("llama3_1_8b.arch", "h100_sxm", "decode")
    step = a.evaluate({"B": 64, "N": 1024, "eff_mem": 1, "eff_flops": 1, "eff_link": 1})["step"]
    assert step["estimate_s"] == pytest.approx(step["time_s"], rel=1e-12)


@pytest.mark.parametrize("value", [0, 1.5, -0.2])
def test_eff_outside_zero_one_is_refused(value: float) -> None:
    a = _analysis("llama3_1_8b.arch", "h100_sxm", "decode")
    with pytest.raises(SpecError, match=r"eff_mem: the value must be in \(0, 1\]"):
        a.evaluate({"eff_mem": value})


def test_eff_in_a_hardware_file_is_checked(tmp_path: Path) -> None:
    hw = tmp_path / "slow.arch"
    hw.write_text('hardware slow "x" {\n  mem_capacity = 80 GB; mem_bw = 3 TB/s\n'
                  '  launch_overhead = 4 us; eff_mem = 1.2\n}\n')
    with pytest.raises(SpecError, match=r"'eff_mem' must be in \(0, 1\]"):
        analyze(LLAMA, hw=str(hw))


def test_eff_in_a_hardware_file_is_used(tmp_path: Path) -> None:
    hw = tmp_path / "fast.arch"
    hw.write_text('hardware fast "x" {\n  mem_capacity = 80 GB; mem_bw = 3.35 TB/s\n'
                  '  flops_bf16 = 989 TFLOP/s; launch_overhead = 0 us; eff_mem = 0.25\n}\n')
    step = analyze(LLAMA, hw=str(hw)).evaluate({"B": 1})["step"]
    assert step["estimate_s"] == pytest.approx(4 * step["roofline_s"], rel=1e-12)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(model=st.sampled_from([m.name for m in MODELS]), hw=st.sampled_from(HARDWARE),
       phase=st.sampled_from(("decode", "prefill")), b=st.integers(1, 512),
       n=st.integers(1, 32768), tp=st.sampled_from((1, 2, 4, 8)),
       effs=st.tuples(*(st.floats(0.05, 1.0) for _ in range(3))))
def test_estimate_is_never_below_the_bound(model, hw, phase, b, n, tp, effs) -> None:
    a = _analysis(model, hw, phase)
    point = {"B": b * tp, "N": n, "tp": tp,
             **dict(zip(("eff_mem", "eff_flops", "eff_link"), effs))}
    try:
        step = a.evaluate(point)["step"]
    except SpecError:
        return  # a layout the model refuses (tp must divide its heads, ...)
    assert step["estimate_s"] >= step["time_s"] * (1 - 1e-12)
    assert step["time_s"] >= step["roofline_s"] * (1 - 1e-12)
    # max of the step's sums <= the sum of each op's max: overlap never beats the floor
    assert step["roofline_s"] >= step["overlap_floor_s"] * (1 - 1e-12)
    assert step["overlap_floor_s"] == pytest.approx(max(step[k] for k in HARD_KEYS), rel=1e-12)
    assert step["tokens_per_s_estimate"] <= step["tokens_per_s"] * (1 + 1e-12)


def test_measured_ceilings_set_the_default_efficiencies() -> None:
    # h200_sxm carries mem_bw_measured = 4.3 TB/s beside mem_bw = 4.8 TB/s and
    # flops_bf16_measured = 790 beside flops_bf16 = 989 TFLOP/s: eff_mem = 4.3 / 4.8 =
    # 0.8958, eff_flops = 790 / 989 = 0.7988; eff_link has no measured field: 0.8.
    ins = _analysis("llama3_1_8b.arch", "h200_sxm", "decode").evaluate()["inputs"]
    assert ins["eff_mem"] == pytest.approx(4.3 / 4.8, rel=1e-12)
    assert ins["eff_flops"] == pytest.approx(790 / 989, rel=1e-12)
    assert ins["eff_link"] == 0.8


def test_every_public_measurement_is_slower_than_its_bound() -> None:
    # bench/measurements.csv: bound / measured <= 1 on every row (bench/accuracy.py).
    from infest.compiler.analyses import calibrate as cal
    path = ROOT / "bench" / "measurements.csv"
    rows = cal.read_measurements(path)
    assert len(rows) >= 15
    for hw in {r.hardware for r in rows}:
        for p in cal.prepare([r for r in rows if r.hardware == hw], hw, path.parent):
            assert p.bound_s <= p.row.step_s, f"line {p.row.span.line}"


def _serve_engine(use: str):
    from infest.compiler.analyses.serve import Serving
    return Serving(_analysis("llama3_1_8b.arch", "h200_sxm", "decode"),
                  _analysis("llama3_1_8b.arch", "h200_sxm", "prefill"), use=use)


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_serve_uses_the_estimate_or_the_bound(batching: str) -> None:
    from infest.compiler.analyses.serve import Request, serve
    request = Request(2048, 65, 8, batching, 512)
    bound = serve(_serve_engine("bound"), request, {})
    estimate = serve(_serve_engine("estimate"), request, {})
    # --use bound: the metrics are the bound's; the bound column is the same either way.
    assert bound["tpot_s"] == bound["bound"]["tpot_s"] == estimate["bound"]["tpot_s"]
    assert estimate["tpot_s"] > bound["tpot_s"] and estimate["ttft_s"] > bound["ttft_s"]
    # Efficiencies of 1 and no launch floor: the estimate is the bound, mixed steps too.
    ideal = {"eff_mem": 1, "eff_flops": 1, "eff_link": 1, "launch_overhead": 0}
    same = serve(_serve_engine("estimate"), request, ideal)
    assert same["tpot_s"] == pytest.approx(same["bound"]["tpot_s"], rel=1e-12)
    assert same["ttft_s"] == pytest.approx(same["bound"]["ttft_s"], rel=1e-12)


def test_cli_use_flag(capsys) -> None:
    import json
    from infest.exports.cli.main import main
    args = ["serve", "llama3_1_8b", "--hw", "h200_sxm", "--isl", "128", "--osl", "9",
            "--concurrency", "4", "--json"]
    assert main(args + ["--use", "bound"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["use"] == "bound" and r["tpot_s"] == r["bound"]["tpot_s"]
    with pytest.raises(SystemExit) as exc:  # bad arguments: argparse's error, exit 1
        main(args + ["--use", "guess"])
    assert exc.value.code == 1
    assert "invalid choice: 'guess'" in capsys.readouterr().err
