"""Elasticities d ln t / d ln x of the step time, exact from the closed forms."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.sensitivity import elasticities
from infest.exports.cli.main import main

TOY = """\
hardware toy "toy" {
  mem_capacity = 80 GB;  mem_bw = 1 TB/s;  launch_overhead = 1 us;  flops_bf16 = 1000 TFLOP/s
}
model toy {
  w = 3000000
  a = custom(weight_bytes = w)      # 3 MB / 1 TB/s = 3 us: memory bound (launch: 1 us)
  b = custom(weight_bytes = 1)      # 1 B: launch bound at 1 us
}
"""


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.arch"
    path.write_text(TOY)
    return path


def _by_name(spec: Path) -> dict:
    a = analyze(spec, hw="toy")
    return {e.name: e for e in elasticities(a, a.inputs({}), a.evaluate({}))}


def test_two_op_toy_by_hand(toy: Path) -> None:
    e = _by_name(toy)
    # t = w / mem_bw + launch_overhead = 3 us + 1 us = 4 us
    # d ln t / d ln mem_bw = -(w / mem_bw) / t = -3/4; launch_overhead: 1/4; w: 3/4
    assert e["mem_bw"].value == pytest.approx(-0.75, rel=1e-12)
    assert e["launch_overhead"].value == pytest.approx(0.25, rel=1e-12)
    assert e["w"].value == pytest.approx(0.75, rel=1e-12)
    # halving launch_overhead: 3 + 0.5 = 3.5 us, saves 0.5 / 4 = 12.5%
    assert e["launch_overhead"].halving_gain == pytest.approx(0.125, rel=1e-12)
    # halving mem_bw: 6 + 1 = 7 us, 75% more time
    assert e["mem_bw"].halving_gain == pytest.approx(-0.75, rel=1e-12)


def test_ranked_by_magnitude(toy: Path) -> None:
    a = analyze(toy, hw="toy")
    ranked = [e.name for e in elasticities(a, a.inputs({}), a.evaluate({}))]
    assert ranked[-1] == "launch_overhead"          # |0.25| after the two |0.75|s
    assert set(ranked) == {"mem_bw", "w", "launch_overhead"}  # flops_bf16 does not bind


def test_weight_bound_decode_scales_with_bandwidth() -> None:
    # Llama 3.1 8B at B=1 on H100: the weights dominate the step, so 1% more bandwidth
    # saves almost 1% of the memory-bound part; the elasticities of t_memory-bound ops and
    # launch-bound ops partition the step: e(mem_bw) + e(launch_overhead) = -(mem share) + launch share
    spec = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"
    a = analyze(spec, hw="h100_sxm")
    r = a.evaluate({})
    e = {x.name: x.value for x in elasticities(a, a.inputs({}), r)}
    mem_ops = sum(o["time_s"] * o["count"] for o in r["ops"] if o["bound"] not in ("launch", "compute"))
    launch_ops = sum(o["time_s"] * o["count"] for o in r["ops"] if o["bound"] == "launch")
    assert e["mem_bw"] == pytest.approx(-mem_ops / r["step"]["time_s"], rel=1e-9)
    assert e["launch_overhead"] == pytest.approx(launch_ops / r["step"]["time_s"], rel=1e-9)


def test_eval_sensitivity_flag(capsys, toy: Path) -> None:
    assert main(["eval", str(toy), "--hw", "toy", "--json", "--sensitivity"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sensitivity"][0]["elasticity"] == pytest.approx(-0.75)
    assert main(["eval", str(toy), "--hw", "toy", "--sensitivity"]) == 0
    assert "sensitivity of the step time" in capsys.readouterr().out
