"""What an engine gives its KV cache: mem_fraction (vLLM's --gpu-memory-utilization, SGLang's
--mem-fraction-static), kv_free_fraction (TensorRT-LLM's free_gpu_memory_fraction) and
mem_reserve (the bytes it keeps for its own buffers), in memory.engine_max_batch and serve's
admission; memory.max_batch keeps the whole memory.

Llama 3.1 8B on one H100 SXM, by hand (tests/test_capacity.py's derivation): capacity
81,559 MiB = 85,520,809,984 B, held weights 16,060,522,496 B, KV 131,072 B a token.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.dsl.human import duration
from infest.exports.cli.main import main

LLAMA8 = str(Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch")
EVAL = ["eval", LLAMA8, "--hw", "h100_sxm", "--set", "N=4096", "--json"]


def _memory(capsys, *args: str) -> dict:
    assert main(EVAL + list(args)) == 0
    return json.loads(capsys.readouterr().out)["memory"]


# One sequence at N = 4096, T = 1: 4,097 x 131,072 = 537,001,984 B.
@pytest.mark.parametrize("sets,want", [
    ((), 129),   # 69,460,287,488 / 537,001,984 = 129.35: the whole room, as max_batch
    (("mem_fraction=0.9",), 113),   # (76,968,728,985.6 - 16,060,522,496) / 537,001,984 = 113.42
    (("kv_free_fraction=0.9",), 116),   # 0.9 x 69,460,287,488 / 537,001,984 = 116.41
    (("mem_fraction=0.9", "kv_free_fraction=0.9"), 102),   # 0.9 x 60,908,206,489.6 -> 102.08
    (("mem_fraction=0.1",), 0),     # 8.55 GB < 16.06 GB of weights: no room at all
    (("mem_reserve=4GB",), 121),    # (69,460,287,488 - 4e9) / 537,001,984 = 121.90
    # The reserve inside the share: (76,968,728,985.6 - 16,060,522,496 - 4e9) = 56,908,206,489.6
    # / 537,001,984 = 105.97; TensorRT-style, 0.9 x 65,460,287,488 / 537,001,984 = 109.71.
    (("mem_fraction=0.9", "mem_reserve=4GB"), 105),
    (("kv_free_fraction=0.9", "mem_reserve=4GB"), 109),
    (("mem_reserve=70GB",), 0),     # 70 GB > the 69.46 GB beside the weights: no room
])
def test_the_engines_share_of_memory_sets_its_batch_not_the_bound(capsys, sets, want) -> None:
    memory = _memory(capsys, *[a for s in sets for a in ("--set", s)])
    assert memory["engine_max_batch"] == want
    assert memory["max_batch"] == 129       # the bound: the whole memory, whatever the engine


@pytest.mark.parametrize("engine,want,said", [
    ("vllm", 113, "mem_fraction 0.9"),        # specs/engines/vllm.json: vLLM's default 0.9
    ("trtllm", 116, "kv_free_fraction 0.9"),  # specs/engines/trtllm.json: 0.9 of free memory
])
def test_engine_profiles_carry_their_defaults_and_the_report_names_them(capsys, engine, want,
                                                                        said) -> None:
    assert _memory(capsys, "--engine", engine)["engine_max_batch"] == want
    assert main(EVAL[:-1] + ["--engine", engine]) == 0
    text = capsys.readouterr().out
    assert f"engine's KV cache holds (estimate: {said})" in text
    assert main(EVAL[:-1]) == 0
    assert "engine's KV cache holds" not in capsys.readouterr().out   # both 1: nothing to add


def test_serve_admits_what_the_engines_share_holds() -> None:
    # ISL 16,000 + OSL 4,000 - 1 = 19,999 tokens x 131,072 B = 2,621,308,928 B a request.
    # mem_fraction 0.8: (68,416,647,987.2 - 16,060,522,496) / 2,621,308,928 = 19.97 -> 19
    # run of 104 (the whole memory holds 26: tests/test_serve.py).
    decode = analyze(LLAMA8, hw="h100_sxm")
    h100 = Serving(decode, analyze(LLAMA8, hw="h100_sxm", phase="prefill"))
    got = serve(h100, Request(16000, 4000, 104), {"mem_fraction": 0.8})
    run = serve(h100, Request(16000, 4000, 19), {"mem_fraction": 0.8})
    a = got["admission"]
    assert (a["cap_per_rank"], a["admitted_per_scheduler"]) == (19, 19)
    assert (a["mem_fraction"], a["kv_free_fraction"]) == (0.8, 1.0)   # the shares it was taken at
    # Little's law as with the whole memory: each request first waits 104 / 19 - 1 E2Es.
    assert got["ttft_s"] == pytest.approx(run["ttft_s"] + (104 / 19 - 1) * run["e2e_s"], rel=1e-12)


def test_serve_says_which_memory_its_admission_took(capsys) -> None:
    # --engine vllm: 0.9 x 85,520,809,984 - 16,060,522,496 = 60,908,206,489.6 B over
    # 2,621,308,928 B a request = 23.24 -> 23 of the 104 clients run.
    args = ["serve", LLAMA8, "--hw", "h100_sxm", "--isl", "16000", "--osl", "4000",
            "--concurrency", "104", "--engine", "vllm"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "the KV cache holds 23 requests per rank at ISL + OSL - 1 tokens (the engine's " \
        "memory: mem_fraction 0.9), so 23 of a scheduler's 104 clients run" in out
    # 81 of 104 wait (104 / 23 - 1 = 3.52 E2Es of ~6 min): in whole seconds, not 1.29e+03 s.
    assert re.search(r"wait for one to leave: \d,\d{3} s of the estimate's TTFT", out)


def test_a_reserve_is_named_in_bytes_and_taken_at_admission(capsys) -> None:
    # --engine vllm and 4 GB kept back: 105 run (above); the report and serve's admission
    # line say the reserve in both units, 4e9 / 2^30 = 3.73 GiB. At ISL 16,000 + OSL 4,000:
    # 56,908,206,489.6 / 2,621,308,928 = 21.71 -> 21 of the 104 clients.
    assert main(EVAL[:-1] + ["--engine", "vllm", "--set", "mem_reserve=4GB"]) == 0
    said = "mem_fraction 0.9, mem_reserve 4 GB (3.73 GiB)"
    assert f"engine's KV cache holds (estimate: {said})" in capsys.readouterr().out
    args = ["serve", LLAMA8, "--hw", "h100_sxm", "--isl", "16000", "--osl", "4000",
            "--concurrency", "104", "--engine", "vllm", "--set", "mem_reserve=4GB", "--json"]
    assert main(args) == 0
    a = json.loads(capsys.readouterr().out)["admission"]
    assert (a["cap_per_rank"], a["mem_reserve"], a["mem_fraction"]) == (21, 4e9, 0.9)
    assert main(args[:-1]) == 0
    assert f"(the engine's memory: {said}), so 21 of a scheduler's 104" in capsys.readouterr().out


def test_vllms_own_memory_profile_is_reproduced(capsys) -> None:
    # A real vLLM start-up log (vllm-project/vllm pull request #10511, youkaichao,
    # 2024-12-13, `vllm serve meta-llama/Meta-Llama-3-8B` on an 80 GB GPU):
    #   total_gpu_memory 79.22GiB, gpu_memory_utilization 0.90, the current vLLM instance
    #   can use 71.29GiB, model weights take 14.96GiB, non_torch_memory 1.79GiB,
    #   PyTorch activation peak memory 1.26GiB, available_kv_cache_memory 53.29GiB
    # (and with -tp 2: model weights take 7.48GiB). Llama 3 8B has Llama 3.1 8B's shapes.
    # The weights: 16,060,522,496 B = 14.9575 GiB -> "14.96"; tp 2: 8,030,527,488 B =
    # 7.4790 GiB -> "7.48" (embeddings and lm_head split too).
    gib = 2**30
    assert round(_memory(capsys)["weights_bytes_per_gpu"] / gib, 2) == 14.96
    assert round(_memory(capsys, "--set", "tp=2")["weights_bytes_per_gpu"] / gib, 2) == 7.48
    # The KV room with the log's capacity (torch's total, 79.22 GiB = 85,061,827,297.28 B)
    # and its non-torch + activation memory as the reserve (3.05 GiB = 3,274,912,563.2 B):
    # 0.9 x 85,061,827,297.28 - 16,060,522,496 - 3,274,912,563.2 = 57,220,209,508.4 B =
    # 53.2905 GiB, the log's 53.29. At N = 4096 that holds 57,220,209,508.4 / 537,001,984 =
    # 106.55 sequences, as the log's 53.29 GiB (57,219,701,800.96 B) does: 106.
    memory = _memory(capsys, "--engine", "vllm", "--set", "mem_capacity=79.22GiB",
                     "--set", "mem_reserve=3.05GiB")
    assert memory["engine_max_batch"] == 106
    # max_batch, the bound, keeps the whole memory: (85,061,827,297.28 - 16,060,522,496) /
    # 537,001,984 = 128.49 -> 128.
    assert memory["max_batch"] == 128


def test_a_negative_reserve_is_refused(capsys) -> None:
    assert main(EVAL + ["--set", "mem_reserve=-1GB"]) == 1
    assert "--set mem_reserve: the value must be 0 or more" in capsys.readouterr().err


def test_durations_past_1000_s_print_whole_seconds() -> None:
    assert (duration(1290.4), duration(999.4), duration(0.0123)) == ("1,290 s", "999 s", "12.3 ms")


def test_a_share_outside_0_1_is_refused_with_what_it_means(capsys) -> None:
    assert main(EVAL + ["--set", "mem_fraction=1.5"]) == 1
    err = capsys.readouterr().err
    assert "--set mem_fraction: the value must be in (0, 1]" in err
    assert "gpu-memory-utilization" in err       # the hint says what the field is
