"""Data-driven error tests (mypy style): each file in tests/errors/ marks the line that
must be reported with `# E: message` (and optionally `| hint`). Every expected error
must be reported at that line, and nothing else."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from infest.compiler.api import load_hardware, load_model
from infest.compiler.load.loader import load_program
from infest.dsl.errors import SpecError

ERRORS = Path(__file__).parent / "errors"
_MARK = re.compile(r"#\s*E:\s*(?P<msg>[^|]*?)\s*(?:\|\s*(?P<hint>.*?))?\s*$")


def _expected(path: Path) -> list[tuple[int, str, str | None]]:
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        m = _MARK.search(line)
        if m:
            out.append((number, m.group("msg"), m.group("hint")))
    return out


def _reported(path: Path) -> list[tuple[int, str, str | None]]:
    try:
        program = load_program(path)
        if program.hardware and not program.models:
            load_hardware(next(iter(program.hardware)), program)
        else:
            load_model(path, program=program)
    except SpecError as exc:
        folder = f"{path.parent}/"  # messages name files as given; the marks are relative
        return [(d.span.line if d.span else 0, d.message.replace(folder, ""), d.hint)
                for d in exc.diagnostics]
    return []


@pytest.mark.parametrize("path", sorted(ERRORS.glob("*.arch")), ids=lambda p: p.stem)
def test_error_file(path: Path) -> None:
    expected = _expected(path)
    assert expected, f"{path.name} marks no expected error"
    reported = _reported(path)
    assert [(line, msg) for line, msg, _ in reported] == [(line, msg) for line, msg, _ in expected]
    for (_, _, hint), (_, _, want) in zip(reported, expected):
        if want:
            assert hint == want


def test_rendered_diagnostic_has_location_line_caret_and_hint(tmp_path: Path) -> None:
    spec = tmp_path / "foo.arch"
    spec.write_text("model m {\n  hidden = 64\n  weights: bf61\n  x = embed(tokens, 10 -> hidden)\n}\n")
    with pytest.raises(SpecError) as info:
        load_model(spec)
    assert str(info.value) == (
        f"{spec}:3:12: error: unknown dtype 'bf61'\n"
        "   3 |   weights: bf61\n"
        "     |            ^~~~\n"
        "   hint: did you mean 'bf16'?")


def test_import_cycle_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.arch").write_text('import "b.arch"\nmodel m { x = embed(tokens, 2 -> 2) }\n')
    (tmp_path / "b.arch").write_text('import "a.arch"\n')
    with pytest.raises(SpecError, match="import cycle: a.arch -> b.arch -> a.arch"):
        load_model(tmp_path / "a.arch")


def test_missing_import_is_located(tmp_path: Path) -> None:
    (tmp_path / "a.arch").write_text('import "nope.arch"\n')
    with pytest.raises(SpecError) as info:
        load_model(tmp_path / "a.arch")
    assert f"{tmp_path / 'a.arch'}:1:1: error: cannot find imported file 'nope.arch'" in str(info.value)


def test_imports_bring_in_hardware_and_params_stay_local(tmp_path: Path) -> None:
    (tmp_path / "hw.arch").write_text(
        "hardware tiny { mem_capacity = 1 GB; mem_bw = 1 TB/s; launch_overhead = 1 us\n"
        "  flops_bf16 = 1 TFLOP/s }\n")
    (tmp_path / "m.arch").write_text(
        'import "hw.arch"\nmodel m { d = 8\n x = embed(tokens, 4 -> d) }\n')
    from infest.compiler.api import analyze
    result = analyze(tmp_path / "m.arch", hw="tiny").evaluate()
    assert result["hardware"] == "tiny"
    assert result["params"]["total"] == 4 * 8  # the embedding table only
