"""The one way infest reads a file: specs, imports, hardware, configs, CSVs, nsys exports,
kernel maps and the cache's own entries all come through `read_bytes` / `read_text`.

A file is opened non-blocking (a FIFO cannot hang the open), checked on the open
descriptor to be a regular file (no race with a path swapped after a check; `/dev/zero`
and folders are refused), read up to a named byte limit (one byte more tells "too big"
from "exactly the limit") and decoded as UTF-8. Every failure is a located SpecError that
names the path, never an OSError, MemoryError or UnicodeDecodeError traceback.

`Read` records what was read: the path as opened, where its links led, and the SHA-256 of
the bytes as read, so the cache keys its entries on exactly what the parser saw.
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from infest.dsl.errors import Span, fail, printable

MAX_SPEC_BYTES = 1 << 20   # one spec file; the largest shipped one is under 10 kB


@dataclass(frozen=True)
class Read:
    """One file as it was read: absolute path (links kept), its real path, SHA-256."""

    path: str
    real: str
    sha256: str
    size: int


def read_bytes(path: Path | str, span: Span | None = None, limit: int = MAX_SPEC_BYTES,
               limit_name: str = "MAX_SPEC_BYTES") -> bytes:
    """At most `limit` bytes of a regular file, or a located error naming the path."""
    try:
        data = _read_regular(Path(path), limit + 1)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise fail(span, f"cannot read '{printable(str(path))}': {reason}") from None
    if len(data) > limit:
        raise fail(span, f"cannot read '{printable(str(path))}': larger than {limit_name} = "
                   f"{_size(limit)}")
    return data


def read_text(path: Path | str, span: Span | None = None, limit: int = MAX_SPEC_BYTES,
              limit_name: str = "MAX_SPEC_BYTES", encoding: str = "utf-8") -> str:
    """A regular file's text (UTF-8; `utf-8-sig` drops a byte-order mark), located errors;
    a bad byte is located by its line."""
    return read_text_of(read_bytes(path, span, limit, limit_name), path, span, encoding)


def read_recorded(path: Path | str, span: Span | None = None, limit: int = MAX_SPEC_BYTES,
                  limit_name: str = "MAX_SPEC_BYTES") -> tuple[str, Read]:
    """As read_text, with the record of what was read (for the cache's key)."""
    data = read_bytes(path, span, limit, limit_name)
    text = read_text_of(data, path, span)
    return text, Read(os.path.abspath(path), os.path.realpath(path),
                      hashlib.sha256(data).hexdigest(), len(data))


def read_text_of(data: bytes, path: Path | str, span: Span | None = None,
                 encoding: str = "utf-8") -> str:
    """Bytes already read, decoded (a bad byte is located by its line)."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise fail(span or Span(str(path), line, 1, line, 2),
                   f"cannot read '{printable(str(path))}': not UTF-8 text (byte {exc.start})"
                   ) from None


def digest(path: Path | str, limit: int = MAX_SPEC_BYTES) -> str | None:
    """SHA-256 of a regular file read through the same guard, or None if it cannot be
    read (gone, not regular, too big): for the cache, a None never matches a record."""
    try:
        return hashlib.sha256(_read_regular(Path(path), limit + 1)).hexdigest()
    except (OSError, ValueError):
        return None


def _read_regular(path: Path, most: int) -> bytes:
    """At most `most` bytes of a regular file. Opened non-blocking so that a FIFO cannot
    hang the open, then checked on the open descriptor (no race with a swapped path)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file", str(path))
        return handle.read(most)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
