"""Quantized checkpoints import at their stored size, never silently as bf16: ModelOpt
NVFP4 (a `<name>_hf_quant_config.json` beside the config), GPTQ, AWQ, compressed-tensors,
bitsandbytes and GGUF mixes; a hint that is not understood is an error naming its field.
Expected bytes are derived by hand from the configs' dimensions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hf.families import read_arch
from infest.compiler.hf.importer import import_hf
from infest.compiler.hf.render import render
from infest.compiler.hf.quant import bits_text, group_bits
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

HF = Path(__file__).parent / "fixtures" / "hf"
LLAMA = "meta-llama--Meta-Llama-3.1-8B"
# Llama 3.1 8B: embedding = LM head = 128256 * 4096 = 525,336,576 params; norms
# 32 * 2 * 4096 + 4096 = 266,240; linears 32 * (2*4096*4096 + 2*4096*1024 + 3*4096*14336)
# = 32 * 218,103,808 = 6,979,321,856 (of which attention 32 * 41,943,040 = 1,342,177,280
# and MLP 32 * 176,160,768 = 5,637,144,576). Total 8,030,261,248.
EMBED, NORMS, LINEAR, ATTN, MLP = 525_336_576, 266_240, 6_979_321_856, 1_342_177_280, 5_637_144_576
KEPT_BF16 = (2 * EMBED + NORMS) * 2  # embedding, head and norms in bf16: 2,101,878,784 bytes


def llama(quant: dict, tmp_path: Path, hw: str = "h100_sxm") -> dict:
    """Llama 3.1 8B's config with a quantization_config, imported and evaluated."""
    data = json.loads((HF / f"{LLAMA}.config.json").read_text()) | {"quantization_config": quant}
    path = tmp_path / "q.arch"
    path.write_text(render(read_arch(data, "q.config.json")))
    return analyze(path, hw=hw).evaluate({"B": 1, "N": 4096})


def test_block_formats_carry_their_scales() -> None:
    assert group_bits(4, 128, zero_point=True) == 4 + (16 + 4) / 128 == 4.15625
    assert group_bits(4, 128, zero_point=False) == 4.125
    assert group_bits(8, -1, zero_point=False) == 8
    assert bits_text(group_bits(4, 128, True)) == "4.15625"


def test_nvfp4_deepseek_imports_at_its_fp4_size(tmp_path: Path) -> None:
    """The `<name>_hf_quant_config.json` beside the config is found (NVFP4, lm_head
    excluded). DeepSeek-V3 dims: hidden 7168, 61 layers (3 dense, 58 MoE), vocab 129280.
    NVFP4 (4.5 bits = 0.5625 bytes): per layer MLA linears q_a 7168*1536 + kv_a 7168*576 +
    q_b 1536*128*192 + kv_b 512*128*256 + o 16384*7168 = 187,105,280 (x61 = 11,413,422,080);
    dense MLP 3*7168*18432 = 396,361,728 (x3 = 1,189,085,184); per MoE layer 256 experts +
    1 shared of 3*7168*2048 = 44,040,192 each, 11,318,329,344 (x58 = 656,463,101,952);
    quantized 669,065,609,216 params * 0.5625 = 376,349,405,184 bytes.
    bf16: embedding + head 2 * 926,679,040; routers 58 * (7168*256 + 256 bias) = 106,445,312;
    norms 61 * (2*7168 + 1536 + 512) + 7168 = 1,006,592: 1,960,809,984 params = 3,921,619,968
    bytes. Total 380,271,025,152 bytes (~380 GB, not the 1342 GB of bf16).
    Held besides (group mtp, not in params.total): the multi-token-prediction layer, one
    MoE layer at the same formats, 11,505,434,624 NVFP4 params (187,105,280 MLA +
    11,318,329,344 experts) = 6,471,806,976 bytes, and bf16 router 1,835,264, norms
    16,384 + 3 * 7168, eh_proj 2 * 7168^2 = 102,760,448: 104,633,600 params =
    209,267,200 bytes; 6,681,074,176 bytes in all. (The quant config excludes
    model.layers.61*, the MTP layer, which the checkpoint stores at bf16; the import
    holds it at the main layers' formats, a known approximation.)"""
    out = tmp_path / "ds_fp4.arch"
    assert main(["import-hf", str(HF / "nvidia--DeepSeek-V3.1-FP4.config.json"),
                 "-o", str(out)]) == 0
    r = analyze(out, hw="b200").evaluate({"B": 1, "N": 4096})
    assert r["params"]["total"] == 669_065_609_216 + 1_960_809_984
    assert r["memory"]["weights_bytes"] == 380_271_025_152 + 6_681_074_176
    assert "nvfp4" in out.read_text()


def test_nvfp4_math_falls_back_to_bf16_without_fp4_hardware(tmp_path: Path) -> None:
    """NVFP4 is W4A4: its GEMMs run at flops_fp4, which an H200 lacks (0 in its file): they
    run weight-only at bf16 there, weights at their stored 4.5 bits, and the JSON says so."""
    path = tmp_path / "ds.arch"
    path.write_text(import_hf(HF / "nvidia--DeepSeek-V3.1-FP4.config.json",
                              HF / "nvidia--DeepSeek-V3.1-FP4_hf_quant_config.json"))
    r = analyze(path, hw="h200_sxm").evaluate({"B": 1})
    assert [(f["math"], f["runs_at"]) for f in r["math_fallback"]] == [("fp4", "bf16")]
    assert r["memory"]["weights_bytes"] == analyze(path, hw="b200").evaluate(
        {"B": 1})["memory"]["weights_bytes"]


def test_gptq_4bit_group_128_llama(tmp_path: Path) -> None:
    """GPTQ 4-bit g128: 4 + 16/128 (fp16 scale) + 4/128 (packed zero) = 4.15625 bits on every
    linear: 6,979,321,856 * 4.15625 / 8 = 3,625,975,808 bytes; the head stays bf16
    (lm_head: false)."""
    r = llama({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
               "sym": True, "lm_head": False, "damp_percent": 0.01}, tmp_path)
    assert r["memory"]["weights_bytes"] == 3_625_975_808 + KEPT_BF16


def test_awq_group_64_without_zero_points_keeps_attention(tmp_path: Path) -> None:
    """AWQ 4-bit g64, no zero point: 4 + 16/64 = 4.25 bits on the MLP only
    (modules_to_not_convert: self_attn): 5,637,144,576 * 4.25 / 8 = 2,994,733,056 bytes;
    attention 1,342,177,280 * 2 bytes."""
    r = llama({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": False,
               "version": "gemm", "modules_to_not_convert": ["self_attn"]}, tmp_path)
    assert r["memory"]["weights_bytes"] == 2_994_733_056 + ATTN * 2 + KEPT_BF16


def test_compressed_tensors_fp8_w8a8(tmp_path: Path) -> None:
    """FP8 weights (per channel) and dynamic FP8 activations, lm_head ignored: linears at
    1 byte, 6,979,321,856 bytes. Compute at B=1, N=4096 on an H100: linears 2 * 6,979,321,856
    FLOPs at 1979 TFLOP/s = 7.0534 us; the ignored head 2 * 525,336,576 at 989 = 1.0624 us;
    attention 32 * 4 * 32 * 128 * (4096 + 1) = 2,148,007,936 at 989 (bf16) = 2.1719 us;
    norms and elementwise ~3.6 MFLOP, a few ns: 10.29 us (bf16: 17.4 us)."""
    fp8 = {"quant_method": "compressed-tensors", "format": "float-quantized",
           "config_groups": {"group_0": {
               "targets": ["Linear"],
               "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                           "symmetric": True, "dynamic": False},
               "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                     "dynamic": True}}},
           "ignore": ["lm_head"]}
    r = llama(fp8, tmp_path)
    assert r["memory"]["weights_bytes"] == LINEAR + KEPT_BF16
    assert r["step"]["t_compute_s"] == pytest.approx(10.2877e-6, rel=1e-3)


def test_compressed_tensors_w4a16_group_128(tmp_path: Path) -> None:
    """int4 symmetric, group 128: 4 + 16/128 = 4.125 bits; the head is quantized too (not
    in `ignore`): (6,979,321,856 + 525,336,576) * 4.125 / 8 = 3,869,589,504 bytes."""
    w4 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "config_groups": {"group_0": {
              "targets": ["Linear"], "input_activations": None,
              "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                          "group_size": 128, "symmetric": True}}},
          "ignore": []}
    r = llama(w4, tmp_path)
    assert r["memory"]["weights_bytes"] == 3_869_589_504 + (EMBED + NORMS) * 2


def test_bitsandbytes_nf4_double_quant(tmp_path: Path) -> None:
    """NF4 with double quantization: 4 + 8/64 + 32/(64*256) = 4.126953125 bits on the
    linears: 6,979,321,856 * 4.126953125 / 8 = 28,803,334,144 / 8 = 3,600,416,768 bytes."""
    r = llama({"quant_method": "bitsandbytes", "load_in_4bit": True,
               "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
               "bnb_4bit_compute_dtype": "bfloat16"}, tmp_path)
    assert r["memory"]["weights_bytes"] == 3_600_416_768 + KEPT_BF16


def test_gguf_q4_k_m(tmp_path: Path) -> None:
    """--gguf Q4_K_M: 4.84 bits per weight over the whole file (llama.cpp's table):
    8,030,261,248 * 4.84 / 8 = 4,858,308,055.04 bytes."""
    out = tmp_path / "q4km.arch"
    assert main(["import-hf", str(HF / f"{LLAMA}.config.json"), "--gguf", "q4_k_m",
                 "-o", str(out)]) == 0
    r = analyze(out, hw="rtx_4090").evaluate({"B": 1, "N": 4096})
    assert r["memory"]["weights_bytes"] == pytest.approx(4_858_308_055.04, rel=1e-12)


# ---- hints not understood are errors --------------------------------------------------

def quant_error(quant: dict) -> str:
    data = json.loads((HF / f"{LLAMA}.config.json").read_text()) | {"quantization_config": quant}
    with pytest.raises(SpecError) as exc:
        read_arch(data, "bad.config.json")
    return str(exc.value)


@pytest.mark.parametrize("quant, field", [
    ({"quant_method": "exl3"}, "'quantization_config.quant_method' is \"exl3\""),
    ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"},
     "'quantization_config.quant_algo'"),
    ({"quant_method": "gptq", "bits": 5}, "'quantization_config.bits' is 5"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "int4"},
     "'quantization_config.bnb_4bit_quant_type'"),
    ({"quant_method": "compressed-tensors", "config_groups": {"a": {}, "b": {}}},
     "'quantization_config.config_groups'"),
    ({"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["model.layers.0.mlp"]},
     "keeps mlp unquantized in 1 of 32 layers"),
])
def test_unknown_quantization_is_an_error_naming_the_field(quant: dict, field: str) -> None:
    assert field in quant_error(quant)


def test_a_foreign_quantization_key_is_an_error() -> None:
    """MLX writes `quantization` at the top level: never read as bf16."""
    data = json.loads((HF / f"{LLAMA}.config.json").read_text()) | {
        "quantization": {"group_size": 64, "bits": 4}}
    with pytest.raises(SpecError, match="config field 'quantization'"):
        read_arch(data, "mlx.config.json")


def test_unknown_gguf_type_is_an_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["import-hf", str(HF / f"{LLAMA}.config.json"), "--gguf", "Q4_X"]) == 1
    assert "unknown GGUF type 'Q4_X'" in capsys.readouterr().err


# ---- one model, three published checkpoints: weights against their size on disk ----------

INSTRUCT = "meta-llama--Meta-Llama-3.1-8B"  # the Instruct config differs only in eos_token_id


def checkpoint_weights(tmp_path: Path, quant_file: str | None = None,
                       inline: str | None = None) -> float:
    """Llama 3.1 8B imported with a checkpoint's quant config (a ModelOpt file beside it,
    or an inline quantization_config), evaluated on a B200: infest's weight bytes."""
    config = HF / f"{INSTRUCT}.config.json"
    if inline is not None:
        data = json.loads(config.read_text()) | {
            "quantization_config": json.loads((HF / inline).read_text())}
        text = render(read_arch(data, inline))
    else:
        text = import_hf(config, HF / quant_file)
    path = tmp_path / "ckpt.arch"
    path.write_text(text)
    return analyze(path, hw="b200").evaluate({"B": 1, "N": 4096})["memory"]["weights_bytes"]


def test_nvfp4_checkpoint_matches_its_size_on_disk(tmp_path: Path) -> None:
    """nvidia/Llama-3.1-8B-Instruct-FP4 (ModelOpt NVFP4, lm_head excluded). On disk: two
    safetensors shards of 4.98 GB + 1.05 GB = 6.03 GB (the Hugging Face file listing, as
    quoted in a public deployment digest; see tests/fixtures/hf/SOURCES.md).
    infest: linears 6,979,321,856 x (4 bits + one fp8 scale per 16 = 4.5 bits) / 8 =
    3,925,868,544 bytes; embedding, head and norms bf16 2,101,878,784: 6,027,747,328 bytes,
    0.04% under 6.03 GB. (The per-tensor fp32 weight_scale_2 / input_scale, 2 x 4 bytes per
    linear = 1,792 bytes, are left out.)"""
    weights = checkpoint_weights(tmp_path, "nvidia--Llama-3.1-8B-Instruct-FP4.hf_quant_config.json")
    assert weights == 3_925_868_544 + KEPT_BF16
    assert weights == pytest.approx(4.98e9 + 1.05e9, rel=0.02)


def test_fp8_checkpoint_matches_its_size_on_disk(tmp_path: Path) -> None:
    """nvidia/Llama-3.1-8B-Instruct-FP8 (ModelOpt FP8 per tensor, lm_head excluded).
    Tensor by tensor (ModelOpt's export: an fp8 weight plus fp32 scalar weight_scale and
    input_scale per linear): linears 6,979,321,856 x 1 byte + 1,792 bytes of scales; bf16
    embedding, head and norms 2,101,878,784: 9,081,202,432 bytes. Published figures: "~9 GB"
    for a ModelOpt FP8 export of Llama 3.1 8B Instruct (SOURCES.md); the checkpoint's own
    index total_size was not reachable from this project's tools. infest: 9,080,934,400,
    the norms' 266,240 weights at the model's fp8 (1 byte) instead of bf16: 266 KB, 0.003%."""
    weights = checkpoint_weights(tmp_path, "nvidia--Llama-3.1-8B-Instruct-FP8.hf_quant_config.json")
    assert weights == LINEAR + KEPT_BF16 - NORMS
    assert weights == pytest.approx(9_081_202_432, rel=1e-4)
    assert weights == pytest.approx(9e9, rel=0.02)


def test_w4a16_checkpoint_matches_its_size_on_disk(tmp_path: Path) -> None:
    """RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 (compressed-tensors
    pack-quantized int4, symmetric, group 128, lm_head ignored). Tensor by tensor: packed
    int4 weight_packed 6,979,321,856 / 2 = 3,489,660,928 bytes; one bf16 weight_scale per
    128 weights, 6,979,321,856 / 128 x 2 = 109,051,904; a 2 x int64 weight_shape per linear
    (224 x 16 = 3,584); bf16 embedding, head and norms 2,101,878,784: 5,700,595,200 bytes.
    infest: 4.125 bits = 3,598,712,832 + 2,101,878,784 = 5,700,591,616. The checkpoint's
    own index total_size was not reachable from this project's tools."""
    weights = checkpoint_weights(
        tmp_path, inline="RedHatAI--Meta-Llama-3.1-8B-Instruct-quantized.w4a16"
                         ".quantization_config.json")
    assert weights == 3_598_712_832 + KEPT_BF16
    assert weights == pytest.approx(5_700_595_200, rel=0.02)


COLLECTION = HF / "collection"


def _body(text: str) -> list[str]:
    """A spec without its header comments and model line (they name the file)."""
    return [line for line in text.splitlines() if not line.startswith(("#", "model "))]


@pytest.mark.parametrize("stem", ["nvidia--MiniMax-M2.5-NVFP4", "Qwen--Qwen3-32B-FP8-Static-PerTensor"])
def test_modelopt_inline_block_reads_as_its_quant_file(tmp_path: Path, stem: str) -> None:
    """Newer ModelOpt exports write the quantization twice: hf_quant_config.json and an
    inline quantization_config spelling it `ignore`, `kv_cache_scheme` and a config group
    (MiniMax-M2.5-NVFP4 has no quant_algo inline). The inline block alone, the file alone
    and both together give the same spec (both: no "two quantizations" error)."""
    config = COLLECTION / f"{stem}.config.json"
    quant = COLLECTION / f"{stem}.hf_quant_config.json"
    data = json.loads(config.read_text())
    del data["quantization_config"]
    stripped = tmp_path / "stripped.config.json"
    stripped.write_text(json.dumps(data))
    both = import_hf(config, quant)
    assert _body(import_hf(config)) == _body(import_hf(stripped, quant)) == _body(both)
    # The ignore lists keep the LM head in bf16 (and MiniMax's attention); the cache is fp8.
    assert "kv: fp8" in both and "lm_head" in both.split("kept unquantized")[0]


@pytest.mark.parametrize("qc", [
    {"quant_method": "fp8", "fmt": "e4m3"},
    {"quant_method": "mxfp4"},
    {"quant_method": "gptq", "bits": 4, "group_size": 128},
    {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
])
def test_kv_cache_scheme_sets_the_kv_dtype_in_every_form(tmp_path: Path, qc: dict) -> None:
    from infest.compiler.hf.quant import formats
    kv = {"type": "float", "num_bits": 8}
    plain = formats({"quantization_config": qc}, "c.json", "bf16", 32, None, None)
    cached = formats({"quantization_config": {**qc, "kv_cache_scheme": kv}}, "c.json", "bf16",
                     32, None, None)
    assert plain.kv == "bf16" and cached.kv == "fp8"
    assert "fp8 KV cache" in cached.scheme
    assert (cached.weights, cached.math, cached.overrides) == (plain.weights, plain.math,
                                                               plain.overrides)
