"""Language features on tiny specs whose costs are easy to derive by hand."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.dsl.errors import SpecError
from infest.dsl.parser import parse

HW = """
hardware hw { mem_capacity = 1 GB; mem_bw = 1 TB/s; launch_overhead = 2 us
  flops_bf16 = 100 TFLOP/s; flops_fp8 = 200 TFLOP/s }
"""


def run(tmp_path: Path, body: str, **inputs: float) -> dict:
    path = tmp_path / "m.arch"
    path.write_text(HW + "model m {\n" + body + "\n}\n")
    return analyze(path, hw="hw").evaluate(inputs)


def op(result: dict, name: str) -> dict:
    return next(o for o in result["ops"] if o["name"] == name)


def test_units_are_stored_in_base_units() -> None:
    spec = parse("hardware h { a = 80 GiB; b = 3.35 TB/s; c = 989 TFLOP/s; d = 4 us; e = 32k }")
    values = {f.name: f.value.value for f in spec.items[0].fields}
    assert values == {"a": 80 * 2**30, "b": 3_350_000_000_000, "c": 989 * 10**12,
                      "d": pytest.approx(4e-6), "e": 32768}


def test_integer_op_rates_are_ops_per_second() -> None:
    """`624 TOPS` (a datasheet's int8 peak) = 624e12 ops/s, stored like FLOP/s; `TOP/s`,
    `POPS` and `--set flops_int8=4.5POPS` read the same way."""
    from infest.dsl.units import FLOPS_RATE, parse_value
    spec = parse("hardware h { a = 624 TOPS; b = 1979 TOP/s; c = 4.5 POPS }")
    values = {f.name: f.value.value for f in spec.items[0].fields}
    assert values == {"a": 624 * 10**12, "b": 1979 * 10**12, "c": 4_500 * 10**12}
    assert parse_value("4.5POPS") == (4_500 * 10**12, FLOPS_RATE)


def test_clocks_are_hertz() -> None:
    """`1980 MHz` (a GPU's boost clock) = 1.98e9 Hz; `--set clock=1.41GHz` reads the same."""
    from infest.dsl.units import FREQUENCY, parse_value
    spec = parse("hardware h { a = 1980 MHz; b = 1.41 GHz; c = 0 MHz }")
    values = {f.name: f.value.value for f in spec.items[0].fields}
    assert values == {"a": 1_980 * 10**6, "b": 1_410 * 10**6, "c": 0}
    assert parse_value("1.41GHz") == (1_410 * 10**6, FREQUENCY)


def test_linear_costs(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 8\n x = embed(tokens, 100 -> d)\n y = linear(x, d -> 16)", B=4, N=1)
    y = op(r, "y")
    assert y["flops"] == 2 * 4 * 8 * 16               # 2 * tokens * d_in * d_out
    assert y["weight_bytes"] == 8 * 16 * 2            # bf16 weights once
    assert y["act_bytes"] == 4 * (8 + 16) * 2         # read x, write y
    assert r["params"]["total"] == 100 * 8 + 8 * 16


def test_repeat_multiplies_and_nests(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 8\n x = embed(tokens, 10 -> d)\n"
                      " repeat 3 { repeat 5 { x = rmsnorm(x) } x = add(x, x) }")
    assert op(r, "x#2")["count"] == 15 and op(r, "x#3")["count"] == 3
    assert r["step"]["kernels"] == 1 + 15 + 3
    assert r["params"]["total"] == 10 * 8 + 15 * 8


def test_groups_are_sticky_within_a_block(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 8\n x = embed(tokens, 10 -> d) group emb\n"
                      " repeat 2 group layer { h = rmsnorm(x)\n g = linear(h, d -> d) group mlp\n"
                      "   u = linear(h, d -> d) }\n y = rmsnorm(x)")
    assert [op(r, n)["group"] for n in ("x", "h", "g", "u", "y")] == [
        "emb", "layer", "mlp", "mlp", "emb"]


def test_dtypes_per_block_and_per_op(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 64\n x = embed(tokens, 10 -> d)\n a = linear(x, d -> d, weights = fp8)\n"
                      " b = linear(x, d -> d, bits = 4.25)\n weights: mxfp4\n c = linear(x, d -> d)\n"
                      " e = linear(x, d -> d, act = fp8)", B=1)
    assert op(r, "a")["weight_bytes"] == 64 * 64 * 1
    assert op(r, "b")["weight_bytes"] == 64 * 64 * 4.25 / 8
    assert op(r, "c")["weight_bytes"] == 64 * 64 * 17 / 32      # mxfp4: 4.25 bits
    # math at the fp8 peak when activations are fp8: 2*64*64 FLOPs / 200 TFLOP/s
    assert op(r, "e")["t_compute_s"] == pytest.approx(2 * 64 * 64 / 200e12)
    assert op(r, "c")["t_compute_s"] == pytest.approx(2 * 64 * 64 / 100e12)  # upcast to bf16


def test_missing_peak_is_an_error_naming_the_op(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="hardware 'hw' has no flops_fp32, needed by op 'y'"):
        run(tmp_path, "d = 8\n x = embed(tokens, 10 -> d)\n y = linear(x, d -> d, math = fp32)")


def test_attention_window_and_kv(tmp_path: Path) -> None:
    body = ("d = 64\n x = embed(tokens, 10 -> d)\n"
            " a = attention(x, x, x, 4, 4, 16, window = 100)")
    r = run(tmp_path, body, B=2, N=1000)
    a = op(r, "a")
    per_token = 2 * 4 * 16 * 2                        # K and V, 4 kv heads x 16, bf16
    assert a["kv_bytes"] == 2 * 100 * per_token + 2 * per_token   # window read + 1 written
    assert a["flops"] == 4 * 2 * 4 * 16 * 100         # each query sees min(N+1, 100) keys
    assert r["memory"]["kv_bytes"] == 2 * 100 * per_token         # a ring of 100 tokens
    short = op(run(tmp_path, body, B=2, N=10), "a")
    assert short["flops"] == 4 * 2 * 4 * 16 * 11     # N + 1 keys below the window


def test_custom_op_costs_are_written_in_the_spec(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 8\n x = embed(tokens, 10 -> d)\n"
                      " y = custom(x, flops = 7 * B * T * d, act_bytes = 3 * B, kernels = 2)", B=3)
    y = op(r, "y")
    assert (y["flops"], y["bytes"], y["kernels"]) == (7 * 3 * 8, 9, 2)
    assert y["time_s"] == pytest.approx(2 * 2e-6)      # two launches dominate


def test_fused_op_has_no_launch(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 8\n x = embed(tokens, 10 -> d)\n y = add(x, x, kernels = 0)")
    assert op(r, "y")["kernels"] == 0 and r["step"]["kernels"] == 1


def test_tied_head_reads_but_does_not_store(tmp_path: Path) -> None:
    r = run(tmp_path, "d = 8; v = 100\n x = embed(tokens, v -> d)\n y = linear(x, d -> v, tied = 1)")
    assert r["params"]["total"] == 100 * 8            # counted once
    assert op(r, "y")["weight_bytes"] == 100 * 8 * 2  # still read every step


def test_moe_scales_by_touched_experts(tmp_path: Path) -> None:
    body = ("d = 8\n x = embed(tokens, 10 -> d)\n"
            " y = moe(x, experts = 16, top_k = 2) { e = linear(x, d -> d) }")
    for b in (1, 4, 64):
        e = op(run(tmp_path, body, B=b), "e")
        touched = 16 * (1 - (1 - 2 / 16) ** b)       # expected distinct experts
        assert e["weight_bytes"] == pytest.approx(8 * 8 * 2 * touched, rel=1e-12)
        assert e["flops"] == 2 * b * 8 * 8 * 2        # per routed token: k = 2 experts
    r = run(tmp_path, body)
    assert r["params"]["total"] == 80 + 16 * 64 and r["params"]["active"] == 80 + 2 * 64


def test_params_are_order_free_and_inputs_overridable(tmp_path: Path) -> None:
    r = run(tmp_path, "head = d / h; d = 64; h = 4\n x = embed(tokens, 10 -> head)", d=128)
    assert r["params"]["total"] == 10 * 32            # head = 128 / 4 after --set d=128
    assert r["inputs"]["d"] == 128 and "head" not in r["inputs"]


def test_several_models_need_a_choice(tmp_path: Path) -> None:
    path = tmp_path / "two.arch"
    path.write_text("model a { x = embed(tokens, 2 -> 2) }\nmodel b { x = embed(tokens, 2 -> 2) }\n")
    with pytest.raises(SpecError, match="choose one with --model NAME"):
        analyze(path)
    assert analyze(path, model="b").model.name == "b"


LAYERED = """d = 8
  layer block(x, w) {
    h = rmsnorm(x) group norm
    a = attention(h, h, h, 1, 1, d, window = w) group attention
    x = add(x, a)
  }
  x = embed(tokens, 10 -> d) group emb
  repeat 3 {
    x = block(x, 16)
    x = block(x, w = 0)
  }
  y = rmsnorm(x)"""


def test_layers_expand_like_their_bodies(tmp_path: Path) -> None:
    r = run(tmp_path, LAYERED, B=1, N=100)
    names = [o["name"] for o in r["ops"]]
    assert names == ["x", "block.h", "block.a", "block.x", "block.h#2", "block.a#2",
                     "block.x#2", "y"]
    per_token = 2 * 1 * 8 * 2                         # K and V, 1 kv head of 8, bf16
    assert op(r, "block.a")["kv_bytes"] == 16 * per_token + per_token    # window of 16
    assert op(r, "block.a#2")["kv_bytes"] == 100 * per_token + per_token  # window 0: full
    assert op(r, "block.a")["count"] == 3
    # six rmsnorms of 8 in the layers; y's 8 stay in the caller's group (emb)
    assert r["params"]["groups"] == {"emb": 10 * 8 + 8, "norm": 6 * 8, "attention": 0}
    assert op(r, "y")["group"] == "emb"


@pytest.mark.parametrize("body,message", [
    ("layer f(x) { y = f(x) }\n x = embed(tokens, 2 -> 2)\n z = f(x)", "layer 'f' calls itself"),
    ("layer f(x, w) { y = rmsnorm(x) }\n x = embed(tokens, 2 -> 2)\n z = f(x)",
     "layer 'f' is missing its argument 'w'"),
    ("layer f(x) { y = rmsnorm(x) }\n x = embed(tokens, 2 -> 2)\n z = f(x, 3)", "layer 'f' takes (x)"),
    ("layer linear(x) { y = rmsnorm(x) }\n x = embed(tokens, 2 -> 2)", "'linear' is already defined"),
    ("x = embed(tokens, 2 -> 2)\n repeat 2 { layer f(x) { y = rmsnorm(x) } }",
     "layers are defined at the top level of a model"),
    ("layer f(x) { y = rmsnorm(q) }\n q = embed(tokens, 2 -> 2)\n z = f(q)",
     "'q' is not visible inside layer 'f'"),
])
def test_layer_errors(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        run(tmp_path, body)
