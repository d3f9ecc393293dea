"""Find, read and parse spec files (following imports); look up shipped specs by name.

Every file is read through `read_text`: regular files only (a FIFO or `/dev/zero` would
block or never end), at most a named number of bytes, and specs must be `.arch` files, so
a stray `import "/etc/passwd"` never gets as far as quoting someone else's file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from infest.compiler.load import files
from infest.compiler.load.files import MAX_SPEC_BYTES, Read
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
    reads: list[Read] = field(default_factory=list)      # what the parser read (cache keys)
    lookups: list[Lookup] = field(default_factory=list)  # each name -> the file it found
    code: int = 0                                        # code characters parsed so far


@dataclass(frozen=True)
class Lookup:
    """One name resolved to a file: an import (`folder` the importer's) or a spec or
    hardware argument (`folder` the working folder). `found` is the absolute path chosen
    (links kept) or "" where nothing was found; replaying the lookup must find it again."""

    kind: str      # "import", "spec" or "hardware"
    folder: str
    name: str
    found: str

    def still_holds(self) -> bool:
        """The same name, looked up again now, finds the same file."""
        try:
            return _lookup_now(self) == self.found
        except Exception:  # noqa: BLE001 -- anything unexpected: not the same answer
            return False


def shipped_dir() -> Path:
    """The folder of shipped specs (inside the installed package)."""
    return Path(str(resources.files("infest.specs")))


def shipped(kind: str) -> dict[str, Path]:
    """Shipped spec files of a kind ('models' or 'hardware') by stem."""
    return {p.stem: p for p in sorted((shipped_dir() / kind).glob("*.arch"))}


MAX_IMPORT_DEPTH = 32      # files on one import chain
# All files one job parses together (a spec, its imports, a hardware file): parsing runs
# at roughly 0.2 MB/s, so this keeps a job's parsing within a few seconds.
MAX_PROGRAM_BYTES = 1 << 20
# Parsing costs per byte of code, not of comments (about 50-100 kB of code per second): the
# code of one job's files (each line up to its `#`, blanks dropped) is bounded too.
MAX_PROGRAM_CODE = 256 << 10


def read_text(path: Path, span: Span | None = None, limit: int = MAX_SPEC_BYTES,
              limit_name: str = "MAX_SPEC_BYTES") -> str:
    """A regular file's UTF-8 text of at most `limit` bytes, or a located error (the one
    read helper, compiler/load/files.py)."""
    return files.read_text(path, span, limit, limit_name)


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
    root = resolve_spec(Path(path))
    program.lookups.append(Lookup("spec", os.getcwd(), str(path), os.path.abspath(root)))
    _load(root, program, stack=[], done=set(), root=True)
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
    text, read = files.read_recorded(path, span, *_bytes_left(program))
    program.code += _check_code(text, program.code, path, span)
    spec = parse(text, str(path))
    program.files.append(resolved)
    program.reads.append(read)
    stack.append(resolved)
    for item in spec.items:
        if isinstance(item, ast.Import):
            found = _import_path(path, item)
            program.lookups.append(Lookup("import", os.path.abspath(path.parent), item.path,
                                          os.path.abspath(found)))
            _load(found, program, stack, done, span=item.span)
        else:
            _register(item, str(path), program, root)
    stack.pop()
    done.add(resolved)


def _check_code(text: str, spent: int, path: Path, span: Span | None) -> int:
    """The code characters of a file (what parsing costs), refused past MAX_PROGRAM_CODE
    for the job before the parser starts."""
    code = sum(len("".join(line.split("#", 1)[0].split())) for line in text.split("\n"))
    if spent + code > MAX_PROGRAM_CODE:
        raise fail(span, f"cannot read '{path}': {spent + code:,} characters of code in this "
                   f"job's files, more than MAX_PROGRAM_CODE = {MAX_PROGRAM_CODE:,}",
                   "a spec is a few kB: `repeat` multiplies layers without writing them out")
    return code


def _bytes_left(program: Program) -> tuple[int, str]:
    """The byte limit for the next file: MAX_SPEC_BYTES, or less where the job's files
    already read leave less of MAX_PROGRAM_BYTES (the limit named as the error says it)."""
    spent = sum(r.size for r in program.reads)
    if MAX_PROGRAM_BYTES - spent >= MAX_SPEC_BYTES:
        return MAX_SPEC_BYTES, "MAX_SPEC_BYTES"
    return (max(0, MAX_PROGRAM_BYTES - spent),
            f"what MAX_PROGRAM_BYTES ({MAX_PROGRAM_BYTES} bytes, all files of one job) "
            f"leaves after {spent} bytes already read")


def _import_path(importer: Path, item: ast.Import) -> Path:
    """Relative to the importing file, else a shipped spec of that relative name."""
    found = find_import(importer.parent, item.path)
    if found is None:
        raise fail(item.span, f"cannot find imported file '{item.path}'",
                   f"paths are relative to {importer.parent or '.'}")
    return found


def find_import(folder: Path, name: str) -> Path | None:
    """The file an import names: beside the importer, else shipped (the first that exists)."""
    for candidate in (folder / name, shipped_dir() / name, shipped_dir() / "hardware" / name,
                      shipped_dir() / "models" / name):
        if candidate.exists():
            return candidate
    return None


def find_hardware(name: str) -> Path | None:
    """A --hw argument's file: a shipped hardware name wins, else a path that exists."""
    path = shipped("hardware").get(name) or Path(name)
    return path if path.exists() else None


def _lookup_now(lookup: Lookup) -> str:
    """Where a recorded lookup leads today ("" where it finds nothing)."""
    if lookup.kind == "import":
        found = find_import(Path(lookup.folder), lookup.name)
    elif lookup.kind == "hardware":
        found = find_hardware(lookup.name)
    else:
        found = resolve_spec(Path(lookup.folder) / lookup.name)
    return os.path.abspath(found) if found is not None else ""


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
