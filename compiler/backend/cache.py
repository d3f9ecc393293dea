"""A private per-user cache of Runners, so `eval` and `sweep` of an unchanged spec start
instantly (no sympy, no parser: the generated code and the names are read back).

An entry is one JSON file, `<key>.json`, holding the Runner (compiler/backend/runner.py) with its
generated numpy source and a record of what it was built from, taken while it was built:
every file the parser read (its path as opened, links kept; where its links led; the
SHA-256 of the bytes as read, not of the file later) and every name that was looked up
(the spec and --hw arguments, each import: the file found, or none). The key covers the
cache format, infest's own compiler source and shipped engine profiles (each file's size
and modification time: the compiler reads the profiles outside the parser, so no record
holds them) and the arguments (paths made absolute, links kept); it reads no file. On
every read each recorded file is hashed again and each lookup replayed: an edited file, a
re-pointed link, a new local file that now shadows a shipped one, or an edit made while
the entry was being built all mean a rebuild.

Safety: the folder is `$INFEST_CACHE_DIR`, else `$XDG_CACHE_HOME/infest` (an absolute
path; a relative one is ignored, as the XDG spec says), else `~/.cache/infest` (no home:
no cache); it is created with mode 0700 and used only while it is a real folder owned by
this user that nobody else can write. Entries are opened without following links, must
be regular files owned by this user and writable by no one else, are parsed as JSON
(never unpickled), and their code passes the generated-code vocabulary check
(compiler/backend/generated.py) before it is compiled. Writes go to a temporary file in
the same folder, then an atomic rename. Anything unexpected about an entry means a
rebuild, never an error and never an old answer. `INFEST_NO_CACHE=1` turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import infest.dsl.errors as _dsl_errors
from infest.compiler.backend.runner import Runner

if TYPE_CHECKING:
    from infest.compiler.load.files import Read
    from infest.compiler.load.loader import Lookup

MAX_ENTRY_BYTES = 64 * 2**20   # a DeepSeek-V3 entry is well under 1 MiB
MAX_ENTRY_DEPTH = 64           # JSON nesting of an entry (the writer's is under 10)
CACHE_FORMAT = 2               # bumped when the key or the record of inputs changes
# The installed compiler and language packages, every subfolder included, and the shipped
# engine profiles: data the compiler reads outside the parser, so no entry's record of
# files holds them (an edited profile, e.g. by bench/accuracy.py --profiles, must rebuild).
_CODE_FOLDERS = (Path(__file__).parents[1], Path(_dsl_errors.__file__).parent,
                 Path(str(resources.files("infest.specs"))) / "engines")


def cache_dir() -> Path | None:
    """The private cache folder (created if needed), or None when off or unsafe."""
    if os.environ.get("INFEST_NO_CACHE"):
        return None
    path = _configured_dir()
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path if _private(os.lstat(path), stat.S_ISDIR) else None
    except OSError:
        return None


def _configured_dir() -> Path | None:
    """$INFEST_CACHE_DIR, else an absolute $XDG_CACHE_HOME/infest, else ~/.cache/infest;
    None when there is no home to put it in."""
    root = os.environ.get("INFEST_CACHE_DIR")
    if root:
        return Path(os.path.abspath(root))
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "infest"
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError):  # no HOME and no passwd entry
        return None
    return home / ".cache" / "infest" if home.is_absolute() else None


def _private(st: os.stat_result, is_kind: Any) -> bool:
    """Ours, of the right kind (not a link), and writable by nobody else."""
    return (is_kind(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def entry_key(spec: str, hw: str | None, **options: str | None) -> str:
    """The key of a Runner: the format, infest's compiler source and the arguments (no
    file is read: the entry's record of inputs is checked on load instead)."""
    parts = {"format": CACHE_FORMAT, "code": code_digest(), "spec": _where(spec),
             "hw": _where(hw) if hw else None, **options}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _where(name: str) -> str:
    """A path argument made absolute, links kept (its meaning must not depend on the
    folder it ran in; links are followed by the record); a shipped name as given."""
    return os.path.abspath(name) if os.path.lexists(name) else name


def code_digest() -> str:
    """A digest of infest's compiler and language source files and its engine profiles
    (name, size, mtime in ns, as Python's own bytecode cache checks its sources): a new
    version or an edited checkout never reads entries an older one wrote."""
    digest = hashlib.sha256()
    for folder in _CODE_FOLDERS:
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".lark", ".json") and path.is_file():
                st = path.stat()
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def load(key: str) -> Runner | None:
    """The cached Runner for a key, if present, safe and still current; else None."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        data = _parse_entry(_read_private(folder / f"{key}.json"))
        if data.get("format") != CACHE_FORMAT or not current(data["reads"], data["lookups"]):
            return None
        runner = Runner.from_json(data["runner"])
        runner.prepare()  # the vocabulary check and compile, now rather than mid-run
        return runner
    except Exception:  # noqa: BLE001 -- a corrupt entry of any kind: rebuild, never fail
        return None


def _parse_entry(text: str) -> dict[str, Any]:
    """An entry's JSON (nesting refused past MAX_ENTRY_DEPTH before json recurses)."""
    depth = most = 0
    for char in text:
        if char in "[{":
            depth += 1
            most = max(most, depth)
        elif char in "]}":
            depth -= 1
    if most > MAX_ENTRY_DEPTH:  # brackets inside strings count too: only ever stricter
        raise ValueError("cache entry nested too deeply")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("cache entry is not an object")
    return data


def current(reads: list[dict[str, Any]], lookups: list[dict[str, Any]]) -> bool:
    """Every recorded file still has the bytes the parser read (through the same path,
    its links leading to the same place) and every lookup still finds the same file."""
    from infest.compiler.load.files import digest
    from infest.compiler.load.loader import Lookup
    for r in reads:
        if os.path.realpath(r["path"]) != r["real"] or digest(r["path"]) != r["sha256"]:
            return False
    return all(Lookup(**item).still_holds() for item in lookups)


def _read_private(path: Path) -> str:
    """The text of a file that is ours, regular, not a link and not too large."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not _private(st, stat.S_ISREG) or st.st_size > MAX_ENTRY_BYTES:
            raise ValueError("cache entry is not private")
        return f.read(MAX_ENTRY_BYTES + 1).decode()


def store(key: str, runner: Runner, reads: Sequence[Read], lookups: Sequence[Lookup]) -> None:
    """Write an entry (atomically; silently skipped when the cache is off or unwritable)
    with the record of what the build read, as it read it."""
    folder = cache_dir()
    if folder is None:
        return
    text = json.dumps({"format": CACHE_FORMAT, "reads": [asdict(r) for r in reads],
                       "lookups": [asdict(x) for x in lookups], "runner": runner.to_json()},
                      separators=(",", ":"))
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
                  policy: str | None = None, engine: str | None = None,
                  draft: str | None = None) -> Runner:
    """The Runner for these arguments (`draft="mtp"`: the spec's MTP draft): from the
    cache when current, else built (with sympy) and stored."""
    key = entry_key(str(spec), None if hw is None else str(hw), phase=phase, model=model,
                    policy=policy, engine=engine, draft=draft)
    runner = load(key)
    if runner is None:
        from infest.compiler.api import analyze
        analysis = analyze(spec, hw=hw, phase=phase, model=model, policy=policy, engine=engine,
                           draft=draft)
        runner = analysis.runner
        store(key, runner, analysis.reads, analysis.lookups)
    return runner
