"""`infest import-hf`: each public config imports to a spec that parses, compiles and
models the same thing as the hand-written shipped spec; bad configs fail naming the field.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hf_import import import_hf, read_arch, render
from infest.dsl.errors import SpecError
from infest.exports.cli import main

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


def same_model(a: Path, b: Path, hw: str = "h200_sxm") -> None:
    """Params, weight memory and a decode step's bytes and FLOPs agree."""
    ra, rb = (analyze(p, hw=hw).evaluate(POINT) for p in (a, b))
    assert ra["params"]["total"] == rb["params"]["total"]
    assert ra["params"]["active"] == rb["params"]["active"]
    assert ra["memory"]["weights_bytes"] == pytest.approx(rb["memory"]["weights_bytes"], rel=1e-12)
    for key in ("bytes", "flops", "weight_bytes", "kv_bytes", "t_compute_s", "kernels"):
        assert ra["step"][key] == pytest.approx(rb["step"][key], rel=1e-12), key


@pytest.mark.parametrize("stem", sorted(SHIPPED))
def test_import_matches_the_shipped_spec(tmp_path: Path, stem: str) -> None:
    same_model(imported(tmp_path, stem), MODELS / f"{SHIPPED[stem]}.arch")


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
    data = config("meta-llama--Meta-Llama-3.1-8B") | {"model_type": "falcon"}
    message = error_of(data)
    assert "unknown model_type 'falcon'" in message and "llama" in message


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
