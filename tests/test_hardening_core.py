"""Hostile specs and arguments on the compiler side (issue #8): each class of attack ends
in a located SpecError (CLI: exit 1, no traceback), quickly, or in a correct answer."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from infest.compiler.analyses import sweep as sweep_module
from infest.compiler.api import analyze, load_model
from infest.compiler.analyses.capacity import X, capacity, crossings
from infest.compiler.core.constraints import Constraint, check_constraints
from infest.compiler.analyses.sweep import sweep
from infest.compiler.core.symbols import sym
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main
from limits import time_limit

ROOT = Path(__file__).parents[1]
MODELS = ROOT / "specs" / "models"


def spec(tmp_path: Path, body: str, name: str = "m.arch") -> Path:
    path = tmp_path / name
    path.write_text("model m {\n" + body + "\n}\n")
    return path


def error_of(path: Path, overrides: dict | None = None, seconds: int = 20) -> str:
    with time_limit(seconds), pytest.raises(SpecError) as exc:
        analyze(path, hw="h100_sxm").evaluate(overrides or {})
    assert all(d.span is not None for d in exc.value.diagnostics), str(exc.value)
    return str(exc.value)


# ---- 1. exact arithmetic that explodes -------------------------------------------

@pytest.mark.parametrize("expr, message", [
    ("(10^30)^64", "MAX_DIGITS"),                   # 10^1920: 1,920 digits > 1,000
    ("(1.0001^64)^64", "MAX_DIGITS"),               # (10001/10000)^4096: 16k-digit terms
    ("((hidden / 4095)^64)^64", "MAX_DIGITS"),      # at the default: (4096/4095)^4096
    ("((B + 1)^64)^64", "exponents are limited to 64"),  # folds to (B + 1)^4096
    ("2^64^64", "absurdly large"),                  # 2^(64^64): the exponent alone > 1e30
])
def test_towers_of_powers_are_refused_before_they_are_built(tmp_path, expr, message):
    path = spec(tmp_path, f"hidden = 4096\n p = {expr}\n x = embed(tokens, 10 -> hidden)")
    assert message in error_of(path, seconds=5)


def test_repeated_squaring_through_params_stops_at_max_digits(tmp_path):
    # p0 = 10001 / 10000 (derived, so an exact number, not an input symbol) has 5-digit
    # terms; p_k = p_{k-1} * p_{k-1} has 5 * 2^k: k = 8 gives 1,280 > 1,000.
    lines = ["p0 = 10001 / 10000"] + [f"p{k} = p{k - 1} * p{k - 1}" for k in range(1, 40)]
    path = spec(tmp_path, "\n".join(lines) + "\nx = embed(tokens, 10 -> 4)")
    assert "MAX_DIGITS" in error_of(path, seconds=5)


def test_expressions_doubling_through_params_stop_at_max_expr_nodes(tmp_path):
    # q_k uses q_{k-1} twice under min and max: the tree doubles per param.
    lines = ["q0 = 7"] + [f"q{k} = min(q{k - 1}, B) + max(q{k - 1}, N)" for k in range(1, 40)]
    path = spec(tmp_path, "\n".join(lines) + "\nx = embed(tokens, 10 -> 4)")
    assert "MAX_EXPR_NODES" in error_of(path, seconds=20)


def test_high_powers_are_never_expanded_to_find_roots():
    # (x/1000 + 1)^4096 would expand into 4,097 huge terms; the root finder only evaluates
    # it: (x/1000 + 1)^4096 - 2 crosses 0 at x = 1000 * (2^(1/4096) - 1) = 0.16926...
    with time_limit(5):
        roots = crossings((X / 1000 + 1) ** 4096 - 2, 0.01, 10.0)
    assert roots == pytest.approx([1000 * (2 ** (1 / 4096) - 1)], rel=1e-9)


def test_large_powers_in_the_kv_cache_are_never_expanded(tmp_path):
    # Expanding this cache per token would give 65^3 = 274,625 terms.
    body = """hidden = 64
  x = embed(tokens, 10 -> hidden)
  y = custom(x, kv_per_token = (1 + B / 64)^64 * (1 + N / 64)^64 * (1 + T / 64)^64)"""
    with time_limit(30):
        analysis = analyze(spec(tmp_path, body), hw="h100_sxm")
        capacity(analysis, {"N": 8})
    # At B = 1, N = 8, T = 1 one sequence holds N + T = 9 tokens of
    # (65/64)^64 * (72/64)^64 * (65/64)^64 bytes each.
    per_token = (65 / 64) ** 128 * (72 / 64) ** 64
    held = analysis.evaluate({"N": 8})["memory"]["kv_bytes"]
    assert held == pytest.approx(9 * per_token, rel=1e-12)


# ---- 2. models whose size explodes ------------------------------------------------

def _bomb(depth: int) -> str:
    lines = ["hidden = 64", "layer l0(x) { y = linear(x, hidden -> hidden) }"]
    lines += [f"layer l{k}(x) {{ a = l{k - 1}(x); b = l{k - 1}(a) }}" for k in range(1, depth + 1)]
    return "\n".join(lines + ["x = embed(tokens, 10 -> hidden)", f"z = l{depth}(x)"])


def test_layer_bomb_stops_at_max_ops_naming_the_layer_call(tmp_path):
    # 30 levels calling the level below twice: 2^30 linears. The limit hits in l1's
    # second call of l0 (line 4 of the spec: the model line, hidden, l0, then l1).
    message = error_of(spec(tmp_path, _bomb(30)), seconds=30)
    assert "more than 4,000 ops (MAX_OPS)" in message
    assert "l30 -> l29" in message and "l1 -> l0" in message
    assert message.startswith(f"{tmp_path / 'm.arch'}:4:")


def test_many_ops_of_one_name_are_renamed_in_linear_time(tmp_path):
    # 11 levels: 2^11 = 2,048 linears, all named l11.l10...l1.l0.y; the embed makes 2,049.
    with time_limit(30):
        model = load_model(spec(tmp_path, _bomb(11)))  # the elaborated ops
    names = [op.name for op in model.ops]
    leaf = ".".join(f"l{k}" for k in range(11, -1, -1)) + ".y"
    assert len(names) == 2049 and len(set(names)) == 2049
    assert names[1] == leaf and names[2] == leaf + "#2" and names[-1] == leaf + "#2048"


# ---- 3. sweeps ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama():
    return analyze(MODELS / "llama3_1_8b.arch", hw="h100_sxm")


def test_sweep_past_max_cells_is_refused_naming_the_limit(capsys):
    # 2,049 x 1,024 = 2,098,176 > 2^21 = 2,097,152: with 2,049 B values, N may have
    # floor(2^21 / 2,049) = 1,023, and the list is refused while it is read
    assert main(["sweep", str(MODELS / "llama3_1_8b.arch"), "--hw", "h100_sxm",
                 "--B", "1..2049", "--N", "1..1024", "--csv"]) == 1
    err = capsys.readouterr().err
    assert "--N '1..1024': more than 1,023 values (MAX_CELLS over all B x N)" in err
    assert "Traceback" not in err


def test_chunked_sweep_equals_eval_at_every_cell(llama, monkeypatch):
    monkeypatch.setattr(sweep_module, "CHUNK_CELLS", 6)  # 3 N per row: 2 rows per block
    Bs, Ns = [1, 3, 8, 64, 200], [1, 4096, 100000]
    s = sweep(llama, {}, Bs, Ns, "tokens_per_s")
    for i, b in enumerate(Bs):
        for j, n in enumerate(Ns):
            r = llama.evaluate({"B": b, "N": n})
            assert s.values[i, j] == r["step"]["tokens_per_s"]
            assert s.fits[i, j] == r["memory"]["fits"]


# ---- 4. evaluation-time failures --------------------------------------------------

def test_division_by_zero_at_evaluation_names_the_op_and_inputs(tmp_path):
    body = """heads = 16
  x = embed(tokens, 10 -> 4)
  y = custom(x, flops = 1000 / (heads - 8))"""
    path = spec(tmp_path, body)
    # heads = 16: 1000 / 8 = 125 FLOPs; heads = 8: 1000 / 0.
    assert analyze(path, hw="h100_sxm").evaluate({})["ops"][1]["flops"] == 125
    message = error_of(path, {"heads": 8})
    assert "op 'y': flops is not finite at heads=8: infinite (division by zero" in message


def test_overflow_at_evaluation_is_an_error(tmp_path):
    # N^16 at N = 1e29 is 1e464: past a float's 1.8e308.
    path = spec(tmp_path, "x = embed(tokens, 10 -> 4)\n y = custom(x, flops = N^16)")
    assert "op 'y': flops is not finite at N=1e+29" in error_of(path, {"N": 10**29})


def test_square_root_of_a_negative_is_an_error_not_null(tmp_path, capsys):
    path = spec(tmp_path, "heads = 16\n x = embed(tokens, 10 -> 4)\n"
                          " y = custom(x, flops = sqrt(heads - 10))")
    assert main(["eval", str(path), "--hw", "h100_sxm", "--set", "heads=9", "--json"]) == 1
    err = capsys.readouterr().err
    assert "custom() argument 'flops' must be 0 or more but is not finite" in err
    assert "at heads=9" in err and "Traceback" not in err


# ---- 5. checks that --set used to bypass --------------------------------------------

def test_set_layers_makes_gpt_oss_repeat_count_fractional(capsys):
    # gpt-oss repeats its two-layer block layers / 2 times: 25 / 2 = 12.5.
    assert main(["eval", str(MODELS / "gpt_oss_20b.arch"), "--hw", "h200_sxm",
                 "--set", "layers=25"]) == 1
    err = capsys.readouterr().err
    assert "gpt_oss_20b.arch:55:10: error: repeat count must be a whole number, got 12.5 " \
           "at layers=25" in err


def test_set_top_k_above_experts_is_refused_everywhere(tmp_path):
    qwen = analyze(MODELS / "qwen3_30b_a3b.arch", hw="h200_sxm")
    for run in (lambda: qwen.evaluate({"top_k": 200}),
                lambda: capacity(qwen, {"top_k": 200}),
                lambda: sweep(qwen, {"top_k": 200}, [1, 2], [8, 16])):
        with pytest.raises(SpecError, match=r"top_k <= experts does not hold \(200 > 128\) "
                                            r"at experts=128, top_k=200"):
            run()
    from infest.exports.workbook.xlsx import write_workbook
    with pytest.raises(SpecError, match="top_k <= experts"):
        write_workbook(qwen, tmp_path / "q.xlsx", {"top_k": 200})


def test_sweep_reports_the_first_failing_point(tmp_path):
    # flops = 100 - B is negative from B = 101 on; the grid's first such row is B = 128.
    path = spec(tmp_path, "x = embed(tokens, 10 -> 4)\n y = custom(x, flops = 100 - B)")
    analysis = analyze(path, hw="h100_sxm")
    with pytest.raises(SpecError, match=r"custom\(\) argument 'flops' must be 0 or more, "
                                        r"got -28 at B=128"):
        sweep(analysis, {}, [1, 64, 128, 256], [1, 2])


def test_check_constraints_public_interface_on_arrays():
    tp, heads = sym("tp"), sym("heads")
    c = Constraint("divides", tp, heads, "tp divides heads", None, "pick tp from 1, 2, 4, 8")
    check_constraints([c], ["tp", "heads"], {"tp": np.array([1.0, 2, 4, 8]), "heads": 8.0})
    with pytest.raises(SpecError, match=r"tp divides heads does not hold \(3 does not divide "
                                        r"8\) at tp=3, heads=8") as exc:
        check_constraints([c], ["tp", "heads"], {"tp": np.array([1.0, 2, 3, 4]), "heads": 8.0})
    assert exc.value.diagnostics[0].hint == "pick tp from 1, 2, 4, 8"


# ---- 6. wrong numbers without a warning --------------------------------------------

@pytest.mark.parametrize("params, message", [
    ("hidden = 64; Hidden = 32", "param 'Hidden' differs from 'hidden' only in case"),
    ("hidden = 64; n = 3", "param 'n' differs from 'N' only in case"),
    ("hidden = 64; MEM_BW = 3", "param 'MEM_BW' differs from 'mem_bw' only in case"),
    ("hidden = 64; " + "h" * 253 + " = 3", "longer than 252 (MAX_NAME_CHARS)"),
])
def test_names_that_collide_or_overflow_in_a_workbook(tmp_path, params, message):
    path = spec(tmp_path, params + "\n x = embed(tokens, 10 -> hidden)")
    assert message in error_of(path)


def test_param_clashing_with_chosen_hardware_field(tmp_path):
    hw = tmp_path / "hw.arch"
    hw.write_text("hardware g { mem_capacity = 80 GB; mem_bw = 3 TB/s; "
                  "launch_overhead = 4 us; link_bw = 450 GB/s }\n")
    # Hardware blocks set table fields only (compiler/load/fields.py): the clash is a
    # param spelled like one of them in another case.
    path = spec(tmp_path, "Link_BW = 64\n x = embed(tokens, 10 -> Link_BW)")
    with pytest.raises(SpecError, match="param 'Link_BW' clashes with hardware 'g' field 'link_bw'"):
        analyze(path, hw=str(hw))


def test_no_kv_cache_means_unbounded_batch_and_context(tmp_path, capsys):
    path = spec(tmp_path, "x = embed(tokens, 10 -> 4)\n y = linear(x, 4 -> 4)")
    assert main(["eval", str(path), "--hw", "h100_sxm", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["memory"]["max_batch"] is None and result["memory"]["max_context"] is None
    assert main(["eval", str(path), "--hw", "h100_sxm"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"max batch at this N +unbounded\ \(no\ KV\ cache\)", text)


def test_every_layer_windowed_bounds_the_batch(tmp_path):
    body = """x = embed(tokens, 100 -> 64)
  q = linear(x, 64 -> 64); k = linear(x, 64 -> 64); v = linear(x, 64 -> 64)
  a = attention(q, k, v, 1, 1, 64, window = 128)"""
    result = analyze(spec(tmp_path, body), hw="h100_sxm").evaluate({})
    # Weights: embed 100*64 + 3 linears 64*64 = 6,400 + 12,288 = 18,688 params, 37,376 bytes.
    # KV: 2 (K, V) * 1 head * 64 * 2 bytes = 256 bytes per token, at most 128 tokens held:
    # 32,768 bytes per sequence at N = 4096. max_batch = floor((85,520,809,984 - 37,376)
    # / 32,768) (the H100's 81,559 MiB) = floor(85,520,772,608 / 32,768) = 2,609,886
    # (32,768 * 2,609,886 = 85,520,744,448).
    assert result["memory"]["max_batch"] == 2_609_886
