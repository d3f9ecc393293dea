"""The Done-means check for routed experts: Qwen3-30B-A3B decode on GH200 against a
roofline worked out by hand, and the weight bytes a step reads as the batch grows.

    infest eval specs/models/qwen3_30b_a3b.arch --hw gh200 --set B=1 --set N=4096

Model (Qwen/Qwen3-30B-A3B config.json): hidden d = 2048, 48 layers, 32 q heads and 4 kv
heads of head_dim 128 (q is 32*128 = 4096 wide, k and v 4*128 = 512), QK-norm, 128
experts top-8 of ffn 768, vocab 151936, untied head, bf16 (2 bytes) throughout.
GH200: 4.0 TB/s HBM, 989 TFLOP/s bf16, 4 us launch floor per kernel.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.exports.cli.main import main

SPEC = Path(__file__).parents[1] / "specs" / "models" / "qwen3_30b_a3b.arch"
D, LAYERS, Q, KV, HD, E, K, FFN, VOCAB = 2048, 48, 4096, 512, 128, 128, 8, 768, 151936
N = 4096
BW, PEAK, LAUNCH = 4.0e12, 989e12, 4e-6

# One decode step at B = 1, T = 1: one token. Each row is one op instance:
# (name, FLOPs, bytes = weights + activations in/out + KV, kernels). bf16: 2 bytes.
KEYS = N + 1  # keys per query: N cached + (T + 1) / 2 = 1 for the token itself
LAYER = [
    ("h", 4 * D, 2 * 2 * D + 2 * D, 1),                         # rmsnorm: 4 FLOP/elt; x in+out; d weights
    ("q", 2 * D * Q, 2 * D * Q + 2 * (D + Q), 1),               # 16,777,216 weight bytes
    ("k", 2 * D * KV, 2 * D * KV + 2 * (D + KV), 1),            # 2,097,152 weight bytes
    ("v", 2 * D * KV, 2 * D * KV + 2 * (D + KV), 1),
    ("q#2", 4 * Q, 2 * 2 * Q + 2 * HD, 1),                      # QK-norm: head_dim weights
    ("k#2", 4 * KV, 2 * 2 * KV + 2 * HD, 1),
    ("a", 4 * 32 * HD * KEYS,                                   # QK^T + PV over 4097 keys
     2 * (2 * Q + 2 * KV)                                       # q, k, v in; out
     + 2 * KV * 2 * N + 2 * KV * 2, 1),                         # read N cached K,V (2,048 B per
                                                                # token), write 1: 8,390,656
    ("o", 2 * Q * D, 2 * Q * D + 2 * (Q + D), 1),
    ("x#2", D, 3 * 2 * D, 1),                                   # residual add
    ("h#2", 4 * D, 2 * 2 * D + 2 * D, 1),
    ("r", 2 * D * E, 2 * D * E + 2 * (D + E), 2),               # router: GEMV + top-k kernel
    # Experts: at B = 1 the token reaches top_k = 8 experts, so 8 experts' weights are
    # read and 8x one expert's FLOPs are done: 3 * 2048 * 768 * 2 bytes = 9,437,184 per
    # expert, 8 touched = 75,497,472 bytes per layer.
    ("g", K * 2 * D * FFN, K * 2 * D * FFN + K * 2 * (D + FFN), 1),
    ("u", K * 2 * D * FFN, K * 2 * D * FFN + K * 2 * (D + FFN), 1),
    ("d.silu_mul", K * 5 * FFN, K * 3 * 2 * FFN, 1),            # silu(g) * u in each expert
    ("d", K * 2 * FFN * D, K * 2 * FFN * D + K * 2 * (FFN + D), 1),
    ("m", K * D, 2 * 2 * K * D, 1),                             # scatter/combine 8 copies of x
    ("x#3", D, 3 * 2 * D, 1),
]
TOP = [("x", 0, 2 * D + 2 * D, 1)]                              # embed: gather 1 row, write it
TAIL = [("logits.rmsnorm", 4 * D, 2 * 2 * D + 2 * D, 1),
        ("logits", 2 * D * VOCAB, 2 * D * VOCAB + 2 * (D + VOCAB), 1)]  # 622,329,856 weights

# Per layer: experts g, u, d 3 * 25,210,880 = 75,632,640; q and o 2 * 16,789,504;
# attention 8,409,088 (8,390,656 of it KV); k, v 2 * 2,102,272; router 528,640; moe
# combine 65,536; silu_mul 36,864; two norms and two adds 4 * 12,288; QK-norm 16,640 +
# 2,304. Sum: 122,524,416.
PER_LAYER_BYTES = sum(row[2] for row in LAYER)
HEAD_BYTES = TAIL[1][2]                         # 622,329,856 + 307,968 = 622,637,824


def op_time(flops: int, nbytes: int, kernels: int) -> float:
    """One instance's lower bound: max(FLOPs / peak, bytes / bandwidth, kernels * launch)."""
    return max(flops / PEAK, nbytes / BW, kernels * LAUNCH)


def hand_step() -> dict[str, float]:
    """Step totals from the table: time with and without the launch floor."""
    rows = [(r, 1) for r in TOP + TAIL] + [(r, LAYERS) for r in LAYER]
    return {"time_s": sum(c * op_time(f, b, k) for (_, f, b, k), c in rows),
            "roofline_s": sum(c * max(f / PEAK, b / BW) for (_, f, b, _), c in rows),
            "bytes": sum(c * b for (_, _, b, _), c in rows),
            "flops": sum(c * f for (_, f, _, _), c in rows),
            "kernels": sum(c * k for (_, _, _, k), c in rows)}


@pytest.fixture(scope="module")
def result() -> dict:
    """The CLI's own answer: `infest eval ... --hw gh200 --set B=1 --set N=4096 --json`."""
    return _eval_json(["eval", str(SPEC), "--hw", "gh200", "--set", "B=1", "--set",
                       "N=4096", "--json"])


def _eval_json(argv: list[str]) -> dict:
    """Run the CLI and parse the JSON it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


def test_per_layer_bytes(result: dict) -> None:
    ops = {op["name"]: op for op in result["ops"]}
    for name, flops, nbytes, kernels in LAYER:
        assert ops[name]["count"] == LAYERS, name
        assert ops[name]["flops"] == flops, name
        assert ops[name]["bytes"] == nbytes, name
        assert ops[name]["kernels"] == kernels, name
    layer = sum(op["bytes"] for op in result["ops"] if op["count"] == LAYERS)
    assert layer == PER_LAYER_BYTES == 122_524_416


def test_lm_head_bytes(result: dict) -> None:
    head = next(op for op in result["ops"] if op["name"] == "logits")
    assert head["bytes"] == HEAD_BYTES == 622_637_824
    assert head["time_s"] == pytest.approx(HEAD_BYTES / BW, rel=1e-12)  # 156 us: weights


def test_step_bound(result: dict) -> None:
    s, hand = result["step"], hand_step()
    assert s["bytes"] == hand["bytes"]
    assert s["flops"] == hand["flops"]
    assert s["kernels"] == hand["kernels"] == 3 + LAYERS * 18  # 867
    assert s["roofline_s"] == pytest.approx(hand["roofline_s"], rel=1e-12)
    assert s["time_s"] == pytest.approx(hand["time_s"], rel=1e-12)
    # 867 launches * 4 us = 3.47 ms outweigh the weights, 6.08 GB / 4 TB/s = 1.52 ms:
    # at batch 1 this MoE is launch bound.
    assert s["t_launch_s"] == pytest.approx(867 * LAUNCH, rel=1e-12)
    assert s["bound"] == "launch"


# ---- weight bytes per step as the batch grows ----------------------------------------------

EXPERT_BYTES = 3 * D * FFN * 2  # 9,437,184: one expert's gate, up and down in bf16


def touched(b: int) -> float:
    """Expected distinct experts hit by b tokens routed uniformly to top-8 of 128."""
    return E * (1 - (1 - K / E) ** b)


def weight_bytes(b: int) -> float:
    """Weights one decode step reads at batch b (T = 1), from the table's parts."""
    per_layer = (2 * 2 * D + 2 * 2 * HD                      # two norms, QK-norm vectors
                 + 2 * (D * Q + 2 * D * KV + Q * D)         # q, k, v, o
                 + 2 * D * E                                # router
                 + touched(b) * EXPERT_BYTES)               # the experts the batch reaches
    return b * 2 * D + LAYERS * per_layer + 2 * D + 2 * D * VOCAB  # embed rows, final norm, head


@pytest.mark.parametrize("b, experts", [(1, 8.0), (8, 51.62), (64, 125.94), (1024, 128.0)])
def test_weight_bytes_grow_toward_all_experts(b: int, experts: float) -> None:
    # touched = 128 * (1 - (15/16)^b); (15/16)^8 = 0.5967 -> 51.62; (15/16)^64 = 0.01608
    # -> 125.94; (15/16)^1024 ~ 1.6e-29 -> 128: every expert of every layer is read.
    assert touched(b) == pytest.approx(experts, abs=0.01)
    r = analyze(SPEC, hw="gh200").evaluate({"B": b, "N": 4096})
    assert r["step"]["weight_bytes"] == pytest.approx(weight_bytes(b), rel=1e-12)


def test_large_batch_reads_every_expert() -> None:
    r = analyze(SPEC, hw="gh200").evaluate({"B": 1024, "N": 4096})
    experts = LAYERS * E * EXPERT_BYTES  # all 128 experts in all 48 layers: 57,982,058,496
    dense = weight_bytes(1024) - LAYERS * touched(1024) * EXPERT_BYTES
    assert r["step"]["weight_bytes"] == pytest.approx(dense + experts, rel=1e-12)
