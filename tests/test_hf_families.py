"""`infest import-hf`: `layer` blocks in imported specs, and the llama4 and deepseek_v32
families checked against hand-derived counts and the publishers' totals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy

from infest.compiler.api import analyze
from infest.compiler.hf.families import read_arch
from infest.compiler.hf.importer import import_hf
from infest.compiler.hf.render import render
from infest.dsl.errors import SpecError

HF = Path(__file__).parent / "fixtures" / "hf"
MODELS = Path(__file__).parents[1] / "specs" / "models"


def imported(tmp_path: Path, stem: str) -> Path:
    out = tmp_path / f"{stem.replace('-', '_').replace('.', '_')}.arch"
    out.write_text(import_hf(HF / f"{stem}.config.json"))
    return out


def params(path: Path) -> dict:
    """(total, active) params of a spec, evaluated at a decode point."""
    r = analyze(path, hw="h200_sxm").evaluate({"B": 8, "N": 4096})
    assert r["step"]["time_s"] > 0
    return r["params"]


# ---- layer blocks ------------------------------------------------------------------------

@pytest.mark.parametrize("stem, layers", [
    ("openai--gpt-oss-20b", ["decoder(x, window)"]),
    ("deepseek-ai--DeepSeek-V3", ["dense_decoder(x)", "moe_decoder(x)"]),
    ("meta-llama--Meta-Llama-3.1-8B", ["decoder(x)"]),
])
def test_imported_specs_define_a_layer_per_body(tmp_path: Path, stem: str,
                                                layers: list[str]) -> None:
    """Each distinct body is written once as a `layer` and the repeats only call it."""
    text = imported(tmp_path, stem).read_text()
    for signature in layers:
        assert text.count(f"  layer {signature} {{") == 1, signature
    assert text.count(" q = linear(") == len(layers)  # attention written once a body
    repeats = text.split("  repeat ")[1:]
    for block in repeats:
        body = [line for line in block.split("\n  }")[0].splitlines()[1:] if line.strip() != "}"]
        # the held MTP block repeats its own layer, `mtp`, which calls a decoder body
        assert body and all("decoder(x" in line or "= mtp(x)" in line for line in body), block


@pytest.mark.parametrize("stem, shipped", [
    ("meta-llama--Meta-Llama-3.1-8B", "llama3_1_8b"),
    ("mistralai--Mixtral-8x7B-v0.1", "mixtral_8x7b"),
    ("Qwen--Qwen3-30B-A3B", "qwen3_30b_a3b"),
])
def test_layer_calls_have_the_written_out_forms(tmp_path: Path, stem: str,
                                                shipped: str) -> None:
    """The shipped specs above write every layer out inside `repeat`; the import calls a
    `layer` instead. The closed forms of a decode step are the same expressions."""
    a, b = analyze(imported(tmp_path, stem)), analyze(MODELS / f"{shipped}.arch")
    assert "layer decoder(x)" in imported(tmp_path, stem).read_text()
    for key in ("flops", "weight_bytes", "kv_bytes", "bytes"):
        assert sympy.expand(a.forms.step[key] - b.forms.step[key]) == 0, key
    assert sympy.expand(a.forms.params["total"] - b.forms.params["total"]) == 0


# ---- llama4 ------------------------------------------------------------------------------

# Llama 4 text model: hidden 5120, 48 layers, 40 q / 8 kv heads x 128, no biases,
# routed experts and the shared expert ffn 8192, dense MLP ffn 16384, vocab 202048 untied.
L4_ATTN = 5120 * 5120 * 2 + 5120 * 1024 * 2      # q, o + k, v = 62,914,560
L4_NORMS = 2 * 5120                               # input and post-attention RMSNorms
L4_EXPERT = 3 * 5120 * 8192                       # 125,829,120
L4_DENSE_MLP = 3 * 5120 * 16384                   # 251,658,240
L4_REST = 2 * 202048 * 5120 + 5120                # embed + head 2,068,971,520 + final norm
# The vision tower, from vision_config (hidden 1408, 34 layers, ffn 5632, 14x14 patches
# of 336x336 images, pixel shuffle 0.5 to 4 * 1408 = 5632, projector 4096 -> 5120):
#   patch embedding 3*14*14*1408 = 827,904; class embedding 1,408; positions
#   (576 + 1) * 1408 = 812,416; pre/post LayerNorms 4 * 1408 = 5,632;
#   a layer: q/k/v/o with biases 4 * (1408^2 + 1408) = 7,935,488, fc1/fc2 with biases
#   2 * 1408 * 5632 + 5632 + 1408 = 15,866,752, two LayerNorms 5,632: 23,807,872; x 34
#   = 809,467,648; adapter MLP 5632*4096 + 4096*4096 = 39,845,888; projector 4096*5120
#   = 20,971,520. Sum: 871,932,416.
L4_VISION = 871_932_416


def test_llama4_scout_matches_the_published_totals(tmp_path: Path) -> None:
    """Scout: every layer MoE (16 experts top-1 + shared), router 5120*16 = 81,920.
      layer 62,914,560 + 10,240 + 81,920 + 17 * 125,829,120 = 2,202,101,760
      total 48 * 2,202,101,760 + 2,068,976,640 = 107,769,861,120
      active 48 * (62,914,560 + 10,240 + 81,920 + 2 * 125,829,120 = 314,664,960)
             + 2,068,976,640 = 17,172,894,720
    Meta's "109B total" counts the vision tower: 107,769,861,120 + 871,932,416 =
    108,641,793,536, in [108.5B, 109.5B) (the text model alone, 107.77B, is not);
    "17B active" is the text model's: 17.17B in [16.5B, 17.5B)."""
    p = params(imported(tmp_path, "meta-llama--Llama-4-Scout-17B-16E"))
    layer = L4_ATTN + L4_NORMS + 5120 * 16 + 17 * L4_EXPERT
    assert p["total"] == 48 * layer + L4_REST == 107_769_861_120
    active = 48 * (L4_ATTN + L4_NORMS + 5120 * 16 + 2 * L4_EXPERT) + L4_REST
    assert p["active"] == active == 17_172_894_720
    assert 108.5e9 <= p["total"] + L4_VISION < 109.5e9
    assert not 108.5e9 <= p["total"] < 109.5e9
    assert 16.5e9 <= p["active"] < 17.5e9


def test_llama4_maverick_matches_the_published_totals(tmp_path: Path) -> None:
    """Maverick: interleave_moe_layer_step 2, so odd layers are MoE (128 experts top-1 +
    shared, router 5120*128 = 655,360), even ones dense (ffn 16384):
      MoE layer 62,914,560 + 10,240 + 655,360 + 129 * 125,829,120 = 16,295,536,640
      dense layer 62,914,560 + 10,240 + 251,658,240 = 314,583,040
      total 24 * (16,295,536,640 + 314,583,040) + 2,068,976,640 = 400,711,848,960
      active 24 * (63,580,160 + 2 * 125,829,120 + 314,583,040) + 2,068,976,640
             = 17,184,691,200
    With the vision tower: 401,583,781,376, +0.40% over Meta's "400B" (inside 0.5%,
    not inside that figure's rounding interval: the checkpoint holds 401.6B); "17B
    active": 17.18B in [16.5B, 17.5B)."""
    p = params(imported(tmp_path, "meta-llama--Llama-4-Maverick-17B-128E"))
    moe = L4_ATTN + L4_NORMS + 5120 * 128 + 129 * L4_EXPERT
    dense = L4_ATTN + L4_NORMS + L4_DENSE_MLP
    assert p["total"] == 24 * (moe + dense) + L4_REST == 400_711_848_960
    moe_active = L4_ATTN + L4_NORMS + 5120 * 128 + 2 * L4_EXPERT
    assert p["active"] == 24 * (moe_active + dense) + L4_REST == 17_184_691_200
    assert abs((p["total"] + L4_VISION) / 400e9 - 1) < 0.005
    assert 16.5e9 <= p["active"] < 17.5e9


def test_llama4_chunked_layers_hold_one_chunk(tmp_path: Path) -> None:
    """36 RoPE layers hold at most one 8192-token chunk, the 12 NoPE layers (3, 7, ...)
    everything: 2 (K, V) * 8 kv heads * 128 * 2 bytes = 4,096 bytes a token a layer."""
    path = imported(tmp_path, "meta-llama--Llama-4-Scout-17B-16E")
    r = analyze(path, hw="h200_sxm").evaluate({"B": 1, "N": 20000})
    assert r["memory"]["kv_bytes"] == 4096 * (36 * 8192 + 12 * 20001)  # N + T
    text = path.read_text()
    assert text.count("x = decoder(x, window)") == 3 and text.count("x = decoder(x, 0)") == 1


def test_llama4_text_only_config_imports(tmp_path: Path) -> None:
    """A llama4_text config (Llama4ForCausalLM, no wrapper) is the same text model."""
    data = json.loads((HF / "meta-llama--Llama-4-Scout-17B-16E.config.json").read_text())
    path = tmp_path / "scout_text.arch"
    path.write_text(render(read_arch(data["text_config"], "scout_text.config.json")))
    assert params(path)["total"] == 107_769_861_120


def test_llama4_bad_no_rope_layers_is_named() -> None:
    data = json.loads((HF / "meta-llama--Llama-4-Scout-17B-16E.config.json").read_text())
    data["text_config"]["no_rope_layers"] = [1, 0]
    with pytest.raises(SpecError, match="'no_rope_layers' must list num_hidden_layers"):
        read_arch(data, "bad.config.json")


def test_llama4_without_text_config_is_named() -> None:
    with pytest.raises(SpecError, match="'text_config'"):
        read_arch({"model_type": "llama4"}, "bad.config.json")


# ---- deepseek_v32 ------------------------------------------------------------------------

def test_deepseek_v32_adds_the_indexer_to_v3(tmp_path: Path) -> None:
    """DeepSeek-V3.2-Exp is DeepSeek-V3 plus a lightning indexer a layer (64 heads x 128,
    top-2048): wq_b 1536 * 64*128 = 12,582,912; wk 7168 * 128 = 917,504; k_norm
    LayerNorm 2 * 128 = 256; weights_proj 7168 * 64 = 458,752: 13,959,424 a layer,
    x 61 = 851,524,864. DeepSeek-V3 (tests/test_models.py) is 671,026,419,200 total,
    37,552,297,472 active, so V3.2: 671,877,944,064 / 38,403,822,336. The publisher's
    671B main model (685B with the MTP module, as for V3) is within 0.5% (+0.13%)."""
    p = params(imported(tmp_path, "deepseek-ai--DeepSeek-V3.2-Exp"))
    indexer = 61 * (1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64)
    assert p["total"] == 671_026_419_200 + indexer == 671_877_944_064
    assert p["active"] == 37_552_297_472 + indexer
    assert abs(p["total"] / 671e9 - 1) < 0.005


def test_deepseek_v32_attention_reads_top_k(tmp_path: Path) -> None:
    """At N = 32768, B = 1: MLA reads 2048 selected latents (576 bf16 values, 1,152 bytes)
    and writes one, a layer; the indexer reads its whole fp8 key cache (128 bytes a
    token) and writes one. A token holds 61 * (1,152 + 128) = 78,080 bytes."""
    path = imported(tmp_path, "deepseek-ai--DeepSeek-V3.2-Exp")
    r = analyze(path, hw="h200_sxm").evaluate({"B": 1, "N": 32768})
    assert r["memory"]["kv_bytes_per_token"] == 61 * (1152 + 128)
    assert r["step"]["kv_bytes"] == 61 * ((2048 + 1) * 1152 + (32768 + 1) * 128)
