"""Render a workbook's sheets and charts to PNG through real LibreOffice, to look at them.

    python bench/render_workbook.py [SPEC] [HW] [OUT_DIR]

Writes OUT_DIR/book.xlsx, OUT_DIR/book.pdf and OUT_DIR/page-N.png (needs soffice and
pdftoppm from poppler-utils). A developer tool: the tests compare numbers, this shows
whether the charts and sheets read well.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from infest.compiler.api import analyze
from infest.exports.libreoffice import to_pdf
from infest.exports.xlsx import write_workbook


def main(argv: list[str]) -> int:
    """Write, render to PDF, split into PNG pages; print the page paths."""
    spec = argv[0] if argv else "specs/models/llama3_1_8b.arch"
    hw = argv[1] if len(argv) > 1 else "h100_sxm"
    out = Path(argv[2] if len(argv) > 2 else "out/render")
    out.mkdir(parents=True, exist_ok=True)
    book = write_workbook(analyze(spec, hw=hw), out / "book.xlsx", {})
    pdf = to_pdf(book, out / "pdf")
    if shutil.which("pdftoppm") is None:
        print(f"wrote {pdf}; install poppler-utils for PNG pages")
        return 0
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(out / "page")], check=True)
    for page in sorted(out.glob("page-*.png")):
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
