"""Expert offload (compiler/passes/offload.py): hand-derived host-link traffic and memory.

Qwen3-30B-A3B (specs/models/qwen3_30b_a3b.arch, bf16): 48 layers, 128 routed experts,
top_k 8, hidden 2048, expert_ffn 768. One expert = gate + up + down = 3 x 2048 x 768
params x 2 B = 9,437,184 B (the 9.4 MB of the issue). At B = T = 1 a layer's token
touches top_k = 8 experts: 8 x 9,437,184 = 75,497,472 B of expert weights per layer.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.dsl.errors import SpecError

ROOT = Path(__file__).parents[1]
QWEN = ROOT / "specs" / "models" / "qwen3_30b_a3b.arch"
EXPERT = 3 * 2048 * 768 * 2                  # 9,437,184 B
TOUCHED = 48 * 8 * EXPERT                    # 3,623,878,656 B per step at B = 1
HELD_EXPERTS = 48 * 128 * EXPERT             # 57,982,058,496 B held when all resident
HOST_BW = 64e9                               # h100_sxm: PCIe Gen5 x16, one direction


@pytest.fixture(scope="module")
def qwen():
    return analyze(QWEN, hw="h100_sxm")


def test_all_experts_resident_by_default(qwen):
    r = qwen.evaluate({})
    assert r["inputs"]["gpu_experts"] == 128 and r["inputs"]["hit_rate"] == 0
    assert r["step"]["host_bytes"] == 0 and r["step"]["t_host_s"] == 0


def test_a_quarter_resident_misses_three_quarters(qwen):
    full = qwen.evaluate({})
    r = qwen.evaluate({"gpu_experts": 32})
    # uniform routing: hit = 32 / 128 = 0.25; misses = 0.75 x 3,623,878,656 = 2,717,908,992
    assert r["step"]["host_bytes"] == pytest.approx(0.75 * TOUCHED, rel=1e-12)
    assert r["step"]["t_host_s"] == pytest.approx(0.75 * TOUCHED / HOST_BW, rel=1e-12)  # 42.5 ms
    assert r["step"]["bound"] == "host"
    # memory holds a quarter of the experts: 0.75 x 57,982,058,496 = 43,486,543,872 less
    assert full["memory"]["weights_bytes"] - r["memory"]["weights_bytes"] == \
        pytest.approx(0.75 * HELD_EXPERTS, rel=1e-12)


@pytest.mark.parametrize("hit_rate, hit", [(0.9, 0.9), (0.1, 0.25)])
def test_a_measured_hit_rate_overrides_the_uniform_share(qwen, hit_rate, hit):
    # hit = max(cache share 0.25, hit_rate): skewed routing helps, never hurts
    r = qwen.evaluate({"gpu_experts": 32, "hit_rate": hit_rate})
    assert r["step"]["host_bytes"] == pytest.approx((1 - hit) * TOUCHED, rel=1e-12)


def test_no_expert_resident_and_more_than_all(qwen):
    assert qwen.evaluate({"gpu_experts": 0})["step"]["host_bytes"] == pytest.approx(TOUCHED)
    assert qwen.evaluate({"gpu_experts": 200})["step"]["host_bytes"] == 0  # min(200, 128)


@pytest.mark.parametrize("overrides, message", [
    ({"hit_rate": 1.5}, "hit_rate <= 1 does not hold"),
    ({"gpu_experts": 32.5}, "gpu_experts must be a whole number"),
    ({"gpu_experts": -1}, "must be 0 or more"),
])
def test_bad_offload_inputs(qwen, overrides, message):
    with pytest.raises(SpecError, match=message):
        qwen.evaluate(overrides)


def test_dense_models_and_hardware_without_a_host_link_have_no_offload(tmp_path):
    llama = analyze(ROOT / "specs" / "models" / "llama3_1_8b.arch", hw="h100_sxm")
    with pytest.raises(SpecError, match="--set gpu_experts: no such input"):
        llama.evaluate({"gpu_experts": 4})
    hw = tmp_path / "nohost.arch"
    text = (ROOT / "specs" / "hardware" / "h100_sxm.arch").read_text()
    hw.write_text("\n".join(line for line in text.splitlines() if "host_bw" not in line))
    r = analyze(QWEN, hw=str(hw)).evaluate({})
    assert "gpu_experts" not in r["inputs"] and r["step"]["host_bytes"] == 0


def test_continuous_serving_counts_the_host_term(capsys):
    from infest.exports.cli.main import main
    args = ["serve", str(QWEN), "--hw", "h100_sxm", "--isl", "512", "--osl", "64",
            "--concurrency", "4", "--batching", "continuous", "--chunk", "256"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main(args + ["--set", "gpu_experts=32"]) == 0
    assert capsys.readouterr().out != plain
