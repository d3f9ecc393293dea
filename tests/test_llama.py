"""Llama 3.1 8B decode on H100, against numbers derived by hand from the public config
(hidden 4096, 32 layers, 32 q heads, 8 kv heads, head_dim 128, ffn 14336, vocab 128256,
bf16 = 2 bytes) and the H100 datasheet (3.35 TB/s, 989 TFLOP/s bf16, 80 GB)."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze

SPEC = Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch"
D, LAYERS, HQ, HKV, HD, FFN, VOCAB = 4096, 32, 32, 8, 128, 14336, 128256

# Params per group
EMBED = VOCAB * D                                    # 525,336,576
ATTN = LAYERS * (D * HQ * HD + 2 * D * HKV * HD + HQ * HD * D)  # q + k,v + o = 1,342,177,280
MLP = LAYERS * 3 * D * FFN                           # gate, up, down = 5,637,144,576
NORMS = LAYERS * 2 * D                               # two rmsnorm vectors per layer = 262,144
HEAD = VOCAB * D + D                                 # untied LM head + final norm (its group)
TOTAL = EMBED + ATTN + MLP + NORMS + HEAD            # 8,030,261,248 (publisher: 8.03B)
KV_PER_TOKEN = 2 * LAYERS * HKV * HD * 2             # K and V, bf16 = 131,072 bytes


@pytest.fixture(scope="module")
def result() -> dict:
    return analyze(SPEC, hw="h100_sxm").evaluate({"B": 1, "N": 4096})


def test_params_per_group_and_total(result: dict) -> None:
    groups = result["params"]["groups"]
    assert groups == {"embedding": EMBED, "attention": ATTN, "mlp": MLP, "norm": NORMS,
                      "lm_head": HEAD}
    assert result["params"]["total"] == TOTAL == 8_030_261_248
    assert result["params"]["active"] == TOTAL  # dense
    assert abs(TOTAL / 8.03e9 - 1) < 0.005  # the publisher's stated total


def test_memory(result: dict) -> None:
    m = result["memory"]
    assert m["weights_bytes"] == 2 * TOTAL == 16_060_522_496
    assert m["kv_bytes_per_token"] == KV_PER_TOKEN == 131_072
    assert m["kv_bytes"] == KV_PER_TOKEN * (4096 + 1)          # B=1 holds N + T tokens
    assert m["total_bytes"] == 2 * TOTAL + KV_PER_TOKEN * 4097
    # capacity: the H100's 81,559 MiB (nvidia-smi) = 85,520,809,984 bytes
    assert m["capacity_bytes"] == 81559 * 2**20 == 85_520_809_984 and m["fits"] is True
    # max batch: floor((85,520,809,984 - 16,060,522,496) / (131,072 * 4097))
    # = floor(69,460,287,488 / 537,001,984) = floor(129.35) = 129
    assert m["max_batch"] == (85_520_809_984 - 2 * TOTAL) // (KV_PER_TOKEN * 4097) == 129
    # max context at B=1: memory allows floor(69,460,287,488 / 131,072) - T
    # = 529,939 - 1, the trained context (131,072 tokens) only 131,072 - T
    assert (85_520_809_984 - 2 * TOTAL) // KV_PER_TOKEN - 1 == 529_938
    assert m["max_context"] == 131_072 - 1


def test_flops_per_decoded_token(result: dict) -> None:
    linear = 2 * (ATTN + MLP + VOCAB * D)            # 2 FLOPs per weight: 15,009,316,864
    attention = 4 * LAYERS * HQ * HD * (4096 + 1)     # QK^T + PV over N cached + itself
    norms = 4 * D * (2 * LAYERS + 1)                  # 4 FLOPs per element, 65 norms
    silu_mul = 5 * FFN * LAYERS
    adds = D * 2 * LAYERS
    assert result["step"]["flops"] == linear + attention + norms + silu_mul + adds
    assert result["step"]["flops"] == 17_160_945_664


def test_decode_step_bytes(result: dict) -> None:
    s = result["step"]
    weights = 2 * (TOTAL - EMBED) + 2 * D            # all but the table, plus 1 gathered row
    kv = KV_PER_TOKEN * 4096 + KV_PER_TOKEN           # read N cached tokens, write 1
    per_layer_act = 2 * (2 * 2 * D + 2 * (D + HKV * HD) + (2 * D + 2 * HKV * HD)  # q,o; k,v; attn
                         + 2 * 3 * D + 3 * (D + FFN) + 3 * FFN)              # 2 adds; g,u,d; silu
    act = LAYERS * per_layer_act + 65 * 2 * 2 * D + 2 * D + 2 * (D + VOCAB)  # norms, embed, head
    assert s["weight_bytes"] == weights == 15_009_857_536
    assert s["kv_bytes"] == kv == 537_001_984
    assert s["act_bytes"] == act
    assert s["bytes"] == weights + kv + act


def test_time_bounds_and_bound(result: dict) -> None:
    s = result["step"]
    assert s["t_memory_s"] == pytest.approx(s["bytes"] / 3.35e12, rel=1e-12)
    assert s["t_compute_s"] == pytest.approx(s["flops"] / 989e12, rel=1e-12)
    kernels = LAYERS * 13 + 3                         # 13 per layer + embed, final norm, head
    assert s["kernels"] == kernels == 419
    assert s["t_launch_s"] == pytest.approx(kernels * 4e-6, rel=1e-12)
    assert s["bound"] == "weights"                    # 4.5 ms of weights vs 1.7 ms of launches
    # Each op takes at least its memory time, so the sum sits above bytes/W...
    assert s["roofline_s"] >= s["t_memory_s"] * (1 - 1e-12)
    # ...and the one-line check (every non-embedding weight read once) agrees within 20%.
    floor = 2 * (TOTAL - EMBED) / 3.35e12
    assert s["weights_floor_s"] == pytest.approx(floor, rel=1e-12)
    assert s["roofline_s"] == pytest.approx(floor, rel=0.2)
    assert s["tokens_per_s"] == pytest.approx(1 / s["roofline_s"], rel=1e-12)  # hard bound


def test_prefill_is_compute_heavy_and_causal() -> None:
    a = analyze(SPEC, hw="h100_sxm", phase="prefill")
    r = a.evaluate({"B": 1, "N": 2048})
    # T = N = 2048 prompt tokens, empty cache: causal attention sees (T+1)/2 keys on average;
    # the LM head runs on the last token only (last_token=1): 2 * D * VOCAB once.
    linear = 2 * (ATTN + MLP) * 2048 + 2 * VOCAB * D
    attention = 4 * LAYERS * HQ * HD * 2048 * (2048 + 1) // 2
    assert r["step"]["flops"] == linear + attention + 2048 * (4 * D * 65 + 5 * FFN * LAYERS
                                                              + D * 2 * LAYERS)
    assert r["step"]["kv_bytes"] == KV_PER_TOKEN * 2048  # written, nothing cached to read
    assert r["step"]["bound"] == "compute"
    assert "T" not in r["inputs"]
