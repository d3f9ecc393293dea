"""Render a workbook's sheets and charts to PNG through real LibreOffice, to look at them.

    python bench/render_workbook.py [SPEC] [HW] [OUT_DIR]

Writes OUT_DIR/book.xlsx, OUT_DIR/pdf/book.pdf and OUT_DIR/<n>-<sheet>.png, one page per
sheet (needs soffice, and pypdfium2 or pdftoppm from poppler-utils). A developer tool:
the tests compare numbers, this shows whether the charts and sheets read well.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import openpyxl

from infest.compiler.api import analyze
from infest.exports.workbook.xlsx import write_workbook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test helpers
from libreoffice import to_pdf  # noqa: E402


def main(argv: list[str]) -> int:
    """Write, render to PDF, split into PNG pages; print the page paths."""
    spec = argv[0] if argv else "specs/models/llama3_1_8b.arch"
    hw = argv[1] if len(argv) > 1 else "h100_sxm"
    out = Path(argv[2] if len(argv) > 2 else "out/render")
    out.mkdir(parents=True, exist_ok=True)
    decode = analyze(spec, hw=hw)
    book = write_workbook(decode, out / "book.xlsx", {}, decode)
    pdf = to_pdf(book, out / "pdf")
    sheets = [ws.title.lower().replace(" ", "-") for ws in openpyxl.load_workbook(book).worksheets]
    for page in _pages(pdf, out, [f"{i + 1}-{name}" for i, name in enumerate(sheets)]):
        print(page)
    return 0


def _pages(pdf: Path, out: Path, names: list[str]) -> list[Path]:
    """One PNG per page (the workbook prints one page per sheet), named after its sheet."""
    try:
        import pypdfium2
    except ImportError:
        if shutil.which("pdftoppm") is None:
            print(f"wrote {pdf}; install pypdfium2 or poppler-utils for PNG pages")
            return []
        subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(out / "page")], check=True)
        return sorted(out.glob("page-*.png"))
    paths = []
    for i, page in enumerate(pypdfium2.PdfDocument(str(pdf))):
        path = out / f"{names[i] if i < len(names) else f'page-{i + 1}'}.png"
        page.render(scale=SCALE).to_pil().save(path, optimize=True)
        paths.append(path)
    return paths


SCALE = 1.4  # pixels per PDF point: legible text, pictures of ~100 KB


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
