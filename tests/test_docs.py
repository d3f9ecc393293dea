"""Every documented command runs: each `infest ...` in README.md and docs/*.md exits 0, and
every output shown under a `$ infest ...` line is what infest prints now
(`python tests/regen_docs.py` rewrites them). Links to files point at files the repo has."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_examples import ROOT, Example, doc_files, examples, run, scratch

EXAMPLES = [e for path in doc_files() for e in examples(path)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scratch(tmp_path_factory.mktemp("docs"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_documented_command_runs(example: Example, folder: Path) -> None:
    code, printed = run(example, folder)
    assert code == 0, f"{example.where}: infest {' '.join(example.argv)}\n{printed}"
    if example.shown is not None:
        assert printed == example.shown, (f"{example.where}: shown output is stale; "
                                          "run `python tests/regen_docs.py`")


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_links_point_at_files_the_repo_has(path: Path) -> None:
    missing = [target for target in LINK.findall(path.read_text())
               if "://" not in target and not (path.parent / target).exists()]
    assert missing == []


def test_the_tour_spec_is_the_file_and_matches_its_publisher() -> None:
    """The README shows docs/tour.arch verbatim, and it counts Llama 3.2 1B's published
    1.24B: embed 128,256 x 2,048 = 262,668,288 (the head is tied: no params of its own);
    a layer q 2048x2048 + k, v 2048x512 + o 2048x2048 = 10,485,760, MLP 3 x 2048 x 8192 =
    50,331,648, two norms 4,096 -> 60,821,504 x 16 = 973,144,064; final norm 2,048;
    total 1,235,814,400."""
    from infest.compiler.api import analyze
    tour = ROOT / "docs" / "tour.arch"
    assert tour.read_text() in (ROOT / "README.md").read_text()
    params = analyze(tour, hw="h100_sxm").evaluate({})["params"]
    assert params["total"] == 1_235_814_400
