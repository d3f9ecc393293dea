"""`infest import-hf` breadth: a family's documented defaults for the fields a config
omits (never guesses), the Gemma 3 wrapper, the side-by-side and post-norm layouts
(Phi, Falcon, OLMo 2) against hand counts, and weights held but not run (a vision tower,
MTP layers): in memory and in params.groups, never in params.total."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hf.importer import import_hf

HF = Path(__file__).parent / "fixtures" / "hf"
COLLECTION = HF / "collection"
POINT = {"B": 1, "N": 1024}

# The transformers 4.57.1 configuration classes' defaults (read by instantiating each
# class with no arguments, AutoConfig.for_model(family).to_dict()): vocab_size, the
# MLP activation and max_position_embeddings, as the op the spec runs it with.
TRANSFORMERS_DEFAULTS = {
    # family: (fixture of that family, vocab, activation op, max_position_embeddings)
    "llama": ("../meta-llama--Meta-Llama-3.1-8B", 32000, "silu_mul", 2048),
    "mistral": ("mistralai--Mistral-7B-Instruct-v0.3", 32000, "silu_mul", 131072),
    "mixtral": ("../mistralai--Mixtral-8x7B-v0.1", 32000, "silu_mul", 131072),
    "qwen2": ("Qwen--Qwen2.5-7B-Instruct", 151936, "silu_mul", 32768),
    "qwen3": ("../Qwen--Qwen3-8B", 151936, "silu_mul", 32768),
    "qwen3_moe": ("../Qwen--Qwen3-30B-A3B", 151936, "silu_mul", 32768),
    "phi3": ("../microsoft--Phi-3-mini-4k-instruct", 32064, "silu_mul", 4096),
    "phi": ("microsoft--phi-2", 51200, "gelu", 2048),               # gelu_new
    "gemma2": ("../google--gemma-2-9b", 256000, "gelu_mul", 8192),   # gelu_pytorch_tanh
    "gemma3_text": ("../google--gemma-3-1b-it", 262208, "gelu_mul", 131072),
    "falcon": ("tiiuae--falcon-7b-instruct", 65024, "gelu", 2048),
    "olmo2": ("allenai--OLMo-2-1124-7B", 50304, "silu_mul", 2048),
    "olmo3": ("allenai--Olmo-3.1-32B-Instruct", 50304, "silu_mul", 2048),
    "exaone4": ("LGAI-EXAONE--EXAONE-4.0-32B", 102400, "silu_mul", 2048),
    "starcoder2": ("bigcode--starcoder2-7b", 49152, "gelu", 4096),  # gelu_pytorch_tanh
    "cohere": ("CohereForAI--aya-23-8B", 256000, "silu_mul", 8192),
    "glm4_moe": ("../zai-org--GLM-4.5-Air", 151552, "silu_mul", 131072),
    "deepseek_v2": ("deepseek-ai--DeepSeek-V2-Lite", 32000, "silu_mul", 2048),
    "deepseek_v3": ("../deepseek-ai--DeepSeek-V3", 129280, "silu_mul", 4096),
}
_OMITTED = ("vocab_size", "hidden_act", "hidden_activation", "activation",
            "max_position_embeddings", "rope_scaling")


def spec_of(tmp_path: Path, data: dict, name: str = "m") -> str:
    path = tmp_path / f"{name}.config.json"
    path.write_text(json.dumps(data))
    return import_hf(path)


def param(text: str, name: str) -> int | None:
    match = re.search(rf"\b{name} = (\d+)", text)
    return int(match.group(1)) if match else None


def load(stem: str) -> dict:
    return json.loads((COLLECTION / f"{stem}.config.json").read_text())


@pytest.mark.parametrize("family", sorted(TRANSFORMERS_DEFAULTS))
def test_an_omitted_field_takes_the_family_default(tmp_path: Path, family: str) -> None:
    stem, vocab, act, context = TRANSFORMERS_DEFAULTS[family]
    data = {k: v for k, v in load(stem).items() if k not in _OMITTED}
    assert data["model_type"] == family
    text = spec_of(tmp_path, data)
    assert param(text, "vocab") == vocab
    assert param(text, "trained_context") == context
    assert f"{act}(" in text
    assert f"Not in the config, so the {family} defaults of transformers 4.57.1" in text
    assert f"vocab_size = {vocab}" in text  # the header names what it took


@pytest.mark.parametrize("family", sorted(TRANSFORMERS_DEFAULTS))
def test_a_stated_field_wins_over_the_default(tmp_path: Path, family: str) -> None:
    stem = TRANSFORMERS_DEFAULTS[family][0]
    data = load(stem) | {"vocab_size": 1234, "max_position_embeddings": 777}
    data.pop("rope_scaling", None)
    text = spec_of(tmp_path, data)
    assert param(text, "vocab") == 1234 and param(text, "trained_context") == 777
    assert "vocab_size =" not in text


def test_a_missing_shape_field_is_refused_not_defaulted(tmp_path: Path) -> None:
    data = {k: v for k, v in load("allenai--OLMo-2-1124-7B").items() if k != "hidden_size"}
    with pytest.raises(Exception, match="missing required config field 'hidden_size'"):
        spec_of(tmp_path, data)


# ---- Gemma 3: the multimodal wrapper ----------------------------------------------------

def test_gemma3_27b_wrapper_imports_with_gelu_128k_and_its_published_count(tmp_path: Path) -> None:
    """gemma-3-27b-it's text_config omits vocab_size, hidden_activation and the context:
    Gemma3TextConfig's defaults give 262208, gelu_pytorch_tanh and 131072 (the report's
    128K). Text model, by hand (hidden 5376, 62 layers, 32 q / 16 kv heads x 128, ffn
    21504, tied 262208 x 5376 table):
      a layer: q, o 2 * 5376 * 4096 + k, v 2 * 5376 * 2048 = 66,060,288; QK-norm 2 * 128;
        MLP 3 * 5376 * 21504 = 346,816,512; four norms 4 * 5376: 412,898,560
      62 layers 25,599,710,720 + table 1,409,630,208 + final norm 5376 = 27,009,346,304
    Vision, held (group vision): SigLIP 416,866,032 (patch 3*14*14*1152 + 1152, 4096
    positions x 1152, 27 blocks of 15,239,504, post-LayerNorm 2304) + projector
    1152 * 5376 + 1152 = 6,194,304: 423,060,336. Sum 27,432,406,640: the report's
    417M + 1,416M + 25,600M = 27,433M, each part rounded to 1M (+-1.5M)."""
    path = tmp_path / "gemma3.arch"
    path.write_text(import_hf(COLLECTION / "google--gemma-3-27b-it.config.json"))
    text = path.read_text()
    assert "gelu_mul(" in text and param(text, "trained_context") == 131072
    assert param(text, "vocab") == 262208
    r = analyze(path, hw="h200_sxm").evaluate(POINT)
    p = r["params"]
    assert p["total"] == 27_009_346_304 and p["groups"]["vision"] == 423_060_336
    assert abs(p["total"] + p["groups"]["vision"] - 27_433e6) <= 1.5e6


# ---- layouts: side by side, post-norm -------------------------------------------------------

def test_phi2_parallel_layer_matches_the_hand_count(tmp_path: Path) -> None:
    """phi-2 (hidden 2560, 32 layers, ffn 10240, vocab 51200, untied, biases everywhere):
      a layer: q/k/v/dense 4 * (2560^2 + 2560) = 26,224,640; fc1 2560 * 10240 + 10240,
        fc2 10240 * 2560 + 2560 = 52,441,600; one LayerNorm 5120: 78,671,360
      32 layers 2,517,483,520 + embedding 131,072,000 + head 131,072,000 + its bias 51,200
        + final LayerNorm 5120 = 2,779,683,840 (the card's "2.7B", cut)."""
    path = tmp_path / "phi2.arch"
    path.write_text(import_hf(COLLECTION / "microsoft--phi-2.config.json"))
    assert analyze(path, hw="h200_sxm").evaluate(POINT)["params"]["total"] == 2_779_683_840


def test_falcon_7b_is_multi_query(tmp_path: Path) -> None:
    """falcon-7b: multi_query without the new decoder architecture is one KV head (the
    config's num_kv_heads 71 is transformers' to_dict of a field the model ignores):
      a layer: q 4544^2, k and v 2 * 4544 * 64, dense 4544^2 = 41,877,504; MLP
        2 * 4544 * 18176 = 165,183,488; one LayerNorm 9088: 207,070,080
      32 layers 6,626,242,560 + tied table 65024 * 4544 = 295,469,056 + final LayerNorm
      9088 = 6,921,720,704. KV per token: 32 layers * 2 * 1 * 64 * 2 bytes = 8,192."""
    path = tmp_path / "falcon.arch"
    path.write_text(import_hf(COLLECTION / "tiiuae--falcon-7b-instruct.config.json"))
    r = analyze(path, hw="h200_sxm").evaluate(POINT)
    assert r["params"]["total"] == 6_921_720_704
    assert r["memory"]["kv_bytes_per_token"] == 8192


def test_olmo2_norms_follow_the_sublayers(tmp_path: Path) -> None:
    """OLMo 2 7B: no pre-norms, an RMSNorm after attention and after the MLP, QK-norm over
    all heads (q 4096, k 4096): a layer 4 * 4096^2 + 3 * 4096 * 11008 + 2 * 4096 + 2 * 4096
    = 202,391,552; 32 layers 6,476,529,664 + 2 * 100352 * 4096 = 822,083,584 + the final
    norm 4096 = 7,298,617,344."""
    path = tmp_path / "olmo2.arch"
    path.write_text(import_hf(COLLECTION / "allenai--OLMo-2-1124-7B.config.json"))
    text = path.read_text()
    assert "q = linear(x," in text and "po = rmsnorm(o)" in text
    assert analyze(path, hw="h200_sxm").evaluate(POINT)["params"]["total"] == 7_298_617_344


# ---- held but not run -------------------------------------------------------------------------

def test_mtp_layers_are_held_not_run(tmp_path: Path) -> None:
    """DeepSeek-V3's MTP layer is in memory and in params.groups['mtp'] (11,610,068,224
    params: tests/test_hf_import.py), not in total (671B main model) nor in a step."""
    path = tmp_path / "ds.arch"
    path.write_text(import_hf(HF / "deepseek-ai--DeepSeek-V3.config.json"))
    text = path.read_text()
    held = analyze(path, hw="h200_sxm").evaluate(POINT)
    plain = tmp_path / "plain.arch"
    plain.write_text(text.split("  draft = held(x)")[0] + "}\n")
    run = analyze(plain, hw="h200_sxm").evaluate(POINT)
    assert held["params"]["groups"]["mtp"] == 11_610_068_224
    assert held["params"]["total"] == run["params"]["total"] == 671_026_419_200
    assert held["memory"]["weights_bytes"] - run["memory"]["weights_bytes"] == 11_611_903_488
    for key in ("flops", "bytes", "kernels", "time_s"):
        assert held["step"][key] == run["step"][key], key
    assert held["memory"]["kv_bytes_per_token"] == run["memory"]["kv_bytes_per_token"]
    assert "layer mtp(x) {" in text
