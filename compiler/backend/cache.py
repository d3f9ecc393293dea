"""A private per-user cache of Runners, so `eval` and `sweep` of an unchanged spec start
instantly (no sympy, no parser: the generated code and the names are read back).

An entry is one JSON file, `<key>.json`, holding the Runner (compiler/backend/runner.py) with its
generated numpy source, and the SHA-256 of every file it was built from (the spec, its
imports, the hardware file). The key covers infest's own compiler source (each file's
size and modification time), the arguments that shape the forms (spec, hardware, phase,
model, policy, engine) and the spec's content; on every read each recorded file is
hashed again, so editing an import or a hardware file rebuilds the entry.

Safety: the folder is `$INFEST_CACHE_DIR`, else `$XDG_CACHE_HOME/infest`, else
`~/.cache/infest`; it is created with mode 0700 and used only while it is a real folder
owned by this user that nobody else can write. Entries are opened without following
links, must be regular files owned by this user and writable by no one else, are
parsed as JSON (never unpickled), and their code passes the generated-code vocabulary
check (compiler/backend/generated.py) before it is compiled. Writes go to a temporary file in the
same folder, then an atomic rename. Any doubt means a rebuild, never an error.
`INFEST_NO_CACHE=1` turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import infest.dsl.errors as _dsl_errors
from infest.compiler.backend.runner import Runner

MAX_ENTRY_BYTES = 64 * 2**20   # a DeepSeek-V3 entry is well under 1 MiB
# The installed compiler and language packages (this file's folder and its sibling).
_CODE_FOLDERS = (Path(__file__).parent, Path(_dsl_errors.__file__).parent)


def cache_dir() -> Path | None:
    """The private cache folder (created if needed), or None when off or unsafe."""
    if os.environ.get("INFEST_NO_CACHE"):
        return None
    root = os.environ.get("INFEST_CACHE_DIR")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "infest"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path if _private(os.lstat(path), stat.S_ISDIR) else None
    except OSError:
        return None


def _private(st: os.stat_result, is_kind: Any) -> bool:
    """Ours, of the right kind (not a link), and writable by nobody else."""
    return (is_kind(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def entry_key(spec: str, hw: str | None, **options: str | None) -> str:
    """The key of a Runner: infest's compiler source, the arguments, the spec's content."""
    parts = {"code": code_digest(), "spec": _where(spec), "hw": _where(hw) if hw else None,
             "spec_sha256": _file_digest(Path(spec)) if Path(spec).is_file() else None,
             **options}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _where(name: str) -> str:
    """A path argument resolved (its meaning must not depend on the folder it ran in);
    a shipped name as given."""
    path = Path(name)
    return str(path.resolve()) if path.exists() else name


def code_digest() -> str:
    """A digest of infest's compiler and language source files (name, size, mtime in ns,
    as Python's own bytecode cache checks its sources): a new version or an edited
    checkout never reads entries an older one wrote."""
    digest = hashlib.sha256()
    for folder in _CODE_FOLDERS:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.name.endswith((".py", ".lark", ".json")) and entry.is_file():
                st = entry.stat()
                digest.update(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def load(key: str) -> Runner | None:
    """The cached Runner for a key, if present, safe and still current; else None."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        data = json.loads(_read_private(folder / f"{key}.json"))
        if not all(_file_digest(Path(p)) == h for p, h in data["files"].items()):
            return None
        runner = Runner.from_json(data["runner"])
        runner.prepare()  # the vocabulary check and compile, now rather than mid-run
        return runner
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SyntaxError):
        return None


def _read_private(path: Path) -> str:
    """The text of a file that is ours, regular, not a link and not too large."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not _private(st, stat.S_ISREG) or st.st_size > MAX_ENTRY_BYTES:
            raise ValueError("cache entry is not private")
        return f.read(MAX_ENTRY_BYTES + 1).decode()


def store(key: str, runner: Runner, files: list[Path] | tuple[Path, ...]) -> None:
    """Write an entry (atomically; silently skipped when the cache is off or unwritable)."""
    folder = cache_dir()
    if folder is None:
        return
    digests = {str(p): _file_digest(Path(p)) for p in files}
    text = json.dumps({"files": digests, "runner": runner.to_json()}, separators=(",", ":"))
    import tempfile
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")  # mode 0600
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def cached_runner(spec: str, hw: str | None, phase: str = "decode", model: str | None = None,
                  policy: str | None = None, engine: str | None = None) -> Runner:
    """The Runner for these arguments: from the cache when current, else built (with
    sympy) and stored."""
    key = entry_key(str(spec), None if hw is None else str(hw), phase=phase, model=model,
                    policy=policy, engine=engine)
    runner = load(key)
    if runner is None:
        from infest.compiler.api import analyze
        analysis = analyze(spec, hw=hw, phase=phase, model=model, policy=policy, engine=engine)
        runner = analysis.runner
        store(key, runner, analysis.files)
    return runner
