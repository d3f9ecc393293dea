"""The one way infest writes a file: workbooks, specs, diagnoses, calibrated hardware and
plots all go through `write_output`.

The content goes to a temporary file in the target's own folder and replaces the target
by one atomic rename only once it is complete: a full disk or a crash leaves the old file
(or none), never a truncated one. An existing target that is not a regular file
(/dev/null, a terminal, a pipe) is written through instead: renaming over it would replace
the device. A target that is one of the command's inputs (the spec,
an import, the hardware, the config or CSV read) is refused before anything is written.
Every error names the path.
"""
from __future__ import annotations

import io
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterable, Union

from infest.dsl.errors import fail, printable

Content = Union[str, bytes, Callable[[IO[bytes]], None]]


def write_output(path: Path | str, content: Content, inputs: Iterable[Path | str] = (),
                 flag: str = "the output") -> Path:
    """Write text, bytes or what `content(handle)` writes to `path`, atomically; refuse
    to overwrite any of `inputs`. Returns the path."""
    target = Path(path)
    refuse_inputs(target, inputs, flag)
    data = _bytes(content)  # rendered before any file is opened: a failure writes nothing
    if _special(target):
        return _write_through(target, data)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".",
                                   prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise _error(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # as a plain open() would create it
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise _error(target, exc) from None
    except BaseException:
        _remove(tmp)
        raise
    return target


def analysis_inputs(analysis: object) -> list[str]:
    """Every file an Analysis read: the spec, its imports, the hardware (as opened and
    where links led)."""
    reads = getattr(analysis, "reads", ())
    return [r.path for r in reads] + [r.real for r in reads] + [
        str(p) for p in getattr(analysis, "files", ())]


def argument_inputs(args: object, outputs: Iterable[str]) -> list[str]:
    """The command-line arguments that name existing files, the output flags excepted:
    a command's own inputs (a CSV, a config, a kernel map, a spec)."""
    found = []
    for key, value in vars(args).items():
        values = value if isinstance(value, list) else [value]
        found += [v for v in values if key not in outputs and isinstance(v, str) and v
                  and os.path.isfile(v)]
    return found


def _special(target: Path) -> bool:
    """An existing target that is not a regular file (/dev/null, /dev/stdout, a pipe): it
    is written through, never renamed over (that would replace the device itself)."""
    try:
        return not stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        return False


def _write_through(target: Path, data: bytes) -> Path:
    """Write into an existing special file (opened without blocking, then blocking)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise _error(target, exc) from None
    return target


def refuse_inputs(target: Path, inputs: Iterable[Path | str], flag: str) -> None:
    """A SpecError when `target` is (the same file as) one of the command's inputs."""
    for given in inputs:
        if _same_file(target, Path(given)):
            raise fail(None, f"{flag} '{printable(str(target))}' is an input of this command "
                       f"({printable(str(given))}): it would be overwritten",
                       "write to another path")


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def _bytes(content: Content) -> bytes:
    """Text as UTF-8, bytes as they are, or what a writer (a workbook's or a figure's
    save) writes into memory."""
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, bytes):
        return content
    buffer = io.BytesIO()
    content(buffer)
    return buffer.getvalue()


def _error(target: Path, exc: OSError):
    return fail(None, f"cannot write '{printable(str(target))}': {exc.strerror or exc}",
                "nothing was written; a file already there is unchanged")


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask
