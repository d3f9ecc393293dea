"""The shipped hardware catalogue: every file loads, each part's numbers are the
datasheet's (one hand-checked ratio per part against the H100 SXM), parts lack the math
their silicon lacks, and `infest list` shows them."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.load.hardware import compile_hardware
from infest.compiler.load.loader import load_program, shipped
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

MODELS = Path(__file__).parents[1] / "specs" / "models"
CATALOGUE = ("a100_sxm_40gb", "a100_sxm_80gb", "h100_sxm", "h100_pcie", "h100_nvl", "h20",
             "h200_sxm", "gh200", "b200", "gb200", "mi300x", "mi325x", "l40s", "rtx_4090",
             "rtx_5090")


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
    # memory as nvidia-smi shows it: L40S 46,068 MiB (48 GB GDDR6 less ECC) vs 81,559 MiB
    ("l40s", "mem_capacity", 46068 / 81559),
    # RTX 4090 1008 GB/s vs 3350 GB/s: 0.3009
    ("rtx_4090", "mem_bw", 1008 / 3350),
    # RTX 5090 fp8 with FP16 accumulate (NVIDIA's 1,676 sparse / 2 = 838) vs 1979: 0.4234
    ("rtx_5090", "flops_fp8", 838 / 1979),
    # RTX 4090 fp16 with FP16 accumulate 330.3 (twice its bf16 165.2) vs 989: 0.3340
    ("rtx_4090", "flops_fp16", 330.3 / 989),
    ("rtx_4090", "flops_bf16", 165.2 / 989),
    # A100 40GB HBM2 1,555 GB/s vs 3,350: 0.4642
    ("a100_sxm_40gb", "mem_bw", 1555 / 3350),
    # H100 PCIe bf16 1,513 sparse / 2 = 756.5 vs 989: 0.7649
    ("h100_pcie", "flops_bf16", 756.5 / 989),
    # H100 NVL fp8 3,341 sparse / 2 = 1,670.5 vs 1,979: 0.8441
    ("h100_nvl", "flops_fp8", 1670.5 / 1979),
    # H100 NVL 95,830 MiB vs 81,559 MiB: 1.175
    ("h100_nvl", "mem_capacity", 95830 / 81559),
    # GB200 NVL72 bf16 360 PFLOPS sparse / 72 GPUs / 2 = 2,500 TFLOP/s vs 989: 2.528
    ("gb200", "flops_bf16", 2500 / 989),
    # GB200 NVL72 130 TB/s NVLink / 72 / 2 directions = 902.8, quoted 900 GB/s vs 450: 2
    ("gb200", "link_bw", 900 / 450),
    # MI325X 6 TB/s vs 3.35 TB/s: 1.791
    ("mi325x", "mem_bw", 6 / 3.35),
    # MI325X int8 2,614.9 TOPS vs 1,979: 1.3213
    ("mi325x", "flops_int8", 2614.9 / 1979),
])
def test_one_ratio_per_part_against_the_h100(name: str, key: str, ratio: float) -> None:
    assert fields(name)[key] / fields("h100_sxm")[key] == pytest.approx(ratio, rel=1e-9)


def test_b200_fp4_is_four_times_bf16() -> None:
    f = fields("b200")  # 9 PFLOPS fp4 dense / 2.25 PFLOPS bf16 dense
    assert f["flops_fp4"] / f["flops_bf16"] == 4


def test_gb200_is_one_72_gpu_nvlink_domain() -> None:
    """NVL72: 72 GPUs on NVLink; fp4 1,440 PFLOPS sparse / 72 / 2 = 10 PFLOPS dense, four
    times its bf16 2.5; 13.4 TB HBM3e / 72 = 186 GB, which nvidia-smi shows as 189,471 MiB."""
    f = fields("gb200")
    assert f["gpus_per_node"] == 72 and f["flops_fp4"] == 10e15 == 4 * f["flops_bf16"]
    assert f["mem_capacity"] == 189471 * 2**20


def test_int8_peaks_are_written_in_tops() -> None:
    """Every part with an int8 peak spells it in TOPS (integer ops), not TFLOP/s."""
    for name, path in shipped("hardware").items():
        text = path.read_text()
        if "flops_int8" in text:
            assert "TOPS" in text.split("flops_int8 =")[1].split(";")[0], name


@pytest.mark.parametrize("name, absent", [
    ("a100_sxm_40gb", "flops_fp8"), ("h100_pcie", "flops_fp4"), ("h100_nvl", "flops_fp4"),
    ("mi325x", "flops_fp4"), ("a100_sxm_80gb", "flops_fp8"), ("a100_sxm_80gb", "flops_fp4"), ("h20", "flops_fp4"),
    ("mi300x", "flops_fp4"), ("l40s", "flops_fp4"), ("rtx_4090", "flops_fp4")])
def test_parts_lack_math_their_silicon_lacks(name: str, absent: str) -> None:
    assert fields(name)[absent] == 0  # the uniform catalogue: peak 0, not a missing field


@pytest.mark.parametrize("name", CATALOGUE)
def test_every_part_carries_every_catalogue_field(name: str) -> None:
    from infest.compiler.load.fields import CATALOGUE as FIELDS_OF_EVERY_PART
    f = fields(name)
    assert set(FIELDS_OF_EVERY_PART) <= set(f), set(FIELDS_OF_EVERY_PART) - set(f)


def test_fp8_model_on_an_a100_falls_back_to_bf16_and_says_so(capsys) -> None:
    # Ampere has no fp8 math: the fp8 linears run at bf16 (W8A16: weights stream at 1 byte,
    # math at 312 TFLOP/s), and both the JSON and the text name the fallback.
    a = analyze(MODELS / "llama3_1_8b_fp8.arch", hw="a100_sxm_80gb")
    r = a.evaluate({"B": 64})
    (fb,) = r["math_fallback"]
    assert (fb["math"], fb["runs_at"]) == ("fp8", "bf16") and "weight-only" in fb["note"]
    q = next(o for o in r["ops"] if o["name"] == "q")
    # 2 x 64 tokens x 4096 x 4096 FLOPs at 312 TFLOP/s (not 0: no fp8 peak to divide by).
    assert q["t_compute_s"] == pytest.approx(2 * 64 * 4096 * 4096 / 312e12, rel=1e-12)
    # The same spec on an H100 runs at its fp8 peak, 1,979 TFLOP/s, and says nothing.
    h = analyze(MODELS / "llama3_1_8b_fp8.arch", hw="h100_sxm").evaluate({"B": 64})
    assert h["math_fallback"] == []
    q = next(o for o in h["ops"] if o["name"] == "q")
    assert q["t_compute_s"] == pytest.approx(2 * 64 * 4096 * 4096 / 1979e12, rel=1e-12)
    assert main(["eval", str(MODELS / "llama3_1_8b_fp8.arch"), "--hw", "a100_sxm_80gb"]) == 0
    assert "in fp8 run at bf16" in capsys.readouterr().out


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
    # the A100 row: 81,920 MiB = 80 GiB, 2.04 TB/s, no fp8 or fp4 peak (0 in the catalogue,
    # '-' here)
    row = next(line for line in hardware.splitlines() if line.startswith("a100_sxm_80gb"))
    assert "80 GiB" in row and "2.04 TB/s" in row and row.split().count("-") == 2
    # int8 in integer ops: 624 TOPS
    assert "624 TOP/s" in row
    gb200 = next(line for line in hardware.splitlines() if line.startswith("gb200"))
    # 72 GPUs a node, and NVLink SHARP on the NVL72's switches (nvls 1); the A100's
    # second-generation NVSwitch has none (0)
    # 189,471 MiB / 1024 = 185.03 GiB
    assert "185 GiB" in gb200 and "10 PFLOP/s" in gb200 and gb200.split()[-2:] == ["72", "1"]
    assert row.split()[-1] == "0"


SPECS = sorted(p.stem for p in MODELS.glob("*.arch"))


@pytest.mark.parametrize("spec", SPECS)
def test_every_shipped_spec_evaluates_on_every_shipped_gpu(spec: str) -> None:
    # One set of forms per spec (they leave the hardware symbolic); each GPU's catalogue
    # values substituted, as `--hw NAME` does. A format a GPU lacks falls back and is named.
    a = analyze(MODELS / f"{spec}.arch", hw="h100_sxm")
    for name in CATALOGUE:
        r = a.evaluate(fields_as_sets(name))
        assert r["step"]["time_s"] > 0, (spec, name)
        wanted = {f["math"] for f in r["math_fallback"]}
        lacking = {p for p in ("fp8", "fp4") if fields(name)[f"flops_{p}"] == 0}
        assert wanted <= lacking, (spec, name)


def fields_as_sets(name: str) -> dict[str, float]:
    """A shipped GPU's catalogue fields, as --set overrides."""
    from infest.compiler.load.fields import CATALOGUE as EVERY_PART_HAS
    f = fields(name)
    return {k: f[k] for k in EVERY_PART_HAS}


NVFP4 = Path(__file__).parent / "fixtures" / "hf" / "collection"


@pytest.fixture(scope="module")
def qwen3_nvfp4(tmp_path_factory) -> Path:
    """nvidia/Qwen3-235B-A22B-NVFP4 imported with import-hf (its config and ModelOpt
    hf_quant_config from the fixtures)."""
    out = tmp_path_factory.mktemp("nvfp4") / "q.arch"
    stem = NVFP4 / "nvidia--Qwen3-235B-A22B-NVFP4"
    assert main(["import-hf", f"{stem}.config.json", "--quant-config",
                 f"{stem}.hf_quant_config.json", "-o", str(out)]) == 0
    return out


def test_nvfp4_runs_weight_only_on_hopper_and_fp4_on_blackwell(qwen3_nvfp4: Path,
                                                                capsys) -> None:
    h200 = analyze(qwen3_nvfp4, hw="h200_sxm").evaluate({"B": 64})
    b200 = analyze(qwen3_nvfp4, hw="b200").evaluate({"B": 64})
    # Weights stream at their stored size on both: nvfp4 is 4.5 bits a weight; the
    # embedding, routers and LM head stay bf16. 235B params x 2 bytes in bf16 = 470 GB.
    for r in (h200, b200):
        share = r["memory"]["weights_bytes"] / (2 * r["params"]["total"])
        assert 0.28 <= share <= 0.33
    assert h200["memory"]["weights_bytes"] == b200["memory"]["weights_bytes"]
    (fb,) = h200["math_fallback"]
    assert (fb["math"], fb["runs_at"]) == ("fp4", "bf16") and "weight-only" in fb["note"]
    assert b200["math_fallback"] == []
    # The experts' gate GEMM: 2 FLOPs x 64 tokens x top_k 8 x 4096 x 1536 per layer, at
    # the bf16 peak on the H200 (989 TFLOP/s) and the fp4 peak on the B200 (9,000).
    flops = 2 * 64 * 8 * 4096 * 1536
    g = {k: next(o for o in r["ops"] if o["name"] == "decoder.g")
         for k, r in (("h200", h200), ("b200", b200))}
    assert g["h200"]["t_compute_s"] == pytest.approx(flops / 989e12, rel=1e-12)
    assert g["b200"]["t_compute_s"] == pytest.approx(flops / 9000e12, rel=1e-12)
    assert main(["eval", str(qwen3_nvfp4), "--hw", "h200_sxm", "--json"]) == 0
    assert '"runs_at": "bf16"' in capsys.readouterr().out


def test_geforce_fp16_math_runs_at_the_fp16_accumulate_peak() -> None:
    # The same graph in bf16 (the shipped spec) and in fp16 (the variant llama.cpp's rows
    # name): the same FLOPs, run at the RTX 4090's 165.2 and 330.3 TFLOP/s, so the fp16
    # compute term is 165.2 / 330.3 = 0.50015 of the bf16 one; on the H100 (989 both) 1.
    specs = (MODELS / "llama3_1_8b.arch",
             MODELS.parents[1] / "bench" / "specs" / "llama3_1_8b_f16.arch")
    for hw, ratio in (("rtx_4090", 165.2 / 330.3), ("h100_sxm", 1.0)):
        bf16, fp16 = (analyze(s, hw=hw, phase="prefill").evaluate({"N": 1024})["step"]
                      for s in specs)
        assert fp16["flops"] == bf16["flops"]
        assert fp16["t_compute_s"] == pytest.approx(bf16["t_compute_s"] * ratio, rel=1e-12)
