"""The shipped hardware catalogue: every file loads, each part's numbers are the
datasheet's (one hand-checked ratio per part against the H100 SXM), parts lack the math
their silicon lacks, and `infest list` shows them."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hardware import compile_hardware
from infest.compiler.loader import load_program, shipped
from infest.dsl.errors import SpecError
from infest.exports.cli import main

MODELS = Path(__file__).parents[1] / "specs" / "models"
CATALOGUE = ("a100_sxm_80gb", "h20", "b200", "mi300x", "l40s", "rtx_4090", "rtx_5090")


def fields(name: str) -> dict[str, float]:
    """A shipped hardware file's fields in base units."""
    (hw, file), = load_program(shipped("hardware")[name]).hardware.values()
    return {k: float(v.value) for k, v in compile_hardware(hw, file).fields.items()}


@pytest.mark.parametrize("name", CATALOGUE)
def test_each_part_loads_with_links(name: str) -> None:
    f = fields(name)
    for key in ("mem_capacity", "mem_bw", "flops_bf16", "launch_overhead", "link_bw",
                "gpus_per_node", "host_bw", "host_capacity", "sms"):
        assert f[key] > 0, key


@pytest.mark.parametrize("name, key, ratio", [
    # A100 bf16 312 TFLOP/s vs H100 989: 312 / 989 = 0.31547
    ("a100_sxm_80gb", "flops_bf16", 312 / 989),
    # H20 fp8 296 vs H100 1979: 0.14957
    ("h20", "flops_fp8", 296 / 1979),
    # B200 bf16 dense 36 PFLOPS sparse / 8 GPUs / 2 = 2250 TFLOP/s vs 989: 2.275
    ("b200", "flops_bf16", 2250 / 989),
    # MI300X 5.3 TB/s vs 3.35 TB/s: 1.582
    ("mi300x", "mem_bw", 5.3 / 3.35),
    # L40S 48 GB GDDR6 vs 80 GB: 0.6
    ("l40s", "mem_capacity", 48 / 80),
    # RTX 4090 1008 GB/s vs 3350 GB/s: 0.3009
    ("rtx_4090", "mem_bw", 1008 / 3350),
    # RTX 5090 fp8 (FP32 accumulate) 419 vs 1979: 0.2117
    ("rtx_5090", "flops_fp8", 419 / 1979),
])
def test_one_ratio_per_part_against_the_h100(name: str, key: str, ratio: float) -> None:
    assert fields(name)[key] / fields("h100_sxm")[key] == pytest.approx(ratio, rel=1e-9)


def test_b200_fp4_is_four_times_bf16() -> None:
    f = fields("b200")  # 9 PFLOPS fp4 dense / 2.25 PFLOPS bf16 dense
    assert f["flops_fp4"] / f["flops_bf16"] == 4


@pytest.mark.parametrize("name, absent", [
    ("a100_sxm_80gb", "flops_fp8"), ("a100_sxm_80gb", "flops_fp4"), ("h20", "flops_fp4"),
    ("mi300x", "flops_fp4"), ("l40s", "flops_fp4"), ("rtx_4090", "flops_fp4")])
def test_parts_lack_math_their_silicon_lacks(name: str, absent: str) -> None:
    assert absent not in fields(name)


def test_fp8_model_on_an_a100_names_the_missing_peak() -> None:
    with pytest.raises(SpecError, match="flops_fp8"):
        analyze(MODELS / "llama3_1_8b_fp8.arch", hw="a100_sxm_80gb").evaluate({"B": 1})


def test_decode_step_on_an_a100_is_weight_bound_at_its_bandwidth() -> None:
    """Llama 3.1 8B at B=1 reads every weight but the embedding table once: (8,030,261,248 -
    525,336,576) params x 2 bytes = 15,009,849,344 bytes / 2.039e12 B/s = 7.361 ms; the KV
    cache (537 MB at N=4096) adds ~4%."""
    r = analyze(MODELS / "llama3_1_8b.arch", hw="a100_sxm_80gb").evaluate({"B": 1, "N": 4096})
    floor = 15_009_849_344 / 2.039e12
    assert floor <= r["step"]["roofline_s"] < floor * 1.06


def test_list_shows_the_catalogue(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    hardware = out.split("hardware")[1].split("ops (")[0]
    for name in CATALOGUE:
        assert name in hardware
    # the A100 row: 80 GB, 2.04 TB/s, no fp8 or fp4 peak
    row = next(line for line in hardware.splitlines() if line.startswith("a100_sxm_80gb"))
    assert "80 GB" in row and "2.04 TB/s" in row and row.split().count("-") == 2
