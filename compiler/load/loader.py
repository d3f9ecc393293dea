"""Find, read and parse spec files (following imports); look up shipped specs by name.

Every file is read through `read_text`: regular files only (a FIFO or `/dev/zero` would
block or never end), at most a named number of bytes, and specs must be `.arch` files, so
a stray `import "/etc/passwd"` never gets as far as quoting someone else's file.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from infest.dsl import ast
from infest.dsl.errors import SpecError, Span, did_you_mean, fail
from infest.dsl.parser import parse


@dataclass
class Program:
    """Every model and hardware block reachable from one file, by name."""

    models: dict[str, tuple[ast.Model, str]] = field(default_factory=dict)
    hardware: dict[str, tuple[ast.Hardware, str]] = field(default_factory=dict)
    own_models: list[str] = field(default_factory=list)  # defined in the root file
    files: list[Path] = field(default_factory=list)      # every file read, resolved


def shipped_dir() -> Path:
    """The folder of shipped specs (inside the installed package)."""
    return Path(str(resources.files("infest.specs")))


def shipped(kind: str) -> dict[str, Path]:
    """Shipped spec files of a kind ('models' or 'hardware') by stem."""
    return {p.stem: p for p in sorted((shipped_dir() / kind).glob("*.arch"))}


MAX_SPEC_BYTES = 1 << 20   # one spec file; the largest shipped one is under 10 kB
MAX_IMPORT_DEPTH = 32      # files on one import chain


def read_text(path: Path, span: Span | None = None, limit: int = MAX_SPEC_BYTES,
              limit_name: str = "MAX_SPEC_BYTES") -> str:
    """A regular file's UTF-8 text of at most `limit` bytes, or a located error."""
    try:
        data = _read_regular(path, limit + 1)  # one byte more tells "too big" from "exactly"
        if len(data) > limit:
            raise fail(span, f"cannot read '{path}': larger than {limit_name} = {_size(limit)}")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise fail(span, f"cannot read '{path}': {reason}") from None


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


def resolve_spec(path: Path) -> Path:
    """A spec path as given, else the shipped spec it names (`llama3_1_8b`, or
    `specs/models/llama3_1_8b.arch` run from outside the checkout)."""
    if path.exists():
        return path
    for kind in ("models", "hardware"):
        found = shipped(kind).get(path.stem)
        if found is not None and (path.suffix in ("", ".arch")):
            return found
    raise fail(None, f"cannot read '{path}': no such file",
               did_you_mean(path.stem, shipped("models")) or "see `infest list` for shipped specs")


def load_program(path: Path) -> Program:
    """Parse a file and its imports (each once; an import cycle is an error)."""
    program = Program()
    _load(resolve_spec(Path(path)), program, stack=[], done=set(), root=True)
    return program


def _load(path: Path, program: Program, stack: list[Path], done: set[Path],
          root: bool = False, span: Span | None = None) -> None:
    resolved = path.resolve()
    if path.suffix != ".arch":
        raise fail(span, f"cannot read '{path}': not a .arch file",
                   "specs, hardware files and imports are .arch files")
    if len(stack) >= MAX_IMPORT_DEPTH:
        raise fail(span, f"imports nested deeper than MAX_IMPORT_DEPTH = {MAX_IMPORT_DEPTH}",
                   "import the shared files from one top-level file instead")
    if resolved in stack:
        chain = " -> ".join(p.name for p in stack + [resolved])
        raise fail(span, f"import cycle: {chain}")
    if resolved in done:
        return
    spec = parse(read_text(path, span), str(path))
    program.files.append(resolved)
    stack.append(resolved)
    for item in spec.items:
        if isinstance(item, ast.Import):
            _load(_import_path(path, item), program, stack, done, span=item.span)
        else:
            _register(item, str(path), program, root)
    stack.pop()
    done.add(resolved)


def _import_path(importer: Path, item: ast.Import) -> Path:
    """Relative to the importing file, else a shipped spec of that relative name."""
    local = importer.parent / item.path
    if local.exists():
        return local
    for candidate in (shipped_dir() / item.path, shipped_dir() / "hardware" / item.path,
                      shipped_dir() / "models" / item.path):
        if candidate.exists():
            return candidate
    raise fail(item.span, f"cannot find imported file '{item.path}'",
               f"paths are relative to {importer.parent or '.'}")


def _register(item: ast.Model | ast.Hardware, file: str, program: Program, root: bool) -> None:
    table = program.models if isinstance(item, ast.Model) else program.hardware
    if item.name in table:
        first = table[item.name][0].name_span
        raise fail(item.name_span, f"'{item.name}' is defined twice", f"first at {first}")
    table[item.name] = (item, file)  # type: ignore[assignment]
    if root and isinstance(item, ast.Model):
        program.own_models.append(item.name)


def pick_model(program: Program, name: str | None, path: Path) -> tuple[ast.Model, str]:
    """The model to compile: the named one, else the only one the file defines."""
    if name is not None:
        if name not in program.models:
            raise SpecError([_no_such("model", name, program.models, path)])
        return program.models[name]
    candidates = program.own_models or list(program.models)
    if not candidates:
        raise fail(None, f"{path}: defines no model", "a spec needs a `model name { ... }` block")
    if len(candidates) > 1:
        raise fail(None, f"{path} defines several models: {', '.join(candidates)}",
                   "choose one with --model NAME")
    return program.models[candidates[0]]


def _no_such(kind: str, name: str, table: dict, path: Path):
    from infest.dsl.errors import Diagnostic
    hint = did_you_mean(name, table) or f"{path} has: {', '.join(table) or 'none'}"
    return Diagnostic(None, f"no {kind} named '{name}'", hint)
