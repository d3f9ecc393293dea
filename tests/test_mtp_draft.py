"""`serve --draft mtp`: an imported DeepSeek-V3's own multi-token-prediction layer as the
draft (compiler/analyses/mtp.py). Expected numbers are derived by hand from the config
(tests/fixtures/hf/deepseek-ai--DeepSeek-V3.config.json) and the speculative formula."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.compiler.analyses.speculative import Draft, both_fit
from infest.compiler.hf.importer import import_hf
from infest.exports.cli.main import main

HF = Path(__file__).parent / "fixtures" / "hf"
LLAMA8 = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"
SERVE = ["--hw", "h200_sxm", "--isl", "1000", "--osl", "200", "--concurrency", "8",
         "--set", "tp=8", "--set", "ep=8"]


@pytest.fixture(scope="module")
def dsv3(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mtp") / "dsv3.arch"
    path.write_text(import_hf(HF / "deepseek-ai--DeepSeek-V3.config.json"))
    return path


def _serve(capsys, spec: Path, *extra: str) -> dict:
    assert main(["serve", str(spec), *SERVE, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_draft_step_runs_one_mtp_module_with_the_shared_head(dsv3: Path) -> None:
    draft = analyze(dsv3, hw="h200_sxm", draft="mtp").evaluate({"B": 1, "N": 1000})
    # Weights one draft step reads at B = 1, one GPU (fp8 weights, 1 byte, unless stated):
    norms = 6 * 7168              # enorm, hnorm, the layer's 2, the MTP norm, the head's norm
    eh_proj = 2 * 7168 * 7168     # eh_proj as its two 7168 x 7168 halves
    latent = 7168 * 1536 + 7168 * (512 + 64) + 1536 + 512   # q_a, kv_a and their norms
    attention = 1536 * 128 * (128 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * 7168
    router = 7168 * 256 * 2 + 256 * 2                 # bf16 gate and its bias
    experts = 8 * 3 * 7168 * 2048  # top-8 routed experts touched by one token
    shared = 3 * 7168 * 2048       # the shared expert
    head = 7168 * 129280 * 2       # the main model's LM head, bf16
    embed = 7168 * 2               # one bf16 embedding row: the token just drafted
    total = norms + eh_proj + latent + attention + router + experts + shared + head + embed
    assert total == 2_543_315_456
    assert draft["step"]["weight_bytes"] == total
    # Its KV cache: one MLA layer, (512 + 64) bf16 values per token; the target has 61.
    assert draft["memory"]["kv_bytes_per_token"] == (512 + 64) * 2 == 1152
    target = analyze(dsv3, hw="h200_sxm").evaluate({"B": 1, "N": 1000})
    assert target["memory"]["kv_bytes_per_token"] == 61 * 1152
    # The same weights in memory: the MTP layer held in the target runs in the draft,
    # the main layers run in the target are held in the draft.
    assert draft["memory"]["weights_bytes"] == target["memory"]["weights_bytes"]


@pytest.mark.parametrize("k, tokens", [(1, 1.8), (3, 2.952)])
def test_mtp_lowers_tpot_at_acceptance_0_8(capsys, dsv3: Path, k: int, tokens: float) -> None:
    plain = _serve(capsys, dsv3)
    spec = _serve(capsys, dsv3, "--draft", "mtp", "--draft-len", str(k), "--acceptance", "0.8")
    # (1 - 0.8^(K+1)) / (1 - 0.8): K = 1: 1 + 0.8 = 1.8; K = 3: 1 + 0.8 + 0.64 + 0.512 = 2.952
    # (one MTP module drafts all K tokens, run K times as vLLM and SGLang do).
    s = spec["speculative"]
    assert s["tokens_per_round"] == pytest.approx(tokens, rel=1e-12)
    assert s["draft"] == "mtp" and s["mtp_modules"] == 1 and s["draft_len"] == k
    assert spec["batching"] == "continuous" and spec["fits"]
    assert s["plain_tpot_s"] == pytest.approx(plain["tpot_s"], rel=1e-12)
    assert spec["tpot_s"] < plain["tpot_s"]
    assert s["breakeven_acceptance"] < 0.8


def test_static_round_is_k_mtp_steps_plus_the_verify_step(dsv3: Path) -> None:
    target = Serving(*(analyze(dsv3, hw="h200_sxm", phase=p) for p in ("decode", "prefill")))
    mtp = Serving(*(analyze(dsv3, hw="h200_sxm", phase=p, draft="mtp")
                    for p in ("decode", "prefill")))
    at = {"tp": 8, "ep": 8}
    r = serve(target, Request(1000, 3, 8, "static"), at, Draft(mtp, 3, 0.8, modules=1))
    # OSL 3: rounds at N = 1000, 1001; a round = 3 MTP steps (T = 1) + the target over 4.
    rounds = [3 * mtp.decode.evaluate({"B": 8, "N": n, **at})["step"]["estimate_s"]
              + target.decode.evaluate({"B": 8, "N": n, "T": 4, **at})["step"]["estimate_s"]
              for n in (1000, 1001)]
    assert r["tpot_s"] == pytest.approx(sum(rounds) / 2 / 2.952, rel=1e-9)


def test_fits_adds_only_the_mtp_kv_cache_per_module() -> None:
    target = {"memory.total_bytes_per_gpu": 100.0, "memory.capacity_bytes": 110.0}
    draft = {"memory.kv_bytes_per_gpu": 4.0, "memory.total_bytes_per_gpu": 50.0}
    assert both_fit(target, draft, modules=2)        # 100 + 2 x 4 = 108 <= 110
    assert not both_fit(target, draft, modules=3)    # 100 + 3 x 4 = 112 > 110
    assert not both_fit(target, draft)               # a separate draft: 100 + 50 > 110


def test_modules_come_from_the_mtp_block_and_a_step_runs_one(capsys, tmp_path: Path) -> None:
    """MiniMax-M2 holds 3 MTP modules (num_mtp_modules = 3): draft token k runs module
    k mod 3, so a draft step costs one module whatever the count; the count scales the
    KV cache `fits` adds."""
    path = tmp_path / "m2.arch"
    path.write_text(import_hf(HF / "MiniMaxAI--MiniMax-M2.config.json"))
    steps = [analyze(path, hw="h200_sxm", draft="mtp").evaluate({"B": 1, "N": 64, "mtp_layers": m})
             for m in (1, 3)]
    assert steps[0]["step"]["weight_bytes"] == steps[1]["step"]["weight_bytes"]
    argv = ["serve", str(path), "--hw", "h200_sxm", "--isl", "64", "--osl", "8",
            "--concurrency", "1", "--set", "tp=4", "--draft", "mtp", "--draft-len", "4",
            "--acceptance", "0.5", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["speculative"]["mtp_modules"] == 3
    assert main(argv[:-1] + ["--set", "mtp_layers=2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["speculative"]["mtp_modules"] == 2


def test_a_spec_without_mtp_layers_is_a_clear_error(capsys) -> None:
    argv = ["serve", str(LLAMA8), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
            "--concurrency", "2", "--draft", "mtp", "--acceptance", "0.7"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "llama3_1_8b.arch:3:7: error: --draft mtp: model 'llama3_1_8b' has no " \
           "multi-token-prediction layers" in err
    assert "Traceback" not in err


def test_mtp_with_pipeline_stages_is_refused(capsys, dsv3: Path) -> None:
    argv = ["serve", str(dsv3), "--hw", "h200_sxm", "--isl", "128", "--osl", "16",
            "--concurrency", "2", "--set", "pp=8", "--draft", "mtp", "--acceptance", "0.7"]
    assert main(argv) == 1
    assert "--draft mtp with pp > 1" in capsys.readouterr().err


def test_held_layers_call_no_collectives(dsv3: Path, tmp_path: Path) -> None:
    """Held weights run in no step, so their collectives are never called: at tp = 8 the
    target with its MTP layer held steps exactly as the spec without it, and the draft
    (the main layers held) calls only its own."""
    at = {"B": 1, "N": 2048, "tp": 8, "ep": 4}
    plain = tmp_path / "plain.arch"
    plain.write_text(dsv3.read_text().split("  draft = held(x)")[0] + "}\n")
    held, run = (analyze(p, hw="h200_sxm").evaluate(at)["step"] for p in (dsv3, plain))
    for key in ("collectives", "t_comm_s", "time_s", "estimate_s"):
        assert held[key] == run[key], key
    draft = analyze(dsv3, hw="h200_sxm", draft="mtp").evaluate(at)["step"]
    # The embedding's all-reduce, the MTP layer's attention all-reduce, its experts'
    # dispatch, combine and all-gather (ep = 4 inside tp = 8), its shared expert's
    # all-reduce, the LM head's all-gather: 1 + 1 + 3 + 1 + 1 = 7.
    assert draft["collectives"] == 7
