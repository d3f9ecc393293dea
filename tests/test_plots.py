"""Plots render to non-empty PNG/SVG files, alone and as one figure, from the CLI too."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.exports.cli.main import main
from infest.exports.plots.plots import PLOT_KINDS, write_plot

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


def _panel(fig, title_start: str):
    return next(ax for ax in fig.axes if ax.get_title().startswith(title_start))


def test_time_and_throughput_panels_show_every_batch_asked_for(llama) -> None:
    from infest.exports.plots.plots import build_figure
    fig = build_figure(llama, {}, BS, NS, "time")
    for title in ("Step time vs N", "Throughput vs N"):
        ax = _panel(fig, title)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == [f"B={b}" for b in BS]  # all five, in order, none dropped
    time_ax = _panel(fig, "Step time vs N")
    assert time_ax.get_ylabel() == "step time with launch floor (ms)"
    assert "lower bound" not in time_ax.get_ylabel()


def test_throughput_tradeoff_draws_every_context(llama) -> None:
    from infest.exports.plots.plots import build_figure
    fig = build_figure(llama, {}, BS, NS, "throughput")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == [f"N={n}" for n in NS]


def test_roofline_names_only_the_ops_that_carry_the_step(llama) -> None:
    from infest.exports.plots.plots import LABELS, build_figure
    fig = build_figure(llama, {}, BS, NS, "roofline")
    labels = [t.get_text() for t in fig.axes[0].texts]
    # Llama 3.1 8B decode at B=1: the MLP's g, u, d (3 x 117 MB of weights per layer) and
    # the attention projections carry the step; 21 ops would otherwise each get a label.
    assert 1 <= len(labels) <= LABELS
    assert any("g" in text.split(", ") for text in labels)
    assert not any("rmsnorm" in text for text in labels)  # 25 kB per call: not worth a label
