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
