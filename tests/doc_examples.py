"""The commands shown in README.md and docs/*.md, found, run and (for shown output) regenerated.

Two kinds of fenced block carry commands:

- ```sh blocks: each line that starts with `infest ` is a command; it must exit 0. Its output
  is not shown, so it is not compared.
- ```console blocks: a line `$ infest ...` is a command and the lines after it, up to the next
  `$ ` line or the fence, are its output exactly as infest prints it. `python
  tests/regen_docs.py` rewrites them; tests/test_docs.py fails when one differs.

A block right after the line `<!-- not run -->` is skipped (install lines, long runs).
Commands run in-process (`infest.exports.cli.main`) from a scratch folder in which `specs`,
`bench`, `docs` and `tests` point at the checkout's, so they may write files freely.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKED = ("specs", "bench", "docs", "tests")
SKIP_MARK = "<!-- not run -->"
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Example:
    """One documented command: where it is written, its argv, and the output shown (if any)."""

    file: Path
    line: int           # 1-based line of the command
    argv: tuple[str, ...]
    shown: str | None   # None: a ```sh command, output not shown
    span: tuple[int, int] | None = None  # lines (0-based, end exclusive) of the shown output

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples(path: Path) -> list[Example]:
    """Every command in one file's ```sh and ```console blocks (skipped blocks left out)."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        skipped = i > 0 and lines[i - 1].strip() == SKIP_MARK
        if not skipped and m.group(1) == "sh":
            found += _sh(path, lines, i, end)
        elif not skipped and m.group(1) == "console":
            found += _console(path, lines, i, end)
        i = end + 1
    return found


def _sh(path: Path, lines: list[str], start: int, end: int) -> list[Example]:
    return [Example(path, j + 1, tuple(shlex.split(lines[j]))[1:], None)
            for j in range(start + 1, end) if lines[j].startswith("infest ")]


def _console(path: Path, lines: list[str], start: int, end: int) -> list[Example]:
    commands = [j for j in range(start + 1, end) if lines[j].startswith("$ ")]
    out = []
    for k, j in enumerate(commands):
        stop = commands[k + 1] if k + 1 < len(commands) else end
        argv = tuple(shlex.split(lines[j][2:]))
        if argv[:1] != ("infest",):
            raise ValueError(f"{path}:{j + 1}: a console block runs infest only: {lines[j]}")
        out.append(Example(path, j + 1, argv[1:], "\n".join(lines[j + 1:stop]), (j + 1, stop)))
    return out


def scratch(folder: Path) -> Path:
    """A working folder whose specs/, bench/, docs/ and tests/ are the checkout's."""
    for name in LINKED:
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    return folder


def run(example: Example, folder: Path) -> tuple[int, str]:
    """(exit code, stdout + stderr) of one command, run in-process from `folder`."""
    from infest.exports.cli import main
    out = io.StringIO()
    here = Path.cwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(list(example.argv))
            except SystemExit as done:  # argparse's --help / --version
                code = int(done.code or 0)
    finally:
        os.chdir(here)
    return code, out.getvalue().rstrip("\n")
