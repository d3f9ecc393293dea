"""Diagnostics: `file:line:col: error: message`, the offending line with a caret, a hint.

Every stage reports bad input through `SpecError`, which carries one or more
`Diagnostic`s. The CLI prints them and exits 1; nothing shows a traceback unless
`--debug` is given.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# Source text by file name, so a diagnostic can quote its line long after parsing.
_SOURCES: dict[str, str] = {}


# C0/C1 controls except tab and newline, the bidirectional marks and overrides ("Trojan
# source"), and the Unicode line and paragraph separators (a terminal or an editor may
# break a line there; the parser does not).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                      "\u202a-\u202e\u2066-\u2069]")


def source_lines(text: str) -> list[str]:
    """A source's lines as the parser counts them: split at "\\n" only (str.splitlines
    would also split at U+2028, \\x0b, \\x85 ... and quote the wrong line)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def printable(text: str) -> str:
    """Text with control characters shown as escapes (ESC -> `\\x1b`), so spec text printed
    to a terminal cannot move the cursor, retitle the window or hide what follows."""
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def register_source(filename: str, text: str) -> None:
    """Remember a file's text so diagnostics on it can show the offending line."""
    _SOURCES[filename] = text


@dataclass(frozen=True)
class Span:
    """A region of a source file: 1-based line and column, end exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    """One error: where, what, and optionally how to fix it."""

    span: Span | None
    message: str
    hint: str | None = None

    def render(self) -> str:
        """Format as `file:line:col: error: msg`, the quoted line, a caret, a hint."""
        where = f"{self.span}: " if self.span else ""
        lines = [f"{where}error: {self.message}"]
        lines += _quote(self.span)
        if self.hint:
            lines.append(f"   hint: {self.hint}")
        return printable("\n".join(lines))


def _quote(span: Span | None) -> list[str]:
    """The source line under a span with a `^~~~` marker, or nothing if unknown."""
    if span is None or span.file not in _SOURCES:
        return []
    text_lines = source_lines(_SOURCES[span.file])
    if not 1 <= span.line <= len(text_lines):
        return []
    text = text_lines[span.line - 1].expandtabs(1)
    end = span.end_col if span.end_line == span.line else len(text) + 1
    width = max(1, end - span.col)
    gutter = " " * len(str(span.line))
    marker = " " * (span.col - 1) + "^" + "~" * (width - 1)
    return [f"   {span.line} | {text}", f"   {gutter} | {marker}"]


@dataclass
class SpecError(Exception):
    """Bad input: a spec, a hardware file or a command-line argument."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


def fail(span: Span | None, message: str, hint: str | None = None) -> SpecError:
    """Build a single-diagnostic SpecError (to be raised by the caller)."""
    return SpecError([Diagnostic(span, message, hint)])


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """A 'did you mean ...?' hint for the closest candidate, if any is close."""
    best = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{best[0]}'?" if best else None


class Collector:
    """Gathers semantic errors so one run reports them all together."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def add(self, err: SpecError | Sequence[Diagnostic]) -> None:
        """Record the diagnostics of an error."""
        diags = err.diagnostics if isinstance(err, SpecError) else err
        self.diagnostics.extend(diags)

    def raise_if_any(self) -> None:
        """Raise one SpecError holding everything collected so far."""
        if self.diagnostics:
            raise SpecError(list(self.diagnostics))
