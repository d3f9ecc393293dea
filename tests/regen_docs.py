"""Rewrite the output shown under every `$ infest ...` line of README.md and docs/*.md.

    python tests/regen_docs.py

Runs each command (tests/doc_examples.py says which blocks count) and replaces the lines
below it with what infest prints now. tests/test_docs.py fails until this is re-run after
a change that moves a shown number.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_examples import doc_files, examples, run, scratch  # noqa: E402


def regenerate(path: Path, folder: Path) -> int:
    """Rewrite one file's console outputs; the number of commands whose output changed."""
    lines = path.read_text().splitlines()
    changed = 0
    for ex in reversed([e for e in examples(path) if e.span is not None]):
        code, printed = run(ex, folder)
        if code != 0:
            raise SystemExit(f"{ex.where}: infest {' '.join(ex.argv)} exited {code}:\n{printed}")
        if printed != ex.shown:
            start, stop = ex.span
            lines[start:stop] = printed.splitlines()
            changed += 1
    if changed:
        path.write_text("\n".join(lines) + "\n")
    return changed


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = scratch(Path(tmp))
        for path in doc_files():
            n = regenerate(path, folder)
            print(f"{path.name}: {n} output(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
