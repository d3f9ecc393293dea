"""The private cache of Runners (compiler/backend/cache.py): identical results, rebuilt when any
input file changes, never read from a folder or file someone else could have written."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infest.compiler.backend import cache
from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
DEEPSEEK = str(ROOT / "specs" / "models" / "deepseek_v3.arch")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("INFEST_CACHE_DIR", str(folder))
    return folder


def run(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any rebuild from the spec (the uncached path) fails the test."""
    def no(*_a, **_k):
        raise AssertionError("rebuilt instead of reading the cache")
    monkeypatch.setattr("infest.compiler.api.analyze", no)


@pytest.mark.parametrize("args", [
    ("eval", LLAMA, "--hw", "h100_sxm", "--json"),
    ("eval", DEEPSEEK, "--hw", "h200_sxm", "--set", "ep=8", "--set", "dp=8", "--set", "B=64",
     "--policy", "experts_only"),
    ("eval", LLAMA, "--hw", "h100_sxm", "--phase", "prefill", "--engine", "graphs", "--csv"),
    ("sweep", LLAMA, "--hw", "gh200", "--B", "1..9", "--N", "1k..64k:x2", "--csv"),
    ("sweep", LLAMA, "--hw", "h100_sxm", "--B", "1,8", "--N", "4k", "--over", "tp=1,2",
     "--json", "--metric", "time_s"),
])
def test_cached_run_prints_exactly_what_the_uncached_one_did(capsys, cache_dir, monkeypatch, args):
    first = run(capsys, *args)
    assert len(list(cache_dir.glob("*.json"))) == 1
    forbid_building(monkeypatch)
    assert run(capsys, *args) == first


def test_an_edited_import_or_hardware_file_rebuilds(capsys, cache_dir, tmp_path):
    spec = tmp_path / "m.arch"
    dims = tmp_path / "dims.arch"
    hw = tmp_path / "hw.arch"
    dims.write_text("model dims {\n  x = embed(tokens, 10 -> 4)\n}\n")
    spec.write_text('import "dims.arch"\nmodel m {\n  width = 64\n  x = embed(tokens, 10 -> 4)\n'
                    "  y = linear(x, 4 -> width)\n}\n")
    hw.write_text((ROOT / "specs" / "hardware" / "h100_sxm.arch").read_text())
    args = ("eval", str(spec), "--hw", str(hw), "--model", "m", "--json")
    before = json.loads(run(capsys, *args))
    # the linear reads 4 x 64 bf16 weights = 512 bytes
    assert [op["weight_bytes"] for op in before["ops"]] == [8, 512]
    spec.write_text(spec.read_text().replace("width = 64", "width = 128"))
    assert json.loads(run(capsys, *args))["ops"][1]["weight_bytes"] == 1024  # 4 x 128 x 2
    dims.write_text("model dims {\n  x = embed(tokens, 10 -> 8)\n}\n")  # an import: rebuild
    run(capsys, *args)
    assert recorded(cache_dir, dims) == hashlib.sha256(dims.read_bytes()).hexdigest()
    hw.write_text(hw.read_text().replace("3.35 TB/s", "4 TB/s"))
    after = json.loads(run(capsys, *args))
    assert after["inputs"]["mem_bw"] == 4e12 and before["inputs"]["mem_bw"] == 3.35e12
    # the spec's content is part of the key (two entries); imports and hardware are
    # checked on every read and rebuild their entry in place
    assert len(list(cache_dir.glob("*.json"))) == 2


def recorded(cache_dir: Path, path: Path) -> str:
    """The digest the newest entry recorded for a file."""
    newest = max(cache_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    return json.loads(newest.read_text())["files"][str(path.resolve())]


def test_a_folder_others_can_write_is_never_used(capsys, cache_dir, monkeypatch):
    run(capsys, "eval", LLAMA, "--hw", "h100_sxm")
    os.chmod(cache_dir, 0o777)
    assert cache.cache_dir() is None
    forbid_building(monkeypatch)
    with pytest.raises(AssertionError, match="rebuilt"):
        main(["eval", LLAMA, "--hw", "h100_sxm"])


def test_a_tampered_entry_is_rebuilt_not_run(capsys, cache_dir):
    first = run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json")
    (entry,) = cache_dir.glob("*.json")
    data = json.loads(entry.read_text())
    data["runner"]["source"] = "def forms(a0):\n    return (__import__(a0),)\n"
    entry.write_text(json.dumps(data))
    assert run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json") == first
    assert "__import__" not in entry.read_text()  # replaced by a fresh build
    entry.chmod(0o666)  # writable by others: ignored, rebuilt
    assert run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json") == first
    assert entry.stat().st_mode & 0o777 == 0o600


def test_no_cache_switch(capsys, cache_dir, monkeypatch):
    monkeypatch.setenv("INFEST_NO_CACHE", "1")
    run(capsys, "eval", LLAMA, "--hw", "h100_sxm")
    assert not cache_dir.exists() or not list(cache_dir.glob("*.json"))


def test_a_cached_eval_or_sweep_process_does_not_import_sympy(cache_dir):
    code = ("import sys; from infest.exports.cli.main import main; "
            f"main(['eval', {LLAMA!r}, '--hw', 'h100_sxm']); "
            f"main(['sweep', {LLAMA!r}, '--hw', 'h100_sxm', '--B', '1..99', '--N', '4k']); "
            "print('SYMPY' if 'sympy' in sys.modules else 'NO-SYMPY', file=sys.stderr)")
    env = {**os.environ, "INFEST_CACHE_DIR": str(cache_dir)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True) for _ in range(2)]
    assert runs[0].stderr.strip() == "SYMPY"        # built: sympy used
    assert runs[1].stderr.strip() == "NO-SYMPY"     # cached: never imported
    assert runs[0].stdout == runs[1].stdout
