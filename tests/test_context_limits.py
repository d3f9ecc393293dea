"""The model's own limits (issue #10, item 4): the trained context caps max_context and
refuses longer contexts; an all-window model's KV stops growing (fits and max_context
agree); weights_floor_s counts the experts a batch touches, not top_k."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.dsl.errors import SpecError

ROOT = Path(__file__).parents[1]
MISTRAL = Path(__file__).parent / "fixtures" / "mistral_7b_window.arch"
QWEN = ROOT / "specs" / "models" / "qwen3_30b_a3b.arch"
# Mistral 7B v0.1: KV per token 2 (K, V) x 32 layers x 8 kv heads x 128 x 2 bytes = 131,072;
# a sequence holds at most the 4096-token window: 4096 x 131,072 = 536,870,912 bytes.
KV_TOKEN, WINDOW_KV = 131_072, 4096 * 131_072
# params: embed 32000*4096 = 131,072,000; per layer 2*4096^2 + 2*4096*1024 (q, o, k, v)
# + 3*4096*14336 (MLP) + 2*4096 (norms) = 218,112,000, x 32 = 6,979,584,000; head
# 131,072,000 + final norm 4096: 7,241,732,096 params, 14,483,464,192 bytes in bf16.
WEIGHTS = 2 * 7_241_732_096


@pytest.fixture(scope="module")
def mistral():
    return analyze(MISTRAL, hw="h100_sxm")


def test_all_window_max_context_is_the_trained_context(mistral) -> None:
    r = mistral.evaluate({"B": 1, "N": 20_000})
    assert r["memory"]["weights_bytes"] == WEIGHTS
    # decode: N + T <= 32768 with T = 1
    assert r["memory"]["max_context"] == 32_767
    assert r["memory"]["fits"]


def test_all_window_kv_is_constant_within_the_context(mistral) -> None:
    for n in (5_000, 20_000, 32_767):
        m = mistral.evaluate({"B": 1, "N": n})["memory"]
        assert m["kv_bytes"] == WINDOW_KV and m["fits"]


def test_context_beyond_the_trained_one_is_refused(mistral) -> None:
    with pytest.raises(SpecError, match=r"context N \+ T <= trained_context does not hold "
                                        r"\(32769 > 32768\)"):
        mistral.evaluate({"N": 32_768})


def test_fits_and_max_context_agree_past_a_million(mistral) -> None:
    # The case: a million tokens fit (KV stops at the window), so max_context must
    # not be a finite memory answer (it was 499850); with the trained context lifted as a
    # what-if, it is that context less T.
    m = mistral.evaluate({"N": 1_000_000, "trained_context": 1_000_001})["memory"]
    assert m["fits"] and m["kv_bytes"] == WINDOW_KV
    assert m["max_context"] == 1_000_000


def test_all_window_max_context_when_the_windows_do_not_fit(mistral) -> None:
    # B = 200: 200 full windows take 107.4 GB, more than the H100's 81,559 MiB =
    # 85,520,809,984 bytes less 14,483,464,192 of weights = 71,037,345,792 bytes of room,
    # so the context stops before the window fills: per sequence
    # 71,037,345,792 / 200 = 355,186,728.96 bytes / 131,072 = 2709.9 tokens = N + T.
    m = mistral.evaluate({"B": 200, "N": 100})["memory"]
    assert m["max_context"] == 2709 - 1
    assert mistral.evaluate({"B": 200, "N": 2708})["memory"]["fits"]
    assert not mistral.evaluate({"B": 200, "N": 2709})["memory"]["fits"]


def test_prefill_prompt_must_fit_the_trained_context() -> None:
    a = analyze(MISTRAL, hw="h100_sxm", phase="prefill")
    assert a.evaluate({"N": 32_768})["memory"]["max_context"] == 32_768
    with pytest.raises(SpecError, match=r"\(32769 > 32768\)"):
        a.evaluate({"N": 32_769})


def test_trained_context_is_exposed_on_the_model(mistral) -> None:
    assert str(mistral.model.trained_context) == "trained_context"
    assert mistral.model.params["trained_context"].default == 32_768
    llama = analyze(ROOT / "specs" / "models" / "llama3_1_8b.arch", hw="h100_sxm")
    assert llama.evaluate({"B": 1})["memory"]["max_context"] == 131_072 - 1


def test_weights_floor_counts_touched_experts() -> None:
    a = analyze(QWEN, hw="h100_sxm")
    one, many = (a.evaluate({"B": b})["step"]["weights_floor_s"] for b in (1, 64))
    # Qwen3-30B-A3B: 48 MoE layers of E = 128 experts, k = 8; one expert's SwiGLU holds
    # 3 * 2048 * 768 = 4,718,592 params = 9,437,184 bytes. Touched at B*T tokens:
    # E * (1 - (1 - k/E)^(B*T)): B = 1 -> 128 * (8/128) = 8 (= top_k);
    # B = 64 -> 128 * (1 - 0.9375^64) = 128 * (1 - 0.016075) = 125.94.
    touched_64 = 128 * (1 - (1 - 8 / 128) ** 64)
    assert touched_64 == pytest.approx(125.94, abs=0.01)
    expert_bytes = 3 * 2048 * 768 * 2
    assert (many - one) * 3.35e12 == pytest.approx(48 * expert_bytes * (touched_64 - 8),
                                                   rel=1e-9)
    # At B = 1 the floor is the dense weights plus top_k experts a layer: the active params
    # (3.3B by the publisher) less the embedding's 151936 * 2048 rows, in bf16.
    r = a.evaluate({"B": 1})
    active_bytes = 2 * (r["params"]["active"] - 151_936 * 2048)
    assert one * 3.35e12 == pytest.approx(active_bytes, rel=1e-9)


HF = Path(__file__).parent / "fixtures" / "hf"


def _config(stem: str) -> dict:
    import json
    return json.loads((HF / f"{stem}.config.json").read_text())


@pytest.mark.parametrize("stem,context", [
    ("meta-llama--Meta-Llama-3.1-8B", 131_072),  # max_position_embeddings; llama3 rope
                                                 # scaling 8192 x 8 = 65536 is less
    ("deepseek-ai--DeepSeek-V3", 163_840),       # YaRN 4096 x 40 = 163840, stated too
    ("Qwen--Qwen3-30B-A3B", 40_960),             # no rope scaling
    ("mistralai--Mixtral-8x7B-v0.1", 32_768)])
def test_import_reads_the_trained_context(stem: str, context: int) -> None:
    from infest.compiler.hf.families import read_arch
    from infest.compiler.hf.render import render
    text = render(read_arch(_config(stem), f"{stem}.config.json"))
    assert f"trained_context = {context}\n" in text


def test_yarn_scaling_beyond_the_stated_context_wins() -> None:
    from infest.compiler.hf.config import Config, trained_context
    # Qwen3's documented YaRN extension: original 32768 x factor 4 = 131072 > 40960.
    data = _config("Qwen--Qwen3-30B-A3B") | {"rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert trained_context(Config(data, "qwen.json")) == 131_072


def test_bad_rope_factor_is_named() -> None:
    from infest.compiler.hf.config import Config, trained_context
    data = {"max_position_embeddings": 4096, "rope_scaling": {"factor": "eight"}}
    with pytest.raises(SpecError, match="rope_scaling: config field 'factor' must be a "
                                        "positive finite number"):
        trained_context(Config(data, "c.json"))


def test_imported_mistral_all_window_caps_at_its_config(tmp_path: Path) -> None:
    from infest.compiler.hf.families import read_arch
    from infest.compiler.hf.render import render
    # Mistral 7B v0.1 config: sliding_window 4096, max_position_embeddings 32768, vocab
    # 32000 (the other sizes are Llama 3.1 8B's: 32 layers, 8 kv heads of 128).
    data = _config("meta-llama--Meta-Llama-3.1-8B") | {
        "model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768,
        "rope_scaling": None, "vocab_size": 32000}
    path = tmp_path / "mistral.arch"
    path.write_text(render(read_arch(data, "mistral.config.json")))
    a = analyze(path, hw="h100_sxm")
    m = a.evaluate({"B": 1, "N": 30_000})["memory"]
    assert m["max_context"] == 32_767 and m["kv_bytes"] == WINDOW_KV and m["fits"]
    with pytest.raises(SpecError, match="trained_context"):
        a.evaluate({"N": 32_768})


def test_cli_refuses_a_context_beyond_the_trained_one(capsys) -> None:
    from infest.exports.cli.main import main
    llama = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
    assert main(["eval", llama, "--hw", "h100_sxm", "--set", "N=128k"]) == 1
    err = capsys.readouterr().err
    assert "llama3_1_8b.arch:5:3: error: context N + T <= trained_context does not hold " \
           "(131073 > 131072)" in err and "Traceback" not in err
    # sweeps refuse the grid as a whole, naming the first cell beyond it
    assert main(["sweep", llama, "--hw", "h100_sxm", "--B", "1", "--N", "4k,256k"]) == 1
    assert "(262145 > 131072)" in capsys.readouterr().err
