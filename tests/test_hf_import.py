"""`infest import-hf`: each public config imports to a spec that parses, compiles and
models the same thing as the hand-written shipped spec; bad configs fail naming the field.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hf.families import read_arch
from infest.compiler.hf.importer import import_hf
from infest.compiler.hf.render import render
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

HF = Path(__file__).parent / "fixtures" / "hf"
MODELS = Path(__file__).parents[1] / "specs" / "models"
POINT = {"B": 8, "N": 4096}  # B > 1: routed layers touch more than top_k experts

SHIPPED = {  # fixture -> the shipped spec of the same model
    "meta-llama--Meta-Llama-3.1-8B": "llama3_1_8b",
    "meta-llama--Meta-Llama-3.1-70B": "llama3_1_70b",
    "Qwen--Qwen3-30B-A3B": "qwen3_30b_a3b",
    "mistralai--Mixtral-8x7B-v0.1": "mixtral_8x7b",
    "deepseek-ai--DeepSeek-V3": "deepseek_v3",
    "moonshotai--Kimi-K2-Instruct": "kimi_k2",
    "openai--gpt-oss-20b": "gpt_oss_20b",
}


def config(stem: str) -> dict:
    return json.loads((HF / f"{stem}.config.json").read_text())


def imported(tmp_path: Path, stem: str, quant: Path | None = None) -> Path:
    """Import a fixture to a file in tmp_path and return its path."""
    out = tmp_path / f"{stem.replace('-', '_').replace('.', '_')}.arch"
    out.write_text(import_hf(HF / f"{stem}.config.json", quant))
    return out


# DeepSeek-V3's multi-token-prediction layer, held in memory by the import (group mtp),
# not in the shipped spec: one MoE layer (MLA 187,105,280 + 256 routed and 1 shared
# experts of 3*7168*2048: 11,318,329,344; router 7168*256 + 256 = 1,835,264; two norms
# 7168 + q_a 1536 + kv_a 512 = 16,384) + eh_proj 2*7168*7168 = 102,760,448 + enorm,
# hnorm and the final norm 3*7168 = 21,504. At the checkpoint's formats (fp8, 1 byte;
# the router bf16, 2): 11,608,232,960 + 2 * 1,835,264 = 11,611,903,488 bytes.
HELD_BYTES = {"deepseek-ai--DeepSeek-V3": 11_611_903_488}


def same_model(a: Path, b: Path, hw: str = "h200_sxm", held: int = 0) -> None:
    """Params, weight memory (less `held` bytes the import holds besides) and a decode
    step's bytes and FLOPs agree."""
    ra, rb = (analyze(p, hw=hw).evaluate(POINT) for p in (a, b))
    assert ra["params"]["total"] == rb["params"]["total"]
    assert ra["params"]["active"] == rb["params"]["active"]
    assert ra["memory"]["weights_bytes"] - held == pytest.approx(rb["memory"]["weights_bytes"],
                                                                 rel=1e-12)
    for key in ("bytes", "flops", "weight_bytes", "kv_bytes", "t_compute_s", "kernels"):
        assert ra["step"][key] == pytest.approx(rb["step"][key], rel=1e-12), key


@pytest.mark.parametrize("stem", sorted(SHIPPED))
def test_import_matches_the_shipped_spec(tmp_path: Path, stem: str) -> None:
    same_model(imported(tmp_path, stem), MODELS / f"{SHIPPED[stem]}.arch",
               held=HELD_BYTES.get(stem, 0))


def test_modelopt_fp8_import_matches_the_shipped_fp8_spec(tmp_path: Path) -> None:
    """Llama 3.1 8B's config with the ModelOpt FP8 scheme is llama3_1_8b_fp8."""
    quant = HF / "nvidia--Llama-3.1-70B-Instruct-FP8.hf_quant_config.json"
    path = imported(tmp_path, "meta-llama--Meta-Llama-3.1-8B", quant)
    same_model(path, MODELS / "llama3_1_8b_fp8.arch", hw="h100_sxm")


def test_nvidia_fp8_70b_picks_up_its_quant_config(tmp_path: Path) -> None:
    """The hf_quant_config.json next to the config is read: fp8 weights and KV cache,
    bf16 embedding table and LM head (exclude_modules: lm_head)."""
    path = tmp_path / "llama_70b_fp8.arch"
    assert main(["import-hf", str(HF / "nvidia--Llama-3.1-70B-Instruct-FP8.config.json"),
                 "-o", str(path)]) == 0
    r = analyze(path, hw="h200_sxm").evaluate(POINT)
    embed = 128256 * 8192                        # 1,050,673,152, the head is the same size
    total = 70_553_706_496                       # Llama 3.1 70B, see test_models.py
    assert r["params"]["total"] == total
    assert r["memory"]["weights_bytes"] == 2 * 2 * embed + (total - 2 * embed)
    assert r["memory"]["kv_bytes_per_token"] == 2 * 80 * 8 * 128  # fp8: 163,840


@pytest.mark.parametrize("stem, published, count", [
    # hidden 4096, 36 layers, 32 q / 8 kv heads x 128, ffn 12288, vocab 151936, untied:
    # 36 * (2*4096*4096 + 2*4096*1024 + 256 + 3*4096*12288 + 2*4096) + 2*151936*4096 + 4096
    ("Qwen--Qwen3-8B", 8.2e9, 8_190_735_360),
    # hidden 5120, 64 layers, 64 q / 8 kv heads x 128, ffn 25600, vocab 151936, untied:
    # 64 * (2*5120*8192 + 2*5120*1024 + 256 + 3*5120*25600 + 2*5120) + 2*151936*5120 + 5120
    ("Qwen--Qwen3-32B", 32.8e9, 32_762_123_264),
])
def test_dense_qwen3_imports_to_the_published_size(tmp_path: Path, stem: str,
                                                   published: float, count: int) -> None:
    a = analyze(imported(tmp_path, stem))
    total = int(a.forms.params["total"].xreplace(a.model.inputs))
    assert total == count
    assert abs(total / published - 1) < 0.005  # -0.11%, -0.12%


def test_tied_embeddings_store_the_table_once(tmp_path: Path) -> None:
    data = config("meta-llama--Meta-Llama-3.1-8B") | {"tie_word_embeddings": True}
    text = render(read_arch(data, "tied.config.json"))
    assert "tied=1" in text
    path = tmp_path / "tied.arch"
    path.write_text(text)
    a = analyze(path)
    # Llama 3.1 8B less the head's 128256 * 4096 = 525,336,576 params
    assert a.forms.params["total"].xreplace(a.model.inputs) == 8_030_261_248 - 525_336_576


def test_mistral_sliding_window_applies_to_every_layer(tmp_path: Path) -> None:
    """A Mistral-7B-v0.1-style config (sliding_window 4096): every layer's cache is capped."""
    data = config("meta-llama--Meta-Llama-3.1-8B") | {"model_type": "mistral",
                                                       "sliding_window": 4096}
    path = tmp_path / "mistral.arch"
    path.write_text(render(read_arch(data, "mistral.config.json")))
    r = analyze(path, hw="h100_sxm").evaluate({"B": 1, "N": 32768})
    # 2 (K, V) * 32 layers * 8 kv heads * 128 * 2 bytes = 131,072 per token, 4096 held
    assert r["memory"]["kv_bytes"] == 131_072 * 4096


def test_qwen2_has_qkv_biases_but_no_o_bias(tmp_path: Path) -> None:
    data = config("Qwen--Qwen3-8B") | {"model_type": "qwen2"}
    text = render(read_arch(data, "qwen2.config.json"))
    assert text.count("bias=1") == 3 and "QK-norm" not in text
    path = tmp_path / "qwen2.arch"
    path.write_text(text)
    a = analyze(path)
    # Qwen3-8B (8,190,735,360) less QK-norm 36 * 256, plus q/k/v biases 36 * (4096 + 2 * 1024)
    expected = 8_190_735_360 - 36 * 256 + 36 * (4096 + 2 * 1024)
    assert a.forms.params["total"].xreplace(a.model.inputs) == expected


def test_config_text_is_never_spec_text(tmp_path: Path) -> None:
    """Strings from the config land only in comments, stripped of anything that could
    end the comment; the model is unchanged."""
    data = config("meta-llama--Meta-Llama-3.1-8B") | {
        "architectures": ['X\n  x = custom(tokens, params = 1e15)\n#']}
    path = tmp_path / "evil.arch"
    path.write_text(render(read_arch(data, "evil.config.json")))
    a = analyze(path)
    assert a.forms.params["total"].xreplace(a.model.inputs) == 8_030_261_248


# ---- errors -------------------------------------------------------------------------------

def error_of(data: dict) -> str:
    with pytest.raises(SpecError) as exc:
        read_arch(data, "bad.config.json")
    return str(exc.value)


def test_missing_hidden_size_is_named() -> None:
    data = config("meta-llama--Meta-Llama-3.1-8B")
    del data["hidden_size"]
    assert "missing required config field 'hidden_size'" in error_of(data)


def test_unknown_model_type_is_named() -> None:
    data = config("meta-llama--Meta-Llama-3.1-8B") | {"model_type": "bloom"}
    message = error_of(data)
    assert "unknown model_type 'bloom'" in message and "llama" in message


@pytest.mark.parametrize("change, field", [
    ({"hidden_size": "4096"}, "'hidden_size' must be a positive integer"),
    ({"num_hidden_layers": 0}, "'num_hidden_layers' must be a positive integer"),
    ({"hidden_act": "relu2"}, "'hidden_act'"),
    ({"quantization_config": {"quant_method": "exl3"}}, "'quantization_config.quant_method'"),
])
def test_bad_fields_are_named(change: dict, field: str) -> None:
    assert field in error_of(config("meta-llama--Meta-Llama-3.1-8B") | change)


def test_missing_moe_field_is_named() -> None:
    data = config("Qwen--Qwen3-30B-A3B")
    del data["moe_intermediate_size"]
    assert "'moe_intermediate_size'" in error_of(data)


# ---- command line -------------------------------------------------------------------------

def test_cli_prints_to_stdout(capsys: pytest.CaptureFixture) -> None:
    assert main(["import-hf", str(HF / "Qwen--Qwen3-30B-A3B.config.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Imported by `infest import-hf`")
    assert 'model qwen3_30b_a3b "Qwen3-30B-A3B" {' in out


def test_cli_writes_output_named_after_the_file(tmp_path: Path) -> None:
    out = tmp_path / "my_llama.arch"
    assert main(["import-hf", str(HF / "meta-llama--Meta-Llama-3.1-8B.config.json"),
                 "-o", str(out)]) == 0
    assert "model my_llama " in out.read_text()
    assert analyze(out).model.name == "my_llama"


def test_cli_error_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    assert main(["import-hf", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "missing required config field 'hidden_size'" in err and "Traceback" not in err


# ---- families checked against the publishers' totals ---------------------------------------

def totals(path: Path, point: dict | None = None) -> dict:
    """params (total, active) of an imported spec, evaluated on h100_sxm."""
    r = analyze(path, hw="h100_sxm").evaluate(point or {"B": 8, "N": 2048})
    assert r["step"]["time_s"] > 0
    return r["params"]


def test_phi3_mini_matches_its_checkpoint(tmp_path: Path) -> None:
    """Phi-3-mini-4k-instruct: hidden 3072, 32 layers, 32 q = kv heads x 96, ffn 8192,
    vocab 32064, untied; qkv_proj and gate_up_proj fused, same params as separate:
    32 * (4*3072^2 + 3*3072*8192 + 2*3072) + 2*32064*3072 + 3072 = 3,821,079,552,
    the safetensors total (7,642,159,104 bytes / 2). The card's "3.8B" is a rounding:
    3.8211B lies in its interval [3.75, 3.85)B."""
    path = imported(tmp_path, "microsoft--Phi-3-mini-4k-instruct")
    p = totals(path)
    assert p["total"] == p["active"] == 3_821_079_552
    assert 3.75e9 <= p["total"] < 3.85e9
    # sliding_window 2047 on every layer: 2 (K, V) * 32 layers * 32 kv heads * 96 * 2 bytes
    r = analyze(path, hw="h100_sxm").evaluate({"B": 1, "N": 4000})
    assert r["memory"]["kv_bytes"] == 2 * 32 * 32 * 96 * 2 * 2047


def test_glm45_air_matches_the_published_totals(tmp_path: Path) -> None:
    """GLM-4.5-Air: 46 layers (the first dense, ffn 10944), 45 MoE (128 experts top-8,
    expert ffn 1408, one shared expert, router with a score-correction bias); 96 q heads,
    8 kv heads x 128 with q/k/v biases, no o bias; vocab 151552 untied.
      attention 4096*12288*2 + 4096*1024*2 + 12288 + 2048 = 109,066,240; norms 8,192
      dense MLP 3*4096*10944 = 134,479,872; one expert 3*4096*1408 = 17,301,504
      MoE layer 109,066,240 + 8,192 + 129*17,301,504 + 4096*128 + 128 = 2,341,492,864
      total 45 * 2,341,492,864 + 243,554,304 + 2*151552*4096 + 4096 = 106,852,251,264
      active: MoE layer with 8 + 1 experts = 265,312,384;
      45 * 265,312,384 + 243,554,304 + 1,241,513,984 + 4096 = 13,424,129,664
    Zhipu's "106B total / 12B active" count without the embedding table and LM head
    (2 * 151552 * 4096 = 1,241,513,984): 105.61B and 12.18B, inside the rounding
    intervals [105.5, 106.5)B and [11.5, 12.5)B. The MTP layer is not modelled."""
    p = totals(imported(tmp_path, "zai-org--GLM-4.5-Air"))
    assert p["total"] == 106_852_251_264
    assert p["active"] == 13_424_129_664
    tables = 2 * 151552 * 4096
    assert 105.5e9 <= p["total"] - tables < 106.5e9
    assert 11.5e9 <= p["active"] - tables < 12.5e9


def test_gemma2_9b_matches_its_checkpoint(tmp_path: Path) -> None:
    """Gemma 2 9B: hidden 3584, 42 layers, 16 q / 8 kv heads x 256 (q 4096 wide), ffn
    14336, vocab 256000, tied; four norms a layer:
    42 * (3584*4096*2 + 3584*2048*2 + 3*3584*14336 + 4*3584) + 256000*3584 + 3584
    = 9,241,705,984 = the safetensors index total_size 18,483,411,968 / 2 (the card's
    "9B" is a size class). Even layers slide over 4096 tokens, odd ones see everything."""
    path = imported(tmp_path, "google--gemma-2-9b")
    p = totals(path)
    assert p["total"] == p["active"] == 9_241_705_984
    text = path.read_text()
    assert "tied=1" in text and "attn_logit_softcapping" in text
    r = analyze(path, hw="h100_sxm").evaluate({"B": 1, "N": 8000})
    per_layer_token = 2 * 8 * 256 * 2  # K and V, 8 kv heads x 256, bf16: 8,192 bytes
    # full layers hold N + T = 8001 tokens, sliding ones their window
    assert r["memory"]["kv_bytes"] == per_layer_token * (21 * 4096 + 21 * 8001)


def test_gemma3_1b_matches_its_checkpoint(tmp_path: Path) -> None:
    """Gemma 3 1B (gemma3_text): hidden 1152, 26 layers, 4 q / 1 kv head x 256, QK-norm,
    ffn 6912, vocab 262144, tied:
    26 * (1152*1024*2 + 1152*256*2 + 2*256 + 3*1152*6912 + 4*1152) + 262144*1152 + 1152
    = 999,885,952, the published safetensors total ("1B" on the card). Every 6th layer
    (5, 11, 17, 23) is global, the other 22 slide over 512 tokens."""
    path = imported(tmp_path, "google--gemma-3-1b-it")
    p = totals(path)
    assert p["total"] == p["active"] == 999_885_952
    r = analyze(path, hw="h100_sxm").evaluate({"B": 1, "N": 8000})
    per_layer_token = 2 * 1 * 256 * 2  # 1,024 bytes
    assert r["memory"]["kv_bytes"] == per_layer_token * (22 * 512 + 4 * 8001)  # N + T


def test_minimax_m2_lightning_layers_are_an_error() -> None:
    data = config("zai-org--GLM-4.5-Air") | {
        "model_type": "minimax_m2", "num_local_experts": 8, "attn_type_list": [0] * 46}
    assert "'attn_type_list'" in error_of(data)


def test_minimax_m2_matches_the_published_totals(tmp_path: Path) -> None:
    """MiniMax-M2: 62 full-attention layers, 48 q / 8 kv heads x 128, QK-norm over all
    heads (6144 + 1024 weights), every MLP MoE: 256 experts top-8, expert ffn 1536,
    router with a bias; vocab 200064 untied.
      attention 3072*6144*2 + 3072*1024*2 = 44,040,192; norms 6,144 + 7,168
      one expert 3*3072*1536 = 14,155,776; router 3072*256 + 256 = 786,688
      layer 44,040,192 + 13,312 + 256*14,155,776 + 786,688 = 3,668,718,848
      total 62 * 3,668,718,848 + 2*200064*3072 + 3072 = 228,689,764,864
      active 62 * (44,040,192 + 13,312 + 8*14,155,776 + 786,688) + 1,229,196,288
             = 62 * 158,086,400 + 1,229,196,288 = 11,030,553,088
    MiniMax's "230B total, 10B active" are two-figure roundings: 228.69B lies in
    [225, 235)B; active without the embedding table and LM head (1,229,193,216) is
    9.80B, in [9.5, 10.5)B. The MTP modules (num_mtp_modules 3) are not modelled."""
    p = totals(imported(tmp_path, "MiniMaxAI--MiniMax-M2"))
    assert p["total"] == 228_689_764_864
    assert p["active"] == 11_030_553_088
    assert 225e9 <= p["total"] < 235e9
    assert 9.5e9 <= p["active"] - 2 * 200064 * 3072 < 10.5e9
