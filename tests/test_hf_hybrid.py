"""`infest import-hf` for the hybrid families (compiler/hf/hybrid.py): Qwen3-Next (Gated
DeltaNet + gated attention, MoE) and Nemotron-H (Mamba-2 / attention / MLP blocks), each
checked against its publisher's totals with the real config as the fixture, the recurrent
state checked by hand, and the fields import-hf does not model refused by name.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hf.hybrid import compress, read_hybrid, render_hybrid
from infest.compiler.hf.families import read_arch
from infest.compiler.hf.importer import import_hf
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

HF = Path(__file__).parent / "fixtures" / "hf"
QWEN3_NEXT = "Qwen--Qwen3-Next-80B-A3B-Instruct"
NEMOTRON_H = "nvidia--Nemotron-H-8B-Base-8K"


def config(stem: str) -> dict:
    return json.loads((HF / f"{stem}.config.json").read_text())


def imported(tmp_path: Path, stem: str) -> Path:
    out = tmp_path / f"{stem.replace('-', '_').replace('.', '_')}.arch"
    out.write_text(import_hf(HF / f"{stem}.config.json"))
    return out


def rendered(tmp_path: Path, data: dict) -> Path:
    out = tmp_path / "edited.arch"
    out.write_text(render_hybrid(read_hybrid(data, "edited.config.json")))
    return out


def evaluate(path: Path, point: dict) -> dict:
    r = analyze(path, hw="h200_sxm").evaluate(point)
    assert r["step"]["time_s"] > 0
    return r


# ---- Qwen3-Next-80B-A3B ----------------------------------------------------------------------

def test_qwen3_next_matches_the_published_totals(tmp_path: Path) -> None:
    """Qwen3-Next-80B-A3B: hidden 2048, 48 layers (36 Gated DeltaNet, 12 gated attention,
    3 + 1 repeated), vocab 151936 untied.
      DeltaNet: in_proj_qkvz 2048 * (2*16*128 + 2*32*128) = 2048 * 12288 = 25,165,824;
        in_proj_ba 2048 * 64 = 131,072; conv 8192 * 4 = 32,768; A_log + dt_bias 64;
        norm 128; out_proj 4096 * 2048 = 8,388,608             -> 33,718,464
      gated attention: q_proj 2048 * 2*16*256 = 16,777,216; k, v 2048 * 512 each
        = 2,097,152; o 4096 * 2048 = 8,388,608; QK-norm 512     -> 27,263,488
      MoE: router 2048 * 512 = 1,048,576; 512 experts * 3*2048*512 = 1,610,612,736;
        shared expert 3,145,728; shared gate 2048               -> 1,614,809,088
      two norms a layer 4,096
      total 36 * 1,648,531,648 + 12 * 1,642,076,672 + 2 * 311,164,928 + 2048
            = 59,347,139,328 + 19,704,920,064 + 622,329,856 + 2048 = 79,674,391,296
      active: 10 of 512 experts, 31,457,280: MoE 35,653,632;
            36 * 69,376,192 + 12 * 62,921,216 + 622,331,904 = 3,874,929,408
    Qwen's "80B total, 3B active": 79.67B in [79.5, 80.5)B; active without the embedding
    table and LM head (622,329,856) 3.25B in [2.5, 3.5)B. The MTP layer is not modelled."""
    p = evaluate(imported(tmp_path, QWEN3_NEXT), {"B": 8, "N": 4096})["params"]
    assert p["total"] == 79_674_391_296
    assert p["active"] == 3_874_929_408
    assert 79.5e9 <= p["total"] < 80.5e9
    assert 2.5e9 <= p["active"] - 2 * 151936 * 2048 < 3.5e9


def test_qwen3_next_state_does_not_grow_with_the_context(tmp_path: Path) -> None:
    """Per sequence, each of the 36 DeltaNet layers holds 32 heads * 128 * 128 fp32
    = 2,097,152 bytes of state and a conv state of 3 taps * 8192 channels bf16 = 49,152:
    36 * 2,146,304 = 77,266,944 bytes whatever N. Only the 12 attention layers grow:
    12 * 2 (K, V) * 2 kv heads * 256 * 2 bytes = 24,576 bytes a token."""
    path = imported(tmp_path, QWEN3_NEXT)
    short, long = (evaluate(path, {"B": 8, "N": n})["memory"] for n in (4096, 100_000))
    assert short["kv_bytes_per_token"] == 24_576
    state = 36 * (32 * 128 * 128 * 4 + 3 * 8192 * 2)
    assert state == 77_266_944
    # B * (state + (N + T) * per token), T = 1
    assert short["kv_bytes"] == 8 * (state + 4097 * 24_576)
    assert long["kv_bytes"] == 8 * (state + 100_001 * 24_576)


def test_qwen3_next_uses_layer_blocks_and_one_repeat(tmp_path: Path) -> None:
    text = imported(tmp_path, QWEN3_NEXT).read_text()
    for name in ("deltanet", "gated_attention", "sparse_moe"):
        assert text.count(f"layer {name}(x) {{") == 1
    assert text.count("repeat ") == 1 and "repeat layers / 4 {" in text
    assert text.count("x = deltanet(x)") == 3 and text.count("x = gated_attention(x)") == 1
    assert "Multi-token-prediction" in text or "multi-token-prediction" in text


def test_qwen3_next_layer_types_override_the_interval(tmp_path: Path) -> None:
    """An explicit layer_types equal to the interval's gives the same spec; a different
    one (all DeltaNet but the last) changes the mix: 47 + 1 layers."""
    data = config(QWEN3_NEXT)
    same = data | {"layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                   for i in range(48)]}
    assert render_hybrid(read_hybrid(same, "a.config.json")) == \
        render_hybrid(read_hybrid(data, "a.config.json"))
    one = data | {"layer_types": ["linear_attention"] * 47 + ["full_attention"]}
    m = evaluate(rendered(tmp_path, one), {"B": 1, "N": 100})["memory"]
    assert m["kv_bytes_per_token"] == 2 * 2 * 256 * 2  # one attention layer: 2,048


# ---- Nemotron-H-8B ---------------------------------------------------------------------------

def test_nemotron_h_8b_matches_its_checkpoint(tmp_path: Path) -> None:
    """Nemotron-H-8B-Base-8K: hidden 4096, 52 blocks "M-M-M-M*-..." = 24 Mamba-2, 4
    attention (blocks 7, 18, 29, 40), 24 MLP; vocab 131072 untied; a norm per block.
      Mamba-2: in_proj 4096 * (2*128*64 + 2*8*128 + 128) = 4096 * 18560 = 76,021,760;
        conv (8192 + 2048 channels) * (4 taps + bias) = 51,200; A_log, D, dt_bias 384;
        gated norm 8192; out_proj 8192 * 4096 = 33,554,432; norm 4096 -> 109,640,064
      attention: q, o 4096 * 4096; k, v 4096 * 1024; norm 4096     -> 41,947,136
      MLP: up + down 2 * 4096 * 21504 = 176,160,768; norm 4096     -> 176,164,864
      total 24 * 109,640,064 + 4 * 41,947,136 + 24 * 176,164,864 + 2 * 131072 * 4096 + 4096
            = 2,631,361,536 + 167,788,544 + 4,227,956,736 + 1,073,741,824 + 4096
            = 8,100,852,736
    the checkpoint's parameter count (8,100,852,736, a public per-tensor analysis of
    nvidia/Nemotron-H-8B-Base-8K); NVIDIA's "8B" is its rounding, [7.5, 8.5)B."""
    p = evaluate(imported(tmp_path, NEMOTRON_H), {"B": 8, "N": 4096})["params"]
    assert p["total"] == p["active"] == 8_100_852_736
    assert 7.5e9 <= p["total"] < 8.5e9


def test_nemotron_h_state_and_cache_by_hand(tmp_path: Path) -> None:
    """Per sequence: 24 Mamba layers * (128 heads * 128 state * 64 head_dim fp32 =
    4,194,304 bytes + conv 3 taps * 10240 channels bf16 = 61,440) = 102,137,856 bytes,
    constant in N; 4 attention layers * 2 * 8 kv heads * 128 * 2 bytes = 16,384 a token."""
    path = imported(tmp_path, NEMOTRON_H)
    m = evaluate(path, {"B": 8, "N": 4096})["memory"]
    state = 24 * (128 * 128 * 64 * 4 + 3 * 10240 * 2)
    assert state == 102_137_856
    assert m["kv_bytes_per_token"] == 16_384
    assert m["kv_bytes"] == 8 * (state + 4097 * 16_384)


def test_nemotron_h_pattern_becomes_repeats_of_layer_calls(tmp_path: Path) -> None:
    """"M-M-M-M*-M-M-M-M-M*-..." is 4 x the 11 blocks "M-M-M-M*-M-" then 4 x "M-"."""
    text = imported(tmp_path, NEMOTRON_H).read_text()
    assert "layer mamba2(x) {" in text and "layer relu2_mlp(x) {" in text
    assert "  repeat 4 {\n    x = mamba2(x)\n    x = relu2_mlp(x)\n    x = mamba2(x)" in text
    assert text.count("repeat 4 {") == 2 and text.count("x = self_attention(x)") == 1


def test_compress_finds_the_longest_covering_unit() -> None:
    m, a, f = ("m",), ("a",), ("f",)
    assert compress([m, f] * 3 + [a]) == [(3, [m, f]), (1, [a])]
    assert compress([a]) == [(1, [a])]
    # a tie (4 x "m" or 2 x "m m") goes to the shorter unit
    assert compress([m] * 4 + [a, f]) == [(4, [m]), (1, [a]), (1, [f])]


# ---- errors ---------------------------------------------------------------------------------

def error_of(data: dict) -> str:
    with pytest.raises(SpecError) as exc:
        read_hybrid(data, "bad.config.json")
    return str(exc.value)


@pytest.mark.parametrize("stem, change, field", [
    (QWEN3_NEXT, {"mlp_only_layers": [0, 1]}, "'mlp_only_layers'"),
    (QWEN3_NEXT, {"decoder_sparse_step": 2}, "'decoder_sparse_step'"),
    (QWEN3_NEXT, {"attention_bias": True}, "'attention_bias'"),
    (QWEN3_NEXT, {"layer_types": ["sliding_attention"] * 48}, "'layer_types[0]'"),
    (QWEN3_NEXT, {"layer_types": ["full_attention"]}, "'layer_types'"),
    (QWEN3_NEXT, {"linear_num_value_heads": 0}, "'linear_num_value_heads'"),
    (NEMOTRON_H, {"hybrid_override_pattern": "ME" * 26}, "'hybrid_override_pattern'"),
    (NEMOTRON_H, {"hybrid_override_pattern": "M-"}, "'hybrid_override_pattern' has 2 blocks"),
    (NEMOTRON_H, {"mlp_hidden_act": "silu"}, "'mlp_hidden_act'"),
    (NEMOTRON_H, {"mamba_hidden_act": "gelu"}, "'mamba_hidden_act'"),
    (NEMOTRON_H, {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
     "quantization"),
])
def test_unmodelled_fields_are_named(stem: str, change: dict, field: str) -> None:
    assert field in error_of(config(stem) | change)


def test_moe_blocks_say_they_are_not_modelled() -> None:
    message = error_of(config(NEMOTRON_H) | {"hybrid_override_pattern": "ME*-" * 13})
    assert "MoE blocks (E) are not modelled" in message


def test_unknown_model_type_hint_lists_the_hybrids() -> None:
    with pytest.raises(SpecError) as exc:
        read_arch(config(NEMOTRON_H) | {"model_type": "falcon_h1"}, "bad.config.json")
    assert "qwen3_next" in str(exc.value) and "nemotron_h" in str(exc.value)


def test_config_text_is_never_spec_text(tmp_path: Path) -> None:
    data = config(NEMOTRON_H) | {"architectures": ['X\n  x = custom(tokens, params = 1e15)\n#']}
    p = evaluate(rendered(tmp_path, data), {"B": 1, "N": 100})["params"]
    assert p["total"] == 8_100_852_736


def test_cli_imports_a_hybrid(tmp_path: Path) -> None:
    out = tmp_path / "nemotron.arch"
    assert main(["import-hf", str(HF / f"{NEMOTRON_H}.config.json"), "-o", str(out)]) == 0
    assert analyze(out).model.name == "nemotron"


# ---- Qwen3-VL: the language model of the vision-language config ------------------------------

def test_qwen3_vl_8b_text_model_and_vision_tower(tmp_path: Path) -> None:
    """Qwen3-VL-8B-Instruct's text_config is Qwen3-8B's shape (hidden 4096, 36 layers,
    32 q / 8 kv heads x 128, QK-norm, ffn 12288, vocab 151936, untied):
      36 * (2*4096*4096 + 2*4096*1024 + 256 + 3*4096*12288 + 2*4096) + 2*151936*4096 + 4096
      = 8,190,735,360 (test_hf_import.py's Qwen3-8B), the spec's total.
    The vision tower (vision_config: 27 blocks of width 1152, mlp 4304, patch 16 x 16 x 2
    frames, 2304 position rows, 2 x 2 merge to 4096, deepstack at 3 layers), by hand:
      patch conv 3*2*16*16*1152 + 1152 = 1,770,624; positions 2304*1152 = 2,654,208;
      a block: 2 LayerNorms 4,608 + qkv 1152*3456 + 3456 = 3,984,768 + proj 1,328,256
        + fc1 1152*4304 + 4304 = 4,962,512 + fc2 4304*1152 + 1152 = 4,959,360
        = 15,239,504, x 27 = 411,466,608;
      merger: LayerNorm(1152) 2,304 + fc1 4608*4608 + 4608 = 21,238,272
        + fc2 4608*4096 + 4096 = 18,878,464 = 40,119,040;
      3 deepstack mergers (LayerNorm over 4608: 9,216) 3 * 40,125,952 = 120,377,856
      = 576,388,336, held in the spec (group vision), not in params.total.
    Text + vision = 8,767,123,696: the published "8.77B parameters" (model tables quoting
    the checkpoint). The card's "8B" is the text model's class: 8.19B in [7.5, 8.5)B."""
    path = imported(tmp_path, "Qwen--Qwen3-VL-8B-Instruct")
    p = evaluate(path, {"B": 8, "N": 4096})["params"]
    assert p["total"] == p["active"] == 8_190_735_360
    assert p["groups"]["vision"] == 576_388_336
    assert round((p["total"] + p["groups"]["vision"]) / 1e7) == 877
    assert 7.5e9 <= p["total"] < 8.5e9
    text = path.read_text()
    assert "qwen3_vl" in text and "vision tower (27 blocks of width 1152)" in text


def test_qwen3_vl_moe_reads_its_text_config_as_qwen3_moe(tmp_path: Path) -> None:
    """A qwen3_vl_moe wrapper around Qwen3-30B-A3B's text config imports to the same
    totals as the plain config (30,532,122,624 / 3,353,032,704: test_models.py)."""
    text = json.loads((HF / "Qwen--Qwen3-30B-A3B.config.json").read_text())
    vision = config("Qwen--Qwen3-VL-8B-Instruct")["vision_config"]
    wrapped = {"model_type": "qwen3_vl_moe", "tie_word_embeddings": False,
               "text_config": text | {"model_type": "qwen3_vl_moe_text"},
               "vision_config": vision | {"out_hidden_size": 2048}}
    source = tmp_path / "vl_moe.config.json"
    source.write_text(json.dumps(wrapped))
    out = tmp_path / "vl_moe.arch"
    out.write_text(import_hf(source))
    plain = imported(tmp_path, "Qwen--Qwen3-30B-A3B")
    a, b = (evaluate(p, {"B": 8, "N": 2048})["params"] for p in (out, plain))
    assert (a["total"], a["active"]) == (b["total"], b["active"])
    # The 8B's tower (576,388,336 above) less its four mergers' fc2 narrowed from 4096
    # to 2048 outputs: 4 * 4608 * 2048 + 4 * 2048 = 37,756,928 -> 538,631,408.
    assert a["groups"]["vision"] == 538_631_408


def test_qwen3_vl_without_text_config_is_named(tmp_path: Path) -> None:
    source = tmp_path / "vl.config.json"
    source.write_text(json.dumps({"model_type": "qwen3_vl", "hidden_size": 4096}))
    with pytest.raises(SpecError) as exc:
        import_hf(source)
    assert "'text_config'" in str(exc.value)


# ---- Qwen3.5: the same hybrid inside a multimodal config --------------------------------------

def test_qwen3_5_0_8b_text_model_matches_the_published_size(tmp_path: Path) -> None:
    """Qwen3.5-0.8B (qwen3_5, text_config): hidden 1024, 24 layers (18 DeltaNet, 6 gated
    attention), 16 key / 16 value heads x 128, 8 q / 2 kv heads x 256, dense SwiGLU ffn
    3584, vocab 248320 tied.
      DeltaNet: in_proj_qkv 1024 * 6144 = 6,291,456; in_proj_z 1024 * 2048 = 2,097,152;
        b, a 2 * 1024 * 16 = 32,768; conv 6144 * 4 = 24,576; A_log + dt_bias 32; norm 128;
        out_proj 2048 * 1024 = 2,097,152                            -> 10,543,264
      gated attention: q 1024 * 4096 = 4,194,304; k, v 2 * 1024 * 512 = 1,048,576;
        o 2048 * 1024 = 2,097,152; QK-norm 512                     -> 7,340,544
      MLP 3 * 1024 * 3584 = 11,010,048; two norms 2,048
      total 18 * 21,555,360 + 6 * 18,352,640 + 248320 * 1024 + 1024
            = 387,996,480 + 110,115,840 + 254,279,680 + 1024 = 752,393,024
    "0.8B": 0.752B lies in [0.75, 0.85)B. The vision tower (12 blocks of 768; by hand
    1,180,416 patch conv + 1,769,472 positions + 12 * 7,087,872 + 12,588,544 merger, no
    deepstack mergers in Qwen3.5 = 100,592,896) is held in group vision, out of
    params.total; the MTP layer is left out, and the header says so.
    State per sequence: 18 layers * (16 * 128 * 128 fp32 = 1,048,576 + conv 3 * 6144
    bf16 = 36,864) = 19,537,920 bytes; 6 * 2 * 2 * 256 * 2 = 12,288 bytes a token."""
    path = imported(tmp_path, "Qwen--Qwen3.5-0.8B")
    r = evaluate(path, {"B": 4, "N": 1000})
    assert r["params"]["total"] == r["params"]["active"] == 752_393_024
    assert r["params"]["groups"]["vision"] == 100_592_896
    assert 0.75e9 <= r["params"]["total"] < 0.85e9
    assert r["memory"]["kv_bytes_per_token"] == 12_288
    assert r["memory"]["kv_bytes"] == 4 * (19_537_920 + 1001 * 12_288)
    text = path.read_text()
    assert "layer swiglu_mlp(x) {" in text and "vision tower (12 blocks of width 768)" in text
    assert "tied=1" in text


def test_qwen3_5_moe_wrapping_qwen3_next_is_qwen3_next(tmp_path: Path) -> None:
    """qwen3_5_moe reads its text_config with Qwen3-Next's MoE: Qwen3-Next's config
    wrapped that way imports to Qwen3-Next's totals."""
    text = config(QWEN3_NEXT)
    wrapped = {"model_type": "qwen3_5_moe", "tie_word_embeddings": False,
               "text_config": text | {"model_type": "qwen3_5_moe_text"}}
    p = evaluate(rendered(tmp_path, wrapped), {"B": 8, "N": 4096})["params"]
    assert (p["total"], p["active"]) == (79_674_391_296, 3_874_929_408)


def test_qwen3_5_ungated_attention_is_named() -> None:
    data = config("Qwen--Qwen3.5-0.8B")
    data["text_config"]["attn_output_gate"] = False
    assert "'attn_output_gate'" in error_of(data)


# ---- other wrapped or renamed releases --------------------------------------------------------

COLLECTION = HF / "collection"


def _collection_params(tmp_path: Path, stem: str) -> dict:
    out = tmp_path / f"{stem.replace('-', '_').replace('.', '_')}.arch"
    out.write_text(import_hf(COLLECTION / f"{stem}.config.json"))
    return evaluate(out, {"B": 1, "N": 1024})["params"]


def test_kimi_k25_is_kimi_k2s_language_model(tmp_path: Path) -> None:
    """Kimi-K2.5 wraps a Kimi-K2 text_config (and a vision tower): the same totals as
    Kimi-K2-Instruct's own config."""
    wrapped = _collection_params(tmp_path, "moonshotai--Kimi-K2.5")
    plain = evaluate(imported(tmp_path, "moonshotai--Kimi-K2-Instruct"), {"B": 1, "N": 1024})["params"]
    assert (wrapped["total"], wrapped["active"]) == (plain["total"], plain["active"])


def test_devstral_small_2_imports_as_mistral(tmp_path: Path) -> None:
    """Devstral Small 2 (mistral3 around a ministral3 text model: Mistral's decoder).
    Per layer: q 5120 x 32 x 128 = 20,971,520; k, v 2 x 5120 x 8 x 128 = 10,485,760;
    o 20,971,520; MLP 3 x 5120 x 32768 = 503,316,480; 2 norms 10,240: 555,755,520, x 40 =
    22,230,220,800; embedding and untied head 2 x 131072 x 5120 = 1,342,177,280; final norm
    5,120: 23,572,403,200, inside the card's "24B"."""
    assert _collection_params(tmp_path, "mistralai--Devstral-Small-2-24B-Instruct")["total"] \
        == 23_572_403_200


def test_qwen2_5_vl_keeps_its_text_fields_at_the_top(tmp_path: Path) -> None:
    """Qwen2.5-VL writes the language model's fields at the top level, as qwen2, beside a
    vision_config: the spec says the tower is left out."""
    text = import_hf(COLLECTION / "Qwen--Qwen2.5-VL-7B-Instruct.config.json")
    assert "vision tower" in text and "bias=1" in text   # qwen2's q/k/v biases
