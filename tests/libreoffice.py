"""Headless LibreOffice: recalculate workbooks and render them to PDF.

openpyxl writes formulas without cached values, so a workbook's numbers exist
only once a spreadsheet engine has computed them.  ``recalculate`` asks a real
LibreOffice to load the file, recompute every formula and save a copy whose
cells carry the values (readable with ``openpyxl.load_workbook(data_only=True)``).

Each run uses its own throw-away user profile (``-env:UserInstallation``) so
that runs never share state or lock each other out, and so the profile can
force recalculation on load: by default LibreOffice trusts the cached values
stored in an .xlsx, which openpyxl leaves empty.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

__all__ = [
    "LibreOfficeError",
    "SofficeNotFound",
    "find_soffice",
    "recalculate",
    "to_pdf",
]

DEFAULT_TIMEOUT_S = 180.0

_USUAL_PATHS = (
    "/usr/lib/libreoffice/program/soffice",
    "/usr/local/lib/libreoffice/program/soffice",
    "/opt/libreoffice/program/soffice",
    "/snap/bin/libreoffice",
    "/Applications/LibreOffice.app/Contents/MacOS/soffice",
)

# Calc's "recalculation on file load" settings: 0 = always recalculate,
# for OOXML (.xlsx) and ODF files alike.
_RECALC_ALWAYS_XCU = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry"
           xmlns:xs="http://www.w3.org/2001/XMLSchema"
           xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load">
  <prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>0</value></prop>
</item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load">
  <prop oor:name="ODFRecalcMode" oor:op="fuse"><value>0</value></prop>
</item>
</oor:items>
"""


class LibreOfficeError(RuntimeError):
    """LibreOffice failed, timed out, or produced no output file."""


class SofficeNotFound(LibreOfficeError):
    """No LibreOffice executable could be found."""


def find_soffice() -> str | None:
    """Path of the LibreOffice executable, or None when it is not installed.

    Looks on PATH for ``soffice`` and ``libreoffice``, then in the usual
    install locations.
    """
    for name in ("soffice", "libreoffice"):
        found = shutil.which(name)
        if found:
            return found
    for candidate in _USUAL_PATHS:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def recalculate(xlsx: Path, out_dir: Path, *, soffice: str | None = None,
                timeout: float = DEFAULT_TIMEOUT_S) -> Path:
    """Recalculate every formula of ``xlsx``; return the path of the new copy.

    The copy is ``out_dir / xlsx.name`` (``out_dir`` must differ from the
    input's folder, which would otherwise be overwritten).  Raises
    ``SofficeNotFound`` or ``LibreOfficeError``.
    """
    return _convert(Path(xlsx), Path(out_dir), "xlsx", soffice, timeout)


def to_pdf(xlsx: Path, out_dir: Path, *, soffice: str | None = None,
           timeout: float = DEFAULT_TIMEOUT_S) -> Path:
    """Render ``xlsx`` (recalculated) to ``out_dir / <stem>.pdf``; return that path."""
    return _convert(Path(xlsx), Path(out_dir), "pdf", soffice, timeout)


def _convert(src: Path, out_dir: Path, fmt: str, soffice: str | None,
             timeout: float) -> Path:
    """Run one ``soffice --convert-to`` with a private, recalculating profile."""
    exe = soffice or find_soffice()
    if exe is None:
        raise SofficeNotFound("LibreOffice (soffice) is not installed or not on PATH")
    if not src.is_file():
        raise LibreOfficeError(f"no such workbook: {src}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{src.stem}.{fmt}"
    if target.resolve() == src.resolve():
        raise LibreOfficeError(f"converting {src} into its own folder would overwrite it")
    target.unlink(missing_ok=True)  # a stale copy must not pass for a fresh one
    with tempfile.TemporaryDirectory(prefix="infest-lo-") as profile:
        _write_profile(Path(profile))
        output = _run(_command(exe, Path(profile), fmt, src, out_dir), timeout)
    if not target.is_file():
        raise LibreOfficeError(f"LibreOffice wrote no {target}:\n{output}")
    return target


def _command(exe: str, profile: Path, fmt: str, src: Path, out_dir: Path) -> list[str]:
    """The soffice command line for one headless conversion."""
    return [exe, "--headless", "--norestore", "--nologo", "--nodefault",
            f"-env:UserInstallation={profile.as_uri()}",
            "--convert-to", fmt, "--outdir", str(out_dir), str(src)]


def _write_profile(profile: Path) -> None:
    """Seed a fresh profile with the settings that force recalculation on load."""
    user = profile / "user"
    user.mkdir(parents=True, exist_ok=True)
    (user / "registrymodifications.xcu").write_text(_RECALC_ALWAYS_XCU, encoding="utf-8")


def _run(command: list[str], timeout: float) -> str:
    """Run ``command``; return its output, killing its whole process group on timeout."""
    # soffice is a launcher script that starts soffice.bin: a new session lets a
    # timeout kill both instead of leaving an orphaned office behind.
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    except OSError as error:
        raise LibreOfficeError(f"cannot start {command[0]}: {error}") from error
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise LibreOfficeError(f"LibreOffice timed out after {timeout:g} s") from None
    if proc.returncode != 0:
        raise LibreOfficeError(f"LibreOffice exited with {proc.returncode}:\n{output}")
    return output
