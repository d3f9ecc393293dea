"""Issue #26, one test per class of defect (the cache's own tests are in test_cache.py):
reads through one guarded helper, budgets per job, validation where input enters,
escaping per output context, one write helper, exact whole and divides checks. Each
reproduction ends in a located error (exit 1, no traceback) or the right answer."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from infest.compiler.analyses.nsys import read_kern_sum
from infest.dsl.errors import SpecError, printable, register_source, source_lines
from infest.exports.cli.main import main
from infest.exports.output import write_output

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
DEEPSEEK = str(ROOT / "specs" / "models" / "deepseek_v3.arch")
QWEN = ROOT / "tests" / "fixtures" / "hf" / "Qwen--Qwen3-8B.config.json"
NOKV = "model m {\n  x = embed(tokens, 1000 -> 64)\n  y = linear(x, 64 -> 64)\n}\n"
CSV = ("spec,hardware,tp,ep,pp,dp,policy,engine,phase,B,N,T,step_s\n"
       "llama3_1_8b,h100_sxm,1,,,,,,decode,{B},4096,1,{step}\n")


def fails(capsys, *args: str) -> str:
    """Run the CLI; it must exit 1 with a message and no traceback; the message."""
    assert main(list(args)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error" in err
    return err


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("INFEST_NO_CACHE", "1")


# ---- 2. one read helper ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_nsys_and_measurements_refuse_fifos_and_devices(capsys, tmp_path, kind):
    path = tmp_path / "k.csv"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(SpecError, match="not a regular file"):
        read_kern_sum(path)
    fails(capsys, "calibrate", str(path), "--hw", "h100_sxm")


# ---- 3. budgets per job ----------------------------------------------------------------

@pytest.mark.parametrize("args, named", [
    (("sweep", LLAMA, "--hw", "h100_sxm", "--B", "1", "--N", "1k", "--over",
      "vocab=1..200000"), "MAX_GRIDS"),
    (("sweep", LLAMA, "--hw", "h100_sxm", "--B", "1..10000000", "--N", "1..10000000"),
     "MAX_CELLS"),
    (("sweep", LLAMA, "--hw", "h100_sxm", "--B", "1..2000", "--N", "1..1000", "--plot",
      "p.png"), "MAX_PLOT_LINES"),
    (("serve", LLAMA, "--hw", "h100_sxm", "--batching", "continuous", "--isl", "2000000",
      "--chunk", "1", "--osl", "100", "--concurrency", "1"), "MAX_PREFILL_CHUNKS"),
    (("plan", DEEPSEEK, "--hw", "h200_sxm", "--isl", "1000", "--osl", "100", "--users", "100",
      "--gpus-max", "1048576"), "MAX_PLAN_POINTS"),
])
def test_a_job_past_its_budget_is_refused_naming_the_limit(capsys, tmp_path, monkeypatch,
                                                           args, named):
    monkeypatch.chdir(tmp_path)
    assert named in fails(capsys, *args)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_imports_share_one_byte_budget_and_code_is_bounded(capsys, tmp_path):
    comment = "# " + "x" * 1000 + "\n"
    for i in range(2):  # 2 x ~600 kB: each under MAX_SPEC_BYTES, together over 1 MiB
        (tmp_path / f"i{i}.arch").write_text(f"model i{i} {{\n  x = embed(tokens, 10 -> 4)\n}}\n"
                                             + comment * 600)
    spec = tmp_path / "m.arch"
    spec.write_text('import "i0.arch"\nimport "i1.arch"\n' + NOKV)
    assert "MAX_PROGRAM_BYTES" in fails(capsys, "eval", str(spec), "--hw", "h100_sxm")
    # 19,000 ops written out: refused on its code size before parsing
    body = "".join(f"  x{i} = rmsnorm(x{i - 1}, 8)\n" for i in range(1, 19000))
    spec.write_text("model big {\n  x0 = embed(tokens, 100 -> 8)\n" + body + "}\n")
    assert "MAX_PROGRAM_CODE" in fails(capsys, "eval", str(spec), "--hw", "h100_sxm")


def test_a_symbolic_exponent_is_bounded_by_its_numbers(capsys, tmp_path):
    spec = tmp_path / "m.arch"
    spec.write_text(NOKV.replace("y = linear(x, 64 -> 64)",
                                 "y = custom(x, flops = 2^(B + 10^29), width = 64)"))
    assert "in an exponent" in fails(capsys, "eval", str(spec), "--hw", "h100_sxm")


# ---- 4. validation where input enters ----------------------------------------------------

@pytest.mark.parametrize("cost", ["1/(B-1)", "sqrt(-B)"])
def test_custom_costs_outside_their_domain_name_the_op(capsys, tmp_path, cost):
    spec = tmp_path / "m.arch"
    spec.write_text(NOKV.replace("y = linear(x, 64 -> 64)", f"y = custom(x, flops = {cost}, width = 64)"))
    err = fails(capsys, "eval", str(spec), "--hw", "h100_sxm")
    assert f"{spec}:3:" in err and "custom() argument 'flops' is not a finite real" in err


@pytest.mark.parametrize("field, value, said", [
    ("rope_scaling", {"rope_type": "yarn", "factor": 1e308,
                      "original_max_position_embeddings": 32768}, "MAX_CONTEXT"),
])
def test_import_hf_numbers_are_checked_where_read(capsys, tmp_path, field, value, said):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(QWEN.read_text()), field: value}))
    assert said in fails(capsys, "import-hf", str(config))


def test_an_integral_float_where_an_integer_is_read(capsys, tmp_path):
    config = tmp_path / "config.json"
    gptq = {"quant_method": "gptq", "bits": 4.0, "group_size": 128}
    config.write_text(json.dumps({**json.loads(QWEN.read_text()), "quantization_config": gptq}))
    assert main(["import-hf", str(config)]) == 0
    out = capsys.readouterr().out  # 4.0 read as the 4 it equals:
    # 4 bits + (a 16-bit scale + a 4-bit zero point) per group of 128 = 4 + 20/128 = 4.15625
    assert "GPTQ 4-bit" in out and "bits=4.15625" in out


@pytest.mark.parametrize("B, step, said", [
    ("²", "0.01", "'²': expected a whole number"),     # '²'.isdigit() is True
    ("8", "1e-320", "MIN_STEP_S"),                      # made the median error inf%
    ("8", "x" * 200_000, "m.csv:2:1: error: a line longer than MAX_LINE_CHARS"),
    ("8", "x" * 2_000, "MAX_CELL_CHARS"),
    ("8", "١", "expected seconds as a decimal"),        # float('١') is 1.0
])
def test_measurement_cells_are_checked_where_read(capsys, tmp_path, B, step, said):
    path = tmp_path / "m.csv"
    path.write_text(CSV.format(B=B, step=step))
    assert said in fails(capsys, "calibrate", str(path), "--hw", "h100_sxm")


def test_a_geometric_factor_too_close_to_one(capsys):
    err = fails(capsys, "sweep", LLAMA, "--hw", "h100_sxm", "--B",
                "1..100:x1.0000000000000000000000001", "--N", "1k")
    assert "MIN_GROWTH" in err


def test_a_model_without_kv_plots(capsys, tmp_path):
    spec = tmp_path / "m.arch"
    spec.write_text(NOKV)
    plot = tmp_path / "p.png"
    assert main(["sweep", str(spec), "--hw", "h100_sxm", "--B", "1,8", "--N", "1k,2k",
                 "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"


# ---- 5. escaping per output context ------------------------------------------------------

def test_a_csv_name_cannot_add_a_line_to_the_calibrated_spec(capsys, tmp_path):
    path = tmp_path / "m\neff_flops = 0.02\n.csv"
    path.write_text(CSV.format(B=8, step="0.0123"))
    out = tmp_path / "cal.arch"
    assert main(["calibrate", str(path), "--hw", "h100_sxm", "-o", str(out)]) == 0
    text = out.read_text()
    assert "\neff_flops = 0.02" not in text and "m\\neff_flops = 0.02\\n.csv" in text


def test_line_separators_do_not_shift_quoted_lines_and_are_escaped():
    text = "model m {\n  # a\u2028b\n  y = z\n}\n"
    assert source_lines(text)[2] == "  y = z"  # splitlines() would give the comment's tail
    register_source("sep.arch", text)
    from infest.dsl.errors import Span, fail
    assert "3 |   y = z" in str(fail(Span("sep.arch", 3, 7, 3, 8), "unknown name 'z'"))
    assert printable("k\u2028\u202e\x85\u200f") == "k\\u2028\\u202e\\x85\\u200f"


def test_a_title_with_tex_in_it_plots_as_written(capsys, tmp_path):
    spec = tmp_path / "m.arch"
    spec.write_text(NOKV.replace('model m {', 'model m "$\\\\foo{$" {'))
    plot = tmp_path / "p.png"
    assert main(["sweep", str(spec), "--hw", "h100_sxm", "--B", "1,8", "--N", "1k,2k",
                 "--plot", str(plot)]) == 0


# ---- 6. one write helper -----------------------------------------------------------------

def test_outputs_never_overwrite_inputs(capsys, tmp_path):
    spec = tmp_path / "x.arch"
    spec.write_text(NOKV)
    before = spec.read_bytes()
    assert "is an input of this command" in fails(
        capsys, "compile", str(spec), "--hw", "h100_sxm", "--xlsx", str(spec))
    assert spec.read_bytes() == before
    config = tmp_path / "c.json"
    config.write_text(QWEN.read_text())
    assert "is an input of this command" in fails(capsys, "import-hf", str(config), "-o", str(config))
    assert config.read_text() == QWEN.read_text()
    kernels = tmp_path / "k.csv"
    kernels.write_text((ROOT / "tests" / "fixtures" / "nsys" / "llama_decode.csv").read_text())
    assert "is an input of this command" in fails(
        capsys, "diagnose", LLAMA, "--hw", "h100_sxm", "--set", "B=8", "--measured-step", "10ms",
        "--nsys", str(kernels), "--steps", "10", "--out", str(kernels))
    assert kernels.read_text() == (ROOT / "tests" / "fixtures" / "nsys" / "llama_decode.csv").read_text()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "book.xlsx"
    target.write_text("old")

    def broken(handle):
        handle.write(b"half")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        write_output(target, broken)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["book.xlsx"]
    with pytest.raises(SpecError, match=f"cannot write '{tmp_path / 'no' / 'x'}'"):
        write_output(tmp_path / "no" / "x", "text")
    write_output(target, "new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["book.xlsx"]
    write_output("/dev/null", "through")  # a device is written through, not replaced
    assert Path("/dev/null").is_char_device()


# ---- 7. exact arithmetic for exact checks ------------------------------------------------

@pytest.mark.parametrize("args, said", [
    ((LLAMA, "--hw", "h100_sxm", "--set", "B=2000000000.5"), "dp divides the batch B"),
    ((LLAMA, "--hw", "h100_sxm", "--set", "dp=2", "--set", "B=2000000001"),
     "2 does not divide 2000000001"),
    ((DEEPSEEK, "--hw", "h200_sxm", "--set", "tp=1152921504606846976"),  # 2^60
     "tp divides"),
])
def test_whole_and_divides_are_exact(capsys, args, said):
    assert said in fails(capsys, "eval", *args)


def test_exact_checks_still_pass_what_holds(capsys):
    assert main(["eval", DEEPSEEK, "--hw", "h200_sxm", "--set", "tp=8", "--set", "dp=4",
                 "--set", "B=2000000000"]) == 0  # 2e9 / 4 = 5e8 whole; 8 divides 128 heads


@pytest.mark.parametrize("text, said", [
    ("model m {\n  x = " + "9" * 205 + "\n}\n", "205 digits, more than MAX_LITERAL_DIGITS"),
    ("# " + "h" * 3_800_000 + "\nmodel m {\n}\n", "more than MAX_SPEC_BYTES"),
])
def test_import_hf_never_writes_a_spec_infest_refuses(text, said):
    from infest.compiler.hf.importer import check_output
    with pytest.raises(SpecError, match=said):
        check_output(text, "config.json")
