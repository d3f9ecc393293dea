"""Hostile input on the parser / input / output side (issue #8): one test per class. Every
case must end in a located SpecError (or a clean exit 1 from the CLI), fast, with nothing
executed and no content of non-spec files shown."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.hf.config import MAX_JSON_DEPTH, MAX_JSON_INT_DIGITS
from infest.compiler.hf.families import MAX_LAYERS
from infest.compiler.hf.importer import import_hf
from infest.compiler.load.loader import MAX_IMPORT_DEPTH, MAX_SPEC_BYTES, load_program
from infest.compiler.analyses.sweep import parse_list
from infest.dsl.errors import SpecError, printable
from infest.dsl.parser import MAX_BLOCK_DEPTH, MAX_EXPR_DEPTH, _lark, parse
from infest.dsl.units import MAX_LITERAL_DIGITS, MAX_LITERAL_EXPONENT, parse_number
from infest.exports.cli.common import parse_sets

ROOT = Path(__file__).parents[1]
HW = """hardware hw { mem_capacity = 1 GB; mem_bw = 1 TB/s; launch_overhead = 2 us
  flops_bf16 = 100 TFLOP/s }
"""
FIXTURES = ROOT / "tests" / "fixtures" / "hf"


def spec(tmp_path: Path, body: str, name: str = "m.arch") -> Path:
    path = tmp_path / name
    path.write_text(HW + "model m {\n" + body + "\n}\n")
    return path


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(SpecError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ---- 1. no pickled parser cache ----------------------------------------------------------

def test_no_source_unpickles_or_caches_the_grammar() -> None:
    pattern = re.compile(r"cache\s*=\s*True|\bpickle\b|\bmarshal\b")
    hits = [f"{p}:{n}" for folder in ("dsl", "compiler", "exports")
            for p in sorted((ROOT / folder).glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []
    assert not _lark().options.cache


# ---- 2. reading files ------------------------------------------------------------------------

def test_fifo_and_device_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.arch"
    os.mkfifo(fifo)  # nobody writes: a blocking open would hang this test
    assert "cannot read" in error_of(load_program, fifo)
    assert "not a regular file" in error_of(load_program, fifo)
    zero = tmp_path / "zero.arch"
    zero.symlink_to("/dev/zero")
    assert "not a regular file" in error_of(load_program, zero)


def test_spec_size_limit_is_exact(tmp_path: Path) -> None:
    body = "model m { x = embed(tokens, 2 -> 2) }\n"
    pad = MAX_SPEC_BYTES - len(body) - 1          # '#' + pad spaces' worth of comment + body
    at_limit = tmp_path / "at.arch"
    at_limit.write_text("#" + "x" * (pad - 1) + "\n" + body)
    assert at_limit.stat().st_size == MAX_SPEC_BYTES
    assert "m" in load_program(at_limit).models
    over = tmp_path / "over.arch"
    over.write_text("#" + "x" * pad + "\n" + body)  # one byte more
    assert "larger than MAX_SPEC_BYTES = 1 MiB" in error_of(load_program, over)


def test_import_depth_limit(tmp_path: Path) -> None:
    def chain(files: int) -> Path:
        for i in range(files - 1):
            (tmp_path / f"c{i}.arch").write_text(f'import "c{i + 1}.arch"\n')
        (tmp_path / f"c{files - 1}.arch").write_text("model m { x = embed(tokens, 2 -> 2) }\n")
        return tmp_path / "c0.arch"
    # The root is at depth 0, so MAX_IMPORT_DEPTH files (depths 0..31) load ...
    assert "m" in load_program(chain(MAX_IMPORT_DEPTH)).models
    # ... and one more file on the chain is refused at the import that reaches it.
    message = error_of(load_program, chain(MAX_IMPORT_DEPTH + 1))
    assert f"c{MAX_IMPORT_DEPTH - 1}.arch:1:1: error: imports nested deeper than " \
           f"MAX_IMPORT_DEPTH = {MAX_IMPORT_DEPTH}" in message


# ---- 3. literals ----------------------------------------------------------------------------

def test_literal_digits_and_exponents_are_bounded_before_building() -> None:
    assert parse_number("1" * MAX_LITERAL_DIGITS) == int("1" * MAX_LITERAL_DIGITS)
    assert parse_number(f"1e{MAX_LITERAL_EXPONENT}") == 10 ** MAX_LITERAL_EXPONENT
    assert parse_number(f"1e-{MAX_LITERAL_EXPONENT}") * 10 ** MAX_LITERAL_EXPONENT == 1
    with pytest.raises(ValueError, match="MAX_LITERAL_DIGITS = 100"):
        parse_number("1" * 100_000)
    with pytest.raises(ValueError, match="MAX_LITERAL_EXPONENT = 100"):
        parse_number("1e999999999")  # Fraction() of this would not return for minutes


def test_big_literals_in_specs_sets_and_sweep_lists(tmp_path: Path) -> None:
    message = error_of(analyze, spec(tmp_path, " d = 1e999999999\n x = embed(tokens, 2 -> d)"))
    assert f"{tmp_path / 'm.arch'}:4:6: error: exponent of '1e999999999'" in message
    assert "MAX_LITERAL_DIGITS" in error_of(parse_sets, ["B=" + "9" * 100_000])
    assert "MAX_LITERAL_EXPONENT" in error_of(parse_sets, ["B=1e99999999"])
    assert "MAX_LITERAL_EXPONENT" in error_of(parse_list, "1..1e99999999", "N")


# ---- 4. nesting -----------------------------------------------------------------------------

def test_deep_calls_and_sums_fail_located_and_deep_parentheses_work(tmp_path: Path) -> None:
    calls = " d = " + "max(" * 300 + "1" + ")" * 300 + "\n x = embed(tokens, 2 -> d)"
    assert "MAX_EXPR_DEPTH = 100" in error_of(analyze, spec(tmp_path, calls), hw="hw")
    total = " d = " + "+".join(["1"] * 500) + "\n x = embed(tokens, 2 -> d)"
    assert "m.arch:4:6: error: expression nested deeper than MAX_EXPR_DEPTH" \
        in error_of(analyze, spec(tmp_path, total), hw="hw")
    parens = " d = " + "(" * 300 + "3" + ")" * 300 + "\n x = embed(tokens, 2 -> d)"
    assert analyze(spec(tmp_path, parens), hw="hw").evaluate()["params"]["total"] == 2 * 3


def test_limits_are_exact_and_the_deepest_allowed_spec_evaluates(tmp_path: Path) -> None:
    # MAX_EXPR_DEPTH + 1 terms make MAX_EXPR_DEPTH nested additions: allowed.
    ok = "+".join(["1"] * (MAX_EXPR_DEPTH + 1))
    # Inside a call the call is one level, so an argument may hold MAX_EXPR_DEPTH terms.
    arg = "+".join(["1"] * MAX_EXPR_DEPTH)
    # The model's own block is level 1, so MAX_BLOCK_DEPTH - 1 repeats fit inside it.
    body = (f" d = {ok}\n x = embed(tokens, 2 -> d)\n" + " repeat 1 {\n" * (MAX_BLOCK_DEPTH - 1)
            + f" x = rmsnorm(x, kernels = {arg})\n" + " }\n" * (MAX_BLOCK_DEPTH - 1))
    result = analyze(spec(tmp_path, body), hw="hw").evaluate()
    # d = 101; embed: 2 * 101 params; rmsnorm: a 101-wide weight; 1 + 100 kernels in all
    assert result["params"]["total"] == 2 * 101 + 101
    assert result["step"]["kernels"] == 1 + 100
    too_long = " d = " + "+".join(["1"] * (MAX_EXPR_DEPTH + 2)) + "\n x = embed(tokens, 2 -> d)"
    assert "MAX_EXPR_DEPTH" in error_of(analyze, spec(tmp_path, too_long), hw="hw")


def test_deep_repeats_fail_located(tmp_path: Path) -> None:
    body = " x = embed(tokens, 2 -> 2)\n" + " repeat 2 {\n" * 300 + " x = rmsnorm(x)\n" + " }\n" * 300
    message = error_of(analyze, spec(tmp_path, body), hw="hw")
    # lines 1-2 hardware, 3 model (block 1), 4 embed, then the k-th repeat on line 4 + k
    # opens block k + 1: the 64th repeat (line 68) opens block 65, its '{' at column 11
    assert "m.arch:68:11: error: blocks nested deeper than MAX_BLOCK_DEPTH = 64" in message


# ---- 5. import-hf --------------------------------------------------------------------------

def hf_case(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return error_of(import_hf, path)


def test_hostile_hf_configs(tmp_path: Path) -> None:
    nested = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert f"MAX_JSON_DEPTH = {MAX_JSON_DEPTH}" in hf_case(tmp_path, nested)
    ok_depth = '{"a": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    assert "MAX_JSON_DEPTH" not in hf_case(tmp_path, ok_depth)  # fails later, on model_type
    brackets_in_string = '{"a": "' + "[" * 100 + '"}'
    assert "MAX_JSON_DEPTH" not in hf_case(tmp_path, brackets_in_string)
    huge = '{"hidden_size": 1' + "0" * 100_000 + "}"
    assert f"MAX_JSON_INT_DIGITS = {MAX_JSON_INT_DIGITS}" in hf_case(tmp_path, huge)
    # NaN and Infinity read as Python reads them (published configs carry Infinity in
    # fields infest does not use); a field infest reads must still be a whole number.
    nan = '{"model_type": "llama", "hidden_size": NaN}'
    assert "config field 'hidden_size' must be a positive integer, got NaN" in hf_case(tmp_path, nan)
    config = json.loads((FIXTURES / "meta-llama--Meta-Llama-3.1-8B.config.json").read_text())
    infinite = json.dumps({**config, "rope_scaling": {**config["rope_scaling"], "factor": math.inf}})
    assert "'factor' must be a positive finite number, got Infinity" in hf_case(tmp_path, infinite)
    config = (FIXTURES / "meta-llama--Meta-Llama-3.1-8B.config.json").read_text()
    layers = re.sub(r'"num_hidden_layers": \d+', '"num_hidden_layers": 100000000', config)
    assert f"'num_hidden_layers' is 100000000, more than MAX_LAYERS = {MAX_LAYERS}" \
        in hf_case(tmp_path, layers)


def test_hf_config_from_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert "not a regular file" in error_of(import_hf, fifo)


# ---- 6. leaks and terminal safety --------------------------------------------------------

def test_non_spec_files_are_never_read_or_quoted(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("root:TOPSECRET:0:0\n")
    importer = tmp_path / "m.arch"
    importer.write_text('import "secret.txt"\nmodel m { x = embed(tokens, 2 -> 2) }\n')
    message = error_of(load_program, importer)
    assert "not a .arch file" in message and "TOPSECRET" not in message
    assert "TOPSECRET" not in error_of(load_program, tmp_path / "secret.txt")


def test_control_characters_are_escaped_in_diagnostics_and_titles(tmp_path: Path) -> None:
    path = tmp_path / "m.arch"
    path.write_text(HW + 'model m "evil\x1b]0;owned\x07" {\n x = embed(tokens, 2 -> 2)\n'
                    " y = \x1b[2J\n}\n")
    message = error_of(load_program, path)
    assert "\x1b" not in message and "y = \\x1b[2J" in message
    path.write_text(HW + 'model m "evil\x1b]0;owned\x07" {\n x = embed(tokens, 2 -> 2)\n}\n')
    assert load_program(path).models["m"][0].title == "evil\\x1b]0;owned\\x07"
    out = cli("compile", str(path))
    assert out.returncode == 0 and "\x1b" not in out.stdout and "evil\\x1b" in out.stdout
    assert printable("a\u202eb\tc\n") == "a\\u202eb\tc\n"  # bidi override; tab, newline kept


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infest.exports.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_xlsx_into_missing_folder_or_full_disk_is_one_clean_error(tmp_path: Path) -> None:
    llama = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
    missing = tmp_path / "no" / "such" / "w.xlsx"
    out = cli("compile", llama, "--hw", "h100_sxm", "--xlsx", str(missing))
    assert out.returncode == 1 and "No such file or directory" in out.stderr
    assert not (tmp_path / "no").exists()  # no silent mkdir -p
    if Path("/dev/full").exists():
        out = cli("compile", llama, "--hw", "h100_sxm", "--xlsx", "/dev/full")
        assert out.returncode == 1 and "No space left on device" in out.stderr
        assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr


# ---- 7. the language's traps ------------------------------------------------------------

def test_group_on_its_own_line_does_not_attach_to_the_op_above(tmp_path: Path) -> None:
    body = (" x = embed(tokens, 2 -> 4) group emb\n y = rmsnorm(x)\n group mlp\n"
            " z = rmsnorm(y)")
    groups = {o["name"]: o["group"] for o in analyze(spec(tmp_path, body), hw="hw").evaluate()["ops"]}
    assert groups == {"x": "emb", "y": "emb", "z": "mlp"}


def test_newlines_end_statements_except_inside_parentheses(tmp_path: Path) -> None:
    body = (" d = (2 +\n   3) * 2\n x = embed(tokens,\n   4 -> d)\n"
            " repeat 2 { x = rmsnorm(x) } y = rmsnorm(x); z = rmsnorm(y)")
    result = analyze(spec(tmp_path, body), hw="hw").evaluate()
    # d = (2 + 3) * 2 = 10; embed 4 * 10 params; rmsnorm weights of 10: two in the
    # repeat, then y and z
    assert result["params"]["total"] == 4 * 10 + 2 * 10 + 10 + 10
    assert [o["name"] for o in result["ops"]] == ["x", "x#2", "y", "z"]
    message = error_of(parse, "model m {\n d = 2\n   + 3\n}\n", "t.arch")
    assert "t.arch:3:4: error: syntax error: unexpected '+'" in message
    assert "wrap a long expression in parentheses" in message


def test_bytes_unit_and_count_prefixes() -> None:
    fields = {f.name: f.value for f in parse(
        "hardware h { a = 2B; c = 32k; d = 32 kB; e = 32 KiB; f = 2M; g = 2 MB }"
    ).items[0].fields}
    assert fields["a"].value == 2 and fields["a"].dimension == "bytes"
    assert fields["c"].value == 32 * 1024 and fields["c"].dimension == "count"  # k = 1024
    assert fields["d"].value == 32_000                                       # kB = 1000 B
    assert fields["e"].value == 32 * 1024
    assert fields["f"].value == 2 * 1024**2 and fields["g"].value == 2 * 10**6
    assert "write 2B for bytes or 2 * B for the batch" in error_of(parse, "model m { d = 2 B }")
