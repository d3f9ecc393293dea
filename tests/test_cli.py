"""The command line: contract keys, --set with units, exit codes, no tracebacks."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
CONTRACT = {
    "top": {"model", "hardware", "phase", "inputs", "params", "memory", "step", "ops"},
    "params": {"total", "active", "groups"},
    "memory": {"weights_bytes", "kv_bytes_per_token", "kv_bytes", "total_bytes",
               "capacity_bytes", "fits", "max_batch", "max_context"},
    "step": {"flops", "bytes", "weight_bytes", "kv_bytes", "t_compute_s", "t_memory_s",
             "t_launch_s", "roofline_s", "time_s", "tokens_per_s", "kernels", "bound"},
    "op": {"name", "kind", "group", "count", "flops", "bytes", "weight_bytes", "kv_bytes",
           "time_s", "bound"},
}


def _json(capsys, *args: str) -> dict:
    assert main(["eval", LLAMA, "--hw", "h100_sxm", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_json_carries_every_contract_key(capsys) -> None:
    r = _json(capsys)
    assert CONTRACT["top"] <= r.keys()
    for section in ("params", "memory", "step"):
        assert CONTRACT[section] <= r[section].keys(), section
    assert all(CONTRACT["op"] <= op.keys() for op in r["ops"])
    assert r["step"]["bound"] in {"compute", "weights", "kv", "launch"}
    assert {"B", "N", "T", "hidden", "mem_bw", "flops_bf16", "launch_overhead"} <= r["inputs"].keys()


def test_set_takes_units(capsys) -> None:
    r = _json(capsys, "--set", "N=32k", "--set", "mem_bw=4TB/s", "--set", "launch_overhead=2us")
    assert r["inputs"]["N"] == 32768                  # k = 1024 for token counts
    assert r["inputs"]["mem_bw"] == 4e12              # TB/s is decimal
    assert r["inputs"]["launch_overhead"] == pytest.approx(2e-6)
    assert r["step"]["t_memory_s"] == pytest.approx(r["step"]["bytes"] / 4e12, rel=1e-12)


def test_memory_capacity_in_gib(capsys) -> None:
    r = _json(capsys, "--set", "mem_capacity=80GiB")
    assert r["memory"]["capacity_bytes"] == 80 * 2**30


@pytest.mark.parametrize("args,message", [
    (["--set", "B=abc"], "--set B: not a number"),
    (["--set", "nosuch=3"], "--set nosuch: no such input"),
    (["--set", "mem_bw=80GiB"], "--set mem_bw: expected a bytes/s value, got bytes"),
    (["--set", "B=0"], "--set B: the value must be positive"),
    (["--set", "poll_interval=0.5"], "--set poll_interval: the value must be at least 1"),
    (["--set", "head_dim=64"], "'head_dim' is derived from other params"),
    # h100_sxm has clock 1980 MHz: one SM would carry the whole GPU's per-SM ceiling
    (["--set", "sms=1"], "--set sms: a clock needs the GPU's SM count"),
])
def test_bad_set_exits_1_with_message(capsys, args: list[str], message: str) -> None:
    assert main(["eval", LLAMA, "--hw", "h100_sxm", *args]) == 1
    assert message in capsys.readouterr().err


def test_set_clock_without_sms_exits_1(capsys, tmp_path: Path) -> None:
    # A hardware file without sms (default 1) takes no clock from --set either.
    hw = tmp_path / "h.arch"
    hw.write_text("hardware h {\n  mem_capacity = 80 GB;  mem_bw = 3.35 TB/s\n"
                  "  flops_bf16 = 989 TFLOP/s;  launch_overhead = 4 us\n}\n")
    assert main(["eval", LLAMA, "--hw", str(hw), "--set", "B=1"]) == 0
    capsys.readouterr()
    assert main(["eval", LLAMA, "--hw", str(hw), "--set", "clock=1980MHz"]) == 1
    err = capsys.readouterr().err
    assert "--set clock: a clock needs the GPU's SM count" in err and "--set sms=" in err


def test_unknown_hardware_hints(capsys) -> None:
    assert main(["eval", LLAMA, "--hw", "h100_sx"]) == 1
    assert "did you mean 'h100_sxm'?" in capsys.readouterr().err


def test_bad_arguments_exit_1(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["eval", LLAMA])  # --hw is required
    assert info.value.code == 1


def test_csv_and_markdown(capsys) -> None:
    assert main(["eval", LLAMA, "--hw", "h100_sxm", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 16 and rows[0]["name"] == "x" and rows[-1]["name"] == "logits"
    assert main(["eval", LLAMA, "--hw", "h100_sxm", "--markdown"]) == 0
    assert "| binding ceiling | weights |" in capsys.readouterr().out


def test_text_report_names_units(capsys) -> None:
    assert main(["eval", LLAMA, "--hw", "h100_sxm", "--set", "B=1", "--set", "N=4096"]) == 0
    out = capsys.readouterr().out
    assert "16.1 GB (15 GiB)" in out          # 16,060,522,496 bytes, decimal and binary
    assert "binding ceiling" in out and "weights" in out


def test_compile_leaves_hardware_symbols_free(capsys) -> None:
    assert main(["compile", LLAMA]) == 0
    out = capsys.readouterr().out
    assert "step.t_launch_s = 419*launch_overhead" in out
    assert main(["compile", LLAMA, "--hw", "h100_sxm", "--json"]) == 0
    forms = json.loads(capsys.readouterr().out)["forms"]
    assert forms["step.t_launch_s"] == "419/250000"    # 419 kernels x 4 us


def test_list_shows_shipped_specs(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("llama3_1_8b", "h100_sxm", "h200_sxm", "gh200"):
        assert name in out


def test_bad_spec_in_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.arch"
    bad.write_text("model m {\n  weights: bf61\n}\n")
    proc = subprocess.run([sys.executable, "-m", "infest.exports.cli", "eval", str(bad),
                           "--hw", "h100_sxm"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"{bad}:2:12: error: unknown dtype 'bf61'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_is_fast_to_import() -> None:
    # --help must not pull in sympy, networkx or numpy (checked by module list, not time).
    code = ("import sys; from infest.exports.cli.main import build_parser; build_parser();"
            "print(sorted(m for m in ('sympy', 'networkx', 'numpy', 'lark') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]"


def test_unwritable_output_is_an_error_not_a_traceback(capsys, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["compile", LLAMA, "--hw", "h100_sxm", "--xlsx", str(blocker / "x.xlsx")]) == 1
    assert f"error: cannot write '{blocker / 'x.xlsx'}': Not a directory" in capsys.readouterr().err


def test_out_names_what_each_verb_writes(tmp_path, capsys) -> None:
    """-o/--out is the one output flag: compile's workbook, sweep's and plan's plot,
    diagnose's report, import-hf's spec; the older spellings stay as aliases."""
    spec = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
    book, fig, report = tmp_path / "b.xlsx", tmp_path / "s.png", tmp_path / "d.md"
    assert main(["compile", spec, "--hw", "h100_sxm", "-o", str(book)]) == 0
    assert main(["sweep", spec, "--hw", "h100_sxm", "--B", "1,8", "--N", "1k,4k",
                 "--out", str(fig)]) == 0
    assert main(["diagnose", spec, "--hw", "h100_sxm", "--measured-step", "12ms",
                 "-o", str(report)]) == 0
    assert book.stat().st_size > 0 and fig.stat().st_size > 0
    assert report.read_text().startswith("# Diagnosis")
    capsys.readouterr()


def test_xlsx_and_out_naming_two_workbooks_is_an_error(tmp_path, capsys) -> None:
    code = main(["compile", str(ROOT / "specs" / "models" / "llama3_1_8b.arch"), "--hw", "h100_sxm",
                 "--xlsx", str(tmp_path / "a.xlsx"), "--out", str(tmp_path / "b.xlsx")])
    assert code == 1 and "name two workbooks" in capsys.readouterr().err
    assert not (tmp_path / "a.xlsx").exists() and not (tmp_path / "b.xlsx").exists()
