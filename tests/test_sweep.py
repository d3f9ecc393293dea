"""`infest sweep`: LIST parsing, grid cells equal to `eval`, OOM marking, CLI exit codes."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.sweep import parse_list, resolve_metric, sweep
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")

# Llama 3.1 8B on H100 (80 GB = 80e9 bytes), decode, T = 1, by hand:
#   weights held = all 8,030,261,248 params * 2 bytes = 16,060,522,496 bytes
#     (per layer q,o 4096*4096, k,v 4096*1024, gate/up/down 3*4096*14336, 2 norms 4096:
#      218,112,000; x32 = 6,979,584,000; + final norm 4096 + LM head 4096*128256 and
#      embedding 128256*4096 = 525,336,576 each)
#   KV per token = 2 (K,V) * 32 layers * 8 kv heads * 128 * 2 bytes = 131,072 bytes
#   at N = 4096 a sequence holds N + T = 4097 tokens: 537,001,984 bytes
#   max batch = floor((85,520,809,984 - 16,060,522,496) / 537,001,984) = floor(129.35) = 129
#   (the H100's 81,559 MiB = 85,520,809,984 bytes, nvidia-smi's total)
WEIGHTS_HELD = 16_060_522_496
KV_PER_TOKEN = 131_072
MAX_BATCH_4096 = (81559 * 2**20 - WEIGHTS_HELD) // (KV_PER_TOKEN * 4097)


@pytest.fixture(scope="module")
def llama():
    return analyze(LLAMA, hw="h100_sxm")


# ---- LIST parsing ---------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("1,8,32", [1, 8, 32]),
    ("32, 8 ,1,8", [1, 8, 32]),                      # sorted, duplicates dropped
    ("1..5", [1, 2, 3, 4, 5]),
    ("3..3", [3]),
    ("1..64:x2", [1, 2, 4, 8, 16, 32, 64]),
    ("1..100:x2", [1, 2, 4, 8, 16, 32, 64]),          # stops at the last value <= b
    ("1..10:x3", [1, 3, 9]),
    # x1.5 from 1: 1, 1.5, 2.25, 3.375, 5.06, 7.59, 11.39, 17.09, 25.63, 38.44, 57.67,
    # 86.50 rounded to nearest: 1 2 2 3 5 8 11 17 26 38 58 86
    ("1..100:x1.5", [1, 2, 3, 5, 8, 11, 17, 26, 38, 58, 86]),
    ("2..10:+4", [2, 6, 10]),
    ("32k", [32768]),                                 # k = 1024 on counts
    ("1k..8k:x2", [1024, 2048, 4096, 8192]),
    ("1,4..6,1k", [1, 4, 5, 6, 1024]),
])
def test_parse_list(text: str, expected: list[int]) -> None:
    assert parse_list(text, "N") == expected


@pytest.mark.parametrize("text, why", [
    ("", "empty item"),
    ("1,,2", "empty item"),
    ("0", "positive whole"),
    ("1.5", "positive whole"),
    ("abc", "not a number"),
    ("4GB", "count"),
    ("8..1", "backwards"),
    ("1..8:x1", "greater than 1"),
    ("1..8:x0.5", "greater than 1"),
    ("1..8:x", "bad step"),
    ("1..8:+0", "positive"),
    ("1..8:+1.5", "whole number"),
    ("1..100000000", "more than"),
    ("1..8:y2", "unknown step"),
    ("1..8:", "unknown step"),
])
def test_parse_list_errors(text: str, why: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_list(text, "B")
    message = str(err.value)
    assert why in message and "--B" in message and "hint:" in message


def test_resolve_metric() -> None:
    assert resolve_metric("tokens_per_s") == "step.tokens_per_s"
    assert resolve_metric("kv_bytes") == "step.kv_bytes"      # in both: the step's
    assert resolve_metric("memory.kv_bytes") == "memory.kv_bytes"
    assert resolve_metric("max_batch") == "memory.max_batch"
    assert resolve_metric("bound") == "bound"
    with pytest.raises(SpecError, match="did you mean"):
        resolve_metric("tokens_per_sec")


# ---- grid values ----------------------------------------------------------------------

POINTS_B = [1, 3, 8, 119, 120, 1000]
POINTS_N = [1, 17, 4096, 32768, 131071]  # N + T up to the trained context


@pytest.mark.parametrize("metric", ["tokens_per_s", "time_s", "bound", "memory.kv_bytes",
                                    "max_batch", "max_context", "fits", "flops"])
def test_cells_equal_eval(llama, metric: str) -> None:
    s = sweep(llama, {}, POINTS_B, POINTS_N, metric)
    section, _, key = s.metric.partition(".")
    for i, b in enumerate(POINTS_B):
        for j, n in enumerate(POINTS_N):
            r = llama.evaluate({"B": b, "N": n})
            expected = r["step"]["bound"] if metric == "bound" else r[section][key]
            assert s.values[i, j] == expected, (b, n)   # same function, same floats: exact
            assert bool(s.fits[i, j]) is r["memory"]["fits"]


def test_prefill_cells_equal_eval() -> None:
    a = analyze(LLAMA, hw="h100_sxm", phase="prefill")
    s = sweep(a, {"mem_bw": 4_000_000_000_000}, [1, 4], [128, 2048], "time_s")
    for i, b in enumerate([1, 4]):
        for j, n in enumerate([128, 2048]):
            r = a.evaluate({"B": b, "N": n, "mem_bw": 4_000_000_000_000})
            assert s.values[i, j] == r["step"]["time_s"]


def test_oom_marking(llama) -> None:
    assert MAX_BATCH_4096 == 129
    s = sweep(llama, {}, [1, 129, 130, 138], [4096], "tokens_per_s")
    assert s.fits[:, 0].tolist() == [True, True, False, False]
    assert s.values.shape == s.fits.shape == (4, 1)


def test_memory_key_independent_of_grid_fills_grid(llama) -> None:
    s = sweep(llama, {}, [1, 2], [10, 20, 30], "weights_bytes")
    assert s.values.shape == (2, 3)
    assert np.all(s.values == WEIGHTS_HELD)


def test_swept_symbol_cannot_be_set(llama) -> None:
    with pytest.raises(SpecError, match="conflicts"):
        sweep(llama, {"B": 4}, [1], [1], "time_s")


def test_million_point_grid_shape(llama) -> None:
    s = sweep(llama, {}, list(range(1, 1001)), list(range(1, 1001)), "tokens_per_s")
    assert s.values.shape == (1000, 1000)
    assert s.values[7, 4095 % 1000] == llama.evaluate({"B": 8, "N": 96})["step"]["tokens_per_s"]


# ---- command line ---------------------------------------------------------------------

def _sweep(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["sweep", LLAMA, "--hw", "h100_sxm", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_table_marks_oom(capsys) -> None:
    code, out, _ = _sweep(capsys, "--B", "1,129,130", "--N", "4k")
    assert code == 0
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()
            if line.strip() and line.split()[0] in {"1", "129", "130"}}
    assert not rows["1"].endswith("*") and not rows["129"].endswith("*")
    assert rows["130"].endswith("*")
    assert "does not fit" in out


def test_cli_csv_long_format(capsys) -> None:
    code, out, _ = _sweep(capsys, "--B", "1..4", "--N", "1k..4k:x2", "--csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 4 * 3
    assert list(rows[0]) == ["B", "N", "tokens_per_s", "fits"]
    assert rows[0]["B"] == "1" and rows[0]["N"] == "1024" and rows[0]["fits"] == "true"


def test_cli_cell_equals_eval_process(capsys) -> None:
    # Units and int conversion: --N 32k here and --set N=32k there are the same point.
    code, out, _ = _sweep(capsys, "--B", "8", "--N", "32k", "--json", "--metric", "time_s")
    assert code == 0
    point = json.loads(out)["points"][0]
    assert main(["eval", LLAMA, "--hw", "h100_sxm", "--set", "B=8", "--set", "N=32k",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (point["B"], point["N"]) == (8, 32768)
    assert point["time_s"] == r["step"]["time_s"]
    assert point["fits"] is r["memory"]["fits"]


def test_cli_json_fits_and_bound(capsys) -> None:
    code, out, _ = _sweep(capsys, "--B", "1,130", "--N", "4096", "--json", "--metric", "bound")
    assert code == 0
    doc = json.loads(out)
    assert doc["metric"] == "bound" and doc["B"] == [1, 130] and doc["N"] == [4096]
    assert [p["fits"] for p in doc["points"]] == [True, False]
    assert [p["bound"] for p in doc["points"]] == ["weights", "kv"]


@pytest.mark.parametrize("args, message", [
    (["--B", "0..4", "--N", "1"], "positive whole"),
    (["--B", "1", "--N", "9..1"], "backwards"),
    (["--B", "1", "--N", "1", "--metric", "nope"], "no such step or memory key"),
    (["--B", "1", "--N", "1", "--set", "N=4"], "conflicts"),
    (["--B", "1", "--N", "1", "--plot", "out.gif"], "unsupported file type"),
])
def test_cli_errors_exit_1(capsys, args: list[str], message: str) -> None:
    code, out, err = _sweep(capsys, *args)
    assert code == 1 and message in err and "Traceback" not in err and out == ""


def test_cli_missing_list_exits_1(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", LLAMA, "--hw", "h100_sxm", "--B", "1"])
    assert exc.value.code == 1
    assert "--N" in capsys.readouterr().err


def test_grid_too_large_fails_before_evaluating(llama) -> None:
    with pytest.raises(SpecError, match="more than"):
        sweep(llama, {}, list(range(1, 4001)), list(range(1, 4001)), "time_s")
