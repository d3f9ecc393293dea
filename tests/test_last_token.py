"""Logits for the last token only (issue #10, item 3), and chunked prefill as a decode
step with T new tokens on N cached. Llama 3.1 8B: hidden D = 4096, vocab V = 128256,
32 layers, 32 q heads, 8 kv heads, head_dim 128; H100: 989 TFLOP/s bf16, 3.35 TB/s."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze

ROOT = Path(__file__).parents[1]
LLAMA = ROOT / "specs" / "models" / "llama3_1_8b.arch"
D, V, LAYERS, HQ, HKV, HD = 4096, 128256, 32, 32, 8, 128


def _head(result: dict) -> dict:
    return next(op for op in result["ops"] if op["name"] == "logits")


def _share(result: dict) -> float:
    head = _head(result)
    return head["count"] * head["time_s"] / result["step"]["time_s"]


@pytest.fixture(scope="module")
def prefill_512() -> dict:
    return analyze(LLAMA, hw="h100_sxm", phase="prefill").evaluate({"B": 1, "N": 512})


def test_prefill_lm_head_is_one_token(prefill_512: dict) -> None:
    head = _head(prefill_512)
    # One token per sequence: 2 * B * D * V = 2 * 1 * 4096 * 128256 = 1,050,673,152 FLOPs,
    # not 2 * 512 * 4096 * 128256 = 537,944,653,824 for the whole prompt.
    assert head["flops"] == 2 * 1 * 4096 * 128256 == 1_050_673_152
    # It still reads its whole weight: 4096 * 128256 * 2 bytes = 1,050,673,152 bytes, so it
    # is weight bound: 1.0507e9 / 3.35e12 = 313.6 us.
    assert head["weight_bytes"] == D * V * 2
    assert head["bound"] == "weights"
    assert head["time_s"] == pytest.approx(head["bytes"] / 3.35e12, rel=1e-12)


def test_prefill_lm_head_share_before_and_after(prefill_512: dict, tmp_path: Path) -> None:
    # Before (every prompt token through the head): 5.379e11 FLOPs / 989e12 = 543.9 us of
    # a ~9.2 ms compute-bound step (the rest: 2 * 6.98e9 non-embedding matmul params x 512
    # tokens = 7.15e12 FLOPs + 6.9e10 attention = ~7.2 ms, plus launches), ~6% of the step.
    # After: 313.6 us (weight bound) of ~8.6 ms, ~3.6%.
    old = tmp_path / "all_tokens.arch"
    old.write_text(LLAMA.read_text().replace(", last_token=1", ""))
    before = analyze(old, hw="h100_sxm", phase="prefill").evaluate({"B": 1, "N": 512})
    assert _head(before)["flops"] == 2 * 512 * 4096 * 128256 == 537_944_653_824
    assert _head(before)["time_s"] == pytest.approx(537_944_653_824 / 989e12, rel=1e-12)
    assert 0.055 < _share(before) < 0.065
    assert 0.033 < _share(prefill_512) < 0.040
    saved = before["step"]["flops"] - prefill_512["step"]["flops"]
    assert saved == 2 * 511 * 4096 * 128256  # 511 tokens no longer multiplied


def test_decode_head_is_unchanged_at_one_token() -> None:
    r = analyze(LLAMA, hw="h100_sxm").evaluate({"B": 8, "N": 4096})
    assert _head(r)["flops"] == 2 * 8 * D * V  # T = 1: one token a sequence either way


@pytest.fixture(scope="module")
def chunk() -> dict:
    # Chunked prefill: a decode step with T = 512 new tokens on N = 4096 cached ones.
    return analyze(LLAMA, hw="h100_sxm").evaluate({"B": 1, "N": 4096, "T": 512})


def test_chunked_prefill_attention(chunk: dict) -> None:
    att = next(op for op in chunk["ops"] if op["kind"] == "attention")
    assert att["count"] == LAYERS
    # Each of the 512 new tokens sees the 4096 cached keys plus on average (512+1)/2 of
    # the new ones (causal): 4 * T * HQ * HD * (N + (T+1)/2) per layer
    # = 4 * 512 * 32 * 128 * 4352.5 = 36,511,416,320 FLOPs.
    assert att["flops"] == 4 * 512 * 32 * 128 * 4352.5 == 36_511_416_320
    # KV per token per layer: K and V, 8 heads x 128 x 2 bytes = 4096 bytes; the step reads
    # the 4096 cached tokens and writes the 512 new: (4096 + 512) * 4096 = 18,874,368 bytes.
    assert att["kv_bytes"] == (4096 + 512) * 2 * HKV * HD * 2 == 18_874_368
    # The head samples once per sequence at the chunk's end: 2 * 4096 * 128256.
    assert _head(chunk)["flops"] == 2 * D * V
    # Memory holds N + T = 4608 tokens: 4608 x 131,072 bytes (32 layers x 4096).
    assert chunk["memory"]["kv_bytes"] == 4608 * 131_072


def test_vocab_parallel_head_gathers_one_row_per_sequence() -> None:
    r = analyze(LLAMA, hw="h100_sxm", phase="prefill").evaluate({"B": 2, "N": 512, "tp": 2})
    gather = next(op for op in r["ops"] if op["name"] == "logits.all_gather")
    # B = 2 rows of V = 128256 bf16 logits: 2 * 128256 * 2 = 513,024 bytes, not x 512
    assert gather["bytes"] == 2 * V * 2 == 513_024
    # each GPU multiplies its half of the vocabulary for the 2 last tokens
    assert _head(r)["flops"] == 2 * 2 * D * V / 2
