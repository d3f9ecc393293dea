"""How `infest import-hf` fares on the collection of published configs.

    python bench/hf_collection.py [--failures]

One row per config of tests/fixtures/hf/collection/MANIFEST.csv: its family, whether it
imports, infest's total and active params against the publisher's stated figures (less
the tables a figure leaves out, plus the held groups it counts: `compared` says which, e.g.
`LM + vision`), and whether they lie within the stated tolerance; then two counts, apart:
the configs with a published total that import within it, and those without one that
import. `--failures` adds each error's first line.
The checks are tests/hf_collection.py's, the ones tests/test_hf_collection.py asserts.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hf_collection import Entry, Outcome, outcome, problems, read_manifest  # noqa: E402

HEADERS = ("config", "family", "imported", "total", "stated", "active", "stated", "within",
           "compared")


def row(entry: Entry, result: Outcome) -> tuple[str, ...]:
    """The table row of one config."""
    if result.counts is None:
        verdict = "crash" if result.crash else "error"
        return (entry.name, entry.model_type, verdict, "", entry.total_params, "",
                entry.active_params, "", "")
    total, active = result.counts
    within = "no" if problems(entry, result.counts, result.groups) else "yes"
    if not (entry.total_params or entry.active_params):
        within = "n/a"
    held = sum((result.groups or {}).get(g, 0) for g in ("vision", "mtp"))
    shown = f"{total / 1e9:.2f}B" + (f" +{held / 1e9:.2f}B held" if held else "")
    return (entry.name, entry.model_type, "yes", shown, entry.total_params,
            f"{active / 1e9:.2f}B", entry.active_params, within,
            entry.compared() if entry.total_params else "")


def table(rows: list[tuple[str, ...]]) -> str:
    """Rows as aligned text columns under HEADERS."""
    widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [HEADERS, *rows]]
    return "\n".join(lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:])


def main(argv: list[str] | None = None) -> int:
    """Print the table (and, with --failures, why each failing config fails)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", action="store_true", help="print each error too")
    args = parser.parse_args(argv)
    entries = read_manifest()
    with tempfile.TemporaryDirectory() as workdir:
        results = [outcome(e, Path(workdir)) for e in entries]
    rows = [row(e, r) for e, r in zip(entries, results)]
    print(table(rows))
    stated = [r for r in rows if r[4] or r[6]]
    unstated = [r for r in rows if not (r[4] or r[6])]
    within = sum(r[2] == "yes" and r[7] == "yes" for r in stated)
    imported = sum(r[2] == "yes" for r in unstated)
    print(f"\n{within} of {len(stated)} configs with a published total import within it; "
          f"{imported} of {len(unstated)} without one import; {within + imported} of "
          f"{len(rows)} in all")
    if args.failures:
        for entry, result in zip(entries, results):
            text = result.crash or result.error
            if text:
                print(f"{entry.name}: {text.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
