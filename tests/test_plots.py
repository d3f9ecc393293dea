"""Plots render to non-empty PNG/SVG files, alone and as one figure, from the CLI too."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.exports.cli import main
from infest.exports.plots import PLOT_KINDS, write_plot

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BS, NS = [1, 4, 16, 64, 256], [1024, 4096, 16384, 65536]


@pytest.fixture(scope="module")
def llama():
    return analyze(LLAMA, hw="h100_sxm")


@pytest.mark.parametrize("kind", [k for k in PLOT_KINDS if k != "all"])
def test_each_kind_renders_png(llama, tmp_path: Path, kind: str) -> None:
    path = write_plot(llama, {}, BS, NS, tmp_path / f"{kind}.png", kind)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_all_panels_svg_with_one_value_axes(llama, tmp_path: Path) -> None:
    # One B and one N: the line panels fall back to default ranges instead of a dot.
    path = write_plot(llama, {}, [8], [4096], tmp_path / "all.svg")
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and len(text) > 50_000


def test_cli_sweep_plot(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep.png"
    code = main(["sweep", LLAMA, "--hw", "h100_sxm", "--phase", "prefill", "--B", "1..8:x2",
                 "--N", "512..8k:x2", "--plot", str(out), "--plot-kind", "all"])
    assert code == 0
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert "B \\ N" in capsys.readouterr().out   # the table still prints
