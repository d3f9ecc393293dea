"""Capacity answers for Llama 3.1 8B on H100, every expected number derived by hand."""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.capacity import capacity, crossings, X
from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")

# Hand derivation from specs/models/llama3_1_8b.arch and docs/physics.md (bf16 = 2 bytes):
#   per layer params: q, o 4096*4096 = 16,777,216 each; k, v 4096*1024 = 4,194,304 each;
#     gate/up/down 3*4096*14336 = 176,160,768; two rmsnorms 2*4096 = 8,192
#     -> 218,112,000; x 32 layers = 6,979,584,000
#   + final norm 4,096 + LM head 4096*128256 = 525,336,576 -> 7,504,924,672 params
#   step weight bytes = 2 * 7,504,924,672 = 15,009,849,344, plus the embedding gather:
#     B*T rows of 4096 bf16 = 8,192*B bytes (T = 1)
#   held weights add the embedding table 128256*4096*2 = 1,050,673,152 -> 16,060,522,496
#   KV per token: 2 (K, V) * 32 layers * 8 kv heads * 128 * 2 bytes = 131,072
#   step KV bytes (decode): read B*N cached tokens, write B*T new ones = 131,072*B*(N+1)
STEP_WEIGHTS = 15_009_849_344
GATHER_PER_SEQ = 8_192
HELD_WEIGHTS = 16_060_522_496
KV_TOKEN = 131_072
MEM_BW = Fraction(335, 100) * 10**12
PEAK = 989 * 10**12
CAPACITY = 81559 * 2**20   # the H100's 81,559 MiB (nvidia-smi) = 85,520,809,984 bytes


@pytest.fixture(scope="module")
def llama():
    return analyze(LLAMA, hw="h100_sxm")


def test_hand_numbers_are_consistent() -> None:
    assert 2 * (32 * 218_112_000 + 4096 + 525_336_576) == STEP_WEIGHTS
    assert STEP_WEIGHTS + 128256 * 4096 * 2 == HELD_WEIGHTS
    assert 2 * 32 * 8 * 128 * 2 == KV_TOKEN


def test_max_batch_and_context(llama) -> None:
    cap = capacity(llama, {})  # B = 1, N = 4096, T = 1
    room = CAPACITY - HELD_WEIGHTS                      # 69,460,287,488 bytes
    # 69,460,287,488 / (131,072 * 4097 = 537,001,984) = 129.35 -> 129
    assert cap["max_batch"] == room // (KV_TOKEN * 4097) == 129
    # at B = 1 memory allows N + T <= room / KV_TOKEN = 529,939.9 -> N <= 529,938, but the
    # trained context (131072 tokens) caps it first: N <= 131072 - T = 131,071
    assert room // KV_TOKEN - 1 == 529_938
    assert cap["max_context"] == 131_072 - 1


@pytest.mark.parametrize("mem, gpus", [
    (80 * 10**9, 1),
    (8 * 10**9, 3),               # 16,060,522,496 / 8e9 = 2.008 -> 3
    (HELD_WEIGHTS, 1),            # exactly full: no float edge
    (HELD_WEIGHTS - 1, 2),
])
def test_gpus_to_hold_weights(llama, mem: int, gpus: int) -> None:
    assert capacity(llama, {"mem_capacity": mem})["gpus_to_hold_weights"] == gpus


def test_weights_to_kv_crossover_at_4096(llama) -> None:
    # weights term = (15,009,849,344 + 8,192 B) / W; KV term = 131,072 B (4096+1) / W:
    #   B* = 15,009,849,344 / (131,072 * 4097 - 8,192) = 15,009,849,344 / 536,993,792
    #      = 27.95; launch = 419 kernels * 4 us = 1.68 ms stays below weights (4.48 ms);
    #   compute per sequence ~17.2 GFLOP / 989 TFLOP/s = 17 us < KV's 160 us, so it never binds.
    b_star = Fraction(STEP_WEIGHTS, KV_TOKEN * 4097 - GATHER_PER_SEQ)
    (t,) = capacity(llama, {"N": 4096})["bound_transitions"]
    assert (t["from"], t["to"]) == ("weights", "kv")
    assert t["batch"] == pytest.approx(float(b_star), rel=1e-12)
    assert t["first_batch"] == math.ceil(b_star) == 28 and t["fits"] is True
    assert llama.evaluate({"B": 27, "N": 4096})["step"]["bound"] == "weights"
    assert llama.evaluate({"B": 28, "N": 4096})["step"]["bound"] == "kv"


def test_weights_to_compute_crossover_at_128(llama) -> None:
    # FLOPs per token at N = 128 (T = 1):
    #   matmuls 2 * (32*218,103,808 + 525,336,576) = 15,009,316,864
    #   attention 4 * 32 layers * 4096 * (N + (T+1)/2) = 524,288 * 129 = 67,633,152
    #   silu_mul 5/elem * 14336 * 32 = 2,293,760; two norms (4/elem) + two adds (1/elem)
    #   per layer 10 * 4096 * 32 = 1,310,720; final norm 4 * 4096 = 16,384
    flops = 15_009_316_864 + 67_633_152 + 2_293_760 + 1_310_720 + 16_384
    assert flops == 15_080_570_880
    # compute = weights:  B * flops / P = (15,009,849,344 + 8,192 B) / W
    b_star = Fraction(STEP_WEIGHTS) / (Fraction(flops) * MEM_BW / PEAK - GATHER_PER_SEQ)
    # KV at N = 128 is 131,072 * 129 = 16.9 MB per sequence: it would pass weights only at
    # B ~ 888, and by then compute (15.2 us per sequence) is above KV (5.0 us): no kv phase.
    (t,) = capacity(llama, {"N": 128})["bound_transitions"]
    assert (t["from"], t["to"]) == ("weights", "compute")
    assert t["batch"] == pytest.approx(float(b_star), rel=1e-12)   # 293.89
    assert t["first_batch"] == math.ceil(b_star) == 294


def test_kv_overtakes_weights_in_context(llama) -> None:
    # At B = 1: 131,072 (N + 1) = 15,009,849,344 + 8,192 -> N + 1 = 114,516.125
    n_star = Fraction(STEP_WEIGHTS + GATHER_PER_SEQ, KV_TOKEN) - 1
    kv = capacity(llama, {"B": 1})["kv_overtakes_weights"]
    assert kv["context"] == pytest.approx(float(n_star), rel=1e-12)
    assert kv["first_context"] == 114_516
    # At B = 8 the gather adds 8 rows: 131,072 * 8 (N + 1) = 15,009,849,344 + 65,536
    n8 = Fraction(STEP_WEIGHTS + 8 * GATHER_PER_SEQ, KV_TOKEN * 8) - 1
    assert capacity(llama, {"B": 8})["kv_overtakes_weights"]["context"] == \
        pytest.approx(float(n8), rel=1e-12)


def test_prefill_capacity_runs() -> None:
    # Prefill of N = 2048 at B = 1: 2048 * 15.1 GFLOP / 989 TFLOP/s = 31 ms of compute
    # against 4.5 ms of weights: compute binds from B = 1, so there is no transition.
    a = analyze(LLAMA, hw="h100_sxm", phase="prefill")
    cap = capacity(a, {"N": 2048})
    assert cap["bound_transitions"] == []
    # prefill writes B*N KV tokens and gathers B*N embedding rows: at B = 1
    #   131,072 N = 15,009,849,344 + 8,192 N -> N = 15,009,849,344 / 122,880
    assert cap["kv_overtakes_weights"]["context"] == pytest.approx(
        STEP_WEIGHTS / 122_880, rel=1e-12)


def test_numeric_roots_for_nonlinear_forms() -> None:
    # Min(x, 1000) - 500 crosses at 500; x**2 - 2 at sqrt(2): neither is linear in x
    import sympy
    assert crossings(sympy.Min(X, 1000) - 500, 1.0, 1e6) == pytest.approx([500.0])
    assert crossings(X**2 - 2, 1.0, 10.0) == pytest.approx([np.sqrt(2)], rel=1e-9)
    assert crossings(X * 0 + 3, 1.0, 10.0) == []


def test_eval_json_and_text_carry_capacity(capsys) -> None:
    assert main(["eval", LLAMA, "--hw", "h100_sxm", "--json"]) == 0
    cap = json.loads(capsys.readouterr().out)["capacity"]
    assert cap["max_batch"] == 129 and cap["gpus_to_hold_weights"] == 1  # 129: test_max_batch_and_context
    assert cap["bound_transitions"][0]["first_batch"] == 28
    assert main(["eval", LLAMA, "--hw", "h100_sxm"]) == 0
    out = capsys.readouterr().out
    assert "capacity" in out and "weights -> kv" in out
